"""Faults during training: SIGKILL at any moment, then `--resume`; exact (RNG-identical) resume; NaN/inf in
rewards, RM logits and gradients.

The runs use a tiny policy that knows four demo problems by heart (so rule rewards vary within a group and
the weights move), 2 prompts × 4 completions per step over those 4 problems: an epoch is 2 steps, so kills
and resumes land both mid-epoch and on epoch boundaries.
"""

from __future__ import annotations

import copy
import json
import math
import random
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import TrainerCallback

from coreward.grpo.checkpoints import complete_checkpoints
from coreward.grpo.config import TrainConfig
from coreward.grpo.trainer import CorewardGRPOTrainer
from coreward.rewards.base import RewardSource, register
from coreward.runtime.config import load_config
from coreward.runtime.metrics import read_metrics
from tests.helpers.kill_resume import (
    FAULT_ENV,
    check_checkpoint,
    kill_and_resume,
    parse_faults,
)


REPO = Path(__file__).resolve().parents[2]
RULE = REPO / "configs" / "demo" / "rule.yaml"
COOPER = REPO / "configs" / "demo" / "cooper.yaml"
CO_REWARDING_2 = REPO / "configs" / "demo" / "co_rewarding_2.yaml"


def settings(policy: Path, *extra: str) -> list[str]:
    return [
        f"model.name_or_path={policy}", "data.limit=4", "data.eval_every=0", "grpo.num_generations=4",
        "grpo.per_device_train_batch_size=8", "grpo.max_completion_length=24", "grpo.save_steps=1",
        "grpo.learning_rate=1e-3", "torch_threads=1", *extra,
    ]


def train_here(config: Path, overrides: list[str], run_dir: Path, max_steps: int, resume: bool = False,
               callbacks: list | None = None):
    """`coreward train` in this process (no start-up cost)."""
    from coreward.grpo.train import run_training

    return run_training(load_config(TrainConfig, config, overrides), output_dir=str(run_dir), max_steps=max_steps,
                        resume=resume, extra_callbacks=callbacks)


class StopAfterSave(TrainerCallback):
    """Ends a run cleanly right after checkpoint-`step`, as if it had been stopped there (max_steps unchanged)."""

    def __init__(self, step: int):
        self.step = step

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_training_stop = True


def assert_same_tensors(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float = 1e-6) -> None:
    assert sorted(a) == sorted(b)
    for name in a:
        assert torch.allclose(a[name], b[name], atol=atol, rtol=0), (name, (a[name] - b[name]).abs().max().item())


def assert_same_optimizer(a: Path, b: Path) -> None:
    first, second = torch.load(a, weights_only=True), torch.load(b, weights_only=True)
    assert first["state"].keys() == second["state"].keys()
    for key, state in first["state"].items():
        for name, value in state.items():
            other = second["state"][key][name]
            assert torch.allclose(torch.as_tensor(value), torch.as_tensor(other), atol=1e-6, rtol=0), (key, name)


def steps_of(run_dir: Path) -> list[int]:
    return [row["step"] for row in read_metrics(run_dir / "metrics.jsonl")]


