"""Why an RM-based reward collapses, step by step: the per-step diagnostics of Cooper and static-RM runs.

    python benchmarks/studies/reward_collapse.py RUN_DIR [RUN_DIR ...] [--window 10] [--markdown] [--plot OUT.png]

Reads each run's metrics.jsonl and prints, per window of `--window` training steps (the mean over the steps of
the window that logged the metric; '–' where none did, e.g. a run from before the metric existed, or a static RM,
which makes no pairs):

    verified      verified_accuracy: the rule's accuracy on the step's rollouts
    reward        the mean reward the policy was paid
    pos.          rm/positive_rate: prompts with a verified rollout (Cooper's positives)
    p.asst        rm/pairs_assistant: pairs whose negative the assistant wrote
    p.roll        rm/pairs_rollout: pairs whose negative is a rule-rejected rollout (`negative: rollout|mixed`)
    p.repl        rm/replay_pairs: pairs replayed from earlier steps (`replay_size`)
    train acc     rm/train_pair_accuracy: the RM ranking the pairs it learned, as it met them (first pass)
    roll. rank    rm/rollout_pair_accuracy: the RM ranking the step's rule-accepted above its rule-rejected
                  rollouts of the same prompt (what the policy writes now)
    acc. s        rm/accepted_score: the RM's mean score of the rule-accepted rollouts
    rej. s        rm/rejected_score: ... of the rule-rejected ones
    dom. s        rm/dominant_wrong_score: ... of the rollouts carrying their group's most common wrong answer
    dom. share    rm/dominant_wrong_share: the fraction of the rollouts carrying it
    no answer     verify/no_answer: the fraction of the rollouts with no extractable answer

`--plot OUT.png`: one panel per run, per step: verified accuracy, the rollout ranking and the dominant wrong
answer's score.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from coreward.runtime.errors import CorewardError
from coreward.runtime.metrics import read_metrics


# (column heading, metric name, format)
COLUMNS = [
    ("verified", "verified_accuracy", "{:.3f}"),
    ("reward", "reward", "{:.3f}"),
    ("pos.", "rm/positive_rate", "{:.2f}"),
    ("p.asst", "rm/pairs_assistant", "{:.1f}"),
    ("p.roll", "rm/pairs_rollout", "{:.1f}"),
    ("p.repl", "rm/replay_pairs", "{:.1f}"),
    ("train acc", "rm/train_pair_accuracy", "{:.2f}"),
    ("roll. rank", "rm/rollout_pair_accuracy", "{:.2f}"),
    ("acc. s", "rm/accepted_score", "{:.3f}"),
    ("rej. s", "rm/rejected_score", "{:.3f}"),
    ("dom. s", "rm/dominant_wrong_score", "{:.3f}"),
    ("dom. share", "rm/dominant_wrong_share", "{:.3f}"),
    ("no answer", "verify/no_answer", "{:.3f}"),  # answerless completions: a wrong answer no group can share
]
MISSING = "–"


def training_steps(run_dir: Path) -> dict[int, dict]:
    """step -> its metrics (a step logged twice, as after a resume, keeps its last row)."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise CorewardError(f"{path}: no such file (a run directory holds the metrics.jsonl its training wrote)")
    steps: dict[int, dict] = {}
    for row in read_metrics(path):
        if isinstance(row.get("step"), int):
            steps[row["step"]] = steps.get(row["step"], {}) | row
    if not steps:
        raise CorewardError(f"{path}: no metrics row with a step")
    return dict(sorted(steps.items()))


def method_of(run_dir: Path) -> str:
    """The run's reward(s), from its config.yaml ('?' without one)."""
    config = run_dir / "config.yaml"
    if not config.is_file():
        return "?"
    rewards = (yaml.safe_load(config.read_text()) or {}).get("rewards") or []
    return "+".join(str(r.get("name", "?")) for r in rewards) or "?"


def windows(steps: dict[int, dict], size: int) -> list[tuple[str, dict[str, float | None]]]:
    """(steps label, metric -> mean over the window's steps that logged it, or None) per window of `size` steps."""
    last = max(steps)
    found = []
    for start in range(1, last + 1, size):
        rows = [steps[s] for s in range(start, min(start + size, last + 1)) if s in steps]
        if not rows:
            continue
        means = {}
        for _, metric, _ in COLUMNS:
            values = [row[metric] for row in rows if isinstance(row.get(metric), int | float)]
            means[metric] = sum(values) / len(values) if values else None
        found.append((f"{start}–{min(start + size - 1, last)}", means))
    return found


def cells(means: dict[str, float | None]) -> list[str]:
    return [MISSING if means[metric] is None else fmt.format(means[metric]) for _, metric, fmt in COLUMNS]


def table(label: str, rows: list[tuple[str, dict]], markdown: bool) -> str:
    headings = ["steps"] + [heading for heading, _, _ in COLUMNS]
    body = [[steps, *cells(means)] for steps, means in rows]
    if markdown:
        lines = [f"**{label}**", "", "| " + " | ".join(headings) + " |", "|" + "---|" * len(headings)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in body])
    widths = [max(len(r[i]) for r in [headings, *body]) for i in range(len(headings))]
    lines = [label, "  ".join(h.rjust(w) for h, w in zip(headings, widths))]
    return "\n".join(lines + ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in body])


def summary(steps: dict[int, dict]) -> str:
    """Peak and last verified accuracy over the run's steps (a collapse: the last far below the peak)."""
    verified = [(s, row["verified_accuracy"]) for s, row in steps.items() if "verified_accuracy" in row]
    if not verified:
        return "verified accuracy: not logged"
    peak = max(verified, key=lambda sv: sv[1])
    return (f"verified accuracy: peak {peak[1]:.3f} at step {peak[0]}, last {verified[-1][1]:.3f} at step "
            f"{verified[-1][0]} ({len(steps)} steps logged)")


def plot(runs: list[tuple[str, dict[int, dict]]], out: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6 * len(runs), 4), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, len(runs), squeeze=False)[0]
    for ax, (label, steps) in zip(axes, runs):
        for metric, name in (("verified_accuracy", "verified accuracy"), ("rm/rollout_pair_accuracy", "rollout ranking"),
                             ("rm/dominant_wrong_score", "dominant wrong answer's score")):
            points = [(s, row[metric]) for s, row in steps.items() if metric in row]
            if points:
                ax.plot(*zip(*points), label=name)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("step")
        ax.set_ylim(0, 1)
        ax.legend(fontsize=8)
    figure.savefig(out, dpi=100)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories (each with its metrics.jsonl)")
    parser.add_argument("--window", type=int, default=10, help="steps per row (the mean over them)")
    parser.add_argument("--markdown", action="store_true", help="markdown tables")
    parser.add_argument("--plot", type=Path, help="a PNG of verified accuracy, rollout ranking, dominant wrong score")
    args = parser.parse_args(argv)
    if args.window < 1:
        parser.error(f"--window must be >= 1, got {args.window}")
    try:
        runs = [(f"{run.parent.name}/{run.name} ({method_of(run)})", training_steps(run)) for run in args.runs]
    except CorewardError as err:
        sys.exit(f"error: {err}")
    for label, steps in runs:
        print(table(label, windows(steps, args.window), args.markdown))
        print(("\n" if args.markdown else "") + summary(steps) + "\n")
    if args.plot:
        plot(runs, args.plot)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
