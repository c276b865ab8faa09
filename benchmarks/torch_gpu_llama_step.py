"""PyTorch reference for the GPU training benchmark (benchmarks/gpu_training_benchmark.sh, DESIGN.md §8).

transformers' LlamaForCausalLM built from a LlamaConfig of one of the §8 shapes (benchmarks/llama_shapes.py), or
MixtralForCausalLM from a MixtralConfig for the mixture-of-experts shapes of issue 20 (router load-balancing loss on,
coefficient 0.01 as the fast-llm configs; the experts as transformers implements them by default), SDPA attention,
fp32 parameters, torch.autocast(bf16), torch.optim.AdamW(fused=True), gradient-norm clipping at 1.0 (as fast-llm's
default), random tokens, `batch x sequence_length` tokens per step in one forward.

Issue 23's post-training shapes (their settings in the shape table, benchmarks/llama_shapes.py; --lora / --dpo set
them on any Llama shape), pieces in benchmarks/torch_post_training.py:
  --lora RANK,ALPHA  a hand-written LoRA on every q_proj and v_proj (A normal(0, 0.02), B zero), the rest of the
                     model frozen (requires_grad False), AdamW and clipping over the adapters only; same call.
  --dpo BETA         TRL's sigmoid DPO loss: a frozen reference copy of the model (bf16 weights, eval, forward
                     under torch.no_grad), then the policy's forward and backward, on the preference documents of
                     benchmarks/dpo_benchmark_data.py (the file fast-llm trains on holds the same ones), each cut into
                     its chosen and its rejected row of sequence_length tokens: `batch` rows = batch / 2 pairs per
                     step. Under torch.compile the model and its log-probability sums over the spans are compiled
                     together, for the policy and for the reference.

Modes (each in this process, one after the other, the optimizer state and caches released in between):
  eager          the model as is
  compile        torch.compile(model) (the whole model; the optimizer step stays eager)
  compile_layers torch.compile of each decoder layer only ("regional" compilation: much shorter warm-up)
The first `--warmup` steps of each mode (compilation included) are not timed. Prints one JSON line per mode as soon
as it is done, so a later mode that fails or hangs loses nothing:
  {"mode", "ok", "median_step_ms", "tokens_per_second", "model_tflops", "max_allocated_mib", "max_reserved_mib",
   "warmup_s", "final_loss", ...}  or  {"mode", "ok": false, "error": "..."}
Exit status 0 unless the set-up itself fails (no CUDA, no transformers).

  python3 benchmarks/torch_gpu_llama_step.py --shape llama-3.2-1b --modes eager,compile --steps 15
  python3 benchmarks/torch_gpu_llama_step.py --shape llama-3.2-1b-dpo --modes eager,compile --steps 10
"""
import copy
import argparse
import gc
import json
import math
import os
import statistics
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_shapes import SHAPES, model_flops_per_token  # noqa: E402


def emit(record):
    print(json.dumps(record), flush=True)


def llama_config(transformers, shape):
    """A LlamaConfig of the shape, for transformers 5 (rope_parameters) and 4 (rope_theta + rope_scaling)."""
    kwargs = dict(vocab_size=shape["vocab_size"], hidden_size=shape["hidden_size"],
                  intermediate_size=shape["intermediate_size"], num_hidden_layers=shape["num_layers"],
                  num_attention_heads=shape["heads"], num_key_value_heads=shape["head_groups"],
                  head_dim=shape["head_size"], max_position_embeddings=max(8192, shape["sequence_length"]),
                  rms_norm_eps=shape["rms_epsilon"], tie_word_embeddings=shape["tied"], hidden_act="silu",
                  attention_bias=False, mlp_bias=False, use_cache=False, initializer_range=0.02)
    rope = {"rope_type": "default", "rope_theta": shape["rope_theta"]}
    if shape["rope"]:
        rope = {"rope_type": "llama3", "rope_theta": shape["rope_theta"], "factor": shape["rope"]["scale_factor"],
                "low_freq_factor": shape["rope"]["low_frequency_factor"],
                "high_freq_factor": shape["rope"]["high_frequency_factor"],
                "original_max_position_embeddings": shape["rope"]["original_context_length"]}
    major = int(transformers.__version__.split(".")[0])
    if major >= 5:
        config = transformers.LlamaConfig(rope_parameters=rope, **kwargs)
    else:
        scaling = {key: value for key, value in rope.items() if key != "rope_theta"}
        config = transformers.LlamaConfig(rope_theta=rope["rope_theta"],
                                          rope_scaling=None if rope["rope_type"] == "default" else scaling, **kwargs)
    return config


