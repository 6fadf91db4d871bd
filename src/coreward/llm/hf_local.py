"""A local Hugging Face causal LM as a text generator: batched, left-padded, seeded per request.

Sampling is done by `_RowSampler`, a logits processor that draws each row's next token with that row's own
`torch.Generator` and hands `generate` a one-hot choice (so HF's greedy step just takes it). Two reasons:
a seeded request gives the same text whatever batch it lands in (HF's own sampler draws the whole batch
from one RNG, so a row's text would depend on its neighbours), and the caller's global RNG is never
touched, so an assistant generating mid-training does not change the policy's random stream.

Temperature and top-p come from each request; other generation settings the model ships with (EOS ids,
repetition penalty) come from its `generation_config`.
"""

from __future__ import annotations

import logging
import os
import secrets
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LogitsProcessor, LogitsProcessorList

from coreward.llm.base import GenerationRequest, GenerationResult, TextGenerator
from coreward.runtime.errors import CorewardError
from coreward.runtime.generation import sampled_generate
from coreward.runtime.real_models import real_model_path
from coreward.verify.extract import encodable


logger = logging.getLogger(__name__)


class HFLocalGenerator(TextGenerator):
    """Generate with a local model, `batch_size` requests per `model.generate` call.

    `model_name_or_path` is a hub id or directory (loaded with its tokenizer onto `device`, in `dtype`), or an
    already-loaded model, then `tokenizer` is required and the model is used as it is (its device, dtype and
    train/eval mode) unless `device` names one. The chat template is used when `chat_template` is true and
    the tokenizer has one; otherwise the prompt is the messages' contents joined by newlines. A raw request's text is
    the prompt as it is (with the tokenizer's special tokens, as vLLM's `generate(prompt)` reads it).
    """

    def __init__(
        self,
        model_name_or_path,
        tokenizer=None,
        *,
        device: str = "auto",
        dtype: str | torch.dtype = "auto",
        batch_size: int = 8,
        chat_template: bool = True,
    ):
        super().__init__()
        if isinstance(model_name_or_path, (str, os.PathLike)):
            model, tokenizer = _load(str(model_name_or_path), tokenizer, _auto_device(device), dtype)
        elif tokenizer is None:
            raise ValueError("an already-loaded model needs its tokenizer: HFLocalGenerator(model, tokenizer)")
        else:
            model = model_name_or_path if device == "auto" else model_name_or_path.to(device)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.model, self.tokenizer = model, tokenizer
        self.eos_token_id = model.generation_config.eos_token_id or tokenizer.eos_token_id
        self.batch_size = batch_size
        self.use_chat_template = chat_template and bool(getattr(tokenizer, "chat_template", None))

    def _generate(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        results: dict[int, GenerationResult] = {}
        for raw in (False, True):  # a batch is all chat or all raw: they tokenize with different special tokens
            rows = [i for i, request in enumerate(requests) if request.raw == raw]
            for start in range(0, len(rows), self.batch_size):
                batch = rows[start : start + self.batch_size]
                results.update(zip(batch, self._generate_batch([requests[i] for i in batch])))
        return [results[i] for i in range(len(requests))]

    def _generate_batch(self, batch: list[GenerationRequest]) -> list[GenerationResult]:
        """One `model.generate` call; a fault in it (OOM, a prompt longer than the model allows) fails its items."""
        started = time.perf_counter()
        try:
            texts = self._sample(batch)
        except Exception as exc:  # per-item failure by contract: logged, and counted in stats
            logger.warning("local generation failed for a batch of %d: %s", len(batch), exc, exc_info=True)
            error = f"{type(exc).__name__}: {exc}"
            return [GenerationResult(None, error, time.perf_counter() - started) for _ in batch]
        latency = time.perf_counter() - started
        return [
            GenerationResult(text, latency_s=latency)
            if text.strip()
            else GenerationResult(None, "empty completion", latency)
            for text in texts
        ]

    @torch.inference_mode()
    def _sample(self, batch: list[GenerationRequest]) -> list[str]:
        device = self.model.device
        raw = batch[0].raw  # _generate batches raw and chat requests apart
        inputs = self.tokenizer(
            [encodable(request.messages[0]["content"]) if raw else
             self._prompt(request.messages, request.chat_template_kwargs) for request in batch],
            return_tensors="pt",
            padding=True,
            padding_side="left",
            add_special_tokens=raw or not self.use_chat_template,  # a chat template writes its own special tokens
        ).to(device)
        output = sampled_generate(  # greedy over _RowSampler's one-hot choice: coreward's decoding loop, or generate
            self.model,
            inputs["input_ids"],
            inputs["attention_mask"],
            max_new_tokens=max(request.max_tokens for request in batch),
            do_sample=False,  # the choice is made by _RowSampler; greedy just takes it
            logits_processor=LogitsProcessorList([_RowSampler(batch, device)]),
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=self.eos_token_id,
        )
        new_tokens = output[:, inputs["input_ids"].shape[1] :]
        return [
            self.tokenizer.decode(row[: request.max_tokens], skip_special_tokens=True)
            for row, request in zip(new_tokens, batch)
        ]

    def _prompt(self, messages: list[dict], template_kwargs: dict | None = None) -> str:
        # Not data/prompts.render_prompt, on purpose: llm/ is a layer below data/ (data/rephrase.py drives these
        # generators), and a request carries its own chat-template options (`chat_template_kwargs`, e.g. Qwen3's
        # enable_thinking for `coreward rephrase --no-thinking`), which render_prompt does not take; a tokenizer
        # without a template gets the messages joined here, where render_prompt refuses it.
        if self.use_chat_template:
            text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                                      **(template_kwargs or {}))
        else:
            text = "\n".join(message["content"] for message in messages)
        return encodable(text)  # message text may be a policy's output; a fast tokenizer refuses lone surrogates

    def close(self) -> None:
        """Drop the model so its memory can be freed (the generator is unusable afterwards)."""
        if getattr(self, "model", None) is None:
            return
        on_cuda = self.model.device.type == "cuda"
        self.model = None
        if on_cuda:
            torch.cuda.empty_cache()


