"""A run directory's safety rules: one writer at a time, no silent change of config on resume, no secret on
disk, and a finished run left as it is.

* **Lock.** The main process holds an exclusive `flock` on `run_dir/.lock` for the whole run; the kernel
  releases it when the process dies (a SIGKILL included), so a killed run can be resumed at once, while a
  second `coreward train` (or `--resume`) on a directory in use fails immediately, naming the holder.
* **Config on resume.** The resolved config is saved as `config.yaml`; `--resume` compares it with the new
  one and refuses when a key outside `MAY_CHANGE` differs (naming the keys), unless the user allows it; then
  the old file is kept as `config.step-N.yaml` beside the new one.
* **Resume needs something to resume.** `--resume` on a directory without a complete checkpoint is an error that
  names the directory and what it holds (a typo in the path would otherwise train from step 0 and exit 0, as
  transformers' Trainer refuses too); `--resume-if-any` continues when there is a checkpoint and starts otherwise,
  the form for a job that a scheduler may start again (configs/slurm/train_multinode.sbatch, `coreward map`).
* **Secrets.** Any config value under a secret-looking key (`api_key`, `token`, `password`, `secret`, ...)
  is written as `REDACTED`: keys come from the environment or a key file, and the run directory can be shared.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import socket
import time
from pathlib import Path
from typing import Any

import yaml

from coreward.runtime.config import to_dict
from coreward.runtime.errors import CorewardError


LOCK_FILE = ".lock"
REDACTED = "REDACTED"
_SECRET_KEY = re.compile(r"(api[_-]?key|token|secret|password|passwd|authorization|credential)", re.I)
# keys a resumed run may change without `--allow-config-change`: how long and how it logs, saves, evaluates
MAY_CHANGE = (
    "output_dir", "torch_threads", "grpo.max_steps", "grpo.num_train_epochs", "grpo.save_steps",
    "grpo.save_total_limit", "grpo.logging_steps", "grpo.report_to", "grpo.disable_tqdm", "data.eval",
    "data.eval_every", "data.eval_limit", "data.eval_n", "data.eval_split", "data.eval_columns",
    "verifier.num_workers", "grpo.resume_from_checkpoint",
)


def redact(data: Any) -> Any:
    """A copy of `data` with every value under a secret-looking key replaced by REDACTED."""
    if isinstance(data, dict):
        return {k: REDACTED if _SECRET_KEY.search(str(k)) and v not in (None, "") else redact(v) for k, v in data.items()}
    if isinstance(data, list):
        return [redact(v) for v in data]
    return data


def save_config(config: Any, path: Path) -> None:
    """The resolved config as YAML, secrets redacted."""
    path.write_text(yaml.safe_dump(redact(to_dict(config)), sort_keys=False))


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        flat: dict[str, Any] = {}
        for key, value in data.items():
            flat.update(_flatten(value, f"{prefix}{key}."))
        return flat
    return {prefix.rstrip("."): data}


def changed_keys(saved: dict, new: dict) -> list[str]:
    """Dotted keys whose values differ between two configs, other than those that may change on resume."""
    old, now = _flatten(saved), _flatten(redact(new))
    keys = sorted(set(old) | set(now))
    return [k for k in keys if old.get(k) != now.get(k) and not any(k == m or k.startswith(m + ".") for m in MAY_CHANGE)]


def check_resume_config(run_dir: Path, config: Any, allow_change: bool, step: int) -> None:
    """Refuse a resume whose config differs from the run's in a key that matters (unless allowed)."""
    path = run_dir / "config.yaml"
    if not path.is_file():
        return
    saved = upgraded(yaml.safe_load(path.read_text()) or {})
    keys = changed_keys(saved, to_dict(config))
    if keys and not allow_change:
        shown = ", ".join(f"{k} ({_flatten(saved).get(k)!r} -> {_flatten(redact(to_dict(config))).get(k)!r})" for k in keys[:8])
        raise CorewardError(
            f"--resume: the config differs from the run's {path} in {shown}{' ...' if len(keys) > 8 else ''}; "
            "resume with the same config, start a new --output-dir, or pass --allow-config-change"
        )
    if keys:
        path.replace(run_dir / f"config.step-{step}.yaml")


def check_something_to_resume(run_dir: Path, resume: bool | str, created: bool) -> None:
    """Refuse `--resume` (strict: `resume is True`) when the run directory has no complete checkpoint, naming what it
    holds. `created`: the directory did not exist before this run (the lock made it)."""
    if resume is not True:
        return
    if created:
        where = f"{run_dir} did not exist (a typo in the path?)"
    else:
        where = f"no complete checkpoint in {run_dir}: it holds {holdings(run_dir)}"
    raise CorewardError(
        f"--resume: {where}; nothing to resume. Leave out --resume to start a run there, or pass --resume-if-any "
        "(continue from the newest complete checkpoint if there is one, else start: for a job that may be requeued)")


def holdings(run_dir: Path) -> str:
    """What a run directory holds, in a few words (for errors): its metrics' steps, its checkpoints (an incomplete
    one named as such), anything else by name."""
    from coreward.grpo.checkpoints import COMPLETE_MARKER

    entries = sorted(p for p in run_dir.iterdir() if p.name != LOCK_FILE)
    if not entries:
        return "nothing (an empty directory)"
    shown = []
    for path in entries:
        if path.name == "metrics.jsonl":
            steps = sum(1 for line in path.read_text(errors="replace").splitlines() if line.strip())
            shown.append(f"metrics.jsonl ({steps} logged row{'s' if steps != 1 else ''})")
        elif path.name.startswith("checkpoint-") and path.is_dir() and not (path / COMPLETE_MARKER).is_file():
            shown.append(f"{path.name}/ (incomplete: no {COMPLETE_MARKER} marker)")
        else:
            shown.append(path.name + ("/" if path.is_dir() else ""))
    return ", ".join(shown[:8]) + (f" and {len(shown) - 8} more" if len(shown) > 8 else "")


def upgraded(saved: dict) -> dict:
    """A run's saved config written by an older coreward, with its moved keys where they are now (quietly: the run's
    own file, not the user's); as it was when they can't be moved (then the comparison names them)."""
    from coreward.grpo.config import move_method_data_keys

    try:
        return move_method_data_keys(saved, warn=False)
    except CorewardError:
        return saved


class RunLock:
    """An exclusive lock on a run directory for as long as this object is held (main process only)."""

    def __init__(self, run_dir: Path, enabled: bool = True):
        self.path = Path(run_dir) / LOCK_FILE
        self.enabled = enabled
        self.created = False  # whether this lock made the run directory (it did not exist before)
        self._handle = None

    def __enter__(self) -> RunLock:
        if not self.enabled:
            return self
        self.created = not self.path.parent.exists()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise CorewardError(f"run directory {self.path.parent} is in use by {holder}: wait for it, stop it, "
                                "or pick another --output-dir") from None
        except OSError as err:  # a shared filesystem without flock (Lustre mounted without `-o flock`): ENOSYS
            handle.close()
            print(f"warning: cannot lock {self.path} ({err.strerror}): this filesystem does not support flock, "
                  "so nothing stops a second run from writing into this directory", flush=True)
            return self
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "since": time.strftime("%Y-%m-%d %H:%M:%S")}) + "\n")
        handle.flush()
        self._handle = handle
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._handle is not None:
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None
