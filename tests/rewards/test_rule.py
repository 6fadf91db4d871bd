"""The rule-based reward (GT-GRPO): 1 for a completion whose final answer verifies equal to the reference."""

from __future__ import annotations

import pytest

from coreward.rewards import build_source
from coreward.rewards.rule import RuleReward
from coreward.runtime.errors import CorewardError
from tests.helpers.batches import batch_of


def test_verified_answers_score_correct_and_the_rest_incorrect(verifier):
    groups = [["#### 14", "\\boxed{14.0}", "The answer is 15.", "no answer at all"]]
    batch = batch_of(groups, verifier, answers=["14"])
    assert RuleReward().compute(batch) == [1.0, 1.0, 0.0, 0.0]
    assert RuleReward(correct=2.0, incorrect=-1.0).compute(batch) == [2.0, 2.0, -1.0, -1.0]


def test_without_references_it_says_which_column_is_missing(verifier):
    with pytest.raises(CorewardError, match="reward 'rule' needs the dataset column 'answer'"):
        RuleReward().compute(batch_of([["#### 1", "#### 2"]], verifier))


def test_params_are_typed_and_named_in_errors():
    assert RuleReward(correct="1e-1").params.correct == pytest.approx(0.1)  # YAML reads 1e-1 as a string
    with pytest.raises(CorewardError, match=r"key rewards\.3\.params\.bonus"):
        build_source("rule", {"bonus": 1}, key="rewards.3")
    with pytest.raises(CorewardError, match=r"key rewards\.0\.params\.correct .*number"):
        build_source("rule", {"correct": "high"}, key="rewards.0")
