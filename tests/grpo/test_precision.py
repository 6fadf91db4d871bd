"""The policy learns in the users' precision: `model.dtype: bfloat16` at the papers' learning rate (1e-6) moves the
weights as far as the same run in float32, under one process and under each sharded engine, and the saved model
keeps what it learned.

AdamW's first steps move every weight with a gradient by about the learning rate (its update is m̂/(√v̂+ε): at
step 1 exactly lr·sign(g)), so the update's norm ‖θ_final − θ_init‖ of a run is nearly the same in any
precision that keeps the steps, and a run that rounds them away on bf16 weights moves far less (measured: 0.1×,
runtime/precision.py). Each test reads the update from what the run saved (`final/`), against the initial
weights in the dtype the run saved in (so the rounding of the start itself is not counted as learning).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from coreward.runtime.precision import update_norm
from tests.helpers.kill_resume import launch, train_command
from tests.helpers.runs import RULE_CONFIG, coreward_here


REPO = Path(__file__).resolve().parents[2]
ACCELERATE = REPO / "configs" / "accelerate"
STEPS = 2
BAND = (0.5, 2.0)  # the tolerance for "moves as fp32 would"


def settings(policy: Path) -> list[str]:
    # adam_epsilon 1e-12: a random policy's GRPO gradients are tiny (its group's advantages nearly cancel), near
    # AdamW's default ε (1e-8), where its step is ~lr·|g|/ε and follows every rounding of g; with ε far below |g|
    # the step is ~lr·sign(g) wherever g ≠ 0, as a real model's gradients (≫ 1e-8) give it
    return [f"model.name_or_path={policy}", "data.limit=4", "data.eval_every=0", "grpo.num_generations=4",
            "grpo.per_device_train_batch_size=8", "grpo.max_completion_length=24", "grpo.save_steps=100",
            "grpo.learning_rate=1e-6", "grpo.adam_epsilon=1e-12", "torch_threads=1"]


def config_with_signal(tmp_path: Path, teacher: bool = False) -> Path:
    """The demo rule config plus the entropy reward on a random policy: its rule rewards are all 0 (no variance, no
    gradient), and a policy sure of its answers has next to no gradient either, but a random policy's entropy
    varies from rollout to rollout, so every step has a signal. At full weight: gradients far above AdamW's ε
    (1e-8), where its step is about lr·sign(g) in any precision. With
    `teacher`, Co-rewarding-II's EMA teacher too, as the KL reference (how a sharded engine holds it), α = 0.5."""
    config = tmp_path / "config.yaml"
    teacher_reward = ("  - name: co_rewarding_2\n    params: {as_reference: true, alpha_start: 0.5, alpha_end: 0.5, "
                      "match: verified}\n") if teacher else ""
    config.write_text(f"base: {RULE_CONFIG}\nrewards:\n  - name: rule\n  - name: entropy\n"
                      + teacher_reward)
    return config


def moved(run_dir: Path, policy: Path, start: torch.dtype | None = None) -> float:
    """‖final − initial‖ from the files: the initial weights cast to the saved dtype first (and through `start`
    before that: DeepSpeed casts the module to bf16 before it makes its float32 masters from it, so a bf16 run's
    masters start from the bf16 copy of the initial weights; a bf16 checkpoint, as the papers' models are, loses
    nothing there)."""
    final = load_file(run_dir / "final" / "model.safetensors")
    initial = {k: v.to(start or v.dtype).to(final[k].dtype)
               for k, v in load_file(policy / "model.safetensors").items() if k in final}
    return update_norm(initial, final)


def precision_line(log: str) -> str:
    match = re.search(r"precision: .*", log)
    assert match, log[-3000:]
    return match.group(0)


def train_here(policy: Path, run_dir: Path, *extra: str):
    args = ["train", "--config", config_with_signal(run_dir.parent), "--output-dir", run_dir, "--max-steps", STEPS]
    for item in [*settings(policy), *extra]:
        args += ["--set", item]
    result = coreward_here(*args)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout + result.stderr


