"""The pairwise learner's update schedule: mini-batches, epochs, warmup, dtype, and its checkpoint."""

from __future__ import annotations

import pytest
import torch

from coreward.rewards.cooper.learner import Pair, RMLearner
from coreward.rm.model import VerifyRM


PAIRS = [Pair(f"{a}+4", str(a + 4), f"#### {a + 4}", f"#### {a + 5}") for a in range(10)]


def learner(path, **schedule) -> RMLearner:
    return RMLearner(VerifyRM.from_pretrained(path, device="cpu"), lr=1e-3, batch_size=8, **schedule)


def test_minibatches_and_epochs_set_the_number_of_optimizer_steps(tiny_rm_path):
    one_step = learner(tiny_rm_path)
    one_step.update(PAIRS)
    assert one_step.updates == 1  # today's default: all of a step's pairs in one AdamW step
    authors = learner(tiny_rm_path, minibatch_size=4, epochs=2)
    metrics = authors.update(PAIRS)
    assert authors.updates == 2 * 3  # 10 pairs in mini-batches of 4 (4, 4, 2), twice
    assert 0.0 <= metrics["rm/train_pair_accuracy"] <= 1.0 and metrics["rm/loss"] > 0


def test_warmup_is_linear_over_the_first_fraction_of_the_run_then_constant(tiny_rm_path):
    warm = learner(tiny_rm_path, warmup_ratio=0.1)
    assert [warm.set_learning_rate(step, 100) for step in (0, 4, 9, 50)] == pytest.approx([1e-4, 5e-4, 1e-3, 1e-3])
    assert learner(tiny_rm_path).set_learning_rate(0, 100) == pytest.approx(1e-3)


def test_schedule_state_survives_a_checkpoint_and_bf16_weights_load(tiny_rm_path, tmp_path):
    first = learner(tiny_rm_path, minibatch_size=4, epochs=2)
    first.update(PAIRS)
    first.save(tmp_path)
    resumed = RMLearner.load(tmp_path, "cpu", dtype="bfloat16", lr=1e-3, batch_size=8, minibatch_size=4, epochs=2)
    assert (resumed.updates, resumed.calls) == (first.updates, first.calls) == (6, 1)
    assert next(resumed.rm.model.parameters()).dtype == torch.bfloat16
    assert resumed.update(PAIRS)["rm/skipped_updates"] == 0.0


@pytest.mark.parametrize("offload", [False, True])
def test_a_step_without_pairs_moves_the_rm_only_when_asked_like_the_authors(tiny_rm_path, offload):
    """The authors mask invalid pairs out of the loss and still step: AdamW on a zero gradient, where weight
    decay and the moments of earlier steps move the weights. coreward's default leaves the RM as it is."""
    def weights(learner):
        return {n: p.detach().clone() for n, p in learner.rm.model.named_parameters()}

    ours = learner(tiny_rm_path, optimizer_offload=offload)
    authors = learner(tiny_rm_path, optimizer_offload=offload, step_without_pairs=True, epochs=2)
    for each in (ours, authors):
        each.update(PAIRS)
    before = weights(ours)
    assert ours.update([]) == {} and ours.updates == 1
    assert all(torch.equal(p, before[n]) for n, p in weights(ours).items())
    before = weights(authors)
    metrics = authors.update([])
    assert authors.updates == 2 + 2 and metrics["rm/lr"] == pytest.approx(1e-3)  # 2 epochs on the pairs, then 2 zero-gradient steps
    moved = weights(authors)
    assert any(not torch.equal(moved[n], before[n]) for n in moved)
    for n in moved:  # the step goes *with* the moments: no larger than lr·(1 + decay) per weight, and finite
        assert torch.isfinite(moved[n]).all() and (moved[n] - before[n]).abs().max() <= 2 * 2e-3, n
    assert all(p.grad is None for p in authors.rm.model.parameters())


def _rm_update(path, dtype: str, steps: int = 3, **settings) -> tuple[float, float, RMLearner]:
    """`steps` updates at Cooper's lr 1e-5: ‖θ_after − θ_before‖ of the weights the optimizer updates (the float32
    masters where there are some, else the weights themselves) and the share of the weights that changed."""
    from coreward.runtime.precision import update_norm

    rm = VerifyRM.from_pretrained(path, device="cpu", dtype=dtype)
    taught = RMLearner(rm, lr=1e-5, batch_size=8, **settings)
    updated = lambda: dict(enumerate(taught.optimized))  # noqa: E731
    before = {i: t.detach().clone() for i, t in updated().items()}
    for _ in range(steps):
        taught.update(PAIRS)
    after = {i: t.detach() for i, t in updated().items()}
    changed = sum(int((after[i] != before[i]).sum()) for i in before) / sum(t.numel() for t in before.values())
    return update_norm(before, after), changed, taught


def test_a_bf16_rm_learns_as_fp32_through_float32_masters_and_the_authors_pure_bf16_does_not(tiny_rm_path, tmp_path):
    """Cooper's RM at its lr 1e-5: bf16 weights with float32 masters (the default) move as far as float32 weights
    (0.5-2x); stepped in place (`master_weights: none`, the authors' bf16 RM) most weights never move: their
    updates are below half a bf16 rounding step and round away."""
    reference, changed_fp32, _ = _rm_update(tiny_rm_path, "float32")
    mastered, changed_mastered, taught = _rm_update(tiny_rm_path, "bfloat16")
    _, changed_pure, _ = _rm_update(tiny_rm_path, "bfloat16", master_weights="none")
    assert reference > 0 and 0.5 <= mastered / reference <= 2.0, (mastered, reference)
    assert changed_fp32 > 0.9 and changed_mastered > 0.9 and changed_pure < 0.5, (changed_fp32, changed_mastered, changed_pure)
    assert next(taught.rm.model.parameters()).dtype == torch.bfloat16  # scoring stays on bf16 weights
    # a checkpoint keeps the masters, not their bf16 rounding: the resumed learner continues from them
    taught.save(tmp_path)
    resumed = RMLearner.load(tmp_path, "cpu", dtype="bfloat16", lr=1e-5, batch_size=8)
    assert all(torch.equal(a, b) for a, b in zip(resumed.masters, taught.masters))
    assert any(not torch.equal(m.to(torch.bfloat16).float(), m) for m in resumed.masters)  # finer than bf16
