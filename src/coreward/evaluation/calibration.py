"""The overoptimization guard replayed over map cells, to choose its settings (`coreward guard-calibration`).

For every finished cell of the given `coreward map` directories the guard (evaluation/guard.py) is replayed over
its metrics.jsonl, with the defaults and with each variation of the grid, and each cell is judged:

    false alarm         a reference arm's cell (a reward the verifier backs, which cannot be hacked) where it fires
    detection           a collapsed cell (its smoothed verified accuracy ends below half its peak) where it fires
                        before half of the peak is lost; late: after; missed: never
    other alarm         a cell of another arm that did not collapse, where it fires
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Sequence

from coreward.evaluation.compare import map_cells
from coreward.evaluation.guard import GuardSettings, replay
from coreward.runtime.errors import CorewardError
from coreward.runtime.metrics import read_metrics


VERDICTS = ("false alarms", "reference cells", "detections", "late detections", "missed collapses",
            "collapsed cells", "other alarms")


@dataclass
class CellReplay:
    name: str  # map directory / arm / cell
    arm: str
    steps: int
    peak: float
    peak_step: int
    fired: int | None
    verified_there: float | None
    final: float

    @property
    def collapsed(self) -> bool:
        return self.final < self.peak / 2

    @property
    def lost(self) -> float | None:
        """The share of the peak lost where the guard fired."""
        return None if self.verified_there is None else (self.peak - self.verified_there) / self.peak


@dataclass
class Calibration:
    settings: GuardSettings
    cells: list[CellReplay]
    verdicts: dict[str, list[str]] = field(default_factory=dict)

    def counts(self) -> str:
        v = self.verdicts
        return (f"{len(v['false alarms'])}/{len(v['reference cells'])} false alarms, "
                f"{len(v['detections'])}/{len(v['collapsed cells'])} collapses detected before half the peak was "
                f"lost ({len(v['late detections'])} late, {len(v['missed collapses'])} missed), "
                f"{len(v['other alarms'])} other alarms")


def read_cells(map_dirs: Sequence[Path]) -> tuple[list[tuple[str, str, list[dict[str, Any]]]], list[str]]:
    """(arm, cell name, metrics rows) of every finished cell, and the maps' reference arms (map.json's)."""
    found, references = [], []
    for map_dir in map_dirs:
        if not Path(map_dir).is_dir():
            raise CorewardError(f"not a directory: {map_dir}")
        cells, settings = map_cells(Path(map_dir))
        if settings.get("reference"):
            references.append(settings["reference"])
        for cell in cells:
            run_dir = Path(cell["run_dir"])
            rows = read_metrics(run_dir / "metrics.jsonl")
            if rows:
                found.append((cell["reward"], f"{Path(map_dir).name}/{cell['reward']}/{run_dir.name}", rows))
    if not found:
        raise CorewardError(f"no finished map cell in {', '.join(map(str, map_dirs))}")
    return found, list(dict.fromkeys(references))


def judge(found, settings: GuardSettings, references: Sequence[str]) -> Calibration:
    result = Calibration(settings, [], {name: [] for name in VERDICTS})
    for arm, name, rows in found:
        watch, readings = replay(rows, settings)
        detector = watch.detector
        if not readings or detector.peak is None:
            continue
        at = next((r for r in readings if r.step == detector.fired_at), None)
        cell = CellReplay(name, arm, readings[-1].step, detector.peak, detector.peak_step, detector.fired_at,
                          at.verified if at else None, readings[-1].verified)
        result.cells.append(cell)
        if arm in references:
            result.verdicts["reference cells"].append(name)
            if cell.fired is not None:
                result.verdicts["false alarms"].append(name)
        elif cell.collapsed:
            result.verdicts["collapsed cells"].append(name)
            if cell.fired is None:
                result.verdicts["missed collapses"].append(name)
            else:  # the peak at the alarm is the running one: the share lost is of the run's peak up to then
                result.verdicts["detections" if cell.lost < 0.5 else "late detections"].append(name)
        elif cell.fired is not None:
            result.verdicts["other alarms"].append(name)
    return result


def parse_grid(items: Sequence[str]) -> list[tuple[str, list[Any]]]:
    """`--vary KEY=v1,v2` items as (key, typed values) of GuardSettings' fields."""
    defaults, known = GuardSettings(), {f.name for f in fields(GuardSettings)}
    grid = []
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or key not in known:
            raise CorewardError(f"--vary {item!r}: give KEY=v1,v2,... with KEY one of the guard's settings: "
                                f"{', '.join(sorted(known))}")
        kind = type(getattr(defaults, key))
        try:
            grid.append((key, [kind(v) for v in values.split(",") if v]))
        except ValueError:
            raise CorewardError(f"--vary {item!r}: {key} takes {kind.__name__} values") from None
    return grid


def calibrate(map_dirs: Sequence[Path], vary: Sequence[str] = (), references: Sequence[str] | None = None
              ) -> tuple[Calibration, list[tuple[str, Calibration]], list[str]]:
    """The defaults' calibration, for each setting of the grid its own, and the reference arms judged by."""
    found, from_maps = read_cells(map_dirs)
    references = list(references) if references else from_maps
    if not references:
        raise CorewardError("no reference arm: give --reference ARM (an arm whose reward the verifier backs)")
    defaults = GuardSettings()
    grid = parse_grid(vary)
    variations = []
    for combo in itertools.product(*(values for _, values in grid)) if grid else []:
        settings = replace(defaults, **{key: value for (key, _), value in zip(grid, combo)})
        label = ", ".join(f"{key}={value}" for (key, _), value in zip(grid, combo))
        variations.append((label, judge(found, settings, references)))
    return judge(found, defaults, references), variations, references


def render(defaults: Calibration, variations: list[tuple[str, Calibration]], references: Sequence[str]) -> str:
    lines = [f"{len(defaults.cells)} cells; reference arms (false alarms): {', '.join(references)}", "",
             "| cell | steps | peak verified (step) | guard fired at | verified there (lost of peak) | final verified |",
             "|---|---:|---:|---:|---:|---:|"]
    for c in defaults.cells:
        there = f"{100 * c.verified_there:.1f} ({100 * c.lost:.0f}%)" if c.verified_there is not None else "–"
        lines.append(f"| {c.name} | {c.steps} | {100 * c.peak:.1f} ({c.peak_step}) | "
                     f"{c.fired if c.fired is not None else '–'} | {there} | {100 * c.final:.1f} |")
    lines += ["", f"The defaults: {defaults.counts()}."]
    if variations:
        lines += ["", "Variations:", ""] + [f"- {label}: {calibration.counts()}" for label, calibration in variations]
    return "\n".join(lines)
