#!/usr/bin/env python3
"""Reference check of fast-llm's Hugging Face conversion and model against transformers.

Runs where python3 has torch and transformers (the GPU machine: torch 2.11, transformers 5.17) and a built
`fast-llm` is at hand (build/device/bin/fast-llm after tools/stage_for_device.sh, or --fast-llm PATH).

Import check, for each case (Llama untied / tied with biases / llama3 rope / yarn rope / head_dim != hidden/heads,
Mistral with a sliding window shorter than the sequence, Mistral tied, Qwen2 untied / tied, Mixtral with 4 experts
top-2, with 8 experts top-2 and a sliding window, and with the router's load-balancing loss on):
  1. transformers builds a small model of that configuration; every parameter (norm weights and biases too) is set to
     random values; it is saved with save_pretrained (config.json + safetensors);
  2. `fast-llm model_outputs gpt pretrained.format=<model_type> ...` imports it and writes its logits, mean loss and
     the gradient of that loss for every tensor (named as in the checkpoint);
  3. transformers computes the same in float64 (the reference);
  4. relative error ||ours - reference|| / ||reference|| must be below 1e-5 for fp32 compute (3e-6 for fp64) for the
     logits, the loss and every gradient; the gradient names must be exactly the model's parameters. The fp64 bound
     is the reference's own accuracy: transformers computes the rotary inverse frequencies and cos / sin tables in
     fp32 whatever the model's dtype (and Mixtral's routing softmax), so its fp64 logits are fp32-accurate in the
     positions (measured 2e-7 to 5e-7 on 2026-12-03); fast-llm's fp64 run uses fp64 tables (layers/attention/rotary.h).
  Mixtral: save_pretrained writes the per-expert spelling (`block_sparse_moe.gate`, `experts.<e>.w1/w2/w3`), which
     transformers 4 uses in memory and transformers 5 writes back on save (it fuses the experts into
     `mlp.experts.gate_up_proj` [E, 2I, H] / `down_proj` [E, H, I] in memory; which one was written is printed, fast-llm
     reads both); transformers 5's gradients are split back into the per-expert spelling before comparing (the names
     fast-llm gives them). The cases without `aux` set router_aux_loss_coef to 0, so the gradient
     is the language-model loss's alone; `mixtral_aux_loss` (one block, one sequence: transformers' load-balancing
     loss concatenates every layer's tokens, ours is per layer and per micro-batch, equal only then) adds
     router_aux_loss_coef x transformers' aux_loss to the reference loss before backward, and the loss compared is
     the cross-entropy alone (what fast-llm reports).
  bf16 (`--dtypes bfloat16`, default on CUDA with float32): fast-llm computes in bf16 (fp32 master weights, as in
     training); transformers runs the same model cast to bf16 (on the GPU when --device cuda). Both are compared with
     the fp64 reference, and ours must be within BF16_FACTOR x transformers' own bf16 error for that quantity (logits,
     loss, each gradient), and never above BF16_FLOOR when transformers happens to be closer than that: bf16 keeps 8
     significant bits (relative round-off 2^-9 = 2e-3), so errors of a few 1e-3 are rounding, not bugs. A MoE layer's
     expert gradients are compared together per weight (a near tie in the routing can send a token to another expert
     under bf16 rounding, in ours or in transformers' run: see check_low_precision). Ours against
     transformers' bf16 logits directly is printed for information. The bf16 run also checks
     `llama_smollm_block` (SmolLM2-135M's block widths, two blocks, 128 tokens: the real kernel shapes).
Export check: `fast-llm train gpt` trains a small Llama-architecture model of ours for a few steps on random data
with a llama export and a checkpoint; transformers loads the export (and a mistral conversion of the checkpoint made
with `fast-llm convert gpt`) and must give the logits fast-llm computes from its own checkpoint (same threshold).
`export_mixtral` does the same with a small mixture of experts of ours (4 experts, top-2) exported as mixtral and
loaded by transformers' MixtralForCausalLM.
LoRA check (`lora`, docs/post-training.md): transformers saves a random Llama (the `llama` case); `fast-llm train gpt`
imports it with `peft: {type: lora, rank: 4, alpha: 8}` (query, value half, and dense through apply_peft) for a few
steps with a merged llama export and a checkpoint, and `fast-llm convert gpt` writes the checkpoint's adapters as PEFT
files (output.peft=adapter). fast-llm's logits from its own checkpoint (the model with adapters) must equal (float32
threshold): transformers on the merged export, and transformers on the base model with the PEFT file's adapters
applied by hand (W += lora_alpha / r * lora_B @ lora_A for every module in the file); the PEFT file's names must be
PEFT's (`base_model.model.<module>.lora_A.weight`) for exactly q_proj, v_proj and o_proj. When the `peft` package is
installed, PeftModel.from_pretrained(base, adapter) is compared too.

Usage:
  python3 tools/hf_check.py [--fast-llm PATH] [--device cpu|cuda] [--dtypes float32,float64] [--cases a,b]
                            [--work DIR] [--keep]
  On the GPU machine, with the staged build:  python3 tools/hf_check.py            (fast-llm on the CPU)
                                              python3 tools/hf_check.py --device cuda   (float32 and bfloat16)
                                              python3 tools/hf_check.py --device cuda --dtypes bfloat16
Prints one line per check and a summary; writes hf_check.json (every number) into $OUT when set, else the work
directory. Exit status 0 when everything passes, 1 when a check fails, 2 when the set-up is wrong.
"""

