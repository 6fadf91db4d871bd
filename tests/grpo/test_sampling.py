"""Rollouts from a sampling copy (runtime/sampling.py): the copy holds the policy's current weights, LoRA merged, and
samples what the policy would; an EMA teacher's rollouts come from the teacher's weights; the copy's log-probabilities
of its samples are what the trainer computes (`sampling/logprob_mismatch/*`), and a copy left stale shows there.

With float32 weights and no dropout the copy computes the policy's own function (W + s·BA merged once instead of
added at every token), so the mismatch is rounding: a few 1e-6 nats per token. A copy that stops following the
policy (the negative control) is off by the policy's update at the learning rate below: many times more."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from coreward.runtime.sampling import SamplingCopy, plan_sampling, sample_token_ids


pytestmark = pytest.mark.usefixtures("one_torch_thread")

REPO = Path(__file__).resolve().parents[2]
MISMATCH = "sampling/logprob_mismatch/mean"
SYNCED = 1e-4  # mean |Δ log p| per token of a float32 copy holding the policy's weights (rounding only)


def lora_policy(path: Path, seed: int = 0):
    """The tiny policy with LoRA adapters whose B is not zero (a fresh adapter merges to nothing), in eval mode."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(path),
                           LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear"))
    for name, param in model.named_parameters():
        if "lora_B" in name:
            param.data.normal_(0, 0.05)
    return model.eval()


def logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits.float()


def test_the_copy_is_the_policys_function_and_follows_its_updates(tiny_policy):
    policy = lora_policy(tiny_policy)
    ids = torch.randint(3, 30, (2, 12))
    sampler = SamplingCopy(torch.float32)
    copy = sampler.follow(policy, version=0)
    assert not any(hasattr(m, "lora_A") for m in copy.modules())  # merged: a plain model
    assert torch.allclose(logits(copy, ids), logits(policy, ids), atol=1e-5)
    with torch.no_grad():  # an optimizer step moves the adapters
        for name, param in policy.named_parameters():
            if "lora_" in name:
                param.add_(torch.randn_like(param) * 0.05)
    assert not torch.allclose(logits(copy, ids), logits(policy, ids), atol=1e-3)
    assert sampler.follow(policy, version=0) is copy and sampler.syncs == 1  # same version: not written again
    sampler.follow(policy, version=1)  # the next step's
    assert torch.allclose(logits(copy, ids), logits(policy, ids), atol=1e-5) and sampler.syncs == 2
    bf16 = SamplingCopy(torch.bfloat16).follow(policy, version=1)
    assert next(bf16.parameters()).dtype == torch.bfloat16
    assert (logits(bf16, ids) - logits(policy, ids)).abs().mean() < 0.05  # bf16's rounding of the same function


def test_a_teacher_samples_with_its_own_weights(tiny_policy):
    """Co-rewarding-II's teacher: a second adapter of a LoRA policy, or a full model of its own; the one copy switches
    between the policy's weights and the teacher's."""
    from trl.trainer.utils import use_adapter

    from coreward.rewards.co_rewarding_2.teacher_weights import adapter_pairs, add_teacher_adapter
    from coreward.runtime.model_copy import own_copy

    policy = lora_policy(tiny_policy)
    add_teacher_adapter(policy, "teacher")
    with torch.no_grad():
        for _, teacher, _ in adapter_pairs(policy, "teacher"):
            teacher.mul_(0.5)  # the EMA has trailed the policy
    ids = torch.randint(3, 30, (2, 12))
    with use_adapter(policy, "teacher"):
        teacher_logits = logits(policy, ids)
    policy_logits = logits(policy, ids)
    assert not torch.allclose(teacher_logits, policy_logits, atol=1e-3)
    sampler = SamplingCopy(torch.float32)
    assert torch.allclose(logits(sampler.follow(policy, 3, adapter="teacher"), ids), teacher_logits, atol=1e-5)
    assert torch.allclose(logits(sampler.follow(policy, 3), ids), policy_logits, atol=1e-5)
    assert sampler.syncs == 2

    full = lora_policy(tiny_policy).merge_and_unload()
    teacher = own_copy(full)
    with torch.no_grad():
        for param in teacher.parameters():
            param.mul_(0.9)
    assert torch.allclose(logits(sampler.follow(teacher, 3), ids), logits(teacher, ids), atol=1e-5)
    assert torch.allclose(logits(sampler.follow(full, 3), ids), logits(full, ids), atol=1e-5)


