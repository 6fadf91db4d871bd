"""Does returning freed heap pages between a step's phases bring a real model's CPU peak down to the plan?

    python benchmarks/studies/host_heap_trim.py [--config configs/smol/majority.yaml] [--steps 3]
                                               [--output runs/host_heap_trim]

Two `coreward train` runs of the config side by side (one torch thread each, the same seed): glibc's default, and
the same run with glibc's `malloc_trim(0)` after generation and scoring and before each micro-batch's update (the
trainer's methods wrapped in this script's process; coreward itself does not trim). Prints each arm's peak RSS
(`/usr/bin/time -v`), wall time, and the trims' count and seconds. docs/memory.md ("Measured accuracy") holds the
result: the peak is kept inside one micro-batch's forward and backward, so trimming between phases barely helps.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path


def run_arm(trim: bool, config: str, steps: int, output: Path) -> None:
    """In this process: `coreward train`, with the trims when asked; prints the trims' count and time last."""
    trims = {"count": 0, "seconds": 0.0}
    if trim:
        from coreward.grpo.trainer import CorewardGRPOTrainer

        libc = ctypes.CDLL("libc.so.6")

        def give_back() -> None:
            started = time.perf_counter()
            libc.malloc_trim(0)
            trims["count"] += 1
            trims["seconds"] += time.perf_counter() - started

        generate, update = CorewardGRPOTrainer._generate_and_score_completions, CorewardGRPOTrainer.training_step

        def generate_then_trim(self, inputs):
            give_back()
            result = generate(self, inputs)
            give_back()
            return result

        def trim_then_update(self, *args, **kwargs):
            give_back()
            return update(self, *args, **kwargs)

        CorewardGRPOTrainer._generate_and_score_completions = generate_then_trim
        CorewardGRPOTrainer.training_step = trim_then_update
    sys.argv = ["coreward", "train", "--config", config, "--output-dir", str(output), "--max-steps", str(steps),
                "--set", "torch_threads=1", "--set", "grpo.save_steps=1000"]
    from coreward.cli import main

    try:
        main()
    finally:
        print("TRIMS " + json.dumps(trims), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/smol/majority.yaml")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--output", type=Path, default=Path("runs/host_heap_trim"))
    parser.add_argument("--arm", choices=["default", "trim"], help=argparse.SUPPRESS)  # one arm, in this process
    args = parser.parse_args()
    if args.arm:
        run_arm(args.arm == "trim", args.config, args.steps, args.output / args.arm)
        return
    args.output.mkdir(parents=True, exist_ok=True)
    arms = {}
    for arm in ("default", "trim"):
        log = open(args.output / f"{arm}.log", "w")
        command = ["/usr/bin/time", "-v", sys.executable, __file__, "--arm", arm, "--config", args.config,
                   "--steps", str(args.steps), "--output", str(args.output)]
        arms[arm] = (subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ,
                                      "OMP_NUM_THREADS": "1"}), log)
    for arm, (process, log) in arms.items():
        process.wait()
        log.close()
        text = (args.output / f"{arm}.log").read_text()
        peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
        wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", text)
        trims = re.search(r"TRIMS (\{.*\})", text)
        print(f"{arm}: exit {process.returncode}, peak RSS {int(peak[1]) / 2**20:.2f} GiB, wall {wall[1]}, "
              f"trims {trims[1] if trims else '-'}" if peak and wall else f"{arm}: exit {process.returncode}, no figures "
              f"(log {args.output / f'{arm}.log'})")


if __name__ == "__main__":
    main()
