"""Overoptimization curves: training reward and verified accuracy of the same rollouts against √KL.

Gao, Schulman and Hilton (2022, "Scaling Laws for Reward Model Overoptimization") measure how far a policy has
moved by d = √KL(π ‖ π_init) and plot the proxy reward and the gold reward against it: the proxy keeps rising
while the gold reward peaks and falls once the proxy is overoptimized. coreward logs, every step,

    reward                       the training (proxy) reward of the step's rollouts (TRL's `reward`)
    verified_accuracy            the rule verifier's accuracy of the same rollouts (the gold reward)
    kl/from_init                 KL(π ‖ π_init) of those rollouts, nats per completion (grpo/kl_from_init.py)
    verify/prompts_with_verified share of prompts with at least one verified rollout

and this module turns them into a curve and a summary per run (peak, final, gap), up to any step: a long run
gives the summaries of its shorter horizons too (`coreward map`). Per-step values are noisy (a step sees one
batch), so peaks and finals are read from the EMA-smoothed curves (weight `smooth`, TensorBoard's debiased
EMA), never from one lucky step.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from coreward.evaluation.plots import Run, ema


KL_KEY = "kl/from_init"
COVERAGE_KEY = "verify/prompts_with_verified"


@dataclass
class Curve:
    """Per-step values of one run, on the steps where reward, verified accuracy and KL were all logged."""

    steps: list[int]
    sqrt_kl: list[float]  # √ of the smoothed KL (the raw per-step KL is a noisy estimate from one batch)
    reward: list[float]  # smoothed
    verified: list[float]  # smoothed
    coverage: list[float | None]  # smoothed share of prompts with a verified rollout (None where not logged)

    def __len__(self) -> int:
        return len(self.steps)


def curve(run: Run, smooth: float, upto_step: int | None = None) -> Curve | None:
    """The run's curve up to `upto_step` (all steps when None); None when it lacks any of the three metrics."""
    rows = [r for r in run.rows if all(_finite(r.get(k)) for k in ("reward", "verified_accuracy", KL_KEY))
            and (upto_step is None or r["step"] <= upto_step)]
    if not rows:
        return None
    kl = [max(0.0, float(r[KL_KEY])) for r in rows]
    covered = [float(r[COVERAGE_KEY]) if _finite(r.get(COVERAGE_KEY)) else None for r in rows]
    known = [c for c in covered if c is not None]
    smoothed_known = iter(ema(known, smooth)) if known else iter(())
    return Curve(
        steps=[r["step"] for r in rows],
        sqrt_kl=[math.sqrt(max(0.0, v)) for v in ema(kl, smooth)],
        reward=ema([float(r["reward"]) for r in rows], smooth),
        verified=ema([float(r["verified_accuracy"]) for r in rows], smooth),
        coverage=[next(smoothed_known) if c is not None else None for c in covered],
    )


@dataclass
class Summary:
    """One run up to a horizon. Verified accuracies and rewards are the smoothed per-step values of the rollouts."""

    steps: int  # last step read
    peak_verified: float
    peak_step: int
    peak_sqrt_kl: float
    final_verified: float
    final_reward: float
    final_sqrt_kl: float
    gap: float  # final reward − final verified accuracy: how much of the reward the verifier does not back
    drop_from_peak: float  # peak − final verified accuracy (> 0: the run went past its best)
    final_coverage: float | None  # share of prompts with a verified rollout at the end
    heldout_peak: float | None = None  # periodic held-out evaluation (eval/avg@n), when the run logged it
    heldout_final: float | None = None
    alarm_step: int | None = None  # where the overoptimization guard fired (grpo/guard.py), None: it did not
    alarm_logged: bool = False  # the run's own guard/alarm; else the guard's default rule replayed on its metrics

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(run: Run, smooth: float, upto_step: int | None = None) -> Summary | None:
    c = curve(run, smooth, upto_step)
    if c is None:
        return None
    peak = max(range(len(c)), key=lambda i: c.verified[i])
    heldout = [v for s, v in zip(*run.series(r"eval/avg@\d+")) if upto_step is None or s <= upto_step]
    return Summary(
        steps=c.steps[-1],
        peak_verified=c.verified[peak],
        peak_step=c.steps[peak],
        peak_sqrt_kl=c.sqrt_kl[peak],
        final_verified=c.verified[-1],
        final_reward=c.reward[-1],
        final_sqrt_kl=c.sqrt_kl[-1],
        gap=c.reward[-1] - c.verified[-1],
        drop_from_peak=c.verified[peak] - c.verified[-1],
        final_coverage=c.coverage[-1],
        heldout_peak=max(heldout) if heldout else None,
        heldout_final=heldout[-1] if heldout else None,
        **guard_alarm(run, upto_step),
    )


