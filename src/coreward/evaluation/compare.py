"""Arms compared on your own runs with paired statistics (`coreward compare`; the statistics are evaluation/stats.py).

An *arm* is whatever the directories hold: a map's rows (its reward configs), or the directories given under one
label (`LABEL=DIR`, repeatable: the seeds of one arm). A *unit* is one run of an arm, and it is paired with the
other arm's unit of the same key:

    a map directory         (map.json, or runs/<arm>/lr<lr>_seed<seed>/ while it runs) each finished cell, keyed by
                            (lr, seed); its figure the final verified accuracy of its training rollouts (EMA, as
                            `coreward map` summarizes a cell) at the horizon
    a training run          (metrics.jsonl) the same figure, keyed by its config's seed
    an evaluation           (results.json and samples.parquet of `coreward eval`) avg@n, keyed by its place among
                            its arm's directories; per problem, the share of its samples verified correct

With `heldout` a map cell or run is judged instead on held-out avg@n of its final/ and its best-kept policy (the
guard's best/), evaluated alike and cached in the run (fair_eval.json): the comparison users get, not the training
rollouts' (the "fair fight" of co-optimized against frozen reward models). An arm with one unit (a base model's
evaluation) pairs with every unit of the other arm.

Paired by seed, each pair of units gives one difference; paired by problem, each pair of evaluations gives one
difference per problem they share, pooled. Each comparison reports the mean difference with its t interval and the
exact sign-flip p, Holm's adjusted p when there are several, Fisher's exact p on collapses, and with a margin the
two one-sided tests (TOST) of equivalence: "no difference found" is never read as "equal".
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from coreward.evaluation import stats
from coreward.runtime.errors import CorewardError
from coreward.runtime.files import COMPLETE_MARKER


ALPHA = 0.05  # a family's comparisons are resolved at Holm-adjusted p below this


MAP_SMOOTH = 0.6  # `coreward map`'s default EMA weight, for a map whose map.json is not written yet
HELDOUT_FILE = "fair_eval.json"
PAIRINGS = ("seed", "problem")


@dataclass
class Unit:
    arm: str
    key: tuple  # pairs it with the other arm's unit: (lr, seed) of a map cell, (seed,) of a run, (place,) of an eval
    source: Path
    value: float | None  # the compared figure, a fraction
    per_problem: dict[str, float] | None = None  # problem id -> share of its samples verified correct
    info: dict[str, Any] = field(default_factory=dict)  # peak, drop, alarm, collapsed, cpu_s, heldout_best, ...


@dataclass
class Result:
    """One comparison a − b over its pairs."""

    a: str
    b: str
    what: str
    paired_by: str
    comparison: stats.Comparison
    holm_p: float | None = None
    equivalence: stats.Equivalence | None = None
    collapses_p: float | None = None

    @property
    def resolved(self) -> bool:
        """The interval excludes 0 and, in a family of comparisons, Holm's adjusted p is below 0.05: an uncorrected
        interval that excludes 0 is not a finding when several comparisons were made."""
        return self.comparison.resolved and (self.holm_p is None or self.holm_p < ALPHA)

    def verdict(self) -> str:
        if self.resolved:
            return "resolved (the interval excludes 0" + (", Holm p < 0.05)" if self.holm_p is not None else ")")
        if self.comparison.resolved:
            return f"not resolved after Holm (the uncorrected interval excludes 0, Holm p {self.holm_p:.3g} ≥ 0.05)"
        return "not resolved"

    def to_dict(self) -> dict[str, Any]:
        c = self.comparison
        return {"a": self.a, "b": self.b, "what": self.what, "paired_by": self.paired_by, "n": c.n, "mean": c.mean,
                "low": c.low, "high": c.high, "p": c.p, "holm_p": self.holm_p, "resolved": self.resolved,
                "resolved_uncorrected": c.resolved,
                "collapses_p": self.collapses_p,
                **({"margin": self.equivalence.margin, "tost_p": self.equivalence.p,
                    "equivalent": self.equivalence.equivalent} if self.equivalence else {})}


# ----------------------------------------------------------------------------------------------- reading units
def is_map(path: Path) -> bool:
    return (path / "map.json").is_file() or any(path.glob("runs/*/lr*_seed*/metrics.jsonl"))


def map_cells(map_dir: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A map's finished cells (reward, lr, seed, run_dir) and its settings: from map.json once the map has ended,
    else from its run directories (a cell is finished when its final/ is complete)."""
    if (map_dir / "map.json").is_file():
        try:
            result = json.loads((map_dir / "map.json").read_text())
            cells = [c for c in result["cells"] if c["status"] == "done"]
            return [{k: c[k] for k in ("reward", "lr", "seed", "run_dir")} for c in cells], result["settings"]
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            raise CorewardError(f"{map_dir / 'map.json'}: not a map.json `coreward map` wrote ({error})") from None
    cells = []
    for run_dir in sorted(map_dir.glob("runs/*/lr*_seed*")):
        if (run_dir / "final" / COMPLETE_MARKER).is_file():
            lr, seed = run_dir.name[2:].split("_seed")
            cells.append({"reward": run_dir.parent.name, "lr": float(lr), "seed": int(seed), "run_dir": str(run_dir)})
    return cells, {"smooth": MAP_SMOOTH}


