"""Preregistration parts B and C (docs/preregistration.md): the registered tests, fixed before any run.

    python studies/2026-12-05-preregistered-parts-b-c/analyze.py [RUNS_DIR]    # default runs/prereg/smol

RUNS_DIR is what run.py of this folder wrote. Part B: the four primary tests (H1 rollout-negative Cooper − the frozen
RM at its CPU-seconds, H2 the authors' Cooper − the frozen RM at theirs, H3a and H3b each − the rule): the mean
difference of held-out avg@24 (114 problems) over the seeds with its 95% t interval and exact sign-flip p, and Holm's
adjustment over the four; "resolved" where the adjusted p is below 0.05. Secondary: the same pairs on best/ (avg@8;
H1 with two one-sided tests at ±3 points), collapses per arm (Fisher's exact test per primary pair), the training
rollouts' final and peak smoothed verified accuracy, CPU-seconds, the frozen RM's gaming step, the learning-rate pick.
Part C (secondary as registered): per method its collapses and held-out avg@24 with its t interval, against the base
model and paired against part B's rule arm on the same seeds; Fisher's exact test of Co-rewarding's collapses against
the other three methods', and of each method's against the rule's. Seeds missing from an arm are said, and a test uses
the seeds both of its arms have.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from coreward.evaluation import stats
from coreward.evaluation.plots import ema
from coreward.runtime.metrics import read_metrics


SEEDS_B = tuple(range(2000, 2008))
SEEDS_C = tuple(range(2000, 2004))
METHODS_C = ("majority", "self_certainty", "entropy", "co_rewarding_1", "co_rewarding_2")
SMOOTH = 0.6  # the collapse definition's EMA weight (the map's summary)
BEST_MARGIN = 0.03  # registered: "the guard closes the gap" (H1 on best/) within ±3 points
GAMING_WINDOW, GAMING_SHARE = 5, 0.95  # registered: the 5-step mean of rm/rejected_score reaches 0.95 of rm/accepted_score's
ALPHA = 0.05


def avg(runs: Path, name: str, n: int) -> float | None:
    path = runs / name / "results.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text())["benchmarks"]["arith"][f"avg@{n}"]


def run_summary(run: Path, upto: int | None = None) -> dict | None:
    """Collapse (smoothed verified accuracy of the rollouts at the last step below half its peak), final, peak and
    CPU-seconds, up to `upto` (the frozen arm's matched checkpoint)."""
    if not (run / "metrics.jsonl").is_file():
        return None
    # the map's smoothing of the rollouts' verified accuracy (overoptimization.summarize also needs a KL from the
    # initial policy, which these runs (grpo.beta 0) do not log)
    rows = [r for r in read_metrics(run / "metrics.jsonl") if isinstance(r.get("step"), int) and r["step"] > 0
            and (upto is None or r["step"] <= upto)]
    verified = ema([float(r["verified_accuracy"]) for r in rows if "verified_accuracy" in r], SMOOTH)
    if not verified:
        return None
    cpu = [r["process_cpu_s"] for r in rows if "process_cpu_s" in r]
    return {"collapsed": verified[-1] < 0.5 * max(verified), "final": verified[-1], "peak": max(verified),
            "cpu_s": max(cpu) if cpu else None}


def gaming_step(run: Path) -> int | None:
    """The first step t at which the mean of rm/rejected_score over steps t-4..t reaches 0.95 of the same mean of
    rm/accepted_score (None: it did not by the run's last step)."""
    rows = [r for r in read_metrics(run / "metrics.jsonl")
            if "rm/rejected_score" in r and "rm/accepted_score" in r and r.get("step", 0) > 0]
    for i in range(GAMING_WINDOW - 1, len(rows)):
        window = rows[i - GAMING_WINDOW + 1 : i + 1]
        rejected = statistics.mean(r["rm/rejected_score"] for r in window)
        accepted = statistics.mean(r["rm/accepted_score"] for r in window)
        if rejected >= GAMING_SHARE * accepted:
            return rows[i]["step"]
    return None


def paired_over(a: dict[int, float | None], b: dict[int, float | None]) -> tuple[list[float], list[float]]:
    seeds = sorted(s for s in a if a[s] is not None and b.get(s) is not None)
    return [a[s] for s in seeds], [b[s] for s in seeds]


def missing(name: str, values: dict[int, object]) -> None:
    lacking = sorted(s for s, v in values.items() if v is None)
    if lacking:
        print(f"  warning: {name} lacks seeds {lacking}")


def fmt(values: dict[int, float | None]) -> str:
    return " ".join("-" if v is None else f"{100 * v:.1f}" for v in values.values())


def part_b(runs: Path) -> dict[int, float | None]:
    print("PART B: the real model on the held-out arith (114 problems), seeds", f"{SEEDS_B[0]}-{SEEDS_B[-1]}")
    base = avg(runs, "eval-base", 24)
    if base is not None:
        se = stats.standard_error_of_accuracy(base, 114, 24)
        print(f"base model avg@24: {100 * base:.1f} (sampling standard error {100 * se:.2f} points)")
    pick = runs / "pick.json"
    if pick.is_file():
        picked = json.loads(pick.read_text())
        print("co-optimized RM learning rate, seeds 2100-2102, mean avg@8 of final/:",
              {rate: round(mean, 1) for rate, mean in picked["mean_points"].items()}, "-> picked", picked["picked"])
    matches = {s: json.loads((runs / f"match-s{s}.json").read_text()) if (runs / f"match-s{s}.json").is_file()
               else None for s in SEEDS_B}
    final = {"rule": {s: avg(runs, f"eval-rule-s{s}", 24) for s in SEEDS_B},
             "cooper": {s: avg(runs, f"eval-cooper-s{s}", 24) for s in SEEDS_B},
             "cooper_rn": {s: avg(runs, f"eval-cooper_rn-s{s}", 24) for s in SEEDS_B},
             "frozen_h1": {s: avg(runs, f"eval-model_h1-s{s}", 24) for s in SEEDS_B},
             "frozen_h2": {s: avg(runs, f"eval-model_h2-s{s}", 24) for s in SEEDS_B}}
    print("held-out avg@24 of final/ (the frozen RM at its matched checkpoints), per seed:")
    for arm, values in final.items():
        present = [v for v in values.values() if v is not None]
        print(f"  {arm:10} {fmt(values)}" + (f"  mean {100 * statistics.mean(present):.1f}" if present else ""))
        missing(arm, values)
    print("the frozen RM's matched checkpoints (step, its CPU-s against the target):")
    for s, m in matches.items():
        if m is not None:
            line = "; ".join(f"{h} step {m[h]['step']} ({m[h]['cpu_s']:.0f} against {m[h]['target_cpu_s']:.0f})"
                             + ("" if m[h]["reached"] else " NOT REACHED by step 200: a departure") for h in ("H1", "H2"))
            print(f"  seed {s}: {line}; best/ step {m['best']['guard_step']} -> checkpoint {m['best']['checkpoint_step']}")

    primary = {"H1 rollout-negative Cooper - frozen": ("cooper_rn", "frozen_h1"),
               "H2 authors' Cooper - frozen": ("cooper", "frozen_h2"),
               "H3a rollout-negative Cooper - rule": ("cooper_rn", "rule"),
               "H3b authors' Cooper - rule": ("cooper", "rule")}
    pairs = {name: paired_over(final[a], final[b]) for name, (a, b) in primary.items()}
    results = {name: stats.paired(*pair) for name, pair in pairs.items() if len(pair[0]) >= 2}
    if results:
        adjusted = stats.holm([r.p for r in results.values()])
        print(f"primary (Holm over the {len(results)} tests here, alpha {ALPHA}; registered: four):")
        for (name, result), p_holm in zip(results.items(), adjusted):
            print(f"  {name}: {result.format(scale=100)}; Holm p {p_holm:.3g}: "
                  f"{'resolved' if p_holm < ALPHA else 'not resolved'}")

    print("secondary (no claim rests on them alone):")
    best = {"rule": {s: avg(runs, f"eval-best-rule-s{s}", 8) for s in SEEDS_B},
            "cooper": {s: avg(runs, f"eval-best-cooper-s{s}", 8) for s in SEEDS_B},
            "cooper_rn": {s: avg(runs, f"eval-best-cooper_rn-s{s}", 8) for s in SEEDS_B},
            "frozen": {s: avg(runs, f"eval-model_best-s{s}", 8) for s in SEEDS_B}}
    print("  best/ avg@8 per seed:", "; ".join(f"{arm} {fmt(v)}" for arm, v in best.items()))
    a, b = paired_over(best["cooper_rn"], best["frozen"])
    if len(a) >= 2:
        print("  H1 on best/ (TOST ±3):", stats.equivalence([x - y for x, y in zip(a, b)], BEST_MARGIN).format(scale=100),
              "| paired:", stats.paired(a, b).format(scale=100))
    for name, (x, y) in (("H2 on best/", ("cooper", "frozen")), ("H3a on best/", ("cooper_rn", "rule")),
                         ("H3b on best/", ("cooper", "rule"))):
        a, b = paired_over(best[x], best[y])
        if len(a) >= 2:
            print(f"  {name}: {stats.paired(a, b).format(scale=100)}")
    summaries = {arm: {s: run_summary(runs / f"{arm}-s{s}") for s in SEEDS_B} for arm in ("rule", "cooper", "cooper_rn")}
    summaries["frozen_h1"] = {s: run_summary(runs / f"model-s{s}", matches[s]["H1"]["step"]) if matches[s] else None
                              for s in SEEDS_B}
    summaries["frozen_h2"] = {s: run_summary(runs / f"model-s{s}", matches[s]["H2"]["step"]) if matches[s] else None
                              for s in SEEDS_B}
    collapsed = {arm: (sum(v["collapsed"] for v in values.values() if v), sum(1 for v in values.values() if v))
                 for arm, values in summaries.items()}
    print("  collapses:", ", ".join(f"{arm} {c} of {n}" for arm, (c, n) in collapsed.items()))
    for name, (x, y) in primary.items():
        if collapsed[x][1] and collapsed[y][1]:
            print(f"    {name.split()[0]}: Fisher p {stats.counts_test(*collapsed[x], *collapsed[y]):.3g}")
    for arm, values in summaries.items():
        present = [v for v in values.values() if v]
        if present:
            cpu = [v["cpu_s"] for v in present if v["cpu_s"] is not None]
            print(f"  {arm}: rollouts' smoothed verified accuracy final {100 * statistics.mean(v['final'] for v in present):.1f}, "
                  f"peak {100 * statistics.mean(v['peak'] for v in present):.1f}; CPU-s a run "
                  f"{statistics.mean(cpu):.0f}" if cpu else "")
    if (runs / "cpu.jsonl").is_file():  # run.py's record of each job's CPU-seconds (every attempt)
        jobs = [json.loads(line) for line in (runs / "cpu.jsonl").read_text().splitlines()]
        build = sum(j["cpu_s"] for j in jobs if j["job"] in ("rm-rows", "rm-heldout", "rm-pairs", "rm-train"))
        print(f"  the RM's build (annotating its rows and training it): {build:.0f} CPU-s")
    steps = {s: gaming_step(runs / f"model-s{s}") if (runs / f"model-s{s}" / "metrics.jsonl").is_file() else "-"
             for s in SEEDS_B}
    print("  the frozen RM's gaming step (5-step mean of rm/rejected_score >= 0.95 of rm/accepted_score's):",
          ", ".join(f"seed {s}: {'did not show by step 200' if v is None else v}" for s, v in steps.items()))
    return final["rule"]


def part_c(runs: Path, rule: dict[int, float | None]) -> None:
    print()
    print("PART C: Co-rewarding's stability claim (secondary as registered), seeds", f"{SEEDS_C[0]}-{SEEDS_C[-1]}")
    base = avg(runs, "eval-base", 24)
    rule_c = {s: rule.get(s) for s in SEEDS_C}
    rule_collapses = [run_summary(runs / f"rule-s{s}") for s in SEEDS_C]
    rule_counts = (sum(v["collapsed"] for v in rule_collapses if v), sum(1 for v in rule_collapses if v))
    counts = {}
    for method in METHODS_C:
        values = {s: avg(runs, f"eval-{method}-s{s}", 24) for s in SEEDS_C}
        runs_ = [run_summary(runs / f"{method}-s{s}") for s in SEEDS_C]
        counts[method] = (sum(v["collapsed"] for v in runs_ if v), sum(1 for v in runs_ if v))
        present = [v for v in values.values() if v is not None]
        line = f"  {method:15} avg@24 {fmt(values)}; collapsed {counts[method][0]} of {counts[method][1]}"
        if len(present) >= 2:
            mean, low, high = stats.t_interval(present)
            line += f"; mean {100 * mean:.1f} [{100 * low:.1f}, {100 * high:.1f}]"
            if base is not None:
                holds = counts[method] == (0, len(SEEDS_C)) and low > base
                collapses = counts[method][0] >= 3
                verdict = "holds" if holds else "collapses" if collapses else "neither (undetermined)"
                line += f"; against the base's {100 * base:.1f}: {verdict}"
        print(line)
        a, b = paired_over(values, rule_c)
        if len(a) >= 2:
            print(f"    - rule (paired): {stats.paired(a, b).format(scale=100)}")
        if counts[method][1] and rule_counts[1]:
            print(f"    collapses against the rule's {rule_counts[0]} of {rule_counts[1]}: Fisher p "
                  f"{stats.counts_test(*counts[method], *rule_counts):.3g}")
    co = [counts[m] for m in ("co_rewarding_1", "co_rewarding_2")]
    others = [counts[m] for m in ("majority", "self_certainty", "entropy")]
    a = (sum(c for c, _ in co), sum(n for _, n in co))
    b = (sum(c for c, _ in others), sum(n for _, n in others))
    if a[1] and b[1]:
        print(f"  Co-rewarding-I and -II {a[0]} of {a[1]} collapsed against majority, self-certainty and entropy "
              f"{b[0]} of {b[1]}: Fisher p {stats.counts_test(*a, *b):.3g}")


if __name__ == "__main__":
    runs = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/prereg/smol")
    part_c(runs, part_b(runs))
