"""A full disk during a checkpoint (a real one: a small tmpfs): the run fails with a clear error, the previous
complete checkpoint stays intact, and the run resumes from it once there is room."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from coreward.grpo.checkpoints import complete_checkpoints
from coreward.runtime.metrics import read_metrics
from tests.helpers.kill_resume import check_checkpoint
from tests.helpers.runs import coreward_here, tiny_train_args


def size_of(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


@pytest.fixture
def small_filesystem(tmp_path):
    """Mount a tmpfs (root can, here and in CI); yield a function that sizes it."""
    mount = Path("/tmp") / f"coreward-full-{uuid.uuid4().hex[:8]}"
    mount.mkdir()
    mounted = []

    def make(size_bytes: int) -> Path:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes // 1024}k", "tmpfs", str(mount)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a small filesystem here: {done.stderr.strip()}")
        mounted.append(mount)
        return mount

    yield make
    for path in mounted:
        subprocess.run(["umount", str(path)], check=False)
    shutil.rmtree(mount, ignore_errors=True)


def test_a_full_disk_fails_the_checkpoint_cleanly_and_the_run_resumes(tiny_policy, tmp_path, small_filesystem):
    probe = tmp_path / "probe"  # how much one step's run directory and one checkpoint take, on a normal disk
    assert coreward_here(*tiny_train_args(tiny_policy, probe, "--max-steps", "1")).returncode == 0
    checkpoint_bytes = size_of(probe / "checkpoint-1")
    run_bytes = size_of(probe) - size_of(probe / "final")
    disk = small_filesystem(run_bytes + checkpoint_bytes // 2)  # room for checkpoint-1, not for checkpoint-2 as well

    run_dir = disk / "run"
    failed = coreward_here(*tiny_train_args(tiny_policy, run_dir, "--max-steps", "3"))
    assert failed.returncode == 2, failed.stderr[-3000:]
    assert "the disk is full" in failed.stderr and "checkpoint-1) is intact" in failed.stderr
    assert [p.name for p in complete_checkpoints(run_dir)] == ["checkpoint-1"]
    assert not (run_dir / "checkpoint-2").exists() and not (run_dir / "final").exists()
    assert check_checkpoint(run_dir / "checkpoint-1") == 1  # everything a resume loads is there and readable

    moved = tmp_path / "moved"  # room again: the same run, on a disk with space
    shutil.copytree(run_dir, moved)
    resumed = coreward_here(*tiny_train_args(tiny_policy, moved, "--max-steps", "3", "--resume"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [row["step"] for row in read_metrics(moved / "metrics.jsonl")] == [1, 2, 3]
    assert (moved / "final" / "config.json").is_file()