def test_the_samples_log_probabilities_are_the_samplers(tiny_policy):
    """What the copy reports for each sampled token is log softmax(logits / T) at that token, as the trainer
    computes the policy's; completions are cut after their first end token, as TRL cuts them."""
    from transformers import AutoTokenizer, GenerationConfig

    tokenizer = AutoTokenizer.from_pretrained(tiny_policy)
    copy = SamplingCopy(torch.float32).follow(lora_policy(tiny_policy), 0)
    prompts = [tokenizer("What is 2 + 3?")["input_ids"], tokenizer("Tom has 4 apples.")["input_ids"]]
    temperature = 0.7
    config = GenerationConfig(max_new_tokens=10, do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                              pad_token_id=tokenizer.pad_token_id, eos_token_id=[tokenizer.eos_token_id])
    torch.manual_seed(0)
    completions, logprobs = sample_token_ids(copy, prompts, config, tokenizer.pad_token_id, [tokenizer.eos_token_id],
                                             temperature)
    for prompt, completion, logps in zip(prompts, completions, logprobs):
        assert len(completion) == len(logps) > 0
        assert tokenizer.eos_token_id not in completion[:-1]
        full = torch.tensor([prompt + completion])
        expected = torch.log_softmax(logits(copy, full)[0, len(prompt) - 1:-1] / temperature, dim=-1)
        expected = expected.gather(1, torch.tensor(completion)[:, None]).squeeze(1)
        assert torch.allclose(torch.tensor(logps), expected, atol=1e-4)


def test_auto_takes_the_copy_where_it_changes_something():
    cpu = {"on_gpu": False, "use_vllm": False, "sharded": False, "parameters": 135_000_000}
    assert plan_sampling("auto", "auto", lora=True, **cpu).use_copy
    assert not plan_sampling("auto", "float32", lora=False, **cpu).use_copy  # a full float32 model: nothing to gain
    assert plan_sampling("auto", "bfloat16", lora=False, **cpu).use_copy
    assert not plan_sampling("auto", "auto", lora=True, **{**cpu, "on_gpu": True}).use_copy  # TRL's GPU path
    assert not plan_sampling("copy", "auto", lora=True, **{**cpu, "use_vllm": True}).use_copy
    assert not plan_sampling("copy", "auto", lora=True, **{**cpu, "sharded": True}).use_copy
    assert not plan_sampling("policy", "auto", lora=True, **cpu).use_copy
    assert plan_sampling("copy", "auto", lora=False, **{**cpu, "parameters": 800_000}).dtype == torch.float32


def train_lora_rule(tmp_path: Path, *overrides: str):
    from coreward.grpo.config import TrainConfig
    from coreward.grpo.train import run_training
    from coreward.runtime.config import load_config
    from coreward.runtime.metrics import read_metrics

    config = load_config(TrainConfig, REPO / "configs" / "demo" / "rule.yaml", [
        "lora.enabled=true", "lora.dropout=0.0", "sampling.engine=copy", "sampling.dtype=float32",
        "grpo.per_device_train_batch_size=16", "grpo.learning_rate=1e-2", "data.eval_every=0",
        "grpo.save_steps=100", "kl_from_init=false", "torch_threads=1", *overrides])
    result = run_training(config, output_dir=str(tmp_path / "run"), max_steps=3)
    rows = [row for row in read_metrics(tmp_path / "run" / "metrics.jsonl") if "reward" in row]
    assert rows and rows[0]["step"] == 1
    return result.trainer, rows