def run_unit(arm: str, run_dir: Path, key: tuple, smooth: float, horizon: int | None) -> Unit:
    """A training run's final verified accuracy of its rollouts, with what the arms' table shows beside it."""
    from coreward.evaluation.overoptimization import summarize
    from coreward.evaluation.plots import load_run

    summary = summarize(load_run(run_dir, arm), smooth, upto_step=horizon)
    if summary is None:
        raise CorewardError(f"{run_dir}: its metrics.jsonl logs no verified accuracy to compare")
    info = {"peak": summary.peak_verified, "drop": summary.drop_from_peak, "alarm": summary.alarm_step,
            "collapsed": summary.final_verified < 0.5 * summary.peak_verified, "cpu_s": None}
    saved = run_dir / "summary.json"
    if saved.is_file():
        values = json.loads(saved.read_text())
        cpu = values.get("process_cpu_s")
        info["cpu_s"] = cpu if cpu is not None else values.get("train_runtime")
        info["cpu_kind"] = "cpu" if cpu is not None else "wall"
    return Unit(arm, key, run_dir, summary.final_verified, info=info)


def eval_unit(arm: str, eval_dir: Path, key: tuple, benchmark: str | None) -> Unit:
    """An evaluation's avg@n on one benchmark (the only one, or `benchmark`) and its per-problem shares."""
    import pandas as pd

    results = json.loads((eval_dir / "results.json").read_text())
    names = list(results.get("benchmarks", {}))
    if benchmark is None:
        if len(names) != 1:
            raise CorewardError(f"{eval_dir} evaluated {', '.join(names) or 'no benchmark'}: say which with "
                                "--benchmark")
        benchmark = names[0]
    if benchmark not in names:
        raise CorewardError(f"{eval_dir} has no benchmark {benchmark!r} (it has {', '.join(names)})")
    figures = results["benchmarks"][benchmark]
    value = next((v for k, v in figures.items() if k.startswith("avg@")), None)
    if value is None:
        raise CorewardError(f"{eval_dir}: {benchmark} has no reference answers, so no avg@n to compare")
    # what the policy learned to write, beside how often it is right
    learned = {"pass": next((v for k, v in figures.items() if k.startswith("pass@") and k != "pass@1"), None),
               "tokens": figures.get("mean_completion_tokens"), "cut": figures.get("truncated_fraction"),
               "answered": figures.get("answered")}
    per_problem = None
    if (eval_dir / "samples.parquet").is_file():
        samples = pd.read_parquet(eval_dir / "samples.parquet", columns=["benchmark", "problem_id", "correct"])
        samples = samples[samples["benchmark"] == benchmark]
        per_problem = samples.groupby("problem_id")["correct"].mean().astype(float).to_dict()
    return Unit(arm, key, eval_dir, value, per_problem, info={"benchmark": benchmark, **learned})


def parse_spec(spec: str) -> tuple[str | None, Path]:
    label, _, path = spec.rpartition("=")
    return (label or None), Path(path)


