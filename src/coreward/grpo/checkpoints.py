"""Checkpoints that are complete or absent: the completeness marker, atomic removal, rotation.

A checkpoint directory is written by TRL and by coreward (reward-source state, per-process resume state);
only once every file is on disk does `mark_complete` add `COREWARD_COMPLETE`, atomically. Resume takes the
newest complete checkpoint; anything without the marker is the leftover of a killed write.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from coreward.runtime.files import COMPLETE_MARKER  # noqa: F401  (re-exported: the name checkpoints use)


TRASH_PREFIX = ".trash-"


def checkpoint_step(path: Path) -> int:
    """The global step of `checkpoint-N`."""
    return int(Path(path).name.rsplit("-", 1)[-1])


def mark_complete(checkpoint: Path) -> None:
    """Write the completeness marker atomically: it exists only once every file before it is on disk."""
    _fsync_tree(checkpoint)
    tmp = checkpoint / (COMPLETE_MARKER + ".tmp")
    with open(tmp, "w") as handle:
        handle.write(json.dumps({"time": time.time()}))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, checkpoint / COMPLETE_MARKER)
    _fsync_directory(checkpoint)


def _fsync_tree(directory: Path) -> None:
    for path in sorted(directory.rglob("*"), reverse=True):  # files before the directories that list them
        try:
            if path.is_file():
                with open(path, "rb") as handle:
                    os.fsync(handle.fileno())
            elif path.is_dir():
                _fsync_directory(path)
        except OSError:
            pass


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def discard(path: Path) -> None:
    """Remove a checkpoint directory so that no reader ever sees it half deleted.

    It is first renamed out of the `checkpoint-*` namespace (atomic), then deleted; a kill during the
    deletion leaves a `.trash-*` directory, which the next rotation removes.
    """
    trash = path.with_name(f"{TRASH_PREFIX}{path.name}-{os.getpid()}")
    try:
        os.replace(path, trash)
    except OSError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def complete_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    found = []
    for path in Path(run_dir).glob("checkpoint-*"):
        suffix = path.name.rsplit("-", 1)[-1]
        if suffix.isdigit() and (path / COMPLETE_MARKER).is_file():
            found.append((int(suffix), path))
    return [path for _, path in sorted(found)]


def last_complete_checkpoint(run_dir: Path) -> Path | None:
    checkpoints = complete_checkpoints(run_dir)
    return checkpoints[-1] if checkpoints else None


def rotate_checkpoints(run_dir: Path, keep: int | None) -> None:
    """Delete old complete checkpoints beyond `keep`, incomplete ones older than the newest complete, and
    the leftovers of deletions a kill interrupted."""
    for trash in Path(run_dir).glob(f"{TRASH_PREFIX}checkpoint-*"):
        shutil.rmtree(trash, ignore_errors=True)
    complete = complete_checkpoints(run_dir)
    if not complete:
        return
    newest = int(complete[-1].name.rsplit("-", 1)[-1])
    for path in Path(run_dir).glob("checkpoint-*"):
        suffix = path.name.rsplit("-", 1)[-1]
        if suffix.isdigit() and not (path / COMPLETE_MARKER).is_file() and int(suffix) < newest:
            discard(path)
    if keep:
        for path in complete[:-keep]:
            discard(path)


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
            "docs/multinode.md")
    if missing:
        raise CorewardError(
            f"--resume: {checkpoint} has no coreward_trainer_state_R.pt for rank(s) {', '.join(missing)} although "
            f"{size} processes wrote it: the run directory is not one filesystem every node shares "
            "(docs/multinode.md)")
