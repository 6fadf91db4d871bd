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



# --------------------------------------------------------------------------- the exact estimator
def _direct_kl(policy, init, prompt_ids, completion_ids, temperature):
    """Σ_t Σ_v π log(π/π_init) of each completion from the two models' whole logits, one completion at a time (no
    padding, no chunking, no hidden states: independent of how the trainer computes it)."""
    kls = []
    with torch.no_grad():
        for prompt, completion in zip(prompt_ids, completion_ids):
            ids = torch.tensor([list(prompt) + list(completion)])
            # the logits at position i predict token i+1: the completion's tokens from the prompt's last position on
            at = slice(len(prompt) - 1, len(prompt) - 1 + len(completion))
            log_p = torch.log_softmax(policy(input_ids=ids).logits[0, at] / temperature, dim=-1)
            log_q = torch.log_softmax(init(input_ids=ids).logits[0, at] / temperature, dim=-1)
            kls.append((log_p.exp() * (log_p - log_q)).sum().item())
    return kls


def test_token_kl_is_the_whole_vocabulary_kl_in_any_chunking(tiny_policy):
    """`token_kl` from the hidden states kept during TRL's fused log-probability pass equals the KL of the two
    models' whole logits divided by the temperature, whatever the piece size; it is 0 for a model against itself
    and > 0 against a moved copy; masked positions are 0."""
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from coreward.grpo.kl_from_init import completion_hidden_states, token_kl

    policy, init = (AutoModelForCausalLM.from_pretrained(tiny_policy) for _ in range(2))
    torch.manual_seed(0)
    with torch.no_grad():
        for param in policy.parameters():
            param.add_(0.05 * torch.randn_like(param))
    for model in (policy, init):
        add_fused_lm_head(model, temperature=0.7)
    ids, width = torch.randint(0, policy.config.vocab_size, (3, 10)), 6
    mask = torch.ones(3, width)
    mask[0, 4:] = 0
    labels = ids.masked_fill(torch.arange(10) < 10 - width, -100)
    hidden = {}
    with torch.no_grad():
        for name, model in (("policy", policy), ("init", init)):
            with completion_hidden_states(model, width) as kept:
                model(input_ids=ids, labels=labels, fused_lm_head=True)
            hidden[name] = kept[-1]
    kl = token_kl(hidden["policy"], policy, hidden["init"], init, mask, temperature=0.7)
    one_position_a_piece = token_kl(hidden["policy"], policy, hidden["init"], init, mask, temperature=0.7,
                                    max_logit_elements=1)
    direct = [_direct_kl(policy, init, [row[: 10 - width]], [row[10 - width :][:n]], 0.7)[0]
              for row, n in zip(ids.tolist(), mask.sum(1).int().tolist())]
    assert kl.sum(1).tolist() == pytest.approx(direct, rel=1e-4)
    assert torch.allclose(one_position_a_piece, kl, rtol=1e-5, atol=1e-7)
    assert (kl[mask.bool()] > 0).all() and (kl[~mask.bool()] == 0).all()
    assert (token_kl(hidden["init"], init, hidden["init"], init, mask, temperature=0.7) == 0).all()


