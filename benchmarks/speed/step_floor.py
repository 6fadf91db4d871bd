"""Each phase of a demo GRPO step beside its floor: the time its FLOPs would take at the machine's matmul rate.

    python -m benchmarks.speed.step_floor                       # rule, Cooper and Co-rewarding-II demo configs
    python -m benchmarks.speed.step_floor --configs rule --steps 8 --set kl_from_init_estimator=k3

For each config it trains `--steps` steps twice in a temporary directory, on one torch thread as the demo does:

  1. timed: each phase's wall time, exclusive of the phases nested in it (a reward's RM scoring is not counted
     again in "reward"), mean over the steps after the first;
  2. counted: the same run with every operator passing through `torch.utils.flop_counter.FlopCounterMode`
     (matrix products and attention only: the elementwise work is memory-bound and has no FLOP floor), per phase.

The machine's matmul rate is measured first, on one thread: a large square product (the best this core does) and
products of the demo model's own shapes (128-wide hidden states, as many rows as a step's tokens). A phase's floor
is its FLOPs at the large product's rate; `× floor` is how far the phase is from it. The phases:

  generation        the policy's rollouts (`model.generate`, TRL's `_generate`)
  reward            the reward sources and the verifier, less the phases below that run inside them
  RM scoring        a reward model's forward passes (the static RM, Cooper's RM before its update)
  RM update         Cooper's RM training step on this step's pairs
  teacher rollouts  Co-rewarding-II's EMA teacher generating for each group
  teacher update    the EMA of the teacher's weights
  KL from init      `kl/from_init`: no-grad forward passes of the policy and of its initial copy
  update            the loss's forward and backward passes and the optimizer step (TRL's `training_step`,
                    less generation and scoring)
  other             the rest of the step: the trainer's bookkeeping, logging, callbacks
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import tempfile
import time
from collections import defaultdict
from contextlib import ExitStack, redirect_stderr, redirect_stdout
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]
PHASES = ("generation", "reward", "RM scoring", "RM update", "teacher rollouts", "teacher update", "KL from init",
          "update", "other")


def matmul_rates(tokens: int, hidden: int, intermediate: int, seconds: float = 1.0) -> dict[str, float]:
    """GFLOP/s of float32 matrix products on the current thread count: a 1024³ product and the model's shapes."""
    import torch

    def rate(m: int, k: int, n: int) -> float:
        a, b = torch.randn(m, k), torch.randn(k, n)
        for _ in range(3):
            a @ b
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            a @ b
            count += 1
        return 2 * m * k * n * count / (time.perf_counter() - start) / 1e9

    return {"1024 x 1024 x 1024": rate(1024, 1024, 1024),
            f"{tokens} x {hidden} x {intermediate} (MLP up)": rate(tokens, hidden, intermediate),
            f"{tokens} x {intermediate} x {hidden} (MLP down)": rate(tokens, intermediate, hidden),
            f"{tokens} x {hidden} x {hidden} (attention projection)": rate(tokens, hidden, hidden),
            f"128 x {hidden} x {intermediate} (one decoding step of 128 rows)": rate(128, hidden, intermediate)}


class PhaseMeter:
    """Wall time and (with `counter`) FLOPs of each phase, exclusive of the phases nested in it.

    Methods are wrapped in place; a phase's total includes its nested phases until `exclusive()` subtracts them."""

    def __init__(self, counter=None):
        self.counter = counter
        self.stack: list[list] = []  # [phase, start time, start flops, nested time, nested flops]
        self.steps: list[dict[str, list[float]]] = []  # per step: phase -> [seconds, flops]

    def flops(self) -> float:
        return float(self.counter.get_total_flops()) if self.counter is not None else 0.0

    def wrap(self, owner, name: str, phase: str, stack: ExitStack) -> None:
        original = getattr(owner, name)

        @functools.wraps(original)
        def timed(*args, **kwargs):
            self.stack.append([phase, time.perf_counter(), self.flops(), 0.0, 0.0])
            try:
                return original(*args, **kwargs)
            finally:
                phase_, began, flops0, nested_t, nested_f = self.stack.pop()
                seconds, flops = time.perf_counter() - began, self.flops() - flops0
                if self.steps:
                    cell = self.steps[-1][phase_]
                    cell[0] += seconds - nested_t
                    cell[1] += flops - nested_f
                if self.stack:  # the parent's own share excludes this phase
                    self.stack[-1][3] += seconds
                    self.stack[-1][4] += flops

        setattr(owner, name, timed)
        stack.callback(setattr, owner, name, original)


