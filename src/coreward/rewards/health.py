"""What a reward source watches in the metrics it logs: its invariants and counters. The engine's health callback
(grpo/health.py) reads every logged training step, hands it to each source's watches, warns when a check breaks
and writes their counters and summary lines into health.json. A source declares its watches with
`RewardSource.health_watches`, as it declares its memory with `memory_needs`, so the engine names no method."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class Check:
    """One invariant judged on one logged step."""

    name: str  # its counter in health.json: the steps on which it was broken
    broken: bool
    message: Callable[[], str]  # the warning (called only when it is given)
    at_once: bool = False  # warned on its first broken step (one step is already wrong), not after a streak


class Span:
    """The first, last, smallest and largest value of a per-step metric, with their steps."""

    def __init__(self):
        self.first = self.last = self.least = self.most = None  # (step, value)

    def add(self, step: int, value: float) -> None:
        self.first = self.first or (step, value)
        self.last = (step, value)
        if self.least is None or value < self.least[1]:
            self.least = (step, value)
        if self.most is None or value > self.most[1]:
            self.most = (step, value)

    def as_dict(self) -> dict[str, Any] | None:
        if self.first is None:
            return None
        return {name: {"step": step, "value": value} for name, (step, value) in
                (("first", self.first), ("last", self.last), ("min", self.least), ("max", self.most))}


class HealthWatch:
    """A source's invariants over the metrics it logs. `check` sees every logged training step (main process) and
    returns the checks that apply to it; `report` gives the source's counters (merged into health.json, beside each
    check's count of broken steps, `broken`) and its summary lines. One watch per class runs in a run, however many
    sources return one (Cooper's LLM judge and the `judge` reward share the judge's)."""

    def check(self, logs: dict[str, Any], step: int) -> list[Check]:
        return []

    def report(self, broken: dict[str, int]) -> tuple[dict[str, Any], list[str]]:
        return {}, []
