"""TRL's fused log-probability head made compact on a CPU (grpo/fused_head.py): it projects the completion positions
only, and every scored token's log-probability and every gradient are what TRL's full projection gives."""

from __future__ import annotations

import pytest
import torch
import trl.trainer.utils as trl_utils

from coreward.grpo.fused_head import compact_on_cpu
from tests.grpo.test_shared_prompts import tiny_causal_lm


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def scored_pass(model, ids, mask, labels):
    """Per-token log-probabilities and entropies as TRL's loss reads them, and every parameter's gradient of a loss
    that weighs each scored token differently (so a misplaced token changes it)."""
    model.zero_grad()
    out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    weights = torch.linspace(0.5, 1.5, out.log_probs.numel()).view_as(out.log_probs)
    (out.log_probs * weights).sum().backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return out.log_probs.detach(), out.entropy.detach(), grads


def test_compact_head_scores_completions_only_with_the_full_heads_values(monkeypatch):
    model = tiny_causal_lm()
    ids = torch.randint(1, 300, (4, 20))
    mask = torch.ones_like(ids)
    mask[0, :5] = 0  # a left-padded prompt
    mask[2, 17:] = 0  # a completion ended early (right padding)
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :12] = -100  # the prompt: 12 positions, the completion 8
    scored = int((labels[:, 1:] != -100).sum())

    class Counting(torch.autograd.Function):  # records how many positions reach the head's projection
        rows: list[int] = []

        @staticmethod
        def apply(hidden, *args):
            Counting.rows.append(hidden.shape[0])
            return shipped_function.apply(hidden, *args)

    shipped_function = trl_utils._ChunkedLogProbFunction
    monkeypatch.setattr(trl_utils, "_ChunkedLogProbFunction", Counting)
    monkeypatch.setattr(trl_utils, "_use_triton", trl_utils._use_triton)  # undone after the test
    assert compact_on_cpu() and compact_on_cpu()  # idempotent
    compact = scored_pass(model, ids, mask, labels)
    monkeypatch.setattr(trl_utils, "_use_triton", trl_utils._use_triton.shipped)
    full = scored_pass(model, ids, mask, labels)

    assert Counting.rows == [scored, 4 * 19]  # compact: the labelled positions; TRL on a CPU: every position
    assert scored < 4 * 19 / 2
    torch.testing.assert_close(compact[0], full[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(compact[1], full[1], rtol=1e-5, atol=1e-5)
    assert (compact[0] != 0).sum() == scored  # every scored token has its value, the rest 0 as TRL fills them
    assert compact[2].keys() == full[2].keys() and len(full[2]) > 5
    for name, grad in full[2].items():
        torch.testing.assert_close(compact[2][name], grad, rtol=1e-4, atol=1e-6, msg=name)