import argparse
import copy
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from check_common import find_built_binary  # tools/ is the script's folder, first on sys.path

THRESHOLDS = {"float32": 1e-5, "float64": 3e-6, "bfloat16": None}  # bf16: relative to transformers' bf16 error
BF16_FACTOR, BF16_FLOOR = 3.0, 1e-2
EXPERT_INDEX = re.compile(r"\.experts\.\d+\.")

try:
    import torch
    import transformers
    from safetensors.torch import load_file, save_file
except ImportError as error:  # pragma: no cover - set-up problem
    print(f"hf_check: needs torch, transformers and safetensors ({error})", file=sys.stderr)
    sys.exit(2)

TRANSFORMERS_MAJOR = int(transformers.__version__.split(".")[0])

# Sizes shared by every case: big enough for GQA, several heads and a sliding window, small enough for seconds.
BASE = dict(
    vocab_size=96,
    hidden_size=64,
    intermediate_size=80,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    rms_norm_eps=1e-5,
    initializer_range=0.02,
)
BATCH, SEQUENCE = 2, 24


@dataclass
class Case:
    name: str
    model_type: str  # llama, mistral, qwen2, mixtral (also the fast-llm format)
    overrides: dict = field(default_factory=dict)
    rope_type: str = "default"
    rope: dict = field(default_factory=lambda: {"rope_theta": 10000.0})
    sequence: int = 0  # tokens per row; 0: SEQUENCE
    extra: bool = False  # run only when named in --cases or when bfloat16 is checked
    batch: int = 0  # rows; 0: BATCH
    aux: bool = False  # the reference loss includes transformers' router load-balancing loss (Mixtral)


