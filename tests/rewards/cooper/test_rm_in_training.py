"""The reward models inside real training runs: each computes with its own weights, Cooper's step rewards come
from the RM as it was before that step's update, its RM moves after a step with pairs and stays after a step
without, and the static RM (`model`) never changes.

Every test here fails if a method silently becomes another: an RM scoring through another module's forward
(perturbing the RM would not change its scores), rewards read after the update (they would equal the new RM's),
an RM that does not learn (Cooper would be the static RM) or one that does (the static RM would be Cooper).
Real parts only: a tiny policy taught four demo problems, a tiny random VerifyRM, TRL's trainer on the CPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from coreward.rewards.base import RolloutBatch
from coreward.rewards.cooper import CooperReward
from coreward.rewards.model import ModelReward
from coreward.rm.model import VerifyRM


REPO = Path(__file__).resolve().parents[3]
TRIPLES = [("3+4-2=", "5", "3+4=7;7-2=5;#### 5"), ("3+4-2=", "5", "3+4=7;7-2=6;#### 6"),
           ("9+1-5=", "5", "9+1=10;10-5=5;#### 5"), ("9+1-5=", "5", "so 4")]

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def train(config: str, policy: Path, run_dir: Path, steps: int, *overrides: str):
    from coreward.grpo.config import TrainConfig
    from coreward.grpo.train import run_training
    from coreward.runtime.config import load_config

    settings = load_config(TrainConfig, REPO / "configs" / "demo" / config, [
        f"model.name_or_path={policy}", "data.limit=4", "data.eval_every=0", "grpo.num_generations=4",
        "grpo.per_device_train_batch_size=16", "grpo.max_completion_length=24", "grpo.save_steps=100", *overrides])
    return run_training(settings, output_dir=str(run_dir), max_steps=steps)


def scores(rm: VerifyRM, triples=TRIPLES) -> torch.Tensor:
    return torch.tensor(rm.score(*map(list, zip(*triples))), dtype=torch.float64)


def policy_logits(trainer) -> torch.Tensor:
    model = trainer.accelerator.unwrap_model(trainer.model)
    ids = trainer.processing_class(["3+4-2=3+4=7;", "9+1-5=9+1="], return_tensors="pt", padding=True)
    with torch.no_grad():
        return model(**ids.to(trainer.accelerator.device)).logits.double().cpu()


def nudge(module: torch.nn.Module, seed: int) -> dict[str, torch.Tensor]:
    """Add N(0, 0.05) to every weight of `module`; returns the originals to put back."""
    saved = {n: p.detach().clone() for n, p in module.named_parameters()}
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=generator).to(p.device, p.dtype))
    return saved


def restore(module: torch.nn.Module, saved: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for n, p in module.named_parameters():
            p.copy_(saved[n])


def assert_each_computes_with_its_own_weights(trainer, rm: VerifyRM) -> None:
    """Perturbing the RM moves its scores and not the policy's logits; perturbing the policy, the reverse."""
    policy = trainer.accelerator.unwrap_model(trainer.model)
    shared = {p.data_ptr() for p in policy.parameters()} & {p.data_ptr() for p in rm.model.parameters()}
    assert not shared, "the RM and the policy share weight storage"
    logits, rm_scores = policy_logits(trainer), scores(rm)

    saved = nudge(rm.model, seed=1)
    assert (scores(rm) - rm_scores).abs().max() > 1e-4  # the RM's scores come from the RM's weights
    assert torch.equal(policy_logits(trainer), logits)  # and the policy does not read them
    restore(rm.model, saved)
    assert torch.equal(scores(rm), rm_scores)

    saved = nudge(policy, seed=2)
    assert (policy_logits(trainer) - logits).abs().max() > 1e-4
    assert torch.equal(scores(rm), rm_scores)  # the RM does not read the policy's weights
    restore(policy, saved)


# ---------------------------------------------------------------------------------- Cooper


@pytest.fixture(scope="module")
def cooper_run(memorized_policy, tiny_rm_path, tmp_path_factory):
    """Two real Cooper steps; every `compute` call is recorded with the RM's weights before and after it."""
    calls = []
    compute = CooperReward.compute

    def recorded(self, batch):
        rm = self.get_learner(batch.policy).rm
        before = {n: p.detach().clone() for n, p in rm.model.state_dict().items()}
        updates = self.learner.updates
        rewards = compute(self, batch)
        calls.append({"before": before, "after": {n: p.detach().clone() for n, p in rm.model.state_dict().items()},
                      "triples": list(zip(self.questions(batch), batch.references, batch.completions)),
                      "rewards": rewards, "updates": self.learner.updates - updates, "mode": batch.mode})
        return rewards

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(CooperReward, "compute", recorded)
        result = train("cooper.yaml", memorized_policy, tmp_path_factory.mktemp("cooper_run"), 2,
                       f"rewards.0.params.rm={tiny_rm_path}", "rewards.0.params.lr=0.001", "rewards.0.params.eval_every=0")
    return result, [c for c in calls if c["mode"] == "train"]


def rm_with(path: Path, state: dict[str, torch.Tensor]) -> VerifyRM:
    """A VerifyRM loaded from files, then given `state`: an independent RM with those weights."""
    rm = VerifyRM.from_pretrained(path, device="cpu")
    rm.model.load_state_dict(state)
    return rm


