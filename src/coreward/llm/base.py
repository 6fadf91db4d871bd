"""The one interface every text-generation backend implements (assistant, judge, rephraser all use it).

A caller hands over a batch of chat requests and gets one result per request, in the same order. A backend
never raises for a fault that concerns single items (a timeout, an HTTP 500, an empty completion, a CUDA
OOM on one batch): that item comes back with `text=None` and an `error` string, so a training step can drop
the affected pairs, count them and go on. Configuration mistakes (a model that can't be loaded, an endpoint
that isn't there at startup) are different: they raise `CorewardError` early, before any work is done.

Every backend keeps running totals in `stats` (requests, failures, retries, mean latency), which is what the
training loop logs as assistant / judge latency and failure count.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Self


@dataclass
class GenerationRequest:
    """One chat completion to produce: OpenAI-style messages plus sampling settings.

    `temperature == 0` means greedy decoding. `seed` makes a sampled completion repeatable where the
    backend supports it (the local backend always does; endpoints pass it on to the server).
    """

    messages: list[dict]
    temperature: float = 0.7
    max_tokens: int = 512
    top_p: float = 1.0
    seed: int | None = None
    # passed to the chat template (e.g. {"enable_thinking": False} for Qwen3); endpoints get it as vLLM's
    # `chat_template_kwargs` body field
    chat_template_kwargs: dict | None = None
    # the one message's text is the whole prompt, with no chat template: a local model reads it as it is, an endpoint
    # is asked for a completion (`/completions`), as verifiers trained on raw text are served by their authors
    raw: bool = False

    def __post_init__(self) -> None:
        if not self.messages:
            raise ValueError("a GenerationRequest needs at least one message")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.raw and len(self.messages) != 1:
            raise ValueError(f"a raw request is one text, got {len(self.messages)} messages")

    @classmethod
    def user(cls, content: str, **sampling) -> GenerationRequest:
        """The common case: a single user message."""
        return cls(messages=[{"role": "user", "content": content}], **sampling)


@dataclass
class GenerationResult:
    """The outcome of one request: `text` is None exactly when the item failed, and `error` says why.

    `latency_s` is the item's wall time (queueing and retries included); `attempts` counts tries (1 = no retry).
    """

    text: str | None
    error: str | None = None
    latency_s: float = 0.0
    attempts: int = 1

    @property
    def ok(self) -> bool:
        return self.text is not None


class TextGenerator(ABC):
    """Base of all backends: `generate` wraps the backend's `_generate` and keeps the running stats."""

    def __init__(self) -> None:
        self._stats_lock = threading.Lock()  # generate may be called from several threads at once
        self._requests = self._failures = self._retries = 0
        self._latency_total_s = 0.0

    def generate(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        """One result per request, same order; per-item faults are results with an error, never exceptions."""
        results = self._generate(list(requests)) if requests else []
        if len(results) != len(requests):  # a backend bug, not an item fault
            raise RuntimeError(f"{type(self).__name__} returned {len(results)} results for {len(requests)} requests")
        self._record(results)
        return results

    @abstractmethod
    def _generate(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        """Backend work for a non-empty batch; must honour the same contract as `generate`."""

    def close(self) -> None:  # noqa: B027 - an optional hook: backends holding nothing keep this one
        """Release connections, threads or model memory. Safe to call twice."""

    @property
    def stats(self) -> dict[str, float]:
        """Running totals since construction: requests, failures, retries, mean_latency_s."""
        with self._stats_lock:
            return {
                "requests": self._requests,
                "failures": self._failures,
                "retries": self._retries,
                "mean_latency_s": self._latency_total_s / self._requests if self._requests else 0.0,
            }

    def _record(self, results: list[GenerationResult]) -> None:
        with self._stats_lock:
            self._requests += len(results)
            self._failures += sum(not r.ok for r in results)
            self._retries += sum(r.attempts - 1 for r in results)
            self._latency_total_s += sum(r.latency_s for r in results)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
