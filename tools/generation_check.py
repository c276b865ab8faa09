#!/usr/bin/env python3
"""`fast-llm generate` against transformers' generate on the GPU machine (torch 2.11, transformers 5.17, no internet).

1. A Llama at the Llama-3.2-1B shape (hidden 2048, 16 layers, 32 heads, 8 KV heads, FFN 8192, vocab 128256, tied
   embeddings, rope_theta 500000 with llama3 rope scaling) with random weights (seeded), saved with save_pretrained
   (config.json + safetensors, fp32). --layers / --vocab make a shallower or smaller variant.
2. Correctness, fp32: greedy decoding of a few prompts of random ids (different lengths) by transformers (eager
   attention, one prompt at a time, no EOS) and by fast-llm (all prompts in one ragged batch, --ignore-eos) must give
   identical tokens. On a mismatch the step and transformers' gap between its two best logits there are printed (a
   gap near fp32 round-off is a tie, not a bug).
3. Speed, bf16: tokens/s (new tokens / wall time of the whole generate call, prefill included) for batch 1 and 16,
   128 prompt tokens + 256 new tokens, of fast-llm, transformers eager (its default attention, no compile) and
   transformers with cache_implementation="static" (which transformers compiles with torch.compile itself), each
   after a warm-up.
   fast-llm's time is the one it logs for its second batch (the first is its warm-up); the model load is not timed.
Prints a table; writes generation_check.json into $OUT when set, else the work directory. Exit 0 when the tokens
match, 1 when they do not, 2 on a set-up error.

Usage: python3 tools/generation_check.py --fast-llm build/device/bin/fast-llm [--work DIR] [--layers 16]
                                          [--vocab 128256] [--skip-compile] [--batches 1,16]
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time


def log(message):
    print(message, flush=True)


def llama_config(transformers, layers, vocab):
    rope = {"rope_type": "llama3", "factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
            "original_max_position_embeddings": 8192}
    common = dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=layers, num_attention_heads=32,
                  num_key_value_heads=8, head_dim=64, vocab_size=vocab, tie_word_embeddings=True,
                  max_position_embeddings=131072, rms_norm_eps=1e-5, hidden_act="silu", attention_bias=False,
                  mlp_bias=False, bos_token_id=0, eos_token_id=1)
    if int(transformers.__version__.split(".")[0]) >= 5:
        # transformers 5: rope_theta lives in rope_parameters.
        return transformers.LlamaConfig(rope_parameters={**rope, "rope_theta": 500000.0}, **common)
    return transformers.LlamaConfig(rope_theta=500000.0, rope_scaling=rope, **common)


def make_model(torch, transformers, directory, layers, vocab):
    torch.manual_seed(1234)
    config = llama_config(transformers, layers, vocab)
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(config)
    model.save_pretrained(directory, safe_serialization=True)
    with open(os.path.join(directory, "config.json")) as file:
        saved = json.load(file)
    log(f"model: {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters, rope "
        f"{saved.get('rope_parameters') or saved.get('rope_scaling')}, saved to {directory}")
    del model
    torch.cuda.empty_cache()


def run_fast_llm(binary, directory, prompts, work, name, new_tokens, batch_size, dtype):
    prompts_file = os.path.join(work, f"{name}_prompts.jsonl")
    with open(prompts_file, "w") as file:
        for ids in prompts:
            file.write(json.dumps({"ids": ids}) + "\n")
    output = os.path.join(work, f"{name}_completions.jsonl")
    command = [binary, "generate", "--pretrained", directory, "--format", "llama", "--prompts-file", prompts_file,
               "--max-new-tokens", str(new_tokens), "--ignore-eos", "--batch-size", str(batch_size), "--dtype", dtype,
               "--output", output]
    started = time.time()
    result = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if result.returncode != 0:
        log(result.stderr[-4000:])
        raise RuntimeError(f"fast-llm generate failed ({result.returncode}): {' '.join(command)}")
    batches = re.findall(r"Batch (\d+)/(\d+): (\d+) prompts, (\d+) new tokens in ([0-9.]+) s", result.stderr)
    with open(output) as file:
        completions = [json.loads(line)["completion_ids"] for line in file]
    log(f"  fast-llm {name}: {len(completions)} prompts in {time.time() - started:.1f} s (process, load included)")
    return completions, batches


def hf_generate(torch, model, input_ids, new_tokens):
    torch.cuda.synchronize()
    started = time.perf_counter()
    output = model.generate(input_ids, max_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    torch.cuda.synchronize()
    return output[:, input_ids.shape[1]:], time.perf_counter() - started


def correctness(torch, transformers, binary, directory, work, vocab, results):
    generator = torch.Generator().manual_seed(7)
    lengths = [5, 17, 32, 64]
    new_tokens = 32
    prompts = [torch.randint(2, vocab, (length,), generator=generator).tolist() for length in lengths]
    ours, _ = run_fast_llm(binary, directory, prompts, work, "fp32", new_tokens, len(prompts), "fp32")
    model = transformers.LlamaForCausalLM.from_pretrained(directory, attn_implementation="eager")
    model = model.to(device="cuda", dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    mismatches = 0
    for index, prompt in enumerate(prompts):
        input_ids = torch.tensor([prompt], device="cuda")
        with torch.no_grad():
            reference, _ = hf_generate(torch, model, input_ids, new_tokens)
        reference = reference[0].tolist()
        if reference == ours[index]:
            log(f"  prompt {index} ({len(prompt)} tokens): {new_tokens} identical tokens")
            continue
        mismatches += 1
        step = next(i for i, (a, b) in enumerate(zip(reference, ours[index])) if a != b)
        with torch.no_grad():
            logits = model(torch.tensor([prompt + reference[:step]], device="cuda")).logits[0, -1].float()
        top = torch.topk(logits, 2).values.tolist()
        log(f"  prompt {index}: MISMATCH at step {step}: transformers {reference[step]}, fast-llm {ours[index][step]}; "
            f"transformers' top-2 logit gap there {top[0] - top[1]:.3e} (of {abs(top[0]):.3e})")
        log(f"    transformers {reference}\n    fast-llm     {ours[index]}")
    results["correctness"] = {"prompts": len(prompts), "new_tokens": new_tokens, "mismatches": mismatches}
    del model
    torch.cuda.empty_cache()
    return mismatches == 0


def speed(torch, transformers, binary, directory, work, vocab, batches, skip_compile, results):
    prompt_tokens, new_tokens = 128, 256
    generator = torch.Generator().manual_seed(11)
    rows = []
    ours = {}
    for batch in batches:
        prompts = [torch.randint(2, vocab, (prompt_tokens,), generator=generator).tolist() for _ in range(2 * batch)]
        _, timings = run_fast_llm(binary, directory, prompts, work, f"bf16_batch{batch}", new_tokens, batch, "bf16")
        _, _, count, tokens, seconds = timings[-1]
        ours[batch] = int(tokens) / float(seconds)
    model = transformers.LlamaForCausalLM.from_pretrained(directory).to(device="cuda", dtype=torch.bfloat16).eval()
    model.generation_config.eos_token_id = None
    eager, compiled = {}, {}
    for batch in batches:
        input_ids = torch.randint(2, vocab, (batch, prompt_tokens), generator=generator).cuda()
        with torch.no_grad():
            hf_generate(torch, model, input_ids, 8)
            _, seconds = hf_generate(torch, model, input_ids, new_tokens)
        eager[batch] = batch * new_tokens / seconds
        log(f"  transformers eager batch {batch}: {eager[batch]:.1f} tokens/s")
    if not skip_compile:
        # transformers compiles the decoding forward itself when the cache is static (generation_config.compile_config):
        # wrapping model.forward in torch.compile as well made its CUDA graphs overwrite the cache's outputs.
        model.generation_config.cache_implementation = "static"
        for batch in batches:
            input_ids = torch.randint(2, vocab, (batch, prompt_tokens), generator=generator).cuda()
            started = time.time()
            try:
                with torch.no_grad():
                    for _ in range(2):
                        hf_generate(torch, model, input_ids, new_tokens)
                    log(f"  transformers static+compile batch {batch}: warm-up (compilation) "
                        f"{time.time() - started:.0f} s")
                    _, seconds = hf_generate(torch, model, input_ids, new_tokens)
            except Exception as error:  # the comparison goes on without this column
                log(f"  transformers static+compile batch {batch} failed: {type(error).__name__}: {error}")
                continue
            compiled[batch] = batch * new_tokens / seconds
            log(f"  transformers static+compile batch {batch}: {compiled[batch]:.1f} tokens/s")
    log("")
    log("| batch | fast-llm tokens/s | transformers eager | transformers static + compile | vs eager | vs compile |")
    log("|---|---|---|---|---|---|")
    for batch in batches:
        best = compiled.get(batch)
        best_text = f"{best:.1f}" if best else "-"
        ratio = f"{ours[batch] / best:.2f}x" if best else "-"
        log(f"| {batch} | {ours[batch]:.1f} | {eager[batch]:.1f} | {best_text} | {ours[batch] / eager[batch]:.2f}x "
            f"| {ratio} |")
        rows.append({"batch": batch, "fast_llm": ours[batch], "transformers_eager": eager[batch],
                     "transformers_static_compile": best})
    results["speed"] = {"prompt_tokens": prompt_tokens, "new_tokens": new_tokens, "rows": rows}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fast-llm", required=True)
    parser.add_argument("--work")
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--skip-compile", action="store_true")
    parser.add_argument("--skip-speed", action="store_true")
    arguments = parser.parse_args()
    try:
        import torch
        import transformers
    except ImportError as error:
        log(f"set-up: {error}")
        return 2
    if not torch.cuda.is_available() or not os.access(arguments.fast_llm, os.X_OK):
        log(f"set-up: needs a GPU and an executable fast-llm ({arguments.fast_llm})")
        return 2
    work = arguments.work or tempfile.mkdtemp(prefix="fast_llm_generation_")
    os.makedirs(work, exist_ok=True)
    directory = os.path.join(work, "llama")
    log(f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.cuda.get_device_name()}")
    results = {"layers": arguments.layers, "vocab": arguments.vocab}
    started = time.time()
    make_model(torch, transformers, directory, arguments.layers, arguments.vocab)
    log("correctness (fp32, greedy):")
    matched = correctness(torch, transformers, arguments.fast_llm, directory, work, arguments.vocab, results)
    if not arguments.skip_speed:
        log("speed (bf16):")
        speed(torch, transformers, arguments.fast_llm, directory, work, arguments.vocab,
              [int(batch) for batch in arguments.batches.split(",")], arguments.skip_compile, results)
    results["seconds"] = time.time() - started
    destination = os.environ.get("OUT") or work
    with open(os.path.join(destination, "generation_check.json"), "w") as file:
        json.dump(results, file, indent=2)
    log(f"{'PASS' if matched else 'FAIL'}: greedy tokens {'identical' if matched else 'differ'}; "
        f"{results['seconds']:.0f} s in all")
    return 0 if matched else 1


if __name__ == "__main__":
    sys.exit(main())
