"""Co-rewarding-II's teacher computes and samples with its own weights, in every CPU placement.

These tests fail if Co-rewarding-II silently becomes another method: a "teacher" that runs the policy's forward
(majority voting over fresh policy samples, i.e. α = 1 whatever α says), or one that never moves (α = 0). They
check the teacher's *outputs* (logits, rollouts), not only its weights: a copied module can hold its own
weights and still compute with the policy's (a deep copy keeps an instance-level `forward` whose closure is the
policy's module, as TRL's fused LM head is).

Placements: full copy, `as_reference` (TRL's KL reference model), LoRA adapter ("teacher"), LoRA `as_reference`
("ref" adapter). Colocated vLLM: tests/grpo/test_policy.py; ZeRO-3 / FSDP2: tests/grpo/test_sharded_teacher.py.
"""

from __future__ import annotations

import json
from contextlib import contextmanager, nullcontext
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.rewards.test_co_rewarding_2 import CONFIG, moving_config, train


pytestmark = pytest.mark.usefixtures("one_torch_thread")

PLACEMENTS = {
    "full-copy": (),
    "as_reference": ("rewards.0.params.as_reference=true", "grpo.beta=0.01"),
    "lora": ("lora.enabled=true", "lora.r=4"),
    "lora-as_reference": ("lora.enabled=true", "lora.r=4", "rewards.0.params.as_reference=true", "grpo.beta=0.01"),
}


def prompts(tokenizer) -> torch.Tensor:
    return torch.tensor([tokenizer("12+34-5=")["input_ids"], tokenizer("71+8-26=")["input_ids"]])


def logits(module, ids: torch.Tensor, adapter: str | None = None) -> torch.Tensor:
    """The logits `module` computes for `ids`, through the same call `generate` makes: eval mode (no LoRA dropout),
    `adapter` active."""
    from trl.trainer.utils import use_adapter

    was_training = module.training
    module.eval()
    try:
        with torch.no_grad(), use_adapter(module, adapter) if adapter else nullcontext():
            return module(input_ids=ids).logits.float().clone()
    finally:
        module.train(was_training)


@contextmanager
def perturbed(tensors: list[torch.Tensor], scale: float = 0.5):
    """Add N(0, scale²) noise to `tensors` for the duration of the block, then put them back."""
    saved = [t.detach().clone() for t in tensors]
    generator = torch.Generator().manual_seed(123)
    with torch.no_grad():
        for t in tensors:
            t.add_(torch.randn(t.shape, generator=generator).to(t.dtype) * scale)
    try:
        yield
    finally:
        with torch.no_grad():
            for t, s in zip(tensors, saved):
                t.copy_(s)


@pytest.fixture(scope="module", params=list(PLACEMENTS))
def trained(request, tiny_policy, tmp_path_factory):
    """A real run of one Co-rewarding-II step (the teacher is built and updated once) in each placement."""
    run_dir = tmp_path_factory.mktemp(request.param) / "run"
    result = train(tiny_policy, run_dir, 1, *PLACEMENTS[request.param])
    return request.param, result.trainer


def test_the_teachers_logits_come_from_its_own_weights(trained):
    placement, trainer = trained
    teacher = trainer.reward_sources[0].teacher
    policy = teacher.policy.module()
    ids = prompts(teacher.policy.tokenizer)
    if placement.startswith("lora"):
        assert teacher.module is policy and teacher.adapter == ("ref" if "reference" in placement else "teacher")
    else:
        assert teacher.module is not policy
    teacher_tensors = [t for _, t, _ in teacher.pairs]
    policy_tensors = [p for _, _, p in teacher.pairs]

    def teacher_logits():
        return logits(teacher.module, ids, teacher.adapter)

    def policy_logits():
        return logits(policy, ids)

    t0, p0 = teacher_logits(), policy_logits()
    with perturbed(teacher_tensors):  # the teacher's weights moved: its logits move, the policy's don't
        assert (teacher_logits() - t0).abs().max() > 1e-2
        assert torch.equal(policy_logits(), p0)
    with perturbed(policy_tensors):  # and the other way round
        assert (policy_logits() - p0).abs().max() > 1e-2
        assert torch.equal(teacher_logits(), t0)
    assert torch.equal(teacher_logits(), t0) and torch.equal(policy_logits(), p0)  # restored


def test_the_teachers_rollouts_come_from_its_own_weights(trained):
    """Near-greedy teacher rollouts (temperature 1e-3) through the engine's sampling path are the argmax chain of
    the teacher's logits, and not the policy's, once the two models differ (the teacher's weights perturbed)."""
    placement, trainer = trained
    teacher = trainer.reward_sources[0].teacher
    policy, tokenizer = teacher.policy, teacher.policy.tokenizer
    ids = prompts(tokenizer)
    steps = 6

    def greedy(module, adapter):  # the argmax continuation, one token at a time, from the module's own forward
        rows = ids
        for _ in range(steps):
            rows = torch.cat([rows, logits(module, rows, adapter)[:, -1].argmax(-1, keepdim=True)], dim=1)
        return [tokenizer.decode(row[ids.shape[1]:]) for row in rows]

    temperature, max_len = teacher.temperature, trainer.max_completion_length
    teacher.temperature, trainer.max_completion_length = 1e-3, steps
    eos = trainer.eos_token_ids
    trainer.eos_token_ids = None  # fixed-length rollouts, comparable token for token
    try:
        with perturbed([t for _, t, _ in teacher.pairs], scale=1.0):
            torch.manual_seed(0)
            rollouts = [group[0] for group in teacher.generate(policy, ids.tolist(), 1)]
            assert rollouts == greedy(teacher.module, teacher.adapter)
            assert rollouts != greedy(policy.module(), None)
    finally:
        teacher.temperature, trainer.max_completion_length, trainer.eos_token_ids = temperature, max_len, eos


