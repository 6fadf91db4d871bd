"""`coreward eval --backend vllm` with a real vLLM (CI's second stage; skipped without vLLM)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.helpers.vllm_cpu import ROOT, requires_vllm


pytestmark = requires_vllm


def eval_vllm(out, *extra: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "coreward.cli", "eval", "--model", "demo", "--benchmarks", "demo", "--n", "2",
         "--limit", "8", "--backend", "vllm", "--vllm-memory", "0.1", "--output", str(out), *extra],
        capture_output=True, text=True, timeout=900, env=env, cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    return json.loads((out / "results.json").read_text())


def test_eval_with_vllm_records_the_device_and_dtype_it_ran_with(tmp_path):
    from vllm.platforms import current_platform

    results = eval_vllm(tmp_path / "auto")
    settings = results["settings"]
    assert settings["backend"] == "vllm"
    assert settings["device"] == current_platform.device_type  # "cpu" here, not a hard-coded "cuda"
    # "auto" is resolved by vLLM (it downcasts the float32 demo policy to bfloat16), and recorded as resolved
    assert settings["dtype"] in ("bfloat16", "float16", "float32")
    assert 0.0 <= results["average"]["avg@2"] <= 1.0
    assert results["average"]["pass@2"] >= results["average"]["pass@1"]
