"""A user's own reward code, named from configs by import path (`tests.helpers.user_rewards:...`)."""

from __future__ import annotations


def short_answers(completions, **kwargs) -> list[float]:
    """A TRL-style reward function: 1 for completions under 40 characters."""
    return [1.0 if len(c) < 40 else 0.0 for c in completions]
