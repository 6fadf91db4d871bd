"""Sampling from a Hugging Face causal LM given token ids: the one wrapper of `model.generate` that evaluation,
the EMA teacher and the demo's SFT check share (the endpoint-style text generator in `llm/hf_local.py` has
its own per-request seeded sampler)."""

from __future__ import annotations

from typing import Any


def left_padded(prompt_ids: list[list[int]], pad_token_id: int):
    """(input_ids, attention_mask) tensors of token lists padded on the left, so every prompt ends at the same
    column and generation appends after it."""
    import torch

    width = max(len(p) for p in prompt_ids)
    input_ids = torch.tensor([[pad_token_id] * (width - len(p)) + list(p) for p in prompt_ids])
    attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompt_ids])
    return input_ids, attention


def generate_from_ids(model: Any, prompt_ids: list[list[int]], pad_token_id: int, device: Any = None,
                      repeat: int = 1, **generate_kwargs: Any) -> list[list[int]]:
    """The new tokens of `model.generate` for each prompt (each prompt `repeat` times in a row, prompt-major),
    in eval mode (no dropout; no activation checkpointing, so the KV cache is used), no grad; the model's
    training mode is restored after. Rows keep their padding after an end token: the caller cuts them."""
    import torch

    input_ids, attention = left_padded(prompt_ids, pad_token_id)
    if repeat > 1:
        input_ids, attention = input_ids.repeat_interleave(repeat, 0), attention.repeat_interleave(repeat, 0)
    device = device if device is not None else next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            output = model.generate(input_ids=input_ids.to(device), attention_mask=attention.to(device),
                                    **generate_kwargs)
    finally:
        model.train(was_training)
    return output[:, input_ids.shape[1]:].tolist()
