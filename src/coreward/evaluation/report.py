"""`coreward report RUN_DIR [RUN_DIR ...] --output DIR`: PNG plots of training runs and a report.md linking them.

Every run directory must hold a metrics.jsonl; any metric a run did not log is simply left out of its
plots and shown as "–" in the table (a rule-reward run has no reward-model curves, a run without
held-out evaluation no validation curve).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coreward.evaluation.overoptimization import plot_curves, summarize
from coreward.evaluation.plots import FIGURES, Run, load_run, plot_figure
from coreward.runtime.errors import CorewardError


REPORT_FILE = "report.md"
OVEROPTIMIZATION_FILE = "overoptimization.png"
GUARD_FILE = "guard.json"  # written by grpo/guard.py (a layer above: its name, not its code)


def run_labels(paths: Sequence[Path]) -> list[str]:
    """Each run's directory name; runs sharing a name (a/final, b/final) are told apart by their parent."""
    names = [p.resolve().name for p in paths]
    return [f"{p.resolve().parent.name}/{name}" if names.count(name) > 1 else name for p, name in zip(paths, names)]


def make_report(run_dirs: Sequence[str | Path], output_dir: str | Path, smooth: float = 0.6,
                note: str | None = None) -> list[Path]:
    """Load the runs, draw every figure some run has data for, and write report.md; returns the files written.
    `note`: a sentence about the runs' context (the demo says what its table.md measured)."""
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
    report.write_text(render_report(runs, drawn, smooth, note))
    return [path for path in drawn.values() if path is not None] + [report]


def render_report(runs: list[Run], drawn: dict[str, Path | None], smooth: float, note: str | None = None) -> str:
    lines = ["# Training report", ""]
    lines += [f"- **{run.name}**: `{run.path.resolve()}`" for run in runs]
    lines += ["", "## Final numbers", "", final_numbers_table(runs), "",
              "Reward and verified accuracy of the last step's rollouts, unsmoothed (the smoothed curves are in "
              "the figures and the overoptimization table, with their EMA weight)."]
    protocols = [f"{run.name}: {protocol}" for run in runs if (protocol := eval_protocol(run))]
    if protocols:
        lines += ["", "Periodic evaluation is the held-out check during training (`data.eval_*`), not `coreward "
                  "eval`'s protocol: " + "; ".join(protocols) + "."]
    if note:
        lines += ["", note]
    lines.append("")
    guarded = guard_lines(runs)
    if guarded:
        lines += ["## Overoptimization guard", ""] + guarded + [""]
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
    smoothing = f"EMA {smooth}" if smooth else "unsmoothed"
    header = ["Run", f"Peak verified, {smoothing} (step, √KL)", f"Final verified, {smoothing}",
              f"Final reward, {smoothing}", "Gap (reward − verified)", "Final √KL", "Prompts with a verified rollout",
              "Guard fired (step)"]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for run in runs:
        s = summarize(run, smooth)
        if s is None:
            lines.append("| " + " | ".join([run.name] + ["–"] * (len(header) - 1)) + " |")
            continue
        lines.append("| " + " | ".join([
            run.name, f"{_percent(s.peak_verified)} ({s.peak_step}, {s.peak_sqrt_kl:.2f})", _percent(s.final_verified),
            f"{s.final_reward:.3f}", f"{s.gap:+.3f}", f"{s.final_sqrt_kl:.2f}", _percent(s.final_coverage),
            alarm_cell(s.alarm_step, s.alarm_logged, stopped_at(run)),
        ]) + " |")
    note = f" EMA-smoothed per-step values (weight {smooth})." if smooth else ""
    return "\n".join(lines) + (f"\n\nVerified accuracy and reward of the training rollouts.{note} Guard: the step where "
                               "the overoptimization guard fired (grpo/guard.py, on its own smoothing: see its "
                               "section), \"stopped\" where the run stopped there; \"would have\" where the run "
                               "did not run it and its default rule fires on the run's metrics.")


