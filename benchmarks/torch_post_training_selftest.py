#!/usr/bin/env python3
"""CPU self-test of the PyTorch side of issue 23's post-training speed benchmark (benchmarks/torch_post_training.py
and the DPO batches of benchmarks/torch_gpu_llama_step.py), without transformers or a GPU, in fp64 where it compares.

- LoRA: apply_lora on a tiny Llama-named model wraps exactly the q_proj / v_proj linears, freezes everything else
  (no gradient reaches a frozen weight), starts from the base model's output (B zero), and once B is set computes
  W x + (alpha / rank) B A x.
- DPO: the benchmark's preference documents have the layout and lengths the shape promises (two rows of
  sequence_length tokens per document, the spans of docs/post-training.md), the batches hold the documents in file
  order; the loss of the span sums equals TRL's formula computed independently, pair by pair, from log_softmax over
  each answer's tokens in the document's own coordinates; its gradient passes gradcheck.

  /usr/bin/python3 benchmarks/torch_post_training_selftest.py     (Debian's torch 1.13 is enough; a few seconds)
Exit status 0 when every check passes.
"""
import math
import os
import sys
import types

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_post_training as post  # noqa: E402
from dpo_benchmark_data import preference_pairs  # noqa: E402
from llama_shapes import SHAPES  # noqa: E402
from post_training_torch_check import BOS, EOS  # noqa: E402  (tools/, put on the path by dpo_benchmark_data)
from torch_gpu_llama_step import dpo_step_loss, preference_batches, span_sums_of  # noqa: E402

torch.set_num_threads(2)
failures = []


def check(label, passed, detail=""):
    print(f"{'ok  ' if passed else 'FAIL'} {label}" + (f": {detail}" if detail else ""))
    if not passed:
        failures.append(label)


