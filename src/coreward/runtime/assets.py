"""Model names that stand for shipped assets, resolved in one place.

`resolve_model(name_or_path, kind)` is how every command turns what a user wrote into something
`from_pretrained` reads:

* an asset name (`demo`): that asset of the given kind, `policy` (the warm-started demo policy), `rm` (the
  demo VerifyRM) or `rm_pairs` (the demo RM's held-out labelled pairs, a file). The package ships both in `coreward/assets/`; the `coreward.demo`
  package registers builders that check the shipped copy against its recipe and rebuild it into the cache
  when needed, and they take precedence once registered (the command line and `import coreward` do);
* an existing directory: itself;
* something that can only be a path (absolute, `.`, `~`, more than one `/`) but names no directory: an error;
* anything else: a Hugging Face hub id (`name` or `owner/name`), passed through (it can't be checked offline).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from coreward.runtime.errors import CorewardError

ASSETS_DIR = Path(__file__).resolve().parents[1] / "assets"
CACHE_ENV = "COREWARD_CACHE"
KINDS = ("policy", "rm", "rm_pairs")
#: asset name -> {kind: directory name under assets/}
SHIPPED = {"demo": {"policy": "demo_policy", "rm": "demo_rm", "rm_pairs": "demo_rm_heldout_pairs.jsonl"}}
#: (asset name, kind) -> a function returning the directory to load, building it first when needed
_BUILDERS: dict[tuple[str, str], Callable[[], Path]] = {}


def cache_root() -> Path:
    """Where built assets are cached: $COREWARD_CACHE, default ~/.cache/coreward."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "coreward")


def is_asset(name: str | os.PathLike) -> bool:
    return str(name) in SHIPPED


def register_builder(name: str, kind: str, builder: Callable[[], Path]) -> None:
    """Let `builder` decide where asset `name` of `kind` lives (and build it when it must)."""
    _BUILDERS[(name, kind)] = builder


def shipped_path(name: str, kind: str) -> Path:
    return ASSETS_DIR / SHIPPED[name][kind]


def resolve_model(name_or_path: str | os.PathLike, kind: str = "policy", key: str = "model") -> str:
    """A directory or hub id for `from_pretrained`; `key` names the setting in errors."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    name = str(name_or_path)
    if is_asset(name):
        builder = _BUILDERS.get((name, kind))
        if builder is not None:
            return str(builder())
        path = shipped_path(name, kind)
        if not (path.is_file() or (path / "config.json").is_file()):
            raise CorewardError(f"{key}: the shipped {name!r} {kind} is missing from {path}; reinstall coreward, or run "
                                f"`coreward demo` once to rebuild it")
        return str(path)
    path = Path(name).expanduser()
    if path.is_dir():
        return str(path)
    # a hub id is "name" or "owner/name": anything else that names no directory is a path that is missing
    if os.path.isabs(name) or name.startswith((".", "~")) or name.count("/") > 1:
        raise CorewardError(f"{key}: no such directory: {name} (give a saved model directory, a hub id, or 'demo')")
    return name


def resolve_file(name_or_path: str | os.PathLike, kind: str, key: str) -> Path:
    """A data file: an asset name's shipped file of `kind`, or an existing file; an error naming `key` otherwise."""
    name = str(name_or_path)
    path = shipped_path(name, kind) if is_asset(name) else Path(name).expanduser()
    if not path.is_file():
        raise CorewardError(f"{key}: no such file: {path}")
    return path
