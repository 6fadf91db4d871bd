"""Atomic writes: a reader sees the old complete file or directory, or the new complete one, never half."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


# written last into a directory (a checkpoint, final/, best/): without it the directory is the leftover of a killed write
COMPLETE_MARKER = "COREWARD_COMPLETE"


@contextmanager
def atomic_directory(target: str | os.PathLike) -> Iterator[Path]:
    """Yield a staging directory beside `target` that replaces it only once the block has written everything.

    A reader (a resumed run, Cooper loading the RM) then sees either the old complete directory or the new
    complete one. If the block fails, the staging directory is removed and `target` is left as it was.
    """
    target = Path(target)
    staging = staging_for(target, f"-{os.getpid()}")
    staging.mkdir(parents=True)
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    commit_staging(staging, target)


def staging_for(target: Path, suffix: str = "") -> Path:
    """An empty staging path beside `target` (`.NAME.tmp<suffix>`; several processes writing one directory
    together pass no suffix, so they agree on it)."""
    staging = target.with_name(f".{target.name}.tmp{suffix}")
    shutil.rmtree(staging, ignore_errors=True)
    return staging


def commit_staging(staging: Path, target: Path) -> None:
    """Put the finished `staging` directory in place of `target` (the old one is removed first)."""
    if target.exists():
        shutil.rmtree(target)
    os.replace(staging, target)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write `text` to a temporary file beside `path`, flush it to disk, then rename it over `path`."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    return path


KEPT_SETTINGS = "settings.json"  # a stopped job's fingerprint, beside the pieces it kept


def kept_for(directory: Path, identity: dict, discarded: str) -> bool:
    """Whether `directory` holds what a stopped job kept for the job `identity` names (its settings.json, written by
    the job's first kept piece). Where it holds another job's, prints `discarded` on stderr and removes it."""
    written = directory / KEPT_SETTINGS
    if not written.is_file():
        return False
    try:
        same = json.loads(written.read_text()) == identity
    except (OSError, ValueError):
        same = False
    if not same:
        print(discarded, file=sys.stderr)
        shutil.rmtree(directory, ignore_errors=True)
    return same


def keep_piece(directory: Path, identity: dict, name: str, text: str) -> None:
    """Write one finished piece of a job into `directory` (whole or not at all), its settings.json (`identity`, what
    `kept_for` checks) first if the directory has none yet."""
    if not (directory / KEPT_SETTINGS).is_file():
        directory.mkdir(parents=True, exist_ok=True)
        atomic_write_text(directory / KEPT_SETTINGS, json.dumps(identity, indent=2) + "\n")
    atomic_write_text(directory / name, text)
