"""Commands `coreward compare` (arms of your own runs, paired) and `coreward guard-calibration` (the guard
replayed over map cells): evaluation/compare.py and evaluation/calibration.py do the work."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer


def compare_command(
    dirs: Annotated[list[str], typer.Argument(
        metavar="DIR...", help="map directories (each row an arm), training run directories or `coreward eval` "
        "outputs; LABEL=DIR puts a directory in arm LABEL (repeat a label for its seeds; default: the folder's "
        "name)")],
    base: Annotated[Optional[str], typer.Option(
        "--base", help="the arm every other arm is compared with, or a directory (e.g. the base model's evaluation) "
        "taken as arm `base` (default: the first arm)")] = None,
    pair: Annotated[list[str], typer.Option(
        "--pair", help="A:B, compare arm A with arm B (repeatable; instead of each arm against --base)")] = [],  # noqa: B006
    paired_by: Annotated[str, typer.Option(
        "--paired-by", help="seed: one difference per pair of runs (same lr and seed); problem: one per problem two "
        "evaluations share, pooled")] = "seed",
    margin: Annotated[Optional[float], typer.Option(
        "--margin", min=0.0, help="equivalence margin in points: two one-sided tests (TOST) say whether each "
        "difference lies within ±MARGIN")] = None,
    horizon: Annotated[Optional[int], typer.Option(
        "--horizon", min=1, help="read training runs up to this step (default: their last)")] = None,
    benchmark: Annotated[Optional[str], typer.Option(
        "--benchmark", help="the benchmark of evaluations that hold several")] = None,
    heldout: Annotated[Optional[str], typer.Option(
        "--heldout", help="judge runs on this benchmark held out instead of their training rollouts: avg@n of "
        "final/ and of the guard's best/, evaluated alike and cached in each run (fair_eval.json)")] = None,
    problems: Annotated[Optional[int], typer.Option("--problems", min=1, help="--heldout: its first K problems")] = None,
    n: Annotated[int, typer.Option("--n", min=1, help="--heldout: samples per problem")] = 4,
    seed: Annotated[int, typer.Option("--seed", help="--heldout: the sampling seed, the same for every model")] = 0,
    build_cost: Annotated[list[str], typer.Option(
        "--build-cost", help="NAME=SECONDS: what building a model or RM a run's rewards name cost, added to the "
        "arms that read it (repeatable)")] = [],  # noqa: B006
    json_out: Annotated[Optional[Path], typer.Option("--json", help="also write every unit and comparison here")] = None,
) -> None:
    """Compare arms of your own runs with paired statistics: each arm's figure with its 95% t interval, and each
    comparison's mean difference with its interval, exact sign-flip p, Holm's p when there are several, and TOST
    equivalence with --margin.

    Examples: coreward compare runs/map --base ARM --margin 5;  coreward compare mine=runs/eval-s1 mine=runs/eval-s2 --base runs/eval-base --paired-by problem;  coreward compare runs/map --heldout demo --problems 200 --pair A:B
    """  # noqa: E501 (one paragraph a line: the help reflows them)
    import json

    from coreward.evaluation import compare
    from coreward.runtime.errors import CorewardError

    units = compare.load_units(dirs, horizon, benchmark)
    arms = list(compare.arms_of(units))
    if base is not None and base not in arms:
        if not Path(base).is_dir():
            raise CorewardError(f"--base {base!r} is neither an arm ({', '.join(arms)}) nor a directory")
        units = compare.load_units([f"base={base}"], horizon, benchmark) + units
        base = "base"
    if heldout:
        units = compare.heldout_units(units, heldout, problems, n, seed, say=lambda line: typer.echo(line, err=True))
    arms = list(compare.arms_of(units))
    if pair:
        pairs = []
        for item in pair:
            a, sep, b = item.partition(":")
            if not sep:
                raise CorewardError(f"--pair {item!r}: give A:B, two arms")
            pairs.append((a, b))
    else:
        base = base or arms[0]
        pairs = [(arm, base) for arm in arms if arm != base]
    costs = {}
    for item in build_cost:
        name, sep, seconds = item.partition("=")
        try:
            costs[name] = float(seconds)
        except ValueError:
            raise CorewardError(f"--build-cost {item!r}: give NAME=SECONDS") from None
    results = compare.compare(units, pairs, paired_by, margin)
    typer.echo(compare.report(units, results, costs or None))
    if json_out:
        json_out.write_text(json.dumps({
            "units": [{"arm": u.arm, "key": list(u.key), "source": str(u.source), "value": u.value, **u.info}
                      for u in units],
            "comparisons": [r.to_dict() for r in results]}, indent=1, default=str) + "\n")


def guard_calibration_command(
    maps: Annotated[list[Path], typer.Argument(metavar="MAP_DIR...", help="`coreward map` output directories")],
    vary: Annotated[list[str], typer.Option(
        "--vary", help="KEY=v1,v2,...: a grid of the guard's settings around its defaults (repeatable)")] = [],  # noqa: B006
    reference: Annotated[list[str], typer.Option(
        "--reference", help="an arm whose reward the verifier backs, where any alarm is false (repeatable; default: "
        "each map's reference row)")] = [],  # noqa: B006
) -> None:
    """Replay the overoptimization guard over a map's cells: where it fires, the share of the peak lost by then,
    and per setting its false alarms, detections of collapses (before half the peak is lost) and other alarms."""
    from coreward.evaluation.calibration import calibrate, render

    typer.echo(render(*calibrate(maps, vary, reference or None)))


def register(app: typer.Typer) -> None:
    app.command("compare")(compare_command)
    app.command("guard-calibration")(guard_calibration_command)
