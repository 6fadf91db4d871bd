"""The checkpointing switch reaches the installed transformers under the name it knows (5.17 and 5.23 differ)."""

from pathlib import Path

import pytest

from coreward.grpo.compat import NAMES, checkpointing_key, checkpointing_settings
from coreward.grpo.config import TrainConfig
from coreward.grpo.train import build_grpo_args
from coreward.runtime.config import load_config


CONFIGS = Path(__file__).parents[2] / "configs"


def test_either_spelling_is_renamed_to_the_installed_one():
    key = checkpointing_key()
    for name in NAMES:
        assert checkpointing_settings({name: True, "seed": 1}) == {key: True, "seed": 1}


@pytest.mark.parametrize("spelling", NAMES)
def test_grpo_args_turn_checkpointing_on_with_either_spelling(tmp_path, spelling):
    config = load_config(TrainConfig, CONFIGS / "demo" / "rule.yaml")
    config.grpo[spelling] = True
    args = build_grpo_args(config, tmp_path, max_steps=1)
    assert getattr(args, checkpointing_key()) is True


def test_demo_sft_args_build_on_the_installed_transformers(tmp_path):
    from coreward.demo.sft import DemoSFTConfig, trl_args

    args = trl_args(DemoSFTConfig(), tmp_path)
    assert getattr(args, checkpointing_key()) is False


def test_a_bare_no_strategy_is_transformers_no(tmp_path):
    """`save_strategy: no` in YAML is the boolean False (YAML 1.1); transformers means "never" by "no"."""
    import yaml

    assert yaml.safe_load("save_strategy: no") == {"save_strategy": False}
    config = load_config(TrainConfig, CONFIGS / "demo" / "rule.yaml")
    config.grpo.update(save_strategy=False, logging_strategy=False)
    args = build_grpo_args(config, tmp_path, max_steps=1)
    assert args.save_strategy == "no" and args.logging_strategy == "no"
