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
