"""Table of benchmarks/gpu_training_benchmark.sh: reads, for each shape, fast-llm's metrics.jsonl and resolved config and
the PyTorch script's JSON lines, and prints step time, tokens/s, model TFLOP/s, peak memory, our/PyTorch ratios and the
targets of the shape table (DESIGN.md §8, issues 20 and 23; pass/miss). Writes benchmark.json into the work folder.
Plain Python (PyYAML optional). Model TFLOP/s count what each step computes (benchmarks/llama_shapes.py): for LoRA no
weight gradient of a frozen matrix, for DPO the reference's forward besides the policy's step, over the attention
segments of the data (one answer's sequence: the shape table's sequence_length, which the resolved config cannot give).

  python3 benchmarks/gpu_benchmark_report.py --work DIR [--ours-warmup 2] shape...
"""
import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_shapes import SHAPES, architecture_from_fast_llm_config, model_flops_per_token  # noqa: E402

GIB = 1024.0


def read_rc(path):
    try:
        return path.read_text().strip()
    except OSError:
        return "missing"


def ours_result(directory, shape_name, warmup):
    experiment = directory / "fast_llm"
    result = {"impl": "fast-llm", "ok": False, "rc": read_rc(directory / "fast_llm.rc")}
    runs = sorted((experiment / "runs").glob("*/metrics.jsonl"), key=lambda p: int(p.parent.name)) \
        if (experiment / "runs").is_dir() else []
    if not runs:
        result["error"] = f"no metrics.jsonl (exit {result['rc']}; see {directory / 'fast_llm.log'})"
        return result
    records = []
    for line in runs[-1].read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("phase") == "training":
            records.append(record)
    timed = [record for record in records if record["iteration"] > warmup]
    if not timed:
        result["error"] = f"{len(records)} training records, none after the {warmup} warm-up steps"
        return result
    # The resolved config gives the architecture actually run; the shape table is the fallback.
    architecture = None
    try:
        import yaml
        architecture = architecture_from_fast_llm_config(yaml.safe_load((experiment / "config.yaml").read_text()))
    except Exception as error:  # no PyYAML or no config: same numbers from the table
        result["architecture_note"] = f"from llama_shapes.py ({type(error).__name__})"
    if architecture is None:
        architecture = {key: SHAPES[shape_name][key] for key in
                        ("hidden_size", "num_layers", "heads", "head_groups", "head_size", "intermediate_size",
                         "vocab_size", "sequence_length", "experts", "experts_per_token", "lora", "dpo")
                        if key in SHAPES[shape_name]}
    if architecture.get("dpo"):  # the attention segments are the data's (one answer's sequence)
        architecture["sequence_length"] = SHAPES[shape_name]["sequence_length"]
    step_ms = statistics.median(record["step_time_ms"] for record in timed)
    tokens_per_step = timed[-1]["consumed_tokens"] // timed[-1]["iteration"]
    key = next((name for name in ("lm_head_loss", "language_model_loss", "cross_entropy") if name in records[0]),
               None)
    losses = [record.get(key) for record in records]
    result.update(
        ok=True, steps=len(timed), median_step_ms=step_ms, tokens_per_step=tokens_per_step,
        tokens_per_second=tokens_per_step / step_ms * 1e3,
        logged_tokens_per_second=statistics.median(record["tokens_per_sec_per_gpu"] for record in timed),
        logged_model_tflops=statistics.median(record["model_tflops"] for record in timed),
        model_tflops=model_flops_per_token(**architecture) * tokens_per_step / step_ms * 1e-9,
        max_allocated_mib=max(record["max_allocated"] for record in records),
        max_reserved_mib=max(record["max_reserved"] for record in records),
        data_wait_ms=statistics.median(record.get("data_wait_ms", 0.0) for record in timed),
        first_loss=losses[0], last_loss=losses[-1], architecture=architecture,
        metrics=str(runs[-1]))
    if result["rc"] != "0":  # numbers from a run that did not finish (timed out, crashed at the end)
        result["impl"] = f"fast-llm (exit {result['rc']})"
    return result


def torch_results(directory):
    results, setup = {}, {}
    path = directory / "torch.jsonl"
    rc = read_rc(directory / "torch.rc")
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("mode") == "setup":
                setup = record
            else:
                results[record["mode"]] = dict(record, impl=f"torch {record['mode']}")
    return results, setup, rc


