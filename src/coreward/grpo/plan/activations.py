"""The policy's update: one micro-batch's kept activations (runtime/memory.py's model of a decoder layer), what
PEFT's LoRA dropout keeps beside them, the fused log-probability head's tiles and float32 gradients (TRL 1.16), and
a tied embedding's dense gradient. Held in the policy-update phase only."""

from __future__ import annotations

from typing import Any

from coreward.grpo.config import TrainConfig, default_num_generations
from coreward.grpo.plan.lengths import Lengths
from coreward.grpo.plan.model_states import adapted_linears
from coreward.grpo.plan.settings import Precision, grpo_setting
from coreward.grpo.plan.sharding import SHARDED
from coreward.rewards.memory import POLICY_UPDATE, MemoryItem
from coreward.runtime.memory import (
    DTYPE_BYTES,
    ModelShape,
    activation_bytes,
    activation_gradient_bytes,
    kv_cache_bytes,
    lm_head_tile_bytes,
)


def paired_views(config: TrainConfig) -> bool:
    """Whether a configured source rolls each question out beside its rephrasing (`DataNeeds.rephrasings`): paired
    views keep their own balanced cut (grpo/samplers.py), so no prompt is shared."""
    from coreward.rewards import source_class

    return any(source_class(spec.name, key=f"rewards.{i}.name").data_needs(spec.parsed_params(f"rewards.{i}"))
               .rephrasings is not None for i, spec in enumerate(config.rewards))


def shared_prompts_per_micro_batch(config: TrainConfig, engine: str, precision: Precision, lengths: Lengths) -> int:
    """The distinct prompts of the widest micro-batch when the loss's pass runs each once (`micro_batches: by_prompt`
    where grpo/shared_prompts.py's `why_not_shared_by` lets it: rows grouped by prompt), else 0: every row runs its
    own prompt. The model's layer types are not in the plan's shape: planned as full attention."""
    from types import SimpleNamespace

    from coreward.grpo.shared_prompts import why_not_shared_by

    args = SimpleNamespace(loss_type=grpo_setting(config, "loss_type", "dapo"),
                           steps_per_generation=lengths.generation_rows // lengths.rows,
                           gradient_accumulation_steps=int(grpo_setting(config, "gradient_accumulation_steps", 1)),
                           top_entropy_quantile=float(grpo_setting(config, "top_entropy_quantile", 1.0)),
                           activation_checkpointing=precision.checkpointing)
    why_not = why_not_shared_by(args, attention=config.model.attn_implementation, other_layers=[],
                                sharded=engine in SHARDED, paired_views=paired_views(config))
    group = int(grpo_setting(config, "num_generations", None) or default_num_generations())
    if config.micro_batches != "by_prompt" or why_not is not None or group < 2 or lengths.prompt_tokens < 2:
        return 0
    return min(lengths.rows, -(-lengths.rows // group) + (1 if lengths.rows % group else 0))


def policy_update_items(config: TrainConfig, policy: ModelShape, precision: Precision, engine: str, lengths: Lengths,
                        on_gpu: bool) -> list[MemoryItem]:
    rows, seq = lengths.rows, lengths.seq_len
    w_bytes = DTYPE_BYTES[precision.weights]
    attn = config.model.attn_implementation or "sdpa"
    # DeepSpeed runs the forward on its bf16 weights, FSDP2 on bf16 gathered layers (its mixed-precision policy): a
    # bf16 residual stream; one process and DDP autocast over the float32 weights (a float32 residual stream)
    runs_in = precision.compute if engine in SHARDED else precision.weights
    kept = {"dtype": precision.compute, "weights_dtype": runs_in, "attn_implementation": attn,
            "gradient_checkpointing": precision.checkpointing, "head": "lm"}
    prompts = shared_prompts_per_micro_batch(config, engine, precision, lengths)
    if prompts:  # grpo/shared_prompts.py: each distinct prompt but its last token once, then every row's tail
        prefix, tail = lengths.prompt_tokens - 1, seq - lengths.prompt_tokens + 1
        tokens, widest = prompts * prefix + rows * tail, max(prompts * prefix, rows * tail)
        activations = (activation_bytes(policy, prompts, prefix, **kept)
                       + activation_bytes(policy, rows, seq, tokens=rows * tail, **kept)
                       # each row's copy of its prompt's keys and values, which its attention keeps for backward
                       + kv_cache_bytes(policy, rows, prefix, precision.compute))
        shape = (f"{prompts} prompt(s) x {prefix} tokens run once, then {rows} sequences x {tail} tokens on their "
                 f"prompt's cache")
    else:
        tokens = widest = rows * seq
        activations, shape = activation_bytes(policy, rows, seq, **kept), f"{rows} sequences x {seq} tokens"
    # glibc's heap keeps a LoRA policy's freed activations on a CPU (grpo/plan/step.py, heap_kept): one hidden state
    # of the pass's widest forward (a shared prompt's pass: its prompts' or its rows' tails)
    layer_block = widest * policy.hidden_size * DTYPE_BYTES[runs_in] if config.lora.enabled else 0
    items = [MemoryItem("policy update activations", activations, (POLICY_UPDATE,),
        f"{shape}, {precision.compute}, {attn}, gradient checkpointing "
        f"{'on' if precision.checkpointing else 'off'}", gpu_measured=engine == "one" and "flash" not in attn,
        heap_block=layer_block)]
    items.append(MemoryItem("backward's activation gradients (one layer, transient)", activation_gradient_bytes(
        policy, tokens, DTYPE_BYTES[precision.compute], DTYPE_BYTES[runs_in]), (POLICY_UPDATE,),
        "the gradients of one layer's MLP intermediates and hidden states while backward runs through it"))
    if config.lora.enabled and config.lora.dropout > 0:
        items.append(MemoryItem("policy LoRA dropout copies", lora_dropout_bytes(
            policy, tokens, config.lora.target_modules, DTYPE_BYTES[runs_in], precision.checkpointing),
            (POLICY_UPDATE,), f"each adapted layer keeps its input's dropped-out copy and mask for backward "
            f"(dropout {config.lora.dropout:g})", heap_block=layer_block))
    # under LoRA the head is frozen (PEFT trains the adapters only): TRL's fused head then makes no float32 gradient
    # of its weight (chunked_logprob.py allocates it only `if needs_weight_grad`), just its input's. It projects the
    # completion positions only (with Triton, and on a CPU: grpo/fused_head.py)
    scored = rows * min(lengths.completion_tokens or seq, seq)
    items.append(MemoryItem("policy log-prob head tiles (backward)", lm_head_tile_bytes(
        policy, scored, dtype=precision.compute, on_gpu=on_gpu, backward=True, weights_dtype=precision.weights,
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
