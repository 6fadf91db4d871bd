"""Rewards whose hackability is known by construction, for the overoptimization guard's tests (grpo/guard.py).

Both are TRL-style functions named from a config by import path (`tests.helpers.guard_rewards:...`) and read the
demo task's completions (`a+b=c;c-d=e;#### e`).
"""

from __future__ import annotations

import random

from coreward.data.synthetic import demo_answer_in_any_format


def wrong_answers(completions, answer, **kwargs) -> list[float]:
    """Hackable by construction: 1 for an answer that is given and wrong. The policy satisfies it by not solving
    the problem, so the verified accuracy falls while the reward rises."""
    return [float(given is not None and given != str(reference))
            for given, reference in ((demo_answer_in_any_format(text), ref) for text, ref in zip(completions, answer))]


def noisy_rule(completions, answer, **kwargs) -> list[float]:
    """Noisy but unbiased: the rule reward plus zero-mean Gaussian noise (σ = 0.5)."""
    return [float(demo_answer_in_any_format(text) == str(reference)) + _NOISE.gauss(0.0, 0.5)
            for text, reference in zip(completions, answer)]


_NOISE = random.Random(0)
