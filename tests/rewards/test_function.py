"""A TRL-style reward function named by import path is a reward source."""

from __future__ import annotations

from coreward.rewards import build_source, source_class
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

    batch = batch_of([["a", "b"]], verifier)
    assert FunctionReward.of(spy)().compute(batch) == [0.5, 0.5]
    assert seen["prompts"] == batch.prompts and "trainer_state" in seen
    assert all(seen[column] == values for column, values in batch.columns.items())
