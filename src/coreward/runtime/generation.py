"""Sampling from a Hugging Face causal LM given token ids: the one wrapper of `model.generate` that evaluation,
the EMA teacher and the demo's SFT check share (the endpoint-style text generator in `llm/hf_local.py` has
its own per-request seeded sampler)."""

from __future__ import annotations

import functools
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

    def draw(self, input_ids, scores):
        """Each row's token, drawn from the warped distribution of its `scores`."""
        import torch

        probs = torch.softmax(self.warpers(input_ids, scores).float(), dim=-1)
        uniforms = torch.rand(scores.size(0), device=scores.device)
        if self.top_p is None:
            return inverse_cdf_draw(probs, uniforms)
        ranked, order = nucleus(probs, self.top_p)
        return order.gather(1, inverse_cdf_draw(ranked, uniforms).unsqueeze(1)).squeeze(1)

    def __call__(self, input_ids, scores):
        import torch

        token = self.draw(input_ids, scores)
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
    # u·total held below the total: the search then stops at the first index where cdf reaches it, at the latest
    below_total = torch.nextafter(total, torch.zeros_like(total))
    value = torch.minimum(uniforms.to(cdf.dtype).unsqueeze(1) * total, below_total)
    return torch.searchsorted(cdf, value, right=True).clamp_(max=probs.size(-1) - 1).squeeze(1)


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


@functools.cache
def _reserved_layer_class():
    """`ReservedLayer`, made on first use (transformers is imported only where a model samples)."""
    from transformers.cache_utils import DynamicLayer

    class ReservedLayer(DynamicLayer):
        """transformers' `DynamicLayer` with its keys and values held in a buffer that has room for `reserve` more
        positions: a decoding step writes its token's keys and values in place and attends to a view of the filled
        part, where `DynamicLayer` concatenates the whole cache again at every token (a copy that grows with the
        sequence, in every layer). The same tensors to attend to, so the same tokens; the memory is what the
        concatenation's last step holds anyway. A layer whose keys something else replaced (`batch_select_indices`,
        `crop`) is copied into a new buffer at its next update."""

        def __init__(self, reserve: int):
            super().__init__()
            self.reserve = max(1, int(reserve))
            self.buffers = None

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            length = self.keys.shape[-2] if self.keys.numel() else 0
            end = length + key_states.shape[-2]
            if not self._holds(end, key_states):
                self._rebuffer(length, end + self.reserve, key_states, value_states)
            keys, values = self.buffers
            keys[..., length:end, :].copy_(key_states)
            values[..., length:end, :].copy_(value_states)
            self.keys, self.values = keys[..., :end, :], values[..., :end, :]
            return self.keys, self.values

        def _holds(self, end, key_states) -> bool:
            """Whether the buffer still backs `keys` and has room up to `end` for rows like `key_states`."""
            if self.buffers is None:
                return False
            keys = self.buffers[0]
            return (keys.shape[-2] >= end and keys.shape[:2] == key_states.shape[:2]
                    and (self.keys.numel() == 0 or self.keys.data_ptr() == keys.data_ptr()))

        def _rebuffer(self, length, capacity, key_states, value_states) -> None:
            shape = (*key_states.shape[:2], capacity)
            keys = key_states.new_empty((*shape, key_states.shape[-1]))
            values = value_states.new_empty((*shape, value_states.shape[-1]))
            if length:
                keys[..., :length, :].copy_(self.keys)
                values[..., :length, :].copy_(self.values)
            self.buffers = (keys, values)
            self.keys, self.values = keys[..., :length, :], values[..., :length, :]

    return ReservedLayer


