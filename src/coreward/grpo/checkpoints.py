"""Checkpoints of `coreward train`: complete or absent (runtime/checkpoints.py: the completeness marker, atomic
removal, rotation), on a full disk, and agreed on by every process of a resumed run.

A checkpoint directory is written by TRL and by coreward (reward-source state, per-process resume state);
only once every file is on disk does `mark_complete` add `COREWARD_COMPLETE`, atomically.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from coreward.runtime.checkpoints import (  # noqa: F401  (re-exported: the names the training code uses)
    TRASH_PREFIX,
    checkpoint_step,
    complete_checkpoints,
    discard,
    last_complete_checkpoint,
    mark_complete,
    rotate_checkpoints,
)
from coreward.runtime.files import COMPLETE_MARKER  # noqa: F401  (re-exported: the name checkpoints use)


def disk_full(err: BaseException, directory: Path) -> bool:
    """Whether a failed write means the disk (or quota) is full: OSError's errno; else, for the RuntimeError
    torch's zip writer raises instead ("unexpected pos ..."), whether `directory`'s filesystem is out of room."""
    import errno

    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return True
    if "no space left" in str(err).lower():
        return True
    try:
        return shutil.disk_usage(directory).free < 16 * 1024 * 1024
    except OSError:
        return False


def agree_on_checkpoint(checkpoint: Path | None, run_dir: Path) -> None:
    """Refuse, on every process at once, a resume whose processes would start from different places.

    Every process picks the newest complete checkpoint of the run directory by itself. On several machines
    that directory must be one shared filesystem: a node-local directory shows machine 0 its checkpoints and
    the other machines none complete (the completeness marker is the global main process's), so they would
    start from step 0 beside it, or miss their own RNG and rollout-buffer files (`rng_state_R.pth`,
    `coreward_trainer_state_R.pt`, R = global rank). Called collectively once the processes are connected.
    """
    import socket

    from accelerate.utils import gather_object

    from coreward.runtime.distributed import world
    from coreward.runtime.errors import CorewardError

    rank, size = world()
    if size == 1:
        return
    name = checkpoint.name if checkpoint is not None else None
    # a checkpoint written by as many processes as this run has must hold this rank's own file (written by
    # another number of processes, its per-rank files do not match anyway: that resume is the user's choice)
    written = len(list(Path(checkpoint).glob("coreward_trainer_state_*.pt"))) if checkpoint is not None else 0
    own_file = written != size or (Path(checkpoint) / f"coreward_trainer_state_{rank}.pt").is_file()
    seen = gather_object([(rank, socket.gethostname(), name, own_file)])
    choices = sorted({str(c) for _, _, c, _ in seen})
    missing = [f"{r} ({host})" for r, host, c, ok in seen if c is not None and not ok]
    if len(choices) > 1:
        where = "; ".join(f"rank {r} ({host}): {c or 'no complete checkpoint'}" for r, host, c, _ in seen)
        raise CorewardError(
            f"--resume: the processes see different checkpoints in {run_dir} ({where}). On several machines the "
            "run directory must be one filesystem every node mounts (NFS, Lustre, GPFS), the same path on each: "
            "docs/how-to/several-machines.md")
    if missing:
        raise CorewardError(
            f"--resume: {checkpoint} has no coreward_trainer_state_R.pt for rank(s) {', '.join(missing)} although "
            f"{size} processes wrote it: the run directory is not one filesystem every node shares "
            "(docs/how-to/several-machines.md)")
