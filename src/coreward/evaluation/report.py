"""`coreward report RUN_DIR [RUN_DIR ...] --output DIR`: PNG plots of training runs and a report.md linking them.

Every run directory must hold a metrics.jsonl; any metric a run did not log is simply left out of its
plots and shown as "–" in the table (a rule-reward run has no reward-model curves, a run without
held-out evaluation no validation curve).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from coreward.evaluation.overoptimization import plot_curves, summarize
from coreward.evaluation.plots import FIGURES, Run, load_run, plot_figure
from coreward.runtime.errors import CorewardError


REPORT_FILE = "report.md"
OVEROPTIMIZATION_FILE = "overoptimization.png"


def run_labels(paths: Sequence[Path]) -> list[str]:
    """Each run's directory name; runs sharing a name (a/final, b/final) are told apart by their parent."""
    names = [p.resolve().name for p in paths]
    return [f"{p.resolve().parent.name}/{name}" if names.count(name) > 1 else name for p, name in zip(paths, names)]


def make_report(run_dirs: Sequence[str | Path], output_dir: str | Path, smooth: float = 0.6) -> list[Path]:
    """Load the runs, draw every figure some run has data for, and write report.md; returns the files written."""
    if not run_dirs:
        raise CorewardError("give at least one run directory")
    if not 0 <= smooth < 1:
        raise CorewardError(f"--smooth must be in [0, 1), got {smooth}")
    paths = [Path(d) for d in run_dirs]
    runs = [load_run(path, label) for path, label in zip(paths, run_labels(paths))]
    output_dir = Path(output_dir)
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise CorewardError(f"cannot create {output_dir}: {err}") from None
    drawn = {spec.filename: plot_figure(spec, runs, output_dir, smooth) for spec in FIGURES}
    drawn[OVEROPTIMIZATION_FILE] = plot_curves(runs, output_dir / OVEROPTIMIZATION_FILE, smooth)
    report = output_dir / REPORT_FILE
    report.write_text(render_report(runs, drawn, smooth))
    return [path for path in drawn.values() if path is not None] + [report]


def render_report(runs: list[Run], drawn: dict[str, Path | None], smooth: float) -> str:
    lines = ["# Training report", ""]
    lines += [f"- **{run.name}**: `{run.path.resolve()}`" for run in runs]
    lines += ["", "## Final numbers", "", final_numbers_table(runs), "",
              "Periodic evaluation is the held-out check during training (`data.eval_*`: fewer problems and samples "
              "than `coreward eval`, avg@N as the column says); the demo's table.md is avg@8 on 500 problems: "
              "the two are different protocols, not to be compared.", ""]
    health = [(run.name, json.loads((run.path / "health.json").read_text())["lines"]) for run in runs
              if (run.path / "health.json").is_file()]
    if health:  # written by the run at its end (grpo/health.py)
        lines += ["## Health", ""] + [f"- **{name}**: {line}" for name, found in health for line in found] + [""]
    missing = []
    if drawn.get(OVEROPTIMIZATION_FILE) is not None:
        lines += ["## Overoptimization", "", f"![Overoptimization]({OVEROPTIMIZATION_FILE})", "",
                  "Training reward and the verified accuracy of the same rollouts against √KL(π ‖ π_init), the policy's "
                  "distance from its initial weights (the axes of Gao, Schulman and Hilton 2022). A reward that keeps "
                  "rising while verified accuracy turns down (★ marks its peak) is being overoptimized.", "",
                  overoptimization_table(runs, smooth), ""]
    else:
        missing.append("overoptimization (needs kl/from_init)")
    for spec in FIGURES:
        if drawn[spec.filename] is None:
            missing.append(spec.heading.lower())
            continue
        lines += [f"## {spec.heading}", "", f"![{spec.heading}]({spec.filename})", ""]
        if spec.note:
            lines += [spec.note, ""]
    if smooth > 0:
        lines += [f"Per-step training curves are smoothed (EMA weight {smooth}); the raw curve is drawn faintly.", ""]
    if missing:
        lines += [f"Not plotted (no run logged them): {', '.join(missing)}.", ""]
    return "\n".join(lines)


def overoptimization_table(runs: list[Run], smooth: float) -> str:
    """Peak and final verified accuracy of the rollouts (smoothed), where the peak was, and the reward's gap."""
    header = ["Run", "Peak verified (step, √KL)", "Final verified", "Final reward", "Gap (reward − verified)",
              "Final √KL", "Prompts with a verified rollout", "Guard fired (step)"]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for run in runs:
        s = summarize(run, smooth)
        if s is None:
            lines.append("| " + " | ".join([run.name] + ["–"] * (len(header) - 1)) + " |")
            continue
        lines.append("| " + " | ".join([
            run.name, f"{_percent(s.peak_verified)} ({s.peak_step}, {s.peak_sqrt_kl:.2f})", _percent(s.final_verified),
            f"{s.final_reward:.3f}", f"{s.gap:+.3f}", f"{s.final_sqrt_kl:.2f}", _percent(s.final_coverage),
            alarm_cell(s.alarm_step, s.alarm_logged),
        ]) + " |")
    note = f" EMA-smoothed per-step values (weight {smooth})." if smooth else ""
    return "\n".join(lines) + (f"\n\nVerified accuracy and reward of the training rollouts.{note} Guard: the step where "
                               "the overoptimization guard fired (grpo/guard.py); \"would have\" where the run did "
                               "not run it and its default rule fires on the run's metrics.")


def alarm_cell(step: int | None, logged: bool) -> str:
    if step is None:
        return "–"
    return str(step) if logged else f"{step} (would have)"


def final_numbers_table(runs: list[Run]) -> str:
    header = [
        "Run",
        "Steps",
        "Wall time",
        "Last reward",
        "Last verified acc.",
        "Last periodic eval",
        "Best periodic eval (step)",
    ]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for run in runs:
        steps = max((row["step"] for row in run.rows), default=0)
        _, rewards = run.series("reward")
        _, accuracies = run.series("verified_accuracy")
        eval_steps, evals = run.series(r"eval/avg@\d+")
        best = max(range(len(evals)), key=lambda i: evals[i], default=None)
        cells = [
            run.name,
            str(steps),
            _duration(run.summary.get("train_runtime")),
            f"{rewards[-1]:.3f}" if rewards else "–",
            _percent(accuracies[-1] if accuracies else None),
            f"{_percent(evals[-1])} ({run.key_like(r'eval/avg@[0-9]+').split('/')[-1]})" if evals else "–",
            f"{_percent(evals[best])} ({eval_steps[best]})" if best is not None else "–",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def _duration(seconds: float | None) -> str:
    """Wall time from the run's summary.json (written by HF at the end of training); '–' if it never finished."""
    if not isinstance(seconds, (int, float)):
        return "–"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"
