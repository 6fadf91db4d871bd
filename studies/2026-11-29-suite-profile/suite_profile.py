"""Where the test suite's CPU goes, across every process it starts: py-spy samples the pytest run and all its
descendants (xdist workers, the forkserver's forked runs, torchrun and accelerate launches, benchmark scripts) and
this script sums the samples by what they were doing.

    python benchmarks/studies/suite_profile.py --out runs/suite_profile            # stage 1 of .ci/run, profiled
    python benchmarks/studies/suite_profile.py --analyze runs/suite_profile/profile.raw
    python benchmarks/studies/suite_profile.py --out DIR -- tests/grpo/test_sharded.py   # a part of the suite

Needs py-spy (`pip install py-spy`; it reads other processes' memory: root, or ptrace allowed). Sampling at 20 Hz
adds about 8% to the suite's time. A sample is one process's one thread on a CPU at that moment (py-spy's default
leaves idle threads out), so the shares are shares of CPU time. Each row is inclusive (a sample inside a step's
generation counts for "training steps" and "generation"); the rows overlap and do not sum to 100%.

Recorded in docs/figures.md (2026-11-29): the rows named "gc.collect at a training loop's start", "imports ..." and
"the demo task's problems drawn" were the work the forkserver's preload (runtime/forkserver_ready.py,
tests/helpers/forkserver_warm.py) and the test workers' gc.freeze (tests/conftest.py) now do once.
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
from pathlib import Path


STAGE_1 = ["-q", "-n", "auto", "--maxprocesses", "4", "--dist", "loadfile", "--no-loadscope-reorder",
           "-p", "no:cacheprovider"]
RATE_HZ = 20

# (row, a function the sample's stack holds, and its file, as py-spy names them: "Class.method (path:line)")
ROWS = [
    ("training runs (`run_training`)", "run_training", "coreward/grpo/train.py"),
    ("training steps (`training_step`)", "training_step", "transformers/trainer.py"),
    ("generation (transformers' `generate`)", "generate", "transformers/generation/utils.py"),
    ("backward passes", "backward", "torch/autograd/__init__.py"),
    ("gc.collect at a training loop's start (accelerate's `clear_device_cache`)", "clear_device_cache",
     "accelerate/utils/memory.py"),
    ("math-verify comparisons (`math_verify_equal`)", "math_verify_equal", "coreward/verify/pool.py"),
    ("the training data built (`build_train_dataset`)", "build_train_dataset", "coreward/data/rows.py"),
    ("the demo task's problems drawn (`random_problem`)", "random_problem", "coreward/data/synthetic.py"),
    ("DeepSpeed's engine set up (`deepspeed.initialize`)", "initialize", "deepspeed/__init__.py"),
    ("checkpoints written (`_save_checkpoint`)", "_save_checkpoint", "coreward/grpo/trainer.py"),
    ("held-out evaluation (`evaluate`)", "evaluate", "coreward/evaluation/evaluate.py"),
]


def process_kind(title: str) -> str:
    """Which kind of process a sample's innermost process is, by the start of its command line (py-spy's raw format
    separates frames with ";", so a title is cut at its first ";")."""
    if "multiprocessing.forkserver" in title:
        return "forked from a forkserver (warm)"
    if " -u -c import sys" in title:  # execnet's bootstrap: an xdist worker
        return "pytest worker"
    if " -m pytest " in title:
        return "pytest controller"
    return "new interpreter (fresh)"


def analyze(raw: Path) -> None:
    rows = collections.Counter()
    imports = collections.Counter()
    kinds = collections.Counter()
    total = 0
    for line in raw.open(errors="replace"):
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not count.isdigit():
            continue  # a process title with a newline in it: py-spy split the line
        samples = int(count)
        total += samples
        frames = stack.split(";")
        processes = [f for f in frames if f.startswith("process ")]
        kind = process_kind(processes[-1]) if processes else "unknown"
        kinds[kind] += samples
        calls = [f for f in frames if not f.startswith("process ")]
        for name, function, file in ROWS:
            if any(re.match(rf"(?:[\w<>]+\.)*{function} \({re.escape(file)}:", f) for f in calls):
                rows[name] += samples
        if any(f.startswith("_find_and_load (") for f in calls):
            imports[kind] += samples
    if not total:
        raise SystemExit(f"{raw}: no samples")
    print(f"{raw}: {total:,} samples at {RATE_HZ} Hz = {total / RATE_HZ:,.0f} CPU-seconds\n")
    print("| where | CPU-s | share |\n|---|---:|---:|")
    for name, _, _ in ROWS:
        print(f"| {name} | {rows[name] / RATE_HZ:,.0f} | {rows[name] / total:.1%} |")
    for kind, samples in imports.most_common():
        if samples:
            print(f"| imports in a {kind} process | {samples / RATE_HZ:,.0f} | {samples / total:.1%} |")
    print("\n| process kind | CPU-s | share |\n|---|---:|---:|")
    for kind, samples in kinds.most_common():
        print(f"| {kind} | {samples / RATE_HZ:,.0f} | {samples / total:.1%} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="folder for profile.raw and pytest.log")
    parser.add_argument("--analyze", type=Path, help="a profile.raw written before: print its table only")
    parser.add_argument("pytest_args", nargs="*", help="after --: what pytest runs (default: the whole suite)")
    args = parser.parse_args()
    if args.analyze:
        analyze(args.analyze)
        return
    if args.out is None:
        parser.error("--out or --analyze is needed")
    if shutil.which("py-spy") is None:
        raise SystemExit("py-spy is not installed: pip install py-spy")
    args.out.mkdir(parents=True, exist_ok=True)
    raw = args.out / "profile.raw"
    command = ["py-spy", "record", "--subprocesses", "--nonblocking", "-r", str(RATE_HZ), "--format", "raw",
               "-o", str(raw), "--", sys.executable, "-m", "pytest", *STAGE_1, *args.pytest_args]
    with open(args.out / "pytest.log", "w") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT)
    print(f"pytest (under py-spy) exited {done.returncode}; its log: {args.out / 'pytest.log'}")
    tail = (args.out / "pytest.log").read_text().strip().splitlines()
    summary = [line for line in tail if re.search(r"\d+ (passed|failed)", line)]
    if summary:
        print(summary[-1])
    analyze(raw)


if __name__ == "__main__":
    main()
