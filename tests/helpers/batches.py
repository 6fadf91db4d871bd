"""Hand-built global batches for the reward-source tests."""

from __future__ import annotations

from coreward.rewards.base import RolloutBatch


def batch_of(groups: list[list[str]], verifier, answers: list[str] | None = None) -> RolloutBatch:
    G = len(groups[0])
    completions = [c for group in groups for c in group]
    columns = {"answer": [a for a in answers for _ in range(G)]} if answers else {}
    return RolloutBatch(
        prompts=[f"q{g}" for g, group in enumerate(groups) for _ in group],
        completions=completions,
        completion_ids=[[1]] * len(completions),
        group_ids=[i // G for i in range(len(completions))],
        num_generations=G,
        columns=columns,
        context={"verifier": verifier},
    )
