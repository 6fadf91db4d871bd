"""The RM learner reports how far each RL step's update moved the RM (`rm/update_norm`, issue 38): the number agrees
with the weights compared before and after, independently; an RM whose updates round away reports (almost) zero."""

from __future__ import annotations

import pytest
import torch

from coreward.rewards.cooper.learner import Pair, RMLearner
from coreward.rm.model import VerifyRM
from coreward.runtime.precision import update_norm


PAIRS = [Pair(f"{a}+4", str(a + 4), f"#### {a + 4}", f"#### {a + 5}") for a in range(6)]


def weights(learner: RMLearner) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in learner.rm.model.named_parameters()}


@pytest.mark.parametrize("settings", [{}, {"minibatch_size": 2, "epochs": 2}, {"optimizer_offload": True}],
                         ids=["one step", "mini-batches and epochs", "CPU masters"])
def test_the_update_norm_is_the_distance_the_weights_moved(tiny_rm_path, settings):
    learner = RMLearner(VerifyRM.from_pretrained(tiny_rm_path, device="cpu"), lr=1e-3, batch_size=8, **settings)
    for _ in range(2):
        before = weights(learner)
        metrics = learner.update(PAIRS)
        after = weights(learner)
        assert metrics["rm/update_norm"] > 0
        assert metrics["rm/update_norm"] == pytest.approx(update_norm(before, after), rel=1e-6)
        assert metrics["rm/weight_norm"] == pytest.approx(sum(float(t.double().pow(2).sum()) for t in after.values()) ** 0.5,
                                                          rel=1e-9)
    assert learner.update([]) == {}  # no pairs: no update, nothing to measure


def test_a_bf16_rm_without_float32_masters_at_a_tiny_lr_does_not_move(tiny_rm_path):
    """The authors' pure bf16 RM: AdamW steps of ~lr on weights whose bf16 spacing is ~1e-4 round away entirely."""
    frozen = RMLearner(VerifyRM.from_pretrained(tiny_rm_path, device="cpu", dtype="bfloat16"), lr=1e-9, batch_size=8,
                       master_weights="none")
    moving = RMLearner(VerifyRM.from_pretrained(tiny_rm_path, device="cpu", dtype="bfloat16"), lr=1e-9, batch_size=8)
    still, moved = frozen.update(PAIRS), moving.update(PAIRS)
    assert still["rm/update_norm"] < 1e-9 * still["rm/weight_norm"]
    assert moved["rm/update_norm"] > 0  # the float32 masters keep the same update