def tensorboard_steps(run_dir: Path, tag: str = "train/loss") -> list[int]:
    """The steps TensorBoard shows for `tag`, read the way TensorBoard reads them (restart markers honoured)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    return [event.step for event in events.Scalars(tag)]


# ---------------------------------------------------------------------------------- kill and resume


def check_killed_run(attempts, run_dir: Path, reference: Path, max_steps: int) -> None:
    *killed, last = attempts
    for attempt in killed:
        assert attempt.killed, (attempt.kill, attempt.returncode, attempt.log[-3000:])
    assert last.returncode == 0, last.log[-3000:]
    assert f"finished at step {max_steps}" in last.log
    for attempt in attempts[1:]:  # each resume picked the newest complete checkpoint, never a half-written one
        assert attempt.resumed_from == attempt.expected_from is not None, attempt
    assert steps_of(run_dir) == list(range(1, max_steps + 1))  # each step exactly once, no gaps
    assert tensorboard_steps(run_dir) == list(range(1, max_steps + 1))  # there too: steps after a checkpoint purged
    newest = complete_checkpoints(run_dir)[-1]
    assert check_checkpoint(newest) == max_steps
    assert not list(run_dir.glob(".trash-*"))
    # nothing was lost or done twice: the weights are those of the uninterrupted run
    assert_same_tensors(load_file(newest / "model.safetensors"), load_file(reference / "model.safetensors"))
    assert_same_optimizer(newest / "optimizer.pt", reference / "optimizer.pt")


def test_sigkill_in_every_phase_then_resume_loses_no_step(memorized_policy, tmp_path):
    max_steps = 14
    overrides = settings(memorized_policy)
    reference = train_here(RULE, overrides, tmp_path / "reference", max_steps)
    assert reference.global_step == max_steps

    run_dir = tmp_path / "killed"
    kills = ["timed", "generation", "reward", "update", "checkpoint", "rotation"]
    attempts = kill_and_resume(RULE, run_dir, overrides, max_steps, kills, random.Random(11))
    assert [a.kill.split(":")[0] for a in attempts] == ["timed", *kills[1:], ""]
    # the checkpoint kill left a directory without the completeness marker: the next launch passed it over
    (half_written,) = [a for a in attempts if a.kill.startswith("checkpoint:")]
    assert half_written.incomplete == [f"checkpoint-{half_written.kill.split(':')[1]}"]
    check_killed_run(attempts, run_dir, tmp_path / "reference" / f"checkpoint-{max_steps}", max_steps)


def test_sigkill_with_a_learning_reward_model(memorized_policy, tiny_rm_path, tmp_path):
    """Cooper: killed after its RM learned from a step (in memory only) and while its state was being saved."""
    max_steps = 5
    overrides = settings(memorized_policy, f"rewards.0.params.rm={tiny_rm_path}", "rewards.0.params.lr=0.001")
    train_here(COOPER, overrides, tmp_path / "reference", max_steps)
    run_dir = tmp_path / "killed"
    attempts = kill_and_resume(COOPER, run_dir, overrides, max_steps, ["reward", "checkpoint-sources"], random.Random(0))
    reference = tmp_path / "reference" / f"checkpoint-{max_steps}"
    check_killed_run(attempts, run_dir, reference, max_steps)
    ours, theirs = run_dir / f"checkpoint-{max_steps}" / "reward_sources" / "cooper", reference / "reward_sources" / "cooper"
    assert json.loads((ours / "cooper_state.json").read_text())["updates"] > 0  # the RM did learn
    assert (ours / "cooper_state.json").read_text() == (theirs / "cooper_state.json").read_text()
    assert_same_tensors(load_file(ours / "rm" / "model.safetensors"), load_file(theirs / "rm" / "model.safetensors"))
    assert_same_optimizer(ours / "optimizer.pt", theirs / "optimizer.pt")


def test_a_timed_kill_takes_torchruns_workers_with_it(memorized_policy, tmp_path):
    """torchrun starts its workers in sessions of their own: killing only the launcher (or its process group)
    would leave them training, and writing checkpoints, beside the next launch."""
    import psutil

    from tests.helpers.kill_resume import launch, train_command

    run_dir = tmp_path / "run"
    overrides = settings(memorized_policy, "grpo.per_device_train_batch_size=4")
    # fresh: torchrun as a new process with workers it execs (their command lines name the run directory), not the
    # suite's warm launch, whose workers are forks of a launcher forked from the forkserver
    attempt = launch(train_command(RULE, run_dir, overrides, 50, resume=False, nproc=2), run_dir, kill="timed:0",
                     fresh=True)
    assert attempt.killed, attempt.log[-3000:]
    survivors = [p for p in psutil.process_iter(["cmdline"]) if str(run_dir) in " ".join(p.info["cmdline"] or [])]
    assert survivors == []


def test_killed_while_saving_the_final_model(memorized_policy, tmp_path):
    """Every step done and checkpointed, the final model half written: --resume only saves the final model."""
    run = tmp_path / "run"
    train_here(RULE, settings(memorized_policy), run, 2)
    (run / "final" / "model.safetensors").write_bytes(b"torn")
    (run / "final" / "COREWARD_COMPLETE").unlink()  # a kill while final/ is written leaves no marker
    result = train_here(RULE, settings(memorized_policy), run, 2, resume=True)
    assert result.global_step == 2 and steps_of(run) == [1, 2]
    assert_same_tensors(load_file(run / "final" / "model.safetensors"), load_file(run / "checkpoint-2" / "model.safetensors"))


def test_kill_points_are_checked_before_anything_loads():
    assert parse_faults("reward:3, checkpoint:4") == {("reward", 3), ("checkpoint", 4)}
    assert parse_faults("") == set()
    for bad in ("reward", "rewards:3", "reward:x"):
        with pytest.raises(Exception, match=FAULT_ENV):
            parse_faults(bad)


# ---------------------------------------------------------------------------------- exact resume


@pytest.mark.parametrize(
    "config, extra",
    [
        (RULE, ()),
        (CO_REWARDING_2, ()),
        # each batch of rollouts is used for two steps: the checkpoint at step 3 falls between them
        (RULE, ("grpo.num_iterations=2", "rewards.0.name=entropy", "data.limit=64")),
    ],
    ids=["rule", "co_rewarding_2", "two_iterations"],
)
def test_resumed_run_is_identical_to_an_uninterrupted_one(config, extra, memorized_policy, tmp_path):
    """Stopped at checkpoint 3 (mid-epoch: the data order of epoch 2 must come back) and resumed to 5: the
    policy, its optimizer and the teacher are those of a run that never stopped."""
    overrides = settings(memorized_policy, *extra)
    train_here(config, overrides, tmp_path / "straight", 5)
    stopped = train_here(config, overrides, tmp_path / "resumed", 5, callbacks=[StopAfterSave(3)])
    assert stopped.global_step == 3
    assert train_here(config, overrides, tmp_path / "resumed", 5, resume=True).global_step == 5
    straight, resumed = tmp_path / "straight" / "checkpoint-5", tmp_path / "resumed" / "checkpoint-5"
    assert_same_tensors(load_file(resumed / "model.safetensors"), load_file(straight / "model.safetensors"))
    assert_same_optimizer(resumed / "optimizer.pt", straight / "optimizer.pt")
    initial = load_file(memorized_policy / "model.safetensors")
    assert any(not torch.allclose(initial[n], t) for n, t in load_file(straight / "model.safetensors").items())
    if config == CO_REWARDING_2:
        teacher = Path("reward_sources") / "co_rewarding_2" / "teacher.safetensors"
        assert_same_tensors(load_file(resumed / teacher), load_file(straight / teacher))
    assert steps_of(tmp_path / "resumed") == [1, 2, 3, 4, 5]
    # three runs in this one process, each with its own TensorBoard directory
    for run in ("straight", "resumed"):
        assert tensorboard_steps(tmp_path / run) == [1, 2, 3, 4, 5], run


def test_each_epoch_has_its_own_data_order_after_a_resume():
    from coreward.grpo.samplers import PairedRepeatSampler, ResumableRepeatSampler

    for make in (lambda: ResumableRepeatSampler(list(range(12)), 2, 3, seed=5),
                 lambda: PairedRepeatSampler(12, 2, 4, seed=5)):
        straight = make()
        epochs = []
        for epoch in range(3):
            straight.set_epoch(epoch)
            epochs.append(list(straight))
        assert epochs[0] != epochs[1] != epochs[2]
        fresh = make()  # a process that resumes in epoch 2 has never iterated epochs 0 and 1
        fresh.set_epoch(2)
        assert list(fresh) == epochs[2]
    # an uninterrupted run sees exactly TRL's order (the demo's measured runs are unchanged)
    from trl.trainer.utils import RepeatSampler

    trl_sampler, ours = RepeatSampler(list(range(12)), 2, 3, seed=5), ResumableRepeatSampler(list(range(12)), 2, 3, seed=5)
    for epoch in range(3):
        ours.set_epoch(epoch)
        assert list(ours) == list(trl_sampler)


# ---------------------------------------------------------------------------------- numerical faults


@register("poisoned_probe")
class PoisonedReward(RewardSource):
    """Test source: the rule reward, with NaN, +inf and -inf in place of three rewards of step 2."""

    def compute(self, batch):
        rewards = [1.0 if v.correct else 0.0 for v in batch.verdicts()]
        if batch.step == 1:
            rewards[0], rewards[3], rewards[5] = float("nan"), float("inf"), float("-inf")
        return rewards


def test_nonfinite_rewards_are_skipped_and_counted(memorized_policy, tmp_path, monkeypatch):
    from coreward.grpo.config import RewardSpec
    from coreward.grpo.train import run_training

    advantages = []
    original = CorewardGRPOTrainer._generate_and_score_completions

    def spy(self, inputs):
        output = original(self, inputs)
        advantages.append(output["advantages"].tolist())
        return output

    monkeypatch.setattr(CorewardGRPOTrainer, "_generate_and_score_completions", spy)
    config = load_config(TrainConfig, RULE, settings(memorized_policy, "rewards.0.name=poisoned_probe", "data.limit=64"))
    config.rewards.append(RewardSpec(name="entropy", weight=1.0))  # finite for every completion
    result = run_training(config, output_dir=str(tmp_path / "run"), max_steps=3)
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [row["rewards/poisoned_probe/nonfinite"] for row in rows] == [0, 3, 0]
    assert [row["rewards/entropy/nonfinite"] for row in rows] == [0, 0, 0]
    assert [row["faults/nonfinite_reward_samples"] for row in rows] == [0, 3, 3]  # cumulative
    # a completion with one faulty reward is skipped whole (the entropy reward alone would have pushed it)
    assert [i for i, a in enumerate(advantages[1]) if a == 0.0] == [0, 3, 5]
    assert all(math.isfinite(a) for step in advantages for a in step)
    assert all(torch.isfinite(p).all() for p in result.trainer.model.parameters())


class Snapshots(TrainerCallback):
    """The policy's weights and optimizer state after each optimizer step."""

    def __init__(self):
        self.weights, self.optimizer = [], []

    def on_step_end(self, args, state, control, model=None, optimizer=None, **kwargs):
        self.weights.append({n: p.detach().clone() for n, p in model.named_parameters()})
        self.optimizer.append(copy.deepcopy(optimizer.state_dict()["state"]))


