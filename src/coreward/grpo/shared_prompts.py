"""The update's log-probability pass with each prompt computed once for all its completions.

GRPO samples `num_generations` completions of every prompt, and TRL's loss pass runs every row's prompt through the
policy again: with a chat template and short answers most of the update's tokens are the same prompt, G times. With
the rows of one prompt in one micro-batch (`prompt_grouped`), `shared_prompt_pass` runs each distinct prompt once
(every token but its last) keeping its keys and values, gives each row its prompt's (an index, whose backward sums
the rows' gradients into the prompt's), then runs each row's last prompt token and completion on top. Positions and
attention masks are TRL's, so each token's log-probability and the step's gradient are those of TRL's pass, to float
rounding. With LoRA dropout one mask is drawn for a prompt where TRL draws one for each row's copy: each row's term
has the same distribution, so the expected gradient is unchanged (not its variance).

Where it does not apply (`why_not_shared`) TRL's pass runs: DeepSpeed and FSDP (their engines wrap the forward;
ZeRO-3 and FSDP gather a layer per call), activation checkpointing (transformers turns the cache off under it),
attention kernels other than sdpa and eager, sliding-window or recurrent layers, paired views; and for every no-grad
pass (the trainer shares prompts in the loss's pass only).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Callable

import torch

from coreward.grpo.micro_batches import groups_exactly
from coreward.grpo.samplers import permute_rows
from coreward.runtime.generation import distinct_prompts, other_layer_types


ATTENTION = ("sdpa", "eager")  # kernels whose masks with a cache of left-padded rows are tested here


def why_not_shared(args: Any, policy: Any, *, sharded: bool, paired_views: bool) -> str | None:
    """None where the loss's pass can share prompts with the step's gradient unchanged; else why not."""
    config = getattr(policy, "config", None)
    return why_not_shared_by(args, attention=getattr(config, "_attn_implementation", None),
                             other_layers=other_layer_types(config), sharded=sharded, paired_views=paired_views)


def why_not_shared_by(args: Any, *, attention: str | None, other_layers: list[str], sharded: bool,
                      paired_views: bool) -> str | None:
    """`why_not_shared` from the settings alone (`args`: TRL's names; `other_layers`: the model's layer types other
    than full attention): what the memory plan asks before any model is loaded."""
    why_not = groups_exactly(args, paired_views)  # rows grouped by prompt: the same conditions as by length
    if why_not is not None:
        return why_not
    if sharded:
        return "DeepSpeed and FSDP wrap the forward (ZeRO-3 and FSDP gather a layer per call): one pass a micro-batch"
    if getattr(args, "activation_checkpointing", False) or getattr(args, "gradient_checkpointing", False):
        return "activation checkpointing turns transformers' key/value cache off"
    attention = attention or "sdpa"
    if attention not in ATTENTION:
        return f"attention {attention}: the shared pass is tested with {', '.join(ATTENTION)}"
    if other_layers:
        return f"layer types {sorted({*other_layers, 'full_attention'})}: the shared pass keeps full attention's " \
               "keys and values"
    return None


def prompt_grouped(batch: dict[str, Any]) -> dict[str, Any]:
    """A generation batch's rows ordered by prompt, then by completion length within a prompt (stable: equal rows
    keep TRL's shuffled order), so TRL's cut into micro-batches puts a prompt's completions together."""
    prompt_ids, prompt_mask, completion_mask = (batch.get(k) for k in ("prompt_ids", "prompt_mask", "completion_mask"))
    if not all(isinstance(t, torch.Tensor) and t.ndim == 2 for t in (prompt_ids, prompt_mask, completion_mask)):
        return batch
    _, group = distinct_prompts(prompt_ids.cpu(), prompt_mask.cpu())
    length = completion_mask.sum(dim=1).cpu()
    order = torch.sort(group * (completion_mask.shape[1] + 1) + length, stable=True).indices
    return permute_rows(batch, order)


# what one more pass over a chunk of rows costs beyond its tokens (its layers' many small operations), in tokens:
# a chunk of rows of similar length is cut off where the padding it saves is worth more
PASS_OVERHEAD_TOKENS = 32


def length_chunks(lengths: list[int], overhead: int = PASS_OVERHEAD_TOKENS) -> list[list[int]]:
    """The rows (by index) cut into chunks of similar length, shortest first, minimising the tokens the passes run
    (each chunk padded to its longest row) plus `overhead` a pass: the exact partition of the sorted rows."""
    order = sorted(range(len(lengths)), key=lambda row: lengths[row])
    cost = [0.0] + [float("inf")] * len(order)  # cost[j]: the best cut of the j shortest rows
    cut = [0] * (len(order) + 1)
    for end in range(1, len(order) + 1):
        for start in range(end):
            total = cost[start] + (end - start) * lengths[order[end - 1]] + overhead
            if total < cost[end]:
                cost[end], cut[end] = total, start
    chunks, end = [], len(order)
    while end:
        chunks.append(order[cut[end]:end])
        end = cut[end]
    return chunks[::-1]