def busy_gpu(path):
    """Median SM clock (MHz) and power (W) of the samples taken while the GPU was busy (power above half the run's
    highest), from gpu_training_benchmark.sh's nvidia-smi log; None when there is none."""
    samples = []
    try:
        for line in path.read_text().splitlines():
            fields = [field.strip() for field in line.split(",")]
            if len(fields) == 2:
                try:
                    samples.append((float(fields[0]), float(fields[1])))
                except ValueError:
                    pass
    except OSError:
        return None
    if not samples:
        return None
    top = max(power for _, power in samples)
    if top <= 0:
        return None
    busy = [sample for sample in samples if sample[1] >= top / 2]
    clocks, powers = sorted(clock for clock, _ in busy), sorted(power for _, power in busy)
    return {"sm_clock_mhz": clocks[len(clocks) // 2], "power_w": powers[len(powers) // 2], "samples": len(busy)}


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def verdict(value, target):
    if target is None:
        return None
    if value is None:
        return "n/a"
    return "pass" if value >= target else "miss"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", required=True)
    parser.add_argument("--ours-warmup", type=int, default=2)
    parser.add_argument("--modes", default="eager,compile,compile_layers")
    parser.add_argument("shapes", nargs="+")
    args = parser.parse_args()
    work = Path(args.work)
    report, lines = {}, []
    width = max([14] + [len(shape) for shape in args.shapes])
    header = (f"{'shape':<{width}} {'run':<20} {'step ms':>9} {'tokens/s':>10} {'TFLOP/s':>8} {'(logged)':>8} "
              f"{'alloc GiB':>9} {'resv GiB':>8} {'ours/this':>9}")
    lines += [header, "-" * len(header)]
    verdicts = []
    for shape in args.shapes:
        directory = work / shape
        ours = ours_result(directory, shape, args.ours_warmup)
        torch_modes, setup, torch_rc = torch_results(directory)
        expected = [mode for mode in args.modes.split(",") if mode in torch_modes] or sorted(torch_modes)
        rows = [ours] + [torch_modes[mode] for mode in expected]
        for row in rows:
            if row.get("ok"):
                ratio = None
                if row is not ours and ours.get("ok"):
                    ratio = ours["tokens_per_second"] / row["tokens_per_second"]
                lines.append(
                    f"{shape:<{width}} {row['impl']:<20} {row['median_step_ms']:>9.1f} {row['tokens_per_second']:>10.0f} "
                    f"{row['model_tflops']:>8.1f} {fmt(row.get('logged_model_tflops'), '8.1f'):>8} "
                    f"{row['max_allocated_mib'] / GIB:>9.2f} {row['max_reserved_mib'] / GIB:>8.2f} "
                    f"{fmt(ratio, '8.2f') + ('x' if ratio else ''):>9}")
            else:
                lines.append(f"{shape:<{width}} {row['impl']:<20} FAILED: {str(row.get('error', ''))[:150]}")
        gpu = {name: busy_gpu(directory / f"{name}_gpu.csv") for name in ("fast_llm", "torch")}
        shown = [f"{name} {value['sm_clock_mhz']:.0f} MHz / {value['power_w']:.0f} W"
                 for name, value in gpu.items() if value]
        if shown:
            lines.append(f"{shape:<{width}} GPU while busy (median SM clock / power): " + ", ".join(shown))
        if not torch_modes:
            lines.append(f"{shape:<{width}} {'torch':<20} FAILED: no result (exit {torch_rc}; "
                         f"{setup.get('error', 'see torch.err')})"[:200])
        # Targets (DESIGN.md §8): against the fastest PyTorch mode of this run.
        targets = SHAPES[shape]["targets"]
        best = max((row for row in torch_modes.values() if row.get("ok")), key=lambda row: row["tokens_per_second"],
                   default=None)
        speedup = ours["tokens_per_second"] / best["tokens_per_second"] if best and ours.get("ok") else None
        tflops = ours.get("model_tflops")
        memory = None
        if best and ours.get("ok"):
            memory = "pass" if ours["max_reserved_mib"] <= best["max_reserved_mib"] else "miss"
        checks = [("speed-up vs " + (best["impl"] if best else "PyTorch"), speedup, targets["min_speedup"], "x"),
                  ("model TFLOP/s", tflops, targets["min_tflops"], "")]
        if targets.get("min_speedup_eager") is not None:  # the MoE shapes also set one against eager PyTorch
            eager = torch_modes.get("eager")
            eager_speedup = (ours["tokens_per_second"] / eager["tokens_per_second"]
                             if eager and eager.get("ok") and ours.get("ok") else None)
            checks.append(("speed-up vs eager PyTorch (eager target)", eager_speedup, targets["min_speedup_eager"],
                           "x"))
        for name, value, target, unit in checks:
            result = verdict(value, target)
            if result:
                verdicts.append((shape, name, value, target, result))
        if memory:
            verdicts.append((shape, "max reserved GiB <= fastest PyTorch mode's", ours["max_reserved_mib"] / GIB,
                             best["max_reserved_mib"] / GIB, memory))
        report[shape] = {"design": SHAPES[shape]["design"], "fast_llm": ours, "torch": torch_modes,
                         "torch_setup": setup, "torch_rc": torch_rc, "speedup_vs_best_torch": speedup,
                         "best_torch_mode": best["mode"] if best else None, "gpu_while_busy": gpu}
    lines.append("")
    lines.append("DESIGN.md §8 / issue 20 / issue 23 targets (model TFLOP/s = 6 x matmul weights incl. LM head + 6 x "
                 "layers x seq x heads x head_size, per token, MoE: active weights = router + experts_per_token "
                 "experts; LoRA: 4 x frozen weights + 6 x adapters + the attention term; DPO: 8 x weights + 8 x the "
                 "attention term; PyTorch counted alike):")
    for shape, name, value, target, result in verdicts:
        shown = "-" if value is None else f"{value:.2f}"
        lines.append(f"  {result.upper():<4} {shape:<{width}} {name:<44} {shown:>8}  (target {target:.4g})")
    for shape in args.shapes:
        lines.append(f"  {'':<4} {shape:<{width}} DESIGN: {SHAPES[shape]['design']}")
    text = "\n".join(lines)
    print(text)
    (work / "benchmark.txt").write_text(text + "\n")
    (work / "benchmark.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
