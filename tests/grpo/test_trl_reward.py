"""A coreward source as a plain TRL `reward_funcs` entry: one real GRPO step of TRL's own trainer, one process."""

from __future__ import annotations

import pytest

from coreward.grpo.trl_reward import as_trl_reward_func
from coreward.rewards.majority import MajorityVoteReward


def test_majority_as_a_trl_reward_function(tiny_policy, tmp_path, one_torch_thread):
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from coreward.data.synthetic import load_demo

    calls = []
    majority = as_trl_reward_func(MajorityVoteReward(match="exact"), num_generations=4)

    def spy(**kwargs):
        rewards = majority(**kwargs)
        calls.append((kwargs["completions"], rewards))
        return rewards

    spy.__name__ = majority.__name__
    records = load_demo("train", 4)
    dataset = Dataset.from_list([{"prompt": r.question, "answer": r.answer} for r in records])
    args = GRPOConfig(output_dir=str(tmp_path), num_generations=4, per_device_train_batch_size=8, max_steps=1,
                      max_completion_length=12, use_cpu=True, report_to=[], logging_steps=1, save_strategy="no")
    trainer = GRPOTrainer(model=str(tiny_policy), reward_funcs=[spy], args=args, train_dataset=dataset,
                          processing_class=AutoTokenizer.from_pretrained(tiny_policy))
    trainer.train()
    (completions, rewards), = calls
    assert len(rewards) == len(completions) == 8
    from coreward.verify import extract_answer

    for start in (0, 4):  # within each group of 4, a completion scores 1 exactly when it has the majority answer
        answers = [extract_answer(c) for c in completions[start:start + 4]]
        voted = [a for a in answers if a is not None]
        winner = max(voted, key=voted.count) if voted else None  # ties: first seen, as the source does
        assert rewards[start:start + 4] == [float(winner is not None and a == winner) for a in answers]
    assert "rewards/majority/mean" in trainer.state.log_history[0]


def test_a_split_group_is_refused():
    reward = as_trl_reward_func(MajorityVoteReward(match="exact"), num_generations=4)
    with pytest.raises(ValueError, match="a group was split between processes"):
        reward(prompts=["p"] * 6, completions=["#### 1"] * 6, completion_ids=[[1]] * 6)


def test_group_rewards_follow_the_majority():
    reward = as_trl_reward_func(MajorityVoteReward(match="exact"), num_generations=4)
    completions = ["#### 1", "#### 1", "#### 2", "#### 1", "#### 5", "#### 7", "#### 7", "#### 7"]
    assert reward(prompts=["a"] * 4 + ["b"] * 4, completions=completions,
                  completion_ids=[[0]] * 8) == [1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0]
