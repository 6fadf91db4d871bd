"""The interface every reward method implements, and the global batch it receives.

TRL calls reward functions with only its own process's slice of the generation batch, so a prompt's
group of G completions can be split across processes (trl issue #3896). coreward's trainer gathers
first and hands each `RewardSource` the *whole* batch: every completion of every group, once, on every
process. A source returns one reward per completion of that global batch; the trainer gives TRL back
each process's slice. Because every process sees the same inputs, a source that keeps state (a reward
model, an EMA teacher) stays identical on all processes as long as its update is deterministic.

A source is small: `compute(batch) -> list[float]`, plus optional state saving and per-step hooks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar


@dataclass
class RolloutBatch:
    """All rollouts of one generation step, across every process, in group order.

    Rows `g*G .. g*G+G-1` are the G completions of prompt group `g` (`group_ids[i] == i // G`).
    `columns` holds every dataset column (`answer`, `id`, `pair_id`, ...), one value per completion.
    """

    prompts: list[Any]
    completions: list[str]
    completion_ids: list[list[int]]
    group_ids: list[int]
    num_generations: int
    columns: dict[str, list[Any]]
    step: int = 0
    reference_column: str = "answer"
    prompt_ids: list[list[int]] = field(default_factory=list)  # the policy's tokens of each row's prompt
    # Per-completion statistics of the policy's own logits (mean entropy, self-certainty), filled by
    # the trainer only when a configured source lists them in `needs_token_stats`.
    token_stats: dict[str, list[float]] = field(default_factory=dict)
    # Shared services the trainer provides (the verifier, the trainer itself for model access).
    context: dict[str, Any] = field(default_factory=dict)
    _verdicts: list[Any] | None = field(default=None, repr=False)
    metrics: dict[str, float] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.completions)

    @property
    def references(self) -> list[str | None] | None:
        """Reference answers when the dataset has them (self-supervised methods must not use them)."""
        refs = self.columns.get(self.reference_column)
        if refs is None or all(r is None or r == "" for r in refs):
            return None
        return [None if r is None or r == "" else str(r) for r in refs]

    def groups(self) -> list[range]:
        """Row ranges of each prompt group."""
        G = self.num_generations
        return [range(start, start + G) for start in range(0, len(self), G)]

    def verdicts(self):
        """Rule verification of every completion against its reference (computed once per batch).

        Returns a list of `VerifyResult` (`correct`, `extracted`, `timed_out`), or None without references.
        """
        refs = self.references
        if refs is None:
            return None
        if self._verdicts is None:
            verifier = self.context["verifier"]
            self._verdicts = verifier.verify_completions(self.completions, [r or "" for r in refs])
        return self._verdicts

    def extracted_answers(self) -> list[str | None]:
        """The final answer extracted from each completion (no reference needed)."""
        if self._verdicts is not None:
            return [v.extracted for v in self._verdicts]
        cached = self.context.setdefault("_extracted", None)
        if cached is None:
            from coreward.verify import extract_answer

            cached = [extract_answer(c) for c in self.completions]
            self.context["_extracted"] = cached
        return cached

    def log(self, name: str, value: float) -> None:
        """Record a scalar metric for this step (logged as `name` in metrics.jsonl)."""
        if value is not None and math.isfinite(value):
            self.metrics[name] = float(value)


class RewardSource:
    """Base class of a reward method. Subclasses set `name` and implement `compute`."""

    name: ClassVar[str] = "reward"
    #: token statistics of the policy's logits this source needs (see `training/token_stats.py`)
    needs_token_stats: ClassVar[tuple[str, ...]] = ()
    #: whether its rewards come from the reference answers (then each must be usable: checked before training)
    needs_references: ClassVar[bool] = False

    def compute(self, batch: RolloutBatch) -> list[float]:
        raise NotImplementedError

    def on_step_begin(self, trainer: Any) -> None:
        """Called once per generation step before rollouts (e.g. an EMA teacher update)."""

    def save_state(self, directory: Path) -> None:
        """Write this source's state (models, optimizers, counters) into a checkpoint directory."""

    def load_state(self, directory: Path) -> None:
        """Restore what `save_state` wrote."""

    def close(self) -> None:
        """Release resources (pools, connections)."""


#: name -> factory(**params) of every registered reward source
_REGISTRY: dict[str, Callable[..., RewardSource]] = {}


def register(name: str) -> Callable[[type[RewardSource]], type[RewardSource]]:
    def decorator(cls: type[RewardSource]) -> type[RewardSource]:
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return decorator


def registered_sources() -> dict[str, Callable[..., RewardSource]]:
    import coreward.rewards  # noqa: F401  (importing the package registers every source)

    return dict(_REGISTRY)
