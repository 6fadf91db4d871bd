"""`coreward train` on a tiny policy, as a subprocess or in the test's own process: the command and the small
settings the tests share."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]
RULE_CONFIG = REPO / "configs" / "demo" / "rule.yaml"


def coreward(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """`coreward ARGS` in a new process: for tests of what a process does (its exit, its signals, its terminal)."""
    return subprocess.run([sys.executable, "-m", "coreward.cli", *args], capture_output=True, text=True, timeout=timeout)


def coreward_here(*args: str) -> subprocess.CompletedProcess:
    """`coreward ARGS` in this process, with the exit status and output `coreward.cli.main` gives (a CorewardError:
    "error: ..." on stderr, exit 2). A new Python process spends about 7 s importing torch, transformers and TRL
    before its first step; the tests of what a run does to its directory need no new process."""
    from typer.testing import CliRunner

    from coreward.cli import app
    from coreward.runtime.errors import CorewardError

    result = CliRunner().invoke(app, [str(a) for a in args])
    stdout, stderr, code = result.stdout, result.stderr, result.exit_code
    if isinstance(result.exception, CorewardError):
        stderr, code = stderr + f"error: {result.exception}\n", 2
    elif result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(["coreward", *args], code, stdout, stderr)


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
