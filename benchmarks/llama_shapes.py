"""The dense Llama shapes of DESIGN.md §8, the mixture-of-experts shapes of issue 20 (Mixtral architecture: `experts`
and `experts_per_token` set), the post-training shapes of issue 23 (`lora` or `dpo` set) and the model-FLOPs formula,
shared by the GPU benchmark scripts.

Model FLOPs per token = 6 x (all matmul weights incl. the LM head) + 6 x layers x seq x (heads x head_size)
(DESIGN.md §8; the attention term is causal attention over full sequences). For a mixture of experts the matmul
weights are the active ones: the router and experts_per_token experts per layer (issue 20, "Memory and FLOPs").
The post-training shapes of issue 23 count what their step computes: LoRA (`lora`: frozen base) 4 x weights (the
forward and the input gradients; no weight gradient of a frozen matrix) + 6 x adapter weights + the same attention
term; DPO (`dpo`: the policy trained, a frozen reference of the same shape run forward) 6 + 2 = 8 x weights and
8 x layers x seq x heads x head_size, seq being the attention segment (one answer's sequence).
The same function recomputes our throughput from the resolved config a `fast-llm train gpt` run writes
(`experiment_dir/config.yaml`) and the PyTorch reference's (benchmarks/torch_gpu_llama_step.py), so both sides are
counted alike.

Plain Python, no torch: the benchmark driver imports it with any python3 (and runs it for a shape's kind).
"""

# name -> architecture, batch (sequences per step), targets from DESIGN.md §8.
#   rope: None for plain rotary, or the llama3 scaling parameters.
#   targets: min_speedup (ours / PyTorch's best mode), min_tflops (ours, model TFLOP/s).
SHAPES = {
    "smollm2-135m": dict(
        hidden_size=576, num_layers=30, heads=9, head_groups=3, head_size=64, intermediate_size=1536,
        vocab_size=49152, tied=True, rope_theta=100000.0, rope=None, rms_epsilon=1e-5,
        sequence_length=2048, batch=16,
        targets=dict(min_speedup=1.5, min_tflops=None),
        design="230k tokens/s (torch.compile) -> >= 1.5x"),
    "llama-3.2-1b": dict(
        hidden_size=2048, num_layers=16, heads=32, head_groups=8, head_size=64, intermediate_size=8192,
        vocab_size=128256, tied=True, rope_theta=500000.0,
        rope=dict(scale_factor=32.0, low_frequency_factor=1.0, high_frequency_factor=4.0,
                  original_context_length=8192),
        rms_epsilon=1e-5, sequence_length=4096, batch=4,
        targets=dict(min_speedup=1.35, min_tflops=530.0),
        design="47.5k tokens/s, 391 TFLOP/s (compile) -> >= 1.35x, >= 530 TFLOP/s"),
    "llama-3.2-3b": dict(
        hidden_size=3072, num_layers=28, heads=24, head_groups=8, head_size=128, intermediate_size=8192,
        vocab_size=128256, tied=True, rope_theta=500000.0,
        rope=dict(scale_factor=32.0, low_frequency_factor=1.0, high_frequency_factor=4.0,
                  original_context_length=8192),
        rms_epsilon=1e-5, sequence_length=4096, batch=2,
        targets=dict(min_speedup=None, min_tflops=600.0),
        design="17.7k tokens/s (eager) -> >= 600 TFLOP/s"),
    # Issue 20's MoE shapes (Mixtral architecture: rotary theta 1e6, untied head). Targets: >= 1.5x PyTorch's best
    # mode and >= 2.5x its eager mode; >= 40% (mixtral-tiny) / 30% (fine-grained) of the H200's dense bf16 peak
    # (989.4 TFLOP/s) in model TFLOP/s over active parameters.
    "mixtral-tiny": dict(
        hidden_size=1024, num_layers=8, heads=16, head_groups=8, head_size=64, intermediate_size=3584,
        experts=8, experts_per_token=2, vocab_size=32000, tied=False, rope_theta=1e6, rope=None, rms_epsilon=1e-5,
        sequence_length=4096, batch=4,
        targets=dict(min_speedup=1.5, min_speedup_eager=2.5, min_tflops=0.40 * 989.4),
        design="issue 20: >= 2.5x eager, >= 1.5x best mode, >= 40% of dense bf16 peak (396 TFLOP/s)"),
    "fine-grained": dict(
        hidden_size=2048, num_layers=16, heads=16, head_groups=4, head_size=128, intermediate_size=1024,
        experts=64, experts_per_token=8, vocab_size=50304, tied=False, rope_theta=1e6, rope=None, rms_epsilon=1e-5,
        sequence_length=4096, batch=2,
        targets=dict(min_speedup=1.5, min_speedup_eager=2.5, min_tflops=0.30 * 989.4),
        design="issue 20: >= 2.5x eager, >= 1.5x best mode, >= 30% of dense bf16 peak (297 TFLOP/s)"),
}

# Issue 23's post-training speed shapes, on the Llama-3.2-1B architecture and its 16,384 tokens per step. `lora`:
# rank and alpha of the adapters on the query and value projections, the rest frozen (PyTorch: a hand-written LoRA).
# `dpo`: beta of TRL's sigmoid loss against a frozen reference model of the same shape; the step's tokens are `batch`
# / 2 preference documents of 2 x sequence_length tokens, each cut into its chosen and its rejected sequence of
# sequence_length tokens (benchmarks/dpo_benchmark_data.py writes them; fast-llm attends within each sequence, as
# PyTorch's rows). Target (issue 23): >= 1.3x PyTorch's fastest mode.
SHAPES["llama-3.2-1b-lora"] = dict(
    SHAPES["llama-3.2-1b"], lora=dict(rank=8, alpha=16.0),
    targets=dict(min_speedup=1.3, min_tflops=None),
    design="issue 23: LoRA (rank 8, query + value) step >= 1.3x PyTorch + hand-written LoRA")
