"""Part A of docs/preregistration.md: the demo at the stress setting, 16 seeds, the registered tests.

    python studies/2026-12-05-preregistered-part-a/analyze.py UNITS_JSON

UNITS_JSON is what the registered comparison wrote (`--json`): every cell of both maps judged on the demo's 500
held-out problems × 8 samples, final/ (`value`) and the guard's best/ (`info.heldout_best`). Prints, as registered:
the five primary tests (H1, H2, H3a, H3b: mean difference with its 95% t interval and exact sign-flip p; H4: TOST at
±5 points) with Holm's adjustment over the five; the secondary ones (co-optimized − `min` ensemble; H1 on best/ with
TOST at ±3 points; collapses per arm with Fisher's exact test per pair; the CPU-seconds ratio of the frozen arm to the
co-optimized one, which the registration bounds by 0.9–1.1).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from coreward.evaluation import stats


SEEDS = tuple(range(1000, 1016))
CO_OPTIMIZED, AUTHORS, FROZEN, RULE = "co_optimized_rm_lr_4e-4", "cooper", "model", "rule"
MIN_ENSEMBLE, POOLED = "ensemble_min", "model_pooled"
H4_MARGIN, BEST_MARGIN = 0.05, 0.03  # registered: ±5 points (H4), ±3 points (H1 on best/)


def arms_by_seed(units: list[dict]) -> dict[str, dict[int, dict]]:
    """arm -> seed -> unit. The frozen map's rule twin (144 steps) is not analysed: the rule arm is the first map's."""
    arms: dict[str, dict[int, dict]] = {}
    for unit in units:
        seed = int(unit["key"][-1])
        if unit["arm"] == RULE and "demo_frozen" in unit["source"]:
            continue
        arms.setdefault(unit["arm"], {})[seed] = unit
    for arm, cells in arms.items():
        missing = sorted(set(SEEDS) - set(cells))
        if missing:
            print(f"warning: arm {arm} lacks seeds {missing}: the tests use the seeds every arm of a pair has")
    return arms


def pair(arms, a: str, b: str, field=lambda u: u["value"]) -> tuple[list[float], list[float]]:
    seeds = sorted(set(arms[a]) & set(arms[b]))
    return [field(arms[a][s]) for s in seeds], [field(arms[b][s]) for s in seeds]


def main(path: Path) -> None:
    arms = arms_by_seed(json.loads(path.read_text())["units"])
    print("held-out avg@8 of final/ (500 problems), mean over seeds:")
    for arm, cells in sorted(arms.items()):
        print(f"  {arm}: {100 * statistics.mean(u['value'] for u in cells.values()):.1f} (n {len(cells)})")

    primary = {"H1 co-optimized - frozen": (CO_OPTIMIZED, FROZEN), "H2 authors' Cooper - frozen": (AUTHORS, FROZEN),
               "H3a co-optimized - rule": (CO_OPTIMIZED, RULE), "H3b authors' Cooper - rule": (AUTHORS, RULE)}
    results, p_values = {}, []
    for name, (a, b) in primary.items():
        results[name] = stats.paired(*pair(arms, a, b))
        p_values.append(results[name].p)
    pooled, ensemble = pair(arms, POOLED, MIN_ENSEMBLE)
    h4 = stats.equivalence([x - y for x, y in zip(pooled, ensemble)], H4_MARGIN)
    p_values.append(h4.p)
    adjusted = stats.holm(p_values)
    print("primary (Holm over the five, alpha 0.05):")
    for (name, result), p_holm in zip(results.items(), adjusted):
        print(f"  {name}: {result.format(scale=100)}; Holm p {p_holm:.3g}: "
              f"{'resolved' if p_holm < 0.05 else 'not resolved'}")
    print(f"  H4 pooled - min ensemble: {h4.format(scale=100)}; Holm p {adjusted[-1]:.3g}: "
          f"{'equivalent' if adjusted[-1] < 0.05 else 'not shown equivalent'}")

    print("secondary (no claim rests on them alone):")
    print("  co-optimized - min ensemble:", stats.paired(*pair(arms, CO_OPTIMIZED, MIN_ENSEMBLE)).format(scale=100))
    best_a, best_b = pair(arms, CO_OPTIMIZED, FROZEN, lambda u: u["heldout_best"])
    print("  H1 on best/ (TOST ±3):", stats.equivalence([x - y for x, y in zip(best_a, best_b)], BEST_MARGIN)
          .format(scale=100), "| paired:", stats.paired(best_a, best_b).format(scale=100))
    collapsed = {arm: (sum(bool(u.get("collapsed")) for u in cells.values()), len(cells)) for arm, cells in arms.items()}
    print("  collapses:", ", ".join(f"{arm} {c} of {n}" for arm, (c, n) in sorted(collapsed.items())))
    for a, b in [*primary.values(), (POOLED, MIN_ENSEMBLE)]:
        if a in collapsed and b in collapsed:
            print(f"    {a} vs {b}: Fisher p {stats.counts_test(*collapsed[a], *collapsed[b]):.3g}")
    cpu = {arm: statistics.mean(u["cpu_s"] for u in cells.values() if u.get("cpu_s") is not None)
           for arm, cells in arms.items() if any(u.get("cpu_s") is not None for u in cells.values())}
    if FROZEN in cpu and CO_OPTIMIZED in cpu:
        ratio = cpu[FROZEN] / cpu[CO_OPTIMIZED]
        print(f"  CPU-s a run: frozen {cpu[FROZEN]:.0f}, co-optimized {cpu[CO_OPTIMIZED]:.0f}: ratio {ratio:.2f}"
              + ("" if 0.9 <= ratio <= 1.1 else " (outside 0.9-1.1: a departure, as registered)"))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
