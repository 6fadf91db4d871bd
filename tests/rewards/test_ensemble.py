"""The static RM reward with several RMs (`model`, `path` a list): each combine rule against the members' own scores,
worked out here from each member alone; a one-member list is the single path; bad lists are refused naming the key
and the item; and a real two-step training run logs the members' scores and their disagreement.

Members are real tiny VerifyRMs: the session's tiny random RM and copies of it whose score head is drawn again
from other seeds (scaled up, so that the members disagree by tenths rather than thousandths)."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
import torch

from coreward.rewards import build_source
from coreward.rewards.base import ParamsError, RolloutBatch
from coreward.rewards.model import ModelReward
from coreward.rm.model import VerifyRM
from coreward.runtime.errors import CorewardError


REPO = Path(__file__).resolve().parents[2]
QUESTION = "12+5-3="
COMPLETIONS = ["12+5=17;17-3=14;#### 14", "12+5=18;18-3=15;#### 15", "#### 3", "ans 14", "12+5=17;", "#### 14"]

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tests/conftest.py


def redrawn_head(source: Path, directory: Path, seed: int, scale: float = 30.0, cut: str = "coreward") -> Path:
    """`source` with its one-logit head drawn again from `seed`, times `scale`, saved reading inputs cut as `cut`."""
    rm = VerifyRM.from_pretrained(source, device="cpu", cut=cut)
    head = rm.model.score
    with torch.no_grad():
        head.weight.copy_(scale * torch.randn(head.weight.shape, generator=torch.Generator().manual_seed(seed)) / 32)
    return rm.save_pretrained(directory)


@pytest.fixture(scope="module")
def members(tiny_rm_path, tmp_path_factory) -> list[str]:
    root = tmp_path_factory.mktemp("ensemble")
    return [str(tiny_rm_path)] + [str(redrawn_head(tiny_rm_path, root / f"member{k}", seed=k)) for k in (1, 2)]


def batch() -> RolloutBatch:
    n = len(COMPLETIONS)
    return RolloutBatch(prompts=[QUESTION] * n, completions=list(COMPLETIONS), completion_ids=[[0]] * n,
                        group_ids=[i // 3 for i in range(n)], num_generations=3,
                        columns={"question": [QUESTION] * n, "answer": ["14"] * n})


def alone(path: str) -> list[float]:
    """A member's scores, from that member alone."""
    n = len(COMPLETIONS)
    return VerifyRM.from_pretrained(path, device="cpu").score([QUESTION] * n, ["14"] * n, list(COMPLETIONS))


