"""The process's forkserver, from which coreward starts its child processes, and the modules it preloads.

A child started by fork inherits the parent's imports for free, but fork is unsafe once a process has threads
(torch's, torchrun's). multiprocessing's forkserver is the safe middle: a clean server process imports a preload
list once and forks each child from itself. Python keeps one forkserver per process, and reads its preload list
once, when the server starts. Two parts of coreward start children from it:

* the verifier's worker processes (`verify/pool.py`): math-verify, so a replacement worker starts in milliseconds;
* the side-by-side training runs of `coreward demo` and `coreward map` (`experiments/jobs.py`): torch,
  transformers and TRL, imports a run would otherwise pay again (docs/figures.md).

So each asks for what it needs with `context(*modules)`, and the server preloads the union of every request made
before it started; a caller that will start training runs asks before anything else starts the server. After them
it imports `READY` (runtime/forkserver_ready.py): what those modules import or build lazily, and a `gc.freeze()`.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import sys
import types


_requested: set[str] = set()
# imported after the requested modules: warms what they import lazily, then freezes the server's objects (its docstring)
READY = "coreward.runtime.forkserver_ready"


def context(*modules: str):
    """The forkserver context with `modules` added to its preload list (spawn where there is no forkserver)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    _requested.update(modules)
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([*sorted(_requested), READY])
    return ctx


@contextlib.contextmanager
def main_module_hidden():
    """Start a forkserver/spawn child without the caller's `__main__`.

    Such a child re-imports the parent's main module (by path, as `__mp_main__`) before it runs its target, so a
    plain script that calls `coreward.train` would train again in every child (and fight over the run directory).
    coreward's children need nothing from `__main__` (their targets live in coreward's modules), so for the moment
    of `start()` -- when multiprocessing reads what to re-import -- `__main__` is an empty module."""
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is None:
            del sys.modules["__main__"]
        else:
            sys.modules["__main__"] = main
