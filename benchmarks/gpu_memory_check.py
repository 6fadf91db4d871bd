"""The GPU memory calibration at the path the project's GPU check is run by: forwards to
benchmarks/gpu/gpu_memory_check.py (`python -m benchmarks.gpu.gpu_memory_check`), its arguments unchanged.

    python benchmarks/gpu_memory_check.py --out $OUT [--dry-run] [...]

A lent GPU runs it from a checkout where coreward is not installed, so the module runs with this checkout's src/
and root first on PYTHONPATH (a child process's environment; nothing here edits sys.path).
"""

import os
import subprocess
import sys
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    path = os.pathsep.join([str(REPO / "src"), str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    command = [sys.executable, "-m", "benchmarks.gpu.gpu_memory_check", *sys.argv[1:]]
    return subprocess.run(command, env={**os.environ, "PYTHONPATH": path}).returncode


if __name__ == "__main__":
    sys.exit(main())
