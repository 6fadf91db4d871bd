"""What the plan reads of a config beyond its keys: TRL's GRPOConfig defaults for the `grpo:` settings a config
leaves out, and the policy's precision as grpo/train.py sets it up on a GPU (its weights' dtype, what it computes in,
gradient checkpointing)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from coreward.grpo.config import TrainConfig


@dataclass
class Precision:
    weights: str  # the policy's weights' dtype
    compute: str  # what it computes in
    checkpointing: bool


def grpo_setting(config: TrainConfig, key: str, default: Any) -> Any:
    """`grpo.<key>` as the run gets it: the config's, else GRPOConfig's default, else `default`."""
    from trl import GRPOConfig

    if key in config.grpo:
        return config.grpo[key]
    fields = GRPOConfig.__dataclass_fields__
    return fields[key].default if key in fields else default


def precision(config: TrainConfig, on_gpu: bool) -> Precision:
    from coreward.grpo.compat import NAMES
    from coreward.grpo.config import weights_dtype
    from coreward.runtime.precision import mixed_precision_flags

    # the run's rule without a launcher's setting, for a GPU with bf16 (any the papers ran on) whatever this one has
    flags = mixed_precision_flags(config.model.dtype, None, bf16_device=on_gpu)
    flags.update({k: config.grpo[k] for k in ("bf16", "fp16") if k in config.grpo})
    weights = weights_dtype(config.model, config.lora.enabled)
    weights = "float32" if weights == "auto" else weights
    compute = "bfloat16" if flags.get("bf16") else "float16" if flags.get("fp16") else weights
    checkpointing = on_gpu
    for name in NAMES:
        if name in config.grpo:
            checkpointing = bool(config.grpo[name])
    return Precision(weights, compute, checkpointing)