def guard_alarm(run: Run, upto_step: int | None = None) -> dict[str, Any]:
    """Where the overoptimization guard fired: the step the run itself logged `guard/alarm` = 1, or, for a run
    trained without the guard (or before it existed), where its default rule fires on the run's metrics."""
    from coreward.evaluation.guard import alarm_step

    rows = [r for r in run.rows if upto_step is None or r["step"] <= upto_step]
    if any("guard/alarm" in r for r in rows):
        fired = [r["step"] for r in rows if r.get("guard/alarm") == 1]
        return {"alarm_step": fired[0] if fired else None, "alarm_logged": True}
    return {"alarm_step": alarm_step(rows, weights=reward_weights(run.config)), "alarm_logged": False}


def reward_weights(config: dict[str, Any]) -> dict[str, float]:
    """Each reward source's weight in a run's config.yaml, under the name its metrics carry (`rewards/NAME/mean`:
    `source_metric_names`, as the trainer names them), so a replayed guard averages the sources as the live guard did.
    A source written otherwise (a user's `module:Class`) weighs 1."""
    from coreward.evaluation.guard import source_metric_names

    specs = [spec for spec in config.get("rewards") or [] if isinstance(spec, dict) and isinstance(spec.get("name"), str)]
    names = source_metric_names([spec["name"] for spec in specs])
    weights = {}
    for name, spec in zip(names, specs):
        weight = spec.get("weight", 1.0)
        if isinstance(weight, (int, float)) and not isinstance(weight, bool):
            weights[name] = float(weight)
    return weights


def plot_curves(runs: list[Run], path, smooth: float, title: str = "Overoptimization: reward and verified accuracy "
                "against √KL from the initial policy") -> Any:
    """Panels sharing the √KL axis: training reward, and verified accuracy of the same rollouts; a star marks
    each run's verified-accuracy peak in each. Rewards on different scales (self-certainty's ~12 beside [0, 1]
    rewards) get a reward panel each, as in the report's other figure, so none is flattened into a line.
    Returns `path`, or None when no run logged the metrics."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from coreward.evaluation.plots import finish_axes, legend_below, scale_groups, scale_label

    curves = {id(run): (i, c) for i, run in enumerate(runs) if (c := curve(run, smooth)) is not None}
    drawn = [run for run in runs if id(run) in curves]
    if not drawn:
        return None
    groups = scale_groups(drawn, "reward")
    figure = Figure(figsize=(5.0 * (len(groups) + 1), 4.2), dpi=110, layout="constrained")
    FigureCanvasAgg(figure)
    *reward_axes, verified_ax = figure.subplots(1, len(groups) + 1, sharex=True)
    for reward_ax, group in zip(reward_axes, groups):
        suffix = f"\n({scale_label(group, 'reward')})" if len(groups) > 1 else ""
        reward_ax.set_title("training reward" + suffix)
        for run in group:
            index, c = curves[id(run)]
            draw_with_peak(reward_ax, run.name, c, c.reward, index)
        finish_axes(reward_ax, [v for run in group for v in curves[id(run)][1].reward], integer_x=False)
    alarms = False
    for run in drawn:
        index, c = curves[id(run)]
        peak = draw_with_peak(verified_ax, run.name, c, c.verified, index)
        alarm = guard_alarm(run)["alarm_step"]
        if alarm in c.steps:  # ✕ where the overoptimization guard fired
            at = c.steps.index(alarm)
            verified_ax.plot([c.sqrt_kl[at]], [c.verified[at]], marker="X", markersize=11, color=f"C{index % 10}",
                             markeredgecolor="black", linestyle="none")
            alarms = True
        verified_ax.annotate(f"step {c.steps[peak]}", (c.sqrt_kl[peak], c.verified[peak]), textcoords="offset points",
                             xytext=(8, 4 - 11 * (index % 4)), fontsize=8, color=f"C{index % 10}")  # staggered: peaks can meet
    verified_ax.set_title("verified accuracy of the same rollouts")
    finish_axes(verified_ax, [v for run in drawn for v in curves[id(run)][1].verified], integer_x=False)
    for ax in (*reward_axes, verified_ax):
        ax.set_xlabel("√KL(π ‖ π_init)  (nats^½ per completion)")
    legend_below(figure, [*reward_axes, verified_ax],
                 extra="★ = peak of verified accuracy" + ("; ✕ = overoptimization guard fired" if alarms else "")
                 + (f"; curves EMA-smoothed ({smooth})" if smooth else ""))
    figure.suptitle(title, fontweight="bold")
    figure.savefig(path)
    return path


def draw_with_peak(ax, name: str, c: Curve, values: list[float], index: int) -> int:
    """One run's curve against √KL, a star at its verified-accuracy peak; returns the peak's index."""
    from coreward.evaluation.plots import LINESTYLES

    color, style = f"C{index % 10}", LINESTYLES[index % len(LINESTYLES)]
    peak = max(range(len(c)), key=lambda i: c.verified[i])
    ax.plot(c.sqrt_kl, values, color=color, linestyle=style, linewidth=2, label=name)
    ax.plot([c.sqrt_kl[peak]], [values[peak]], marker="*", markersize=14, color=color, markeredgecolor="black",
            linestyle="none")
    return peak


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
