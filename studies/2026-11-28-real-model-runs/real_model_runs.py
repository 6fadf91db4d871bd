"""Runs of a real model against its base, on held-out problems: accuracy, what the policy learned, paired intervals.

    python benchmarks/real_model_runs.py --base EVAL_DIR --run RUN_DIR=EVAL_DIR [--run ...] [--plot out.png]
        [--vs EVAL_DIR --vs ...]
    python benchmarks/real_model_runs.py --transfer LABEL=EVAL_DIR [--transfer ...]

EVAL_DIR: what `coreward eval --output` wrote (results.json, samples.parquet) for the base model and for each run's
final policy, evaluated alike (docs/real_model.md gives the commands). Per run: held-out avg@n before and after,
and what the policy learned, from the samples: mean completion length, the share cut at the length cap, the share
with no answer the rule can read, the share that boxes its answer; the training rollouts' reward and verified
accuracy over the first and last 5 steps (metrics.jsonl). Over the runs (seeds): the mean change with a 95% t
interval and an exact sign-flip p (every one of the 2^k sign assignments), and the change pooled per problem
(paired per problem and seed: a normal interval over the problem-seed differences). `--plot` draws reward and
verified accuracy against step for every run. `--vs`, once per run in the same order: each run is also paired with
another arm's run of the same seed (its eval dir), per problem, with the same statistics over the runs.

`--transfer`: evaluations on other benchmarks (GSM8K, SVAMP: `coreward eval --benchmarks gsm8k,svamp`), one table row
per model and benchmark: avg@n with the count of correct samples, pass@n, mean tokens, the share cut at the cap, and
where one is labelled `base`, each other model's per-problem difference from it with a normal 95% interval.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from compare_rewards import sign_flip_p, t_interval  # this directory is on sys.path when the script runs


def samples(eval_dir: Path):
    import pandas as pd

    if not (eval_dir / "samples.parquet").is_file():
        raise SystemExit(f"error: {eval_dir} holds no samples.parquet: give the folder `coreward eval --output` wrote")
    frame = pd.read_parquet(eval_dir / "samples.parquet")
    frame["boxed"] = frame["completion"].str.contains(r"\\boxed\{", regex=True)
    frame["answerless"] = frame["extracted"].isna()
    return frame


def learned(frame) -> dict[str, float]:
    return {"avg": frame["correct"].mean(), "tokens": frame["completion_tokens"].mean(),
            "cut": frame["truncated"].mean(), "answerless": frame["answerless"].mean(), "boxed": frame["boxed"].mean()}


def metrics(run_dir: Path) -> list[dict]:
    """metrics.jsonl's training rows, the last one written for each step (a resumed run writes some twice)."""
    rows: dict[int, dict] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if "reward" in row:
            rows[row["step"]] = row
    return [rows[step] for step in sorted(rows)]


def mean_of(rows: list[dict], key: str) -> float:
    return statistics.fmean(r[key] for r in rows if isinstance(r.get(key), (int, float)))


def print_pooled(label: str, differences: list[float]) -> None:
    """The mean of paired differences with a normal 95% interval (problems and runs pooled)."""
    mean, half = statistics.fmean(differences), 1.96 * statistics.stdev(differences) / math.sqrt(len(differences))
    print(f"{label} ({len(differences)} paired differences): Δ {100 * mean:+.1f} points, 95% interval "
          f"[{100 * (mean - half):+.1f}, {100 * (mean + half):+.1f}]")