def load_units(specs: Sequence[str], horizon: int | None = None, benchmark: str | None = None) -> list[Unit]:
    """Every unit of the given directories (`DIR` or `LABEL=DIR`), in the order given; a unit of an arm and key a
    later directory holds too (the same cell in two maps: a map's rule twin and another map's rule row) is the later
    one's."""
    units: list[Unit] = []
    places: dict[str, int] = {}
    for spec in specs:
        label, path = parse_spec(spec)
        if not path.is_dir():
            raise CorewardError(f"not a directory: {path}")
        if is_map(path):
            cells, settings = map_cells(path)
            if not cells:
                raise CorewardError(f"{path}: a map with no finished cell yet")
            for cell in cells:
                arm = f"{label}/{cell['reward']}" if label else cell["reward"]
                units.append(run_unit(arm, Path(cell["run_dir"]), (cell["lr"], cell["seed"]),
                                      settings.get("smooth", MAP_SMOOTH), horizon))
            continue
        arm = label or path.name
        places[arm] = places.get(arm, 0) + 1
        if (path / "results.json").is_file():
            units.append(eval_unit(arm, path, (places[arm],), benchmark))
        elif (path / "metrics.jsonl").is_file():
            units.append(run_unit(arm, path, (run_seed(path),), MAP_SMOOTH, horizon))
        else:
            raise CorewardError(f"{path}: neither a map (map.json, runs/), a training run (metrics.jsonl) nor an "
                                "evaluation (results.json)")
    latest = {(u.arm, u.key): u for u in units}
    return [u for u in units if latest[(u.arm, u.key)] is u]


def run_seed(run_dir: Path) -> int | None:
    import yaml

    config = run_dir / "config.yaml"
    return (yaml.safe_load(config.read_text()) or {}).get("seed") if config.is_file() else None


# ----------------------------------------------------------------------------------------------- held out
def heldout_units(units: list[Unit], benchmark: str, problems: int | None, n: int, seed: int,
                  say: Callable[[str], None] = lambda line: None) -> list[Unit]:
    """Each run unit judged on held-out avg@n of its final/ policy (`value`) and of its best-kept one
    (`info["heldout_best"]`: the guard's best/, final/ when it kept none), sampled alike (temperature 0.7, top-p
    0.95, `seed`) and cached in the run's fair_eval.json under these settings."""
    from coreward.evaluation.evaluate import evaluate
    from coreward.runtime.devices import torch_threads

    def avg(model: Path, cache: Path) -> float:
        with torch_threads(1):
            result = evaluate(str(model), benchmarks=[benchmark], n=n, temperature=0.7, top_p=0.95, seed=seed,
                              limit=problems, output_dir=cache)
        return result[benchmark].avg

    judged = []
    for unit in units:
        if unit.per_problem is not None or "peak" not in unit.info:
            raise CorewardError(f"{unit.source}: --heldout judges training runs and map cells, not evaluations")
        path, key = unit.source / HELDOUT_FILE, f"benchmark={benchmark},problems={problems},n={n},seed={seed}"
        saved = json.loads(path.read_text()) if path.is_file() else {}
        if key not in saved:
            say(f"held out: evaluating {unit.arm} {unit.key} ({unit.source})")
            best = unit.source / "best"
            kept = (best / "config.json").is_file()
            final = avg(unit.source / "final", unit.source / "fair_eval" / "final")
            saved[key] = {"final": final, "best": avg(best, unit.source / "fair_eval" / "best") if kept else final,
                          "best_kept": kept}
            path.write_text(json.dumps(saved, indent=1) + "\n")
        info = {**unit.info, "rollouts_final": unit.value, "heldout_best": saved[key]["best"],
                "best_kept": saved[key]["best_kept"]}
        judged.append(Unit(unit.arm, unit.key, unit.source, saved[key]["final"], info=info))
    return judged


