"""benchmarks/gpu/gpu_check.py stays alive without a GPU: on CPU with its tiny shapes and one step per part, the
training parts run (rule and the RM learner's update alone, in the learning check: bf16 against float32; Cooper
with its RM on a device of its own) and the report holds what it promises — a step time split by phase, a peak
memory per device, the date, machine, commit and command. The vLLM parts (Co-rewarding-II with its EMA teacher,
the policy's and the teacher's rollouts through vLLM; `coreward eval --backend vllm`) run in the `-m vllm` stage.
Parts that are the same run as one tested here with another setting ("cooper"; "co_rewarding_2" is the vLLM stage's
command without vLLM), or as another test's run (the rule reward through vLLM: tests/grpo/test_policy.py;
"cooper_sharded", Cooper under FSDP2 on 2 gloo processes: tests/grpo/test_sharded.py's fsdp2 run, its command
checked here) are left out of the runs: each costs a process start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.vllm_cpu import requires_vllm


REPO = Path(__file__).resolve().parents[1]


def gpu_check(tmp_path: Path, parts: str, *extra: str) -> tuple[dict, str]:
    out = tmp_path / "results"
    from coreward.experiments.jobs import free_port

    # the CPU path, also on a machine with a GPU; MASTER_PORT: its vLLM engine's own rendezvous port (CI runs two
    # vLLM tests side by side)
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}", "OMP_NUM_THREADS": "1",
           "CUDA_VISIBLE_DEVICES": "", "MASTER_PORT": str(free_port())}
    done = subprocess.run([sys.executable, "-m", "benchmarks.gpu.gpu_check", "--tiny", "--steps", "1", "--parts", parts,
                           "--out", str(out), *extra], capture_output=True, text=True, timeout=1200, cwd=REPO, env=env)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    [report_file] = list(out.glob("gpu_check-*-cpu.json"))
    [table_file] = list(out.glob("gpu_check-*-cpu.md"))
    return json.loads(report_file.read_text()), table_file.read_text()


def check_report(report: dict, table: str, parts: list[str]) -> dict[str, dict]:
    assert report["date"] and report["commit"] and "benchmarks.gpu.gpu_check" in report["command"]
    assert report["machine"]["cpu"] and report["steps"] == 1
    by_part = {r["part"]: r for r in report["parts"]}
    assert list(by_part) == parts
    for name, result in by_part.items():
        assert result["status"] == "ok", result.get("log_tail", result)
        assert result["peak_memory_gib"]["cpu"] > 0.1, result  # a torch process tree holds more than 100 MiB
        assert name in table
    for line in (report["date"], report["commit"], report["command"]):
        assert line in table
    assert "| planned peak GiB | measured GiB | measured / planned |" in table
    return by_part


def check_planned_memory(name: str, result: dict, band: tuple[float, float] = (0.5, 2.0)) -> None:
    """A part's row gives the plan's peak beside its process's measured peak RSS (CPU), and the plan is near it:
    the plan is built to be within ±20% on CPU for `coreward train`."""
    plan = result["memory_plan"]
    assert plan["measure"] == "peak_rss" and plan["measured_bytes"] > 100 * 2**20, (name, plan)
    assert plan["planned_bytes"] > 100 * 2**20, (name, plan)  # a plan with the process baseline in it
    assert plan["ratio"] == pytest.approx(plan["measured_bytes"] / plan["planned_bytes"]), (name, plan)
    assert band[0] <= plan["ratio"] <= band[1], (name, plan)


def check_training_parts(by_part: dict[str, dict]) -> None:
    """What every training part's report row must show: the RM learner took its optimizer steps; a policy part's
    step is split into phases that are parts of it."""
    if "rm_update" in by_part:
        rm_update = by_part["rm_update"]["phases_s"]  # the RM learner alone: it took its optimizer steps
        assert rm_update["rm_update"] > 0 and rm_update["rm_optimizer_steps"] >= 2, rm_update
        # planned: the RM update phase of a Cooper plan, whose process baseline is a training process's (TRL
        # imported), larger than the learner's process holds: a lower band
        assert by_part["rm_update"]["memory_plan"]["peak_phase"] in ("RM update", "RM step")
        check_planned_memory("rm_update", by_part["rm_update"], band=(0.4, 2.0))
    for name, result in by_part.items():
        if name == "rm_update":
            continue
        check_planned_memory(name, result)
        phases = result["phases_s"]
        assert result["generation"] == "transformers"
        assert phases["steps_timed"] == 1
        assert phases["step"] > 0 and {"generation", "reward", "update"} <= set(phases), (name, phases)
        # the phases are parts of the step, not made-up numbers beside it
        assert phases["generation"] + phases["update"] <= phases["step"] * 1.05 + 0.05, (name, phases)


@pytest.mark.slow
def test_gpu_check_runs_every_training_part_on_cpu(tmp_path):
    # "cooper" alone is left out: cooper_rm_own_device is the same run with the RM's device set; "rule" and
    # "rm_update" run in the learning check's test below (each part here is a process start and a run)
    parts = ["cooper_rm_own_device"]
    report, table = gpu_check(tmp_path, ",".join(parts), "--no-vllm")
    by_part = check_report(report, table, parts)
    check_training_parts(by_part)
    assert "teacher_generation" not in by_part["cooper_rm_own_device"]["phases_s"]  # only Co-rewarding-II's teacher samples
    assert "rewards.0.params.device=cpu" in by_part["cooper_rm_own_device"]["command"]
    assert "FSDP" not in (by_part["cooper_rm_own_device"]["engine"] or "")  # one plain process (no engine line)


def test_gpu_check_cooper_sharded_command_is_an_fsdp2_launch_of_the_tested_run(tmp_path):
    """The cooper_sharded part's command: `accelerate launch` with the shipped FSDP2 config on 2 gloo processes (one
    per GPU there), Cooper's demo config with the RM's settings a sharded RM accepts; the run it launches is
    tests/grpo/test_sharded.py's fsdp2 run (Cooper's RM sharded like the policy)."""
    from benchmarks.gpu import gpu_check as module

    settings = {"gradient_checkpointing": True, "max_tokens_per_pass": 4096}
    cpu = module.part_command("cooper_sharded", tmp_path / "policy", tmp_path / "rm", tmp_path / "run", 1, True, 0,
                              False, rm_settings=settings)
    launcher = cpu.index("accelerate.commands.launch")
    assert cpu[launcher + 1:launcher + 7] == ["--config_file", str(REPO / "configs" / "accelerate" / "fsdp2_cpu.yaml"),
                                             "--num_processes", "2", "--main_process_port", "0"]
    assert (REPO / "configs" / "accelerate" / "fsdp2_cpu.yaml").is_file()
    assert cpu[cpu.index("coreward.cli") + 1:cpu.index("coreward.cli") + 3] == ["train", "--config"]
    assert "rewards.0.params.gradient_checkpointing=true" in cpu
    assert not any("max_tokens_per_pass" in item for item in cpu)  # a sharded RM refuses it: left out
    gpu = module.part_command("cooper_sharded", tmp_path / "policy", tmp_path / "rm", tmp_path / "run", 3, False, 4,
                              True, learning=True)
    assert gpu[gpu.index("--config_file") + 1].endswith("fsdp2.yaml") and gpu[gpu.index("--num_processes") + 1] == "4"
    assert gpu[gpu.index("--mixed_precision") + 1] == "bf16"


def test_gpu_check_refuses_an_unknown_part():
    done = subprocess.run([sys.executable, "-m", "benchmarks.gpu.gpu_check", "--parts", "rule,nope"], capture_output=True,
                          text=True, timeout=120, cwd=REPO)
    assert done.returncode == 2 and "unknown nope" in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("_", [pytest.param(None, marks=requires_vllm, id="vllm")])
def test_gpu_check_runs_the_vllm_parts(tmp_path, _):
    # the rule reward's vLLM training is tests/grpo/test_policy.py's; co_rewarding_2 generates the policy's and
    # the teacher's rollouts through vLLM (with rule in its place this test took 98 s instead of 79 s: the rule demo
    # config's rollouts are longer)
    parts = ["co_rewarding_2", "eval_vllm"]
    report, table = gpu_check(tmp_path, ",".join(parts))
    by_part = check_report(report, table, parts)
    assert by_part["co_rewarding_2"]["generation"] == "vllm"
    assert "teacher_generation" in by_part["co_rewarding_2"]["phases_s"]
    # `coreward eval --backend vllm` records the device and dtype it ran with, as resolved by vLLM: "cpu" here, not a
    # hard-coded "cuda"; dtype "auto" becomes the dtype vLLM chose
    from vllm.platforms import current_platform

    settings = by_part["eval_vllm"]["eval"]["settings"]
    assert settings["backend"] == "vllm" and settings["device"] == current_platform.device_type
    assert settings["dtype"] in ("bfloat16", "float16", "float32")
    assert by_part["eval_vllm"]["eval"]["timing"]["generation_time_s"] > 0


@pytest.mark.slow
def test_gpu_check_learning_check_compares_bf16_with_a_float32_reference(tmp_path):
    """`--learning`: the rule part at lr 1e-6 in bf16 against its float32 reference, and Cooper's RM learner in bf16
    (float32 masters) and the authors' pure bf16 against a float32 RM; each row's ratio lands in the report. The RM
    learner runs the batch the part asks for (4 sequences a pass) and the memory settings given to it."""
    report, table = gpu_check(tmp_path, "rule,rm_update", "--no-vllm", "--learning", "--rm-settings",
                              "gradient_checkpointing=true,max_tokens_per_pass=4096")
    by_part = check_report(report, table, ["rule", "rm_update"])
    check_training_parts(by_part)
    assert "teacher_generation" not in by_part["rule"]["phases_s"]
    assert "FSDP" not in (by_part["rule"]["engine"] or "")  # one plain process (it prints no engine line)
    rule = by_part["rule"]["learning"]
    assert rule["ok"] and 0.5 <= rule["policy"]["ratio"] <= 2.0 and rule["policy"]["fp32_update_norm"] > 0, rule
    assert "model.dtype=float32" in rule["reference_command"] and "grpo.bf16=false" in rule["reference_command"]
    assert "compute bfloat16" in by_part["rule"]["precision"]
    rm = by_part["rm_update"]["learning"]
    assert rm["ok"] and 0.5 <= rm["ratios"]["bfloat16"] <= 2.0, rm
    assert rm["ratios"]["bfloat16, master_weights none"] < rm["ratios"]["bfloat16"], rm  # the authors' bf16 steps lose some
    phases = by_part["rm_update"]["phases_s"]
    assert phases["sequences_per_pass"] == 4, phases
    assert phases["rm_settings"] == {"gradient_checkpointing": True, "max_tokens_per_pass": 4096}, phases
    assert "Learning check" in table and "| rule | policy |" in table
