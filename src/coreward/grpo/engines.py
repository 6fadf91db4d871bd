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
    policy, its reference, and the models reward sources train themselves (`RewardSource.engine_models`, sharded by
    the same engine: rm/sharding.py; under ZeRO-2 their tensors are whole and their optimizer state split)."""
    parts = []
    for name, model in models.items():
        if model is not None:
            partial, total = partitioned_count(model)
            parts.append(f"{name} {partial}/{total} tensors partitioned")
    return f"engine: {engine_name(accelerator)} on {accelerator.num_processes} process(es); " + ", ".join(parts)


def precision_report(trainer, master_weights: str) -> list[str]:
    """The run log's precision line (tests read it) and, for pure low-precision weights, the rounding warning.

    `precision: policy weights W, updated in U, compute C (engine)`: W is the dtype of the parameters as the
    engine holds them, U the dtype AdamW's update is applied in (DeepSpeed's float32 master partitions, FSDP2's
    upcast shards), C the autocast dtype (or the weights' own dtype without mixed precision)."""
    import torch

    from coreward.runtime.precision import is_low_precision, round_away_warning

    model = trainer.accelerator.unwrap_model(trainer.model_wrapped)
    trained = [p for p in model.parameters() if p.requires_grad] or list(model.parameters())
    weights = updated = trained[0].dtype  # before `train` prepares the model: as loaded
    engine = engine_name(trainer.accelerator)
    if trainer.compute_dtype is not None and trainer.is_deepspeed_enabled:  # DeepSpeed casts, keeps fp32 masters
        weights, updated = trainer.compute_dtype, torch.float32
    elif trainer.compute_dtype is not None and trainer.is_fsdp_enabled:  # accelerate upcasts trained parameters
        weights = updated = torch.float32
    compute = trainer.compute_dtype or weights
    name = lambda dtype: str(dtype).removeprefix("torch.")  # noqa: E731
    lines = [f"precision: policy weights {name(weights)}, updated in {name(updated)}, compute {name(compute)} "
             f"({engine})"]
    if master_weights == "none" and not is_low_precision(updated) and is_low_precision(trained[0].dtype):
        lines.append(f"note: model.master_weights: none has no effect under {engine}: it keeps float32 weights "
                     "(FSDP2 upcasts trained parameters, DeepSpeed keeps float32 master partitions)")
    if is_low_precision(updated):
        warning = round_away_warning("the policy", "model.master_weights", trained, trainer.args.learning_rate, updated)
        if warning:
            lines.append(warning)
    return lines
