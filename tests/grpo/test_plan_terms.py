"""The plan's terms that other trainers' runs showed missing (issue 55, item 2), and planning from real lengths
(item 3): DeepSpeed's float32 gradients for the optimizer step and ZeRO-3's live parameters, NCCL's buffers per
process group, backward's activation gradients (the policy's, and Cooper's RM's in the RM update), vLLM's residue
while asleep, the allocator's reserve over what it allocates; `coreward plan --lengths data` at the completions a
run logged, and the train-time line naming the lengths it planned at. Planned in this process (no weights load)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coreward.grpo.config import as_train_config
from coreward.grpo.plan import Hardware, logged_completion_tokens, plan_run, processes
from coreward.grpo.plan.generation import VLLM_ASLEEP_BYTES
from coreward.grpo.plan.sharding import NCCL_GROUP_BYTES, NCCL_GROUP_BYTES_OF_TWO
from coreward.grpo.plan.step import NOT_TORCH_ALLOCATED, RESERVED_OVER_ALLOCATED
from coreward.runtime.memory import GIB, ModelShape, parameter_count


REPO = Path(__file__).resolve().parents[2]
MATH = REPO / "configs" / "paper" / "gt_grpo_math_qwen.yaml"  # Qwen3-8B
DEMO = REPO / "configs" / "demo" / "rule.yaml"


def planned(config: Path, hardware: Hardware, *sets: str, completion_tokens=None):
    with processes(hardware):
        train_config = as_train_config(str(config), list(sets))
    return plan_run(train_config, hardware, None, completion_tokens)


def item_bytes(plan, name: str) -> int:
    return next((i.bytes for i in plan.items if i.name == name), 0)


QWEN3_8B = ModelShape.from_path("Qwen/Qwen3-8B-Base")
COUNT = parameter_count(QWEN3_8B, "lm")


@pytest.mark.parametrize("engine,elements", [("zero2", COUNT // 8), ("zero3", min(COUNT // 8, 1_000_000_000))])
def test_deepspeed_steps_on_a_float32_copy_of_its_gradient_partition(engine, elements):
    plan = planned(MATH, Hardware(8, 80 * GIB, engine))
    assert item_bytes(plan, "DeepSpeed float32 gradients for the optimizer step") == 4 * elements
    assert item_bytes(planned(MATH, Hardware(8, 80 * GIB, "fsdp2")),
                      "DeepSpeed float32 gradients for the optimizer step") == 0


def test_zero3_holds_up_to_its_max_live_parameters_gathered():
    plan = planned(MATH, Hardware(8, 80 * GIB, "zero3"))
    assert item_bytes(plan, "gathered weights (sharded engine)") == min(COUNT, 1_000_000_000) * 2  # bf16


@pytest.mark.parametrize("gpus,engine,expected", [
    (1, "one", 0), (2, "ddp", NCCL_GROUP_BYTES_OF_TWO), (8, "fsdp2", NCCL_GROUP_BYTES),
    (8, "zero3", 2 * NCCL_GROUP_BYTES)])  # DeepSpeed clones the world group: a second communicator
def test_nccl_buffers_per_process_group(gpus, engine, expected):
    assert item_bytes(planned(MATH, Hardware(gpus, 80 * GIB, engine)), "NCCL buffers") == expected


def test_backward_holds_one_layers_activation_gradients():
    plan = planned(MATH, Hardware(8, 80 * GIB, "zero3"))
    rows, seq = plan.lengths.rows, plan.lengths.seq_len
    expected = rows * seq * (2 * (2 * QWEN3_8B.intermediate_size + QWEN3_8B.q_width) + 2 * 2 * QWEN3_8B.hidden_size)
    assert item_bytes(plan, "backward's activation gradients (one layer, transient)") == expected


RM_GRADIENTS = "rewards.0 Cooper RM backward's activation gradients (one layer, transient)"


def test_coopers_rm_update_holds_one_rm_layers_activation_gradients_per_pass_of_its_tokens():
    """The RM's backward allocates what the policy's does (activation_gradient_bytes at the RM's shape, in rm_dtype:
    no autocast), over one RM pass's tokens: twice the budget per pass, twice the term; one layer's whether or not
    the RM is checkpointed. A static RM never runs a backward: its plan has none."""
    from coreward.grpo.plan.activations import activation_gradient_bytes

    cpu = Hardware(1, 16 * GIB, "one", "cpu")
    cooper = REPO / "configs" / "demo" / "cooper.yaml"
    plan = planned(cooper, cpu)
    found = next(i for i in plan.items if i.name == RM_GRADIENTS)
    assert found.phases == ("RM update",)
    rm = ModelShape.from_path("demo", "rm")
    assert found.bytes == activation_gradient_bytes(rm, 32 * 256, 4, 4) > 0  # 32 sequences x 256 tokens, float32
    small, large = (item_bytes(planned(cooper, cpu, f"rewards.0.params.max_tokens_per_pass={n}"), RM_GRADIENTS)
                    for n in (2048, 4096))  # 8 and 16 sequences of 256 tokens a pass
    assert large == 2 * small == 2 * activation_gradient_bytes(rm, 8 * 256, 4, 4)
    assert item_bytes(planned(cooper, cpu, "rewards.0.params.gradient_checkpointing=true"), RM_GRADIENTS) == found.bytes
    assert item_bytes(planned(cooper, cpu, "rewards.0.params.rm_dtype=bfloat16"), RM_GRADIENTS) == found.bytes // 2
    static = planned(REPO / "configs" / "demo" / "model.yaml", cpu)
    assert not [i.name for i in static.items if i.name.startswith("rewards.") and "activation gradients" in i.name]


def test_vllm_asleep_leaves_its_residue_outside_generation():
    asleep = planned(MATH, Hardware(8, 80 * GIB, "zero3"), "grpo.vllm_enable_sleep_mode=true")
    residue = next(i for i in asleep.items if i.name == "vLLM residue while asleep")
    assert residue.bytes == VLLM_ASLEEP_BYTES and "generation" not in residue.phases and "policy update" in residue.phases
    awake = planned(MATH, Hardware(8, 80 * GIB, "zero3"), "grpo.vllm_enable_sleep_mode=false")
    assert not item_bytes(awake, "vLLM residue while asleep")


def test_the_allocator_reserve_is_a_tenth_of_what_torch_allocates_on_a_gpu_only():
    plan = planned(MATH, Hardware(8, 80 * GIB, "zero3"))
    others = [i for i in plan.items if i.name != "allocator reserve over allocated"]
    allocated = max(sum(i.bytes for i in others if p in i.phases and i.name not in NOT_TORCH_ALLOCATED)
                    for p in ("generation", "reward scoring", "RM update", "RM step", "policy update"))
    assert item_bytes(plan, "allocator reserve over allocated") == int(RESERVED_OVER_ALLOCATED * allocated)
    cpu = planned(DEMO, Hardware(1, 16 * GIB, "one", "cpu"))
    assert not item_bytes(cpu, "allocator reserve over allocated") and not item_bytes(cpu, "NCCL buffers")


def test_a_cpu_launch_of_two_fsdp2_processes_is_planned_per_process():
    one = planned(DEMO, Hardware(1, 16 * GIB, "one", "cpu"))
    two = planned(DEMO, Hardware(2, 8 * GIB, "fsdp2", "cpu"))
    assert item_bytes(two, "policy AdamW moments") == item_bytes(one, "policy AdamW moments") // 2
    assert item_bytes(two, "gathered weights (sharded engine)") > 0


def write_metrics(run_dir: Path, longest: list[int]) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"step": i + 1, "completions/max_length": float(n)}) for i, n in enumerate(longest)]
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n{\"step\": 9, \"comp")  # a line cut by a kill
    return run_dir


def test_logged_completions_at_a_percentile_of_the_steps_longest(tmp_path):
    run = write_metrics(tmp_path / "run", [100, 300, 200, 120, 180, 150, 170, 160, 140, 130])
    assert logged_completion_tokens(run)[0] == 300
    assert logged_completion_tokens(run, 90)[0] == 200
    assert logged_completion_tokens(run, 50)[0] == 150
    assert logged_completion_tokens(tmp_path / "none") is None


def test_plan_from_logged_lengths_is_below_the_worst_case_and_says_which_it_used(tmp_path):
    run = write_metrics(tmp_path / "run", [900, 1500, 1100])
    gpu = Hardware(8, 80 * GIB, "zero3")
    worst = planned(MATH, gpu)
    data = planned(MATH, gpu, completion_tokens=logged_completion_tokens(run))
    assert data.lengths.completion_tokens == 1500 < worst.lengths.completion_tokens
    assert data.peak_bytes < worst.peak_bytes
    assert "1500 tokens" in data.lengths.describe() and "metrics.jsonl" in data.lengths.describe()
    # a logged length over the config's limit is never planned
    long = planned(MATH, gpu, completion_tokens=(1 << 20, "logs"))
    assert long.lengths.completion_tokens == worst.lengths.completion_tokens


def test_plan_command_lengths_data_prints_both_and_train_check_says_worst_case(tmp_path):
    from coreward.grpo.plan import check_before_loading
    from tests.helpers.runs import coreward_here

    run = write_metrics(tmp_path / "run", [10, 12])
    done = coreward_here("plan", "--config", DEMO, "--device", "cpu", "--json", "--lengths", "data", "--from-run", run)
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(done.stdout)
    assert data["lengths"]["completion_tokens"] == 12 and data["worst_case_peak_bytes"] > data["peak_bytes"]
    bad = coreward_here("plan", "--config", DEMO, "--lengths", "typical")
    assert bad.returncode == 2 and "--lengths" in bad.stderr
    with processes(Hardware(1, 16 * GIB, "one", "cpu")):
        config = as_train_config(str(DEMO), [])
    line = check_before_loading(config, hardware=Hardware(1, 16 * GIB, "one", "cpu"), prompt_tokens=23)
    assert "worst-case lengths: prompts 23 tokens" in line and "completions 32 tokens" in line


def test_every_comparable_published_run_agrees_with_the_plan(capsys):
    """benchmarks/memory/peer_runs.py: other trainers' published runs and OOMs, at least eight, each with its source; the plan
    agrees with every one coreward runs the same work for (it exits 1 otherwise), and says why the others differ."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("peer_runs", REPO / "benchmarks" / "memory" / "peer_runs.py")
    peer_runs = importlib.util.module_from_spec(spec)
    sys.modules["peer_runs"] = peer_runs  # its dataclass looks its module up there
    spec.loader.exec_module(peer_runs)
    assert len(peer_runs.CASES) >= 8 and all(c.source.startswith("https://") for c in peer_runs.CASES)
    argv, sys.argv = sys.argv, ["peer_runs.py"]
    try:
        with pytest.raises(SystemExit) as done:
            peer_runs.main()
    finally:
        sys.argv = argv
    assert done.value.code == 0, capsys.readouterr().out[-3000:]
    counted = [c for c in peer_runs.CASES if not c.comparable]
    assert len(counted) >= 5 and {c.ran for c in counted} == {True, False}  # runs that fit and runs that did not
