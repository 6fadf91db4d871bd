"""Cooper's variants (rewards/cooper/variants.py, the anchor in rewards/cooper/learner.py), each on real rollouts of the tiny
memorized policy (sampled here at temperature 1.6, so groups hold verified and rejected completions) and the tiny
random RM of tests/conftest.py: rollout and mixed negatives, replay of earlier pairs, the anchor, the ensemble's min,
and an ensemble whose members start from different RMs (`member_rms`: a second tiny RM, its score head drawn again).
"""

from __future__ import annotations

import math

import pytest
import torch

from coreward.data.synthetic import load_demo
from coreward.rewards.base import RolloutBatch
from coreward.rewards.cooper import CooperReward
from coreward.rewards.cooper.learner import RMLearner
from coreward.rewards.cooper.variants import MEMBER_DIR, member_shares
from coreward.rm.evaluate import score_unique
from coreward.rm.model import VerifyRM
from coreward.runtime.errors import CorewardError
from coreward.runtime.memory import ModelShape


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py
G = 8


@pytest.fixture(scope="module")
def rollouts(memorized_policy) -> tuple[list[str], list[str], list[str]]:
    """(questions, references, completions): G sampled completions for each of the four memorized demo problems."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(memorized_policy)
    model = AutoModelForCausalLM.from_pretrained(memorized_policy)
    records = load_demo("train", 4)
    questions = [r.question for r in records for _ in range(G)]
    torch.manual_seed(0)
    encoded = tokenizer(questions, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**encoded, do_sample=True, temperature=1.6, max_new_tokens=32,
                             pad_token_id=tokenizer.pad_token_id)
    completions = tokenizer.batch_decode(out[:, encoded["input_ids"].shape[1]:], skip_special_tokens=True)
    return questions, [r.answer for r in records for _ in range(G)], completions


def batch_of(rollouts, verifier, step: int = 0) -> RolloutBatch:
    questions, references, completions = rollouts
    return RolloutBatch(prompts=questions, completions=completions, completion_ids=[[1]] * len(completions),
                        group_ids=[i // G for i in range(len(completions))], num_generations=G,
                        columns={"question": questions, "answer": references}, step=step,
                        context={"verifier": verifier, "mode": "train"})


def weights(learner: RMLearner) -> list[torch.Tensor]:
    return [p.detach().clone() for p in learner.parameters]


def distance(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return math.sqrt(sum(float((x.double() - y.double()).pow(2).sum()) for x, y in zip(a, b)))


def test_rollout_negative_is_the_rule_rejected_completion_the_rm_scored_highest(rollouts, tiny_rm_path, verifier):
    batch = batch_of(rollouts, verifier)
    correct = [v.correct for v in batch.verdicts()]
    mixed_groups = [g for g in range(4) if 0 < sum(correct[g * G:(g + 1) * G]) < G]
    assert mixed_groups, "the sampled groups should hold verified and rejected completions"
    source = CooperReward(rm=str(tiny_rm_path), negative="rollout", device="cpu")
    scores = score_unique(source.get_learner().rm, list(zip(*rollouts)))
    pairs = source.make_pairs(batch, scores)
    assert len(pairs) == len(mixed_groups)  # one per group with a positive and a rejected rollout
    for pair, group in zip(pairs, mixed_groups):
        rows = range(group * G, (group + 1) * G)
        rejected = [i for i in rows if not correct[i]]
        assert pair.positive == batch.completions[next(i for i in rows if correct[i])]  # the authors' first positive
        assert pair.negative in {batch.completions[i] for i in rejected}
        assert max(scores[i] for i in rejected if batch.completions[i] == pair.negative) == max(scores[i] for i in rejected)

    mixed = CooperReward(rm=str(tiny_rm_path), negative="mixed", device="cpu")
    both = mixed.make_pairs(batch_of(rollouts, verifier), scores)
    alone = CooperReward(rm=str(tiny_rm_path), device="cpu").make_pairs(batch_of(rollouts, verifier), scores)
    assert both == alone + pairs  # the assistant's pairs (the authors'), then the rollout pairs
    assert all(pair.negative not in rollouts[2] for pair in alone)  # the assistant's are rewrites, not rollouts


def test_replay_mixes_pairs_of_an_earlier_step_into_the_update_and_resumes_exactly(rollouts, tiny_rm_path, verifier,
                                                                                     tmp_path):
    settings = {"rm": str(tiny_rm_path), "negative": "rollout", "device": "cpu", "lr": 1e-3, "seed": 3}
    replaying = CooperReward(**settings, replay_size=16, replay_per_step=2)
    plain = CooperReward(**settings)
    first, second = batch_of(rollouts, verifier, step=0), batch_of(rollouts, verifier, step=1)
    scores = score_unique(plain.get_learner().rm, list(zip(*rollouts)))
    pairs0 = plain.make_pairs(first, scores)
    pairs1 = pairs0[::-1]  # step 1's own pairs (another order: another update)
    replaying.learn(pairs0, first)
    plain.learn(pairs0, first)
    assert first.metrics["rm/replay_pairs"] == 0.0  # nothing earlier to replay at the first step
    drawn = replaying.replay().draw(2, 3, 1)
    assert len(drawn) == 2 and all(step == 0 for step, _ in drawn)  # pairs made at step 0
    replaying.learn(pairs1, second)
    assert second.metrics["rm/replay_pairs"] == 2.0
    plain.get_learner().update(pairs1 + [pair for _, pair in drawn])  # the authors' update on the same pairs
    assert all(torch.equal(a, b) for a, b in zip(weights(replaying.get_learner()), weights(plain.get_learner())))
    assert [s for s, _ in replaying.replay().entries] == [0] * len(pairs0) + [1] * len(pairs1)

    replaying.save_state(tmp_path)
    resumed = CooperReward(**settings, replay_size=16, replay_per_step=2)
    resumed.load_state(tmp_path)
    assert list(resumed.replay().entries) == list(replaying.replay().entries)
    assert resumed.replay().draw(2, 3, 2) == replaying.replay().draw(2, 3, 2)
    with pytest.raises(CorewardError, match="replay_per_step 2 needs a buffer: set replay_size > 0"):
        CooperReward(rm=str(tiny_rm_path), replay_per_step=2)


def test_anchor_keeps_the_rm_closer_to_its_initial_weights_and_zero_is_the_authors_update(rollouts, tiny_rm_path,
                                                                                         verifier, tmp_path):
    batch = batch_of(rollouts, verifier)
    probe = CooperReward(rm=str(tiny_rm_path), negative="rollout", device="cpu")
    pairs = probe.make_pairs(batch, score_unique(probe.get_learner().rm, list(zip(*rollouts))))
    assert pairs

    def trained(anchor: float | None) -> tuple[RMLearner, list[torch.Tensor]]:
        fields = {} if anchor is None else {"anchor": anchor}
        learner = RMLearner(VerifyRM.from_pretrained(str(tiny_rm_path), device="cpu"), lr=1e-2, **fields)
        initial = weights(learner)
        for _ in range(6):
            learner.update(pairs)
        return learner, initial

    authors, initial = trained(None)
    zero, _ = trained(0.0)
    assert zero.anchor_weights is None
    assert all(torch.equal(a, b) for a, b in zip(weights(authors), weights(zero)))  # λ = 0: the authors' update
    anchored, _ = trained(50.0)
    free_drift, anchored_drift = distance(weights(authors), initial), distance(weights(anchored), initial)
    assert anchored_drift < 0.7 * free_drift, (anchored_drift, free_drift)
    assert anchored.updates == authors.updates == 6  # it still learns every step

    anchored.save(tmp_path)  # resumed, θ_0 is still the run's first RM, not the checkpoint's
    loaded = RMLearner.load(tmp_path, "cpu", anchor=50.0)
    assert all(torch.equal(a, b.float()) for a, b in zip(loaded.anchor_weights, initial))
    with pytest.raises(CorewardError, match="anchor must be >= 0"):
        CooperReward(rm=str(tiny_rm_path), anchor=-1.0)


def test_ensemble_members_learn_different_pairs_and_the_reward_is_their_min(rollouts, tiny_rm_path, verifier, tmp_path):
    shares = member_shares(10, 3, "disjoint", seed=0, step=4)
    assert sorted(i for share in shares for i in share) == list(range(10))  # each pair to exactly one member
    boot = member_shares(10, 3, "bootstrap", seed=0, step=4)
    assert [len(s) for s in boot] == [10] * 3 and len({tuple(s) for s in boot}) == 3

    source = CooperReward(rm=str(tiny_rm_path), negative="rollout", device="cpu", lr=1e-2, members=2)
    first, second = source.member_learners()
    assert all(torch.equal(a, b) for a, b in zip(weights(first), weights(second)))  # two copies of `rm` to start
    triples = list(zip(*rollouts))
    source.compute(batch_of(rollouts, verifier))  # each member learns its half of the step's pairs
    assert first.updates == second.updates == 1
    assert any(not torch.equal(a, b) for a, b in zip(weights(first), weights(second)))  # different pairs, different RMs
    before = [score_unique(learner.rm, triples) for learner in (first, second)]
    assert before[0] != before[1]
    rewards = source.compute(batch_of(rollouts, verifier, step=1))  # the members before this step's update
    assert rewards == pytest.approx([min(a, b) for a, b in zip(*before)], abs=1e-6)

    source.save_state(tmp_path)
    assert (tmp_path / MEMBER_DIR.format(k=1) / "rm" / "config.json").is_file()
    resumed = CooperReward(rm=str(tiny_rm_path), negative="rollout", device="cpu", lr=1e-2, members=2)
    resumed.load_state(tmp_path)
    for old, new in zip(source.member_learners(), resumed.member_learners()):
        assert all(torch.allclose(a, b) for a, b in zip(weights(old), weights(new)))
        assert new.updates == old.updates == 2


def test_ensemble_members_start_from_member_rms_and_resume_from_their_checkpoint(rollouts, tiny_rm_path, other_rm,
                                                                                 verifier, tmp_path):
    triples = list(zip(*rollouts))
    rm_alone, other_alone = (score_unique(VerifyRM.from_pretrained(path, device="cpu"), triples)
                             for path in (str(tiny_rm_path), other_rm))
    assert max(abs(a - b) for a, b in zip(rm_alone, other_alone)) > 0.05  # two RMs that score apart
    settings = {"rm": str(tiny_rm_path), "negative": "rollout", "device": "cpu", "lr": 1e-2, "members": 2,
                "member_rms": [other_rm]}
    source = CooperReward(**settings)
    first, second = source.member_learners()
    assert score_unique(first.rm, triples) == pytest.approx(rm_alone, abs=1e-6)  # member 0: `rm`
    assert score_unique(second.rm, triples) == pytest.approx(other_alone, abs=1e-6)  # member 1: member_rms[0], no copy
    started = weights(second)
    rewards = source.compute(batch_of(rollouts, verifier))  # scored by the members before this step's update
    assert rewards == pytest.approx([min(a, b) for a, b in zip(rm_alone, other_alone)], abs=1e-6)
    assert second.updates == 1 and distance(weights(second), started) > 0  # member 1 learned its share

    source.save_state(tmp_path)
    resumed = CooperReward(**settings)
    resumed.load_state(tmp_path)
    _, again = resumed.member_learners()  # the checkpoint's member 1, not member_rms[0] loaded afresh
    assert all(torch.allclose(a, b) for a, b in zip(weights(second), weights(again))) and again.updates == 1
    assert distance(weights(again), started) > 0


def test_member_rms_names_one_rm_for_each_member_after_the_first(tiny_rm_path, tmp_path):
    with pytest.raises(CorewardError, match=r"member_rms names 1 RM\(s\), but members 3 needs 2"):
        CooperReward(rm=str(tiny_rm_path), members=3, member_rms=[str(tiny_rm_path)])
    with pytest.raises(CorewardError, match=r"member_rms names 1 RM\(s\), but members 1 needs 0"):
        CooperReward(rm=str(tiny_rm_path), member_rms=[str(tiny_rm_path)])
    with pytest.raises(CorewardError, match="member_rms.1 is empty"):
        CooperReward(rm=str(tiny_rm_path), members=3, member_rms=[str(tiny_rm_path), " "])
    missing = CooperReward(rm=str(tiny_rm_path), members=2, member_rms=[str(tmp_path / "nowhere" / "rm")])
    with pytest.raises(CorewardError, match=r"key rewards\.params\.member_rms\.0: no such directory"):
        missing.preflight()  # checked as `rm` is, before training starts


def test_the_memory_plan_holds_each_member_at_its_own_rms_shape(tiny_rm_path):
    from coreward.rewards.memory import PlannedRun

    shapes = {"tiny": ModelShape.from_path(tiny_rm_path, "rm"), "demo": ModelShape.from_path("demo", "rm")}
    assert shapes["tiny"] != shapes["demo"]
    run = PlannedRun(key="rewards.0", on_gpu=False, engine="one", processes=1, policy=shapes["demo"],
                     policy_weights_dtype="float32", policy_compute_dtype="float32", lora=False, kl_reference=False,
                     rows=8, seq_len=64)

    def planned(**params) -> dict[str, int]:
        needs = CooperReward.memory_needs(CooperReward.Params(device="auto", **params), run)
        return {item.name.removeprefix("rewards.0 Cooper RM "): item.bytes for item in needs.items}

    tiny, demo = planned(rm=str(tiny_rm_path)), planned(rm="demo")
    both = planned(rm=str(tiny_rm_path), members=2, member_rms=["demo"])
    for part in ("weights", "AdamW moments"):  # what each member keeps: one tiny RM's and one demo RM's
        assert both[part] == tiny[part] + demo[part] != 2 * tiny[part], part
    for part in ("gradients", "update activations", "backward's activation gradients (one layer, transient)",
                 "scoring pass"):  # one member at a time: the larger one's
        assert both[part] == max(tiny[part], demo[part]), part
    assert planned(rm=str(tiny_rm_path), members=2) == {**tiny, "weights": 2 * tiny["weights"],
                                                         "AdamW moments": 2 * tiny["AdamW moments"]}


def test_the_rm_passes_are_planned_at_the_steps_pairs_and_the_runs_lengths():
    """An RM pass holds no more sequences than the step has (both sides of one pair a group; two pairs a group with
    mixed negatives) and no more tokens than the run's prompt + completion + the template's tags and a reference;
    an LLM assistant's rewrite may be longer (rewards/cooper/assistant.py: +500 tokens). Planned at 1,024 tokens and the batch
    size whatever the run, Cooper on SmolLM2 (4 prompts x 8 completions of 64 tokens) planned 52 GiB for a 5 GiB step."""
    from coreward.rewards.memory import RM_MAX_LENGTH, RM_TAGS_AND_REFERENCE, PlannedRun
    from coreward.rewards.model import ModelReward

    shape = ModelShape.from_path("demo", "rm")
    run = PlannedRun(key="rewards.0", on_gpu=False, engine="one", processes=1, policy=shape,
                     policy_weights_dtype="float32", policy_compute_dtype="float32", lora=False, kl_reference=False,
                     rows=8, seq_len=60, completions=32, groups=4)
    length = min(60 + RM_TAGS_AND_REFERENCE, shape.max_position_embeddings)

    def notes(params, source=CooperReward) -> dict[str, str]:
        needs = source.memory_needs(source.Params(device="auto", **params), run)
        return {item.name.split(" RM ")[-1]: item.note for item in needs.items}

    perturb = notes({"rm": "demo", "assistant": "perturb"})
    assert perturb["update activations"].startswith(f"8 sequences (pairs' two sides) x {length} tokens")
    assert f"32 sequences x {length} tokens" in perturb["scoring pass"]  # every rollout, under the batch size of 32
    assert notes({"rm": "demo", "negative": "mixed"})["update activations"].startswith("16 sequences")
    llm = notes({"rm": "demo", "assistant": "http://localhost:8000/v1#m"})["update activations"]
    assert f"x {min(60 + RM_TAGS_AND_REFERENCE + 500, RM_MAX_LENGTH, shape.max_position_embeddings)} tokens" in llm
    static = ModelReward.memory_needs(ModelReward.Params(path="demo", batch_size=64), run)
    assert [item.note for item in static.items if "scoring" in item.name] == [
        f"32 sequences x {length} tokens per pass, no grad"]
