"""`coreward map`: a hackability map of reward configs — how far can GRPO push each reward before the verified
accuracy of its own rollouts stops following it?

For every reward config × learning rate × seed, one `coreward train` run (a cell) goes to the longest horizon;
each shorter horizon is read from that run's metrics up to its step, not trained again (with a decaying
learning-rate schedule, or Cooper's RM schedule, a horizon H therefore sees the longest run's schedule up to
step H, not a schedule of its own). Every cell is an ordinary run directory, started with `--resume-if-any`: a map
that was stopped continues where it was, finished cells are skipped. Independent cells run side by side
(`jobs`), each with one torch thread.

The reward that is the verifier's own verdict (the method that sets `ground_truth`: the rule reward) is the reference
row: a config with another reward gets a twin built from it with that reward alone (same model, data and settings,
`rewards: [{name: rule}]`) unless one is given.

Per (config, learning rate, horizon), over seeds (mean ± std), from `evaluation/overoptimization.py`:
peak and final verified accuracy of the rollouts, the step and √KL of the peak, the gap between reward and
verified accuracy, the share of prompts with a verified rollout, and the held-out accuracy when logged.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coreward.experiments.jobs import (
    Job,
    default_jobs,
    last_step,
    run_jobs,
    side_by_side_settings,
    step_cost,
    train_command,
)
from coreward.runtime.errors import CorewardError


TABLE_FILE, JSON_FILE, FIGURE_FILE, CURVES_FILE = "map.md", "map.json", "map.png", "curves.png"


@dataclass
class Cell:
    reward: str  # the config's label
    config: Path
    lr: float
    seed: int
    run_dir: Path
    log: Path
    status: str = "waiting"  # waiting | running | done | failed | stopped
    returncode: int | None = None
    seconds: float | None = None

    @property
    def label(self) -> str:
        return f"{self.reward} lr={self.lr:g} seed={self.seed}"


@dataclass
class MapSettings:
    configs: list[Path]
    lrs: list[float]
    horizons: list[int]
    seeds: list[int]
    output: Path
    jobs: int = field(default_factory=default_jobs)
    overrides: list[str] = field(default_factory=list)
    smooth: float = 0.6

    def validate(self) -> None:
        if not self.configs:
            raise CorewardError("give at least one reward config (--config FILE, repeatable)")
        for path in self.configs:
            if not path.is_file():
                raise CorewardError(f"config file not found: {path}")
        if not self.lrs or any(not lr > 0 for lr in self.lrs):
            raise CorewardError(f"--lr needs positive learning rates, got {self.lrs}")
        if not self.horizons or any(h < 1 for h in self.horizons):
            raise CorewardError(f"--horizons needs step counts >= 1, got {self.horizons}")
        if not self.seeds:
            raise CorewardError("--seeds needs at least one seed")
        if self.jobs < 1:
            raise CorewardError(f"--jobs must be >= 1, got {self.jobs}")
        if not 0 <= self.smooth < 1:
            raise CorewardError(f"--smooth must be in [0, 1), got {self.smooth}")


# ----------------------------------------------------------------------------------------------- the cells
def reward_configs(settings: MapSettings) -> list[tuple[str, Path]]:
    """(label, config file) per reward, the rule reference first (a twin of the first config when none is given).
    Every config is loaded and validated here, so a bad one fails before any run starts."""
    from coreward.grpo.config import TrainConfig
    from coreward.rewards import reference_method
    from coreward.runtime.config import load_config

    gold = reference_method().name  # the method whose reward is the verifier's verdict (`ground_truth`)
    labelled, seen = [], set()
    reference = None
    for path in settings.configs:
        config = load_config(TrainConfig, path, settings.overrides)
        config.validate()
        label = path.stem if path.stem not in seen else f"{path.parent.name}/{path.stem}"
        seen.add(label)
        if [r.name for r in config.rewards] == [gold] and reference is None:
            reference = (label, path.resolve())
        else:
            labelled.append((label, path.resolve()))
    if reference is None:
        twin = settings.output / "configs" / f"{gold}.yaml"
        twin.parent.mkdir(parents=True, exist_ok=True)
        first = settings.configs[0].resolve()
        twin.write_text(f"# the {gold}-reward reference of this map: {first} with the {gold} reward only\n"
                        f"base: {first}\nrewards:\n  - name: {gold}\n")
        reference = (gold, twin)
    return [reference, *labelled]


def plan(settings: MapSettings) -> list[Cell]:
    cells = []
    for label, path in reward_configs(settings):
        for lr in settings.lrs:
            for seed in settings.seeds:
                name = f"lr{lr:g}_seed{seed}"
                cells.append(Cell(label, path, lr, seed, settings.output / "runs" / label / name,
                                  settings.output / "logs" / f"{label.replace('/', '_')}_{name}.log"))
    return cells


def cell_command(cell: Cell, max_steps: int, overrides: Sequence[str], parallel: int = 1) -> list[str]:
    """The cell's `coreward train` command: one torch thread and a verifier process per core the cell has when
    `parallel` cells share the machine (`side_by_side_settings`), the user's `--set` items last (they win)."""
    sets = [f"grpo.learning_rate={cell.lr!r}", f"seed={cell.seed}", *side_by_side_settings(parallel), *overrides]
    return train_command(cell.config, cell.run_dir, sets, "--max-steps", str(max_steps), "--resume-if-any")


