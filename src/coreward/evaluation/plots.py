"""PNG plots of training runs, one line per run (same colour for a run in every figure).

Each figure is a grid of panels (at most two across, so it stays readable at the width of a README or a
notebook) against the training step. Reward and verified accuracy sit side by side, so a run that is being
reward-hacked (reward up, verified accuracy down) stands out at a glance. Noisy per-step curves can be
smoothed with TensorBoard's debiased EMA; the raw curve stays behind it, faint. Axes are linear with plain
tick labels; rewards on scales 10x apart (self-certainty ~12 beside [0, 1] rewards) get a panel each.

Matplotlib is used through `Figure` and the Agg canvas only (no pyplot): no display, no global state.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coreward.runtime.errors import CorewardError


@dataclass
class Run:
    """A training run directory's logged metrics (rows of metrics.jsonl) and end-of-run summary."""

    name: str
    path: Path
    rows: list[dict[str, Any]]
    summary: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)  # the run's config.yaml (what it trained on, evaluated)

    def key_like(self, pattern: str) -> str | None:
        """The first logged metric whose name matches `pattern` (e.g. eval/avg@\\d+ for any n)."""
        regex = re.compile(pattern)
        return next((k for row in self.rows for k in row if regex.fullmatch(k)), None)

    def series(self, pattern: str) -> tuple[list[int], list[float]]:
        """(steps, values) of a metric, skipping rows where it is missing or not finite."""
        key = self.key_like(pattern)
        points = [(row["step"], row[key]) for row in self.rows if key and _finite(row.get(key))]
        return [s for s, _ in points], [float(v) for _, v in points]


def load_run(path: str | Path, name: str | None = None) -> Run:
    path = Path(path)
    if not path.is_dir():
        raise CorewardError(f"run directory not found: {path}")
    metrics = path / "metrics.jsonl"
    if not metrics.is_file():
        raise CorewardError(f"{path} has no metrics.jsonl: is it a training run directory?")
    from coreward.runtime.metrics import read_metrics  # imports transformers: only once the input is known good

    rows = [row for row in read_metrics(metrics) if isinstance(row.get("step"), int)]
    summary_path = path / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    return Run(name or path.resolve().name, path, rows, summary, read_config(path / "config.yaml"))


def read_config(path: Path) -> dict[str, Any]:
    """A run's config.yaml as a mapping; empty when there is none or it can't be read (a report still draws)."""
    import yaml

    try:
        config = yaml.safe_load(path.read_text()) if path.is_file() else None
    except (OSError, yaml.YAMLError):
        return {}
    return config if isinstance(config, dict) else {}


def ema(values: list[float], weight: float) -> list[float]:
    """TensorBoard's smoothing: an exponential moving average, debiased so the first points are not pulled to 0."""
    smoothed, last = [], 0.0
    for steps, value in enumerate(values, start=1):
        last = weight * last + (1 - weight) * value
        smoothed.append(last / (1 - weight**steps) if weight > 0 else value)
    return smoothed


@dataclass(frozen=True)
class Panel:
    pattern: str  # metric name, a regular expression
    title: str  # "{metric}" becomes the matched name without its prefix (e.g. avg@4)
    smooth: bool = True  # per-step training metrics; sparse evaluation points are never smoothed
    # rewards of different methods live on different scales (self-certainty ~12, others in [0, 1]): when the
    # runs' largest magnitudes differ more than 10x, the runs are split by scale into panels of their own (a
    # shared linear axis would flatten the small ones; a symlog axis has unreadable ticks between 0 and 1)
    split_by_scale: bool = False


@dataclass(frozen=True)
class FigureSpec:
    filename: str
    heading: str
    panels: tuple[Panel, ...]
    note: str = ""


FIGURES = (
    FigureSpec(
        "training_reward_accuracy.png",
        "Training reward and verified accuracy",
        (Panel("reward", "training reward", split_by_scale=True), Panel("verified_accuracy", "verified accuracy (rule verifier)")),
        "A run whose reward rises while its verified accuracy falls is being reward-hacked.",
    ),
    FigureSpec(
        "validation_accuracy.png",
        "Held-out accuracy",
        (Panel(r"eval/avg@\d+", "held-out accuracy ({metric})", smooth=False),),
        "Mean accuracy over n samples per held-out problem, logged every eval_every steps.",
    ),
    FigureSpec(
        "validation_agreement.png",
        "Held-out agreement (no reference answers)",
        (Panel(r"eval/agree@\d+", "share of samples in the majority answer ({metric})", smooth=False),
         Panel("eval/answered", "share of samples with a final answer", smooth=False)),
        "On a held-out set without reference answers: self-consistency, not accuracy (it also rises when a policy "
        "collapses onto one wrong answer).",
    ),
    FigureSpec(
        "completion_length.png",
        "Completion length",
        (Panel("completions/mean_length", "mean completion length (tokens)"),),
    ),
    FigureSpec(
        "reward_model.png",
        "Reward model",
        (
            Panel("rm/rollout_pair_accuracy", "pair accuracy on the current rollouts (before the step's update)"),
            Panel("rm/loss", "reward-model loss (pairs of the step)"),
            Panel("rm/accuracy", "held-out accuracy (σ > 0.5)", smooth=False),
            Panel("rm/pair_accuracy", "held-out pair accuracy (positive ranked first)", smooth=False),
        ),
        "Runs with a reward model: a static one logs its accuracy on the current rollouts; one that learns during the "
        "run also its training.",
    ),
)


MAX_COLUMNS = 2  # panels across: a README or notebook shows a figure ~800 px wide


