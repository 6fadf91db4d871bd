"""Every interval and test of docs/results.md, recomputed with coreward.evaluation.stats from the per-seed (or
per-problem) figures the lab notes printed at commit cca096c (copied here by hand, each with where it was printed).

    PYTHONPATH=src python studies/2026-12-05-results-recomputed/recompute.py > studies/2026-12-05-results-recomputed/output.md

Figures are in points of accuracy (percent). Per-seed held-out values of the fair fight were printed rounded to whole
points, so a recomputed mean can differ from the printed one by a few tenths.
"""

from __future__ import annotations

from coreward.data.arith import load_arith
from coreward.evaluation.stats import (
    counts_test,
    equivalence,
    holm,
    paired,
    standard_error_of_accuracy,
    t_interval,
    t_quantile,
)


# --- the demo's fair fight, seeds 16-21, held-out final avg@4 on 200 test problems (overoptimization.md at cca096c,
# "A fair fight" and "Data-matched ..."; per seed 16 ... 21)
FAIR = {
    "frozen demo": [64, 42, 4, 65, 72, 41],
    "co-optimized demo": [78, 73, 78, 81, 74, 74],
    "frozen demo:1": [83, 82, 0, 78, 77, 78],
    "co-optimized demo:1": [86, 77, 82, 78, 74, 81],
    "frozen min ensemble": [86, 85, 79, 84, 76, 83],
    "co-optimized min ensemble": [83, 82, 84, 83, 81, 82],
    "rule": [85, 87, 88, 86, 78, 78],
    "frozen demo:pooled": [86, 82, 88, 78, 80, 80],
    "co-optimized demo:pooled": [85, 84, 84, 81, 85, 82],
    "authors' Cooper demo": [50, 60, 62, 78, 72, 77],
}
# the 16 tests the lab notes made on these seeds: (a, b) on final (recomputed here) and best-kept (per-seed values
# not printed: the printed p is used)
FAIR_PAIRS = [
    ("co-optimized demo", "frozen demo", 0.094),
    ("co-optimized demo:1", "frozen demo:1", 0.44),
    ("co-optimized min ensemble", "frozen min ensemble", 0.16),
    ("co-optimized demo:1", "frozen min ensemble", 0.031),
    ("frozen demo:pooled", "frozen min ensemble", 0.50),
    ("co-optimized demo:pooled", "frozen demo:pooled", 0.94),
    ("co-optimized demo:pooled", "frozen min ensemble", 0.72),
    ("co-optimized demo", "authors' Cooper demo", 0.28),
]
# comparisons the notes did not report, recomputed on the same seeds
FAIR_MORE = [
    ("co-optimized demo", "frozen min ensemble"),
    ("authors' Cooper demo", "frozen demo"),
    ("authors' Cooper demo", "rule"),
    ("co-optimized demo", "rule"),
    ("frozen min ensemble", "rule"),
    ("frozen demo:pooled", "rule"),
    ("co-optimized demo:pooled", "rule"),
]
# the RM learning-rate pick, seeds 10-15 (2e-3: 10-12), held-out final and best-kept
PICK = {
    "1e-4": ([76, 77, 68, 74, 69, 60], [75, 77, 68, 77, 73, 79]),
    "4e-4": ([78, 69, 66, 83, 77, 74], [79, 69, 72, 77, 77, 77]),
    "2e-3": ([55, 65, 19], [55, 65, 48]),
}
# the demo's stress rows (demo.md), seeds 0, 1, 2, held-out avg@8 on 500 test problems, lr 2e-4, 60 steps
STRESS = {
    "rule": [82.7, 82.2, 78.9],
    "static RM": [53.8, 71.2, 73.8],
    "authors' Cooper": [61.7, 74.3, 64.9],
    "co-optimized (rollout negatives)": [74.9, 75.5, 65.3],
}
# the demo's 30-step table (demo.md), seeds 0-2: Δ vs baseline, mean ± sd over seeds (per seed not printed)
GENTLE = {
    "rule": (30.8, 1.4), "static RM": (24.5, 2.1), "authors' Cooper": (24.0, 2.5), "majority": (12.8, 3.0),
    "self-certainty": (5.2, 4.3), "entropy": (-5.6, 1.9), "Co-rewarding-I": (11.1, 2.4), "Co-rewarding-II": (4.8, 2.8),
}
STRESS_DELTA = {"rule": (42.0, 2.8), "static RM": (27.0, 10.2), "authors' Cooper": (27.7, 6.6),
                "co-optimized (rollout negatives)": (32.7, 6.5)}