def test_one_process_bf16_learns_as_fp32_and_pure_bf16_does_not(tiny_policy, tmp_path):
    fp32_log = train_here(tiny_policy, tmp_path / "fp32", "torch_threads=null")  # picked from the idle cores
    bf16_log = train_here(tiny_policy, tmp_path / "bf16", "model.dtype=bfloat16")
    pure_log = train_here(tiny_policy, tmp_path / "pure", "model.dtype=bfloat16", "model.master_weights=none")
    assert "compute float32" in precision_line(fp32_log)
    assert re.search(r"threads: \d+ torch thread\(s\) per process, picked \(a [\d.]+M-parameter model on the CPU, "
                     r"[\d.]+ core\(s\) idle at the start", fp32_log), fp32_log[-3000:]  # and the log says so
    assert "threads: 1 torch thread(s) per process (torch_threads: 1)" in bf16_log
    assert precision_line(bf16_log) == "precision: policy weights float32, updated in float32, compute bfloat16 (single process)"
    assert "policy weights bfloat16, updated in bfloat16" in precision_line(pure_log)
    assert "round away" in pure_log and "round away" not in bf16_log  # the warning names the lost updates

    reference = moved(tmp_path / "fp32", tiny_policy)
    assert reference > 0
    ratio = moved(tmp_path / "bf16", tiny_policy) / reference
    assert BAND[0] <= ratio <= BAND[1], ratio
    # the negative control: pure bf16 weights at lr 1e-6 keep almost nothing (what every paper config did)
    assert moved(tmp_path / "pure", tiny_policy) / reference < BAND[0]

    # saved and loaded as a user would: float32 tensors, a config that says so, and the learning still there
    from transformers import AutoModelForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "bf16" / "final")
    assert loaded.dtype == torch.float32
    initial = AutoModelForCausalLM.from_pretrained(tiny_policy)
    saved = load_file(tmp_path / "bf16" / "final" / "model.safetensors")  # tied weights once
    after, before = ({k: v for k, v in m.state_dict().items() if k in saved} for m in (loaded, initial))
    assert update_norm(before, after) == pytest.approx(ratio * reference, rel=1e-6)

    # a bf16 copy is an explicit export (`coreward push --dtype bfloat16`), beside final/, which stays float32
    from coreward.grpo.publish import export_policy, push_plan

    exported = export_policy(tmp_path / "bf16", "bfloat16")
    assert {str(t.dtype) for t in load_file(exported / "model.safetensors").values()} == {"torch.bfloat16"}
    assert AutoModelForCausalLM.from_pretrained(exported).dtype == torch.bfloat16
    assert push_plan(tmp_path / "bf16", "me/p", "bfloat16")[0].folder == exported
    assert {str(t.dtype) for t in load_file(tmp_path / "bf16" / "final" / "model.safetensors").values()} == {"torch.float32"}


def test_low_precision_compute_needs_the_mixed_precision_flag(tiny_policy, tmp_path):
    """bf16 compute over float32 weights is autocast: a config that turns it off is told so, naming both keys."""
    args = ["train", "--config", RULE_CONFIG, "--output-dir", tmp_path / "run", "--max-steps", 1]
    for item in [*settings(tiny_policy), "model.dtype=bfloat16", "grpo.bf16=false"]:
        args += ["--set", item]
    result = coreward_here(*args)
    assert result.returncode == 2
    assert "model.dtype=bfloat16" in result.stderr and "grpo.bf16=False" in result.stderr


def has_deepspeed() -> bool:
    import importlib.util

    return importlib.util.find_spec("deepspeed") is not None


TEACHER = "final/reward_sources/co_rewarding_2/teacher.safetensors"


@pytest.fixture(scope="module")
def fp32_two_process_reference(tiny_policy, tmp_path_factory) -> dict[str, float]:
    """What a float32 run of the sharded tests' setting moves (policy and teacher), run once for every engine: one
    process holding both processes' batch (2 × 8 completions a step, every prompt each step). A correct engine
    computes the same float32 step as one process does, up to the order of its sums, so each engine's bf16 run is
    held against the same reference; an engine whose float32 run also failed to learn would fail here too."""
    run_dir = tmp_path_factory.mktemp("fp32_reference") / "run"
    args = ["train", "--config", config_with_signal(run_dir.parent, teacher=True), "--output-dir", run_dir,
            "--max-steps", STEPS]
    for item in [*settings(tiny_policy), "grpo.per_device_train_batch_size=16", "model.dtype=float32",
                 "grpo.beta=0.01"]:
        args += ["--set", item]
    result = coreward_here(*args)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    initial = {k: v.float() for k, v in load_file(tiny_policy / "model.safetensors").items()}
    return {"policy": moved(run_dir, tiny_policy),
            "teacher": update_norm(initial, {k: v.float() for k, v in load_file(run_dir / TEACHER).items()})}