def measure(config_path: str, steps: int, overrides: list[str], count_flops: bool) -> dict[str, list[float]]:
    """Per-phase [seconds, flops] means over steps 2..steps of one run."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from coreward.grpo.config import TrainConfig
    from coreward.grpo.train import run_training
    from coreward.grpo.trainer import CorewardGRPOTrainer
    from coreward.rewards.co_rewarding_2.ema_teacher import EmaTeacher
    from coreward.rewards.cooper.learner import RMLearner
    from coreward.rm.model import VerifyRM
    from coreward.runtime.config import load_config

    config = load_config(TrainConfig, config_path, ["data.eval_every=0", f"grpo.save_steps={steps + 1}",
                                                    "grpo.disable_tqdm=true", "torch_threads=1", *overrides])
    counter = FlopCounterMode(display=False) if count_flops else None
    meter = PhaseMeter(counter)
    with ExitStack() as stack:
        original_step = CorewardGRPOTrainer.training_step

        def step(trainer, *args, **kwargs):  # the whole step: its remainder after the nested phases is "update"
            meter.steps.append(defaultdict(lambda: [0.0, 0.0]))
            return original_step(trainer, *args, **kwargs)

        CorewardGRPOTrainer.training_step = step
        stack.callback(setattr, CorewardGRPOTrainer, "training_step", original_step)
        meter.wrap(CorewardGRPOTrainer, "training_step", "update", stack)  # wraps `step`: entered after it
        meter.wrap(CorewardGRPOTrainer, "_generate_and_score_completions", "other", stack)
        meter.wrap(CorewardGRPOTrainer, "_generate", "generation", stack)
        meter.wrap(CorewardGRPOTrainer, "_calculate_rewards", "reward", stack)
        meter.wrap(CorewardGRPOTrainer, "_log_kl_from_init", "KL from init", stack)
        meter.wrap(VerifyRM, "score", "RM scoring", stack)
        meter.wrap(RMLearner, "update", "RM update", stack)
        meter.wrap(EmaTeacher, "generate", "teacher rollouts", stack)
        meter.wrap(EmaTeacher, "maybe_update", "teacher update", stack)
        if counter is not None:
            stack.enter_context(counter)
        with tempfile.TemporaryDirectory() as tmp, torch.random.fork_rng():
            wall = []
            original_log = CorewardGRPOTrainer.log

            def log(trainer, logs, *args, **kwargs):
                if "step_time" in logs:
                    wall.append(logs["step_time"])
                return original_log(trainer, logs, *args, **kwargs)

            CorewardGRPOTrainer.log = log
            stack.callback(setattr, CorewardGRPOTrainer, "log", original_log)
            with open(os.devnull, "w") as quiet, redirect_stdout(quiet), redirect_stderr(quiet):  # the run's lines
                run_training(config, output_dir=tmp, max_steps=steps)
    rows = meter.steps[1:] or meter.steps  # the first step pays for first calls (the verifier pool, allocations)
    result = {phase: [statistics.mean(r[phase][0] for r in rows), statistics.mean(r[phase][1] for r in rows)]
              for phase in PHASES if phase != "other"}
    # "other": what `_generate_and_score_completions` spent outside its nested phases, plus TRL's step outside
    # training_step (logging, callbacks): the logged step time less everything measured
    measured = sum(v[0] for v in result.values())
    inner_other = statistics.mean(r["other"][0] for r in rows)
    step_time = statistics.mean(wall[1:] or wall) if wall else measured + inner_other
    result["other"] = [max(step_time - measured, inner_other), statistics.mean(r["other"][1] for r in rows)]
    result["step"] = [step_time, sum(v[1] for v in result.values())]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", default="rule,cooper,co_rewarding_2",
                        help="demo configs (configs/demo/<name>.yaml) or paths, comma-separated")
    parser.add_argument("--steps", type=int, default=6, help="timed steps per config (the first is left out)")
    parser.add_argument("--count-steps", type=int, default=3, help="steps of the FLOP-counting run")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="KEY=VALUE, every run")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    from benchmarks._common import machine

    print(machine())
    # a step's tokens: 128 completions of up to 32 tokens after a prompt of about 20 (the demo config)
    rates = matmul_rates(tokens=128 * 52, hidden=128, intermediate=384)
    peak = max(rates.values())
    print("\nfloat32 matmul rate, 1 thread:")
    for shape, value in rates.items():
        print(f"  {shape:<55} {value:7.1f} GFLOP/s")
    print(f"floors below use {peak:.1f} GFLOP/s (the best of these)\n")
    for name in args.configs.split(","):
        path = name if name.endswith((".yaml", ".yml")) else str(REPO / "configs" / "demo" / f"{name}.yaml")
        timed = measure(path, args.steps, args.overrides, count_flops=False)
        counted = measure(path, args.count_steps, args.overrides, count_flops=True)
        print(f"{Path(path).name}: step {timed['step'][0]:.3f} s (mean of steps 2..{args.steps}); "
              f"FLOPs from a {args.count_steps}-step counted run")
        print(f"  {'phase':<17} {'time s':>8} {'share':>6} {'GFLOP':>8} {'floor s':>8} {'x floor':>8} {'x - 1 floor s':>14}")
        for phase in (*PHASES, "step"):
            seconds, flops = timed[phase][0], counted[phase][1]
            if phase != "step" and seconds < 0.0005 and flops == 0:
                continue
            floor = flops / 1e9 / peak
            distance = f"{seconds / floor:8.1f}" if floor > 0 else f"{'-':>8}"
            print(f"  {phase:<17} {seconds:8.3f} {100 * seconds / timed['step'][0]:5.1f}% {flops / 1e9:8.2f} "
                  f"{floor:8.3f} {distance} {seconds - floor:14.3f}")
        print()


if __name__ == "__main__":
    main()