# the real model (real_model.md): per-seed paired differences in points (seed 42, seed 1 unless said)
REAL_SEED_DIFFS = {
    "rollout-negative Cooper − frozen RM at equal compute (36 steps)": [-8.5, 10.0],
    "rollout-negative Cooper − frozen RM, 20 steps each": [-2.2, 22.1],
    "the authors' Cooper (bugs fixed) − frozen RM, 20 steps": [1.6, 4.9],
    "the authors' Cooper (bugged) − frozen RM, 20 steps": [5.4, 8.7],
    "min ensemble − frozen RM, 20 steps": [-9.8, -2.5],
    "min ensemble at equal cost − rollout-negative Cooper": [-13.8, -29.5],
    "min ensemble at equal cost − frozen RM 36 steps": [-22.3, -19.4],
    "the authors' Cooper (fixed) − Co-rewarding-II": [3.8, 7.6],
    "Co-rewarding-II − majority": [4.9, 0.4],
    "the authors' Cooper (bugged) − rollout negatives": [7.6, -13.4],
}
REAL_BASE = 15.2
REAL_HELDOUT = {  # held-out avg@4 of 112 arith test problems, seed 42, seed 1 (rule: seeds 1, 2, 3)
    "rule (GT-GRPO)": [49.6, 50.9, 50.2],
    "judge_hybrid": [51.6, 47.8],
    "cooper (bugs fixed)": [50.7, 47.1],
    "co_rewarding_2": [46.9, 39.5],
    "majority (rerun in batches of 16)": [42.0, 39.1],
    "co_rewarding_1 (arith wording)": [37.7, 41.1],
    "entropy": [42.6, 29.7],
    "self_certainty": [9.6, 2.9],
    "frozen RM, 20 steps": [49.1, 42.2],
    "frozen RM, 36 steps": [55.4, 54.2],
    "rollout-negative Cooper, 20 steps": [46.9, 64.3],
    "min ensemble, 20 steps": [39.3, 39.7],
}
# per-problem intervals the notes printed with the normal quantile 1.96: (label, mean, low, high, pairs)
PER_PROBLEM = [
    ("rule − base, three seeds (per problem and seed)", 35.0, 30.6, 39.5, 336),
    ("bf16 − float32, rule seed 1, 10 steps", -1.1, -6.1, 3.9, 112),
    ("authors' Cooper (bugged) − frozen RM, two seeds", 7.0, 3.7, 10.3, 224),
    ("rollout negatives − frozen RM, 20 steps, two seeds", 9.9, 6.2, 13.6, 224),
    ("min ensemble − frozen RM, 20 steps, two seeds", -6.1, -10.0, -2.3, 224),
    ("authors' Cooper (fixed) − frozen RM, two seeds", 3.2, -0.8, 7.2, 224),
    ("rollout negatives − frozen RM 36 steps, equal compute, two seeds", 0.8, -5.0, 6.5, 224),
    ("min ensemble at equal cost − rollout negatives, two seeds", -21.7, -25.8, -17.5, 224),
    ("min ensemble at equal cost − frozen RM 36 steps, two seeds", -20.9, -26.3, -15.5, 224),
    ("self_certainty − base, seed 42", -5.6, -10.3, -0.9, 112),
    ("co_rewarding_1 − majority, seed 42", -7.8, -15.0, -0.6, 112),
]
# small maps and the 10x limit (per seed as printed)
SMALL = [
    ("10x lr (5e-4, 60 steps), seeds 0-2, held-out avg@8: authors' Cooper − static RM", [22.5, 2.1, 2.6], [3.5, 2.1, 1.8]),
    ("map at 5e-5, 120 steps, seeds 4, 5, rollouts final: static RM − authors' Cooper", [71.6, 62.9], [67.3, 64.1]),
    ("map at 2e-4, 120 steps, seeds 4, 5, rollouts final: rollout negatives − authors' Cooper", [54.0, 70.9],
     [57.9, 65.1]),
]
# collapse counts (final below half the peak of the rollouts' smoothed verified accuracy)
COUNTS = [
    ("co-optimized vs frozen, single RMs, seeds 16-21", 0, 12, 2, 12),
    ("the authors' Cooper vs frozen RM, seeds 3-5 and 10-15 (map)", 2, 9, 2, 9),
    ("rollout negatives vs frozen RM, seeds 10-15", 0, 6, 1, 6),
    ("Co-rewarding-II vs majority+self-certainty+entropy, seeds 3-5", 0, 3, 7, 9),
    ("Co-rewarding-II vs Co-rewarding-I, seeds 3-5", 0, 3, 2, 3),
]