def cell_cost(cell: Cell, max_steps: int, costs: dict[Path, float]) -> float:
    """Its expected length, for the order of side-by-side cells (longest first): the steps it has left (a resumed cell
    has made some) times its step cost relative to the rule reward's (`step_cost`). `costs` caches each config's."""
    if cell.config not in costs:
        from coreward.grpo.config import TrainConfig
        from coreward.runtime.config import load_config

        names = [spec.name for spec in load_config(TrainConfig, cell.config).rewards]
        costs[cell.config] = step_cost(names)
    return max(0, max_steps - last_step(cell.run_dir)) * costs[cell.config]


def finished(cell: Cell) -> bool:
    from coreward.grpo.train import final_complete

    return final_complete(cell.run_dir)


def run_cells(cells: list[Cell], settings: MapSettings, say: Callable[[str], None] = print,
              progress_every: float = 30.0) -> None:
    """Run every unfinished cell, `settings.jobs` at a time (experiments/jobs.py), with a progress line.
    Ctrl-C (or SIGTERM) stops the running cells cleanly (they checkpoint) and raises."""
    max_steps = max(settings.horizons)
    costs: dict[Path, float] = {}
    jobs = [Job(cell.label, cell_command(cell, max_steps, settings.overrides, settings.jobs), cell.run_dir, cell.log, max_steps,
                status="done" if finished(cell) else "waiting", cost=cell_cost(cell, max_steps, costs),
                extra={"cell": cell}) for cell in cells]
    try:
        run_jobs(jobs, settings.jobs, prefix="map", noun="cells", say=say, succeeded=lambda job: finished(job.extra["cell"]),
                 progress_every=progress_every)
    finally:
        for job in jobs:
            cell = job.extra["cell"]
            cell.status, cell.returncode, cell.seconds = job.status, job.returncode, job.seconds


# ----------------------------------------------------------------------------------------------- the results
def collect(cells: list[Cell], settings: MapSettings) -> dict[str, Any]:
    """Each finished cell's summary at every horizon, and the per-(reward, lr, horizon) rows over seeds."""
    from coreward.evaluation.overoptimization import summarize
    from coreward.evaluation.plots import load_run

    per_cell = []
    for cell in cells:
        entry = {"reward": cell.reward, "config": str(cell.config), "lr": cell.lr, "seed": cell.seed,
                 "run_dir": str(cell.run_dir), "status": cell.status, "horizons": {}}
        if cell.status == "done":
            run = load_run(cell.run_dir, cell.label)
            for horizon in sorted(settings.horizons):
                summary = summarize(run, settings.smooth, upto_step=horizon)
                entry["horizons"][str(horizon)] = summary.to_dict() if summary else None
        per_cell.append(entry)
    rows = []
    rewards = list(dict.fromkeys(c.reward for c in cells))
    for lr in settings.lrs:
        for horizon in sorted(settings.horizons):
            reference = None
            for reward in rewards:
                seeds = [e for e in per_cell if e["reward"] == reward and e["lr"] == lr]
                values = [e["horizons"].get(str(horizon)) for e in seeds]
                row = {"reward": reward, "lr": lr, "horizon": horizon, "seeds": [e["seed"] for e in seeds],
                       **{key: [v[key] if v else None for v in values] for key in SUMMARY_KEYS}}
                if reward == rewards[0]:
                    reference = row
                row["vs_reference"] = [None if a is None or b is None else a - b
                                       for a, b in zip(row["final_verified"], reference["final_verified"])]
                rows.append(row)
    return {"settings": {"configs": [str(p) for p in settings.configs], "lrs": settings.lrs,
                         "horizons": sorted(settings.horizons), "seeds": settings.seeds, "jobs": settings.jobs,
                         "overrides": settings.overrides, "smooth": settings.smooth, "reference": rewards[0]},
            "cells": per_cell, "rows": rows}


