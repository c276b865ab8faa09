#!/usr/bin/env python3
"""Compares per-step training losses of two fast-llm runs (their metrics.jsonl, logged every step), for
tools/gpu_cpu_loss_check.sh: a GPU bf16 run against the CPU fp32 reference on the same data, seed and initial weights.

Reports the max and mean |difference| of the raw per-step losses, the mean and max relative difference of the curves
smoothed over `--window` steps (a trailing mean), and the relative difference of the mean loss over the last
`--last` steps. Passes when:
  * both runs logged every step 1..N with finite losses, and the reference learns (its last-`--last` mean loss is
    below `--learn-fraction` x its first-10 mean: two runs that learn nothing would agree trivially);
  * mean relative difference of the smoothed curves < --tolerance (default 0.02);
  * relative difference of the last-`--last` means < --tolerance;
  * max relative difference of the smoothed curves < 2.5 x --tolerance (no excursion hidden by the means).
Why 2 %: bf16 keeps 8 significant bits (unit round-off 2^-9 = 0.2 %), so one step's loss at the same weights differs
by a few 0.1 % from fp32; over a run the rounding perturbs every update and the trajectories drift apart as any two
runs with slightly different arithmetic do, which on small language models stays around 1 % of the loss after a few
hundred steps. A mistake in the gradient or the update (a missing or mis-scaled gradient, a wrong rotary or
normalisation backward, a wrong optimizer step) shows up as several % within the first hundred steps.

  python3 tools/compare_loss_curves.py REFERENCE.jsonl CANDIDATE.jsonl [--label NAME] [--json OUT.json]
Exit status 0 on pass, 1 on failure, 2 on unreadable input.
"""
import argparse
import json
import math
import sys


def read_training_records(path):
    """The training rows of a metrics.jsonl: {iteration: record}, in file order (a later row of an iteration replaces
    the earlier one)."""
    records = {}
    with open(path) as stream:
        for line in stream:
            line = line.strip()
            if line:
                record = json.loads(line)
                if record.get("phase") == "training":
                    records[int(record["iteration"])] = record
    return records


def read_losses(path, key):
    losses = {}
    for iteration, record in read_training_records(path).items():
        if key is None:  # the head's total loss (fast-llm: lm_head_loss), else the first loss-like field
            key = next((name for name in ("lm_head_loss", "language_model_loss", "cross_entropy")
                        if name in record), None)
            if key is None:
                raise KeyError(f"no loss field in {sorted(record)}")
        value = record.get(key)
        losses[iteration] = float("nan") if value is None else float(value)
    return losses


def trailing_mean(values, window):
    result, total = [], 0.0
    for index, value in enumerate(values):
        total += value
        if index >= window:
            total -= values[index - window]
        result.append(total / min(index + 1, window))
    return result