def test_cooper_rewards_come_from_the_rm_before_the_steps_update(cooper_run, tiny_rm_path):
    _, calls = cooper_run
    assert len(calls) == 2 and all(c["updates"] >= 1 for c in calls)  # both steps had pairs and updated the RM
    for call in calls:
        rewards = torch.tensor(call["rewards"], dtype=torch.float64)
        before = scores(rm_with(tiny_rm_path, call["before"]), call["triples"])
        after = scores(rm_with(tiny_rm_path, call["after"]), call["triples"])
        assert torch.allclose(rewards, before, atol=1e-6, rtol=0)  # the pre-update RM's scores, exactly
        assert (rewards - after).abs().max() > 1e-5  # not the updated RM's
    # the second step starts from the RM the first step left
    assert all(torch.equal(calls[1]["before"][n], calls[0]["after"][n]) for n in calls[0]["after"])


def test_cooper_rm_moves_after_a_step_with_pairs(cooper_run, tiny_rm_path):
    _, calls = cooper_run
    initial = load_file(tiny_rm_path / "model.safetensors")
    assert all(torch.equal(calls[0]["before"][n], initial[n]) for n in initial)  # it starts from `rm`
    for call in calls:
        assert any(not torch.equal(call["before"][n], call["after"][n]) for n in call["after"])


def test_cooper_rm_and_policy_compute_with_their_own_weights(cooper_run):
    result, _ = cooper_run
    source = result.trainer.reward_sources[0]
    assert isinstance(source, CooperReward)
    assert_each_computes_with_its_own_weights(result.trainer, source.learner.rm)


def no_pair_batch(verifier, step: int) -> RolloutBatch:
    """One group in which no rollout is right: no positive, so no pair."""
    completions = ["3+4=7;7-2=6;#### 6", "so 4", "#### 9", "3+4=8;8-2=6;#### 6"]
    return RolloutBatch(prompts=["3+4-2="] * 4, completions=completions, completion_ids=[[1]] * 4, group_ids=[0] * 4,
                        num_generations=4, columns={"question": ["3+4-2="] * 4, "answer": ["5"] * 4}, step=step,
                        context={"verifier": verifier, "mode": "train"})


@pytest.mark.parametrize("step_without_pairs", [False, True])
def test_cooper_rm_stays_after_a_step_without_pairs_unless_told_to_step(tiny_rm_path, verifier, step_without_pairs):
    source = CooperReward(rm=str(tiny_rm_path), device="cpu", lr=1e-3, step_without_pairs=step_without_pairs)
    batch = no_pair_batch(verifier, 0)
    batch.completions[0] = "3+4=7;7-2=5;#### 5"  # step 0 has a pair: the RM's optimizer gets moments
    source.compute(batch)
    assert source.learner.updates == 1
    before = {n: p.detach().clone() for n, p in source.learner.rm.model.named_parameters()}
    batch = no_pair_batch(verifier, 1)
    rewards = source.compute(batch)
    assert batch.metrics["rm/valid_pair_rate"] == 0 and len(rewards) == 4
    moved = [n for n, p in source.learner.rm.model.named_parameters() if not torch.equal(p, before[n])]
    if step_without_pairs:  # the authors': AdamW on a zero gradient still moves the RM (decay, moments)
        assert moved and source.learner.updates == 2
    else:
        assert not moved and source.learner.updates == 1 and "rm/loss" not in batch.metrics


# ---------------------------------------------------------------------------------- the static RM


def test_static_rm_never_changes_and_computes_with_its_own_weights(memorized_policy, tiny_rm_path, tmp_path):
    result = train("model.yaml", memorized_policy, tmp_path / "run", 3, f"rewards.0.params.path={tiny_rm_path}",
                   "grpo.learning_rate=1e-3")
    trainer = result.trainer
    source = trainer.reward_sources[0]
    assert isinstance(source, ModelReward)
    rm = source.rm()
    initial = load_file(tiny_rm_path / "model.safetensors")
    for name, p in rm.model.named_parameters():
        assert torch.equal(p.detach().cpu(), initial[name]) and not p.requires_grad, name
    assert torch.equal(scores(rm), scores(VerifyRM.from_pretrained(tiny_rm_path, device="cpu")))
    # the run did train: the policy moved while the RM stayed
    start = load_file(memorized_policy / "model.safetensors")
    policy = trainer.accelerator.unwrap_model(trainer.model)
    assert any(not torch.equal(p.detach().cpu(), start[n]) for n, p in policy.named_parameters() if n in start)
    assert_each_computes_with_its_own_weights(trainer, rm)


def test_the_perturbation_check_catches_a_copy_that_computes_with_another_modules_weights(tiny_rm_path):
    """The fault class of issue 28: a deep copy keeps a forward patched as a closure over the original's bound
    method (as accelerate and TRL patch a prepared model), so the copy scores with the original's weights. The
    check above (nudge the RM, its scores must move) sees it; with the closure dropped the copy is its own."""
    import copy
    import functools

    original = VerifyRM.from_pretrained(tiny_rm_path, device="cpu")
    original.model.forward = functools.wraps(original.model.forward)(
        lambda *args, bound=original.model.forward, **kwargs: bound(*args, **kwargs))
    clone = VerifyRM(copy.deepcopy(original.model), original.tokenizer, device="cpu")
    before = scores(clone)
    nudge(clone.model, seed=1)
    assert torch.equal(scores(clone), before)  # the copy's own weights moved, its scores did not: caught
    del clone.model.forward  # back to the class's forward, on the copy's weights
    assert (scores(clone) - before).abs().max() > 1e-4
