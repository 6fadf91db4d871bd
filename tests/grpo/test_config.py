"""What a method's parameters ask of the data and the loss is declared by the method (`RewardSource.data_needs`), and
configs written before the data keys moved into the methods' parameters keep working."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from coreward.grpo.config import TrainConfig, declared, declared_needs
from coreward.grpo.run_dir import check_resume_config
from coreward.runtime.config import load_config, to_dict
from coreward.runtime.errors import CorewardError


REPO = Path(__file__).resolve().parents[2]
RULE = REPO / "configs" / "demo" / "rule.yaml"


def test_the_engine_reads_paired_views_and_the_loss_per_view_from_the_sources():
    config = load_config(TrainConfig, REPO / "configs" / "demo" / "co_rewarding_1.yaml",
                         ["rewards.0.params.view_loss=per_view", "grpo.loss_type=bnpo"])
    needs = declared_needs(config.rewards)
    assert declared(needs, "rephrasings") == ("demo", "rewards.0.params.rephrasings")
    assert declared(needs, "teacher_rephrasings") is None
    assert [n.loss_per_view for _, n in needs] == [True]
    assert declared(declared_needs(load_config(TrainConfig, RULE).rewards), "rephrasings") is None
    with pytest.raises(CorewardError, match=r"key rewards\.1\.params\.rephrasings: 'other\.jsonl', while "
                                            r"rewards\.0\.params\.rephrasings is 'demo'"):
        load_config(TrainConfig, RULE, ["rewards=[{name: co_rewarding_1, params: {rephrasings: demo}}, "
                                        "{name: co_rewarding_1, params: {rephrasings: other.jsonl}}]"])


def test_old_data_keys_are_moved_into_the_params_of_the_method_that_uses_them(capsys):
    config = load_config(TrainConfig, RULE, ["rewards.0.name=co_rewarding_1", "data.rephrasings=demo",
                                             "data.view_loss=per_view", "grpo.loss_type=bnpo"])
    assert config.rewards[0].params == {"rephrasings": "demo", "view_loss": "per_view"}
    warnings = [line for line in capsys.readouterr().out.splitlines() if "deprecated" in line]
    assert warnings == ["warning: data.rephrasings is deprecated: set rewards.0.params.rephrasings instead (mapped "
                        "there for this run)", "warning: data.view_loss is deprecated: set rewards.0.params.view_loss "
                        "instead (mapped there for this run)"]
    config = load_config(TrainConfig, REPO / "configs" / "demo" / "co_rewarding_2.yaml",
                         ["data.teacher_rephrasings=demo", "rewards.0.params.teacher_prompt=rephrased"])
    assert config.rewards[0].params["teacher_rephrasings"] == "demo"
    # the new spelling wins; a value that meant "not used" is dropped whatever the rewards
    config = load_config(TrainConfig, REPO / "configs" / "demo" / "co_rewarding_1.yaml", ["data.rephrasings=x.jsonl"])
    assert config.rewards[0].params["rephrasings"] == "demo"
    load_config(TrainConfig, RULE, ["data.view_loss=joint", "data.rephrasings=null", "data.teacher_rephrasings=null"])
    with pytest.raises(CorewardError, match=r"key data\.rephrasings: moved to rewards\.N\.params\.rephrasings of the "
                                            r"method that uses it \(co_rewarding_1\), and no configured reward takes it"):
        load_config(TrainConfig, RULE, ["data.rephrasings=demo"])


def test_a_run_saved_with_the_old_keys_resumes_with_the_new_config(tmp_path, capsys):
    config = load_config(TrainConfig, REPO / "configs" / "demo" / "co_rewarding_1.yaml")
    saved = to_dict(config)
    saved["data"].update(rephrasings="demo", view_loss="joint", teacher_rephrasings=None)  # as an older run wrote it
    saved["rewards"][0]["params"] = {"match": "exact"}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
    check_resume_config(tmp_path, config, allow_change=False, step=2)  # no difference, no warning
    assert (tmp_path / "config.yaml").is_file() and "deprecated" not in capsys.readouterr().out


def test_null_in_a_config_unsets_what_its_base_set(tmp_path):
    """`base:` inheritance can take a key away: null unsets a key whose value cannot be null (its default comes back)
    and removes an entry of a mapping of names; a key that may be null keeps null as its value."""
    (tmp_path / "base.yaml").write_text(
        "model: {name_or_path: demo}\n"
        "data: {train: mine.jsonl, columns: {question: problem, answer: solution}, limit: 8, split: dev}\n"
        "rewards: [{name: majority}]\n"
        "grpo: {save_total_limit: 5}\n")
    (tmp_path / "unlabeled.yaml").write_text(
        "base: base.yaml\n"
        "data: {columns: {answer: null}, split: null, limit: null}\n"
        "grpo: {save_total_limit: null}\n")
    config = load_config(TrainConfig, tmp_path / "unlabeled.yaml")
    assert config.data.columns == {"question": "problem"}  # the inherited answer column is gone
    assert config.data.split == "train"  # not a key that can be null: its default
    assert config.data.limit is None and config.grpo == {"save_total_limit": None}  # null is their value
    assert to_dict(config)["data"]["columns"] == {"question": "problem"}  # what config.yaml of the run records
    # the same from the command line
    assert load_config(TrainConfig, tmp_path / "base.yaml", ["data.columns.answer=null"]).data.columns == {
        "question": "problem"}
