"""The engine's settings that lower a plan, each with what it costs (the reward sources declare their own,
rewards/memory.py): vLLM's sleep mode and a share for it that holds one generation batch, the policy's gradient
checkpointing, AdamW stepping 16-bit weights without float32 masters, the same global batch in smaller
micro-batches. advice.py searches their combinations."""

from __future__ import annotations

import math

from coreward.grpo.config import TrainConfig
from coreward.grpo.plan.generation import VLLM_RESERVATION, vllm_minimum_bytes
from coreward.grpo.plan.lengths import step_lengths
from coreward.grpo.plan.result import Plan
from coreward.grpo.plan.settings import grpo_setting, precision
from coreward.rewards.memory import Lever, copy_cost, model_shape, recompute_cost
from coreward.runtime.precision import is_low_precision


def engine_levers(config: TrainConfig, plan: Plan, prompt_tokens: int | None = None) -> list[Lever]:
    levers: list[Lever] = []
    policy_precision = precision(config, plan.hardware.on_gpu)
    if any(item.name == VLLM_RESERVATION for item in plan.items):
        if not grpo_setting(config, "vllm_enable_sleep_mode", False):
            reserved = next(item.bytes for item in plan.items if item.name == VLLM_RESERVATION)
            levers.append(Lever.setting("grpo.vllm_enable_sleep_mode=true",
                                        "vLLM releases its memory outside generation and wakes each step: "
                                        + copy_cost(reserved, "its share")))
        # a share sized to the policy's weights and the KV cache of one generation batch, a quarter of it, or 4
        # sequences at once (mildest first: fewer sequences at once generate the batch in more rounds); smaller than
        # the config's it frees memory, larger it lets vLLM start at all (a share that cannot hold one sequence
        # does not)
        policy = model_shape(config.model.name_or_path, "policy", "model.name_or_path")
        lengths = step_lengths(config, policy, prompt_tokens)
        current = float(grpo_setting(config, "vllm_gpu_memory_utilization", 0.3))
        shares = []
        for rows in (lengths.generation_rows, lengths.generation_rows // 4, 4):
            needed = vllm_minimum_bytes(policy, policy_precision, lengths.seq_len, max(1, rows))
            share = math.ceil(needed / plan.device_bytes * 20) / 20
            if share != current and share <= 0.9 and share not in shares:
                shares.append(share)
        if shares:
            levers.append(Lever(tuple((f"grpo.vllm_gpu_memory_utilization={share:g}",) for share in shares),
                                "vLLM's share sized to the policy's weights and the KV cache of the sequences it "
                                "generates at once (fewer at once: more rounds per generation)"))
    if not policy_precision.checkpointing:
        levers.append(Lever.setting("grpo.gradient_checkpointing=true", recompute_cost("policy update")))
    if is_low_precision(config.model.dtype) and config.model.master_weights == "float32" and not config.lora.enabled:
        levers.append(Lever.setting("model.master_weights=none",
                                    f"AdamW steps the {config.model.dtype} weights themselves: updates below half a "
                                    "16-bit step round away (runtime/precision.py)"))
    rows = int(grpo_setting(config, "per_device_train_batch_size", 8))
    accumulation = int(grpo_setting(config, "gradient_accumulation_steps", 1))
    smaller = tuple((f"grpo.per_device_train_batch_size={rows // k}", f"grpo.gradient_accumulation_steps={accumulation * k}")
                    for k in (2, 4) if rows // k >= 1 and rows % k == 0)
    if smaller:
        levers.append(Lever(smaller, f"the same global batch in 2x or 4x as many micro-batches of fewer than {rows} "
                                     "sequences (the same tokens, less parallel work each)"))
    return levers
