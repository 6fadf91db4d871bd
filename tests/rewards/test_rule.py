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


def test_gsm8k_strict_is_verls_hash_rule_with_string_equality(verifier):
    """match="gsm8k_strict" (the Cooper authors' GSM8K reward, verl's utils/reward_score/gsm8k.py): only the last
    literal `#### <number>` counts, commas dropped, compared as strings; math-verify's match reads more."""
    from coreward.rewards.rule import gsm8k_strict_answer

    groups = [["#### 72", "#### 1,080", "#### 72.0", "\\boxed{72}", "####72", "#### 5 then #### 72", "#### 72 then #### 5"]]
    strict = RuleReward(match="gsm8k_strict").compute(batch_of(groups, verifier, answers=["72"]))
    verified = RuleReward().compute(batch_of(groups, verifier, answers=["72"]))
    assert strict == [1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    assert verified[2] == verified[3] == 1.0  # 72.0 and \boxed{72} verify equal; the strict rule refuses them
    assert RuleReward(match="gsm8k_strict").compute(batch_of([["#### 1,080", "#### 1080"]], verifier, answers=["1,080"])) == [1.0, 1.0]
    assert gsm8k_strict_answer("so #### -3.5, done") == "-3.5" and gsm8k_strict_answer("no hashes") is None
    with pytest.raises(CorewardError, match=r"params\.match must be one of"):
        RuleReward(match="exact")