def test_each_combine_rule_is_its_formula_over_the_members_own_scores(members):
    per_member = [alone(m) for m in members]
    columns = list(zip(*per_member))  # one tuple of K scores per completion
    assert max(statistics.pstdev(c) for c in columns) > 0.05  # the members do disagree: the rules differ

    mean_batch, min_batch, uwo_batch, var_batch = batch(), batch(), batch(), batch()
    mean = ModelReward(path=members, device="cpu", combine="mean").compute(mean_batch)
    worst = ModelReward(path=members, device="cpu", combine="min").compute(min_batch)
    uwo = ModelReward(path=members, device="cpu", combine="uncertainty", uncertainty_weight=0.7).compute(uwo_batch)
    uwo_var = ModelReward(path=members, device="cpu", combine="uncertainty", uncertainty_weight=2.0,
                          uncertainty_spread="variance").compute(var_batch)

    assert mean == pytest.approx([statistics.fmean(c) for c in columns], abs=1e-6)
    assert worst == pytest.approx([min(c) for c in columns], abs=1e-6)
    assert uwo == pytest.approx([statistics.fmean(c) - 0.7 * statistics.pstdev(c) for c in columns], abs=1e-6)
    assert uwo_var == pytest.approx([statistics.fmean(c) - 2.0 * statistics.pvariance(c) for c in columns], abs=1e-6)
    assert all(w <= m + 1e-9 for w, m in zip(worst, mean))  # the worst case never pays more than the mean
    assert all(u <= m + 1e-9 for u, m in zip(uwo, mean))  # nor does the mean less a spread
    assert any(w < m - 0.01 for w, m in zip(worst, mean))

    # per-step metrics: each member's mean score, the members' mean std, and the combined reward's mean
    for k, scores in enumerate(per_member):
        assert mean_batch.metrics[f"model/member{k}/score_mean"] == pytest.approx(statistics.fmean(scores), abs=1e-6)
    assert mean_batch.metrics["model/members_std"] == pytest.approx(statistics.fmean(map(statistics.pstdev, columns)),
                                                                    abs=1e-6)
    assert min_batch.metrics["model/score_mean"] == pytest.approx(statistics.fmean(worst), abs=1e-6)

    middle = sorted(mean)[len(mean) // 2] + 1e-9  # a threshold applies to the combined score
    assert ModelReward(path=members, device="cpu", threshold=middle).compute(batch()) == [float(m > middle) for m in mean]


def test_a_one_member_list_is_the_single_path(members):
    single_batch = batch()
    single = ModelReward(path=members[1], device="cpu").compute(single_batch)
    assert "model/members_std" not in single_batch.metrics  # one path logs as it always did
    for combine in ("mean", "min", "uncertainty"):
        listed_batch = batch()
        listed = ModelReward(path=[members[1]], device="cpu", combine=combine).compute(listed_batch)
        assert listed == pytest.approx(single, abs=1e-9), combine
        assert listed_batch.metrics["model/members_std"] == 0.0
        assert listed_batch.metrics["model/score_mean"] == pytest.approx(single_batch.metrics["model/score_mean"])


def test_bad_ensembles_are_refused_naming_the_key_and_the_item(members, tiny_rm_path, tmp_path):
    def refused(params: dict, match: str):
        with pytest.raises(ParamsError, match=match):
            build_source("model", params, key="rewards.1")

    refused({"path": []}, r"key rewards\.1\.params\.path is an empty list")
    refused({"path": [members[0], str(tmp_path / "nope")]}, r"key rewards\.1\.params\.path\.1: no such directory: .*nope")
    refused({"path": [members[0], "runs/rm/final"]}, r"key rewards\.1\.params\.path\.1: no such directory")
    refused({"path": [members[0], "dmeo:1"]}, r"key rewards\.1\.params\.path\.1: 'dmeo:1' is neither a directory")
    refused({"path": [members[0], members[1], members[0]]}, r"path\.2: .* is already member path\.0")
    refused({"path": members[0], "combine": "min"}, r"key rewards\.1\.params\.combine: 'min' combines the scores of "
                                                    "several RMs, but path is one RM")
    refused({"path": members, "uncertainty_weight": -1}, r"key rewards\.1\.params\.uncertainty_weight must be >= 0")

    # a member saved reading another input format: cut from the right (the authors' "none") where the others are
    # cut from the left (coreward's); the ensemble feeds them all one rm_cut, so it is refused when loaded
    other = str(redrawn_head(tiny_rm_path, tmp_path / "right_cut", seed=3, cut="none"))
    source = build_source("model", {"path": [members[0], members[1], other], "device": "cpu"}, key="rewards.1")
    for check in (source.preflight, source.members):
        with pytest.raises(CorewardError, match=r"params\.path\.2: the ensemble's members read different input "
                                                r"formats: path\.2 .*right_cut.* cut 'none'.*path\.0 .* cut 'coreward'"):
            check()
    source = build_source("model", {"path": [str(tmp_path / "right_cut")], "device": "cpu"})
    assert len(source.members()) == 1  # one RM of any format is fine


def test_a_short_training_run_with_an_ensemble_reward(memorized_policy, members, tmp_path):
    """Two real GRPO steps with the shipped worst-case ensemble config, its members swapped for the tiny RMs."""
    from coreward.grpo.config import TrainConfig
    from coreward.grpo.train import run_training
    from coreward.runtime.config import load_config
    from coreward.runtime.metrics import read_metrics

    listed = "[" + ", ".join(members[:2]) + "]"
    settings = load_config(TrainConfig, REPO / "configs" / "demo" / "ensemble_min.yaml", [
        f"model.name_or_path={memorized_policy}", f"rewards.0.params.path={listed}", "data.limit=4",
        "data.eval_every=0", "grpo.num_generations=4", "grpo.per_device_train_batch_size=16",
        "grpo.max_completion_length=24", "grpo.save_steps=100"])
    result = run_training(settings, output_dir=str(tmp_path / "run"), max_steps=2)
    rows = [row for row in read_metrics(tmp_path / "run" / "metrics.jsonl") if "model/members_std" in row]
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:
        # the mean of a per-completion minimum is at most the smaller member mean
        assert row["model/score_mean"] <= min(row["model/member0/score_mean"], row["model/member1/score_mean"]) + 1e-9
        assert row["rewards/model/mean"] == pytest.approx(row["model/score_mean"], abs=1e-6)
        assert row["model/members_std"] > 0
    source = result.trainer.reward_sources[0]
    assert len(source.members()) == 2 and not any(p.requires_grad for rm in source.members() for p in rm.model.parameters())


def test_the_demo_members_are_named_and_each_trains_on_questions_no_other_rm_saw():
    """What `path: [demo, demo:1, demo:2]` names, without building anything: each member's slice of the train split
    is as large as the demo RM's, inside the split, and shared with neither the demo RM nor another member."""
    import coreward.demo  # noqa: F401  (registers the names)
    from coreward.data.synthetic import SPLIT_SIZES
    from coreward.demo.rm import ANNOTATION, member_recipe
    from coreward.runtime.assets import registered_names
    from coreward.runtime.config import read_yaml_with_base

    assert {"demo", "demo:1", "demo:2", "demo:3", "demo:4"} <= set(registered_names("rm"))
    slices = [(0, ANNOTATION["questions"])] + [tuple(member_recipe(k)["questions"]) for k in (1, 2, 3, 4)]
    assert all(end - start == ANNOTATION["questions"] and end <= SPLIT_SIZES["train"] for start, end in slices)
    assert all(a[1] <= b[0] for a, b in zip(slices, slices[1:]))  # in order and disjoint
    assert len({member_recipe(k)["seed"] for k in (1, 2, 3, 4)} | {0}) == 5
    with pytest.raises(CorewardError, match="demo:1 ... demo:4 and demo:pooled, not demo:5"):
        member_recipe(5)
    # demo:pooled, the data-matched single RM: exactly the ensemble's questions, each slice with its member's sampling
    # seed (the same samples), trained with the demo RM's seed
    pooled = member_recipe("pooled")
    assert "demo:pooled" in registered_names("rm") and pooled["pooled"] == ["demo", "demo:1", "demo:2"]
    assert pooled["slices"] == [[0, ANNOTATION["questions"], ANNOTATION["seed"]]] + \
        [[*member_recipe(k)["questions"], member_recipe(k)["sampling_seed"]] for k in (1, 2)]
    assert pooled["seed"] == ANNOTATION["seed"]
    for name in ("ensemble_min", "ensemble_uncertainty"):
        params = read_yaml_with_base(REPO / "configs" / "demo" / f"{name}.yaml")["rewards"][0]["params"]
        assert params["path"] == ["demo", "demo:1", "demo:2"]


def test_the_pooled_rm_samples_each_members_slice_with_its_seed_and_trains_on_all_of_them(tmp_path, monkeypatch):
    """demo:pooled's training file is the three slices' samples in order, each drawn as its member draws it; the
    sampling report adds their counts. (The sampler is replaced by one returning a row per call: drawing 48,000 real
    samples is the build itself.)"""
    import json

    from coreward.demo import rm

    calls = []

    class Report:
        def to_dict(self):
            return {"labelled_by": "rule", "sampled": 4, "generation_failures": 0, "no_answer": 0, "judged": 0,
                    "kept": 4, "positives": 1, "negatives": 3, "positive_rate": 0.25}

    def sampler(policy, split, end, seed, start=0):
        calls.append((split, start, end, seed))
        return [{"question": f"q{start}", "reference_answer": "1", "completion": "1", "label": 1}], Report()

    monkeypatch.setattr(rm, "sample_demo_rows", sampler)
    monkeypatch.setattr("coreward.demo.policy.ensure_demo_policy", lambda: tmp_path)
    report = rm.sampled_rows("pooled", rm.member_recipe("pooled"), tmp_path)
    assert calls == [("train", start, end, seed) for start, end, seed in rm.member_recipe("pooled")["slices"]]
    assert calls[1][1:] == (*rm.member_recipe(1)["questions"], rm.member_recipe(1)["sampling_seed"])
    rows = [json.loads(line) for line in (tmp_path / "verification.jsonl").read_text().splitlines()]
    assert [r["question"] for r in rows] == ["q0", "q4000", "q8000"]
    assert report["sampled"] == 12 and report["positives"] == 3 and report["positive_rate"] == 0.25
    assert len(report["slices"]) == 3 and json.loads((tmp_path / rm.ANNOTATION_FILE).read_text()) == report
