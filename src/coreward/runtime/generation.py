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


# sampling settings InverseCdfSampler applies itself, as transformers' warpers of the same names do; any other
# (typical_p, epsilon/eta cutoffs, top_h, beams) leaves the sampling to `generate`
OTHER_SAMPLING = ("top_h", "typical_p", "epsilon_cutoff", "eta_cutoff")
# the tokens `nucleus` ranks before it falls back to sorting the whole vocabulary (a top-k of 1,024 costs a small
# part of a full sort at a 49k vocabulary: docs/figures.md, Speed)
NUCLEUS_CANDIDATES = 1024


class InverseCdfSampler:
    """The last logits processor of a sampled `generate` run greedily: it applies the sampling warpers
    (temperature, top-k, top-p, min-p: transformers' own classes, in `generate`'s order), draws each row's token by
    the inverse of its cumulative distribution (one uniform number a row) and leaves only that token's score
    finite, so the greedy pick returns it. The same distribution as `generate`'s sampling, whose
    `torch.multinomial(probs, 1)` draws an exponential number for every vocabulary entry of every row, a large part of
    a small model's decoding step on a CPU (measured: docs/figures.md, Speed)."""

    def __init__(self, config: Any):
        from transformers import LogitsProcessorList
        from transformers.generation.logits_process import (
            MinPLogitsWarper,
            TemperatureLogitsWarper,
            TopKLogitsWarper,
            TopPLogitsWarper,
        )

        warpers = []
        if config.temperature is not None and config.temperature != 1.0:
            warpers.append(TemperatureLogitsWarper(config.temperature))
        if config.top_k is not None and config.top_k != 0:
            warpers.append(TopKLogitsWarper(top_k=config.top_k))
        # top-p last (no min-p after it) is applied by `nucleus` on the probabilities, without a full sort a step
        self.top_p = None
        if config.top_p is not None and config.top_p < 1.0:
            if config.min_p is None:
                self.top_p = config.top_p
            else:
                warpers.append(TopPLogitsWarper(top_p=config.top_p))
        if config.min_p is not None:
            warpers.append(MinPLogitsWarper(min_p=config.min_p))
        self.warpers = LogitsProcessorList(warpers)

    def __call__(self, input_ids, scores):
        import torch

        probs = torch.softmax(self.warpers(input_ids, scores).float(), dim=-1)
        uniforms = torch.rand(scores.size(0), device=scores.device)
        if self.top_p is None:
            token = inverse_cdf_draw(probs, uniforms)
        else:
            ranked, order = nucleus(probs, self.top_p)
            token = order.gather(1, inverse_cdf_draw(ranked, uniforms).unsqueeze(1)).squeeze(1)
        return torch.full_like(scores, float("-inf")).scatter_(1, token.unsqueeze(1), 0.0)


def nucleus(probs, top_p):
    """Top-p (nucleus) filtering in sorted order: (each row's probabilities sorted descending, zero after its
    nucleus, i.e. from the first token whose more likely tokens already hold `top_p` of the mass; the vocabulary
    index of each). `probs` rows sum to 1; `top_p` a number or a column, one a row. The same set as transformers'
    `TopPLogitsWarper`. Where the `NUCLEUS_CANDIDATES` most likely tokens hold `top_p`, the nucleus lies among
    them, so they are ranked (`topk`) and the rest never sorted; a row they do not cover sorts the whole vocabulary."""
    ranked, order = probs.topk(min(NUCLEUS_CANDIDATES, probs.size(-1)), dim=-1)
    if ranked.size(-1) < probs.size(-1) and bool((ranked.sum(dim=-1, keepdim=True) < top_p).any()):
        ranked, order = probs.sort(dim=-1, descending=True)
    return ranked * (ranked.cumsum(dim=-1) - ranked < top_p), order


def inverse_cdf_draw(probs, uniforms):
    """Each row's index i with cdf[i-1] <= u·total < cdf[i] (`probs` rows need not sum to 1; `uniforms` in [0, 1)),
    never an entry of zero mass: u·total may round up to the total, which would otherwise pick past the last
    token that has any."""
    import torch

    cdf = probs.cumsum(dim=-1)
    total = cdf[:, -1:]
    token = torch.searchsorted(cdf, uniforms.to(cdf.dtype).unsqueeze(1) * total, right=True)
    last_with_mass = (cdf < total).sum(dim=-1, keepdim=True)  # the first index where cdf reaches the total
    return torch.minimum(token, last_with_mass).squeeze(1)


