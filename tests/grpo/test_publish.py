"""Publishing a run, offline: the model card of final/, the learnt RM and EMA teacher as folders that
`from_pretrained` loads, the push plan, and one clear line when the hub can't be reached."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from coreward.data.synthetic import load_demo
from coreward.grpo.config import TrainConfig
from coreward.grpo.publish import model_card, push, push_plan
from coreward.runtime.config import load_config
from coreward.runtime.errors import CorewardError


pytestmark = pytest.mark.usefixtures("one_torch_thread")

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "demo"
COMMON = ["data.limit=4", "data.eval_every=0", "grpo.num_generations=4", "grpo.per_device_train_batch_size=16",
          "grpo.max_completion_length=16", "grpo.learning_rate=1e-3", "torch_threads=1"]


def train(config: str, policy: Path, run_dir: Path, *extra: str):
    from coreward.grpo.train import run_training

    overrides = [f"model.name_or_path={policy}", *COMMON, *extra]
    return run_training(load_config(TrainConfig, CONFIGS / config, overrides), output_dir=str(run_dir), max_steps=2)


def test_co_rewarding_2_run_card_teacher_and_plan(memorized_policy, tmp_path, monkeypatch):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from coreward.evaluation import evaluate

    run = tmp_path / "cr2"
    train("co_rewarding_2.yaml", memorized_policy, run, "grpo.save_steps=2")
    final = run / "final"
    card = (final / "README.md").read_text()
    for expected in (f"from the local directory `{memorized_policy}`", "co_rewarding_2", "alpha_start=0.05",
                     "- steps: 2", "`demo` (split `train`", "rewards/co_rewarding_2/mean",
                     "reward_sources/co_rewarding_2/teacher", "- save_steps: 2\n"):
        assert expected in card, expected
    assert "save_steps: 2.0" not in card  # an integer as an integer (config.yaml keeps TRL's float type)

    # the teacher folder is a model of its own, with the EMA weights the checkpoint state holds
    folder = final / "reward_sources" / "co_rewarding_2" / "teacher"
    teacher = AutoModelForCausalLM.from_pretrained(folder)
    AutoTokenizer.from_pretrained(folder)
    saved = load_file(final / "reward_sources" / "co_rewarding_2" / "teacher.safetensors")
    params = dict(teacher.named_parameters())
    assert saved and all(torch.equal(params[name], tensor) for name, tensor in saved.items() if name in params)
    policy = dict(AutoModelForCausalLM.from_pretrained(final).named_parameters())
    assert any(not torch.equal(policy[name], params[name]) for name in params)  # it trails the policy

    # an evaluation saved in the run directory is added to the card by the evaluation itself
    assert "## Evaluation" not in card
    elsewhere = evaluate(str(final), benchmarks=["demo"], n=2, limit=2, output_dir=tmp_path / "elsewhere", seed=0)
    assert elsewhere.model_card is None and (final / "README.md").read_text() == card  # outside the run: not listed
    inside = evaluate(str(final), benchmarks=["demo"], n=2, limit=4, output_dir=run / "eval", seed=0)
    assert inside.model_card == (final / "README.md").resolve()
    assert "| eval | avg@2 |" in (final / "README.md").read_text()
    from coreward.data.records import Record

    unlabeled = [Record(r.id, r.question, "", "mine", "test") for r in load_demo("test", 3)]
    evaluate(str(final), benchmarks={"mine": unlabeled}, n=2, output_dir=run / "eval-unlabeled", seed=0)
    card = (final / "README.md").read_text()
    assert "| eval | avg@2 |" in card and "| eval-unlabeled | agree@2 |" in card
    assert card == model_card(run)  # what write_model_card would write: the card is up to date
    assert "| eval-unlabeled | avg@2 |" not in card  # no accuracy without reference answers

    plan = push_plan(run, "me/cr2")
    assert [(u.repo_id, u.folder) for u in plan] == [("me/cr2", final), ("me/cr2-teacher", folder)]
    assert "reward_sources/*" in plan[0].ignore

    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(CorewardError, match=r"^cannot push .* to me/cr2: offline mode is set") as err:
        push(run, "me/cr2")
    assert "\n" not in str(err.value)


def test_cooper_rm_is_published_as_a_verify_rm(memorized_policy, tiny_rm_path, tmp_path):
    import json

    from safetensors.torch import load_file

    from coreward.rm.model import VerifyRM

    run = tmp_path / "cooper"
    # 24 tokens: room for the memorized solutions, so steps have verified positives and the RM learns from pairs
    result = train("cooper.yaml", memorized_policy, run, f"rewards.0.params.rm={tiny_rm_path}",
                   "rewards.0.params.eval_every=0", "grpo.max_completion_length=24")
    folder = run / "final" / "reward_sources" / "cooper" / "rm"
    rm = VerifyRM.from_pretrained(folder, device="cpu")
    assert len(rm.score(["1+1?"], ["2"], ["#### 2"])) == 1
    # the published RM is the one the run trained: the learner's weights at the end, not the RM it started from
    state = json.loads((run / "final" / "reward_sources" / "cooper" / "cooper_state.json").read_text())
    assert state["updates"] >= 1, state
    learnt = result.trainer.reward_sources[0].learner.rm.model.state_dict()
    published, initial = load_file(folder / "model.safetensors"), load_file(tiny_rm_path / "model.safetensors")
    assert published.keys() == learnt.keys() == initial.keys()
    assert all(torch.equal(published[name], learnt[name]) for name in published)
    assert any(not torch.equal(published[name], initial[name]) for name in published)
    assert all(torch.equal(p, published[name]) for name, p in rm.model.state_dict().items())  # loaded as published
    assert [u.repo_id for u in push_plan(run, "me/c")] == ["me/c", "me/c-rm"]
    assert "Cooper reward model" in model_card(run)


def test_not_a_run(tmp_path):
    with pytest.raises(CorewardError, match="not a coreward run directory"):
        model_card(tmp_path)
    with pytest.raises(CorewardError, match="no final model"):
        push_plan(tmp_path, "me/x")


def test_a_card_names_a_registered_base_model_as_such_with_its_hub_id():
    """A run from `smollm2-135m-instruct` (a name coreward registers, not a hub id) says so, and the card's
    `base_model` is the hub id it stands for; a hub id is named as one."""
    from coreward.evaluation.card import base_model_source

    text, hub_id = base_model_source("smollm2-135m-instruct")
    assert hub_id == "HuggingFaceTB/SmolLM2-135M-Instruct" and "registered name" in text and hub_id in text
    assert base_model_source("Qwen/Qwen2.5-1.5B-Instruct") == (
        "the Hugging Face hub model `Qwen/Qwen2.5-1.5B-Instruct`", "Qwen/Qwen2.5-1.5B-Instruct")
