"""The warm-started demo policy every demo run starts from: shipped with the package, else built once.

The package ships the checkpoint in `coreward/assets/demo_policy/` (about 3 MB; its README.md records
the command that made it, its sft_metrics.json the accuracy it was built to). When that copy is missing or
unreadable (a checkout without the binary files, a stripped install), the same recipe, `DemoSFTConfig()`'s
defaults, is run once into `$COREWARD_CACHE` (default ~/.cache/coreward) under a name that hashes those settings, so
a changed recipe never reuses a stale build.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import sys
from pathlib import Path

from coreward.runtime.assets import cache_root, shipped_path
from coreward.runtime.config import to_dict


SHIPPED = shipped_path("demo", "policy")


def recipe_hash() -> str:
    """Hash of the SFT settings that define the demo policy (the output directory excluded)."""
    from coreward.demo.sft import DemoSFTConfig

    settings = to_dict(DemoSFTConfig())
    settings.pop("output_dir")
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]


def is_loadable(path: Path) -> bool:
    """Whether `path` holds a tokenizer and causal LM that the Auto classes can load."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not (path / "config.json").is_file():
        return False
    try:
        AutoTokenizer.from_pretrained(path)
        AutoModelForCausalLM.from_pretrained(path)
    except Exception:  # noqa: BLE001 - any failure (LFS pointer, truncated file, old format) means "rebuild"
        return False
    return True


def ensure_demo_policy(rebuild: bool = False) -> Path:
    """The demo policy's directory: the shipped checkpoint, else a cached build (made now if needed: the
    `coreward sft` row of docs/figures.md says how long).

    `rebuild=True` ignores the shipped copy and rebuilds the cached one. A file lock makes concurrent
    callers (the processes of one distributed run) build it once.
    """
    if not rebuild and is_loadable(SHIPPED):
        return SHIPPED
    target = cache_root() / f"demo_policy-{recipe_hash()}"
    if not rebuild and (target / "sft_metrics.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if rebuild or not (target / "sft_metrics.json").is_file():
            _build(target)
    return target


def _build(target: Path) -> None:
    """Run the default SFT recipe into `target` (sft_metrics.json, written last, marks it complete)."""
    from coreward.demo.sft import sft_main
    from coreward.runtime.interrupt import long_phase

    print(f"building the demo policy in {target} (first use, about two minutes)", file=sys.stderr)
    with long_phase("building the demo policy", "it is built whole or not at all (about two minutes): run the same "
                    "command again to build it"):
        shutil.rmtree(target, ignore_errors=True)
        sft_main(None, [], str(target))
