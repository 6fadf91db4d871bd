"""GRPO speed on the demo config: steps/s and the generation / reward / update split of a step.

    python -m benchmarks.speed.grpo_step_time [--config configs/demo/rule.yaml] [--steps 8] [--set k=v ...]

Runs `coreward train` for a few steps in a temporary directory and prints the mean over the steps after
the first (which pays for the verifier pool's start and first-call overheads).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]


def measure(config: str, steps: int, overrides: list[str]) -> dict[str, float]:
    from coreward.grpo.config import TrainConfig
    from coreward.grpo.train import run_training
    from coreward.runtime.config import load_config
    from coreward.runtime.metrics import read_metrics

    cfg = load_config(TrainConfig, config, ["data.eval_every=0", f"grpo.save_steps={steps + 1}", *overrides])
    with tempfile.TemporaryDirectory() as tmp:
        run_training(cfg, output_dir=tmp, max_steps=steps)
        rows = [r for r in read_metrics(Path(tmp) / "metrics.jsonl") if "step_time" in r][1:]
    mean = {key: statistics.mean(r[key] for r in rows) for key in ("step_time", "time/generation", "time/reward", "time/update")}
    mean["completions_per_step"] = cfg.grpo.get("per_device_train_batch_size", 8)
    return mean


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(REPO / "configs" / "demo" / "rule.yaml"))
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    m = measure(args.config, args.steps, args.overrides)
    step = m["step_time"]
    print(f"config: {args.config}  ({m['completions_per_step']} completions per step, mean of steps 2..{args.steps})")
    print(f"step time     {step:7.2f} s   ({1 / step:.3f} steps/s)")
    for key, label in (("time/generation", "generation"), ("time/reward", "reward"), ("time/update", "update")):
        print(f"  {label:<11} {m[key]:7.2f} s   ({100 * m[key] / step:4.1f}%)")
    other = step - m["time/generation"] - m["time/reward"] - m["time/update"]
    print(f"  {'other':<11} {other:7.2f} s   ({100 * other / step:4.1f}%)  (log-probs of old policy / reference, logging)")


if __name__ == "__main__":
    main()
