"""Checkpoints that are complete or absent: the completeness marker, atomic removal, rotation.

A checkpoint directory (`checkpoint-N`, N its step) is written file by file by a trainer (TRL's for `coreward train`,
HF's for `coreward rm train`); only once every file is on disk does `mark_complete` add `COREWARD_COMPLETE`,
atomically. Resume takes the newest complete checkpoint; anything without the marker is the leftover of a killed write.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from coreward.runtime.files import COMPLETE_MARKER


TRASH_PREFIX = ".trash-"
# resume=... of `coreward train` and `coreward rm train` (`--resume-if-any`): continue from a complete checkpoint
# if there is one, else start
RESUME_IF_ANY = "if_any"


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