def pts(mean: float, low: float, high: float) -> str:
    return f"{mean:+.1f} [{low:+.1f}, {high:+.1f}]"


def main() -> None:
    print("## Fair fight, seeds 16-21, held-out final (from the printed whole-point per-seed values)\n")
    for arm, values in FAIR.items():
        mean, low, high = t_interval(values)
        print(f"- {arm}: {mean:.1f} [{low:.1f}, {high:.1f}]")
    print("\nThe 16 tests of the lab notes (final recomputed, best-kept p as printed), Holm over all 16:\n")
    finals = [paired(FAIR[a], FAIR[b]) for a, b, _ in FAIR_PAIRS]
    ps = [c.p for c in finals] + [p for *_, p in FAIR_PAIRS]
    adjusted = holm(ps)
    for i, ((a, b, best_p), c) in enumerate(zip(FAIR_PAIRS, finals)):
        print(f"- {a} − {b}: final {c.format()} (Holm {adjusted[i]:.3g}); best-kept p {best_p} "
              f"(Holm {adjusted[len(finals) + i]:.3g})")
    print("\nNot reported by the lab notes:\n")
    for a, b in FAIR_MORE:
        print(f"- {a} − {b}: final {paired(FAIR[a], FAIR[b]).format()}")
    no18 = [i for i in range(6) if i != 2]
    diffs = [x - y for x, y in zip(FAIR["co-optimized demo"], FAIR["frozen demo"])]
    print(f"\n- co-optimized − frozen from demo, per seed: {diffs} (sum {sum(diffs)}; seed 18 gives {diffs[2]})")
    print(f"- the same without seed 18: "
          f"{paired([FAIR['co-optimized demo'][i] for i in no18], [FAIR['frozen demo'][i] for i in no18]).format()}")
    for a, b in [("frozen demo:pooled", "frozen min ensemble"), ("co-optimized min ensemble", "frozen min ensemble"),
                 ("co-optimized demo:pooled", "frozen demo:pooled"), ("co-optimized demo:pooled", "frozen min ensemble"),
                 ("frozen min ensemble", "rule"), ("frozen demo:pooled", "rule")]:
        d = [x - y for x, y in zip(FAIR[a], FAIR[b])]
        for margin in (3.0, 5.0):
            print(f"- TOST {a} − {b}: {equivalence(d, margin).format()}")
    print("\n## RM learning-rate pick, seeds 10-15\n")
    for lr, (final, best) in PICK.items():
        print(f"- {lr}: final {pts(*t_interval(final))}, best-kept {pts(*t_interval(best))}")
    print(f"- 4e-4 − 1e-4 final {paired(PICK['4e-4'][0], PICK['1e-4'][0]).format()}; "
          f"best-kept {paired(PICK['4e-4'][1], PICK['1e-4'][1]).format()}")
    print("\n## Demo stress rows, seeds 0-2, held-out avg@8 (lr 2e-4, 60 steps)\n")
    for arm, values in STRESS.items():
        print(f"- {arm}: {pts(*t_interval(values))}")
    for a, b in [("authors' Cooper", "static RM"), ("co-optimized (rollout negatives)", "authors' Cooper"),
                 ("co-optimized (rollout negatives)", "static RM"), ("rule", "co-optimized (rollout negatives)")]:
        print(f"- {a} − {b}: {paired(STRESS[a], STRESS[b]).format()}")
    print("\n## Demo tables from mean ± sd over 3 seeds (t interval = mean ± t(2) sd/√3)\n")
    q = t_quantile(2) / 3 ** 0.5
    for name, table in (("30 steps, Δ vs baseline", GENTLE), ("stress, Δ vs baseline", STRESS_DELTA)):
        for arm, (mean, sd) in table.items():
            print(f"- {name}, {arm}: {pts(mean, mean - q * sd, mean + q * sd)}")
    print("\n## Real model, over seeds (two seeds: t(1) = 12.7)\n")
    for label, d in REAL_SEED_DIFFS.items():
        print(f"- {label}: per seed {d}: {pts(*t_interval(d))}")
    for arm, values in REAL_HELDOUT.items():
        deltas = [v - REAL_BASE for v in values]
        print(f"- {arm} − base: per seed {[round(x, 1) for x in deltas]}: {pts(*t_interval(deltas))}")
    print("\n## Real model, per-problem intervals printed with 1.96, with the exact t quantile\n")
    for label, mean, low, high, n in PER_PROBLEM:
        half = (high - low) / 2 * t_quantile(n - 1) / 1.96
        print(f"- {label} ({n} pairs): printed {pts(mean, low, high)}, exact t({n - 1}) "
              f"{t_quantile(n - 1):.4f}: {pts(mean, mean - half, mean + half)}")
    print("\n## Small maps and the 10x limit\n")
    for label, a, b in SMALL:
        print(f"- {label}: {paired(a, b).format()}")
    print("\n## Collapse counts, Fisher's exact test\n")
    for label, a, na, b, nb in COUNTS:
        print(f"- {label}: {a} of {na} against {b} of {nb}: p {counts_test(a, na, b, nb):.3g}")

    print("\n## One evaluation's sampling error (112 arith test problems × 4 samples)\n")
    for accuracy in (0.15, 0.42, 0.5):
        se = 100 * standard_error_of_accuracy(accuracy, 112, 4)
        print(f"- at {accuracy:.0%}: SE {se:.2f} points; two independent evaluations differ with SE {se * 2 ** 0.5:.2f}")
    for label, a, b in (("majority, batches of 64 against 16", 45.5, 42.0),
                        ("rule seed 1 (64) against the hybrid judge seed 1 (16)", 49.6, 47.8)):
        se = 100 * 2 ** 0.5 * standard_error_of_accuracy((a + b) / 200, 112, 4)
        print(f"- {label}: {a - b:+.1f} points = {(a - b) / se:.2f} SE of a difference of two evaluations")
    print("\n## The arith split: test problems whose commuted twin is in training\n")
    test = [r.question for r in load_arith("test")]
    train = {r.question for r in load_arith("train")}
    twins = 0
    for question in test:
        a, op, b = question[len("What is "):-1].split(" ")
        twins += op in "+*" and a != b and f"What is {b} {op} {a}?" in train
    pairs = {frozenset(q[len("What is "):-1].split(" ")[::2]) for q in train}
    shared = sum(frozenset(q[len("What is "):-1].split(" ")[::2]) in pairs for q in test)
    print(f"- {twins} of {len(test)} test problems have their commuted twin in training; {shared} of {len(test)} share "
          "their unordered operand pair with some training problem (any operation)")


if __name__ == "__main__":
    main()