@pytest.fixture(scope="module")
def held_still_run(tiny_policy, tmp_path_factory):
    """A policy held still (learning rate 0) for 8 steps, 16 completions each: every weight of tiny_policy moved by
    0.1·N(0, 1), with tiny_policy itself as π_init in place of the trainer's frozen copy. Each step's KL is the
    same quantity measured on new samples, so all that moves between steps is the estimators' noise.
    Returns (logged rows, the last step's samples, the sampling temperature, the policy's path)."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig
    from trl.trainer.utils import add_fused_lm_head

    from coreward.data.synthetic import load_demo
    from coreward.grpo.trainer import CorewardGRPOTrainer
    from coreward.rewards.rule import RuleReward
    from coreward.verify.verifier import Verifier

    policy_dir = tmp_path_factory.mktemp("moved_policy")
    moved = AutoModelForCausalLM.from_pretrained(tiny_policy)
    torch.manual_seed(0)
    with torch.no_grad():
        for param in moved.parameters():
            param.add_(0.1 * torch.randn_like(param))
    moved.save_pretrained(policy_dir)
    AutoTokenizer.from_pretrained(tiny_policy).save_pretrained(policy_dir)

    dataset = Dataset.from_list([{"prompt": r.question, "answer": r.answer} for r in load_demo("train", limit=4)])
    args = GRPOConfig(output_dir=str(tmp_path_factory.mktemp("held_still")), num_generations=8,
                      per_device_train_batch_size=16, max_completion_length=12, temperature=0.8, max_steps=8,
                      learning_rate=0.0, use_cpu=True, bf16=False, report_to="none", save_strategy="no", seed=5,
                      remove_unused_columns=False, disable_tqdm=True, logging_steps=1)
    with Verifier(num_workers=1) as verifier:
        trainer = CorewardGRPOTrainer(model=str(policy_dir), args=args, train_dataset=dataset,
                                      processing_class=AutoTokenizer.from_pretrained(policy_dir),
                                      reward_sources=[RuleReward()], verifier=verifier)
        assert (trainer.kl_init_source, trainer.kl_estimator) == ("copy", "exact")
        init = AutoModelForCausalLM.from_pretrained(tiny_policy).requires_grad_(False)
        add_fused_lm_head(init, temperature=args.temperature)  # as the trainer prepares its own copy
        trainer.kl_init_model = init
        trainer.train()
    rows = [row for row in trainer.state.log_history if "kl/from_init" in row]
    return rows, trainer.last_batch, args.temperature, policy_dir


def test_exact_kl_equals_the_kl_of_the_two_models_logits_on_the_steps_samples(held_still_run, tiny_policy):
    """The last step's logged kl/from_init is the mean over its completions of the KL summed over each completion,
    computed here from the two models' whole logits at the sampling temperature; every step's value is ≥ 0."""
    from transformers import AutoModelForCausalLM

    rows, batch, temperature, policy_dir = held_still_run
    assert len(rows) == 8 and all(row["kl/from_init"] >= 0 and row["kl/from_init_k3"] >= 0 for row in rows)
    policy, init = (AutoModelForCausalLM.from_pretrained(path) for path in (policy_dir, tiny_policy))
    direct = _direct_kl(policy, init, batch.prompt_ids, batch.completion_ids, temperature)
    assert rows[-1]["kl/from_init"] == pytest.approx(sum(direct) / len(direct), rel=1e-4)
    tokens = sum(len(c) for c in batch.completion_ids)
    assert rows[-1]["kl/from_init_per_token"] == pytest.approx(sum(direct) / tokens, rel=1e-4)


def test_exact_kl_moves_less_from_step_to_step_than_k3(held_still_run):
    """Rao-Blackwellization: each KL_t is k3_t's expectation over the sampled token given its prefix, so over the
    same steps' samples the exact values spread less (a property of the estimators, not of a trajectory: the
    policy is held still; 1.3-5x less on each of seeds 1-10). Both estimate the same KL: their means agree (within
    11% on those seeds; k3's rare large values make its mean the rougher one)."""
    import statistics

    rows, _, _, _ = held_still_run
    exact, k3 = [row["kl/from_init"] for row in rows], [row["kl/from_init_k3"] for row in rows]

    def mean_step(values):
        return statistics.mean(abs(b - a) for a, b in zip(values, values[1:]))

    assert mean_step(exact) < mean_step(k3)
    assert statistics.pstdev(exact) < statistics.pstdev(k3)
    assert statistics.mean(exact) == pytest.approx(statistics.mean(k3), rel=0.25)


def test_every_source_of_pi_init_gives_the_same_exact_kl(tiny_policy, tmp_path):
    """One run (beta 0.04, the policy moving) with π_init read from TRL's reference ("reference") and from a frozen
    copy ("copy": `sync_ref_model` with an interval past the run's end, so TRL's reference is still the initial
    policy): the same exact KL at every step. A LoRA policy's π_init is its base, adapter off ("adapter_off"):
    0 before its first update (PEFT starts B at 0), > 0 after."""
    runs = {}
    for name, extra in (("reference", ()), ("copy", ("--set", "grpo.sync_ref_model=true",
                                                     "--set", "grpo.ref_model_sync_steps=1000"))):
        run = tmp_path / name
        result = coreward_here(*moving_args(tiny_policy, run, tmp_path, "--max-steps", "3", "--set", "grpo.beta=0.04",
                                            *extra))
        assert result.returncode == 0, result.stderr[-3000:]
        runs[name] = [r for r in _rows(run) if "kl/from_init" in r]
    assert [r["kl/from_init"] for r in runs["copy"]] == pytest.approx([r["kl/from_init"] for r in runs["reference"]],
                                                                        rel=1e-4, abs=1e-7)
    assert runs["reference"][-1]["kl/from_init"] > 1e-4

    lora = tmp_path / "lora"
    result = coreward_here(*moving_args(tiny_policy, lora, tmp_path, "--max-steps", "2", "--set", "lora.enabled=true",
                                        "--set", "lora.r=4"))
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [r for r in _rows(lora) if "kl/from_init" in r]
    assert rows[0]["kl/from_init"] == pytest.approx(0.0, abs=1e-6) and rows[1]["kl/from_init"] > 1e-6


def test_the_loss_pass_gives_the_same_exact_kl_as_a_pass_of_its_own(tiny_policy, tmp_path, monkeypatch):
    """The exact KL reads the policy's hidden states from the loss's own pass where π_init's hidden states fit
    (`KEEP_INIT_HIDDEN_BYTES`), saving a forward pass a step; with the budget at 0 it runs the policy's no-grad pass
    at scoring time as ZeRO-3 and FSDP2 runs do. On the same moving run, both give the same kl/from_init and k3 at
    every step, and the run itself is the same (the metric draws no random numbers either way)."""
    import coreward.grpo.trainer as trainer_module

    runs = {}
    for name, budget in (("loss_pass", trainer_module.KEEP_INIT_HIDDEN_BYTES), ("own_pass", 0)):
        monkeypatch.setattr(trainer_module, "KEEP_INIT_HIDDEN_BYTES", budget)
        run = tmp_path / name
        result = coreward_here(*moving_args(tiny_policy, run, tmp_path, "--max-steps", "3"))
        assert result.returncode == 0, result.stderr[-3000:]
        runs[name] = [r for r in _rows(run) if "kl/from_init" in r]
    assert all("time/kl_from_init_in_loss" in r for r in runs["loss_pass"])
    assert not any("time/kl_from_init_in_loss" in r for r in runs["own_pass"])
    # the two passes round differently where a CPU's kernels differ with and without autograd (an AMD EPYC moved the
    # step-3 KL of 0.545 by 1.3e-4); a KL from the wrong states (the policy's own, π_init's stale) is off by its size
    for key, rel in (("kl/from_init", 2e-3), ("kl/from_init_k3", 2e-3), ("reward", 1e-4)):
        assert [r[key] for r in runs["loss_pass"]] == pytest.approx([r[key] for r in runs["own_pass"]], rel=rel,
                                                                     abs=1e-7), key
    assert runs["loss_pass"][-1]["kl/from_init"] > 1e-4