class _RowSampler(LogitsProcessor):
    """Picks every row's next token with the row's own RNG, temperature and top-p; returns it as one-hot scores.

    The rows are warped together (softmax at each row's temperature, `nucleus` where a top-p cuts) and each
    draws one uniform number from its own generator, taken through its cumulative distribution
    (runtime/generation.py `inverse_cdf_draw`): a row's token still depends only on its seed and its own logits."""

    def __init__(self, batch: list[GenerationRequest], device: torch.device):
        seeds = [request.seed if request.seed is not None else secrets.randbits(63) for request in batch]
        sampled = [row for row, request in enumerate(batch) if request.temperature != 0]
        self.generators = [torch.Generator(device=device).manual_seed(seeds[row]) for row in sampled]
        self.rows = torch.tensor(sampled, dtype=torch.long, device=device)  # the rows that sample; the rest are greedy
        self.temperature = torch.tensor([[batch[row].temperature] for row in sampled], device=device)
        self.top_p = torch.tensor([[batch[row].top_p] for row in sampled], device=device)
        self.cuts = bool((self.top_p < 1.0).any())

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        from coreward.runtime.generation import inverse_cdf_draw, nucleus

        chosen = scores.argmax(dim=-1)  # temperature 0: greedy
        if len(self.rows):
            probs = torch.softmax(scores[self.rows].float() / self.temperature, dim=-1)
            order = None
            if self.cuts:  # the most likely tokens until their mass reaches top_p (at least one)
                probs, order = nucleus(probs, self.top_p)
            uniforms = torch.cat([torch.rand(1, generator=generator, device=scores.device)
                                  for generator in self.generators])
            token = inverse_cdf_draw(probs, uniforms)
            chosen[self.rows] = token if order is None else order.gather(1, token.unsqueeze(1)).squeeze(1)
        one_hot = torch.full_like(scores, float("-inf"))
        one_hot[torch.arange(len(scores), device=scores.device), chosen] = 0.0
        return one_hot


def _auto_device(device: str) -> str:
    if device != "auto":
        return device
    return "cuda" if torch.cuda.is_available() else "cpu"


def _load(name: str, tokenizer, device: str, dtype: str | torch.dtype):
    """Model and tokenizer from the hub or a directory; a name that can't be loaded is a CorewardError."""
    name = real_model_path(name, key="generation model") or os.path.expanduser(name)
    if name.startswith(("/", ".")) and not os.path.isdir(name):  # clearer than the hub's "invalid repo id"
        raise CorewardError(f"generation model directory {name!r} does not exist")
    try:
        tokenizer = tokenizer if tokenizer is not None else AutoTokenizer.from_pretrained(name)
        model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype).to(device).eval()
    except OSError as exc:
        raise CorewardError(f"cannot load the generation model {name!r}: {exc}") from None
    if dtype == "auto":  # adapters merged, bfloat16 on a CPU that has it natively (runtime/sampling.py)
        from coreward.runtime.sampling import prepared_for_sampling

        model = prepared_for_sampling(model)
    return model, tokenizer
