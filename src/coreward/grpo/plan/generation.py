"""Generation: vLLM colocated on the training GPU (its reservation, grpo.vllm_gpu_memory_utilization of the device,
held through the step or, in sleep mode, through generation only), vLLM on the CPU, vLLM as a server elsewhere
(nothing here), or transformers' generate (its key/value cache and the sampling logits)."""

from __future__ import annotations

import os

from coreward.grpo.config import TrainConfig
from coreward.grpo.plan.hardware import Hardware
from coreward.grpo.plan.lengths import Lengths
from coreward.grpo.plan.settings import Precision, grpo_setting
from coreward.rewards.memory import ALL, GENERATION, MemoryItem
from coreward.runtime.memory import DTYPE_BYTES, ModelShape, format_bytes, kv_cache_bytes, parameter_count, parse_bytes


VLLM_RESERVATION = "vLLM reservation (colocated)"  # the item's name (the advice looks for it)
# what a colocated vLLM engine keeps on its GPU while asleep (its CUDA graphs, context and allocator): 774 MiB at
# tensor parallel 1, 2.4-7.4 GiB at 2 (https://github.com/NVIDIA-NeMo/RL/issues/223, Llama-3.2-1B)
VLLM_ASLEEP_BYTES = 774 * 1024**2


def colocated_vllm(config: TrainConfig) -> bool:
    return bool(grpo_setting(config, "use_vllm", False)) and str(grpo_setting(config, "vllm_mode", "server")) == "colocate"


def generation_items(config: TrainConfig, policy: ModelShape, precision: Precision, hardware: Hardware,
                     lengths: Lengths, notes: list[str]) -> list[MemoryItem]:
    count = parameter_count(policy, "lm")
    if colocated_vllm(config):
        utilization = float(grpo_setting(config, "vllm_gpu_memory_utilization", 0.3))
        sleeps = bool(grpo_setting(config, "vllm_enable_sleep_mode", False))
        if hardware.on_gpu:
            items = [MemoryItem(VLLM_RESERVATION, int(utilization * hardware.device_bytes),
                                (GENERATION,) if sleeps else ALL,
                                f"vllm_gpu_memory_utilization {utilization} x the device (its weights and KV cache)"
                                + ("; released outside generation (sleep mode)" if sleeps else ""))]
            if sleeps:
                items.append(MemoryItem("vLLM residue while asleep", VLLM_ASLEEP_BYTES,
                                        tuple(p for p in ALL if p != GENERATION),
                                        "what sleep mode leaves on the GPU (NVIDIA-NeMo/RL#223: 774 MiB at TP 1)"))
            return items
        space = parse_bytes(os.environ.get("VLLM_CPU_KVCACHE_SPACE", "4") + "GiB")
        return [MemoryItem("vLLM on the CPU (weights + KV cache)", count * DTYPE_BYTES[precision.compute] + space, ALL,
                           "VLLM_CPU_KVCACHE_SPACE (default 4 GiB) plus its copy of the weights")]
    if grpo_setting(config, "use_vllm", False):
        notes.append("vLLM runs as a server on other GPUs: nothing of it on the training devices")
        return []
    rows, seq = lengths.generation_rows, lengths.seq_len
    sampler = sampling_copy_dtype(config, policy, precision, hardware)
    cache_dtype = sampler or precision.compute
    items = [MemoryItem("generation KV cache (transformers)", kv_cache_bytes(policy, rows, seq, cache_dtype)
                        + rows * policy.vocab_size * 4 * 2, (GENERATION,),
                        f"{rows} sequences x {seq} tokens, plus the sampling logits", gpu_measured=True)]
    if sampler is not None:
        items.append(MemoryItem(SAMPLING_COPY, count * DTYPE_BYTES[sampler], ALL,
                                f"{sampler} weights, LoRA merged; sampling.engine: policy drops it (slower rollouts)"))
    return items


SAMPLING_COPY = "sampling copy of the policy"  # the item's name (tests look for it)


def sampling_copy_dtype(config: TrainConfig, policy: ModelShape, precision: Precision, hardware: Hardware) -> str | None:
    """The dtype of the sampling copy rollouts use (runtime/sampling.py), as the trainer decides it; None without one."""
    import torch

    from coreward.runtime.sampling import plan_sampling

    plan = plan_sampling(config.sampling.engine, config.sampling.dtype, on_gpu=hardware.on_gpu, use_vllm=False,
                         sharded=hardware.effective_engine in ("zero3", "fsdp2"), lora=config.lora.enabled,
                         parameters=parameter_count(policy, "lm"), weights_dtype=getattr(torch, precision.weights))
    return str(plan.dtype).removeprefix("torch.") if plan.use_copy else None


def vllm_share_problem(config: TrainConfig, policy: ModelShape, precision: Precision, hardware: Hardware,
                       lengths: Lengths) -> str | None:
    """Why a colocated vLLM cannot start in its share of the GPU, or None: vLLM loads the policy's weights (in the
    compute dtype) into its share and refuses to start unless the rest holds the KV cache of one sequence at the
    run's longest (its max_model_len); its activation profile and CUDA graphs come on top (unplanned)."""
    if not (colocated_vllm(config) and hardware.on_gpu):
        return None
    utilization = float(grpo_setting(config, "vllm_gpu_memory_utilization", 0.3))
    share = int(utilization * hardware.device_bytes)
    needed = vllm_minimum_bytes(policy, precision, lengths.seq_len, rows=1)
    if share >= needed:
        return None
    return (f"vLLM's share (grpo.vllm_gpu_memory_utilization {utilization} x {format_bytes(hardware.device_bytes)} = "
            f"{format_bytes(share)}) cannot hold the policy's weights and one {lengths.seq_len}-token sequence's KV "
            f"cache ({format_bytes(needed)})")


def vllm_minimum_bytes(policy: ModelShape, precision: Precision, seq_len: int, rows: int) -> int:
    """The policy's weights in vLLM (the compute dtype) and the KV cache of `rows` sequences of `seq_len` tokens."""
    weights = parameter_count(policy, "lm") * DTYPE_BYTES[precision.compute]
    return weights + kv_cache_bytes(policy, rows, seq_len, precision.compute)
