"""Imported last by coreward's forkserver (runtime/forkserver.py), after the modules it was asked to preload: work
that every child forked from it would otherwise repeat, done once before the first fork.

* math-verify's first comparison builds its LaTeX parser and imports sympy's simplify, in each verifier worker and
  in each training run (the verifier's fast path runs in the run itself);
* accelerate imports DeepSpeed, where it is installed, in every training run (`extract_model_from_parallel`).
  Imported here only with a CPU build of torch: on a CUDA build DeepSpeed's import probes the GPU, and a
  process that has touched CUDA must not fork;
* `gc.freeze()`: the preloaded objects move to the collector's permanent generation, so a child's full collections
  skip them (transformers' Trainer runs one at the start of every training loop) and the child's collector does not
  write to, and so copy, the pages it shares with the server.

A profile of the test suite found these three a sizeable share of its CPU time; docs/figures.md has the before and
after.
"""

from __future__ import annotations

import gc
import importlib.util
import sys

from coreward.runtime.devices import cpu_only_torch


def _warm_math_verify() -> None:
    pool = sys.modules.get("coreward.verify.pool")
    if pool is not None:
        pool.math_verify_equal("\\frac{1}{2}", "0.5")  # the parser's tables, sympy's numbers
        pool.math_verify_equal("(x+1)^2", "x^2+2x+1")  # simplify(), which imports sympy.physics.units and tensors


def _warm_deepspeed() -> None:
    if "coreward.grpo.trainer" in sys.modules and cpu_only_torch() and importlib.util.find_spec("deepspeed"):
        import deepspeed  # noqa: F401


_warm_math_verify()
_warm_deepspeed()
gc.collect()  # garbage of the imports goes now, not into the permanent generation
gc.freeze()
