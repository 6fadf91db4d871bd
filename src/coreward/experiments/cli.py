"""Command `coreward map`: the hackability map of reward configs (experiments/hackability.py)."""

from __future__ import annotations

from typing import Optional

import typer


def _numbers(text: str, kind, option: str) -> list:
    try:
        return [kind(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise typer.BadParameter(f"{option} takes comma-separated numbers, got {text!r}") from None


def map_command(
    config: list[str] = typer.Option(..., "--config", help="a reward config (repeatable): each is one row group; "
                                     "the reward that is the verifier's own verdict is the reference row (a twin of "
                                     "the first config with that reward alone is made when no config has it alone)"),
    lr: str = typer.Option(..., "--lr", help="learning rates, comma-separated, e.g. 5e-5,2e-4"),
    horizons: str = typer.Option(..., "--horizons", help="steps, comma-separated, e.g. 20,40,60: one run per "
                                 "(config, lr, seed) goes to the longest; the shorter horizons are read from "
                                 "that run's metrics, not trained again"),
    seeds: str = typer.Option("0", "--seeds", help="seeds, comma-separated"),
    output: str = typer.Option(..., "--output", help="map directory: runs/, logs/, map.md, map.json, map.png, "
                               "curves.png; run the same command again to resume an unfinished map"),
    jobs: Optional[int] = typer.Option(None, "--jobs", help="cells run side by side, one torch thread each "
                                       "(default: one per usable core, as many as the memory holds)"),
    set_: list[str] = typer.Option([], "--set", help="override a config key in every cell, e.g. "
                                   "--set data.eval_every=0 (repeatable)"),
    smooth: float = typer.Option(0.6, "--smooth", help="EMA weight for the per-step curves the summaries read"),
) -> None:
    """Hackability map: train against each reward config over learning rates × seeds, and tabulate where the
    verified accuracy of the rollouts peaks and how far the reward runs ahead of it, per horizon.

    Each cell is an ordinary `coreward train` run directory (started with --resume-if-any: an interrupted map continues, finished cells are skipped). With a decaying learning-rate schedule a shorter horizon sees the longest run's schedule up to its step.

    Example: coreward map --config configs/demo/model.yaml --config configs/demo/cooper.yaml --lr 5e-5,2e-4 --horizons 20,40,60 --seeds 3 --output runs/map
    """  # noqa: E501 (one paragraph a line: the help reflows them)
    from pathlib import Path

    from coreward.experiments.hackability import MapSettings, default_jobs, make_map

    settings = MapSettings(
        configs=[Path(c) for c in config], lrs=_numbers(lr, float, "--lr"),
        horizons=_numbers(horizons, int, "--horizons"), seeds=_numbers(seeds, int, "--seeds"),
        output=Path(output), jobs=jobs if jobs is not None else default_jobs(), overrides=list(set_),
        smooth=smooth,
    )
    make_map(settings, say=lambda line: typer.echo(line, err=True))
    typer.echo(f"wrote {Path(output) / 'map.md'}, map.json, map.png, curves.png")


def register(app: typer.Typer) -> None:
    """Attach `map` to the main app."""
    app.command("map")(map_command)
