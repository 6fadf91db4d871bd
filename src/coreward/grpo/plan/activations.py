"""The policy's update: one micro-batch's kept activations (runtime/memory.py's model of a decoder layer), what
PEFT's LoRA dropout keeps beside them, the fused log-probability head's tiles and float32 gradients (TRL 1.16), and
a tied embedding's dense gradient. Held in the policy-update phase only."""

from __future__ import annotations

from typing import Any

from coreward.grpo.config import TrainConfig
from coreward.grpo.plan.lengths import Lengths
from coreward.grpo.plan.model_states import adapted_linears
from coreward.grpo.plan.settings import Precision
from coreward.grpo.plan.sharding import SHARDED
from coreward.rewards.memory import POLICY_UPDATE, MemoryItem
from coreward.runtime.memory import (
    DTYPE_BYTES,
    ModelShape,
    activation_bytes,
    activation_gradient_bytes,
    lm_head_tile_bytes,
)


def policy_update_items(config: TrainConfig, policy: ModelShape, precision: Precision, engine: str, lengths: Lengths,
                        on_gpu: bool) -> list[MemoryItem]:
    rows, seq = lengths.rows, lengths.seq_len
    w_bytes = DTYPE_BYTES[precision.weights]
    attn = config.model.attn_implementation or "sdpa"
    # DeepSpeed runs the forward on its bf16 weights, FSDP2 on bf16 gathered layers (its mixed-precision policy): a
    # bf16 residual stream; one process and DDP autocast over the float32 weights (a float32 residual stream)
    runs_in = precision.compute if engine in SHARDED else precision.weights
    # glibc's heap keeps a LoRA policy's freed activations on a CPU (grpo/plan/step.py, heap_kept): one hidden state
    layer_block = rows * seq * policy.hidden_size * DTYPE_BYTES[runs_in] if config.lora.enabled else 0
    items = [MemoryItem("policy update activations", activation_bytes(
        policy, rows, seq, dtype=precision.compute, weights_dtype=runs_in, attn_implementation=attn,
        gradient_checkpointing=precision.checkpointing, head="lm"), (POLICY_UPDATE,),
        f"{rows} sequences x {seq} tokens, {precision.compute}, {attn}, gradient checkpointing "
        f"{'on' if precision.checkpointing else 'off'}", gpu_measured=engine == "one" and "flash" not in attn,
        heap_block=layer_block)]
    items.append(MemoryItem("backward's activation gradients (one layer, transient)", activation_gradient_bytes(
        policy, rows * seq, DTYPE_BYTES[precision.compute], DTYPE_BYTES[runs_in]), (POLICY_UPDATE,),
        "the gradients of one layer's MLP intermediates and hidden states while backward runs through it"))
    if config.lora.enabled and config.lora.dropout > 0:
        items.append(MemoryItem("policy LoRA dropout copies", lora_dropout_bytes(
            policy, rows * seq, config.lora.target_modules, DTYPE_BYTES[runs_in], precision.checkpointing),
            (POLICY_UPDATE,), f"each adapted layer keeps its input's dropped-out copy and mask for backward "
            f"(dropout {config.lora.dropout:g})", heap_block=layer_block))
    # under LoRA the head is frozen (PEFT trains the adapters only): TRL's fused head then makes no float32 gradient
    # of its weight (chunked_logprob.py allocates it only `if needs_weight_grad`), just its input's
    items.append(MemoryItem("policy log-prob head tiles (backward)", lm_head_tile_bytes(
        policy, rows * seq, dtype=precision.compute, on_gpu=on_gpu, backward=True, weights_dtype=precision.weights,
        head_trained=not config.lora.enabled), (POLICY_UPDATE,),
        "TRL's fused head: 4,096-token x 32,768-vocabulary tiles"
        + (", the input's float32 gradient (frozen head: none of its weight)" if config.lora.enabled
           else ", float32 head gradient"), gpu_measured=not config.lora.enabled))
    if policy.tie_word_embeddings and not config.lora.enabled:
        grad_bytes = 4 if engine in SHARDED else w_bytes
        items.append(MemoryItem("tied embedding's input-side gradient (transient)", policy.vocab_size
                                * policy.hidden_size * grad_bytes, (POLICY_UPDATE,),
                                "a dense vocab x hidden gradient, added into the head's", gpu_measured=engine == "one"))
    return items


def lora_dropout_bytes(shape: ModelShape, tokens: int, target_modules: Any, dtype_bytes: int,
                       checkpointing: bool) -> int:
    """What PEFT's LoRA dropout adds to backward's saved tensors: each adapted map applies its own dropout to its
    input, and keeps the dropped-out copy (for lora_A's weight gradient) and the mask (a byte a value); without
    dropout lora_A reads the layer's input, already kept. On a small model with all-linear adapters this can hold more
    than the full model's update (studies/2026-11-28-real-model-limits/). With gradient checkpointing one layer's worth at a time."""
    widths = sum(i for i, _ in adapted_linears(shape, target_modules))
    layers = 1 if checkpointing else shape.num_hidden_layers
    return tokens * layers * widths * (dtype_bytes + 1)