def compare(reference, candidate, window, last):
    steps = sorted(set(reference) & set(candidate))
    ref = [reference[step] for step in steps]
    cand = [candidate[step] for step in steps]
    absolute = [abs(a - b) for a, b in zip(ref, cand)]
    smooth_ref, smooth_cand = trailing_mean(ref, window), trailing_mean(cand, window)
    relative = [abs(a - b) / abs(a) for a, b in zip(smooth_ref, smooth_cand)]
    tail = min(last, len(steps))
    mean_ref, mean_cand = sum(ref[-tail:]) / tail, sum(cand[-tail:]) / tail
    head = min(10, len(steps))
    return {
        "steps": len(steps), "missing_reference": sorted(set(candidate) - set(reference)),
        "missing_candidate": sorted(set(reference) - set(candidate)),
        "max_abs_diff": max(absolute), "mean_abs_diff": sum(absolute) / len(absolute),
        "max_abs_diff_step": steps[absolute.index(max(absolute))],
        "smoothed_mean_rel_diff": sum(relative) / len(relative), "smoothed_max_rel_diff": max(relative),
        "last_mean_reference": mean_ref, "last_mean_candidate": mean_cand,
        "last_mean_rel_diff": abs(mean_cand - mean_ref) / abs(mean_ref),
        "first_mean_reference": sum(ref[:head]) / head, "first_mean_candidate": sum(cand[:head]) / head,
        "last_steps": tail, "window": window,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reference")
    parser.add_argument("candidate")
    parser.add_argument("--label", default="candidate vs reference")
    parser.add_argument("--key", help="metrics field (default: lm_head_loss, language_model_loss or cross_entropy)")
    parser.add_argument("--steps", type=int, help="steps both runs must have logged (default: the reference's)")
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--last", type=int, default=50)
    parser.add_argument("--tolerance", type=float, default=0.02)
    parser.add_argument("--learn-fraction", type=float, default=0.8)
    parser.add_argument("--json", help="write the numbers here")
    args = parser.parse_args()
    try:
        reference, candidate = read_losses(args.reference, args.key), read_losses(args.candidate, args.key)
    except (OSError, ValueError, KeyError) as error:
        print(f"{args.label}: cannot read the metrics ({type(error).__name__}: {error})")
        return 2
    if not reference or not candidate:
        print(f"{args.label}: no training losses ({len(reference)} reference, {len(candidate)} candidate steps)")
        return 2
    expected = args.steps or max(reference)
    result = compare(reference, candidate, args.window, args.last)
    failures = []
    for name, losses in (("reference", reference), ("candidate", candidate)):
        absent = [step for step in range(1, expected + 1) if step not in losses]
        if absent:
            failures.append(f"{name} lacks {len(absent)} of steps 1..{expected} (first {absent[0]})")
        bad = [step for step, value in losses.items() if not math.isfinite(value)]
        if bad:
            failures.append(f"{name} has non-finite losses at {len(bad)} steps (first {min(bad)})")
    if not failures:
        if not result["last_mean_reference"] < args.learn_fraction * result["first_mean_reference"]:
            failures.append(f"the reference does not learn (first-10 mean {result['first_mean_reference']:.4f}, "
                            f"last-{result['last_steps']} mean {result['last_mean_reference']:.4f})")
        if not result["smoothed_mean_rel_diff"] < args.tolerance:
            failures.append(f"smoothed mean relative difference {result['smoothed_mean_rel_diff']:.4f} >= "
                            f"{args.tolerance}")
        if not result["last_mean_rel_diff"] < args.tolerance:
            failures.append(f"last-{result['last_steps']} mean relative difference {result['last_mean_rel_diff']:.4f}"
                            f" >= {args.tolerance}")
        if not result["smoothed_max_rel_diff"] < 2.5 * args.tolerance:
            failures.append(f"smoothed max relative difference {result['smoothed_max_rel_diff']:.4f} >= "
                            f"{2.5 * args.tolerance}")
    result.update(label=args.label, tolerance=args.tolerance, passed=not failures, failures=failures)
    print(f"{args.label}: {result['steps']} common steps; loss first-10 mean {result['first_mean_reference']:.4f} / "
          f"{result['first_mean_candidate']:.4f}, last-{result['last_steps']} mean "
          f"{result['last_mean_reference']:.4f} / {result['last_mean_candidate']:.4f} (reference / candidate)")
    print(f"  per step |diff|: max {result['max_abs_diff']:.4f} (step {result['max_abs_diff_step']}), mean "
          f"{result['mean_abs_diff']:.4f}; smoothed ({args.window} steps) relative diff: mean "
          f"{result['smoothed_mean_rel_diff']:.4%}, max {result['smoothed_max_rel_diff']:.4%}; last-"
          f"{result['last_steps']} mean relative diff {result['last_mean_rel_diff']:.4%} (tolerance "
          f"{args.tolerance:.1%})")
    print(f"  {'PASS' if not failures else 'FAIL: ' + '; '.join(failures)}")
    if args.json:
        with open(args.json, "w") as stream:
            json.dump(result, stream, indent=1)
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
