"""The trainer follows the launcher's mixed precision; a disagreement is an error before any model loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from coreward.grpo.config import TrainConfig
from coreward.grpo.engines import PRECISION_ENV, launcher_precision
from coreward.grpo.train import build_grpo_args
from coreward.runtime.config import load_config
from coreward.runtime.errors import CorewardError


RULE = Path(__file__).resolve().parents[2] / "configs" / "demo" / "rule.yaml"


def args_under(monkeypatch, tmp_path, precision: str | None, *overrides: str):
    if precision is None:
        monkeypatch.delenv(PRECISION_ENV, raising=False)
    else:
        monkeypatch.setenv(PRECISION_ENV, precision)
    return build_grpo_args(load_config(TrainConfig, RULE, list(overrides)), tmp_path, 1)


@pytest.mark.parametrize("precision", ["bf16", "no"])
def test_bf16_follows_the_launcher(precision, monkeypatch, tmp_path):
    args = args_under(monkeypatch, tmp_path, precision)
    assert launcher_precision() == precision
    assert args.bf16 == (precision == "bf16") and not args.fp16


def test_a_grpo_flag_that_disagrees_with_the_launcher_names_both(monkeypatch, tmp_path):
    with pytest.raises(CorewardError, match=r"grpo.bf16=True disagrees with the launcher's mixed_precision='no'"):
        args_under(monkeypatch, tmp_path, "no", "grpo.bf16=true")


def test_without_a_launcher_a_cpu_run_stays_fp32(monkeypatch, tmp_path):
    args = args_under(monkeypatch, tmp_path, None)
    assert launcher_precision() is None and not args.bf16 and not args.fp16