def mixtral_config(transformers, shape):
    """A MixtralConfig of an MoE shape (head size hidden / heads, as both MoE shapes have), transformers 5 or 4."""
    kwargs = dict(vocab_size=shape["vocab_size"], hidden_size=shape["hidden_size"],
                  intermediate_size=shape["intermediate_size"], num_hidden_layers=shape["num_layers"],
                  num_attention_heads=shape["heads"], num_key_value_heads=shape["head_groups"],
                  max_position_embeddings=max(8192, shape["sequence_length"]), rms_norm_eps=shape["rms_epsilon"],
                  tie_word_embeddings=shape["tied"], hidden_act="silu", num_local_experts=shape["experts"],
                  num_experts_per_tok=shape["experts_per_token"], output_router_logits=True,
                  router_aux_loss_coef=0.01, router_jitter_noise=0.0, sliding_window=None, attention_dropout=0.0,
                  use_cache=False, initializer_range=0.02)
    if shape["hidden_size"] // shape["heads"] != shape["head_size"]:
        raise ValueError(f"head size {shape['head_size']} is not hidden / heads")
    if int(transformers.__version__.split(".")[0]) >= 5:
        return transformers.MixtralConfig(rope_parameters={"rope_type": "default", "rope_theta": shape["rope_theta"]},
                                          **kwargs)
    return transformers.MixtralConfig(rope_theta=shape["rope_theta"], **kwargs)


def describe_rope(config):
    for name in ("rope_parameters", "rope_scaling"):
        value = getattr(config, name, None)
        if value:
            return {name: value}
    return {"rope_theta": getattr(config, "rope_theta", None)}


def build_model(torch, transformers, config):
    """The model on the GPU in fp32; built under the CUDA device so the initialisation runs there (seconds, not the
    minutes a 3B model takes on the host)."""
    def make():
        return transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    try:
        with torch.device("cuda"):
            model = make()
    except Exception:  # some versions initialise part of the model on the host explicitly
        traceback.print_exc(file=sys.stderr)
        model = make()
    model = model.to(device="cuda", dtype=torch.float32)
    model.train()
    attention = getattr(model.config, "_attn_implementation", None)
    return model, attention


def dpo_step_loss(torch, post, policy, reference, beta):
    """The DPO step's loss on a (tokens, mask) batch: the reference's span sums without gradient, then the
    policy's; `policy` and `reference` map (tokens, mask) to per-row sums (compiled or not)."""
    def step_loss(batch):
        tokens, mask = batch
        with torch.no_grad():
            reference_sums = reference(tokens, mask)
        return post.dpo_sigmoid_loss(policy(tokens, mask), reference_sums, beta)
    return step_loss


def span_sums_of(post, model, keep=None):
    """(tokens, mask) -> the rows' span sums; with `keep` the model computes the logits of the last `keep` positions
    only (transformers' logits_to_keep, TRL's use_logits_to_keep), which must cover every span (post.logits_to_keep)."""
    def span_sums(tokens, mask):
        if keep is None:
            return post.span_log_probability_sums(model(input_ids=tokens).logits, tokens, mask)
        logits = model(input_ids=tokens, logits_to_keep=keep).logits
        return post.span_log_probability_sums(logits, tokens[:, -keep:], mask[:, -keep:])
    return span_sums


