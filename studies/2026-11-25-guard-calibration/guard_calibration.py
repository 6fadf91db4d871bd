"""The overoptimization guard's rule over a hackability map's cells: where it fires, and how much of the peak was lost
by then (grpo/guard.py; the figures in docs/overoptimization.md, "The overoptimization guard").

For every cell (a `coreward map` run directory with its metrics.jsonl) it replays the guard, with its defaults and
with each variation given, and prints per cell: the peak of the smoothed verified accuracy, the step the guard fires
at, the share of the peak lost there, and the final value; then, per setting, the counts the rule is judged by:

    false alarms        cells of the reference rewards (rule: the reward is the verifier) where it fires
    detections          collapsed cells (the smoothed verified accuracy ends below half its peak) where it fires
                        before half of the peak is lost
    other alarms        cells of the other rewards that did not collapse, where it fires

    python benchmarks/guard_calibration.py runs/map_guard [more map directories] \
        [--vary rel_drop=0.1,0.2 --vary patience=3,5]
"""

from __future__ import annotations

import argparse
import itertools
from dataclasses import replace
from pathlib import Path

from coreward.evaluation.guard import GuardSettings, replay
from coreward.runtime.metrics import read_metrics


REFERENCES = ("rule",)


def cells(map_dirs: list[Path]) -> list[tuple[str, str, list[dict]]]:
    """(reward, cell name, metrics rows) of every map cell under the given map directories."""
    found = []
    for map_dir in map_dirs:
        for metrics in sorted(map_dir.glob("runs/*/*/metrics.jsonl")):
            rows = read_metrics(metrics)
            if rows:
                found.append((metrics.parent.parent.name, f"{map_dir.name}/{metrics.parent.parent.name}/"
                              f"{metrics.parent.name}", rows))
    return found


def judge(found, settings: GuardSettings, show: bool) -> dict[str, list[str]]:
    verdicts = {"false alarms": [], "detections": [], "late detections": [], "missed collapses": [],
                "other alarms": [], "reference cells": [], "collapsed cells": []}
    if show:
        print("| cell | steps | peak verified (step) | guard fired at | verified there (lost of peak) | final verified |")
        print("|---|---:|---:|---:|---:|---:|")
    for reward, name, rows in found:
        watch, readings = replay(rows, settings)
        detector = watch.detector
        if not readings or detector.peak is None:
            continue
        final = readings[-1].verified
        collapsed = final < detector.peak / 2
        fired = detector.fired_at
        at = next((r for r in readings if r.step == fired), None)
        lost = (detector.peak - at.verified) / detector.peak if at else None
        if reward in REFERENCES:
            verdicts["reference cells"].append(name)
            if fired is not None:
                verdicts["false alarms"].append(name)
        elif collapsed:
            verdicts["collapsed cells"].append(name)
            if fired is None:
                verdicts["missed collapses"].append(name)
            else:
                # the peak at the alarm is the running one; the share lost is of the run's whole peak up to then
                verdicts["detections" if lost < 0.5 else "late detections"].append(name)
        elif fired is not None:
            verdicts["other alarms"].append(name)
        if show:
            there = f"{100 * at.verified:.1f} ({100 * lost:.0f}%)" if at else "–"
            print(f"| {name} | {readings[-1].step} | {100 * detector.peak:.1f} ({detector.peak_step}) | "
                  f"{fired if fired is not None else '–'} | {there} | {100 * final:.1f} |")
    return verdicts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("maps", nargs="+", type=Path, help="coreward map output directories")
    parser.add_argument("--vary", action="append", default=[], help="SETTING=v1,v2,... (repeatable): a grid around the defaults")
    args = parser.parse_args()
    found = cells(args.maps)
    print(f"{len(found)} cells in {', '.join(map(str, args.maps))}\n")
    defaults = GuardSettings()
    print("## The defaults:", defaults, "\n")
    summary(judge(found, defaults, show=True))
    grid = [(key, [type(getattr(defaults, key))(v) for v in values.split(",")])
            for key, values in (item.split("=", 1) for item in args.vary)]
    if grid:
        print("\n## Variations (false alarms / detections before half the peak is lost / late / missed / other alarms)\n")
        for combo in itertools.product(*(values for _, values in grid)):
            settings = replace(defaults, **{key: value for (key, _), value in zip(grid, combo)})
            v = judge(found, settings, show=False)
            label = ", ".join(f"{key}={value}" for (key, _), value in zip(grid, combo))
            print(f"{label}: {len(v['false alarms'])}/{len(v['reference cells'])} false, "
                  f"{len(v['detections'])}/{len(v['collapsed cells'])} detected, {len(v['late detections'])} late, "
                  f"{len(v['missed collapses'])} missed, {len(v['other alarms'])} other alarms")


def summary(v: dict[str, list[str]]) -> None:
    print(f"\nfalse alarms on reference cells: {len(v['false alarms'])} of {len(v['reference cells'])} "
          f"{v['false alarms'] or ''}")
    print(f"collapsed cells detected before half the peak was lost: {len(v['detections'])} of "
          f"{len(v['collapsed cells'])}; late: {v['late detections'] or 0}; missed: {v['missed collapses'] or 0}")
    print(f"alarms on other cells (no collapse): {len(v['other alarms'])} {v['other alarms'] or ''}")


if __name__ == "__main__":
    main()
