"""benchmarks/gpu/gpu_memory_check.py's CPU side (run as `python benchmarks/gpu_memory_check.py`): without a GPU,
`--dry-run` builds each part's command and plan and writes the JSON and the markdown table; a part whose library is
missing is skipped with the reason; two processes on a one-GPU machine share it (gloo); the cooper part runs the
paper config's RM settings with reference-made positives that reach the RM's 1,024 tokens. The GPU run itself is
not testable here."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import pytest


REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def check():
    from benchmarks.gpu import gpu_memory_check

    return gpu_memory_check


def test_dry_run_plans_every_part_and_skips_a_part_whose_library_is_missing(check, tmp_path, monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(check.importlib.util, "find_spec",
                        lambda name, *a: None if name == "vllm" else real_find_spec(name, *a))
    assert check.main(["--out", str(tmp_path), "--dry-run", "--parts", "one,zero3,vllm_sleep,cooper"]) == 0
    [report_file] = tmp_path.glob("gpu_memory_check-*-dry-run.json")
    [table_file] = tmp_path.glob("gpu_memory_check-*-dry-run.md")
    report, table = json.loads(report_file.read_text()), table_file.read_text()
    by_part = {r["part"]: r for r in report["parts"]}
    assert list(by_part) == ["one", "zero3", "vllm_sleep", "cooper"]
    assert by_part["vllm_sleep"]["status"] == "skipped" and by_part["vllm_sleep"]["why"] == "vllm not installed"
    for name in ("one", "zero3", "cooper"):
        result, plan = by_part[name], by_part[name]["plan"]
        assert result["status"] == "dry run (not measured)" and result["timeout_s"] > 0, result
        assert 0 < plan["allocator_bytes"] <= plan["peak_bytes"] and plan["fits"], plan
        assert "CUDA context and workspaces" in plan["items"]  # a GPU plan, not the CPU's
    zero3 = by_part["zero3"]
    assert zero3["processes"] == 2 and zero3["processes_per_gpu"] == 2  # a one-GPU machine: both on it
    assert zero3["plan"]["device_total_bytes"] == 2 * zero3["plan"]["peak_bytes"]
    assert "--share-gpu" in zero3["command"] and "zero3.yaml" in zero3["command"]
    assert by_part["cooper"]["plan"]["peak_phase"] == "RM update"  # its RM update is in the plan, and runs (below)
    assert "benchmarks.gpu.gpu_memory_cooper:CooperWithReferencePositives" in by_part["cooper"]["command"]
    assert "rewards.0.params.optimizer_offload_step=" in by_part["cooper"]["command"]  # the paper config's RM settings
    assert "| planned peak (phase) | planned in torch's allocator | max allocated |" in table
    assert "vllm_sleep | skipped: vllm not installed" in table and report["commit"] in table


def test_two_processes_take_a_gpu_each_where_there_are_two(check, tmp_path):
    part = check.PARTS["fsdp2"]
    shared = check.part_command(part, tmp_path / "p", tmp_path / "r", tmp_path / "run", 1, False)
    own = check.part_command(part, tmp_path / "p", tmp_path / "r", tmp_path / "run", 2, False)
    assert "--share-gpu" in shared and "--share-gpu" not in own
    assert own[own.index("--num_processes") + 1] == "2" and own[own.index("--config_file") + 1].endswith("fsdp2.yaml")
    # the same global batch: 32 completions a step whatever the processes
    one = check.train_overrides(check.PARTS["one"], tmp_path, tmp_path, False)
    assert "grpo.per_device_train_batch_size=32" in one
    assert "grpo.per_device_train_batch_size=16" in check.train_overrides(part, tmp_path, tmp_path, False)
    sleep = check.train_overrides(check.PARTS["vllm_sleep"], tmp_path, tmp_path, True)
    awake = check.train_overrides(check.PARTS["vllm_awake"], tmp_path, tmp_path, True)
    assert "grpo.vllm_enable_sleep_mode=true" in sleep and "grpo.vllm_enable_sleep_mode=false" in awake


def test_an_unknown_part_and_a_machine_without_gpu_are_refused(check, tmp_path, monkeypatch):
    with pytest.raises(SystemExit) as exit_:
        check.main(["--out", str(tmp_path), "--dry-run", "--parts", "one,nope"])
    assert exit_.value.code == 2
    monkeypatch.setattr(check, "gpu_table", lambda: [])
    with pytest.raises(SystemExit) as exit_:
        check.main(["--out", str(tmp_path)])
    assert exit_.value.code == 2


def test_cooper_parts_positives_end_in_the_reference_and_fill_the_rms_tokens():
    from benchmarks.gpu.gpu_memory_cooper import RM_TOKENS, CooperWithReferencePositives, filled
    from coreward.demo.model import build_demo_tokenizer

    tokenizer = build_demo_tokenizer()
    logged = {}
    batch = SimpleNamespace(completions=["Ann has 3. #2", "x", "Bob has 5", "y"], references=["7", "7", "12", "12"],
                            num_generations=2, policy=SimpleNamespace(tokenizer=tokenizer),
                            log=lambda key, value: logged.__setitem__(key, value))
    pairs = CooperWithReferencePositives.make_pairs(None, batch, [0.5] * 4, questions=["q1", "q1", "q2", "q2"])
    assert [(p.question, p.reference) for p in pairs] == [("q1", "7"), ("q2", "12")]  # one per group
    assert pairs[0].positive.endswith("#### 7") and pairs[0].negative.endswith("#### 8")
    assert pairs[1].positive.startswith("Bob has 5") and pairs[1].negative.endswith("#### 13")
    assert len(tokenizer(filled("Ann has 3", tokenizer), add_special_tokens=False).input_ids) >= RM_TOKENS
    assert logged["rm/positive_rate"] == 1.0
