"""The update's micro-batches grouped by length and cut to their own width (grpo/micro_batches.py): the same optimizer
step's gradient as TRL's random cut, over fewer tokens."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import TrainerCallback

from coreward.grpo.micro_batches import groups_exactly, length_grouped, trim_padding


pytestmark = pytest.mark.usefixtures("one_torch_thread")

REPO = Path(__file__).resolve().parents[2]


def padded_batch(prompt_lengths: list[int], completion_lengths: list[int], prompt_width: int = 6,
                 completion_width: int = 8) -> dict:
    """A generation batch as TRL holds it: prompts left-padded, completions right-padded, a row's tokens = its index."""
    rows = len(prompt_lengths)
    prompt_mask = torch.zeros(rows, prompt_width, dtype=torch.long)
    completion_mask = torch.zeros(rows, completion_width, dtype=torch.long)
    for row, (p, c) in enumerate(zip(prompt_lengths, completion_lengths)):
        prompt_mask[row, prompt_width - p:] = 1
        completion_mask[row, :c] = 1
    ids = torch.arange(rows).view(-1, 1)
    return {"prompt_ids": prompt_mask * (100 + ids), "prompt_mask": prompt_mask,
            "completion_ids": completion_mask * (200 + ids), "completion_mask": completion_mask,
            "old_per_token_logps": completion_mask * -1.0 * (ids + 1), "advantages": ids.flatten().float(),
            "num_items_in_batch": completion_mask.sum(), "prompt_text": [f"row {i}" for i in range(rows)]}


def test_rows_are_grouped_by_length_with_every_field_kept_in_step():
    batch = padded_batch([3, 5, 2, 6], [8, 1, 4, 1])
    grouped = length_grouped(batch)
    assert grouped["completion_mask"].sum(dim=1).tolist() == [1, 1, 4, 8]
    assert grouped["prompt_text"] == ["row 1", "row 3", "row 2", "row 0"]  # stable: row 1 before row 3
    for field in ("prompt_ids", "completion_ids", "old_per_token_logps", "advantages"):
        assert torch.equal(grouped[field], batch[field][[1, 3, 2, 0]])
    assert torch.equal(grouped["num_items_in_batch"], batch["num_items_in_batch"])


def test_a_micro_batch_loses_only_the_columns_all_its_rows_pad():
    micro = padded_batch([3, 2], [1, 4])  # prompts 6 wide (longest 3), completions 8 wide (longest 4)
    cut = trim_padding(micro)
    assert cut["prompt_ids"].shape == (2, 3) and cut["completion_ids"].shape == (2, 4)
    assert cut["old_per_token_logps"].shape == (2, 4)
    for field in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "old_per_token_logps"):
        assert cut[field].sum() == micro[field].sum()  # every real token (and its value) kept
    assert torch.equal(cut["advantages"], micro["advantages"]) and cut["prompt_text"] == micro["prompt_text"]
    full = padded_batch([6, 6], [8, 2])
    assert trim_padding(full) is full  # nothing to cut


def test_grouping_is_refused_where_it_would_change_the_step():
    args = SimpleNamespace(loss_type="dapo", steps_per_generation=4, gradient_accumulation_steps=4,
                           top_entropy_quantile=1.0)
    assert groups_exactly(args, paired_views=False) is None
    assert groups_exactly(SimpleNamespace(**{**vars(args), "loss_type": "bnpo"}), False)
    assert groups_exactly(SimpleNamespace(**{**vars(args), "steps_per_generation": 8}), False)
    assert groups_exactly(SimpleNamespace(**{**vars(args), "top_entropy_quantile": 0.2}), False)
    assert groups_exactly(args, paired_views=True)


class FirstStep(TrainerCallback):
    """The adapters' gradient before the first optimizer step, and the width of every sequence the update passed."""

    def __init__(self):
        self.gradient: dict[str, torch.Tensor] = {}
        self.update_tokens = 0

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        def count(module, call_args, call_kwargs):
            ids = call_kwargs.get("input_ids", call_args[0] if call_args else None)
            if torch.is_grad_enabled() and module.training and ids is not None:
                self.update_tokens += ids.numel()
        # the backbone, which every pass runs once (a shared prompt's pass runs it on the prompts, then on the rows)
        causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
        causal_lm.base_model.register_forward_pre_hook(count, with_kwargs=True)

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        if not self.gradient:
            self.gradient = {name: param.grad.detach().clone() for name, param in model.named_parameters()
                             if param.grad is not None}


def first_step(tmp_path: Path, micro_batches: str) -> FirstStep:
    from coreward.grpo.config import TrainConfig
    from coreward.grpo.train import run_training
    from coreward.runtime.config import load_config

    probe = FirstStep()
    config = load_config(TrainConfig, REPO / "configs" / "demo" / "rule.yaml", [
        "lora.enabled=true", "lora.dropout=0.0", "grpo.per_device_train_batch_size=8",
        "grpo.gradient_accumulation_steps=4", "data.eval_every=0", "grpo.save_steps=100", "kl_from_init=false",
        "torch_threads=1", f"micro_batches={micro_batches}"])
    run_training(config, output_dir=str(tmp_path / micro_batches), max_steps=1, extra_callbacks=[probe])
    return probe


def test_grouped_micro_batches_give_trls_gradient_over_fewer_tokens(tmp_path):
    by_prompt, by_length, random = (first_step(tmp_path, cut) for cut in ("by_prompt", "by_length", "random"))
    total = sum(float(g.abs().sum()) for g in random.gradient.values())
    assert total > 0  # the step learned something: a gradient to compare
    for grouped in (by_length, by_prompt):
        assert grouped.gradient.keys() == random.gradient.keys() and grouped.gradient
        difference = sum(float((grouped.gradient[k] - g).abs().sum()) for k, g in random.gradient.items())
        assert difference <= 1e-4 * total, (difference, total)  # summation order only
    # each prompt once (its 8 completions share it), then each row's completion: fewer tokens than by length
    assert by_prompt.update_tokens < by_length.update_tokens < random.update_tokens, \
        (by_prompt.update_tokens, by_length.update_tokens, random.update_tokens)