def assets_read(run_dir: Path, names: Sequence[str]) -> list[str]:
    """Which of `names` (models, RMs: anything a build cost is given for) the run's reward sources name in their
    parameters: a value, or an item of a list value."""
    import yaml

    config = run_dir / "config.yaml"
    rewards = (yaml.safe_load(config.read_text()) or {}).get("rewards") or [] if config.is_file() else []
    found = []
    for reward in rewards:
        for value in ((reward or {}).get("params") or {}).values():
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, str) and item in names and item not in found:
                    found.append(item)
    return found


# ----------------------------------------------------------------------------------------------- comparing
def differences(a: list[Unit], b: list[Unit], paired_by: str) -> list[float]:
    """a − b over the pairs (units of the same key; an arm of one unit pairs with each unit of the other); by
    problem, one difference per problem the two evaluations share, pooled over the pairs."""
    if len(a) == 1 or len(b) == 1:  # one base evaluation (or run) against each of the other arm's units
        pairs = [(u, v) for u in a for v in b]
    else:
        by_key = {v.key: v for v in b}
        pairs = [(u, by_key[u.key]) for u in a if u.key in by_key]
    if paired_by == "seed":
        return [u.value - v.value for u, v in pairs if u.value is not None and v.value is not None]
    diffs = []
    for u, v in pairs:
        if u.per_problem is None or v.per_problem is None:
            raise CorewardError(f"--paired-by problem needs evaluations with samples.parquet: {u.source} or "
                                f"{v.source} has none")
        diffs += [u.per_problem[p] - v.per_problem[p] for p in sorted(set(u.per_problem) & set(v.per_problem))]
    return diffs


def compare(units: list[Unit], pairs: Sequence[tuple[str, str]], paired_by: str = "seed",
            margin: float | None = None, scale: float = 100.0) -> list[Result]:
    """Each pair (a, b) of arms compared on a − b (in points: `scale` times the fractions; `margin` in the same
    points), with Holm's adjustment over the whole family when it holds more than one comparison."""
    if paired_by not in PAIRINGS:
        raise CorewardError(f"--paired-by {paired_by!r}: choose seed or problem")
    arms = arms_of(units)
    results = []
    for a, b in pairs:
        for name in (a, b):
            if name not in arms:
                raise CorewardError(f"no arm {name!r}; the arms are {', '.join(arms)}")
        whats = [("final", lambda u: u.value)]
        if all("heldout_best" in u.info for u in arms[a] + arms[b]):
            whats.append(("best-kept", lambda u: u.info["heldout_best"]))
        for what, value in whats:
            mine = [Unit(u.arm, u.key, u.source, value(u), u.per_problem, u.info) for u in arms[a]]
            theirs = [Unit(u.arm, u.key, u.source, value(u), u.per_problem, u.info) for u in arms[b]]
            diffs = [scale * d for d in differences(mine, theirs, paired_by)]
            if not diffs:
                raise CorewardError(f"{a} and {b} share no {'seed' if paired_by == 'seed' else 'problem'} to pair")
            mean, low, high = stats.t_interval(diffs)
            comparison = stats.Comparison(len(diffs), mean, low, high, stats.sign_flip_p(diffs))
            tost = stats.equivalence(diffs, margin) if margin is not None and len(diffs) >= 2 else None
            collapses = [sum(bool(u.info.get("collapsed")) for u in arms[x]) for x in (a, b)]
            fisher = (stats.counts_test(collapses[0], len(arms[a]), collapses[1], len(arms[b]))
                      if any(collapses) else None)
            results.append(Result(a, b, what, paired_by, comparison, equivalence=tost, collapses_p=fisher))
    if len(results) > 1:
        for result, adjusted in zip(results, stats.holm([r.comparison.p for r in results])):
            result.holm_p = adjusted
    return results


def arms_of(units: list[Unit]) -> dict[str, list[Unit]]:
    arms: dict[str, list[Unit]] = {}
    for unit in units:
        arms.setdefault(unit.arm, []).append(unit)
    return arms


# ----------------------------------------------------------------------------------------------- the report
def interval(values: list[float], scale: float = 100.0) -> str:
    values = [scale * v for v in values if v is not None]
    if not values:
        return "–"
    mean, low, high = stats.t_interval(values)
    return f"{mean:.1f}" if math.isnan(low) else f"{mean:.1f} [{low:.1f}, {high:.1f}]"


