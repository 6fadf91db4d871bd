"""Test-only: coreward's command line with vLLM's CPU weight repacking turned off.

vLLM's CPU backend repacks the weights of linear and output layers for oneDNN / its GEMM kernels after
loading (and drops the original `weight` of linear layers), so TRL's weight sync, which writes new weights
through `load_weights`, has nowhere to write them (`'Parameter' object has no attribute 'weight_loader'`) or
writes into a tensor the forward pass no longer reads. GPUs have no such step. This wrapper makes every
layer compute with `F.linear` on its plain, loadable weight, then runs `coreward.cli` with the arguments
given: `python tests/helpers/vllm_cpu.py train --config ... --set grpo.use_vllm=true`. With
COREWARD_TEST_FORBID_HF_GENERATE=1, sampling through transformers in `Policy.generate` is an error.

It lives here, not in the library: it changes vLLM's CPU speed path, which is fine for tests only. The
`__main__` guard is vLLM's requirement (it may start worker processes that import the main module).
"""

from __future__ import annotations

import os
import sys


def keep_plain_weights() -> None:
    """Replace vLLM's CPU GEMM dispatch with plain `F.linear` on the layer's own (syncable) weight."""
    import torch.nn.functional as F
    from vllm.model_executor.layers import utils

    def plain_linear(layer, remove_weight: bool) -> None:  # signature of utils.dispatch_cpu_unquantized_gemm
        layer.cpu_linear = lambda x, weight, bias: F.linear(x, weight, bias)

    utils.dispatch_cpu_unquantized_gemm = plain_linear


def forbid_transformers_generate() -> None:
    """Make `Policy.generate`'s transformers path an error, to prove a teacher sampled through vLLM."""
    from coreward.grpo import policy

    def refuse(*args, **kwargs):
        raise AssertionError("Policy.generate sampled with transformers although the policy uses vLLM")

    policy.generate_from_ids = refuse


if __name__ == "__main__":
    keep_plain_weights()
    if os.environ.get("COREWARD_TEST_FORBID_HF_GENERATE") == "1":
        forbid_transformers_generate()
    from coreward.cli import main

    sys.argv[0] = "coreward"
    sys.exit(main())
