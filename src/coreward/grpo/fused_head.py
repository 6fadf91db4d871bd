"""TRL's fused log-probability head, projecting only the positions it scores on a CPU too.

TRL 1.16's fused head (`trl.trainer.utils.add_fused_lm_head`) projects the hidden states through the
vocabulary-wide head only at the positions with a label where Triton runs (CUDA, XPU), and at every position
elsewhere, so that a compiler (Neuron) sees one tile shape a batch. On a CPU a GRPO micro-batch's prompt and padding
positions, most of a chat-formatted row when completions are short, then go through the head three times (forward,
its recomputation in backward, the input's gradient) for log-probabilities that are masked out. A CPU has no compiler
to keep shapes for, so coreward makes the head compact there: the kept positions are the same rows of the same
products, so each scored token's log-probability and gradient are the same, for the scored positions' work only.
"""

from __future__ import annotations

import logging
from typing import Any


logger = logging.getLogger(__name__)

MARK = "_coreward_compact_on_cpu"


def compact_on_cpu() -> bool:
    """Make TRL's fused head score only labelled positions on a CPU as it does on Triton devices (once a process).
    False where the installed TRL has no such switch (another version: its head is used as it is)."""
    try:
        import trl.trainer.utils as trl_utils
    except ImportError:
        return False
    chooses_compact = getattr(trl_utils, "_use_triton", None)
    if chooses_compact is None:
        logger.info("fused head: this TRL has no `_use_triton` switch; its head runs as shipped")
        return False
    if getattr(chooses_compact, MARK, False):
        return True

    # `trl.trainer.utils._use_triton` decides only whether the head projects the labelled positions alone
    # (`compact`); the tile kernels read their own `_use_triton` (trl/kernels/chunked_logprob.py), left as it is
    def compact(device: Any) -> bool:
        return device.type == "cpu" or chooses_compact(device)

    setattr(compact, MARK, True)
    compact.shipped = chooses_compact  # TRL's own choice, for the comparison in tests/grpo/test_fused_head.py
    trl_utils._use_triton = compact
    return True