def reserved_cache(model: Any, new_tokens: int, cache: Any = None):
    """A key/value cache for `generate` whose full-attention layers hold room for `new_tokens` more positions
    (`_reserved_layer_class`): `cache` (a `DynamicCache`, e.g. `shared_prompt_cache`'s) with its plain layers
    turned into reserved ones, or an empty cache for `model`. None where the model's layers keep another kind of
    cache (a sliding window, a recurrent state): `generate` then makes its own."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    config = getattr(model, "config", None)
    if config is None or other_layer_types(config):
        return None
    if cache is None:
        cache = DynamicCache(config=config)
    if type(cache) is not DynamicCache or any(type(layer) is not DynamicLayer for layer in cache.layers):
        return None
    reserved = _reserved_layer_class()
    for index, layer in enumerate(cache.layers):
        replacement = reserved(new_tokens)
        if layer.is_initialized:
            replacement.lazy_initialization(layer.keys, layer.values)
            replacement.keys, replacement.values = layer.keys, layer.values
        cache.layers[index] = replacement
    return cache


def new_token_budget(config: Any, prompt_width: int) -> int:
    """The most tokens `generate` adds under `config` (`max_new_tokens`, else `max_length` less the prompt)."""
    if config.max_new_tokens is not None:
        return int(config.max_new_tokens)
    return max(1, int(config.max_length or 0) - prompt_width)


# the settings of a greedy generation config `decode` runs as `generate` would (any other, or another value of
# the checked ones, leaves the loop to `generate`): lengths, end and padding tokens, and what changes nothing
DECODE_SETTINGS = {"max_new_tokens", "max_length", "min_new_tokens", "min_length", "do_sample", "use_cache",
                   "repetition_penalty", "num_return_sequences", "num_beams", "pad_token_id", "eos_token_id",
                   "bos_token_id", "disable_compile", "transformers_version", "_from_model_config",
                   # the sampling warpers: `generate` applies them only when it samples, and `decode` never does
                   "temperature", "top_k", "top_p", "min_p", *OTHER_SAMPLING}
# outputs beside the tokens: `decode` returns none, so they pass only where off (a generation config made from a
# model's config sets the first two to False)
UNRETURNED = ("output_attentions", "output_hidden_states", "output_scores", "output_logits", "return_dict_in_generate")


def decodes_as_generate(model: Any, config: Any, rest: dict) -> bool:
    """Whether `decode` runs `model.generate(..., generation_config=config, **rest)` for a greedy `config`: a plain
    transformers causal LM (`shared_prompt_cache`'s conditions), no setting beyond `DECODE_SETTINGS`, no argument
    beyond logits processors and stopping criteria, and end tokens to stop at."""
    import inspect

    settings = {key for key, value in config.to_diff_dict().items() if not (key in UNRETURNED and not value)}
    return (settings <= DECODE_SETTINGS and not config.do_sample and (config.num_beams or 1) == 1
            and config.repetition_penalty in (None, 1.0) and (config.num_return_sequences or 1) == 1
            and not config.min_length and config.use_cache is not False
            and set(rest) <= {"logits_processor", "stopping_criteria"}
            and _end_tokens(config) and getattr(model, "config", None) is not None
            and not getattr(model.config, "is_encoder_decoder", False)
            and "logits_to_keep" in inspect.signature(type(model).forward).parameters
            and not _sharded_across_ranks(model))


def _sharded_across_ranks(model: Any) -> bool:
    """Whether each forward of `model` gathers its weights from every rank (ZeRO-3, FSDP): `generate` then keeps
    every rank stepping until all have finished (`synced_gpus`), where `decode` stops when its own rows have."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return False
    from torch.distributed.tensor import DTensor

    if any(isinstance(p, DTensor) or hasattr(p, "ds_id") for p in model.parameters()):  # FSDP2, ZeRO-3
        return True
    try:
        from transformers.distributed.fsdp import is_fsdp_managed_module
        from transformers.integrations import is_deepspeed_zero3_enabled
    except ImportError:  # a transformers that names them elsewhere: generate's synced loop, to be safe
        return True
    return is_deepspeed_zero3_enabled() or is_fsdp_managed_module(model)


def _end_tokens(config: Any) -> list[int]:
    ends = config.eos_token_id
    return [int(t) for t in (ends if isinstance(ends, (list, tuple)) else [ends]) if t is not None]


def decode(model: Any, input_ids, attention, config: Any, cache: Any, logits_processor=None,
           stopping_criteria=None, draw=None):
    """`model.generate`'s greedy loop (transformers' `_sample` without sampling: each step's logits in float32
    through the logits processors, the top token taken, a finished row padded, the step's stopping criteria),
    for a config `decodes_as_generate` accepts, into `cache` (`reserved_cache`, empty or holding every prompt column
    but the last). What it leaves out is `generate`'s work a token that the loop does not need: the attention mask is
    made once (additive, in the model's dtype) and sliced each step, where `generate` builds a boolean one each
    step that every layer's attention turns into an additive one again, and the generality of its
    per-step preparation. `draw` (`InverseCdfSampler.draw`), when given, picks each row's token from the processed
    scores, as that sampler's one-hot scores and the greedy pick would. The same tokens, from the same logits."""
    import torch

    rows, width = input_ids.shape
    new_tokens = new_token_budget(config, width)
    ends = torch.tensor(_end_tokens(config), device=input_ids.device)
    pad = config.pad_token_id if config.pad_token_id is not None else int(ends[0])
    min_new = config.min_new_tokens or 0
    dtype = next(model.parameters()).dtype
    dtype = dtype if dtype.is_floating_point else torch.float32
    additive = None  # no padding: no mask, as transformers passes none then (a mask of zeros rounds otherwise in bf16)
    if not bool(attention.all()):
        additive = torch.zeros(rows, 1, 1, width + new_tokens, dtype=dtype, device=input_ids.device)
        additive[..., :width].masked_fill_(attention[:, None, None, :] == 0, float("-inf"))  # the prompts' padding
    positions = (attention.long().cumsum(-1) - 1).masked_fill_(attention == 0, 1)
    unfinished = torch.ones(rows, dtype=torch.bool, device=input_ids.device)
    cached = cache.get_seq_length()
    if cached == width - 1:  # the prompts' prefix is in the cache: their last column goes first
        step = {"input_ids": input_ids[:, -1:], "attention_mask": _columns(additive, width),
                "position_ids": positions[:, -1:]}
    elif cached == 0:  # the prompts whole, with the padding and causal mask transformers makes for them
        step = {"input_ids": input_ids, "attention_mask": attention, "position_ids": positions}
    else:
        raise ValueError(f"decode takes an empty cache or one of the prompts' first {width - 1} columns, "
                         f"not {cached}")
    sequences = input_ids
    for made in range(new_tokens):
        logits = model(**step, past_key_values=cache, use_cache=True, logits_to_keep=1).logits
        scores = logits[:, -1, :].to(dtype=torch.float32, copy=True)
        if made < min_new:  # transformers' MinNewTokensLengthLogitsProcessor
            scores[:, ends] = float("-inf")
        if logits_processor is not None:
            scores = logits_processor(sequences, scores)
        token = torch.argmax(scores, dim=-1) if draw is None else draw(sequences, scores)
        token = torch.where(unfinished, token, torch.full_like(token, pad))
        sequences = torch.cat([sequences, token[:, None]], dim=-1)
        unfinished &= ~torch.isin(token, ends)
        if stopping_criteria is not None:
            unfinished &= ~stopping_criteria(sequences, None)  # `generate` hands them no scores unless it returns them
        if not bool(unfinished.any()):
            break
        end = width + made + 1
        step = {"input_ids": token[:, None], "attention_mask": _columns(additive, end),
                "position_ids": positions[:, -1:] + made + 1}
    return sequences


def _columns(mask, end: int):
    """The first `end` key columns of `decode`'s additive mask (None: no mask)."""
    return None if mask is None else mask[..., :end]


def sampled_generate(model: Any, input_ids, attention, **generate_kwargs: Any):
    """`model.generate(input_ids, attention_mask, **generate_kwargs)`, its sampling done by `InverseCdfSampler`
    where it applies (`greedy_with_sampler`; greedy decoding as it is), each repeated prompt prefilled once
    (`shared_prompt_cache`). On a CPU, into a cache with room for the new tokens (`reserved_cache`), decoded by
    `decode` where it runs as `generate` would (elsewhere `generate` decodes, as before). The same rows in the same
    order (each prompt's sequences together)."""
    import copy

    from transformers import LogitsProcessorList

    config = copy.deepcopy(generate_kwargs.pop("generation_config", None) or model.generation_config)
    rest = config.update(**generate_kwargs)
    plan = greedy_with_sampler(config)
    on_cpu = input_ids.device.type == "cpu"  # the loop and the reserved cache are built and measured for a CPU
    loop = on_cpu and decodes_as_generate(model, config if plan is None else plan[0], rest)
    if plan is not None:
        greedy, sampler, copies = plan
    elif loop:  # greedy already: only the loop and the cache change
        greedy, sampler, copies = config, None, 1
    else:
        return model.generate(input_ids=input_ids, attention_mask=attention, generation_config=config, **rest)
    if copies > 1:
        input_ids, attention = input_ids.repeat_interleave(copies, 0), attention.repeat_interleave(copies, 0)
    cache = None
    if "past_key_values" not in rest and greedy.cache_implementation is None and greedy.use_cache is not False:
        cache = shared_prompt_cache(model, input_ids, attention)
        if on_cpu:
            cache = reserved_cache(model, new_token_budget(greedy, input_ids.size(1)), cache) or cache
    before = rest.pop("logits_processor", None) or []
    if loop and cache is not None:
        return decode(model, input_ids, attention, greedy, cache, LogitsProcessorList(before),
                      rest.get("stopping_criteria"), draw=None if sampler is None else sampler.draw)
    processors = LogitsProcessorList([*before, *([] if sampler is None else [sampler])])
    if cache is not None:
        rest["past_key_values"] = cache
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
