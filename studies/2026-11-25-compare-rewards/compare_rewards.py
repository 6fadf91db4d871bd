"""Rewards compared on a hackability map's seeds: per reward, the final and peak verified accuracy (mean and a 95%
interval over seeds), the drop from peak to final, on how many seeds the overoptimization guard fired, and the paired
differences of one reward against the others (same seed, same learning rate) with their 95% intervals.

    python benchmarks/compare_rewards.py runs/map_compare [--horizon 120] [--against cooper]

Reads the map's map.json (`coreward map` writes it). Intervals are Student-t over seeds (n − 1 degrees of freedom);
a paired difference whose interval excludes 0 is one the seeds resolve. The guard's alarm is replayed with its
default rule on every cell's metrics (evaluation/guard.py), so cells trained with older guard settings count alike.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
from pathlib import Path

from coreward.evaluation.guard import alarm_step
from coreward.runtime.metrics import read_metrics


def t_quantile(df: int) -> float:
    """The 97.5% quantile of Student's t (scipy when present, else a table for small df)."""
    try:
        from scipy.stats import t

        return float(t.ppf(0.975, df))
    except ImportError:
        table = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
        return table.get(df, 1.96)


def t_interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and the Student-t 95% interval (n − 1 degrees of freedom); a single value has no interval (nan)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.nan, math.nan
    half = t_quantile(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def sign_flip_p(differences: list[float]) -> float:
    """Two-sided exact permutation p of the mean paired difference: under "no difference" each seed's difference is as
    likely negated, so p = the share of the 2^n sign patterns whose |mean| is at least the observed one."""
    n = len(differences)
    observed = abs(sum(differences)) - 1e-12  # ties count as at least as extreme
    extreme = sum(abs(sum(s * d for s, d in zip(signs, differences))) >= observed
                  for signs in itertools.product((1, -1), repeat=n))
    return extreme / 2 ** n


def interval(values: list[float]) -> str:
    if not values:
        return "–"
    mean, low, high = t_interval(values)
    if len(values) < 2:
        return f"{mean:.1f} (1 seed)"
    return f"{mean:.1f} [{low:.1f}, {high:.1f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("map_dir", type=Path)
    parser.add_argument("--horizon", type=int, default=None, help="steps (default: the map's longest horizon)")
    parser.add_argument("--against", default="cooper", help="the reward whose paired differences are shown")
    args = parser.parse_args()
    result = json.loads((args.map_dir / "map.json").read_text())
    horizon = str(args.horizon or max(result["settings"]["horizons"]))
    cells = {}
    for cell in result["cells"]:
        summary = cell["horizons"].get(horizon)
        if cell["status"] != "done" or summary is None:
            continue
        rows = [r for r in read_metrics(Path(cell["run_dir"]) / "metrics.jsonl") if r["step"] <= int(horizon)]
        cells[(cell["reward"], cell["lr"], cell["seed"])] = {**summary, "alarm": alarm_step(rows)}
    rewards = list(dict.fromkeys(k[0] for k in cells))
    print(f"{args.map_dir}: horizon {horizon} steps, {len(cells)} finished cells\n")
    print("| reward | seeds | final verified (%) | peak verified (%) | drop peak → final (points) | guard fired |")
    print("|---|---:|---:|---:|---:|---:|")
    for reward in rewards:
        mine = {k: v for k, v in cells.items() if k[0] == reward}
        fired = [v["alarm"] for v in mine.values() if v["alarm"] is not None]
        print(f"| {reward} | {len(mine)} | {interval([100 * v['final_verified'] for v in mine.values()])} | "
              f"{interval([100 * v['peak_verified'] for v in mine.values()])} | "
              f"{interval([100 * v['drop_from_peak'] for v in mine.values()])} | {len(fired)} of {len(mine)} |")
    print(f"\nPaired differences, {args.against} − other (same seed and lr), final verified accuracy in points:\n")
    for reward in rewards:
        if reward == args.against:
            continue
        pairs = [100 * (cells[(args.against, lr, seed)]["final_verified"] - v["final_verified"])
                 for (name, lr, seed), v in cells.items() if name == reward and (args.against, lr, seed) in cells]
        if pairs:
            lo_hi = interval(pairs)
            resolved = ""
            if len(pairs) > 1:
                _, low, high = t_interval(pairs)
                resolved = "resolved (interval excludes 0)" if low > 0 or high < 0 else "not resolved"
            print(f"- {args.against} − {reward}: {lo_hi} over {len(pairs)} seeds: {resolved}")


if __name__ == "__main__":
    main()
