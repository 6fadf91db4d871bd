"""Which training engine a launch asked for, and making the trainer follow it.

* Mixed precision: `accelerate launch` passes its config's `mixed_precision` as ACCELERATE_MIXED_PRECISION;
  the trainer's bf16/fp16 flags must agree with it, or DeepSpeed refuses the run
  (`ds bf16.enabled=True vs hf bf16|bf16_full_eval=False`). `launcher_precision` reads it.
* FSDP on CPU: accelerate 1.15 switches to FSDP only for GPU device types; a CPU launch with an FSDP config
  silently trains plain DDP. `promote_fsdp_on_cpu` makes such a run really shard (FSDP2 runs on gloo).
"""

from __future__ import annotations

import os

PRECISION_ENV = "ACCELERATE_MIXED_PRECISION"


def launcher_precision() -> str | None:
    """"no", "bf16", "fp16" (or "fp8") when `accelerate launch` set one; None outside it."""
    value = os.environ.get(PRECISION_ENV)
    return value.lower() if value else None


def fsdp_requested() -> bool:
    return os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"


def promote_fsdp_on_cpu(accelerator) -> bool:
    """Turn a multi-process CPU run launched with an FSDP config into an FSDP run; True when it did.

    accelerate built the FSDP plugin from the launcher's environment and dropped it because the device is
    a CPU (`AcceleratorState.__init__` lists only GPU-like types). Its state is shared, so setting the type
    and plugin here is what `Accelerator.prepare` reads (FSDP2's `fully_shard` works on gloo). The type is
    set in `PartialState` too: every later `AcceleratorState()` copies PartialState's attributes over its own.
    """
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

    state = accelerator.state
    if not fsdp_requested() or state.distributed_type != DistributedType.MULTI_CPU:
        return False
    plugin = FullyShardedDataParallelPlugin()  # reads the FSDP_* variables the launcher set
    if state.mixed_precision != "no":
        plugin.set_mixed_precision(state.mixed_precision)
    state.distributed_type = PartialState().distributed_type = DistributedType.FSDP
    state.fsdp_plugin = plugin
    return True
