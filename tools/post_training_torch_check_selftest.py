#!/usr/bin/env python3
"""CPU self-test of tools/post_training_torch_check.py's real (non-dry) path, in fp32, without transformers or a GPU.

A hand-written Llama (RMSNorm, rotary with Hugging Face's half-split convention, grouped-query attention, SwiGLU, tied
embeddings) stands in for transformers' LlamaForCausalLM, with a save_pretrained that writes config.json and bf16
safetensors. The check script then runs as on the GPU machine (random model -> Hugging Face folder -> fast-llm loads
it and trains on the file the script wrote; the PyTorch loop trains the same model on the same batches), with
fast-llm on the CPU in fp32 and the PyTorch loop without autocast, at a tiny shape for a few steps. Both compute the
same thing in fp32, so the curves must agree to ~1e-5: this checks the data alignment (labels, spans, token data),
the DPO / GRPO formulas and metrics, the LoRA wiring and the optimizer settings. The learn criteria (first-10 against
last-50 means) cannot hold in a few steps and are left out; every other result must pass.

  python3 tools/post_training_torch_check_selftest.py [dpo,grpo,lora] [STEPS]
Needs torch (Debian's python3-torch 1.13 does; on Debian run it with /usr/bin/python3) and build/cpu/bin/fast-llm.
Exit status 0 when every comparison passes.
"""
import json, math, shutil, sys, tempfile, types
from pathlib import Path
import torch
sys.path.insert(0, str(Path(__file__).resolve().parent))
import post_training_torch_check as c
from check_common import load_safetensors, save_safetensors
c.DEVICE, c.AUTOCAST = "cpu", False
torch.set_num_threads(2)

def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
def rotate_half(x):
    a, b = x.chunk(2, -1)
    return torch.cat((-b, a), -1)
class Attention(torch.nn.Module):
    def __init__(s, cfg):
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        s.q_proj = torch.nn.Linear(h, cfg.num_attention_heads * d, bias=False)
        s.k_proj = torch.nn.Linear(h, cfg.num_key_value_heads * d, bias=False)
        s.v_proj = torch.nn.Linear(h, cfg.num_key_value_heads * d, bias=False)
        s.o_proj = torch.nn.Linear(cfg.num_attention_heads * d, h, bias=False)
        s.heads, s.kv, s.d = cfg.num_attention_heads, cfg.num_key_value_heads, d
        s.theta = cfg.rope_parameters["rope_theta"]
    def forward(s, x):
        B, L, _ = x.shape
        q = s.q_proj(x).view(B, L, s.heads, s.d).transpose(1, 2)
        k = s.k_proj(x).view(B, L, s.kv, s.d).transpose(1, 2)
        v = s.v_proj(x).view(B, L, s.kv, s.d).transpose(1, 2)
        inv = 1.0 / (s.theta ** (torch.arange(0, s.d, 2, dtype=torch.float32) / s.d))
        freqs = torch.outer(torch.arange(L, dtype=torch.float32), inv)
        emb = torch.cat((freqs, freqs), -1)
        cos, sin = emb.cos(), emb.sin()
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(s.heads // s.kv, 1); v = v.repeat_interleave(s.heads // s.kv, 1)
        a = (q @ k.transpose(-1, -2)) / math.sqrt(s.d)
        a = a.masked_fill(torch.triu(torch.ones(L, L, dtype=torch.bool), 1), float("-inf")).softmax(-1)
        return s.o_proj((a @ v).transpose(1, 2).reshape(B, L, -1))
class MLP(torch.nn.Module):
    def __init__(s, cfg):
        super().__init__()
        s.gate_proj = torch.nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        s.up_proj = torch.nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        s.down_proj = torch.nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)
    def forward(s, x):
        return s.down_proj(torch.nn.functional.silu(s.gate_proj(x)) * s.up_proj(x))
class Layer(torch.nn.Module):
    def __init__(s, cfg):
        super().__init__()
        s.self_attn, s.mlp, s.eps = Attention(cfg), MLP(cfg), cfg.rms_norm_eps
        s.input_layernorm = torch.nn.Module(); s.input_layernorm.weight = torch.nn.Parameter(torch.ones(cfg.hidden_size))
        s.post_attention_layernorm = torch.nn.Module()
        s.post_attention_layernorm.weight = torch.nn.Parameter(torch.ones(cfg.hidden_size))
    def forward(s, x):
        x = x + s.self_attn(rms(x, s.input_layernorm.weight, s.eps))
        return x + s.mlp(rms(x, s.post_attention_layernorm.weight, s.eps))
