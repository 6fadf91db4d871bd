"""RMLearner's optimizer offload: AdamW on float32 CPU copies of the RM's parameters gives the updates of the
plain learner, keeps its state off the RM's tensors, and resumes from a checkpoint like it."""

from __future__ import annotations

import random

import pytest
import torch

from coreward.data.synthetic import demo_problems
from coreward.rm.assistant import perturb
from coreward.rm.learner import Pair, RMLearner
from coreward.rm.model import VerifyRM


def demo_pairs(count: int) -> list[Pair]:
    return [Pair(p.question(), str(p.answer), p.solution("hash"), perturb(p.solution("hash"), str(p.answer), random.Random(i)))
            for i, p in enumerate(demo_problems("train")[:count])]


def weights(learner: RMLearner) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in learner.rm.model.named_parameters()}


def test_offloaded_optimizer_updates_like_the_plain_one_and_resumes(tiny_rm_path, tmp_path):
    plain = RMLearner(VerifyRM.from_pretrained(tiny_rm_path, device="cpu"), lr=1e-2, batch_size=4)
    offload = RMLearner(VerifyRM.from_pretrained(tiny_rm_path, device="cpu"), lr=1e-2, batch_size=4,
                        optimizer_offload=True)
    start = weights(offload)
    for step in range(3):
        pairs = demo_pairs(4 + step)
        assert plain.update(pairs)["rm/loss"] == pytest.approx(offload.update(pairs)["rm/loss"], abs=1e-6)
    ours, theirs = weights(offload), weights(plain)
    assert any(not torch.equal(ours[n], start[n]) for n in ours)  # it learned
    for name in ours:
        assert torch.allclose(ours[name], theirs[name], atol=1e-6, rtol=0), name
    # the optimizer's tensors are its own CPU float32 copies, not the RM's parameters
    model_ids = {id(p) for p in offload.rm.model.parameters()}
    state_params = [p for group in offload.optimizer.param_groups for p in group["params"]]
    assert not model_ids & {id(p) for p in state_params}
    assert all(p.device.type == "cpu" and p.dtype == torch.float32 for p in state_params)
    assert all(p.grad is None for p in offload.rm.model.parameters())

    offload.save(tmp_path / "ckpt")
    resumed = RMLearner.load(tmp_path / "ckpt", "cpu", lr=1e-2, weight_decay=0.01, batch_size=4, optimizer_offload=True)
    pairs = demo_pairs(5)
    resumed.update(pairs)
    offload.update(pairs)
    assert resumed.updates == offload.updates == 4
    after, expected = weights(resumed), weights(offload)
    for name in after:
        assert torch.allclose(after[name], expected[name], atol=1e-6, rtol=0), name
