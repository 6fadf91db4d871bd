"""The RM learner's update schedule: mini-batches, epochs, warmup, dtype; and its checkpoint round trip."""

from __future__ import annotations

import pytest
import torch

from coreward.rm.learner import Pair, RMLearner
from coreward.rm.model import VerifyRM

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# verified-style positives and wrong negatives of the demo task's format
PAIRS = [Pair(f"{a}+{b}-1=", str(a + b - 1), f"{a}+{b}={a + b};{a + b}-1={a + b - 1};#{a + b - 1}",
              f"{a}+{b}={a + b + 1};{a + b + 1}-1={a + b};#{a + b}") for a, b in [(1, 2), (3, 4), (5, 6), (7, 1), (2, 8), (4, 4)]]


def learner(path, **settings) -> RMLearner:
    return RMLearner(VerifyRM.from_pretrained(path, device="cpu"), lr=1e-3, batch_size=4, **settings)


def weights(learner: RMLearner) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in learner.rm.model.named_parameters()}


def test_minibatches_and_epochs_set_the_number_of_optimizer_steps(tiny_rm_path):
    default = learner(tiny_rm_path)
    default.update(PAIRS)
    assert default.updates == 1  # None: all of a step's pairs in one step (today's behaviour)
    scheduled = learner(tiny_rm_path, minibatch_size=4, epochs=2)
    metrics = scheduled.update(PAIRS)
    assert scheduled.updates == 4  # 2 epochs × ceil(6 / 4) mini-batches
    assert 0 <= metrics["rm/train_pair_accuracy"] <= 1 and metrics["rm/lr"] == pytest.approx(1e-3)


def test_warmup_is_linear_over_the_runs_steps_then_constant(tiny_rm_path):
    warm = learner(tiny_rm_path, warmup_ratio=0.5, total_steps=4)  # 2 warmup steps: lr 0, lr/2, then lr
    before = weights(warm)
    assert warm.update(PAIRS)["rm/lr"] == pytest.approx(5e-4)  # the lr the next step will use
    for name, p in warm.rm.model.named_parameters():  # the first step ran at lr 0: only weight decay × 0
        assert torch.equal(p.detach(), before[name]), name
    assert warm.update([]) == {}  # a step without pairs is a step of the run: the warmup ends
    assert warm.optimizer.param_groups[0]["lr"] == pytest.approx(1e-3)
    assert warm.update(PAIRS)["rm/lr"] == pytest.approx(1e-3)
    assert learner(tiny_rm_path, warmup_ratio=0.5, total_steps=0).optimizer.param_groups[0]["lr"] == 1e-3


def test_checkpoint_carries_the_schedule(tiny_rm_path, tmp_path):
    settings = {"warmup_ratio": 0.5, "total_steps": 8, "minibatch_size": 2}
    first = learner(tiny_rm_path, **settings)
    first.update(PAIRS)
    first.save(tmp_path)
    second = RMLearner.load(tmp_path, "cpu", lr=1e-3, batch_size=4, **settings)
    assert second.optimizer.param_groups[0]["lr"] == first.optimizer.param_groups[0]["lr"] == pytest.approx(2.5e-4)
    assert (second.updates, second.skipped) == (first.updates, first.skipped) == (3, 0)
    first.update(PAIRS), second.update(PAIRS)  # same weights, moments and schedule: the same next step
    for (name, p), q in zip(first.rm.model.named_parameters(), second.rm.model.parameters()):
        assert torch.equal(p, q), name
    assert second.optimizer.param_groups[0]["lr"] == pytest.approx(5e-4)


def test_bfloat16_rm_learns_and_round_trips(tiny_rm_path, tmp_path):
    bf16 = learner(tiny_rm_path, rm_dtype="bfloat16")
    assert {p.dtype for p in bf16.rm.model.parameters()} == {torch.bfloat16}
    before = weights(bf16)
    metrics = bf16.update(PAIRS)
    assert bf16.updates == 1 and torch.isfinite(torch.tensor(metrics["rm/loss"]))
    assert any(not torch.equal(p.detach(), before[n]) for n, p in bf16.rm.model.named_parameters())
    bf16.save(tmp_path)
    loaded = RMLearner.load(tmp_path, "cpu", lr=1e-3, batch_size=4, rm_dtype="bfloat16")
    for (name, p), q in zip(bf16.rm.model.named_parameters(), loaded.rm.model.parameters()):
        assert q.dtype == torch.bfloat16 and torch.equal(p, q), name
    with pytest.raises(ValueError, match="rm_dtype must be one of"):
        learner(tiny_rm_path, rm_dtype="float16")
