"""The policy's model states, and the engine's copies of the policy: its weights, float32 masters, AdamW moments and
gradients (divided as the engine divides them: sharding.py), LoRA's adapters over a frozen base, TRL's KL
reference (grpo.beta > 0) and the kl_from_init copy of the initial policy. A reward source's own copies (an EMA
teacher) are the source's to declare (rewards/memory.py)."""

from __future__ import annotations

from typing import Any

from coreward.grpo.config import TrainConfig
from coreward.grpo.plan.settings import Precision, grpo_setting
from coreward.grpo.plan.sharding import SHARDED, ZERO_SUB_GROUP_SIZE, Sharding
from coreward.rewards.memory import ALL, POLICY_UPDATE, MemoryItem, parameters_text
from coreward.runtime.memory import DTYPE_BYTES, ModelShape, parameter_count


def policy_state_items(config: TrainConfig, policy: ModelShape, precision: Precision, shard: Sharding) -> list[MemoryItem]:
    count = parameter_count(policy, "lm")
    w_bytes, c_bytes = DTYPE_BYTES[precision.weights], DTYPE_BYTES[precision.compute]
    n, engine = shard.n, shard.engine
    one_process = engine == "one"  # the terms a GPU's one-process runs checked (docs/how-to/memory-plan.md, the GPU check)
    if config.lora.enabled:
        weights = count * w_bytes // (n if engine in ("zero3", "fsdp2") else 1)  # FSDP2 shards the frozen base too
        trained = lora_parameter_count(policy, config.lora.r, config.lora.target_modules)
        return [MemoryItem("policy weights (frozen base, LoRA)", weights, ALL,
                           f"{parameters_text(count)} in {precision.weights}"),
                MemoryItem("policy LoRA adapters + AdamW", trained * 16, ALL,
                           f"{parameters_text(trained)} float32 x (1 + 2 moments + grad)")]
    weights, how = shard.weights(count, w_bytes, c_bytes)
    items = [MemoryItem("policy weights", weights, ALL, f"{parameters_text(count)}, {how}", gpu_measured=one_process)]
    masters = shard.masters(count, w_bytes, c_bytes)
    if masters:
        items.append(MemoryItem("policy float32 master weights", masters, ALL, f"DeepSpeed's, 1/{n}"))
    state_bytes = 4 if engine in SHARDED else w_bytes
    items.append(MemoryItem("policy AdamW moments", shard.optimizer(count, state_bytes), ALL,
                            f"2 x {state_bytes} bytes per parameter" + (f", 1/{n}" if shard.optimizer(1, 1) < 2 else ""),
                            gpu_measured=one_process))
    items.append(MemoryItem("policy gradients", shard.grads(count, w_bytes, c_bytes), (POLICY_UPDATE,),
                            "set to None after each optimizer step", gpu_measured=one_process))
    if engine in ("zero2", "zero3"):
        items.append(deepspeed_step_gradients(count, n, engine))
    return items


def deepspeed_step_gradients(count: int, n: int, engine: str) -> MemoryItem:
    """DeepSpeed's float32 copy of the gradient partition its optimizer steps: ZeRO-2 upcasts the process's whole
    partition (stage_1_and_2.py, `single_grad_partition`), ZeRO-3 one sub-group at a time
    (stage3.py `_prepare_fp32_grad_for_sub_group`, sub_group_size 1e9 elements by default)."""
    partition = count // n
    elements = partition if engine == "zero2" else min(partition, ZERO_SUB_GROUP_SIZE)
    return MemoryItem("DeepSpeed float32 gradients for the optimizer step", 4 * elements, (POLICY_UPDATE,),
                      f"4 bytes x {'the partition' if engine == 'zero2' else 'a sub-group'} ({elements:,} elements)")


def policy_copy_items(config: TrainConfig, policy: ModelShape, precision: Precision, shard: Sharding,
                      reference_is: str, notes: list[str]) -> list[MemoryItem]:
    """TRL's KL reference and the kl_from_init copy. `reference_is`: what a reward source that moves the reference
    made of it (its note; empty: none does), where kl_from_init can't reuse it."""
    count = parameter_count(policy, "lm")
    w_bytes, c_bytes = DTYPE_BYTES[precision.weights], DTYPE_BYTES[precision.compute]
    beta = float(grpo_setting(config, "beta", 0.0))
    items = []
    if beta > 0 and not config.lora.enabled:
        items.append(MemoryItem("KL reference (TRL, beta > 0)", shard.frozen(count, w_bytes, c_bytes), ALL,
                                reference_is or "built like the policy", gpu_measured=shard.engine == "one"))
    elif beta > 0:
        notes.append("with LoRA, TRL's reference is the policy with its adapters off: no copy")
    if config.kl_from_init and not config.lora.enabled:
        if beta > 0 and not reference_is and not grpo_setting(config, "sync_ref_model", False):
            notes.append("kl_from_init reuses TRL's reference (beta > 0): no copy")
        else:
            items.append(MemoryItem("kl_from_init copy of the initial policy", shard.frozen(count, w_bytes, c_bytes),
                                    ALL, "set kl_from_init: false to drop it"))
    return items


def adapted_linears(shape: ModelShape, target_modules: Any) -> list[tuple[int, int]]:
    """(in, out) widths of each linear map of a layer that LoRA adapts (all-linear: the 7 of a Llama/Qwen layer)."""
    h, q, kv, inter = shape.hidden_size, shape.q_width, shape.kv_width, shape.intermediate_size
    linears = {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h), "gate_proj": (h, inter),
               "up_proj": (h, inter), "down_proj": (inter, h)}
    names = list(linears) if target_modules in ("all-linear", None) else [t for t in target_modules if t in linears]
    return [linears[name] for name in names]


def lora_parameter_count(shape: ModelShape, r: int, target_modules: Any) -> int:
    """LoRA's trained parameters: r × (in + out) per adapted linear map of each layer."""
    return shape.num_hidden_layers * sum(r * (i + o) for i, o in adapted_linears(shape, target_modules))
