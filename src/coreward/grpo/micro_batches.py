"""Micro-batches of similar lengths, each cut to its own width: the same step's gradient for less work.

TRL pads a generation batch's completions to its longest and cuts it into `gradient_accumulation_steps`
micro-batches at random, so every micro-batch's forward and backward run over the longest completion's width.
Two changes remove that padding without changing what the optimizer step sums:

* `length_grouped` orders the rows by completion length before the cut (after TRL's shuffle, so rows of one length
  stay in random order), so each micro-batch holds rows of similar length;
* `trim_padding` drops the columns that are padding in every row of a micro-batch (left of the longest prompt, right
  of the longest completion). Padded positions are masked out of attention and of the loss; RoPE scores depend on
  relative positions only, so the kept tokens' log-probabilities are the same.

Which rows share a micro-batch leaves the step's gradient unchanged only where every micro-batch of one generation
batch goes into one optimizer step and the loss does not normalise by a micro-batch's own token count:
`groups_exactly` says where. (With `bnpo` the loss divides by each micro-batch's tokens; with several optimizer steps
per generation, short rows would all land in the first.)
"""

from __future__ import annotations

from typing import Any

import torch

from coreward.grpo.samplers import permute_rows


# loss types whose accumulated gradient is a sum over rows with weights that do not depend on the micro-batch:
# dapo divides by the generation batch's token count, grpo by each row's own length (and the fixed micro-batch
# size), dr_grpo by a constant
ROW_ADDITIVE_LOSSES = ("dapo", "grpo", "dr_grpo")
PROMPT_KEYS = ("prompt_ids", "prompt_mask")


def groups_exactly(args: Any, paired_views: bool) -> str | None:
    """None where grouping rows by length leaves each optimizer step's gradient as TRL's shuffle does; else why not."""
    if paired_views:
        return "paired views are balanced per micro-batch (grpo/samplers.py)"
    if args.loss_type not in ROW_ADDITIVE_LOSSES:
        return f"loss_type {args.loss_type} weighs a row by its micro-batch's tokens"
    if args.steps_per_generation != args.gradient_accumulation_steps:
        return "a generation batch spans several optimizer steps"
    if getattr(args, "top_entropy_quantile", 1.0) < 1.0:
        return "top_entropy_quantile masks tokens by a quantile over each micro-batch"
    return None


def length_grouped(batch: dict[str, Any]) -> dict[str, Any]:
    """The rows of a generation batch ordered by completion length (a stable sort: equal lengths keep their order)."""
    mask = batch.get("completion_mask")
    if not isinstance(mask, torch.Tensor) or mask.ndim != 2:
        return batch
    order = torch.sort(mask.sum(dim=1).cpu(), stable=True).indices
    return permute_rows(batch, order)


def trim_padding(inputs: dict[str, Any]) -> dict[str, Any]:
    """A micro-batch without the columns that are padding in all its rows: prompt columns (left-padded) before the
    first real token of any row, completion columns (right-padded) after the last real token of any row. Every tensor
    indexed by completion position (log-probabilities, masks, kept hidden states) is cut with the completions."""
    prompt_mask, completion_mask = inputs.get("prompt_mask"), inputs.get("completion_mask")
    if not (isinstance(prompt_mask, torch.Tensor) and isinstance(completion_mask, torch.Tensor)):
        return inputs
    if prompt_mask.ndim != 2 or completion_mask.ndim != 2 or completion_mask.shape[1] == 0:
        return inputs
    prompt_width, completion_width = prompt_mask.shape[1], completion_mask.shape[1]
    used_prompt = torch.nonzero(prompt_mask.any(dim=0))
    used_completion = torch.nonzero(completion_mask.any(dim=0))
    start = int(used_prompt[0]) if len(used_prompt) else 0
    end = int(used_completion[-1]) + 1 if len(used_completion) else 1
    if start == 0 and end == completion_width:
        return inputs
    trimmed = {}
    for key, value in inputs.items():
        if isinstance(value, torch.Tensor) and value.ndim >= 2:
            if key in PROMPT_KEYS and value.shape[1] == prompt_width:
                value = value[:, start:]
            elif key not in PROMPT_KEYS and value.shape[1] == completion_width:
                value = value[:, :end]
        trimmed[key] = value
    return trimmed
