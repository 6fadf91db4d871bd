"""A run forked from coreward's forkserver starts with what every run would otherwise do again itself
(runtime/forkserver_ready.py): math-verify's parser built and sympy's simplify imported, DeepSpeed imported where it is
installed on a CPU build of torch, and the preloaded objects frozen out of the collector's way."""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path

import pytest


def report(out: str) -> None:
    import importlib.util

    from coreward.runtime.devices import cpu_only_torch

    Path(out).write_text(json.dumps({
        "frozen": gc.get_freeze_count(),
        "tracked": len(gc.get_objects()),
        "modules": {name: name in sys.modules for name in ("sympy.physics.units", "deepspeed", "coreward.grpo.trainer",
                                                         "tests.helpers.forkserver_warm")},
        "deepspeed_expected": cpu_only_torch() and importlib.util.find_spec("deepspeed") is not None,
    }))


def test_a_forked_run_starts_warm_and_frozen(tmp_path):
    from coreward.experiments.jobs import fork

    out = tmp_path / "child.json"
    assert fork(report, (str(out),)).wait(timeout=300) == 0
    child = json.loads(out.read_text())
    assert child["modules"]["coreward.grpo.trainer"] and child["modules"]["sympy.physics.units"], child
    assert child["modules"]["deepspeed"] == child["deepspeed_expected"], child
    assert child["modules"]["tests.helpers.forkserver_warm"], child  # the suite's own preload (tests/conftest.py)
    # the training stack's objects are in the permanent generation: a full collection scans only the child's own
    assert child["frozen"] > 100_000 and child["tracked"] < 0.1 * child["frozen"], child


@pytest.mark.parametrize("build", [{"cuda": "12.4", "hip": None}, {"cuda": None, "hip": "6.2"}])
def test_deepspeed_is_not_preloaded_beside_a_gpu_build_of_torch(build, monkeypatch):
    import torch

    from coreward.runtime.devices import cpu_only_torch

    assert cpu_only_torch() == (torch.version.cuda is None and getattr(torch.version, "hip", None) is None)
    monkeypatch.setattr(torch.version, "cuda", build["cuda"])
    monkeypatch.setattr(torch.version, "hip", build["hip"])
    assert not cpu_only_torch()