def length_reward(completions, **_) -> list[float]:
    """A reward that varies within almost every group: with it, step 1 surely moves the policy."""
    return [len(c) / 32 for c in completions]


def dumped(run_dir: Path, step: int) -> list[list[str]]:
    """The teacher's rollouts dumped by the step that began at global step `step` (0: the first step)."""
    lines = (run_dir / "teacher" / f"step_{step}.jsonl").read_text().splitlines()
    return [json.loads(line)["teacher_completions"] for line in lines]


@pytest.mark.parametrize("placement", ["full-copy", "as_reference", "lora"])
def test_a_frozen_and_a_tracking_teacher_roll_out_differently_after_step_1(tiny_policy, tmp_path, placement):
    """α = 0 keeps the teacher at θ₀, α = 1 makes it the policy after step 1. Same seed, same data: step 1 (both
    teachers are θ₀) gives the same teacher rollouts, step 2 different ones. A teacher that samples with the
    policy's weights gives the same rollouts at step 2 too, whatever α is. (A small length reward beside the
    teacher's makes sure step 1 moves the policy.)"""
    config = tmp_path / "config.yaml"
    config.write_text(f"base: {CONFIG}\nrewards:\n  - name: co_rewarding_2\n"
                      f"  - name: {__name__}:length_reward\n    weight: 0.1\n")
    runs, teachers = {}, {}
    for name, a in (("frozen", 0.0), ("tracking", 1.0)):
        run_dir = tmp_path / name
        result = train(tiny_policy, run_dir, 2, *PLACEMENTS[placement], f"rewards.0.params.alpha_start={a}",
                       f"rewards.0.params.alpha_end={a}", f"rewards.0.params.dump_dir={run_dir / 'teacher'}",
                       config=config)
        runs[name], teachers[name] = run_dir, result.trainer.reward_sources[0].teacher
    ids = prompts(teachers["frozen"].policy.tokenizer)
    frozen, tracking = (logits(t.module, ids, t.adapter) for t in teachers.values())
    assert (frozen - tracking).abs().max() > 1e-4  # step 1 moved the policy, so the two teachers differ
    assert dumped(runs["frozen"], 0) == dumped(runs["tracking"], 0)  # the runs are deterministic up to the teacher
    assert dumped(runs["frozen"], 1) != dumped(runs["tracking"], 1)


def test_the_teacher_has_the_scheduled_average_of_the_policies_after_n_steps(tiny_policy, tmp_path):
    """After 3 steps with α(t) cosine 0.6 → 0.1, the teacher's logits are those of the model whose weights are the
    EMA of the saved policies θ₀, θ₁, θ₂ under that schedule: closer to it than to θ₀ or to θ₂ (the frozen and the
    tracking degenerations), in the module that generates."""
    from transformers import AutoModelForCausalLM

    run_dir, T = tmp_path / "run", 3
    # entropy beside the teacher's reward moves the policy every step, whatever the tiny policy's answers
    result = train(tiny_policy, run_dir, T, "rewards.0.params.alpha_start=0.6", "rewards.0.params.alpha_end=0.1",
                   "grpo.save_total_limit=5", config=moving_config(tmp_path))  # every checkpoint: θ₁, θ₂ read back
    teacher = result.trainer.reward_sources[0].teacher
    thetas = [load_file(tiny_policy / "model.safetensors")]
    thetas += [load_file(run_dir / f"checkpoint-{s}" / "model.safetensors") for s in (1, 2)]
    expected = dict(thetas[0])
    # α(t) = 0.1 + ½(0.6 − 0.1)(1 + cos(πt/3)), by hand: t=1, cos(π/3) = 0.5: 0.475; t=2, cos(2π/3) = −0.5: 0.225
    for t, a in ((1, 0.475), (2, 0.225)):  # update before step t+1 (t = global step then): θ_T ← α(t)·θ_t + (1 − α(t))·θ_T
        expected = {k: a * thetas[t][k] + (1 - a) * v for k, v in expected.items()}
    ids = prompts(teacher.policy.tokenizer)

    def logits_of(weights):
        model = AutoModelForCausalLM.from_pretrained(tiny_policy)
        model.load_state_dict(weights, strict=False)
        return logits(model.eval(), ids)

    actual = logits(teacher.module, ids)
    distance = {name: (actual - logits_of(w)).abs().max().item()
                for name, w in (("expected", expected), ("θ0", thetas[0]), ("θ2", thetas[2]))}
    assert distance["expected"] < 1e-4, distance
    assert distance["θ0"] > 100 * distance["expected"] and distance["θ2"] > 100 * distance["expected"], distance