def shared_prompt_pass(model: torch.nn.Module, causal_lm: torch.nn.Module, input_ids: torch.Tensor,
                       attention_mask: torch.Tensor, logits_to_keep: int, compute_entropy: bool,
                       autocast: Callable[[], AbstractContextManager], tokens: list[int] | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """Per-token log-probabilities (and entropies) of the last `logits_to_keep` tokens of each row, as TRL's
    `_get_per_token_logps_and_entropies` returns them, with each distinct prompt run once; None where no two rows
    share a prompt or a prompt has a single token (TRL's pass then runs).

    `model` is what TRL calls (DDP or accelerate's wrapper over the policy, with TRL's fused head patched onto the
    causal LM); `causal_lm` the unwrapped causal LM, whose backbone runs the prompts: its parameters are the same, so
    one backward reaches them through both passes. A row's tokens are [prompt (left-padded) | completion]. The rows'
    completions then run in chunks of similar length (`length_chunks`), each cut to its longest completion. `tokens`,
    when given, gets the tokens the passes ran appended."""
    from transformers import DynamicCache

    completion_ids = input_ids[:, -logits_to_keep:]
    prompt_ids, prompt_mask = input_ids[:, :-logits_to_keep], attention_mask[:, :-logits_to_keep]
    if prompt_ids.shape[1] < 2 or not bool(prompt_mask[:, -1].all()):
        return None  # a one-token prompt leaves no prefix; a row whose last prompt column is padding is not TRL's
    distinct, index = distinct_prompts(prompt_ids, prompt_mask)
    if distinct.shape[0] == input_ids.shape[0]:
        return None
    width = prompt_ids.shape[1]
    prefix_ids, prefix_mask = distinct[:, :width - 1], distinct[:, width:2 * width - 1]
    with autocast():
        # every prompt token but the last, once a prompt; its keys and values then indexed out to each row
        prefix = causal_lm.base_model(input_ids=prefix_ids, attention_mask=prefix_mask, use_cache=True)
    ran = prefix_ids.numel()
    layers = [(layer.keys, layer.values) for layer in prefix.past_key_values.layers]
    completion_mask = attention_mask[:, -logits_to_keep:]
    lengths = completion_mask.sum(dim=1).tolist()
    logps = torch.zeros(completion_ids.shape, dtype=torch.float32, device=input_ids.device)
    entropies = torch.zeros_like(logps) if compute_entropy else None
    for chunk in length_chunks([int(n) for n in lengths], PASS_OVERHEAD_TOKENS):
        rows = torch.tensor(chunk, device=input_ids.device)
        width_c = max(1, max(int(lengths[r]) for r in chunk))  # completions are right-padded
        cache = DynamicCache(ddp_cache_data=[(k[index[rows]], v[index[rows]]) for k, v in layers],
                             config=causal_lm.config)
        # the rows' last prompt token scores their first completion token, each completion token the next one
        ids = completion_ids[rows, :width_c]
        tail_ids = torch.cat([prompt_ids[rows, -1:], ids], dim=1)
        labels = ids.masked_fill(completion_mask[rows, :width_c] == 0, -100)
        shift_labels = torch.cat([labels, torch.full_like(labels[:, :1], -100)], dim=1)
        mask = torch.cat([prompt_mask[rows], completion_mask[rows, :width_c]], dim=1)
        with autocast():
            out = model(input_ids=tail_ids, attention_mask=mask, past_key_values=cache, shift_labels=shift_labels,
                        fused_lm_head=True)
        ran += tail_ids.numel()
        # scattered back into the rows' places (index_put keeps the graph to each chunk's pass)
        logps = logps.index_put((rows,), torch.nn.functional.pad(out.log_probs[:, :width_c].float(),
                                                                 (0, logits_to_keep - width_c)))
        if compute_entropy:
            entropies = entropies.index_put((rows,), torch.nn.functional.pad(out.entropy[:, :width_c].float(),
                                                                             (0, logits_to_keep - width_c)))
    if tokens is not None:
        tokens.append(ran)
    return logps, entropies


def shared_prompt_logps(model: torch.nn.Module, causal_lm: torch.nn.Module, trls_pass: Callable[..., tuple],
                        autocast: Callable[[], AbstractContextManager], tokens: list[int], input_ids: torch.Tensor,
                        attention_mask: torch.Tensor, logits_to_keep: int, batch_size: int | None = None,
                        compute_entropy: bool = False, **others: Any) -> tuple | None:
    """What TRL's `_get_per_token_logps_and_entropies` returns (log-probabilities, entropies, aux loss), from
    `shared_prompt_pass` over chunks of `batch_size` rows as TRL cuts them (a chunk whose rows share no prompt: TRL's
    pass, `trls_pass`); None for a pass with more than text (images, a MoE's aux loss: TRL's pass). The tokens each
    pass ran are appended to `tokens`."""
    if any(value is not None and value is not False for value in others.values()):
        return None
    rows = input_ids.size(0)
    step = batch_size or rows
    logps, entropies = [], []
    for start in range(0, rows, step):
        ids, mask = input_ids[start:start + step], attention_mask[start:start + step]
        part = shared_prompt_pass(model, causal_lm, ids, mask, logits_to_keep, compute_entropy, autocast, tokens)
        if part is None:
            part = trls_pass(model, ids, mask, logits_to_keep, compute_entropy=compute_entropy)[:2]
            tokens.append(ids.numel())
        logps.append(part[0])
        entropies.append(part[1])
    return torch.cat(logps), torch.cat(entropies) if compute_entropy else None, None