CASES = [
    Case("llama", "llama", {"head_dim": 16}),
    Case("llama_tied_biases", "llama", {"head_dim": 16, "tie_word_embeddings": True, "attention_bias": True, "mlp_bias": True}),
    Case("llama_llama3_rope", "llama", {"head_dim": 16}, "llama3",
         {"rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16}),
    Case("llama_yarn_rope", "llama", {"head_dim": 16}, "yarn",
         {"rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16}),
    Case("llama_narrow_heads", "llama", {"head_dim": 8}),
    Case("mistral_window", "mistral", {"head_dim": 16, "sliding_window": 8}),
    Case("mistral_tied", "mistral", {"head_dim": 24, "sliding_window": None, "tie_word_embeddings": True}),
    Case("qwen2", "qwen2", {"use_sliding_window": False}),
    Case("qwen2_tied", "qwen2", {"use_sliding_window": False, "tie_word_embeddings": True}),
    Case("mixtral", "mixtral", {"head_dim": 16, "num_local_experts": 4, "num_experts_per_tok": 2,
                                "router_aux_loss_coef": 0.0, "sliding_window": None}),
    Case("mixtral_8_experts_window", "mixtral", {"head_dim": 16, "num_local_experts": 8, "num_experts_per_tok": 2,
                                                 "router_aux_loss_coef": 0.0, "sliding_window": 8}),
    Case("mixtral_aux_loss", "mixtral", {"head_dim": 16, "num_local_experts": 4, "num_experts_per_tok": 2,
                                         "router_aux_loss_coef": 0.05, "num_hidden_layers": 1,
                                         "sliding_window": None}, batch=1, aux=True),
    # SmolLM2-135M's widths (hidden 576, 9 heads in 3 groups of 64, MLP 1536, tied), two blocks, 128 tokens.
    Case("llama_smollm_block", "llama",
         {"hidden_size": 576, "intermediate_size": 1536, "num_attention_heads": 9, "num_key_value_heads": 3,
          "head_dim": 64, "vocab_size": 4096, "max_position_embeddings": 256, "tie_word_embeddings": True},
         "default", {"rope_theta": 100000.0}, sequence=128, extra=True),
]


class Results:
    def __init__(self):
        self.records = []

    def add(self, check, metric, value, threshold, passed=None, detail=""):
        if passed is None:
            passed = value is not None and math.isfinite(value) and value < threshold
        self.records.append(
            {"check": check, "metric": metric, "value": value, "threshold": threshold, "passed": bool(passed),
             "detail": detail})
        shown = "-" if value is None else f"{value:.3e}"
        print(f"  {'ok  ' if passed else 'FAIL'} {check:<32} {metric:<48} {shown:>10}  (< {threshold:.0e}) {detail}")
        return passed

    def error(self, check, message):
        self.records.append({"check": check, "metric": "error", "value": None, "threshold": None, "passed": False,
                             "detail": message})
        print(f"  FAIL {check:<32} {message}")

    @property
    def failed(self):
        return [record for record in self.records if not record["passed"]]


def relative_error(ours, reference):
    ours = ours.to(torch.float64)
    reference = reference.to(torch.float64)
    if ours.shape != reference.shape:
        return float("inf")
    scale = reference.norm().item()
    difference = (ours - reference).norm().item()
    return difference / scale if scale > 1e-30 else difference


def find_fast_llm(explicit):
    binary, candidates = find_built_binary("fast-llm", explicit, search_path=True)
    if binary is not None:
        return binary
    print("hf_check: no fast-llm binary (looked at " + ", ".join(map(str, candidates)) +
          "); build it or pass --fast-llm", file=sys.stderr)
    sys.exit(2)


def run_fast_llm(binary, arguments, log):
    command = [str(binary)] + [str(argument) for argument in arguments]
    with open(log, "a") as stream:
        stream.write("$ " + " ".join(command) + "\n")
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        stream.write(result.stdout + "\n")
    if result.returncode != 0:
        tail = "\n".join(result.stdout.strip().splitlines()[-15:])
        raise RuntimeError(f"fast-llm {' '.join(str(a) for a in arguments[:2])} failed (exit {result.returncode}):\n{tail}")
    return result.stdout


def config_class(model_type):
    return {"llama": transformers.LlamaConfig, "mistral": transformers.MistralConfig,
            "qwen2": transformers.Qwen2Config, "mixtral": transformers.MixtralConfig}[model_type]


def make_config(case):
    kwargs = dict(BASE, **case.overrides)
    if TRANSFORMERS_MAJOR >= 5:
        kwargs["rope_parameters"] = {"rope_type": case.rope_type, **case.rope}
    else:
        kwargs["rope_theta"] = case.rope["rope_theta"]
        if case.rope_type != "default":
            kwargs["rope_scaling"] = {"rope_type": case.rope_type,
                                      **{key: value for key, value in case.rope.items() if key != "rope_theta"}}
    return config_class(case.model_type)(**kwargs)


def load_model(source):
    """A float32 model with eager attention, from a config or a checkpoint directory."""
    if isinstance(source, (str, Path)):
        model = transformers.AutoModelForCausalLM.from_pretrained(str(source), attn_implementation="eager")
    else:
        model = transformers.AutoModelForCausalLM.from_config(source, attn_implementation="eager")
    if hasattr(model, "set_experts_implementation"):  # transformers 5 MoE: the per-expert loop, in any dtype
        model.set_experts_implementation("eager")
    return model.to(torch.float32).eval()


def checkpoint_spelling(grads, config):
    """Gradients named as the checkpoint names the tensors. transformers 5 holds Mixtral's experts fused
    (`model.layers.i.mlp.gate.weight`, `mlp.experts.gate_up_proj` [E, 2I, H] with the gate rows first,
    `mlp.experts.down_proj` [E, H, I]) and writes them per expert on save; transformers 4 holds them per expert."""
    result = {}
    for name, grad in grads.items():
        prefix, _, leaf = name.rpartition(".mlp.")
        if not prefix or leaf not in ("gate.weight", "experts.gate_up_proj", "experts.down_proj"):
            result[name] = grad
            continue
        moe = f"{prefix}.block_sparse_moe"
        intermediate, hidden = config.intermediate_size, config.hidden_size
        if leaf == "gate.weight":
            result[f"{moe}.gate.weight"] = grad
        elif leaf == "experts.gate_up_proj":
            if grad.shape[1:] == (hidden, 2 * intermediate):  # a transposed layout: [E, H, 2I]
                grad = grad.transpose(1, 2)
            for expert in range(grad.shape[0]):
                result[f"{moe}.experts.{expert}.w1.weight"] = grad[expert, :intermediate].contiguous()
                result[f"{moe}.experts.{expert}.w3.weight"] = grad[expert, intermediate:].contiguous()
        else:
            if grad.shape[1:] == (intermediate, hidden):  # a transposed layout: [E, I, H]
                grad = grad.transpose(1, 2)
            for expert in range(grad.shape[0]):
                result[f"{moe}.experts.{expert}.w2.weight"] = grad[expert].contiguous()
    return result


def saved_tensor_names(directory):
    from safetensors import safe_open
    names = set()
    for path in Path(directory).glob("*.safetensors"):
        with safe_open(str(path), framework="pt") as file:
            names.update(file.keys())
    return names


def randomize(model, seed):
    generator = torch.Generator().manual_seed(seed)
    # 0.15 at the base width (64); wider cases keep the same activation statistics.
    scale = 0.15 * math.sqrt(BASE["hidden_size"] / model.config.hidden_size)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            noise = torch.randn(parameter.shape, generator=generator, dtype=torch.float32)
            if parameter.ndim == 1 and "norm" in name:
                parameter.copy_(1.0 + 0.2 * noise)  # norm weights around one
            else:
                parameter.copy_(scale * noise)  # matrices and biases (transformers initialises biases to zero)


def reference_outputs(model, tokens, gradients=True, dtype=torch.float64, device="cpu", aux=False):
    """Logits, mean next-token loss and gradients, computed by transformers in `dtype` (float64: the reference) on
    `device`, returned on the host in float64. With `aux`, the gradients are those of the loss plus
    router_aux_loss_coef x the router load-balancing loss (the returned loss stays the cross-entropy)."""
    reference = copy.deepcopy(model).to(device=device, dtype=dtype)
    reference.zero_grad(set_to_none=True)
    if aux:
        outputs = reference(input_ids=tokens.to(device), use_cache=False, output_router_logits=True)
    else:
        outputs = reference(input_ids=tokens.to(device), use_cache=False)
    logits = outputs.logits
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
                                             tokens[:, 1:].reshape(-1).to(device)) if dtype != torch.float64 else \
        torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
    grads = {}
    if gradients:
        total = loss + model.config.router_aux_loss_coef * outputs.aux_loss.to(loss.dtype) if aux else loss
        total.backward()
        grads = checkpoint_spelling({name: parameter.grad.detach().to("cpu", torch.float64) for name, parameter in
                                     reference.named_parameters()}, model.config)
    return logits.detach().to("cpu", torch.float64), loss.detach().to("cpu", torch.float64), grads


def our_outputs(binary, fmt, path, tokens_file, output, device, dtype, log, gradients=True):
    run_fast_llm(binary, ["model_outputs", "gpt", f"pretrained.format={fmt}", f"pretrained.path={path}",
                          f"tokens={tokens_file}", f"output={output}", f"gradients={'true' if gradients else 'false'}",
                          f"model.distributed.use_cuda={'true' if device == 'cuda' else 'false'}",
                          f"model.distributed.compute_dtype={dtype}",
                          # bf16 computes from fp32 master weights, as in training.
                          f"model.distributed.optimization_dtype={'float32' if dtype == 'bfloat16' else dtype}"],
                 log)
    return load_file(str(output))


def check_low_precision(label, ours, reference, low, our_names, results):
    """bf16: ours and transformers' bf16 (`low`) against the fp64 reference; ours may be BF16_FACTOR x worse than
    transformers, or BF16_FLOOR, whichever is larger."""
    logits, loss, reference_grads = reference
    low_logits, low_loss, low_grads = low

    def threshold(theirs):
        return max(BF16_FACTOR * theirs, BF16_FLOOR)

    error = relative_error(low_logits, logits)
    results.add(label, "logits (vs fp64; threshold from transformers bf16)", relative_error(ours["logits"], logits),
                threshold(error), detail=f"transformers bf16: {error:.3e}")
    results.add(label, "(info) logits vs transformers bf16", relative_error(ours["logits"], low_logits), 1.0,
                passed=True, detail="for comparison only")
    error = relative_error(low_loss, loss)
    results.add(label, "loss", relative_error(ours["loss"].reshape(()), loss), threshold(error),
                detail=f"transformers bf16: {error:.3e}")
    # The experts of one layer are compared together (all experts' w1, all w2, all w3): bf16 rounding can change a
    # token's top-k against the fp64 routing (a near tie), which moves that token's whole contribution from one expert
    # to another. An expert that receives a few tokens then differs by tens of percent, in ours or in transformers'
    # bf16 run depending on where its rounding falls, while the layer's experts together differ by rounding only.
    groups = {}
    for name in reference_grads:
        if name in our_names:
            groups.setdefault(EXPERT_INDEX.sub(".experts.*.", name), []).append(name)

    def joined(tensors, names):
        return torch.cat([tensors[name].reshape(-1).to(torch.float64) for name in names])

    our_grads = {name[len("grad."):]: value for name, value in ours.items() if name.startswith("grad.")}
    worst_name, worst, worst_threshold = None, 0.0, BF16_FLOOR
    for group, names in groups.items():
        reference_grad = joined(reference_grads, names)
        theirs = relative_error(joined(low_grads, names), reference_grad)
        limit = threshold(theirs)
        error = relative_error(joined(our_grads, names), reference_grad)
        if not (error < limit):
            results.add(label, f"grad {group}", error, limit, detail=f"transformers bf16: {theirs:.3e}")
        if not math.isfinite(error) or error / limit > worst / worst_threshold:
            worst_name, worst, worst_threshold = group, error, limit
    results.add(label, f"gradients (worst vs its threshold: {worst_name})", worst, worst_threshold)


def check_import(case, binary, work, device, dtypes, results, log):
    torch.manual_seed(0)
    config = make_config(case)
    model = load_model(config)
    randomize(model, seed=len(case.name))
    checkpoint = work / case.name / "hf"
    model.save_pretrained(str(checkpoint))
    if case.model_type == "mixtral":
        names = saved_tensor_names(checkpoint)
        per_expert = any(".block_sparse_moe.experts.0.w1.weight" in name for name in names)
        results.add(f"{case.name}", "(info) expert spelling save_pretrained wrote", 0.0, 1.0, passed=True,
                    detail="per expert (block_sparse_moe.experts.<e>.w1/w2/w3)" if per_expert else
                    "fused (mlp.experts.gate_up_proj / down_proj): fast-llm imports it too")
    generator = torch.Generator().manual_seed(1234)
    tokens = torch.randint(0, config.vocab_size, (case.batch or BATCH, case.sequence or SEQUENCE), generator=generator,
                           dtype=torch.int64)
    tokens_file = work / case.name / "tokens.safetensors"
    save_file({"tokens": tokens.contiguous()}, str(tokens_file))

    logits, loss, grads = reference_outputs(model, tokens, aux=case.aux)
    with torch.no_grad():
        fp32_logits = model(input_ids=tokens, use_cache=False).logits
    results.add(f"{case.name}", "(scale) transformers fp32 logits vs fp64", relative_error(fp32_logits, logits), 1.0,
                passed=True, detail="for comparison only")
    for dtype in dtypes:
        threshold = THRESHOLDS[dtype]
        ours = our_outputs(binary, case.model_type, checkpoint, tokens_file, work / case.name / f"ours_{dtype}.safetensors",
                           device, dtype, log)
        label = f"{case.name} [{dtype}]"
        our_names = {name[len("grad."):] for name in ours if name.startswith("grad.")}
        if threshold is None:  # bf16
            low_device = "cuda" if device == "cuda" and torch.cuda.is_available() else "cpu"
            low = reference_outputs(model, tokens, dtype=torch.bfloat16, device=low_device, aux=case.aux)
            missing, extra = sorted(set(grads) - our_names), sorted(our_names - set(grads))
            results.add(label, "gradient names", 0.0 if not (missing or extra) else None, 1.0,
                        passed=not (missing or extra),
                        detail=f"missing {missing} extra {extra}" if missing or extra else "")
            check_low_precision(label, ours, (logits, loss, grads), low, our_names, results)
            continue
        results.add(label, "logits", relative_error(ours["logits"], logits), threshold)
        results.add(label, "loss", relative_error(ours["loss"].reshape(()), loss), threshold)
        missing, extra = sorted(set(grads) - our_names), sorted(our_names - set(grads))
        results.add(label, "gradient names", 0.0 if not (missing or extra) else None, 1.0,
                    passed=not (missing or extra), detail=f"missing {missing} extra {extra}" if missing or extra else "")
        worst_name, worst = None, 0.0
        for name, reference in grads.items():
            if name not in our_names:
                continue
            error = relative_error(ours["grad." + name], reference)
            if not (error < threshold):
                results.add(label, f"grad {name}", error, threshold,
                            detail=f"|reference| = {reference.norm().item():.3e}, |ours| = "
                                   f"{ours['grad.' + name].to(torch.float64).norm().item():.3e}")
            if error > worst or not math.isfinite(error):
                worst_name, worst = name, error
        results.add(label, f"gradients (worst: {worst_name})", worst, threshold)


TRAIN_CONFIG = """
training: {{train_iters: 3, logs: {{interval: 1}}, num_workers: 1,
           checkpoint: {{interval: 3}}, export: {{interval: 3, format: {export}}}}}
data: {{datasets: {{training: {{type: random}}}}, micro_batch_size: 64}}
optimizer: {{learning_rate: {{base: 0.01}}}}
model:
  base_model:
    hidden_size: 64
    embeddings: {{vocab_size: {vocab}}}
    decoder:
      num_blocks: 2
      block:
        mixer: {{heads: 4, head_groups: 2, head_size: 16, add_linear_biases: false, rotary: {{type: default, theta: 10000}}}}
        mlp: {mlp}
        normalization: {{type: rms_norm, epsilon: 1.0e-05}}
    head: {{normalization: {{type: rms_norm, epsilon: 1.0e-05}}}}
    tied_embedding_weight: false
  distributed: {{compute_dtype: fp32, use_cuda: {use_cuda}, seed: 1}}
run: {{experiment_dir: {experiment}}}
"""


DENSE_MLP = "{intermediate_size: 80, gated: true, activation: silu, add_linear_biases: false}"
# Mixtral's MLP: 4 experts, 2 per token, each expert as wide as the dense MLP above.
MOE_MLP = ("{type: moe, experts: 4, experts_per_token: 2, intermediate_size: 80, gated: true, activation: silu, "
           "add_linear_biases: false, auxiliary_loss_coefficient: 0.01}")


def check_export(binary, work, device, results, log, moe=False):
    """A model trained by fast-llm, exported (llama, or mixtral with `moe`), loaded by transformers."""
    name = "export_mixtral" if moe else "export"
    experiment = work / f"{name}_run"
    config_file = work / f"{name}_run.yaml"
    export_format = "mixtral" if moe else "llama"
    config_file.write_text(TRAIN_CONFIG.format(vocab=BASE["vocab_size"], use_cuda="true" if device == "cuda" else "false",
                                               experiment=experiment, export=export_format,
                                               mlp=MOE_MLP if moe else DENSE_MLP))
    run_fast_llm(binary, ["train", "gpt", "-c", config_file], log)
    export = experiment / "export" / export_format / "3"
    if not (export / "ok").exists():
        raise RuntimeError(f"the training run wrote no export at {export}")
    checks = [(f"{name} {export_format}", export, export_format)]
    if not moe:
        mistral = work / "export_mistral"
        run_fast_llm(binary, ["convert", "gpt", "input.format=distributed", f"input.path={experiment / 'checkpoint'}",
                              "output.format=mistral", f"output.path={mistral}", "exist_ok=true"], log)
        checks.append(("convert mistral", mistral, "mistral"))

    generator = torch.Generator().manual_seed(99)
    tokens = torch.randint(0, BASE["vocab_size"], (BATCH, SEQUENCE), generator=generator, dtype=torch.int64)
    tokens_file = work / f"{name}_tokens.safetensors"
    save_file({"tokens": tokens.contiguous()}, str(tokens_file))
    # Ours, from our own native checkpoint.
    ours = our_outputs(binary, "distributed", experiment / "checkpoint", tokens_file, work / f"{name}_ours.safetensors",
                       device, "float32", log, gradients=False)
    for name, directory, model_type in checks:
        config = transformers.AutoConfig.from_pretrained(str(directory))
        results.add(name, f"transformers reads model_type {config.model_type}", 0.0, 1.0,
                    passed=config.model_type == model_type)
        model = load_model(directory)
        logits, _, _ = reference_outputs(model, tokens, gradients=False)
        results.add(name, "transformers logits vs fast-llm's", relative_error(ours["logits"], logits),
                    THRESHOLDS["float32"])


LORA_TRAIN_CONFIG = """
pretrained: {{format: llama, path: {base}}}
training: {{train_iters: 4, logs: {{interval: 1}}, num_workers: 1,
           checkpoint: {{interval: 4}}, export: {{interval: 4, format: llama}}}}
data: {{datasets: {{training: {{type: random}}}}, micro_batch_size: 64}}
optimizer: {{learning_rate: {{base: 0.02}}}}
model:
  base_model:
    peft: {{type: lora, rank: 4, alpha: 8.0}}
    decoder: {{block: {{mixer: {{dense_layer: {{apply_peft: true}}}}}}}}
  distributed: {{compute_dtype: fp32, use_cuda: {use_cuda}, seed: 1}}
run: {{experiment_dir: {experiment}}}
"""


def check_lora(binary, work, device, results, log):
    """LoRA trained by fast-llm on an imported Llama: merged export and PEFT adapter files against transformers."""
    case = CASES[0]
    torch.manual_seed(0)
    config = make_config(case)
    base_model = load_model(config)
    randomize(base_model, seed=7)
    base = work / "lora" / "base"
    base_model.save_pretrained(str(base))
    experiment = work / "lora" / "run"
    config_file = work / "lora" / "run.yaml"
    config_file.write_text(LORA_TRAIN_CONFIG.format(base=base, use_cuda="true" if device == "cuda" else "false",
                                                    experiment=experiment))
    run_fast_llm(binary, ["train", "gpt", "-c", config_file], log)
    merged = experiment / "export" / "llama" / "4"
    if not (merged / "ok").exists():
        raise RuntimeError(f"the training run wrote no export at {merged}")
    adapter = work / "lora" / "adapter"
    run_fast_llm(binary, ["convert", "gpt", "input.format=distributed", f"input.path={experiment / 'checkpoint'}",
                          "output.format=llama", "output.peft=adapter", f"output.path={adapter}", "exist_ok=true"],
                 log)

    generator = torch.Generator().manual_seed(4321)
    tokens = torch.randint(0, config.vocab_size, (BATCH, SEQUENCE), generator=generator, dtype=torch.int64)
    tokens_file = work / "lora" / "tokens.safetensors"
    save_file({"tokens": tokens.contiguous()}, str(tokens_file))
    ours = our_outputs(binary, "distributed", experiment / "checkpoint", tokens_file,
                       work / "lora" / "ours.safetensors", device, "float32", log, gradients=False)

    # The merged export, as transformers loads it.
    logits, _, _ = reference_outputs(load_model(merged), tokens, gradients=False)
    results.add("lora", "transformers on the merged export vs fast-llm's logits",
                relative_error(ours["logits"], logits), THRESHOLDS["float32"])

    # The base model with the PEFT file's adapters applied by hand.
    adapter_config = json.loads((adapter / "adapter_config.json").read_text())
    expected = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 4, "lora_alpha": 8.0, "bias": "none",
                "fan_in_fan_out": False}
    wrong = {key: adapter_config.get(key) for key, value in expected.items() if adapter_config.get(key) != value}
    results.add("lora", "adapter_config.json fields", float(len(wrong)), 0.5,
                detail=f"differing: {wrong}" if wrong else "")
    results.add("lora", "target_modules", 0.0, 1.0,
                passed=sorted(adapter_config.get("target_modules", [])) == ["o_proj", "q_proj", "v_proj"],
                detail=str(adapter_config.get("target_modules")))
    lora = load_file(str(adapter / "adapter_model.safetensors"))
    layers = config.num_hidden_layers
    expected_names = {f"base_model.model.model.layers.{layer}.self_attn.{module}.lora_{part}.weight"
                      for layer in range(layers) for module in ("q_proj", "v_proj", "o_proj") for part in "AB"}
    results.add("lora", "PEFT tensor names", float(len(set(lora) ^ expected_names)), 0.5,
                detail=str(sorted(set(lora) ^ expected_names)[:6]))
    scale = adapter_config["lora_alpha"] / adapter_config["r"]
    by_hand = copy.deepcopy(base_model).to(torch.float64)
    parameters = dict(by_hand.named_parameters())
    with torch.no_grad():
        for name in lora:
            if not name.endswith(".lora_A.weight"):
                continue
            module = name[len("base_model.model."):-len(".lora_A.weight")]
            a = lora[name].to(torch.float64)
            b = lora[name.replace(".lora_A.", ".lora_B.")].to(torch.float64)
            parameters[module + ".weight"] += scale * (b @ a)
    logits, _, _ = reference_outputs(by_hand, tokens, gradients=False)
    results.add("lora", "transformers base + PEFT adapters by hand vs fast-llm's logits",
                relative_error(ours["logits"], logits), THRESHOLDS["float32"])
    try:
        import peft
    except ImportError:
        results.add("lora", "(info) peft not installed: PeftModel not compared", 0.0, 1.0, passed=True)
        return
    with_adapter = peft.PeftModel.from_pretrained(copy.deepcopy(base_model), str(adapter)).eval()
    logits, _, _ = reference_outputs(with_adapter, tokens, gradients=False)
    results.add("lora", f"PeftModel (peft {peft.__version__}) vs fast-llm's logits",
                relative_error(ours["logits"], logits), THRESHOLDS["float32"])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fast-llm", help="the fast-llm binary (default: build/device/bin, build/cuda/bin, build/cpu/bin, PATH)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="where fast-llm computes (transformers' reference always runs on the CPU in float64)")
    parser.add_argument("--dtypes", default=None,
                        help="fast-llm compute dtypes to check: float32, float64, bfloat16 (default: float32,float64 on "
                             "the CPU, float32,bfloat16 on CUDA)")
    parser.add_argument("--cases", default="",
                        help="comma-separated case names (default: all, and the export checks export, export_mixtral, "
                             "lora)")
    parser.add_argument("--work", help="work directory (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()

    binary = find_fast_llm(args.fast_llm)
    if args.dtypes is None:
        args.dtypes = "float32,float64" if args.device == "cpu" else "float32,bfloat16"
    dtypes = [dtype for dtype in args.dtypes.split(",") if dtype]
    for dtype in dtypes:
        if dtype not in THRESHOLDS:
            parser.error(f"unknown dtype {dtype} (float32, float64, bfloat16)")
    selected = [name for name in args.cases.split(",") if name]
    exports = ["export", "export_mixtral", "lora"]
    unknown = [name for name in selected if name not in {case.name for case in CASES} | set(exports)]
    if unknown:
        parser.error(f"unknown cases {unknown} (known: {[case.name for case in CASES] + exports})")
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="hf_check_"))
    work.mkdir(parents=True, exist_ok=True)
    log = work / "fast_llm.log"
    torch.set_grad_enabled(True)
    print(f"hf_check: fast-llm {binary}, torch {torch.__version__}, transformers {transformers.__version__}, "
          f"device {args.device}, dtypes {dtypes}, work {work}")

    results = Results()
    for case in CASES:
        if selected and case.name not in selected:
            continue
        if not selected and case.extra and "bfloat16" not in dtypes:
            continue
        case_dtypes = dtypes if not case.extra or selected else [dtype for dtype in dtypes if dtype == "bfloat16"]
        print(f"{case.name} ({case.model_type}, rope {case.rope_type}, {case.overrides})")
        try:
            check_import(case, binary, work, args.device, case_dtypes, results, log)
        except Exception as error:  # every case runs, whatever happens to one
            results.error(case.name, f"{type(error).__name__}: {error}")
            traceback.print_exc()
    for export in exports:
        if selected and export not in selected:
            continue
        print(f"{export} (a {'mixture of experts' if export == 'export_mixtral' else 'model'} trained by fast-llm, "
              f"loaded by transformers)")
        try:
            if export == "lora":
                check_lora(binary, work, args.device, results, log)
            else:
                check_export(binary, work, args.device, results, log, moe=export == "export_mixtral")
        except Exception as error:
            results.error(export, f"{type(error).__name__}: {error}")
            traceback.print_exc()

    summary = {"fast_llm": str(binary), "torch": torch.__version__, "transformers": transformers.__version__,
               "device": args.device, "dtypes": dtypes, "results": results.records}
    destination = Path(os.environ["OUT"]) if os.environ.get("OUT") else work
    destination.mkdir(parents=True, exist_ok=True)
    (destination / "hf_check.json").write_text(json.dumps(summary, indent=1))
    if os.environ.get("OUT") and log.exists():
        shutil.copy(log, destination / "hf_check_fast_llm.log")
    failed = results.failed
    print(f"{len(results.records) - len(failed)} passed, {len(failed)} failed")
    print(f"details: {destination / 'hf_check.json'}; fast-llm output: {log}")
    if not args.keep and not args.work and not failed:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
