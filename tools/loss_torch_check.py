#!/usr/bin/env python3
"""Each post-training loss op and its logits gradient against the formula written independently in PyTorch (issue 23,
Checks: "relative error < 1e-6 in fp64, within bf16 rounding on the GPU").

For every case (op and parameters, random inputs from a fixed seed) the inputs go to a safetensors file, the C++ tool
`loss_op_io` (benchmarks/loss_op_io.cpp) runs the op through the kernel registry, once per variant the registry has on
the device (`loss_op_io --list-variants`: the CPU reference; on CUDA whatever variants are built, e.g. `rows` and the
cross-entropy's `fused`), and its loss sums, metric sums and logits gradient are compared with PyTorch's:
  cross_entropy  z = x s (then c tanh(z / c) with a softcap c); sum over unmasked labels of lse(z) - z[y] and lse(z)^2;
                 gradient of label_weight * label loss + z_loss_weight * z-loss by autograd
  distillation   p = softmax(teacher s / T), q = softmax(z): -sum p log q, sum p (log p - log q), sum q (log q - log p)
                 (Fast-LLM's three loss types, reference/fast-llm.md section 4), masked by the labels; weight * grad
  distillation_term  the same loss computed by the cross-entropy op's distillation term (the head's path), with the
                 label loss and z-loss beside it: the gradient of label_weight * label loss + z_loss_weight * z-loss
                 + weight * distillation
  dpo            TRL's sigmoid loss: -logsigmoid(beta ((pi_c - pi_r) - (ref_c - ref_r))), pi the summed
                 log_softmax(x s)[y] over a span's unmasked rows, ref the same of the reference logits (unscaled)
  grpo / gspo    -min(r a, clip(r, 1 - eps_low, 1 + eps_high) a) per token (grpo: r = exp(l - old)) or per document
                 (gspo: r = exp(mean of the log-ratios), a = mean advantage, times the document's labels), and the 11
                 metric sums of kernels/policy_gradient.h (per-document means added over documents), each computed
                 here by grouping the labels per document
Inputs are made in fp64 and rounded to the checked dtype; the fp64 PyTorch reference uses the rounded values, so what
is measured is the op's arithmetic. Teacher / reference logits are float32 (fp64 in an fp64 run): the CUDA variants
take float32 ones, as the head gives them.

Measures (norm-wise, so that a sum whose terms cancel is not judged by its cancellation):
  a loss or metric sum: |ours - reference| / sum of |terms| (the terms: per-token, per-pair or per-document values
    whose sum it is; for clipped_ratio_fraction and the counts, the document weights)
  the gradient: max |ours - reference| over the elements / max |reference|
Thresholds: fp64 1e-6 (the issue's); fp32 and bf16: max(3 x PyTorch's own error, floor) per measure, PyTorch's own
error being the same formula computed by PyTorch in that dtype (bf16 or fp32 tensors, autograd) against the fp64
reference, as tools/hf_check.py judges bf16; floors 1e-5 (fp32; for long rows 4 sqrt(vocab) 2^-24, the rounding of
a row's fp32 sums, 6e-5 at a million logits) and 1e-2 (bf16: 8 significant bits, relative round-off 2^-9, so a few
1e-3 is rounding); never above a cap, 1e-3 (fp32) and 5e-2 (bf16): PyTorch's own bf16 error on the grpo / gspo
gradient is 0.15 to 0.4, not rounding but clipping decisions flipped by bf16 log-probabilities, and a threshold near 1
would pass a zero gradient. A variant that declines a case's arguments (its `supports`) is reported as DECLINED and
does not fail the run.

Usage (repository root):
  /usr/bin/python3 tools/loss_torch_check.py --device cpu --dtype fp64            (here: Debian's torch, CPU)
  python3 tools/loss_torch_check.py --device cuda --dtype fp32,bf16             (GPU machine, staged build)
Options: --binary PATH (default build/device/bin, build/cuda/bin, build/cpu/bin), --cases SUBSTRING,
--work DIR (kept). One verdict line per case and variant, then "N passed, M failed"; exit status 0 when every case
passes, 1 when one fails, 2 when the set-up is wrong (no torch, no binary, no CUDA).
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from check_common import find_built_binary, load_safetensors, save_safetensors

try:
    import torch
except ImportError as error:  # pragma: no cover - set-up problem
    print(f"loss_torch_check: needs torch ({error})", file=sys.stderr)
    sys.exit(2)

DTYPES = {"fp64": torch.float64, "fp32": torch.float32, "bf16": torch.bfloat16}
FP64_THRESHOLD = 1e-6
LOW_PRECISION_FACTOR = 3.0
LOW_PRECISION_FLOOR = {"fp32": 1e-5, "bf16": 1e-2}
LOW_PRECISION_CAP = {"fp32": 1e-3, "bf16": 5e-2}
METRIC_NAMES = ["new_logprobs", "old_logprobs", "ratio_new_old", "ratio_new_old_sum", "ratio_new_old_squared_sum",
                "kl_new_old", "clipped_ratio_fraction", "advantage", "num_tokens", "num_segments", "entropy"]
OP_NAMES = {"cross_entropy": "cross_entropy_forward_backward", "distillation": "distillation_forward_backward",
            "distillation_term": "cross_entropy_forward_backward",
            "dpo": "dpo_forward_backward", "grpo": "policy_gradient_forward_backward",
            "gspo": "policy_gradient_forward_backward"}
MASKED = -100


# ------------------------------------------------------------------------------------------------------------------
# Cases.

@dataclass
class Case:
    name: str
    op: str  # cross_entropy, distillation, distillation_term, dpo, grpo, gspo
    params: dict = field(default_factory=dict)  # passed to loss_op_io and used by the formula
    tokens: int = 48
    vocab: int = 521
    masked: float = 0.2  # fraction of labels set to -100
    documents: int = 4  # grpo / gspo
    pairs: tuple = ()  # dpo: (chosen_begin, chosen_end, rejected_begin, rejected_end) row ranges
    both_sides: bool = False  # grpo / gspo: the inputs must clip on both sides (a > 0, r > 1 + eps_high and a < 0,
    #                           r < 1 - eps_low), or the case is a set-up failure
    seed: int = 0
    cuda_only: bool = False  # the large shapes that reach the CUDA kernels' other paths


PAIRS = ((2, 9, 12, 20), (22, 27, 30, 38), (40, 44, 44, 48))
OVERLAPPING_PAIRS = ((0, 10, 10, 24), (4, 10, 24, 36), (36, 48, 24, 30))  # rows shared by several spans

CASES = [
    Case("ce_masked", "cross_entropy"),
    Case("ce_zloss_weights", "cross_entropy", dict(label_weight=0.25, z_loss_weight=1e-3), seed=1),
    Case("ce_softcap_scale", "cross_entropy", dict(label_weight=0.5, z_loss_weight=1e-2, logits_scale_factor=0.7,
                                                   softcap=3.0), seed=2),
    Case("ce_unmasked_scale", "cross_entropy", dict(logits_scale_factor=2.0), masked=0.0, seed=3),
    Case("distill_ce_t1", "distillation", dict(loss_type="cross_entropy"), seed=4),
    Case("distill_fkl_t1", "distillation", dict(loss_type="forward_kl", weight=0.5), seed=5),
    Case("distill_rkl_t1", "distillation", dict(loss_type="reverse_kl", weight=0.5), seed=6),
    Case("distill_ce_t2_scale_softcap", "distillation",
         dict(loss_type="cross_entropy", temperature=2.0, logits_scale_factor=0.8, softcap=4.0), seed=7),
    Case("distill_fkl_t0.7_scale", "distillation",
         dict(loss_type="forward_kl", temperature=0.7, logits_scale_factor=1.3, weight=0.25), seed=8),
    Case("distill_rkl_t2_scale_softcap", "distillation",
         dict(loss_type="reverse_kl", temperature=2.0, logits_scale_factor=0.8, softcap=4.0, weight=2.0), seed=9),
    Case("term_ce_label_zloss", "distillation_term",
         dict(loss_type="cross_entropy", label_weight=0.3, z_loss_weight=1e-3, weight=0.5), seed=22),
    Case("term_fkl_t0.7_scale_softcap", "distillation_term",
         dict(loss_type="forward_kl", temperature=0.7, logits_scale_factor=1.3, softcap=4.0, label_weight=0.5),
         seed=23),
    Case("term_rkl_t2_alone", "distillation_term", dict(loss_type="reverse_kl", temperature=2.0, weight=2.0), seed=24),
    Case("dpo_pairs_masked", "dpo", dict(beta=0.1), pairs=PAIRS, seed=10),
    Case("dpo_overlapping_scale", "dpo", dict(beta=0.5, weight=0.25, logits_scale_factor=0.7),
         pairs=OVERLAPPING_PAIRS, seed=11),
    Case("grpo_clip_both_sides", "grpo", dict(epsilon_low=0.2, epsilon_high=0.28), both_sides=True, seed=12),
    Case("grpo_softcap_scale", "grpo", dict(epsilon_low=0.1, epsilon_high=0.15, grad_weight=0.5,
                                            logits_scale_factor=0.8, softcap=5.0), both_sides=True, seed=13),
    Case("gspo_clip_both_sides", "gspo", dict(epsilon_low=0.2, epsilon_high=0.28), documents=6, both_sides=True,
         seed=14),
    Case("gspo_softcap_scale", "gspo", dict(epsilon_low=0.1, epsilon_high=0.1, grad_weight=2.0,
                                            logits_scale_factor=1.2, softcap=5.0), documents=6, both_sides=True,
         seed=15),
    # The real vocabularies (SmolLM2 49152, rows staged in shared memory) and one row too long for shared memory,
    # of odd length (the fused cross-entropy's direct path, unaligned rows).
    Case("ce_vocab_49152", "cross_entropy", dict(z_loss_weight=1e-3, softcap=30.0), tokens=64, vocab=49152,
         cuda_only=True, seed=16),
    Case("ce_vocab_1000003", "cross_entropy", dict(z_loss_weight=1e-3), tokens=6, vocab=1000003, cuda_only=True,
         seed=17),
    Case("distill_rkl_vocab_49152", "distillation", dict(loss_type="reverse_kl", temperature=2.0), tokens=64,
         vocab=49152, cuda_only=True, seed=18),
    Case("term_rkl_vocab_49152", "distillation_term",
         dict(loss_type="reverse_kl", temperature=2.0, label_weight=0.4, z_loss_weight=1e-3), tokens=64,
         vocab=49152, cuda_only=True, seed=25),
    Case("term_fkl_vocab_50257", "distillation_term", dict(loss_type="forward_kl", label_weight=0.4, softcap=30.0),
         tokens=48, vocab=50257, cuda_only=True, seed=26),
    Case("term_rkl_vocab_500009", "distillation_term", dict(loss_type="reverse_kl", label_weight=0.4), tokens=4,
         vocab=500009, cuda_only=True, seed=27),
    Case("dpo_vocab_49152", "dpo", dict(beta=0.1), tokens=48, vocab=49152, pairs=PAIRS, cuda_only=True, seed=19),
    Case("grpo_vocab_49152", "grpo", dict(epsilon_low=0.2, epsilon_high=0.28), tokens=64, vocab=49152,
         cuda_only=True, seed=20),
    Case("gspo_vocab_49152", "gspo", dict(epsilon_low=0.2, epsilon_high=0.28), tokens=64, vocab=49152,
         documents=6, cuda_only=True, seed=21),
]


def scaled(x, params):
    z = x * params.get("logits_scale_factor", 1.0)
    if params.get("softcap") is not None:
        cap = params["softcap"]
        z = cap * torch.tanh(z / cap)
    return z


def make_inputs(case, dtype):
    """The case's inputs: logits rounded to `dtype`, teacher / reference logits float32 (fp64 in an fp64 run)."""
    generator = torch.Generator().manual_seed(1000 + case.seed)
    side = torch.float64 if dtype == torch.float64 else torch.float32
    logits = (2.0 * torch.randn(case.tokens, case.vocab, generator=generator, dtype=torch.float64)).to(dtype)
    labels = torch.randint(0, case.vocab, (case.tokens,), generator=generator, dtype=torch.int64)
    masked = torch.rand(case.tokens, generator=generator, dtype=torch.float64) < case.masked
    labels[masked] = MASKED
    inputs = {"logits": logits, "labels": labels}
    if case.op in ("distillation", "distillation_term"):
        inputs["target_logits"] = (2.0 * torch.randn(case.tokens, case.vocab, generator=generator,
                                                     dtype=torch.float64)).to(side)
    elif case.op == "dpo":
        # The reference model close to the policy (as at the start of DPO), so the margins are moderate.
        noise = 0.5 * torch.randn(case.tokens, case.vocab, generator=generator, dtype=torch.float64)
        inputs["reference_logits"] = (logits.to(torch.float64) * case.params.get("logits_scale_factor", 1.0)
                                      + noise).to(side)
        inputs["pairs"] = torch.tensor(case.pairs, dtype=torch.int64).reshape(-1, 4)
    elif case.op in ("grpo", "gspo"):
        documents = torch.div(torch.arange(case.tokens) * case.documents, case.tokens, rounding_mode="floor")
        inputs["label_documents"] = documents.to(torch.int32)
        # Old log-probabilities: the new ones (fp64, from the rounded logits) plus per-token noise (grpo) or a
        # per-document offset (gspo), so that ratios fall on both sides of the clipping range.
        z = scaled(logits.to(torch.float64), case.params)
        new = torch.log_softmax(z, dim=-1).gather(1, labels.clamp(min=0)[:, None])[:, 0]
        if case.op == "grpo":
            offset = 0.35 * torch.randn(case.tokens, generator=generator, dtype=torch.float64)
            advantage = torch.randn(case.tokens, generator=generator, dtype=torch.float64)
        else:
            document_offsets = torch.tensor([0.5, -0.5, 0.4, -0.4, 0.02, -0.03], dtype=torch.float64)
            document_signs = torch.tensor([1.0, -1.0, -1.0, 1.0, 1.0, -1.0], dtype=torch.float64)
            repeat = -(-case.documents // 6)
            offset = document_offsets.repeat(repeat)[documents] + \
                0.05 * torch.randn(case.tokens, generator=generator, dtype=torch.float64)
            advantage = document_signs.repeat(repeat)[documents] + \
                0.3 * torch.randn(case.tokens, generator=generator, dtype=torch.float64)
        inputs["old_log_probabilities"] = (new + offset).to(torch.float32)
        inputs["advantages"] = advantage.to(torch.float32)
    return inputs


# ------------------------------------------------------------------------------------------------------------------
# The formulas, in PyTorch. Each returns {"loss": (value, scale), ...sums..., "grad": tensor} with the gradient of
# the weighted loss by autograd. `compute` is the dtype PyTorch computes in (fp64: the reference).

def sum_with_scale(terms):
    return terms.sum(), terms.abs().sum()


def formula(case, inputs, compute, device):
    p = case.params
    x = inputs["logits"].to(device=device, dtype=compute).clone().requires_grad_(True)
    labels = inputs["labels"].to(device)
    mask = labels >= 0
    rows = mask.nonzero()[:, 0]
    safe_labels = labels.clamp(min=0)
    z = scaled(x, p)
    results = {}
    if case.op == "cross_entropy":
        lse = torch.logsumexp(z, dim=-1)
        label_terms = (lse - z.gather(1, safe_labels[:, None])[:, 0])[rows]
        z_terms = (lse ** 2)[rows]
        results["loss_sum"] = sum_with_scale(label_terms)
        results["z_loss_sum"] = sum_with_scale(z_terms)
        objective = p.get("label_weight", 1.0) * label_terms.sum() + p.get("z_loss_weight", 0.0) * z_terms.sum()
    elif case.op in ("distillation", "distillation_term"):
        teacher = inputs["target_logits"].to(device=device, dtype=compute)
        teacher = teacher * (p.get("logits_scale_factor", 1.0) / p.get("temperature", 1.0))
        log_p, log_q = torch.log_softmax(teacher, dim=-1), torch.log_softmax(z, dim=-1)
        kind = p.get("loss_type", "cross_entropy")
        if kind == "cross_entropy":
            per_row = -(log_p.exp() * log_q).sum(-1)
        elif kind == "forward_kl":
            per_row = (log_p.exp() * (log_p - log_q)).sum(-1)
        else:
            per_row = (log_q.exp() * (log_q - log_p)).sum(-1)
        terms = per_row[rows]
        results["loss_sum"] = sum_with_scale(terms)
        objective = p.get("weight", 1.0) * terms.sum()
        if case.op == "distillation_term":
            lse = torch.logsumexp(z, dim=-1)
            label_terms = (lse - z.gather(1, safe_labels[:, None])[:, 0])[rows]
            z_terms = (lse ** 2)[rows]
            results["z_loss_sum"] = sum_with_scale(z_terms)
            objective = objective + p.get("label_weight", 0.0) * label_terms.sum() + \
                p.get("z_loss_weight", 0.0) * z_terms.sum()
    elif case.op == "dpo":
        reference = inputs["reference_logits"].to(device=device, dtype=compute)
        policy_logp = torch.log_softmax(z, dim=-1).gather(1, safe_labels[:, None])[:, 0] * mask
        reference_logp = torch.log_softmax(reference, dim=-1).gather(1, safe_labels[:, None])[:, 0] * mask
        terms = []
        beta = p.get("beta", 1.0)
        for chosen_begin, chosen_end, rejected_begin, rejected_end in case.pairs:
            margin = (policy_logp[chosen_begin:chosen_end].sum() - policy_logp[rejected_begin:rejected_end].sum()) - \
                (reference_logp[chosen_begin:chosen_end].sum() - reference_logp[rejected_begin:rejected_end].sum())
            terms.append(-torch.nn.functional.logsigmoid(beta * margin))
        terms = torch.stack(terms)
        results["loss_sum"] = sum_with_scale(terms)
        objective = p.get("weight", 1.0) * terms.sum()
    else:
        results.update(policy_formula(case, inputs, z, rows, safe_labels, device))
        objective = p.get("grad_weight", 1.0) * results.pop("objective")
    (grad,) = torch.autograd.grad(objective, x)
    results["grad_logits"] = grad.detach()
    return results


def policy_formula(case, inputs, z, rows, safe_labels, device):
    p = case.params
    low, high = 1.0 - p.get("epsilon_low", 0.2), 1.0 + p.get("epsilon_high", 0.2)
    log_q = torch.log_softmax(z, dim=-1)
    new = log_q.gather(1, safe_labels[:, None])[:, 0][rows].to(torch.float64)
    entropy = -(log_q.exp() * log_q).sum(-1)[rows].to(torch.float64)
    old = inputs["old_log_probabilities"].to(device=device, dtype=torch.float64)[rows]
    advantage = inputs["advantages"].to(device=device, dtype=torch.float64)[rows]
    documents = inputs["label_documents"].to(device=device, dtype=torch.int64)[rows]
    log_ratio = new - old
    # Per document: its labels, and the means the metrics and gspo use.
    counts = torch.zeros(case.documents, dtype=torch.float64, device=device).index_add(
        0, documents, torch.ones_like(new))
    present = counts > 0

    def document_mean(values):
        sums = torch.zeros(case.documents, dtype=values.dtype, device=device).index_add(0, documents, values)
        return sums[present] / counts[present]

    if case.op == "grpo":
        ratio, token_advantage, token_log_ratio = log_ratio.exp(), advantage, log_ratio
        loss_terms = -torch.minimum(ratio * advantage, ratio.clamp(low, high) * advantage)
    else:
        document_log_ratio = torch.zeros(case.documents, dtype=torch.float64, device=device)
        document_advantage = torch.zeros(case.documents, dtype=torch.float64, device=device)
        document_log_ratio[present] = document_mean(log_ratio)
        document_advantage[present] = document_mean(advantage)
        document_ratio = document_log_ratio.exp()
        document_loss = -torch.minimum(document_ratio * document_advantage,
                                       document_ratio.clamp(low, high) * document_advantage)
        loss_terms = (counts * document_loss)[present]
        ratio, token_advantage = document_ratio[documents], document_advantage[documents]
        token_log_ratio = document_log_ratio[documents]
    clipped = ((ratio < low) | (ratio > high)).to(torch.float64)
    # Labels whose gradient the clipping removes, on each side (the case must reach both where it says so).
    clip_high = int(((token_advantage > 0) & (ratio > high)).sum())
    clip_low = int(((token_advantage < 0) & (ratio < low)).sum())
    weight = 1.0 / counts[documents]
    variance_weight = weight if case.op == "gspo" else torch.ones_like(weight)
    metric_values = {
        "new_logprobs": (weight, new), "old_logprobs": (weight, old), "ratio_new_old": (weight, ratio),
        "ratio_new_old_sum": (variance_weight, ratio), "ratio_new_old_squared_sum": (variance_weight, ratio ** 2),
        "kl_new_old": (weight, ratio - token_log_ratio - 1.0), "advantage": (weight, token_advantage),
        "entropy": (weight, entropy)}
    results = {"objective": loss_terms.sum(), "loss_sum": sum_with_scale(loss_terms.detach()),
               "clip_sides": (clip_high, clip_low)}
    for name, (weights, values) in metric_values.items():
        values = values.detach()
        # Per-document means, grouped here and added over the documents (grpo's sums over labels: plain sums).
        total = document_mean(values).sum() if weights is weight else values.sum()
        results["metric:" + name] = (total, (weights * values).abs().sum())
    results["metric:clipped_ratio_fraction"] = (document_mean(clipped).sum(), weight.sum())
    results["metric:num_tokens"] = (torch.tensor(float(len(new)), dtype=torch.float64), float(len(new)))
    results["metric:num_segments"] = (present.sum().to(torch.float64), weight.sum())
    return results


# ------------------------------------------------------------------------------------------------------------------
# Comparison.

def scalar_error(ours, reference):
    value, scale = reference
    value, scale = float(value), float(scale)
    difference = abs(float(ours) - value)
    return difference / scale if scale > 1e-30 else difference


def gradient_error(ours, reference):
    ours, reference = ours.to(torch.float64).cpu(), reference.to(torch.float64).cpu()
    if ours.shape != reference.shape:
        return math.inf
    scale = reference.abs().max().item() if reference.numel() else 0.0
    difference = (ours - reference).abs().max().item() if reference.numel() else 0.0
    return difference / scale if scale > 1e-30 else difference


def measures(case, outputs, metadata, reference):
    """Our outputs against `reference` (a formula's results): {measure: error}."""
    errors = {}
    for name in ("loss_sum", "z_loss_sum"):
        if name in reference:
            errors[name] = scalar_error(outputs[name].reshape(-1)[0].item(), reference[name]) \
                if name in outputs else math.inf
    if case.op in ("grpo", "gspo"):
        names = metadata.get("metric_names", "").split(",") if "metric_sums" in outputs else []
        for index, name in enumerate(names):
            if "metric:" + name in reference:
                errors["metric " + name] = scalar_error(outputs["metric_sums"][index].item(),
                                                        reference["metric:" + name])
        for name in METRIC_NAMES:
            errors.setdefault("metric " + name, math.inf)  # a metric the tool did not write
    errors["grad_logits"] = gradient_error(outputs["grad_logits"], reference["grad_logits"]) \
        if "grad_logits" in outputs else math.inf
    return errors


def formula_errors(case, low, reference):
    """PyTorch's own low-precision results against the fp64 reference, by the same measures."""
    errors = {}
    for name, value in reference.items():
        if name == "grad_logits":
            errors[name] = gradient_error(low[name], value)
        elif name.startswith("metric:"):
            errors["metric " + name[len("metric:"):]] = scalar_error(low[name][0], value)
        elif name in ("loss_sum", "z_loss_sum"):
            errors[name] = scalar_error(low[name][0], value)
    return errors


# ------------------------------------------------------------------------------------------------------------------

def list_variants(binary, device):
    output = subprocess.run([str(binary), "--list-variants"], capture_output=True, text=True, timeout=60, check=True)
    variants = {}
    for line in output.stdout.splitlines():
        op, op_device, variant = line.split()
        if op_device == device:
            variants.setdefault(op, []).append(variant)
    return variants


def low_precision_floor(dtype_name, vocab):
    """The smallest threshold in fp32 / bf16: LOW_PRECISION_FLOOR, and in fp32 at least the rounding of a row's sums
    of `vocab` fp32 terms (logsumexp, entropy), 4 sqrt(vocab) 2^-24 (a random walk of roundings: 6e-5 at a million)."""
    floor = LOW_PRECISION_FLOOR[dtype_name]
    return max(floor, 4.0 * math.sqrt(vocab) * 2.0 ** -24) if dtype_name == "fp32" else floor


def run_case(binary, case, dtype_name, device, variants, work, results):
    dtype = DTYPES[dtype_name]
    inputs = make_inputs(case, dtype)
    torch_device = "cuda" if device == "cuda" else "cpu"
    reference = formula(case, inputs, torch.float64, torch_device)
    thresholds = None
    own = {}
    if dtype != torch.float64:
        own = formula_errors(case, formula(case, inputs, dtype, torch_device), reference)
        floor = low_precision_floor(dtype_name, case.vocab)
        thresholds = {name: min(max(LOW_PRECISION_FACTOR * error, floor), LOW_PRECISION_CAP[dtype_name])
                      for name, error in own.items()}
    clip_sides = reference.pop("clip_sides", None)
    input_file = work / f"{case.name}_{dtype_name}_inputs.safetensors"
    save_safetensors(input_file, inputs)
    parameters = [f"{key}={value}" for key, value in case.params.items()]
    if case.op in ("grpo", "gspo"):
        parameters.append(f"num_documents={case.documents}")
    for variant in variants.get(OP_NAMES[case.op], []):
        label = f"{case.name} [{device} {dtype_name} {variant}]"
        output_file = work / f"{case.name}_{dtype_name}_{variant}_outputs.safetensors"
        command = [str(binary), case.op, str(input_file), str(output_file), f"device={device}", f"variant={variant}",
                   *parameters]
        run = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if run.returncode == 3:
            print(f"DECLINED {label}: {run.stderr.strip()}")
            results.append({"case": label, "verdict": "declined", "reason": run.stderr.strip()})
            continue
        if run.returncode != 0:
            print(f"FAIL {label}: loss_op_io exited {run.returncode}: {run.stderr.strip()[-500:]}")
            results.append({"case": label, "verdict": "fail", "error": run.stderr.strip()})
            continue
        outputs, metadata = load_safetensors(output_file)
        errors = measures(case, outputs, metadata, reference)
        limits = {name: (thresholds.get(name, low_precision_floor(dtype_name, case.vocab)) if thresholds
                         else FP64_THRESHOLD)
                  for name in errors}
        failed = [name for name, error in errors.items() if not error < limits[name]]
        setup = ""
        if case.both_sides and clip_sides and min(clip_sides) == 0:
            setup = f" set-up: the inputs clip {clip_sides[0]} labels high, {clip_sides[1]} low (need both)"
        passed = not failed and not setup
        worst = max(errors, key=lambda name: errors[name] / limits[name])
        detail = ", ".join(f"{name} {errors[name]:.1e}" for name in ("loss_sum", "z_loss_sum", "grad_logits")
                           if name in errors)
        metric_errors = {name: error for name, error in errors.items() if name.startswith("metric ")}
        if metric_errors:
            worst_metric = max(metric_errors, key=lambda name: metric_errors[name] / limits[name])
            detail += f", metrics max {metric_errors[worst_metric]:.1e} ({worst_metric[len('metric '):]})"
        if clip_sides:
            detail += f", clipped labels high/low {clip_sides[0]}/{clip_sides[1]}"
        if thresholds:
            detail += f"; worst {worst} {errors[worst]:.1e} < {limits[worst]:.1e} (PyTorch {dtype_name}: " \
                      f"{own.get(worst, 0.0):.1e})"
        else:
            detail += f"; threshold {FP64_THRESHOLD:.0e}"
        if failed:
            detail += "; FAILED: " + ", ".join(f"{name} {errors[name]:.2e} >= {limits[name]:.2e}" for name in failed)
        print(f"{'PASS' if passed else 'FAIL'} {label}: {detail}{setup}")
        results.append({"case": label, "verdict": "pass" if passed else "fail", "errors": errors, "limits": limits,
                        "ran": metadata.get("variant", ""), "clip_sides": clip_sides})
    sys.stdout.flush()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--dtype", default="fp64", help="comma-separated: fp64, fp32, bf16")
    parser.add_argument("--binary", help="loss_op_io (default: build/device/bin, build/cuda/bin, build/cpu/bin)")
    parser.add_argument("--cases", default="", help="only the cases whose name contains this")
    parser.add_argument("--work", help="work directory, kept (default: a temporary one, removed)")
    args = parser.parse_args()
    dtypes = [name for name in args.dtype.split(",") if name]
    if not dtypes or any(name not in DTYPES for name in dtypes):
        parser.error(f"--dtype {args.dtype}: expected a comma-separated list of {', '.join(DTYPES)}")
    binary, _ = find_built_binary("loss_op_io", args.binary, fall_back=False)
    if binary is None:
        print(f"loss_torch_check: no loss_op_io binary ({args.binary or 'build/{device,cuda,cpu}/bin'}): build it "
              f"(cmake --build --preset cpu --target loss_op_io)", file=sys.stderr)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print("loss_torch_check: --device cuda but torch sees no CUDA device", file=sys.stderr)
        return 2
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
    try:
        variants = list_variants(binary, args.device)
    except (subprocess.SubprocessError, OSError, ValueError) as error:
        print(f"loss_torch_check: {binary} --list-variants failed: {error}", file=sys.stderr)
        return 2
    print(f"loss_torch_check: {binary}, torch {torch.__version__}, device {args.device}"
          + (f" ({torch.cuda.get_device_name()})" if args.device == "cuda" else "") + "; variants: "
          + "; ".join(f"{op} {', '.join(names)}" for op, names in sorted(variants.items())))
    missing = sorted({OP_NAMES[case.op] for case in CASES} - set(variants))
    if missing:
        print(f"loss_torch_check: no {args.device} variant of {', '.join(missing)}", file=sys.stderr)
        return 2
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="loss_torch_check_"))
    work.mkdir(parents=True, exist_ok=True)
    results = []
    for dtype_name in dtypes:
        for case in CASES:
            if args.cases not in case.name or (case.cuda_only and args.device != "cuda"):
                continue
            try:
                run_case(binary, case, dtype_name, args.device, variants, work, results)
            except Exception as error:  # every case runs, whatever happens to one
                print(f"FAIL {case.name} [{args.device} {dtype_name}]: {type(error).__name__}: {error}")
                results.append({"case": f"{case.name} [{args.device} {dtype_name}]", "verdict": "fail",
                                "error": f"{type(error).__name__}: {error}"})
    passed = sum(result["verdict"] == "pass" for result in results)
    failed = sum(result["verdict"] == "fail" for result in results)
    declined = sum(result["verdict"] == "declined" for result in results)
    destination = Path(os.environ["OUT"]) if os.environ.get("OUT") else work
    destination.mkdir(parents=True, exist_ok=True)
    (destination / "loss_torch_check.json").write_text(json.dumps(results, indent=1, default=str))
    if not args.work and failed == 0 and destination != work:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{passed} passed, {failed} failed" + (f", {declined} declined" if declined else ""))
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
