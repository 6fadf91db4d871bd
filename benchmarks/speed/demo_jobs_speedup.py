"""Wall time of `coreward demo` with its runs one at a time (`--jobs 1`) against side by side (`--jobs N`), in one
run of this script, so the ratio compares the two under the same conditions.

    python -m benchmarks.speed.demo_jobs_speedup            # --quick demo, --jobs 1 then --jobs 2
    python -m benchmarks.speed.demo_jobs_speedup --full --jobs 2

It prints the machine line, each wall time and the speed-up, and checks that both tables hold the same numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._common import machine


def demo(output: Path, quick: bool, jobs: int) -> float:
    command = [sys.executable, "-m", "coreward.cli", "demo", "--output-dir", str(output), "--jobs", str(jobs),
               *(["--quick"] if quick else [])]
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the full demo instead of --quick")
    parser.add_argument("--jobs", type=int, default=2, help="runs side by side in the second demo")
    args = parser.parse_args()
    print(machine())  # CPU, cores, load, commit and versions
    with tempfile.TemporaryDirectory() as root:
        one = demo(Path(root) / "one", not args.full, 1)
        many = demo(Path(root) / "many", not args.full, args.jobs)
        tables = [json.loads((Path(root) / d / "results.json").read_text())["table"] for d in ("one", "many")]
    print(f"coreward demo{'' if args.full else ' --quick'}: --jobs 1 {one:.0f} s, --jobs {args.jobs} {many:.0f} s, "
          f"speed-up {one / many:.2f}x; same table: {tables[0] == tables[1]}")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
