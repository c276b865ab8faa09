#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention (bf16, causal) on the shapes of attention_benchmark, with two of its
backends: flash (flash-attention 2) and cuDNN's fused attention (the comparison DESIGN asks for: our kernels or
cuDNN's, whichever is faster).

    python3 benchmarks/torch_attention.py [iterations]

Prints the same columns as build/<preset>/bin/attention_benchmark, with the same FLOP counts (allowed (query, key)
pairs only: forward 4 heads head_size pairs, backward 2.5 times that), so both can run in one device invocation:

    build/cuda/bin/attention_benchmark && python3 benchmarks/torch_attention.py

Layout: (batch, heads, tokens, head_size). Grouped-query attention: K and V repeated to every head (outside the timed
region) unless `enable_gqa` is accepted by the backend; the backward then times the gradient of the repeated
K / V (without the sum back into groups). Packed documents of mixed lengths run one SDPA call per document (torch has no
varlen SDPA); windowed attention has no flash SDPA form and is skipped. Timing: CUDA events, 3 warm-up runs, the median
of `iterations` (20); the backward is timed alone (torch.autograd.grad on a kept graph).
"""
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

CASES = [
    ("(a) 8x2048 h9/3 d64", [2048] * 8, 9, 3, 64),
    ("(b) 4x4096 h32/8 d64", [4096] * 4, 32, 8, 64),
    ("(c) 2x4096 h24/8 d128", [4096] * 2, 24, 8, 128),
    ("(d) mixed 8192 h32/8 d128", [4096, 2048, 1024, 512, 300, 150, 50, 10, 2], 32, 8, 128),
]


def median_ms(run, iterations, warmup=3):
    for _ in range(warmup):
        run()
    times = []
    for _ in range(iterations):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def make_inputs(lengths, heads, groups, head_size, use_gqa):
    """Per group of equal-length documents: (q, k, v, grad_output) as (documents, heads, length, head_size)."""
    batches = []
    by_length = {}
    for length in lengths:
        by_length[length] = by_length.get(length, 0) + 1
    for length, count in by_length.items():
        q = torch.empty(count, heads, length, head_size, device="cuda", dtype=torch.bfloat16).uniform_(-2, 2)
        key_heads = groups if use_gqa else heads
        k = torch.empty(count, groups, length, head_size, device="cuda", dtype=torch.bfloat16).uniform_(-2, 2)
        v = torch.empty(count, groups, length, head_size, device="cuda", dtype=torch.bfloat16).uniform_(-2, 2)
        if key_heads != groups:
            k = k.repeat_interleave(heads // groups, dim=1)
            v = v.repeat_interleave(heads // groups, dim=1)
        grad = torch.empty_like(q).uniform_(-1, 1)
        batches.append([t.requires_grad_() for t in (q, k, v)] + [grad])
    return batches


def attention(q, k, v, use_gqa):
    if use_gqa:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


BACKENDS = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]


def backend_works(backend, head_size, use_gqa):
    """Whether `backend` runs a small causal problem (with enable_gqa when `use_gqa`) on this machine."""
    try:
        q = torch.randn(1, 4, 64, head_size, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, 2 if use_gqa else 4, 64, head_size, device="cuda", dtype=torch.bfloat16)
        with sdpa_kernel(backend):
            if use_gqa:
                F.scaled_dot_product_attention(q, k, k, is_causal=True, enable_gqa=True)
            else:
                F.scaled_dot_product_attention(q, k, k, is_causal=True)
        return True
    except (RuntimeError, TypeError):
        return False


def main():
    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}; cuDNN {torch.backends.cudnn.version()}; "
          f"SDPA, bf16, causal")
    print(f"{'case':<30} {'backend':<8} {'fwd ms':>10} {'fwd TF/s':>10} {'bwd ms':>10} {'bwd TF/s':>10}  K/V")
    for (name, lengths, heads, groups, head_size), (backend_name, backend) in (
            (case, backend) for case in CASES for backend in BACKENDS):
        use_gqa = backend_works(backend, head_size, use_gqa=True)
        if not use_gqa and not backend_works(backend, head_size, use_gqa=False):
            print(f"{name:<30} {backend_name:<8} not available", flush=True)
            continue
        batches = make_inputs(lengths, heads, groups, head_size, use_gqa)
        pairs = sum(length * (length + 1) / 2 for length in lengths)
        flops = 4.0 * heads * head_size * pairs
        with sdpa_kernel(backend):

            def forward():
                with torch.no_grad():
                    for q, k, v, _ in batches:
                        attention(q, k, v, use_gqa)

            outputs = [(attention(q, k, v, use_gqa), (q, k, v), grad) for q, k, v, grad in batches]

            def backward():
                for output, inputs, grad in outputs:
                    torch.autograd.grad(output, inputs, grad, retain_graph=True)

            forward_ms = median_ms(forward, iterations)
            backward_ms = median_ms(backward, iterations)
        print(f"{name:<30} {backend_name:<8} {forward_ms:10.3f} {flops / forward_ms / 1e9:10.1f} {backward_ms:10.3f} "
              f"{2.5 * flops / backward_ms / 1e9:10.1f}  {'enable_gqa' if use_gqa else 'repeated'}", flush=True)


if __name__ == "__main__":
    main()