def greedy_with_sampler(config: Any) -> tuple[Any, InverseCdfSampler, int] | None:
    """(a greedy copy of the sampled generation `config`, the processor that samples, the copies of each prompt it
    asked for: the caller repeats the rows, greedy decoding returns one sequence each); None where `config` does not
    sample, uses beams or a sampling setting the sampler does not apply."""
    import copy

    if not config.do_sample or (config.num_beams or 1) > 1 or any(getattr(config, k, None) is not None
                                                                    for k in OTHER_SAMPLING):
        return None
    greedy = copy.deepcopy(config)
    greedy.do_sample, greedy.num_return_sequences = False, 1
    greedy.temperature = greedy.top_k = greedy.top_p = greedy.min_p = None
    return greedy, InverseCdfSampler(config), config.num_return_sequences or 1


def distinct_prompts(prompt_ids, prompt_mask):
    """(the distinct prompts as rows of [ids | mask], each row's index among them): rows of one prompt share it."""
    import torch

    return torch.unique(torch.cat([prompt_ids, prompt_mask.to(prompt_ids.dtype)], dim=1), dim=0, return_inverse=True)


def other_layer_types(config: Any) -> list[str]:
    """The model's layer types other than full attention (a sliding window, a recurrent layer: they keep another kind
    of cache than the keys and values a shared prompt hands its rows); [] where every layer attends to all."""
    text_config = config.get_text_config() if config is not None else None
    return sorted(set(getattr(text_config, "layer_types", None) or ["full_attention"]) - {"full_attention"})


def shared_prompt_cache(model: Any, input_ids, attention):
    """The keys and values of the rows' prompts but their last token (`generate` runs that one, and its logits
    start the sampling), each distinct prompt run once and indexed out to its rows: the prefill of G completions of
    a prompt is one prompt's. None where no two rows share a prompt, or the model is not a plain transformers causal
    LM with full attention in every layer (its own prefill then). Positions as `generate` computes them."""
    import inspect

    config = getattr(model, "config", None)
    if (input_ids.size(1) < 2 or config is None or other_layer_types(config)
            or "logits_to_keep" not in inspect.signature(type(model).forward).parameters):
        return None
    distinct, index = distinct_prompts(input_ids, attention)
    if distinct.size(0) == input_ids.size(0):
        return None
    width = input_ids.size(1)
    ids, mask = distinct[:, :width - 1], distinct[:, width:2 * width - 1]
    positions = (mask.long().cumsum(-1) - 1).masked_fill_(mask == 0, 1)
    cache = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                  logits_to_keep=1).past_key_values
    cache.batch_select_indices(index)
    return cache


def sampled_generate(model: Any, input_ids, attention, **generate_kwargs: Any):
    """`model.generate(input_ids, attention_mask, **generate_kwargs)`, its sampling done by `InverseCdfSampler`
    where it applies (`greedy_with_sampler`), each repeated prompt prefilled once (`shared_prompt_cache`): the same
    rows in the same order (each prompt's sequences together)."""
    import copy

    from transformers import LogitsProcessorList

    config = copy.deepcopy(generate_kwargs.pop("generation_config", None) or model.generation_config)
    rest = config.update(**generate_kwargs)
    plan = greedy_with_sampler(config)
    if plan is None:
        return model.generate(input_ids=input_ids, attention_mask=attention, generation_config=config, **rest)
    greedy, sampler, copies = plan
    if copies > 1:
        input_ids, attention = input_ids.repeat_interleave(copies, 0), attention.repeat_interleave(copies, 0)
    if "past_key_values" not in rest and greedy.cache_implementation is None and greedy.use_cache is not False:
        cache = shared_prompt_cache(model, input_ids, attention)
        if cache is not None:
            rest["past_key_values"] = cache
    processors = LogitsProcessorList([*(rest.pop("logits_processor", None) or []), sampler])
    return model.generate(input_ids=input_ids, attention_mask=attention, generation_config=greedy,
                          logits_processor=processors, **rest)


def generate_from_ids(model: Any, prompt_ids: list[list[int]], pad_token_id: int, device: Any = None,
                      repeat: int = 1, **generate_kwargs: Any) -> list[list[int]]:
    """The new tokens of `model.generate` for each prompt (each prompt `repeat` times in a row, prompt-major),
    in eval mode (no dropout; no activation checkpointing, so the KV cache is used), no grad; the model's
    training mode is restored after. Rows keep their padding after an end token: the caller cuts them. Sampling
    draws each token by its inverse CDF (`sampled_generate`)."""
    import torch

    input_ids, attention = left_padded(prompt_ids, pad_token_id)
    if repeat > 1:
        input_ids, attention = input_ids.repeat_interleave(repeat, 0), attention.repeat_interleave(repeat, 0)
    device = device if device is not None else next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            output = sampled_generate(model, input_ids.to(device), attention.to(device), **generate_kwargs)
    finally:
        model.train(was_training)
    return output[:, input_ids.shape[1]:].tolist()