def test_rollouts_come_from_the_policys_current_weights_and_a_stale_copy_shows(tmp_path, monkeypatch):
    trainer, rows = train_lora_rule(tmp_path / "synced")
    assert [row["step"] for row in rows] == [1, 2, 3]
    assert all(row[MISMATCH] <= SYNCED for row in rows), [row[MISMATCH] for row in rows]
    assert trainer.sampling_copy.syncs == 3  # once a step, after each optimizer step
    policy = trainer.accelerator.unwrap_model(trainer.model).eval()
    ids = torch.randint(3, 30, (2, 12))
    # float32 either way: the merged W + s·BA rounds otherwise than xW + s·(xA)B, by up to ~1e-5 of a logit once
    # lr 1e-2 has grown the adapters (a copy one step stale is off by far more: the control below)
    assert torch.allclose(logits(trainer.sampling_model(), ids), logits(policy, ids), atol=1e-4)

    # negative control: the copy keeps the weights of step 0
    follow = SamplingCopy.follow
    monkeypatch.setattr(SamplingCopy, "follow", lambda self, source, version, adapter=None:
                        follow(self, source, (0, 0), adapter))
    _, stale = train_lora_rule(tmp_path / "stale")
    assert stale[0][MISMATCH] <= SYNCED  # step 1: the policy has not moved yet
    assert stale[-1][MISMATCH] > 10 * SYNCED, [row[MISMATCH] for row in stale]


def test_co_rewarding_2s_teacher_rollouts_come_from_the_copy(tmp_path):
    from coreward.grpo.config import TrainConfig
    from coreward.grpo.train import run_training
    from coreward.runtime.config import load_config
    from coreward.runtime.metrics import read_metrics

    config = load_config(TrainConfig, REPO / "configs" / "demo" / "co_rewarding_2.yaml", [
        "lora.enabled=true", "grpo.per_device_train_batch_size=16", "data.eval_every=0", "grpo.save_steps=100",
        "kl_from_init=false", "torch_threads=1"])
    result = run_training(config, output_dir=str(tmp_path / "run"), max_steps=2)
    rows = [row for row in read_metrics(tmp_path / "run" / "metrics.jsonl") if "reward" in row]
    assert all(row["time/teacher_generation"] > 0 and MISMATCH in row for row in rows)
    # auto on a CPU with LoRA: the copy, written for the policy's rollouts and the teacher's at each step
    assert result.trainer.sampling_copy.syncs == 4


def test_an_evaluated_adapter_folder_is_sampled_merged_with_the_adapters_function(tiny_policy, tmp_path):
    """`coreward eval` of a LoRA run's final/ (an adapter folder): loaded with its adapters merged into a plain model
    (dtype auto), the same function as the adapters computed unmerged; float32 keeps the loaded model as it is."""
    from coreward.evaluation.backends import load_model

    policy = lora_policy(tiny_policy)
    policy.save_pretrained(tmp_path / "final")
    ids = torch.randint(3, 30, (2, 12))
    merged = load_model(str(tmp_path / "final"), device="cpu")
    assert not any(hasattr(m, "lora_A") for m in merged.modules())
    assert torch.allclose(logits(merged, ids), logits(policy, ids), atol=1e-5)
    as_loaded = load_model(str(tmp_path / "final"), device="cpu", dtype="float32")
    assert any(hasattr(m, "lora_A") for m in as_loaded.modules())


def test_where_trl_computes_the_old_log_probabilities_the_mismatch_is_taken_against_them(tmp_path):
    """grpo.num_iterations 2: each generation batch is trained on twice, so TRL computes the policy's log-probabilities
    of the samples at generation (`old_per_token_logps`); the copy's are compared with those, there."""
    _, rows = train_lora_rule(tmp_path, "grpo.num_iterations=2")
    logged = [row[MISMATCH] for row in rows if MISMATCH in row]
    assert logged and all(value <= SYNCED for value in logged), logged