def test_nonfinite_gradient_skips_the_step_and_is_counted(memorized_policy, tmp_path, monkeypatch):
    original = CorewardGRPOTrainer.compute_loss

    def poisoned(self, model, inputs, *args, **kwargs):
        loss = original(self, model, inputs, *args, **kwargs)
        return loss * float("nan") if self.state.global_step == 1 else loss  # step 2's gradient is NaN

    monkeypatch.setattr(CorewardGRPOTrainer, "compute_loss", poisoned)
    snapshots = Snapshots()
    # entropy rewards on problems the policy doesn't know (varied completions): every step has a gradient
    overrides = settings(memorized_policy, "rewards.0.name=entropy", "data.limit=64")
    train_here(RULE, overrides, tmp_path / "run", 3, callbacks=[snapshots])
    first, second, third = snapshots.weights
    for name in first:
        assert torch.equal(first[name], second[name]), name  # the step was skipped: nothing moved
        assert torch.isfinite(third[name]).all(), name
    assert any(not torch.equal(second[n], third[n]) for n in second)  # the next step was taken
    for key, state in snapshots.optimizer[0].items():  # nor did the optimizer's moments or step count
        for name, value in state.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(snapshots.optimizer[1][key][name])), name
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [row["faults/nonfinite_grad_steps"] for row in rows] == [0, 1, 1]
    assert rows[1]["grad_norm"] is None  # NaN is written as null


