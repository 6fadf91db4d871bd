"""Model names that stand for shipped assets, resolved in one place.

`resolve_model(name_or_path, kind)` is how every command turns what a user wrote into something
`from_pretrained` reads:

* a real pretrained model's registered name (`smollm2-135m-instruct`) or a `.gguf` file: a Hugging Face folder
  (`coreward.runtime.real_models`: the hub's cache when it holds the model, else the GGUF a registry package
  carries, converted once into the cache);
* an asset name (`demo`): that asset of the given kind, `policy` (the warm-started demo policy), `rm` (the
  demo VerifyRM) or `rm_pairs` (the demo RM's held-out labelled pairs, a file). The package ships both in `coreward/assets/`; the `coreward.demo`
  package registers builders that check the shipped copy against its recipe and rebuild it into the cache
  when needed, and they take precedence once registered (the command line and `import coreward` do). A builder
  may also register a name of one kind that nothing ships (`demo:1`, a member of the demo RM's ensemble): it is
  built into the cache the first time it is asked for;
* an existing directory: itself;
* something that can only be a path (absolute, `.`, `~`, more than one `/`) but names no directory: an error;
* anything else: a Hugging Face hub id (`name` or `owner/name`), passed through (it can't be checked offline).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from coreward.runtime.cache import CACHE_ENV, cache_root  # noqa: F401  (re-exported: callers import them from here)
from coreward.runtime.errors import CorewardError
from coreward.runtime.real_models import REAL_MODELS, real_model_path


ASSETS_DIR = Path(__file__).resolve().parents[1] / "assets"
KINDS = ("policy", "rm", "rm_pairs")
#: asset name -> {kind: directory name under assets/}
SHIPPED = {"demo": {"policy": "demo_policy", "rm": "demo_rm", "rm_pairs": "demo_rm_heldout_pairs.jsonl"}}
#: (asset name, kind) -> a function returning the directory to load, building it first when needed
_BUILDERS: dict[tuple[str, str], Callable[[], Path]] = {}
#: (asset name, kind) -> (seconds its build takes, or None when it is built; the command that builds it ahead)
_BUILD_COSTS: dict[tuple[str, str], tuple[Callable[[], float | None], str]] = {}


def is_asset(name: str | os.PathLike) -> bool:
    return str(name) in SHIPPED


def register_builder(name: str, kind: str, builder: Callable[[], Path],
                     build_s: Callable[[], float | None] | None = None, ahead: str = "") -> None:
    """Let `builder` decide where asset `name` of `kind` lives (and build it when it must). `build_s`: how many
    seconds that build takes now (None: nothing to build), for `announce_builds`; `ahead`: the command that builds
    it ahead of time, given the names to build as its last arguments."""
    _BUILDERS[(name, kind)] = builder
    if build_s is not None:
        _BUILD_COSTS[(name, kind)] = (build_s, ahead)


def announce_builds(names: list[str], kind: str, what: str) -> None:
    """Say, before the first of them starts, which of `names` must be built first and how long that takes in all,
    with the command that builds them ahead of time: a run that is about to spend half an hour building
    ensemble members says so before it does (stderr, so a run's stdout stays its own)."""
    import sys

    if os.environ.get("RANK", "0") != "0":  # several processes: the main one says it
        return
    pending: dict[str, float] = {}  # name -> seconds its build takes
    for name in dict.fromkeys(names):
        build_s, _ = _BUILD_COSTS.get((name, kind), (lambda: None, ""))
        if (seconds := build_s()) is not None:
            pending[name] = seconds
    if not pending:
        return
    minutes = round(sum(pending.values()) / 60)
    listed = ", ".join(pending)
    commands: dict[str, list[str]] = {}  # the command that builds them ahead -> the names it is given
    for name in pending:
        if ahead := _BUILD_COSTS[(name, kind)][1]:
            commands.setdefault(ahead, []).append(name)
    print(f"{what}: {len(pending)} model(s) must be built before training starts ({listed}): about {minutes} minutes "
          "in all, once (they are cached). Ctrl-C stops a build and keeps what it finished"
          + ("; to build them ahead of time: " + "; ".join(f"{ahead} {' '.join(given)}" for ahead, given in
                                                           commands.items()) if commands else ""),
          file=sys.stderr, flush=True)


def shipped_path(name: str, kind: str) -> Path:
    return ASSETS_DIR / SHIPPED[name][kind]


def resolve_model(name_or_path: str | os.PathLike, kind: str = "policy", key: str = "model") -> str:
    """A directory or hub id for `from_pretrained`; `key` names the setting in errors."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    name = str(name_or_path)
    if kind == "policy" and (real := real_model_path(name, key)) is not None:
        return real
    builder = _BUILDERS.get((name, kind))
    if builder is not None:
        return str(builder())
    if is_asset(name):
        path = shipped_path(name, kind)
        if not (path.is_file() or (path / "config.json").is_file()):
            raise CorewardError(f"{key}: the shipped {name!r} {kind} is missing from {path}; reinstall coreward, or run "
                                f"`coreward demo` once to rebuild it")
        return str(path)
    path = Path(name).expanduser()
    if path.is_dir():
        return str(path)
    if is_path_like(name):
        raise CorewardError(f"{key}: no such directory: {name} (give a saved model directory, a hub id, a .gguf file, or 'demo')")
    if ":" in name:  # no hub id has one: an asset name that nothing registered (the demo's are, by `coreward.demo`)
        raise CorewardError(f"{key}: {name!r} is neither a directory nor a known {kind} name (known: "
                            f"{', '.join(registered_names(kind))}; the demo's names are registered by importing "
                            "coreward.demo, as the command line does)")
    if "/" not in name:  # no owner: a registered name mistyped before it is a hub id (the hub's are owner/name)
        from coreward.runtime.names import nearest

        close = nearest(name, registered_names(kind))
        if close is not None:
            raise CorewardError(f"{key}: {name!r} is not a registered {kind} name; did you mean {close!r}? "
                                f"(registered: {', '.join(registered_names(kind))})")
    check_hub_reachable(name, key)
    return name


def is_path_like(name: str) -> bool:
    """Whether `name` can only be a path, not a hub id: a hub id is "name" or "owner/name"; an absolute path, one
    starting with `.` or `~`, or one with more than one `/` is a path (missing, when no directory has that name)."""
    return os.path.isabs(name) or name.startswith((".", "~")) or name.count("/") > 1


def registered_names(kind: str) -> list[str]:
    """The asset names that stand for a model of `kind`: the shipped ones and those a builder registered."""
    real = set(REAL_MODELS) if kind == "policy" else set()
    return sorted({n for n, kinds in SHIPPED.items() if kind in kinds} | {n for n, k in _BUILDERS if k == kind} | real)


HUB_PROBE_S = 3.0  # how long the hub may take to accept a connection before it counts as unreachable


def check_hub_reachable(repo_id: str, key: str) -> None:
    """Fail fast, with what to do, when a hub id must be downloaded and the hub can't be reached.

    Without this, transformers retries every request, a line each, before its error (docs/figures.md, "a hub dataset id
    without a network"). With
    no network, the hub client is switched to offline mode (as HF_HUB_OFFLINE=1 does), so a model already in the
    local cache loads from there at once; a model that is not cached is an error now."""
    import huggingface_hub.constants as hub

    if hub.HF_HUB_OFFLINE:
        return
    why = hub_unreachable()
    if why is None:
        return
    os.environ["HF_HUB_OFFLINE"] = "1"
    hub.HF_HUB_OFFLINE = True
    if _in_hub_cache(repo_id):
        return
    if "/" not in repo_id:  # not a registered name and no owner: `hf download` of it would be no advice
        raise CorewardError(
            f"{key}: {repo_id!r} is not a registered model name ({', '.join(registered_names('policy'))}), nor a "
            f"Hugging Face hub id in the local cache ({hub.HF_HUB_CACHE}), and the hub can't be reached ({why}): give "
            "a registered name, a hub id as owner/name (e.g. HuggingFaceTB/SmolLM2-135M-Instruct) where there is "
            "network, or a saved model directory"
        )
    raise CorewardError(
        f"{key}: {repo_id!r} is a Hugging Face hub id, the hub can't be reached ({why}), and the model is not in the "
        f"local cache ({hub.HF_HUB_CACHE}): download it where there is network (`hf download {repo_id}`, then copy "
        "the cache or the folder here), or give a saved model directory"
    )


def hub_unreachable() -> str | None:
    """Why the hub's endpoint doesn't answer a TCP connect within HUB_PROBE_S, or None. The name lookup is
    inside the wait too (it runs in a thread: a lookup with no DNS server can hang longer than any socket timeout)."""
    import socket
    import threading
    from urllib.parse import urlparse

    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    where = f"{url.hostname}:{port}"
    outcome: list[str | None] = []

    def connect() -> None:
        try:
            socket.create_connection((url.hostname, port), timeout=HUB_PROBE_S).close()
            outcome.append(None)
        except OSError as err:
            outcome.append(f"{where} is unreachable ({err.strerror or err})")

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(HUB_PROBE_S + 0.5)
    return outcome[0] if outcome else f"{where} did not answer within {HUB_PROBE_S:.0f} s"


def _in_hub_cache(repo_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)


def resolve_file(name_or_path: str | os.PathLike, kind: str, key: str) -> Path:
    """A data file: an asset name's shipped file of `kind`, or an existing file; an error naming `key` otherwise."""
    name = str(name_or_path)
    path = shipped_path(name, kind) if is_asset(name) else Path(name).expanduser()
    if not path.is_file():
        raise CorewardError(f"{key}: no such file: {path}")
    return path