def plot_figure(spec: FigureSpec, runs: list[Run], output_dir: Path, smooth: float) -> Path | None:
    """Draw one figure; panels no run has data for are dropped, and None is returned if none is left."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    panels = []  # (panel, the runs drawn in it, title suffix)
    for panel in spec.panels:
        present = [run for run in runs if run.series(panel.pattern)[0]]
        if not present:
            continue
        groups = scale_groups(present, panel.pattern) if panel.split_by_scale else [present]
        for group in groups:
            suffix = f" ({scale_label(group, panel.pattern)})" if len(groups) > 1 else ""
            panels.append((panel, group, suffix))
    if not panels:
        return None
    columns = min(MAX_COLUMNS, len(panels))
    rows = math.ceil(len(panels) / columns)
    figure = Figure(figsize=(5.0 * columns, 3.5 * rows + 0.5), dpi=110, layout="constrained")
    FigureCanvasAgg(figure)
    grid = figure.subplots(rows, columns, squeeze=False, sharex=True)  # every panel spans the whole run
    axes = [ax for row in grid for ax in row]
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    for ax, (panel, group, suffix) in zip(axes, panels):
        for run in group:
            index = runs.index(run)  # a run keeps its colour across panels and figures
            _draw_run(ax, run, panel, f"C{index % 10}", smooth, LINESTYLES[index % len(LINESTYLES)])
        key = next(k for k in (run.key_like(panel.pattern) for run in group) if k)
        title = panel.title.format(metric=key.rsplit("/", 1)[-1]) + suffix
        if panel.smooth and smooth > 0:  # the report's tables and the guard name their smoothing: so does a curve
            title += f", EMA {smooth}"
        if len(panels) > 1:
            ax.set_title(title, fontsize=10)
        else:  # the figure's heading is its title already
            ax.set_ylabel(title)
        ax.set_xlabel("step")
        ax.xaxis.set_tick_params(labelbottom=True)  # shared x: still labelled under every panel
        finish_axes(ax, [v for run in group for v in run.series(panel.pattern)[1]])
    legend_below(figure, axes[: len(panels)])
    figure.suptitle(spec.heading, fontweight="bold")
    path = output_dir / spec.filename
    figure.savefig(path)
    return path


def scale_groups(runs: list[Run], pattern: str, ratio: float = 10.0) -> list[list[Run]]:
    """Runs split where their largest magnitudes jump by more than `ratio` (one group when they don't)."""
    peaks = {id(run): max(abs(v) for v in run.series(pattern)[1]) for run in runs}
    ordered = sorted(runs, key=lambda run: peaks[id(run)])
    groups = [[ordered[0]]]
    for run in ordered[1:]:
        low = max(peaks[id(groups[-1][0])], 1e-12)
        if peaks[id(run)] > ratio * low:
            groups.append([run])
        else:
            groups[-1].append(run)
    return [sorted(group, key=runs.index) for group in groups]


def scale_label(group: list[Run], pattern: str) -> str:
    peak = max(abs(v) for run in group for v in run.series(pattern)[1])
    return f"runs with |values| up to {peak:.3g}"


def finish_axes(ax, values: list[float], integer_x: bool = True, min_span: float = 0.1) -> None:
    """A light grid, plain tick labels (0.65, never 6.5625×10⁻¹ or an offset), and honest y limits (at least
    `min_span` tall: 0.1 for fractions, 10 for percent)."""
    from matplotlib.ticker import ScalarFormatter

    ax.grid(alpha=0.3)
    for axis in (ax.xaxis, ax.yaxis):
        formatter = ScalarFormatter(useOffset=False)
        formatter.set_scientific(False)
        axis.set_major_formatter(formatter)
    honest_axes(ax, values, min_span=min_span, integer_x=integer_x)


def honest_axes(ax, values: list[float], min_span: float = 0.1, integer_x: bool = True) -> None:
    """Integer step ticks, and a y-axis at least `min_span` tall (or 10% of the values' size) around the data:
    matplotlib would stretch a change of 0.0025 over the whole panel and make it look like a cliff."""
    from matplotlib.ticker import MaxNLocator

    if integer_x:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    finite = [v for v in values if _finite(v)]
    if not finite:
        return
    low, high = min(finite), max(finite)
    span = max(min_span, 0.1 * max(abs(low), abs(high)))
    if high - low < span:
        middle = (low + high) / 2
        ax.set_ylim(middle - span / 2, middle + span / 2)


def legend_below(figure, axes, extra: str = "") -> None:
    """One legend for the figure, below the panels, with every run that has a line in any panel."""
    entries: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    legend = figure.legend(
        entries.values(), entries.keys(), loc="outside lower center", ncols=min(len(entries), 3), frameon=False,
        fontsize=9,
    )
    if extra:
        legend.set_title(extra, prop={"size": 9})


LINESTYLES = ("-", "--", ":", "-.")  # runs with equal values would hide each other under one colour


def _draw_run(ax, run: Run, panel: Panel, color: str, smooth: float, style: str = "-") -> None:
    steps, values = run.series(panel.pattern)
    if not steps:
        return
    if panel.smooth and smooth > 0 and len(values) > 2:
        ax.plot(steps, values, color=color, alpha=0.25, linewidth=1, linestyle=style)
        ax.plot(steps, ema(values, smooth), color=color, linewidth=2, label=run.name, linestyle=style)
    else:
        marker = "o" if not panel.smooth or len(values) < 30 else None
        ax.plot(steps, values, color=color, linewidth=2, marker=marker, markersize=4, label=run.name, linestyle=style)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
