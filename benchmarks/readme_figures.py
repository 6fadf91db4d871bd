"""Re-measure the README's "Measured figures" in one go, and say on which machine.

    python benchmarks/readme_figures.py [--only verify,grpo_step,...] [--log readme_figures.log]

Runs each benchmark script the README's table names, one after the other (never side by side: they would
time each other), and prints, per script, its wall time and the last lines of its output: the figures the
table quotes. First it prints the machine (CPU model, cores, load average), the commit and the library
versions, so a figure can always be traced to where it came from. Run it from a clean clone with
`../shared` beside it. The whole set takes about 15 minutes on 2 cores. The slow ones (the demo, the
fault-injection runs, the vLLM stage) have their own commands in the README and are not repeated here.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]

# name -> the command the README's table gives (run from the repository root)
FIGURES = {
    "verify": ["benchmarks/verify_throughput.py"],
    "grpo_step": ["benchmarks/grpo_step_time.py", "--steps", "5"],
    "eval": ["benchmarks/eval_throughput.py"],
    "rm": ["benchmarks/rm_throughput.py", "--threads", "1"],
    "cooper_step": ["benchmarks/cooper_step_time.py"],
    "co_rewarding_2_step": ["benchmarks/co_rewarding_2_step_time.py"],
    "majority_classes": ["benchmarks/majority_classes.py"],
    "hub_offline": ["benchmarks/hub_offline.py"],
    "reward_phase_split": ["benchmarks/reward_phase_split.py", "--groups", "256"],
}


def machine() -> str:
    """CPU model, cores, load, commit and versions: where the figures below come from."""
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else "?"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout
    import torch
    import transformers
    import trl

    return (f"machine: {model}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; "
            f"commit {commit.strip() or '?'}; python {platform.python_version()}, torch {torch.__version__}, "
            f"transformers {transformers.__version__}, trl {trl.__version__}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help=f"comma-separated subset of {', '.join(FIGURES)}")
    parser.add_argument("--log", type=Path, help="also write everything printed to this file")
    parser.add_argument("--tail", type=int, default=12, help="lines of each script's output to print")
    args = parser.parse_args()
    names = args.only.split(",") if args.only else list(FIGURES)
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        parser.error(f"unknown figure(s) {unknown}; choose from {list(FIGURES)}")
    lines = [machine()]
    print(lines[0], flush=True)
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    for name in names:
        start = time.perf_counter()
        done = subprocess.run([sys.executable, *FIGURES[name]], capture_output=True, text=True, cwd=REPO, env=env)
        seconds = time.perf_counter() - start
        output = (done.stdout + (done.stderr if done.returncode else "")).strip().splitlines()
        block = [f"\n== {name}: python {' '.join(FIGURES[name])}  ({seconds:.0f} s, exit {done.returncode}, "
                 f"load average {os.getloadavg()[0]:.2f})", *output[-args.tail:]]
        print("\n".join(block), flush=True)
        lines.extend(block)
    if args.log:
        args.log.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
