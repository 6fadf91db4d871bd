"""Co-rewarding-I's micro-batches hold both views in equal numbers, the k-th question row beside the k-th
rephrasing row, as the authors' `update_policy` zips a micro-batch of each view (Co-rewarding-I dp_actor.py):
each micro-batch's per-view loss then has rows of both views to average over."""

from __future__ import annotations

from pathlib import Path

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


def test_training_micro_batches_are_view_balanced(tiny_policy, tmp_path, monkeypatch):
    """A real Co-rewarding-I run, 2 micro-batches per generation batch: each micro-batch the loss sees holds half
    questions then half rephrasings (TRL's plain shuffle gives unbalanced, mixed ones)."""
    from coreward.grpo.config import TrainConfig
    from coreward.grpo.train import run_training
    from coreward.grpo.trainer import CorewardGRPOTrainer
    from coreward.runtime.config import load_config

    seen: list[list[int]] = []
    compute_loss = CorewardGRPOTrainer._compute_loss

    def recorded(self, model, inputs):
        seen.append(inputs["view"].tolist())
        return compute_loss(self, model, inputs)

    monkeypatch.setattr(CorewardGRPOTrainer, "_compute_loss", recorded)
    config = load_config(TrainConfig, REPO / "configs" / "demo" / "co_rewarding_1.yaml", [
        f"model.name_or_path={tiny_policy}", "grpo.per_device_train_batch_size=16", "grpo.gradient_accumulation_steps=2",
        "grpo.max_completion_length=8", "data.eval_every=0", "grpo.save_steps=100"])
    run_training(config, output_dir=str(tmp_path / "run"), max_steps=2)
    assert len(seen) == 4  # 2 steps × 2 micro-batches
    for views in seen:
        assert views == [0] * 8 + [1] * 8, views  # half and half, the questions' rows beside their rephrasings'

