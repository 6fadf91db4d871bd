"""The reward-source interface: typed parameters, registration, custom sources by import path."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from coreward.rewards import build_source, source_class
from coreward.rewards.base import RewardSource, param_docs, register, registered
from coreward.runtime.errors import CorewardError
from tests.helpers.batches import batch_of


class LengthReward(RewardSource):
    """A custom source, loaded from a config as `tests.rewards.test_base:LengthReward`."""

    @dataclass
    class Params:
        scale: float = 1.0  # reward per character

        def validate(self) -> None:
            if self.scale <= 0:
                raise ValueError(f"scale must be > 0, got {self.scale}")

    def compute(self, batch):
        return [self.params.scale * len(c) for c in batch.completions]


def test_every_builtin_method_has_documented_params():
    sources = registered()
    assert {"rule", "model", "cooper", "majority", "self_certainty", "entropy", "co_rewarding_1",
            "co_rewarding_2"} <= set(sources)
    for name, cls in sources.items():
        fields = cls.Params.__dataclass_fields__
        assert set(param_docs(cls)) == set(fields), f"{name}: every parameter needs a one-line comment"


def test_a_source_by_import_path(verifier):
    source = build_source("tests.rewards.test_base:LengthReward", {"scale": 2}, key="rewards.0")
    assert source.compute(batch_of([["ab", "abc"]], verifier)) == [4.0, 6.0]
    with pytest.raises(CorewardError, match=r"rewards\.0\.params\.scale must be > 0"):
        build_source("tests.rewards.test_base:LengthReward", {"scale": 0}, key="rewards.0")
    with pytest.raises(CorewardError, match="cannot import reward source"):
        source_class("tests.rewards.nowhere:Nothing")
    with pytest.raises(CorewardError, match="is not a coreward.rewards.RewardSource"):
        source_class("tests.rewards.test_base:pytest")


def test_register_names_the_class():
    @register("test_only_length")
    class Registered(LengthReward):
        pass

    assert Registered.name == "test_only_length" and source_class("test_only_length") is Registered


def test_the_default_reward_and_the_map_reference_are_the_methods_that_mark_themselves(tmp_path, monkeypatch):
    """A config without `rewards:` trains with the method that sets `default`, and `coreward map`'s reference row is
    the one that sets `ground_truth`: the engine asks the methods, so moving a mark moves what it decides."""
    from coreward.experiments.hackability import MapSettings, reward_configs
    from coreward.grpo.config import TrainConfig, move_method_data_keys
    from coreward.rewards import default_method, reference_method
    from coreward.rewards.majority import MajorityVoteReward
    from coreward.rewards.rule import RuleReward
    from tests.helpers.runs import RULE_CONFIG

    assert default_method() is RuleReward and reference_method() is RuleReward  # the verifier's verdict, as ever
    assert [spec.name for spec in TrainConfig().rewards] == ["rule"]

    config = tmp_path / "entropy.yaml"
    config.write_text(f"base: {RULE_CONFIG}\nrewards:\n  - name: entropy\n")
    settings = MapSettings(configs=[config], lrs=[1e-4], horizons=[1], seeds=[0], output=tmp_path / "map", jobs=1)
    monkeypatch.setattr(RuleReward, "default", False)
    monkeypatch.setattr(MajorityVoteReward, "default", True)
    assert [spec.name for spec in TrainConfig().rewards] == ["majority"]
    assert move_method_data_keys({"data": {"rephrasings": None}}, warn=False)["rewards"] == [{"name": "majority"}]
    monkeypatch.setattr(RuleReward, "ground_truth", False)
    monkeypatch.setattr(MajorityVoteReward, "ground_truth", True)
    (label, twin), *others = reward_configs(settings)
    assert label == "majority" and "  - name: majority\n" in twin.read_text() and [o[0] for o in others] == ["entropy"]

    monkeypatch.setattr(RuleReward, "default", True)
    with pytest.raises(CorewardError, match=r"exactly one registered reward method must set `default = True`, "
                                            r"found 2: majority, rule"):
        TrainConfig()