@pytest.mark.parametrize("engine", [pytest.param("zero2", marks=pytest.mark.skipif(not has_deepspeed(), reason="deepspeed")),
                                    pytest.param("zero3", marks=pytest.mark.skipif(not has_deepspeed(), reason="deepspeed")),
                                    "fsdp2"])
def test_sharded_engine_bf16_learns_as_fp32(engine, tiny_policy, fp32_two_process_reference, tmp_path):
    """2 gloo processes under the engine's CPU config, launched with mixed_precision bf16: the rule reward and
    Co-rewarding-II's EMA teacher (the KL reference, as a sharded engine holds it), whose update α·(θ − θ_T) at lr
    1e-6 is far below a bf16 rounding step: it survives only in float32 (under ZeRO-3, per process, on its
    partitions). Held against the same setting's float32 run (`fp32_two_process_reference`)."""
    config = config_with_signal(tmp_path, teacher=True)
    run_dir = tmp_path / "bf16"
    command = train_command(config, run_dir, settings(tiny_policy) + ["model.dtype=bfloat16", "grpo.beta=0.01"],
                            STEPS, resume=False, accelerate_config=ACCELERATE / f"{engine}_cpu.yaml")
    command[command.index("--config_file") + 2:command.index("--config_file") + 2] = ["--mixed_precision", "bf16"]
    attempt = launch(command, run_dir)
    assert attempt.returncode == 0, attempt.log[-3000:]
    line = precision_line(attempt.log)
    assert "compute bfloat16" in line and "updated in float32" in line, line
    start = torch.bfloat16 if engine != "fsdp2" else None
    final = load_file(run_dir / "final" / "model.safetensors")
    assert {str(t.dtype) for t in final.values()} == {"torch.float32"}, engine  # masters written, not bf16 copies
    initial = {k: v.to(start or v.dtype).float() for k, v in load_file(tiny_policy / "model.safetensors").items()}
    teacher = update_norm(initial, {k: v.float() for k, v in load_file(run_dir / TEACHER).items()})
    ratio = moved(run_dir, tiny_policy, start) / fp32_two_process_reference["policy"]
    teacher_ratio = teacher / fp32_two_process_reference["teacher"]
    assert BAND[0] <= ratio <= BAND[1], (engine, ratio, fp32_two_process_reference)
    assert BAND[0] <= teacher_ratio <= BAND[1], (engine, teacher_ratio, fp32_two_process_reference)


def test_lora_keeps_a_bf16_base_and_trains_float32_adapters(tiny_policy, tmp_path):
    """A LoRA policy's base is frozen: it loads in model.dtype (no float32 copy of what nothing updates), and the
    adapters AdamW updates are float32 (PEFT's upcast over a bf16 base)."""
    log = train_here(tiny_policy, tmp_path / "lora", "model.dtype=bfloat16", "lora.enabled=true", "lora.r=4")
    assert precision_line(log) == "precision: policy weights float32, updated in float32, compute bfloat16 (single process)"
    from safetensors.torch import load_file as load

    adapter = load(tmp_path / "lora" / "final" / "adapter_model.safetensors")
    assert adapter and {str(t.dtype) for t in adapter.values()} == {"torch.float32"}


@pytest.mark.parametrize("dtype, grpo", [("float32", {}), ("bfloat16", {}), ("float16", {}), ("float32", {"bf16": True}),
                                         ("float32", {"fp16": True})])
def test_the_plan_reads_the_precision_the_run_sets(dtype, grpo, tmp_path):
    """The memory plan's compute dtype comes from the run's own rule (runtime/precision.py), so the two cannot part:
    on this machine (no launcher setting) the plan's compute is what the trainer's bf16/fp16 flags make it."""
    from coreward.grpo.config import TrainConfig
    from coreward.grpo.plan.settings import precision
    from coreward.grpo.train import build_grpo_args

    config = TrainConfig(grpo=dict(grpo))
    config.model.dtype = dtype
    args = build_grpo_args(config, tmp_path, max_steps=1)
    on_gpu = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    planned = precision(config, on_gpu=on_gpu)
    weights = "float32" if planned.weights == "auto" else planned.weights
    assert planned.compute == ("bfloat16" if args.bf16 else "float16" if args.fp16 else weights), (dtype, grpo)