def alarm_cell(step: int | None, logged: bool, stopped: int | None = None) -> str:
    if step is None:
        return "–"
    return (f"{step} (stopped)" if stopped == step else str(step)) if logged else f"{step} (would have)"


def read_guard(run: Run) -> dict[str, Any] | None:
    """The run's guard.json (grpo/guard.py writes it at the end of a guarded run), None without one."""
    path = run.path / GUARD_FILE
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        return None


def stopped_at(run: Run) -> int | None:
    guard = read_guard(run)
    return guard.get("stopped_at") if guard else None


def guard_signal(guard: dict[str, Any]) -> str:
    """What the guard called verified accuracy, with its smoothing: the training rollouts' at the guard's EMA
    weight, or the held-out evaluation's, unsmoothed (evaluation/guard.py)."""
    source = guard.get("source") or "no verified signal"
    smooth = (guard.get("settings") or {}).get("smooth")
    if source == "training rollouts" and smooth:
        return f"verified accuracy of the training rollouts, EMA {smooth} (the guard's smoothing)"
    return f"verified accuracy ({source}, unsmoothed)"


def guard_lines(runs: list[Run]) -> list[str]:
    """One line per run that ran the guard or kept a best/: what it watched, where it fired, whether the run stopped
    there, and where best/ is."""
    lines = []
    for run in runs:
        guard, best_dir = read_guard(run), run.path / "best"
        if guard is None and not best_dir.is_dir():
            continue
        parts = []
        if guard is not None:
            signal = guard_signal(guard)
            if guard.get("peak") is not None:
                signal += f", whose peak was {_percent(guard['peak'])} at step {guard['peak_step']}"
            if guard.get("fired_at") is not None:
                parts.append(f"the guard fired at step {guard['fired_at']} on the {signal}")
            else:
                parts.append(f"the guard did not fire; it watched the {signal}")
            parts.append(f"**the run stopped there** (guard.stop), at step {guard['stopped_at']}"
                         if guard.get("stopped_at") is not None else "the run went on to its last step")
        best = (guard or {}).get("best")
        if best_dir.is_dir():
            held = f" (step {best['step']}, verified accuracy {_percent(best.get('verified'))})" if best else ""
            parts.append(f"the best model{held} is in `{run.path.resolve() / 'best'}`")
        lines.append(f"- **{run.name}**: " + "; ".join(parts) + ".")
    return lines


def eval_protocol(run: Run) -> str | None:
    """What the run's periodic evaluation measured, from its config.yaml: avg@N on how many problems of which set.
    None for a run without one (or without its config)."""
    data = (run.config or {}).get("data") or {}
    if not data.get("eval") or not data.get("eval_every"):
        return None
    split, limit = data.get("eval_split", "test"), data.get("eval_limit")
    count = eval_problem_count(data)
    problems = (f"{count} problems" if count is not None
                else f"the first {limit} problems" if limit else "every problem")
    return (f"avg@{data.get('eval_n', 4)} on {problems} of {data['eval']} ({split} split), every "
            f"{data['eval_every']} steps")


def eval_problem_count(data: dict[str, Any]) -> int | None:
    """How many problems the run's periodic evaluation read (its set loaded again, as the run loaded it); None
    when the set can't be read here (a report written on another machine)."""
    from coreward.data.sources import load_eval_sets

    try:
        sets = load_eval_sets([data["eval"]], data.get("eval_split", "test"), data.get("eval_limit"),
                              data.get("data_dir"), key="data.eval", columns=data.get("eval_columns"))
    except (CorewardError, OSError, ValueError):
        return None
    return sum(len(records) for records in sets.values())


def final_numbers_table(runs: list[Run]) -> str:
    header = [
        "Run",
        "Steps",
        "Wall time",
        "Reward, last step",
        "Verified acc., last step",
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
    from coreward.runtime.progress import duration

    return duration(seconds) if isinstance(seconds, (int, float)) else "–"