SHAPES["llama-3.2-1b-dpo"] = dict(
    SHAPES["llama-3.2-1b"], sequence_length=2048, batch=8, dpo=dict(beta=0.1),
    targets=dict(min_speedup=1.3, min_tflops=None),
    design="issue 23: DPO step (policy + reference forward) >= 1.3x PyTorch (TRL's sigmoid loss)")


def matmul_weights(hidden_size, num_layers, heads, head_groups, head_size, intermediate_size, vocab_size,
                   gated=True, experts=None, experts_per_token=None, **_):
    """Every matmul weight of the model: q, k, v, o and the MLP of each layer, and the LM head (counted even when
    tied to the embeddings, whose lookup is not a matmul). With experts: the router and experts_per_token experts'
    MLPs (the active weights of a token)."""
    attention = hidden_size * heads * head_size * 2 + hidden_size * head_groups * head_size * 2
    mlp = hidden_size * intermediate_size * (3 if gated else 2)
    if experts:
        mlp = mlp * experts_per_token + hidden_size * experts
    return num_layers * (attention + mlp) + hidden_size * vocab_size


def lora_weights(hidden_size, num_layers, heads, head_groups, head_size, rank):
    """The adapters' weights with LoRA on the query and the value projection of every layer: A [rank, in] and
    B [out, rank] for each."""
    query = rank * (hidden_size + heads * head_size)
    value = rank * (hidden_size + head_groups * head_size)
    return num_layers * (query + value)


def model_flops_per_token(sequence_length, num_layers, heads, head_size, lora=None, dpo=None, **architecture):
    """DESIGN.md §8: 6 x matmul weights + 6 x layers x seq x heads x head_size (forward + backward, causal).
    With `lora` (a dict with `rank`): the frozen weights' forward and input-gradient gemms only (4 x), the adapters'
    6 x. With `dpo`: the trained policy's 6 x and the reference's forward 2 x, for the weights and the attention."""
    weights = matmul_weights(num_layers=num_layers, heads=heads, head_size=head_size, **architecture)
    attention = num_layers * sequence_length * heads * head_size
    if lora:
        adapters = lora_weights(architecture["hidden_size"], num_layers, heads, architecture["head_groups"],
                                head_size, lora["rank"])
        return 4.0 * weights + 6.0 * adapters + 6.0 * attention
    if dpo:
        return 8.0 * weights + 8.0 * attention
    return 6.0 * weights + 6.0 * attention


def shape_flops_per_token(name):
    return model_flops_per_token(**SHAPES[name])


def architecture_from_fast_llm_config(config):
    """The formula's arguments from a resolved fast-llm config (dict of the YAML `fast-llm train` writes). Its
    sequence_length is the documents' maximum length (or the micro-batch): a DPO run's attention segments are a
    property of its data, which the caller takes from the shape table."""
    base = config["model"]["base_model"]
    decoder = base["decoder"]
    block = decoder["block"]
    mixer, mlp = block["mixer"], block["mlp"]
    # A mixture of experts (`type: moe`): its routed experts (the shared ones are active for every token too).
    moe = {}
    if mlp.get("type") == "moe" or "experts_per_token" in mlp:
        shared = int(mlp.get("shared_experts", 0) or 0)
        moe = dict(experts=int(mlp["experts"]) - shared, experts_per_token=int(mlp["experts_per_token"]) + shared)
    # LoRA with Fast-LLM's default placement (query and value); a reference model read by a dpo loss.
    post_training = {}
    peft = base.get("peft") or {}
    if peft.get("type") == "lora":
        post_training["lora"] = {"rank": int(peft["rank"])}
    losses = (base.get("head") or {}).get("losses") or {}
    dpo_losses = [loss for loss in losses.values() if (loss or {}).get("type") == "dpo"]
    if config.get("reference_models") and dpo_losses:
        post_training["dpo"] = {"beta": float(dpo_losses[0].get("beta", 0.1))}
    return dict(**moe, **post_training, hidden_size=int(base["hidden_size"]), num_layers=int(decoder["num_blocks"]),
                heads=int(mixer["heads"]), head_groups=int(mixer["head_groups"]), head_size=int(mixer["head_size"]),
                intermediate_size=int(mlp["intermediate_size"]), gated=bool(mlp.get("gated", False)),
                vocab_size=int(base["embeddings"]["vocab_size"]),
                sequence_length=int(config["data"].get("maximum_document_length") or config["data"]["micro_batch_size"]))


def shape_kind(name):
    """What a shape trains: "dpo" (a preference dataset is written for it first), "lora" or "dense"."""
    shape = SHAPES[name]
    return "dpo" if shape.get("dpo") else "lora" if shape.get("lora") else "dense"


if __name__ == "__main__":
    # `python3 benchmarks/llama_shapes.py --kind SHAPE`: the shape's kind, for benchmarks/gpu_training_benchmark.sh.
    import sys
    if len(sys.argv) != 3 or sys.argv[1] != "--kind" or sys.argv[2] not in SHAPES:
        sys.exit(f"usage: llama_shapes.py --kind SHAPE (one of {', '.join(sorted(SHAPES))})")
    print(shape_kind(sys.argv[2]))