def run_mode(torch, model, mode, args, shape, batches, flops_per_token, reference=None):
    """One mode's timed steps. With `reference` (DPO) a batch is (tokens, mask) and the loss TRL's; else a batch is
    tokens and the loss the model's own cross-entropy."""
    tokens_per_step = shape["batch"] * shape["sequence_length"]
    record = {"mode": mode, "ok": False, "shape": args.shape, "batch": shape["batch"],
              "sequence_length": shape["sequence_length"], "tokens_per_step": tokens_per_step}
    optimizer = None
    try:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        if mode not in ("eager", "compile", "compile_layers"):
            raise ValueError(f"unknown mode {mode}")
        if mode == "compile_layers":
            for each in [model] + ([reference] if reference is not None else []):
                for layer in each.model.layers:
                    layer.compile()
        # compile: the whole model (with DPO: each model with its span sums, one graph each).
        if reference is not None:
            import torch_post_training as post
            # One count for every batch (a constant for torch.compile): the largest any batch needs.
            keep = max(post.logits_to_keep(mask) for _, mask in batches) if args.logits_to_keep else None
            record["logits_to_keep"] = keep
            policy_sums, reference_sums = span_sums_of(post, model, keep), span_sums_of(post, reference, keep)
            if mode == "compile":
                policy_sums, reference_sums = torch.compile(policy_sums), torch.compile(reference_sums)
            step_loss = dpo_step_loss(torch, post, policy_sums, reference_sums, args.dpo)
        else:
            forward = torch.compile(model) if mode == "compile" else model

            def step_loss(tokens):
                return forward(input_ids=tokens, labels=tokens).loss
        parameters = [parameter for parameter in model.parameters() if parameter.requires_grad]
        optimizer = torch.optim.AdamW(parameters, lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, eps=1e-8,
                                      fused=True)
        times, losses = [], []
        warmup_start = time.perf_counter()
        for step in range(args.warmup + args.steps):
            batch = batches[step % len(batches)]
            torch.cuda.synchronize()
            start = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = step_loss(batch)
            loss.backward()
            if args.clip:
                torch.nn.utils.clip_grad_norm_(parameters, 1.0, foreach=True)
            optimizer.step()
            torch.cuda.synchronize()
            elapsed = time.perf_counter() - start
            if step == args.warmup - 1 or (args.warmup == 0 and step == 0):
                record["warmup_s"] = time.perf_counter() - warmup_start
            if step >= args.warmup:
                times.append(elapsed)
                losses.append(float(loss.detach()))
        median = statistics.median(times)
        record.update(
            ok=True, steps=len(times), warmup=args.warmup, median_step_ms=median * 1e3,
            min_step_ms=min(times) * 1e3, max_step_ms=max(times) * 1e3,
            tokens_per_second=tokens_per_step / median,
            model_tflops=flops_per_token * tokens_per_step / median / 1e12,
            max_allocated_mib=torch.cuda.max_memory_allocated() / 2**20,
            max_reserved_mib=torch.cuda.max_memory_reserved() / 2**20,
            final_loss=losses[-1], first_timed_loss=losses[0],
            expected_initial_loss=math.log(2.0) if reference is not None else math.log(shape["vocab_size"]))
    except Exception as error:  # report and go on with the next mode
        traceback.print_exc(file=sys.stderr)
        message = f"{type(error).__name__}: {error}"
        record.update(ok=False, error=message[:2000])
        try:
            record["max_allocated_mib"] = torch.cuda.max_memory_allocated() / 2**20
        except Exception:
            pass
    finally:
        if optimizer is not None:
            del optimizer
        model.zero_grad(set_to_none=True)
        if mode == "compile_layers":  # back to plain modules for a later mode
            for each in [model] + ([reference] if reference is not None else []):
                for layer in each.model.layers:
                    if hasattr(layer, "_compiled_call_impl"):
                        layer._compiled_call_impl = None
        if mode != "eager":
            try:
                torch._dynamo.reset()
            except Exception:
                pass
        gc.collect()
        try:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        except Exception:
            pass
    return record


