"""`coreward train` as a subprocess on a tiny policy: the command and the small settings the tests share."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]
RULE_CONFIG = REPO / "configs" / "demo" / "rule.yaml"


def coreward(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "coreward.cli", *args], capture_output=True, text=True, timeout=timeout)


def tiny_train_args(policy: Path, run_dir: Path, *extra: str) -> list[str]:
    return [
        "train", "--config", str(RULE_CONFIG), "--output-dir", str(run_dir),
        "--set", f"model.name_or_path={policy}",
        "--set", "grpo.per_device_train_batch_size=16",
        "--set", "grpo.max_completion_length=12",
        "--set", "grpo.save_steps=1",
        "--set", "data.eval_every=0",
        *extra,
    ]
