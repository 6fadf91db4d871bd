"""Co-rewarding-II's mean step time against majority voting on the demo config, as a ratio from one run.

    python -m benchmarks.speed.co_rewarding_2_step_time [--steps 6] [--rounds 2] [--set key=value ...]

Both methods train from configs/demo/co_rewarding_2.yaml with the same settings; majority voting only
swaps the reward block (same `match`). The teacher's G rollouts per prompt are the only extra work, so
the goal is at most 2.1x. Runs alternate (majority, co_rewarding_2, majority, ...) so that load from
other jobs on a shared machine falls on both; each run's first step (verifier pool start, warm-up) is
discarded. A step is timed from the trainer's step begin to its end (rollouts, rewards, EMA update,
loss, backward, optimizer), on the wall clock (the goal) and in CPU time (robust to a busy machine).
`--set` overrides the config as in `coreward train`, e.g. `--set model.name_or_path=PATH`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from transformers import TrainerCallback

import coreward.rewards.co_rewarding_2  # noqa: F401  (registers the source)
from coreward.grpo.config import RewardSpec, TrainConfig
from coreward.grpo.train import run_training
from coreward.runtime.config import load_config
from coreward.runtime.metrics import read_metrics


CONFIG = Path(__file__).resolve().parents[2] / "configs" / "demo" / "co_rewarding_2.yaml"
COLUMNS = ("wall", "cpu", "time/generation", "time/teacher_generation", "time/reward", "time/update",
           "completions/mean_length")


def configs(overrides: list[str]) -> dict[str, TrainConfig]:
    """The demo Co-rewarding-II config and the same config with majority voting as its reward."""
    teacher = load_config(TrainConfig, CONFIG, ["data.eval_every=0", *overrides])
    majority = load_config(TrainConfig, CONFIG, ["data.eval_every=0", *overrides])
    majority.rewards = [RewardSpec(name="majority", params={"match": teacher.rewards[0].params.get("match", "verified")})]
    return {"majority": majority, "co_rewarding_2": teacher}


class StepClock(TrainerCallback):
    """Wall and CPU seconds of each optimizer step. CPU time (this process, all threads) is the work done,
    which other jobs' load barely changes; math-verify's worker processes are not in it."""

    def __init__(self):
        self.rows: list[dict] = []

    def on_step_begin(self, args, state, control, **kwargs):
        self.start = (time.perf_counter(), time.process_time())

    def on_step_end(self, args, state, control, **kwargs):
        self.rows.append({"wall": time.perf_counter() - self.start[0], "cpu": time.process_time() - self.start[1]})


def measure(config: TrainConfig, steps: int, run_dir: Path) -> list[dict]:
    """Per-step metrics and clock readings of a fresh run, without its first step."""
    clock = StepClock()
    run_training(config, output_dir=str(run_dir), max_steps=steps, extra_callbacks=[clock])
    rows = read_metrics(run_dir / "metrics.jsonl")
    return [{**row, **times} for row, times in zip(rows, clock.rows)][1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=6, help="steps per run (the first is discarded)")
    parser.add_argument("--rounds", type=int, default=2, help="runs per method, alternating")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()

    rows: dict[str, list[dict]] = {"majority": [], "co_rewarding_2": []}
    print(f"{'run':<20}" + "".join(f"{column.split('/')[-1]:>20}" for column in COLUMNS))
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for method, config in configs(args.overrides).items():
                run_rows = measure(config, args.steps, Path(tmp) / f"{method}-{round_}")
                print(f"{method + f' #{round_ + 1}':<20}" + "".join(f"{mean(run_rows, c):>20.3f}" for c in COLUMNS), flush=True)
                rows[method] += run_rows

    steps = f"{len(rows['majority'])} + {len(rows['co_rewarding_2'])} steps"
    for clock in ("wall", "cpu"):
        ratio = mean(rows["co_rewarding_2"], clock) / mean(rows["majority"], clock)
        print(f"co_rewarding_2 / majority mean {clock} time per step ({steps}): {ratio:.2f}x (goal: <= 2.1x)")

def mean(rows: list[dict], column: str) -> float:
    return statistics.mean(row.get(column, 0.0) for row in rows)


if __name__ == "__main__":
    main()