def test_nonfinite_rm_logits_score_nan_and_are_counted(tiny_rm_path, verifier):
    from coreward.rewards.base import RolloutBatch
    from coreward.rewards.model import ModelReward

    source = ModelReward(path=str(tiny_rm_path), device="cpu")
    rm = source.rm()
    original = rm.logits

    def faulty(questions, references, completions):
        logits = original(questions, references, completions).clone()
        bad = torch.tensor([c.startswith("BAD") for c in completions])
        values = torch.tensor([float("nan"), float("inf"), float("-inf")]).repeat(len(completions))[: len(completions)]
        return torch.where(bad, values, logits)

    rm.logits = faulty
    completions = ["BAD nan", "BAD inf", "BAD -inf", "#### 5", "#### 6", "#### 7"]
    batch = RolloutBatch(prompts=["q"] * 6, completions=completions, completion_ids=[[1]] * 6, group_ids=[0] * 6,
                         num_generations=6, columns={"question": ["1+4"] * 6, "answer": ["5"] * 6},
                         context={"verifier": verifier})
    scores = source.compute(batch)
    assert all(math.isnan(s) for s in scores[:3])  # σ(±inf) would have been a confident 1 or 0
    assert all(0 < s < 1 for s in scores[3:])
    assert batch.metrics["model/nonfinite_logits"] == 3
    thresholded = ModelReward(path=str(tiny_rm_path), device="cpu", threshold=0.5)
    thresholded._members = [rm]
    assert all(math.isnan(s) for s in thresholded.compute(batch)[:3])


def test_cooper_skips_an_rm_update_with_a_poisoned_gradient(tiny_rm_path):
    from coreward.rewards.cooper.learner import Pair, RMLearner
    from coreward.rm.model import VerifyRM

    learner = RMLearner(VerifyRM.from_pretrained(tiny_rm_path, device="cpu"), lr=1e-3)
    pairs = [Pair("1+4", "5", "#### 5", "#### 6")] * 2
    before = {n: p.detach().clone() for n, p in learner.rm.model.named_parameters()}
    hook = learner.parameters[0].register_hook(lambda grad: grad * float("inf"))
    metrics = learner.update(pairs)
    hook.remove()
    assert learner.skipped == 1 and learner.updates == 0 and metrics["rm/skipped_updates"] == 1
    for name, p in learner.rm.model.named_parameters():
        assert torch.equal(p.detach(), before[name]), name
    assert learner.optimizer.state == {} or all(not s for s in learner.optimizer.state.values())
    learner.update(pairs)  # the next clean update is taken
    assert learner.updates == 1
    assert any(not torch.equal(p.detach(), before[n]) for n, p in learner.rm.model.named_parameters())