def arms_table(units: list[Unit], build_costs: dict[str, float] | None = None) -> str:
    """Per arm: its units, the compared figure with its 95% t interval, and for runs what else they say."""
    arms = arms_of(units)
    runs = all("peak" in u.info for u in units)
    heldout = all("heldout_best" in u.info for u in units)
    evaluations = all("benchmark" in u.info for u in units)
    header = ["arm", "units", "held-out final" if heldout else "avg@n" if evaluations else "figure"]
    if evaluations:
        header += ["pass@n", "tokens", "cut at the cap", "answered"]
    if heldout:
        header += ["held-out best-kept", "rollouts final"]
    if runs:
        header += ["rollouts peak" if heldout else "peak", "drop peak → final", "guard fired", "collapsed", "CPU-s"]
        if build_costs:
            header += ["assets read", "builds (s)", "total (s)"]
    lines = ["| " + " | ".join(header) + " |", "|---|---:|" + "---:|" * (len(header) - 2)]
    for arm, mine in arms.items():
        row = [arm, str(len(mine)), interval([u.value for u in mine])]
        if evaluations:
            row += [interval([u.info["pass"] for u in mine]), interval([u.info["tokens"] for u in mine], 1.0),
                    interval([u.info["cut"] for u in mine]), interval([u.info["answered"] for u in mine])]
        if heldout:
            row += [interval([u.info["heldout_best"] for u in mine]), interval([u.info["rollouts_final"] for u in mine])]
        if runs:
            cpu = [u.info.get("cpu_s") for u in mine]
            rl = statistics.fmean(cpu) if all(c is not None for c in cpu) else None
            wall = " (wall)" if any(u.info.get("cpu_kind") == "wall" for u in mine) else ""
            row += [interval([u.info["peak"] for u in mine]), interval([u.info["drop"] for u in mine]),
                    f"{sum(u.info['alarm'] is not None for u in mine)} of {len(mine)}",
                    f"{sum(bool(u.info['collapsed']) for u in mine)} of {len(mine)}",
                    "–" if rl is None else f"{rl:.0f}{wall}"]
            if build_costs:
                read = list(dict.fromkeys(a for u in mine for a in assets_read(u.source, list(build_costs))))
                build = sum(build_costs[a] for a in read)
                row += [", ".join(read) or "–", f"{build:.0f}", "–" if rl is None else f"{build + rl:.0f}"]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def results_lines(results: list[Result]) -> list[str]:
    lines = []
    for r in results:
        c = r.comparison
        text = f"- {r.a} − {r.b}" + (f", {r.what}" if r.what != "final" or len({x.what for x in results}) > 1 else "")
        if c.n < 2:
            text += f": {c.mean:+.1f} points from 1 pair (no interval)"
        else:
            text += (f": {c.mean:+.1f} [{c.low:+.1f}, {c.high:+.1f}] points over {c.n} "
                     f"{'pairs' if r.paired_by == 'seed' else 'problem pairs'}, sign-flip p {c.p:.3g}")
            if r.holm_p is not None:
                text += f", Holm p {r.holm_p:.3g}"
            text += f": {r.verdict()}"
        if r.equivalence is not None:
            e = r.equivalence
            text += (f"; within ±{e.margin:g} points: {'equivalent' if e.equivalent else 'not shown equivalent'} "
                     f"(TOST p {e.p:.3g}, 90% interval [{e.low:+.1f}, {e.high:+.1f}])")
        if r.collapses_p is not None:
            text += f"; collapses: Fisher p {r.collapses_p:.3g}"
        lines.append(text)
    return lines


def report(units: list[Unit], results: list[Result], build_costs: dict[str, float] | None = None) -> str:
    """The arms' table and each comparison, in markdown."""
    family = f" ({len(results)} comparisons: read Holm's p)" if len(results) > 1 else ""
    paired_by = results[0].paired_by if results else "seed"
    return "\n".join([arms_table(units, build_costs), "",
                      f"Paired by {paired_by}, a − b in points{family}:", "", *results_lines(results)])