def print_transfer(items: list[str]) -> None:
    """Per model and benchmark: avg@n (correct of all samples), pass@n, tokens, cut, and Δ against `base` if given."""
    labelled = {label: samples(Path(folder)) for label, folder in (item.split("=", 1) for item in items)}
    base = labelled.get("base")
    print("| model | benchmark | avg@n (correct) | pass@n | tokens | cut | Δ vs base (per problem, 95%) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for label, frame in labelled.items():
        for benchmark, rows in frame.groupby("benchmark"):
            per_problem = rows.groupby("problem_id")["correct"].agg(["mean", "max"])
            versus = ""
            if base is not None and label != "base":
                base_rows = base[base["benchmark"] == benchmark].groupby("problem_id")["correct"].mean()
                delta = (per_problem["mean"] - base_rows).dropna()
                mean, half = delta.mean(), 1.96 * statistics.stdev(delta) / math.sqrt(len(delta))
                versus = f"{100 * mean:+.1f} [{100 * (mean - half):+.1f}, {100 * (mean + half):+.1f}]"
            print(f"| {label} | {benchmark} | {100 * rows['correct'].mean():.1f}% ({int(rows['correct'].sum())} of "
                  f"{len(rows)}) | {100 * per_problem['max'].mean():.1f}% | {rows['completion_tokens'].mean():.0f} | "
                  f"{100 * rows['truncated'].mean():.0f}% | {versus} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path)
    parser.add_argument("--run", action="append", default=[], help="RUN_DIR=EVAL_DIR")
    parser.add_argument("--transfer", action="append", default=[],
                        help="LABEL=EVAL_DIR on other benchmarks; the others are paired with the one labelled base")
    parser.add_argument("--plot", type=Path)
    parser.add_argument("--vs", action="append", type=Path, default=[],
                        help="another arm's eval dir for each --run, in order (same seed): the paired difference")
    args = parser.parse_args()
    if args.transfer:
        return print_transfer(args.transfer)
    if args.base is None or not args.run:
        parser.error("--base and at least one --run are needed (or --transfer alone)")
    if args.vs and len(args.vs) != len(args.run):
        parser.error(f"--vs: one per --run ({len(args.run)}), got {len(args.vs)}")

    base = samples(args.base)
    before = learned(base)
    per_problem_base = base.groupby("problem_id")["correct"].mean()
    n = int(base.groupby("problem_id").size().iloc[0])
    print(f"base: held-out avg@{n} {100 * before['avg']:.1f}% over {len(per_problem_base)} problems; "
          f"{before['tokens']:.0f} tokens, cut {100 * before['cut']:.0f}%, no answer {100 * before['answerless']:.0f}%, "
          f"boxed {100 * before['boxed']:.0f}%\n")
    print("| run | held-out avg | Δ | tokens | cut | no answer | boxed | train reward first 5 → last 5 | "
          "train verified first 5 → last 5 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    diffs, pooled, curves, versus = [], [], {}, []
    for index, item in enumerate(args.run):
        run_dir, eval_dir = (Path(p) for p in item.split("=", 1))
        after = learned(frame := samples(eval_dir))
        rows = metrics(run_dir)
        curves[run_dir.name] = rows
        diffs.append(after["avg"] - before["avg"])
        per_problem = frame.groupby("problem_id")["correct"].mean()
        pooled += list(per_problem - per_problem_base)
        if args.vs:  # per problem: this run's accuracy minus the other arm's (same seed)
            versus.append((run_dir.name, per_problem - samples(args.vs[index]).groupby("problem_id")["correct"].mean()))
        first, last = rows[:5], rows[-5:]
        print(f"| {run_dir.name} | {100 * after['avg']:.1f}% | {100 * diffs[-1]:+.1f} | {after['tokens']:.0f} | "
              f"{100 * after['cut']:.0f}% | {100 * after['answerless']:.0f}% | {100 * after['boxed']:.0f}% | "
              f"{mean_of(first, 'reward'):.3f} → {mean_of(last, 'reward'):.3f} | "
              f"{100 * mean_of(first, 'verified_accuracy'):.1f}% → {100 * mean_of(last, 'verified_accuracy'):.1f}% |")
    if len(diffs) > 1:
        mean, low, high = t_interval(diffs)
        print(f"\nover {len(diffs)} runs: Δ {100 * mean:+.1f} points, 95% t interval [{100 * low:+.1f}, "
              f"{100 * high:+.1f}], sign-flip p = {sign_flip_p(diffs):.3f} (exact, {2 ** len(diffs)} "
              "assignments)")
    print_pooled("per problem and run", pooled)
    if versus:
        print("\nagainst --vs (same seed), run minus the other arm:")
        for (run_name, delta), other in zip(versus, args.vs):
            print(f"  {run_name} - {other.name}: {100 * delta.mean():+.1f} points")
        if len(versus) > 1:
            means = [float(delta.mean()) for _, delta in versus]
            mean, low, high = t_interval(means)
            print(f"  over {len(means)} runs: {100 * mean:+.1f}, 95% t interval [{100 * low:+.1f}, {100 * high:+.1f}], "
                  f"sign-flip p = {sign_flip_p(means):.3f}")
        print_pooled("  per problem and run", [d for _, delta in versus for d in delta])
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharex=True)
        for name, rows in curves.items():
            steps = [r["step"] for r in rows]
            axes[0].plot(steps, [r["reward"] for r in rows], label=name)
            axes[1].plot(steps, [r["verified_accuracy"] for r in rows], label=name)
        axes[0].set(title="training reward", xlabel="step")
        axes[1].set(title="verified accuracy of the rollouts", xlabel="step")
        axes[1].legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
