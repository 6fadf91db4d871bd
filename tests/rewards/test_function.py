"""A TRL-style reward function named by import path is a reward source."""

from __future__ import annotations

from coreward.rewards import build_source, source_class
from coreward.rewards.base import RolloutBatch
from coreward.rewards.function import FunctionReward
from tests.helpers.batches import batch_of


def test_a_reward_function_by_import_path(verifier):
    cls = source_class("tests.helpers.user_rewards:short_answers")
    assert issubclass(cls, FunctionReward)
    source = build_source("tests.helpers.user_rewards:short_answers", {}, key="rewards.0")
    assert source.compute(batch_of([["short", "x" * 50]], verifier)) == [1.0, 0.0]


def test_the_function_sees_trls_keyword_arguments(verifier):
    seen = {}

    def spy(prompts, completions, completion_ids, **kwargs):
        seen.update(kwargs, prompts=prompts, completion_ids=completion_ids)
        return [0.5] * len(completions)

    batch = RolloutBatch(prompts=["q0", "q0", "q1", "q1"], completions=["a", "b", "c", "d"],
                         completion_ids=[[1], [2], [3], [4]], group_ids=[0, 0, 1, 1], num_generations=2,
                         columns={"answer": ["3", "3", "5", "5"], "id": ["x", "x", "y", "y"], "level": [1, 1, 4, 4]},
                         context={"verifier": verifier})
    assert FunctionReward.of(spy)().compute(batch) == [0.5] * 4
    assert seen["prompts"] == ["q0", "q0", "q1", "q1"] and seen["completion_ids"] == [[1], [2], [3], [4]]
    assert "trainer_state" in seen
    # every dataset column, row by row, under its own name (TRL's **kwargs)
    assert seen["answer"] == ["3", "3", "5", "5"] and seen["id"] == ["x", "x", "y", "y"] and seen["level"] == [1, 1, 4, 4]
