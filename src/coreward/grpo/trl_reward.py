"""A coreward reward source as an entry of plain TRL's `GRPOTrainer(reward_funcs=[...])`.

    from trl import GRPOTrainer
    from coreward.grpo.trl_reward import as_trl_reward_func
    trainer = GRPOTrainer(model, reward_funcs=[as_trl_reward_func(MajorityVoteReward(), num_generations=8)], ...)

Caveat (TRL's, trl #3896): TRL calls a reward function with its own process's slice of the batch, so with
several processes a prompt's group can be split between them. Sources that compare completions within a
group (those that vote on the group's answers) are then wrong: use this adapter in one process, or use coreward's
trainer, which gathers whole groups. TRL gives a reward function no policy, so sources that need one (a teacher
copied from it, a model trained on its device) are for coreward's trainer only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coreward.rewards.base import RewardSource, RolloutBatch


def _text(completion: Any) -> str:
    """TRL passes text, or for conversational data a list of messages: the assistant's content."""
    if isinstance(completion, list):
        return "".join(str(m.get("content", "")) for m in completion if isinstance(m, dict))
    return str(completion)


def as_trl_reward_func(
    source: RewardSource, num_generations: int, verifier: Any = None, reference_column: str = "answer"
) -> Callable[..., list[float | None]]:
    """`f(prompts, completions, completion_ids, **columns)` calling `source.compute` on one process's slice.

    The slice must hold whole groups of `num_generations` consecutive completions (TRL's order); `verifier`
    defaults to a shared `Verifier` for sources that compare answers.
    """

    def reward(prompts, completions, completion_ids=None, **kwargs) -> list[float | None]:
        nonlocal verifier
        if verifier is None:
            from coreward.verify import get_verifier

            verifier = get_verifier()
        if len(completions) % num_generations:
            raise ValueError(f"{len(completions)} completions do not split into groups of {num_generations}: "
                             "a group was split between processes (run this adapter in one process)")
        columns = {k: list(v) for k, v in kwargs.items() if isinstance(v, list) and len(v) == len(completions)}
        batch = RolloutBatch(
            prompts=list(prompts), completions=[_text(c) for c in completions],
            completion_ids=[list(ids) for ids in completion_ids or [[] for _ in completions]],
            group_ids=[i // num_generations for i in range(len(completions))], num_generations=num_generations,
            columns=columns, reference_column=reference_column, context={"verifier": verifier, "mode": "train"},
        )
        return list(source.compute(batch))

    reward.__name__ = source.name  # TRL logs rewards/<__name__>
    return reward
