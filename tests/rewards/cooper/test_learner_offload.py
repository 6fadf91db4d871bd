"""RMLearner's optimizer offload: AdamW on float32 CPU copies of the RM's parameters gives the updates of the
plain learner, keeps its state off the RM's tensors, and resumes from a checkpoint like it."""

from __future__ import annotations

import random

import pytest
import torch

from coreward.data.synthetic import demo_problems
from coreward.rewards.cooper.assistant import perturb
from coreward.rewards.cooper.learner import Pair, RMLearner
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


def test_offloaded_optimizer_stepped_on_the_device_updates_alike_and_is_on_the_cpu_between_updates(tiny_rm_path,
                                                                                                    monkeypatch):
    """`optimizer_offload_step: device` (the Cooper authors': verl's update_reward loads the offloaded optimizer to
    the GPU for the update and offloads it after): the same updates as the CPU step; masters and moments go to the
    RM's device for each update, where AdamW steps them, and are back on the CPU between updates."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    on_cpu = RMLearner(VerifyRM.from_pretrained(tiny_rm_path, device=device), lr=1e-2, batch_size=4,
                       optimizer_offload=True)
    on_device = RMLearner(VerifyRM.from_pretrained(tiny_rm_path, device=device), lr=1e-2, batch_size=4,
                          optimizer_offload=True, optimizer_offload_step="device")
    moves, stepped_on = [], []
    move, step = on_device._move_optimizer, on_device._optimizer_step
    monkeypatch.setattr(on_device, "_move_optimizer", lambda to: (moves.append(str(to)), move(to)))
    monkeypatch.setattr(on_device, "_optimizer_step", lambda *a: (stepped_on.append(on_device.masters[0].device.type),
                                                                 step(*a)))
    for n in range(2):
        pairs = demo_pairs(4 + n)
        assert on_cpu.update(pairs)["rm/loss"] == pytest.approx(on_device.update(pairs)["rm/loss"], abs=1e-5)
    assert moves == [str(on_device.rm.device), "cpu"] * 2  # there for each update, back after it
    assert stepped_on == [torch.device(device).type] * 2  # AdamW steps where the gradients are
    state = [t for s in on_device.optimizer.state.values() for k, t in s.items() if k != "step"]
    assert state and all(t.device.type == "cpu" for t in state + on_device.masters)  # between updates: the CPU
    ours, theirs = weights(on_device), weights(on_cpu)
    for name in ours:
        assert torch.allclose(ours[name], theirs[name], atol=1e-5, rtol=0), name


def test_an_optimizer_that_is_not_offloaded_is_never_moved(tiny_rm_path, monkeypatch):
    learner = RMLearner(VerifyRM.from_pretrained(tiny_rm_path, device="cpu"), lr=1e-2, batch_size=4,
                        optimizer_offload_step="device")  # on the device already: nothing to bring there
    monkeypatch.setattr(learner, "_move_optimizer", lambda to: pytest.fail("moved"))
    learner.update(demo_pairs(4))
    assert learner.updates == 1
