"""configs/slurm/train_multinode.sbatch on a requeue: SLURM runs the same script again with the same arguments, and
SLURM_RESTART_COUNT > 0; the script then asks `coreward train` for --resume-if-any (continue from a checkpoint if there
is one, else start), because a bare --resume is refused on a directory with no complete checkpoint.

No SLURM here: `scontrol` and `srun` are stand-ins on PATH, and `srun` records the command it was given to run on each
node (what the script decides is what is checked; launch_node.sh itself runs in tests/grpo/test_multinode.py)."""

from __future__ import annotations

import os
import shlex
import subprocess

import pytest

from tests.helpers.runs import REPO


SBATCH = REPO / "configs" / "slurm" / "train_multinode.sbatch"


@pytest.fixture
def slurm_stand_ins(tmp_path):
    """A PATH with `scontrol` (prints one host) and `srun` (writes its arguments to a file, one per line)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/bash\necho node01\n")
    (bin_dir / "srun").write_text(f'#!/bin/bash\nprintf "%s\\n" "$@" > {shlex.quote(str(tmp_path / "srun_args"))}\n')
    for tool in ("scontrol", "srun"):
        (bin_dir / tool).chmod(0o755)

    def submit(*args: str, restarts: int) -> list[str]:
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_NODELIST": "node01",
               "SLURM_NNODES": "1", "GPUS_PER_NODE": "1", "SLURM_RESTART_COUNT": str(restarts)}
        done = subprocess.run(["bash", str(SBATCH), *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        node_command = (tmp_path / "srun_args").read_text().splitlines()
        return node_command[node_command.index("configs/slurm/launch_node.sh") + 1:]

    return submit


def test_a_requeued_job_resumes_if_there_is_anything_to_resume(slurm_stand_ins):
    first = slurm_stand_ins("c.yaml", "/shared/runs/r", "--max-steps", "9", restarts=0)
    assert first == ["c.yaml", "/shared/runs/r", "--max-steps", "9"]  # a first start: a new run, nothing added
    requeued = slurm_stand_ins("c.yaml", "/shared/runs/r", "--max-steps", "9", restarts=1)
    assert requeued == ["c.yaml", "/shared/runs/r", "--max-steps", "9", "--resume-if-any"]
    # what the user asked for stays: --resume (a checkpoint must be there) is not weakened, nor doubled
    for flag in ("--resume", "--resume-if-any"):
        assert slurm_stand_ins("c.yaml", "/shared/runs/r", flag, restarts=2) == ["c.yaml", "/shared/runs/r", flag]
