"""A mistyped name gets the nearest known one ("did you mean ...") where one is close, through the command a newcomer
types: a method, a config key, a GRPOConfig option, a reward, a benchmark, a registered model (named before any hub
advice, and no hub id without an owner suggested) and a command-line option (click's own suggestion)."""

from __future__ import annotations

import pytest

from coreward.runtime.names import nearest
from tests.helpers.runs import REPO, coreward_here


SMOL_RULE = REPO / "configs" / "smol" / "rule.yaml"


def error_of(*args: str) -> str:
    result = coreward_here(*args)
    assert result.returncode == 2, (result.returncode, result.stdout[-1000:], result.stderr[-1000:])
    return result.stderr + result.stdout


@pytest.mark.parametrize("args, meant", [
    (["train", "--config", SMOL_RULE, "--set", "grpo.max_completion_lenght=8"], "did you mean max_completion_length?"),
    (["train", "--config", SMOL_RULE, "--set", "model.name_or_pth=x"], "did you mean model.name_or_path?"),
    (["train", "--config", SMOL_RULE, "--set", "rewards.0.name=majorty"], "did you mean majority?"),
    (["demo", "--methods", "majorty"], "did you mean majority?"),
    (["eval", "--model", "demo", "--benchmarks", "gsm9k", "--output", "{tmp}"], "did you mean gsm8k?"),
], ids=["grpo-option", "config-key", "reward", "method", "benchmark"])
def test_a_near_miss_names_the_known_name(args, meant, tmp_path):
    text = error_of(*[str(a).replace("{tmp}", str(tmp_path / "out")) for a in args])
    assert meant in text, text


@pytest.mark.parametrize("args", [
    ["eval", "--model", "smolm2-135m-instruct", "--benchmarks", "gsm8k", "--output", "{tmp}"],
    ["train", "--config", SMOL_RULE, "--set", "model.name_or_path=smollm2-135m"],
    ["plan", "--config", SMOL_RULE, "--device", "cpu", "--set", "model.name_or_path=smollm2-135m"],
    ["demo", "--model", "smollm2-135m", "--quick"],
], ids=["eval", "train", "plan", "demo"])
def test_a_model_name_near_a_registered_one_names_it_and_no_hub_id_without_an_owner(args, tmp_path):
    text = error_of(*[str(a).replace("{tmp}", str(tmp_path / "out")) for a in args])
    assert "did you mean 'smollm2-135m-instruct'" in text or "did you mean smollm2-135m-instruct" in text, text
    assert "hf download" not in text and "hub id" not in text, text


def test_a_mistyped_command_line_option_gets_clicks_suggestion():
    text = error_of("eval", "--modle", "demo")
    assert "No such option: --modle" in text and "--model" in text.split("No such option: --modle")[1], text


def test_nothing_is_offered_where_no_name_is_close():
    assert nearest("zzz-unrelated", ["majority", "rule", "entropy"]) is None
    assert nearest("smol", ["smollm2-135m-instruct", "smollm3"]) is None  # the start of two: neither is meant
