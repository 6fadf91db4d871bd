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


def engine_name(accelerator) -> str:
    """"DeepSpeed ZeRO-N", "FSDP2" / "FSDP1", "DDP" (several processes) or "single process"."""
    from accelerate.utils import DistributedType

    kind = accelerator.state.distributed_type
    if kind == DistributedType.DEEPSPEED:
        return f"DeepSpeed ZeRO-{accelerator.state.deepspeed_plugin.zero_stage}"
    if kind == DistributedType.FSDP:
        return f"FSDP{accelerator.state.fsdp_plugin.fsdp_version}"
    return "DDP" if accelerator.num_processes > 1 else "single process"


def partitioned_count(module) -> tuple[int, int]:
    """(tensors this process holds only part of, all tensors) of a module: a ZeRO-3 parameter keeps
    `ds_numel` elements of which it holds none outside a gather; an FSDP2 parameter is a DTensor shard."""
    total = partial = 0
    for param in module.parameters():
        total += 1
        if hasattr(param, "device_mesh"):  # DTensor
            partial += param.to_local().numel() < param.numel()
        elif hasattr(param, "ds_numel"):
            partial += param.numel() < param.ds_numel
    return partial, total


def sharding_report(accelerator, models: dict[str, object]) -> str:
    """One line for the run log (tests read it): the engine and how much of each model is partitioned: the
    policy, its reference, and the models reward sources train themselves (Cooper's `rm`, sharded by the same
    engine: rm/sharding.py; under ZeRO-2 its tensors are whole and its optimizer state split)."""
    parts = []
    for name, model in models.items():
        if model is not None:
            partial, total = partitioned_count(model)
            parts.append(f"{name} {partial}/{total} tensors partitioned")
    return f"engine: {engine_name(accelerator)} on {accelerator.num_processes} process(es); " + ", ".join(parts)
