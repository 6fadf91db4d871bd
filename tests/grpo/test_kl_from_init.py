"""kl/from_init: the policy's KL from its initial weights, logged every step (also when grpo.beta is 0)."""

from __future__ import annotations

import json

import pytest
import torch

from coreward.grpo.kl_from_init import frozen_copy, sequence_k3
from tests.helpers.runs import RULE_CONFIG, coreward_here, tiny_train_args


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _log_probs(model, ids):
    labels = ids.clone()
    labels[:, :1] = -100
    return model(input_ids=ids, labels=labels, fused_lm_head=True).log_probs


def test_frozen_copy_computes_with_its_own_weights(tiny_policy):
    """The copy is made from a policy that TRL has already patched (its `forward` closes over the policy, the
    trap issue 28 found in `copy.deepcopy`); changing the policy afterwards leaves the copy's outputs alone."""
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    policy = AutoModelForCausalLM.from_pretrained(tiny_policy)
    add_fused_lm_head(policy)
    copy = frozen_copy(policy)
    add_fused_lm_head(copy)
    ids = torch.tensor([[1, 5, 7, 9, 4, 3, 2]])
    with torch.no_grad():
        before_logits, before_logps = copy(input_ids=ids).logits, _log_probs(copy, ids)
        assert torch.allclose(before_logits, policy(input_ids=ids).logits)
        for param in policy.parameters():
            param.add_(0.05 * torch.randn_like(param))
        assert not torch.allclose(policy(input_ids=ids).logits, before_logits)  # the policy did move
        assert torch.equal(copy(input_ids=ids).logits, before_logits)
        assert torch.equal(_log_probs(copy, ids), before_logps)
    assert not any(p.requires_grad for p in copy.parameters())
    assert not any(a.data_ptr() == b.data_ptr() for a in copy.parameters() for b in policy.parameters())


def test_sequence_k3_is_zero_only_for_equal_policies():
    logps = torch.log(torch.tensor([[0.5, 0.25, 0.9], [0.1, 0.2, 0.3]]))
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    assert sequence_k3(logps, logps, mask).tolist() == [0.0, 0.0]
    moved = sequence_k3(logps, logps - 0.3, mask)
    assert (moved > 0).all()
    # masked tokens do not count: the first row has two tokens, each exp(-0.3) + 0.3 - 1
    assert moved[0].item() == pytest.approx(2 * (torch.exp(torch.tensor(-0.3)) + 0.3 - 1).item(), rel=1e-5)


def moving_args(policy, run_dir, tmp_path, *extra):
    """A tiny run whose policy moves every step: the entropy reward differs between any two completions (a rule
    reward on a tiny policy is all 0 or all 1 within a group, so GRPO would leave it where it is)."""
    config = tmp_path / "entropy.yaml"
    config.write_text(f"base: {RULE_CONFIG}\nrewards:\n  - name: entropy\n")
    args = tiny_train_args(policy, run_dir, "--set", "grpo.learning_rate=5e-3", *extra)
    args[args.index(str(RULE_CONFIG))] = str(config)
    return args


def _rows(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_beta_zero_run_logs_kl_from_init_from_a_frozen_copy(tiny_policy, tmp_path):
    """beta = 0 keeps no reference, so the frozen copy is used: KL 0 on step 1 (nothing has changed yet), then
    positive once the policy moved (a copy sharing the policy's weights would stay at 0)."""
    run = tmp_path / "run"
    result = coreward_here(*moving_args(tiny_policy, run, tmp_path, "--max-steps", "3"))
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [r for r in _rows(run) if "kl/from_init" in r]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[0]["kl/from_init"] == pytest.approx(0.0, abs=1e-5)
    assert all(r["kl/from_init"] > 1e-4 for r in rows[1:])
    for r in rows:  # the sequence KL sums what the per-token KL averages: it is at least as large (≥ 1 token)
        assert r["kl/from_init"] >= r["kl/from_init_per_token"] - 1e-7
        assert 0 <= r["verify/prompts_with_verified"] <= 1

    # stopped after step 2 and resumed: the copy is of the initial policy again, not of the checkpoint, so
    # step 3 measures the same distance as in the run that never stopped
    resumed = tmp_path / "resumed"
    first = coreward_here(*moving_args(tiny_policy, resumed, tmp_path, "--max-steps", "2"))
    assert first.returncode == 0, first.stderr[-3000:]
    again = coreward_here(*moving_args(tiny_policy, resumed, tmp_path, "--max-steps", "3", "--resume", "--allow-config-change"))
    assert again.returncode == 0, again.stderr[-3000:]
    step3 = [r for r in _rows(resumed) if r["step"] == 3 and "kl/from_init" in r]
    assert step3[-1]["kl/from_init"] == pytest.approx(rows[2]["kl/from_init"], rel=1e-3)

    # turned off: nothing logged, and the run is otherwise the same run (building the copy draws no random numbers)
    off = tmp_path / "off"
    result = coreward_here(*moving_args(tiny_policy, off, tmp_path, "--max-steps", "2", "--set", "kl_from_init=false"))
    assert result.returncode == 0, result.stderr[-3000:]
    off_rows = [r for r in _rows(off) if "reward" in r]
    assert not any("kl/from_init" in r for r in off_rows)
    assert [r["reward"] for r in off_rows] == pytest.approx([r["reward"] for r in rows[:2]], rel=1e-5)


def test_frozen_copy_agrees_with_trls_reference(tiny_policy, tmp_path):
    """With beta > 0 and `sync_ref_model` (which makes coreward stop trusting the reference, so the frozen copy
    is used) but a sync interval longer than the run, TRL's reference stays the initial policy: TRL's own
    per-token KL (`kl`, k3 on the same on-policy samples) must equal ours with the k3 estimator, computed from the
    copy with the policy's log-probabilities of the loss pass."""
    run = tmp_path / "run"
    result = coreward_here(*moving_args(tiny_policy, run, tmp_path, "--max-steps", "3",
                                       "--set", "grpo.beta=0.04", "--set", "grpo.sync_ref_model=true",
                                       "--set", "grpo.ref_model_sync_steps=1000", "--set", "kl_from_init_estimator=k3"))
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [r for r in _rows(run) if "kl/from_init" in r]
    assert len(rows) == 3 and rows[-1]["kl"] > 1e-4
    for r in rows:
        assert r["kl/from_init_per_token"] == pytest.approx(r["kl"], rel=1e-3, abs=1e-6)

