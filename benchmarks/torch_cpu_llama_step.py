"""PyTorch reference for the CPU training-step benchmark (benchmarks/cpu_training_step.sh).

A Llama-shaped decoder written directly in PyTorch (RMSNorm, rotary, grouped-query causal attention through
scaled_dot_product_attention, SwiGLU MLP, untied output), trained with AdamW (foreach) on random tokens with the same
shapes as the fast-llm run. Prints the median step time and tokens/s as JSON. Debian's python3-torch (CPU, /usr/bin/python3) runs it.
"""
import argparse
import json
import math
import time

import torch
import torch.nn.functional as F


class RMSNorm(torch.nn.Module):
    def __init__(self, hidden, epsilon):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden))
        self.epsilon = epsilon

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.epsilon) * self.weight


def rotate_half(x):
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def causal_attention(q, k, v):
    # Debian's torch 1.13 predates scaled_dot_product_attention; this is what it computes.
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    tokens = q.shape[-2]
    scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    mask = torch.ones(tokens, tokens, dtype=torch.bool).triu(1)
    return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v


class Block(torch.nn.Module):
    def __init__(self, args):
        super().__init__()
        h, hs = args.hidden_size, args.head_size
        self.heads, self.groups, self.head_size = args.heads, args.head_groups, hs
        self.norm_1 = RMSNorm(h, 1e-5)
        self.norm_2 = RMSNorm(h, 1e-5)
        self.q = torch.nn.Linear(h, args.heads * hs, bias=False)
        self.k = torch.nn.Linear(h, args.head_groups * hs, bias=False)
        self.v = torch.nn.Linear(h, args.head_groups * hs, bias=False)
        self.o = torch.nn.Linear(args.heads * hs, h, bias=False)
        self.gate = torch.nn.Linear(h, args.intermediate_size, bias=False)
        self.up = torch.nn.Linear(h, args.intermediate_size, bias=False)
        self.down = torch.nn.Linear(args.intermediate_size, h, bias=False)

    def forward(self, x, cos, sin):
        batch, tokens, _ = x.shape
        y = self.norm_1(x)
        q = self.q(y).view(batch, tokens, self.heads, self.head_size).transpose(1, 2)
        k = self.k(y).view(batch, tokens, self.groups, self.head_size).transpose(1, 2)
        v = self.v(y).view(batch, tokens, self.groups, self.head_size).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        repeat = self.heads // self.groups
        k = k.repeat_interleave(repeat, dim=1)
        v = v.repeat_interleave(repeat, dim=1)
        attention = causal_attention(q, k, v)
        x = x + self.o(attention.transpose(1, 2).reshape(batch, tokens, -1))
        y = self.norm_2(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class Model(torch.nn.Module):
    def __init__(self, args):
        super().__init__()
        self.embedding = torch.nn.Embedding(args.vocab_size, args.hidden_size)
        self.blocks = torch.nn.ModuleList(Block(args) for _ in range(args.num_blocks))
        self.norm = RMSNorm(args.hidden_size, 1e-5)
        self.output = torch.nn.Linear(args.hidden_size, args.vocab_size, bias=False)
        frequencies = 1.0 / (10000.0 ** (torch.arange(0, args.head_size, 2, dtype=torch.float64) / args.head_size))
        angles = torch.outer(torch.arange(args.sequence_length, dtype=torch.float64), frequencies)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, tokens, labels):
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x, self.cos, self.sin)
        logits = self.output(self.norm(x))
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten())


def main():
    parser = argparse.ArgumentParser()
    for name, default in [("vocab_size", 32000), ("hidden_size", 256), ("num_blocks", 2), ("heads", 8),
                          ("head_groups", 2), ("head_size", 32), ("intermediate_size", 512),
                          ("sequence_length", 2048), ("batch", 1), ("steps", 10), ("threads", 0)]:
        parser.add_argument(f"--{name}", type=int, default=default)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = Model(args)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, foreach=True)
    tokens = torch.randint(0, args.vocab_size, (args.batch, args.sequence_length + 1))
    times = []
    for step in range(args.steps + 2):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step >= 2:  # the first steps allocate and warm caches
            times.append(time.perf_counter() - start)
    times.sort()
    median = times[len(times) // 2]
    tokens_per_step = args.batch * args.sequence_length
    print(json.dumps({"framework": f"pytorch {torch.__version__}", "threads": torch.get_num_threads(),
                      "median_step_ms": median * 1e3, "tokens_per_second": tokens_per_step / median,
                      "final_loss": float(loss), "expected_initial_loss": math.log(args.vocab_size)}))


if __name__ == "__main__":
    main()