SUMMARY_KEYS = ("steps", "peak_verified", "peak_step", "peak_sqrt_kl", "final_verified", "final_reward", "gap",
                "drop_from_peak", "final_coverage", "heldout_final", "alarm_step", "alarm_logged")


def render_table(result: dict[str, Any]) -> str:
    from coreward.evaluation.tables import spread_cell

    smooth, reference = result["settings"]["smooth"], result["settings"]["reference"]
    smoothing = f"EMA {smooth}" if smooth else "unsmoothed"  # named as report.md's tables name it
    header = ["Reward", "lr", "Steps", f"Peak verified, {smoothing}", "Peak step", "√KL at peak",
              f"Final verified, {smoothing}", f"vs {reference}", f"Final reward, {smoothing}",
              "Gap (reward − verified)",
              "Prompts with a verified rollout", "Held-out (final)", "Guard fired"]
    lines = ["| " + " | ".join(header) + " |", "|---|---:|" + "---:|" * (len(header) - 2)]
    for row in result["rows"]:
        def cell(key, scale=1.0, digits=2, sign=False, row=row):
            values = row[key]
            return spread_cell(values if len(values) > 1 else (values[0] if values else None), scale, digits, sign)

        name = f"**{row['reward']}** (reference)" if row["reward"] == result["settings"]["reference"] else row["reward"]
        lines.append("| " + " | ".join([
            name, f"{row['lr']:g}", str(row["horizon"]), cell("peak_verified", 100, 1), cell("peak_step", 1, 0),
            cell("peak_sqrt_kl"), cell("final_verified", 100, 1),
            "–" if row["reward"] == result["settings"]["reference"] else cell("vs_reference", 100, 1, sign=True),
            cell("final_reward", 1, 3), cell("gap", 1, 3, sign=True), cell("final_coverage", 100, 1),
            cell("heldout_final", 100, 1), guard_cell(row),
        ]) + " |")
    seeds = result["settings"]["seeds"]
    return "\n".join(lines) + (
        "\n\nVerified accuracy, reward and coverage are the training rollouts' own, "
        f"{f'EMA-smoothed per step (weight {smooth})' if smooth else 'unsmoothed'}; accuracies in %. {'Mean ± std over seeds ' + str(seeds) if len(seeds) > 1 else 'Seed ' + str(seeds[0])}. "
        f"Each row's horizon is read from the run to {max(result['settings']['horizons'])} steps. "
        f"\"vs {reference}\": final verified accuracy minus the reference's at the same lr, horizon and seed "
        "(points). "
        "Guard fired: on how many seeds the overoptimization guard (grpo/guard.py) fired by the horizon, and at "
        "which steps (* where the run did not run the guard: its default alarm replayed on the run's metrics).")


def guard_cell(row: dict[str, Any]) -> str:
    """"1 of 3 (38)": seeds whose run fired the overoptimization guard by the row's horizon, and where."""
    known = [(step, logged) for step, logged in zip(row["alarm_step"], row["alarm_logged"]) if logged is not None]
    if not known:
        return "–"
    fired = [f"{step}" + ("" if logged else "*") for step, logged in known if step is not None]
    return f"{len(fired)} of {len(known)}" + (f" ({', '.join(fired)})" if fired else "")


