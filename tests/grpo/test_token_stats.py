"""Temperature-scaled self-certainty (Intuitor's logits / τ): against a direct torch computation."""

from __future__ import annotations

import math

import pytest
import torch

from coreward.grpo.token_stats import completion_token_stats
from coreward.rewards.base import RolloutBatch
from coreward.rewards.self_certainty import SelfCertaintyReward


def _direct_scaled(model, prompt, completion, temperature):
    logits = model(input_ids=torch.tensor([prompt + completion])).logits[0].float()
    rows = logits[len(prompt) - 1 : len(prompt) - 1 + len(completion)] / temperature
    logp = torch.log_softmax(rows, dim=-1)
    return float((-math.log(logp.shape[-1]) - logp.mean(-1)).mean())


@pytest.mark.parametrize("temperature", [0.6, 1.0, 2.0])
def test_scaled_self_certainty_divides_logits_by_the_temperature(tiny_policy, temperature):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_policy).eval()
    prompts, completions = [[5, 6, 7], [8, 9]], [[14, 15, 16], [18, 19]]
    stats = completion_token_stats(model, prompts, completions, pad_token_id=0, temperature=temperature)
    with torch.no_grad():
        for i, (p, c) in enumerate(zip(prompts, completions)):
            assert stats["self_certainty_scaled"][i] == pytest.approx(_direct_scaled(model, p, c, temperature), rel=1e-4)
    if temperature == 1.0:
        assert stats["self_certainty_scaled"] == pytest.approx(stats["self_certainty"], rel=1e-6)
    else:  # sharper (τ < 1) or flatter (τ > 1) distributions: the statistic moves the same way for every row
        higher = [s > u for s, u in zip(stats["self_certainty_scaled"], stats["self_certainty"])]
        assert all(higher) if temperature < 1 else not any(higher)
    batch = RolloutBatch(prompts=[""] * 2, completions=[""] * 2, completion_ids=completions, group_ids=[0, 0],
                         num_generations=2, columns={}, token_stats=stats)
    reward = SelfCertaintyReward(temperature_scaled=True)
    assert reward.needs_token_stats == ("self_certainty_scaled",)
    assert reward.compute(batch) == stats["self_certainty_scaled"]
    assert SelfCertaintyReward().needs_token_stats == ("self_certainty",)
