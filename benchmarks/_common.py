"""What the harnesses share: the repository's root, the machine line every figure is printed under, and the
environment a harness gives the processes it starts.

    python -m benchmarks._common      # prints the machine line (benchmarks/run.py prints it first)
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]


def cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "?"


def commit() -> str:
    """The checkout's short commit, with `+changes` when the working tree differs from it."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True,
                           cwd=REPO).stdout.strip()
    return (head.strip() or "?") + (" +changes" if dirty else "")


def machine() -> str:
    """CPU model, cores, load, commit and library versions: where a figure printed under it comes from."""
    import torch
    import transformers
    import trl

    versions = f"python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}, " \
               f"trl {trl.__version__}"
    gpus = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    return (f"machine: {cpu_model()}, {os.cpu_count()} cores{', ' + gpus if gpus else ''}, "
            f"load average {os.getloadavg()[0]:.2f}; commit {commit()}; {versions}")


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a process a harness starts: the checkout's src/ and root first on PYTHONPATH, so the
    child runs this tree's coreward and can import `benchmarks.*` even where coreward is not installed."""
    path = os.pathsep.join([str(REPO / "src"), str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**os.environ, "PYTHONPATH": path, **extra}


if __name__ == "__main__":
    print(machine())
