"""Test-only: coreward's command line with vLLM's CPU weight repacking turned off.

vLLM's CPU backend repacks the weights of linear and output layers for oneDNN / its GEMM kernels after
loading (and drops the original `weight` of linear layers), so TRL's weight sync, which writes new weights
through `load_weights`, has nowhere to write them (`'Parameter' object has no attribute 'weight_loader'`) or
writes into a tensor the forward pass no longer reads. GPUs have no such step. This wrapper makes every
layer compute with `F.linear` on its plain, loadable weight, then runs `coreward.cli` with the arguments
given: `python tests/helpers/vllm_cpu.py train --config ... --set grpo.use_vllm=true`. With
COREWARD_TEST_FORBID_HF_GENERATE=1, sampling through transformers in `Policy.generate` is an error; with
COREWARD_TEST_STALE_OUTPUT_LAYER=1 the output layer is left stale on purpose (the negative control).

It lives here, not in the library: it changes vLLM's CPU speed path, which is fine for tests only. The
`__main__` guard is vLLM's requirement (it may start worker processes that import the main module).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest


#: skip marker of the tests that need a real vLLM: skipped where it is not installed (CI's first stage),
#: run by the second stage, which sets COREWARD_REQUIRE_VLLM=1 so that a broken install fails, never skips
requires_vllm = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None and os.environ.get("COREWARD_REQUIRE_VLLM") != "1",
        reason="vllm is not installed (CI's second stage runs these: .ci/run)",
    ),
]

SCRIPT = Path(__file__).resolve()
ROOT = SCRIPT.parents[2]

# vLLM's own switch for its CPU CI (vllm/platforms/cpu.py): the model is traced once by dynamo and run with the eager
# backend instead of inductor's just-in-time kernels. The weight sync, sleep and sampling paths these tests check are
# the same; the stage's five tests took 362 core-seconds with inductor and 278 without (189 s and 150 s on 2 cores,
# 2026-11-29, 2-core AMD EPYC). Set here, at import, so that every process these tests start inherits it.
os.environ.setdefault("VLLM_CPU_CI_ENV", "1")


def run_coreward(*args: str, env: dict[str, str] | None = None, timeout: int = 900) -> subprocess.CompletedProcess:
    """`coreward ARGS` through this wrapper, in a fresh process (vLLM keeps global state), one torch thread."""
    from coreward.experiments.jobs import free_port

    # MASTER_PORT: the engine's rendezvous port, one per run (CI runs two of these tests side by side). A port found
    # free can be taken before the engine binds it (the other test's engine opens sockets on free ports too): then
    # the run fails at its rendezvous with EADDRINUSE, before any step, and goes again on another port.
    for attempt in range(3):
        environment = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}", "OMP_NUM_THREADS": "1",
                       "VLLM_CPU_KVCACHE_SPACE": "1", "MASTER_PORT": str(free_port()), **(env or {})}
        done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                              env=environment, cwd=ROOT)
        if done.returncode == 0 or "EADDRINUSE" not in done.stderr or attempt == 2:
            return done
        print(f"vLLM's rendezvous port {environment['MASTER_PORT']} was taken before it bound it: again", flush=True)
    return done


def keep_plain_weights(stale_output_layer: bool = False) -> None:
    """Replace vLLM's CPU GEMM dispatch with plain `F.linear` on the layer's own (syncable) weight.

    `stale_output_layer` makes the vocabulary layers compute with a copy of their weight made at start-up (the weight
    itself is still loaded, the forward pass never reads it): the broken sync the log-probability check must catch.
    The copy is made here, not left to vLLM's dispatch, which packs a copy on some CPUs and reads the weight itself
    on others (on an AVX2-only CPU the layer stayed in sync and the control could not fail the check)."""
    import torch.nn.functional as F
    from vllm.model_executor.layers import utils

    def plain_linear(layer, remove_weight: bool) -> None:  # signature of utils.dispatch_cpu_unquantized_gemm
        if stale_output_layer and not remove_weight:  # only the vocabulary layers keep their weight
            frozen = layer.weight.detach().clone()
            layer.cpu_linear = lambda x, weight, bias: F.linear(x, frozen, bias)
            return
        layer.cpu_linear = lambda x, weight, bias: F.linear(x, weight, bias)

    utils.dispatch_cpu_unquantized_gemm = plain_linear


def forbid_transformers_generate() -> None:
    """Make `Policy.generate`'s transformers path an error, to prove a teacher sampled through vLLM."""
    from coreward.grpo import policy

    def refuse(*args, **kwargs):
        raise AssertionError("Policy.generate sampled with transformers although the policy uses vLLM")

    policy.generate_from_ids = refuse


if __name__ == "__main__":
    keep_plain_weights(stale_output_layer=os.environ.get("COREWARD_TEST_STALE_OUTPUT_LAYER") == "1")
    if os.environ.get("COREWARD_TEST_FORBID_HF_GENERATE") == "1":
        forbid_transformers_generate()
    from coreward.cli import main

    sys.argv[0] = "coreward"
    sys.exit(main())
