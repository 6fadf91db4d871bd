"""Where coreward caches what it builds (demo assets, converted GGUF models): $COREWARD_CACHE, default
~/.cache/coreward."""

from __future__ import annotations

import os
from pathlib import Path


CACHE_ENV = "COREWARD_CACHE"


def cache_root() -> Path:
    """Where built assets are cached: $COREWARD_CACHE, default ~/.cache/coreward."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "coreward")