def preference_batches(torch, shape, steps, device="cuda"):
    """The first `steps` steps of the DPO shape's data, as fast-llm reads the file (documents in file order, batch / 2
    per step): (tokens [batch, sequence_length], span mask) on `device`, chosen rows first."""
    import torch_post_training as post
    from dpo_benchmark_data import pairs_per_step, preference_pairs
    pairs = pairs_per_step(shape["batch"])
    documents, chosen, rejected = preference_pairs(shape["vocab_size"], steps * pairs, shape["sequence_length"])
    batches = []
    for step in range(steps):
        window = slice(step * pairs, (step + 1) * pairs)
        rows, spans = post.preference_rows(documents[window], chosen[window], rejected[window])
        if any(len(row) != shape["sequence_length"] for row in rows):
            raise RuntimeError("a preference row is not sequence_length tokens long")
        batches.append((torch.tensor(rows, device=device), post.span_mask(spans, shape["sequence_length"], device)))
    return batches


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", required=True, choices=sorted(SHAPES))
    parser.add_argument("--modes", default="eager,compile",
                        help="comma-separated: eager, compile, compile_layers (default: eager,compile)")
    parser.add_argument("--steps", type=int, default=15, help="timed steps per mode")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (compilation included)")
    parser.add_argument("--batch", type=int, help="sequences per step (default: the shape's)")
    parser.add_argument("--sequence-length", type=int, help="tokens per sequence (default: the shape's)")
    parser.add_argument("--no-clip", dest="clip", action="store_false", help="skip gradient-norm clipping")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lora", metavar="RANK,ALPHA",
                        help="hand-written LoRA on q_proj and v_proj, the rest frozen (default: the shape's `lora`)")
    parser.add_argument("--dpo", metavar="BETA", type=float,
                        help="DPO step against a frozen reference copy (default: the shape's `dpo` beta)")
    parser.add_argument("--logits-to-keep", action="store_true",
                        help="DPO: both models compute the logits of the positions the spans read only, from the "
                             "batch's first span on (TRL's use_logits_to_keep; off by default, as in TRL)")
    parser.add_argument("--experts-implementation",
                        help="MoE shapes: transformers' experts backend (eager, batched_mm, grouped_mm; transformers 5), "
                             "default: transformers' own choice")
    args = parser.parse_args()
    shape = dict(SHAPES[args.shape])
    if args.batch:
        shape["batch"] = args.batch
    if args.sequence_length:
        shape["sequence_length"] = args.sequence_length
    modes = [mode for mode in args.modes.split(",") if mode]
    if args.lora:
        try:
            rank, alpha = args.lora.split(",")
            shape["lora"] = dict(rank=int(rank), alpha=float(alpha))
        except ValueError:
            parser.error(f"--lora takes RANK,ALPHA (e.g. 8,16), got {args.lora!r}")
    if args.dpo is not None:
        shape["dpo"] = dict(beta=args.dpo)
    args.dpo = shape["dpo"]["beta"] if shape.get("dpo") else None
    if shape.get("lora") and shape.get("dpo"):
        parser.error("LoRA and DPO together are not a benchmark shape: choose one")
    if shape.get("dpo") and (shape["batch"] % 2 or shape.get("experts")):
        parser.error(f"DPO needs a dense shape and an even batch (rows come in pairs), got batch {shape['batch']}")

    try:
        import torch
        import transformers
    except ImportError as error:
        emit({"mode": "setup", "ok": False, "error": f"needs torch and transformers: {error}"})
        return 2
    if not torch.cuda.is_available():
        emit({"mode": "setup", "ok": False, "error": "no CUDA device"})
        return 2
    torch.manual_seed(args.seed)
    setup = {"mode": "setup", "ok": True, "framework": f"pytorch {torch.__version__}",
             "transformers": transformers.__version__, "device": torch.cuda.get_device_name(0), "shape": args.shape,
             "clip_grad_norm": args.clip, "lora": shape.get("lora"), "dpo": shape.get("dpo")}
    try:
        config = mixtral_config(transformers, shape) if shape.get("experts") else llama_config(transformers, shape)
        start = time.perf_counter()
        model, attention = build_model(torch, transformers, config)
        if args.experts_implementation:
            if not hasattr(model, "set_experts_implementation"):
                raise ValueError(f"transformers {transformers.__version__} has no experts backends")
            model.set_experts_implementation(args.experts_implementation)
        reference = None
        if shape.get("lora"):
            import torch_post_training as post
            adapters = post.apply_lora(model, shape["lora"]["rank"], shape["lora"]["alpha"], seed=args.seed)
            setup["trainable_parameters"] = sum(parameter.numel() for parameter in adapters)
        if shape.get("dpo"):
            # The reference holds bf16 weights (what autocast computes with: no per-step casts of a frozen copy);
            # its buffers (the rotary frequencies) stay fp32, as the policy's, so both start computing the same.
            reference = copy.deepcopy(model).eval()
            for parameter in reference.parameters():
                parameter.requires_grad_(False)
                parameter.data = parameter.data.to(torch.bfloat16)
        setup.update(build_s=time.perf_counter() - start, attention=attention, rope=describe_rope(config),
                     parameters=sum(parameter.numel() for parameter in model.parameters()),
                     model_class=type(model).__name__,
                     experts_implementation=getattr(model.config, "_experts_implementation", None),
                     tied=model.get_output_embeddings().weight is model.get_input_embeddings().weight)
    except Exception as error:
        traceback.print_exc(file=sys.stderr)
        setup.update(ok=False, error=f"{type(error).__name__}: {error}"[:2000])
        emit(setup)
        return 2
    emit(setup)
    flops_per_token = model_flops_per_token(**shape)
    if shape.get("dpo"):
        batches = preference_batches(torch, shape, 4)
    else:
        generator = torch.Generator(device="cuda").manual_seed(args.seed)
        batches = [torch.randint(0, shape["vocab_size"], (shape["batch"], shape["sequence_length"]), device="cuda",
                                 generator=generator) for _ in range(4)]
    for mode in modes:
        emit(run_mode(torch, model, mode, args, shape, batches, flops_per_token, reference))
    return 0


if __name__ == "__main__":
    sys.exit(main())
