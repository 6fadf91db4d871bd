"""Part D of docs/preregistration.md: the faster step of configs/smol/rule.yaml against the old one, 3 seeds.

    python studies/2026-12-05-faster-step-equivalence/analyze.py RUNS_DIR [FIRST_SEED-LAST_SEED]

Part F runs the same test on its own seeds and folder (runs/prereg/shipped, 3200-3211: its arms are named old and
new too); the second argument, added for it after part D ran, leaves part D's default as it was.

RUNS_DIR holds what the registered commands wrote (runs/prereg/step of the checkout that ran them): old-sS/ and
new-sS/ (training runs), eval-old-sS/ and eval-new-sS/ (`coreward eval`, avg@8 on the 114 held-out problems).
Prints the primary test (TOST at ±10 points on new − old, per seed) and the secondary figures, as registered.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from coreward.evaluation import stats
from coreward.runtime.metrics import read_metrics


SEEDS = (3000, 3001, 3002)
MARGIN = 0.10  # ±10 points, registered


def heldout(runs: Path, arm: str, seed: int) -> float:
    result = json.loads((runs / f"eval-{arm}-s{seed}" / "results.json").read_text())
    return result["benchmarks"]["arith"]["avg@8"]


def training(runs: Path, arm: str, seed: int) -> dict[str, float]:
    rows = [r for r in read_metrics(runs / f"{arm}-s{seed}" / "metrics.jsonl") if "step_time" in r]
    late = [r for r in rows if 11 <= r["step"] <= 20]
    verified = next(k for k in rows[0] if k.endswith("verified_accuracy"))
    out = {"steps": len(rows), "verified_11_20": statistics.mean(r[verified] for r in late),
           "step_time": statistics.mean(r["step_time"] for r in rows[1:]),
           "process_cpu_s": max(r.get("process_cpu_s", 0.0) for r in rows),
           "update_tokens": statistics.mean(r.get("update/tokens", float("nan")) for r in rows)}
    for key in ("sampling/logprob_mismatch/mean", "sampling/logprob_mismatch/max", "sampling/kl_sampler_policy"):
        values = [r[key] for r in rows if key in r]
        if values:
            out[key] = (statistics.mean(values), max(values))
    return out


def main(runs: Path, seeds: tuple[int, ...] = SEEDS) -> None:
    old = [heldout(runs, "old", s) for s in seeds]
    new = [heldout(runs, "new", s) for s in seeds]
    print("held-out avg@8 of final/ (114 problems), per seed", seeds)
    print("  old:", [f"{100 * v:.1f}" for v in old], f"mean {100 * statistics.mean(old):.1f}")
    print("  new:", [f"{100 * v:.1f}" for v in new], f"mean {100 * statistics.mean(new):.1f}")
    diffs = [n - o for n, o in zip(new, old)]
    print("  new - old per seed:", [f"{100 * d:+.1f}" for d in diffs])
    print("primary (D1, F1: TOST ±10 points on new - old):", stats.equivalence(diffs, MARGIN).format(scale=100))
    print("   paired 95% t interval, sign-flip p:", stats.paired(new, old).format(scale=100))
    print("secondary: training rollouts' verified accuracy, mean of steps 11-20")
    t_old = [training(runs, "old", s) for s in seeds]
    t_new = [training(runs, "new", s) for s in seeds]
    v_old, v_new = [t["verified_11_20"] for t in t_old], [t["verified_11_20"] for t in t_new]
    print("  old:", [f"{100 * v:.1f}" for v in v_old], " new:", [f"{100 * v:.1f}" for v in v_new])
    print("  TOST ±10:", stats.equivalence([n - o for n, o in zip(v_new, v_old)], MARGIN).format(scale=100))
    print("  paired:", stats.paired(v_new, v_old).format(scale=100))
    print("secondary: the sampler's log-probabilities against the trainer's (new arm; mean over steps, worst step)")
    for s, t in zip(seeds, t_new):
        print(f"  seed {s}:", {k: [round(x, 4) for x in v] for k, v in t.items() if k.startswith("sampling/")})
    print("secondary: steps, mean step_time from step 2 (s), mean update/tokens a step (part F's; nan where not "
          "logged), process CPU-seconds (two runs shared the cores)")
    for s, a, b in zip(seeds, t_old, t_new):
        print(f"  seed {s}: old {a['steps']} steps, {a['step_time']:.1f} s, {a['update_tokens']:.0f} tokens, "
              f"{a['process_cpu_s']:.0f} CPU-s; new {b['steps']} steps, {b['step_time']:.1f} s, "
              f"{b['update_tokens']:.0f} tokens, {b['process_cpu_s']:.0f} CPU-s")


if __name__ == "__main__":
    first, _, last = (sys.argv[2] if len(sys.argv) > 2 else f"{SEEDS[0]}-{SEEDS[-1]}").partition("-")
    main(Path(sys.argv[1]), tuple(range(int(first), int(last or first) + 1)))