class Inner(torch.nn.Module):
    def __init__(s, cfg):
        super().__init__()
        s.embed_tokens = torch.nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        s.layers = torch.nn.ModuleList([Layer(cfg) for _ in range(cfg.num_hidden_layers)])
        s.norm = torch.nn.Module(); s.norm.weight = torch.nn.Parameter(torch.ones(cfg.hidden_size))
class Llama(torch.nn.Module):
    def __init__(s, cfg):
        super().__init__()
        s.config, s.model = cfg, Inner(cfg)
    def forward(s, input_ids, use_cache=False):
        x = s.model.embed_tokens(input_ids)
        for layer in s.model.layers:
            x = layer(x)
        x = rms(x, s.model.norm.weight, s.config.rms_norm_eps)
        return types.SimpleNamespace(logits=x @ s.model.embed_tokens.weight.t())
    def save_pretrained(s, folder):
        folder = Path(folder); folder.mkdir(parents=True, exist_ok=True)
        cfg = s.config
        config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": cfg.hidden_size,
                  "intermediate_size": cfg.intermediate_size, "num_hidden_layers": cfg.num_hidden_layers,
                  "num_attention_heads": cfg.num_attention_heads, "num_key_value_heads": cfg.num_key_value_heads,
                  "head_dim": cfg.head_dim, "rms_norm_eps": cfg.rms_norm_eps, "vocab_size": cfg.vocab_size,
                  "rope_theta": cfg.rope_parameters["rope_theta"], "tie_word_embeddings": True,
                  "max_position_embeddings": 4096, "hidden_act": "silu", "attention_bias": False,
                  "mlp_bias": False, "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2}
        (folder / "config.json").write_text(json.dumps(config))
        assert all(p.dtype == torch.bfloat16 for p in s.parameters())
        save_safetensors(folder / "model.safetensors", dict(s.named_parameters()))
fake = types.ModuleType("transformers"); fake.__version__ = "5.0.0"
fake.LlamaConfig = lambda **kw: types.SimpleNamespace(**kw)
fake.AutoModelForCausalLM = types.SimpleNamespace(from_config=lambda cfg, attn_implementation=None: Llama(cfg))
def load_file(path):
    return {name: tensor.float() for name, tensor in load_safetensors(path)[0].items()}
st = types.ModuleType("safetensors"); st.torch = types.SimpleNamespace(load_file=load_file)
sys.modules.update({"transformers": fake, "safetensors": st, "safetensors.torch": st.torch})

original_plan, original_config = c.plan, c.train_config
SHAPE = dict(c.TINY, vocab_size=700, hidden_size=48, head_dim=12)
def plan(check, dry_run):
    p = original_plan(check, True)
    p.update(shape=SHAPE, steps=int(sys.argv[2]) if len(sys.argv) > 2 else 5, per_step=2, warmup=2)
    return p
def train_config(*args, **kwargs):
    config = original_config(*args, **kwargs)
    config["model"]["distributed"].update(use_cuda=False, compute_dtype="fp32")
    return config
original_compare = c.compare_curves
def compare_curves(*args, **kwargs):  # a few steps cannot show learning: that criterion is the GPU run's
    return original_compare(*args, **dict(kwargs, learn_fraction=None))
c.plan, c.train_config, c.compare_curves = plan, train_config, compare_curves
binary = Path(__file__).resolve().parent.parent / "build/cpu/bin/fast-llm"
work = Path(tempfile.mkdtemp(prefix="post_training_torch_selftest_"))
results, failed = [], []
for check in (sys.argv[1] if len(sys.argv) > 1 else "dpo,grpo,lora").split(","):
    c.run_check(check, binary, work, False, results)
    for result in results[-1]["results"]:
        # Everything but the learn criterion must pass, and the curves must agree to fp32 accuracy.
        failures = [f for f in result["failures"] if "does not learn" not in f]
        if "smoothed_max_rel_diff" in result and not result["smoothed_max_rel_diff"] < 1e-4:
            failures.append(f"fp32 curves differ by {result['smoothed_max_rel_diff']:.1e}")
        if failures:
            failed.append(f"{result['label']}: {'; '.join(failures)}")
print("\n".join(failed) if failed else "every comparison agrees to fp32 accuracy")
print(f"{len(results)} checks run, {len(failed)} failed results (work directory {work})")
if not failed:
    shutil.rmtree(work, ignore_errors=True)
sys.exit(1 if failed else 0)
