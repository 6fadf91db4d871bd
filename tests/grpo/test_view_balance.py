"""Co-rewarding-I's micro-batches hold both views in equal numbers, each question row beside its rephrasing's row.
The authors zip the k-th micro-batch of questions with the k-th of rephrasings, each view balanced on its own
(Co-rewarding-I dp_actor.py, ray_trainer.py `_balance_batch`); with each view's loss a token mean per micro-batch,
which rephrasings share a micro-batch with which questions does not change the step's loss (shown below)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from coreward.grpo.samplers import balanced_view_shuffle


REPO = Path(__file__).resolve().parents[2]


def test_balanced_view_shuffle_gives_every_micro_batch_both_views_and_keeps_rows_together():
    G, pairs, chunks = 4, 3, 3  # three pairs: [q]×G + [q']×G each
    views = torch.tensor(([0] * G + [1] * G) * pairs)
    rows = torch.arange(len(views))
    batch = {"view": views, "row": rows, "text": [f"r{i}" for i in range(len(views))], "scalar": torch.tensor(1.0),
             "none": None}
    out = balanced_view_shuffle(batch, chunks)
    assert sorted(out["row"].tolist()) == rows.tolist()  # a permutation
    assert out["text"] == [f"r{i}" for i in out["row"].tolist()] and out["scalar"] is batch["scalar"] and out["none"] is None
    assert torch.equal(out["view"], views[out["row"]])  # every field moved with its row
    size = len(views) // chunks
    for j in range(chunks):
        chunk = out["view"][j * size:(j + 1) * size]
        assert (chunk == 0).sum() == (chunk == 1).sum() == size // 2
    questions, rephrasings = (torch.nonzero(views == v).flatten() for v in (0, 1))
    rank = {int(r): k for k, r in enumerate(questions)} | {int(r): k for k, r in enumerate(rephrasings)}
    for j in range(chunks):  # the k-th question row of the batch beside the k-th rephrasing row
        chunk = out["row"][j * size:(j + 1) * size].tolist()
        assert [rank[r] for r in chunk[: size // 2]] == [rank[r] for r in chunk[size // 2:]]
    # what can't be balanced is left to TRL's shuffle
    assert balanced_view_shuffle({"view": torch.tensor([0, 0, 1])}, 1) is None
    assert balanced_view_shuffle({"row": rows}, 2) is None


@pytest.fixture(scope="module")
def per_view_run(tiny_policy, tmp_path_factory):
    """A real Co-rewarding-I run with the authors' loss (each view's token mean, the two summed): 2 steps of 2
    micro-batches of 16 rows each; the trainer, and every micro-batch the loss was given."""
    from coreward.grpo.config import TrainConfig
    from coreward.grpo.train import run_training
    from coreward.grpo.trainer import CorewardGRPOTrainer
    from coreward.runtime.config import load_config

    seen: list[dict] = []
    compute_loss = CorewardGRPOTrainer._compute_loss

    def recorded(self, model, inputs):
        seen.append({k: v.detach().clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()})
        return compute_loss(self, model, inputs)

    config = load_config(TrainConfig, REPO / "configs" / "demo" / "co_rewarding_1.yaml", [
        f"model.name_or_path={tiny_policy}", "grpo.per_device_train_batch_size=16", "grpo.gradient_accumulation_steps=2",
        "grpo.max_completion_length=8", "data.eval_every=0", "grpo.save_steps=100",
        "rewards.0.params.view_loss=per_view", "grpo.loss_type=bnpo"])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(CorewardGRPOTrainer, "_compute_loss", recorded)
        result = run_training(config, output_dir=str(tmp_path_factory.mktemp("co1") / "run"), max_steps=2)
    return result.trainer, seen


def test_training_micro_batches_are_view_balanced(per_view_run):
    """Each micro-batch the loss sees holds half questions then half rephrasings (TRL's plain shuffle gives
    unbalanced, mixed ones)."""
    _, seen = per_view_run
    assert len(seen) == 4  # 2 steps × 2 micro-batches
    for inputs in seen:
        assert inputs["view"].tolist() == [0] * 8 + [1] * 8  # half and half, the questions' rows beside their rephrasings'


def test_the_per_view_loss_does_not_depend_on_which_rephrasings_share_a_micro_batch(per_view_run):
    """The authors zip the k-th micro-batch of questions with the k-th of rephrasings, balanced apart, so a micro-batch
    holds unrelated questions and rephrasings; coreward keeps each question beside its rephrasing. The step's loss is
    Σ_k [mean_{t∈Q_k} ℓ_t + mean_{t∈R_k} ℓ_t] / K (bnpo per view per micro-batch): the views' terms add up separately,
    so pairing Q_k with R_k or with R_k' gives the same loss and gradient. Which rows of one view share a micro-batch
    does change it (each token weighs 1 / the tokens of its view in its micro-batch): that is where coreward (random
    rows) and the authors (rows in order, balanced by length across GPUs) differ (docs/fidelity.md)."""
    trainer, seen = per_view_run
    step = {k: torch.cat([m[k] for m in seen[:2]]) if isinstance(v, torch.Tensor) and v.dim() > 0 else v
            for k, v in seen[0].items()}  # the first step's generation batch, as its two micro-batches held it
    size, width = step["view"].shape[0], step["completion_mask"].shape[1]
    step.pop("old_per_token_logps", None)  # on-policy: ratio 1, so each token's loss is -(its advantage)
    # varied lengths and advantages, so that how tokens are grouped shows in the loss
    lengths = [1 + (3 * i) % width for i in range(size)]
    step["completion_mask"] = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).to(step["completion_mask"].dtype)
    advantages = [(-1) ** i * (1 + i % 3) for i in range(size)]
    step["advantages"] = torch.tensor(advantages, dtype=step["advantages"].dtype)
    q, r = (torch.nonzero(step["view"] == v).flatten().tolist() for v in (0, 1))
    assert step["view"].tolist() == ([0] * 8 + [1] * 8) * 2 and len(q) == len(r) == 16
    steps = trainer.current_gradient_accumulation_steps

    def expected(micro_batches: list[list[int]]) -> float:
        return sum(-sum(advantages[i] * lengths[i] for i in view) / sum(lengths[i] for i in view) / steps
                   for rows in micro_batches for view in (rows[:8], rows[8:]))

    def loss_and_gradient(micro_batches: list[list[int]]) -> tuple[float, torch.Tensor]:
        model = trainer.model
        model.train()
        model.zero_grad()
        total = 0.0
        for rows in micro_batches:
            index = torch.tensor(rows)
            inputs = {k: v[index] if isinstance(v, torch.Tensor) and v.dim() > 0 and v.shape[0] == size else v
                      for k, v in step.items()}
            loss = trainer._compute_loss(model, inputs)
            loss.backward()
            total += loss.item()
        return total, torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])

    paired = [q[:8] + r[:8], q[8:] + r[8:]]  # coreward's: each question row beside its rephrasing's row
    unrelated = [q[:8] + r[8:], q[8:] + r[:8]]  # the authors' zip: the k-th micro-batch of each view, unrelated
    regrouped = [q[:7] + q[8:9] + r[:8], q[9:] + q[7:8] + r[8:]]  # one question row moved to the other micro-batch
    (loss_p, grad_p), (loss_u, grad_u), (loss_g, grad_g) = map(loss_and_gradient, (paired, unrelated, regrouped))
    assert expected(paired) == pytest.approx(expected(unrelated), abs=1e-12)
    assert loss_p == pytest.approx(expected(paired), abs=1e-5) and loss_u == pytest.approx(expected(unrelated), abs=1e-5)
    torch.testing.assert_close(grad_u, grad_p, rtol=1e-5, atol=1e-7)  # same gradient, up to float summation order
    assert abs(expected(regrouped) - expected(paired)) > 0.05  # another grouping within a view: another loss
    assert loss_g == pytest.approx(expected(regrouped), abs=1e-5)
    assert not torch.allclose(grad_g, grad_p, rtol=1e-3, atol=1e-6)
