"""Cooper's GRPO step time against rule-based GRPO's on the demo config, as a ratio measured in one run.

    python -m benchmarks.speed.cooper_step_time [--steps 6] [--rounds 2] [--policy demo] [--rm demo] [--set k=v ...]
        [--methods rule,model,cooper,co_optimized,ensemble_min]

Each method trains with its demo config (configs/demo/{rule,model,cooper}.yaml: the same GRPO settings, only
the reward differs) for `--steps` steps, in this process, one run after the other; each round runs rule, the
static RM and Cooper, and two rounds (the default) let load drifting on a shared machine hit all alike. The
static RM (`model`, the same RM frozen) shows what scoring with an RM costs by itself. The first step of
every run is discarded (it pays for the verifier pool's start and first calls, and Cooper's first held-out
RM evaluation). The table splits a step into generation, reward (for Cooper: RM scoring, the assistant, the
RM update) and the policy update. `--set` overrides apply to every run. `--methods` adds other demo configs:
`co_optimized` (Cooper with rollout negatives, the recommended co-optimized setting) and `ensemble_min` (the `min` of
three frozen demo RMs; its members are built first if they are not cached, ~15 minutes each).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs" / "demo"


def run(method: str, steps: int, overrides: list[str]) -> list[dict]:
    """Per-step metrics rows of a `steps`-step run, the first step left out."""
    from coreward.grpo.config import TrainConfig
    from coreward.grpo.train import run_training
    from coreward.runtime.config import load_config
    from coreward.runtime.metrics import read_metrics

    config = load_config(TrainConfig, CONFIGS / f"{method}.yaml",
                         ["data.eval_every=0", f"grpo.save_steps={steps + 1}", *overrides])
    with tempfile.TemporaryDirectory() as tmp:
        run_training(config, output_dir=tmp, max_steps=steps)
        return [row for row in read_metrics(Path(tmp) / "metrics.jsonl") if "step_time" in row][1:]


def mean(rows: list[dict], key: str) -> float:
    """Mean over the rows that logged `key` (rm/loss only exists on steps with pairs); 0 when none did."""
    values = [row[key] for row in rows if key in row]
    return statistics.mean(values) if values else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6, help="steps per run (the first is discarded)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of rule, static RM, Cooper runs")
    parser.add_argument("--policy", default="demo", help="policy of every run (default: the demo policy)")
    parser.add_argument("--rm", default="demo", help="the static RM and Cooper's starting RM (default: the demo RM)")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--methods", default="rule,model,cooper", help="demo configs to time (rule first: the ratios' "
                        "reference); also co_optimized, ensemble_min")
    args = parser.parse_args()
    import coreward.demo  # noqa: F401  the demo's model names (demo:1 ... of ensemble_min), as the command line has them

    shared = [f"model.name_or_path={args.policy}", *args.overrides]
    per_method = {"rule": shared, "model": [*shared, f"rewards.0.params.path={args.rm}"],
                  "cooper": [*shared, f"rewards.0.params.rm={args.rm}"],
                  "co_optimized": [*shared, f"rewards.0.params.rm={args.rm}"], "ensemble_min": shared}
    methods = [m.strip() for m in args.methods.split(",")]
    unknown = [m for m in methods if m not in per_method]
    if unknown or methods[0] != "rule":
        parser.error(f"--methods: rule first, then any of {', '.join(list(per_method)[1:])} (got {args.methods})")
    runs = {method: per_method[method] for method in methods}
    rows: dict[str, list[dict]] = {method: [] for method in runs}
    for _ in range(args.rounds):
        for method, overrides in runs.items():
            rows[method] += run(method, args.steps, overrides)

    n = len(rows["rule"])
    print(f"demo configs, policy {args.policy}, RM {args.rm}; mean of {n} steps per method "
          f"({args.rounds} round(s) of {args.steps} steps, first step of each run discarded)")
    print(f"{'':<24}" + "".join(f"{m:>13}" for m in methods))
    for key in ("step_time", "time/generation", "time/reward", "time/update", "time/assistant", "time/rm_update",
                "completions/mean_length", "verified_accuracy"):
        print(f"{key:<24}" + "".join(f"{mean(rows[m], key):13.3f}" for m in methods))
    rule = mean(rows["rule"], "step_time")
    print("ratio to rule: " + ", ".join(f"{m} {mean(rows[m], 'step_time') / rule:.3f}x" for m in methods[1:]))
    for method in ("cooper", "co_optimized"):
        if method in rows:
            print(f"{method}: valid pairs per prompt {mean(rows[method], 'rm/valid_pair_rate'):.2f}, "
                  f"RM loss {mean(rows[method], 'rm/loss'):.3f}")


if __name__ == "__main__":
    main()