# map.png's rows: (summary key, panel title, scale). Verified accuracy in % as map.md prints it; the gap in the
# reward's own units minus the verified fraction, as map.md's "Gap (reward − verified)" column
MAP_PANELS = (("final_verified", "verified accuracy at the horizon (%)", 100.0),
              ("gap", "reward − verified accuracy", 1.0))


def plot_map(result: dict[str, Any], path: Path) -> Path | None:
    """map.png (see `map_figure`); None when no cell has a result."""
    figure = map_figure(result)
    if figure is None:
        return None
    figure.savefig(path)
    return path


def map_figure(result: dict[str, Any]):
    """Final verified accuracy (top, %) and the reward − verified gap (bottom) against the horizon, one line per
    reward, a column per learning rate; error bars are the std over seeds. None when no cell has a result."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from coreward.evaluation.plots import finish_axes, legend_below
    from coreward.evaluation.tables import mean_std

    lrs, rewards = result["settings"]["lrs"], list(dict.fromkeys(r["reward"] for r in result["rows"]))
    if not any(v is not None for r in result["rows"] for v in r["final_verified"]):
        return None
    figure = Figure(figsize=(4.6 * len(lrs) + 0.4, 6.6), dpi=110, layout="constrained")
    FigureCanvasAgg(figure)
    grid = figure.subplots(2, len(lrs), squeeze=False, sharex=True)
    for column, lr in enumerate(lrs):
        for row_index, (key, label, scale) in enumerate(MAP_PANELS):
            ax = grid[row_index][column]
            drawn = []
            for index, reward in enumerate(rewards):
                points = []
                for row in result["rows"]:
                    values = [scale * v for v in row[key] if v is not None]
                    if row["reward"] == reward and row["lr"] == lr and values:
                        points.append((row["horizon"], *mean_std(values)))
                if not points:
                    continue
                x, mean, std = zip(*points)
                ax.errorbar(x, mean, yerr=std, color=f"C{index % 10}", marker="o", capsize=3, linewidth=2,
                            linestyle="--" if index == 0 else "-", label=reward + (" (reference)" if index == 0 else ""))
                drawn += mean
            ax.set_title(f"lr {lr:g}: {label}", fontsize=10)
            ax.set_xlabel("horizon (steps)")
            ax.xaxis.set_tick_params(labelbottom=True)
            finish_axes(ax, list(drawn), min_span=0.1 * scale)  # at least 10 points of accuracy tall
    legend_below(figure, [ax for row in grid for ax in row])
    figure.suptitle("Hackability map", fontweight="bold")
    return figure


def make_map(settings: MapSettings, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Run (or resume) every cell, then write map.md, map.json, map.png and curves.png under `settings.output`."""
    from coreward.evaluation.overoptimization import plot_curves
    from coreward.evaluation.plots import load_run

    settings.validate()
    settings.output.mkdir(parents=True, exist_ok=True)
    cells = plan(settings)
    say(f"map: {len(cells)} cells ({len({c.reward for c in cells})} rewards × {len(settings.lrs)} lr × "
        f"{len(settings.seeds)} seeds) to {max(settings.horizons)} steps, {settings.jobs} at a time; "
        f"horizons {sorted(settings.horizons)} read from each run's metrics")
    start = time.monotonic()
    run_cells(cells, settings, say)
    result = collect(cells, settings)
    result["settings"]["wall_seconds"] = round(time.monotonic() - start, 1)
    result["settings"]["command"] = "coreward " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    (settings.output / JSON_FILE).write_text(json.dumps(result, indent=1) + "\n")
    (settings.output / TABLE_FILE).write_text("# Hackability map\n\n" + render_table(result) + "\n")
    plot_map(result, settings.output / FIGURE_FILE)
    runs = [load_run(c.run_dir, c.label) for c in cells if c.status == "done"]
    if runs:
        plot_curves(runs, settings.output / CURVES_FILE, settings.smooth)
    failed = [c for c in cells if c.status != "done"]
    if failed:
        raise CorewardError(f"{len(failed)} of {len(cells)} cells did not finish ({', '.join(c.label for c in failed)}); "
                            f"their logs are in {settings.output / 'logs'}; run the same command again to resume them")
    return result