class Attention(torch.nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.q_proj = torch.nn.Linear(hidden, hidden, bias=False)
        self.k_proj = torch.nn.Linear(hidden, hidden // 2, bias=False)
        self.v_proj = torch.nn.Linear(hidden, hidden // 2, bias=False)
        self.o_proj = torch.nn.Linear(hidden // 2, hidden, bias=False)

    def forward(self, x):  # not attention: a mix of the four projections, enough to route gradients through each
        return self.o_proj(self.v_proj(x) * torch.tanh(self.k_proj(x))) + torch.tanh(self.q_proj(x))


class TinyLlama(torch.nn.Module):
    """Llama's module names (model.embed_tokens, model.layers[i].self_attn.q_proj, ...), logits from tied
    embeddings; forward(input_ids) returns an object with `.logits`, as transformers' models do."""

    def __init__(self, vocab, hidden, layers):
        super().__init__()
        self.model = torch.nn.Module()
        self.model.embed_tokens = torch.nn.Embedding(vocab, hidden)
        self.model.layers = torch.nn.ModuleList()
        for _ in range(layers):
            layer = torch.nn.Module()
            layer.self_attn = Attention(hidden)
            self.model.layers.append(layer)

    def forward(self, input_ids, logits_to_keep=0):
        x = self.model.embed_tokens(input_ids)
        for layer in self.model.layers:
            x = x + layer.self_attn(x)
        x = x[:, -logits_to_keep:]  # transformers' rule: 0 keeps every position
        return types.SimpleNamespace(logits=x @ self.model.embed_tokens.weight.t())


def test_lora():
    torch.manual_seed(0)
    model = TinyLlama(vocab=50, hidden=16, layers=3).double()
    tokens = torch.randint(0, 50, (2, 7))
    before = model(tokens).logits.detach()
    frozen = dict(model.named_parameters())
    rank, alpha = 4, 8.0
    adapters = post.apply_lora(model, rank, alpha)
    wrapped = [module for module in model.modules() if isinstance(module, post.LoraLinear)]
    names = sorted(name for name, module in model.named_modules() if isinstance(module, post.LoraLinear))
    expected = sorted(f"model.layers.{i}.self_attn.{p}" for i in range(3) for p in ("q_proj", "v_proj"))
    check("lora wraps q_proj and v_proj of every layer, nothing else", names == expected, str(names))
    trainable = [parameter for parameter in model.parameters() if parameter.requires_grad]
    check("lora: only the adapters are trainable", len(trainable) == 12 and
          {id(p) for p in trainable} == {id(p) for p in adapters} and
          not any(p.requires_grad for p in frozen.values()))
    shapes_ok = all(m.lora_a.shape == (rank, m.base.in_features) and m.lora_b.shape == (m.base.out_features, rank)
                    for m in wrapped)
    check("lora: A [rank, in], B [out, rank], B zero, A random",
          shapes_ok and all(float(m.lora_b.abs().max()) == 0.0 and float(m.lora_a.abs().max()) > 0.0
                            for m in wrapped))
    after = model(tokens).logits
    check("lora: with B zero the model computes the base model", torch.equal(before, after.detach()))
    after.square().sum().backward()
    check("lora: no gradient reaches a frozen weight", all(p.grad is None for p in frozen.values()))
    check("lora: B gets a gradient, A none while B is zero",
          all(m.lora_b.grad is not None and float(m.lora_b.grad.abs().max()) > 0 for m in wrapped) and
          all(m.lora_a.grad is None or float(m.lora_a.grad.abs().max()) == 0.0 for m in wrapped))
    module = wrapped[0]
    with torch.no_grad():
        module.lora_b.normal_()
    x = torch.randn(5, module.base.in_features, dtype=torch.float64)
    explicit = x @ module.base.weight.t() + (alpha / rank) * (x @ module.lora_a.t()) @ module.lora_b.t()
    error = float((module(x) - explicit).abs().max())
    check("lora: y = W x + alpha / rank B A x", error < 1e-12, f"max error {error:.1e}")


def answer_margins(logits_of, documents, chosen, rejected):
    """Per pair, log pi(chosen) - log pi(rejected), written from the document's own coordinates: each answer scored
    after its own sequence (prompt + chosen + EOS; BOS + prompt + rejected + EOS) by log_softmax and indexing."""
    def score(sequence, begin, end):
        log_probabilities = torch.log_softmax(logits_of(torch.tensor([sequence]))[0].double(), -1)
        return sum(float(log_probabilities[t - 1, sequence[t]]) for t in range(begin, end))

    margins = []
    for document, (chosen_begin, chosen_end), (rejected_begin, rejected_end) in zip(documents, chosen, rejected):
        margins.append(score(document[:chosen_end], chosen_begin, chosen_end) -
                       score(document[chosen_end:], rejected_begin - chosen_end, rejected_end - chosen_end))
    return margins


def test_dpo():
    shape = SHAPES["llama-3.2-1b-dpo"]
    check("dpo shape: batch / 2 documents of 2 x sequence_length tokens fill the micro-batch",
          shape["batch"] * shape["sequence_length"] == 16384 and shape["batch"] % 2 == 0)
    documents, chosen, rejected = preference_pairs(128256, 3, 2048)
    # BOS + prompt + chosen + EOS | BOS + prompt + rejected + EOS: both sequences start with the same c[0] tokens.
    layout = all(len(d) == 4096 and c[1] == 2048 and d[0] == BOS and d[2047] == EOS and d[2048] == BOS and
                 d[-1] == EOS and r == (2048 + c[0], 4096) and d[:c[0]] == d[2048:2048 + c[0]]
                 for d, c, r in zip(documents, chosen, rejected))
    rows, spans = post.preference_rows(documents, chosen, rejected)
    check("dpo data: pairs laid out as `prepare` writes them with add_bos (BOS + prompt twice), spans end at EOS",
          layout and len(rows) == 6 and all(len(row) == 2048 for row in rows), f"spans {spans[:1]}, {spans[3:4]}")
    again, _, _ = preference_pairs(128256, 3, 2048)
    longer, _, _ = preference_pairs(128256, 5, 2048)
    check("dpo data: the same documents on both sides (deterministic; the file's first steps are PyTorch's batches)",
          again == documents and longer[:3] == documents)

    small = dict(shape, vocab_size=40, sequence_length=12, batch=4)
    batches = preference_batches(torch, small, 2, device="cpu")
    documents, chosen, rejected = preference_pairs(40, 4, 12)
    first = batches[1][0].tolist()
    check("dpo batches: step s holds documents [s p, (s + 1) p), chosen rows first",
          first[0] == documents[2][:12] and first[1] == documents[3][:12] and first[2] == documents[2][12:] and
          first[3] == documents[3][12:])

    torch.manual_seed(1)
    policy, reference = TinyLlama(40, 8, 2).double(), TinyLlama(40, 8, 2).double()
    beta = 0.1
    tokens, mask = batches[1]
    loss = dpo_step_loss(torch, post, span_sums_of(post, policy), span_sums_of(post, reference), beta)(batches[1])
    window = slice(2, 4)
    pairs = (documents[window], chosen[window], rejected[window])
    margins = [p - r for p, r in zip(answer_margins(lambda t: policy(t).logits, *pairs),
                                     answer_margins(lambda t: reference(t).logits, *pairs))]
    expected = sum(math.log(1.0 + math.exp(-beta * margin)) for margin in margins) / len(margins)
    error = abs(float(loss) - expected) / expected
    check("dpo loss = TRL's formula, pair by pair from the documents", error < 1e-12,
          f"{float(loss):.12f} / {expected:.12f}")
    keep = post.logits_to_keep(mask)
    kept = dpo_step_loss(torch, post, span_sums_of(post, policy, keep), span_sums_of(post, reference, keep), beta)
    check("dpo with logits_to_keep: fewer positions, the same loss", keep < mask.shape[1] and
          abs(float(kept(batches[1])) - float(loss)) < 1e-12 * float(loss), f"keep {keep} of {mask.shape[1]}")
    too_few = dpo_step_loss(torch, post, span_sums_of(post, policy, keep - 1), span_sums_of(post, reference, keep - 1),
                            beta)
    check("dpo: logits_to_keep is the fewest positions that give the loss",
          abs(float(too_few(batches[1])) - float(loss)) > 1e-6 * float(loss))
    loss.backward()
    check("dpo: the gradient reaches the policy, not the reference",
          all(p.grad is not None for p in policy.parameters()) and all(p.grad is None for p in reference.parameters()))

    logits = torch.randn(4, 12, 40, dtype=torch.float64, requires_grad=True)
    reference_sums = torch.randn(4, dtype=torch.float64)
    passed = torch.autograd.gradcheck(
        lambda z: post.dpo_sigmoid_loss(post.span_log_probability_sums(z, tokens, mask), reference_sums, beta),
        (logits,))
    check("dpo: gradcheck of the loss through the span sums (fp64)", passed)
    try:
        post.span_mask([(0, 3)], 12)
        check("dpo: a span at position 0 is refused", False)
    except ValueError:
        check("dpo: a span at position 0 is refused", True)


test_lora()
test_dpo()
print(f"{len(failures)} failed" if failures else "every check passed")
sys.exit(1 if failures else 0)
