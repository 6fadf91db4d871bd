"""Sharded training engines on CPU (2 gloo processes, `accelerate launch` with the shipped CPU configs):
DeepSpeed ZeRO-2, ZeRO-3 (every parameter partitioned) and FSDP2 (DTensor shards), each running rule,
Cooper, Co-rewarding-II and a frozen RM (`model`) together (one run, four reward sources, so their state is all
exercised), with periodic evaluation and the overoptimization guard on (it fires at step 1 and writes best/,
a collective save), each killed (SIGKILL in the reward phase of step 2) and resumed: the resumed run ends where an
uninterrupted run of the same engine ends — policy weights, EMA teacher, Cooper's RM, its optimizer and counters.
test_every_option.py has the same engines on label-free data (its docstring: which options meet where).

Cooper's RM is sharded like the policy (rm/sharding.py): its checkpoint holds the whole RM (gathered, written
once, `VerifyRM.from_pretrained` loads it) and the resume scatters it back into the shards, with its optimizer
(FSDP2: the gathered state, written once; DeepSpeed: the RM engine's per-rank shards).

The engine line each run prints (`engine: ... policy P/T tensors partitioned, ..., rm P/T tensors partitioned`)
is asserted, so a silent fall-back to DDP (accelerate's behaviour for FSDP on CPU), to whole ZeRO-3 tensors or
to a replicated RM fails the test.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from coreward.runtime.metrics import read_metrics
from tests.helpers.kill_resume import kill_and_resume, launch, train_command


REPO = Path(__file__).resolve().parents[2]
ACCELERATE = REPO / "configs" / "accelerate"
MAX_STEPS = 2  # killed at step 2 and resumed from checkpoint 1: the resumed launch makes a whole step


def labelled_methods(tmp_path: Path, rm: Path, cooper_extra: str = "") -> Path:
    """A run with the rule reward, Cooper (a learning RM; `cooper_extra`: more of its params, e.g. `, k: v`),
    Co-rewarding-II (an EMA teacher that is the KL reference: the only teacher a sharded engine can hold) and a frozen
    RM (`model`)."""
    config = tmp_path / "labelled_methods.yaml"
    config.write_text(f"""
base: {REPO / "configs" / "demo" / "rule.yaml"}
rewards:
  - name: rule
  - name: cooper
    params: {{rm: {rm}, assistant: perturb, positive: first, negative: assistant, lr: 0.001{cooper_extra}}}
  - name: co_rewarding_2
    params: {{alpha_start: 0.05, alpha_end: 0.005, as_reference: true, match: verified}}
  - name: model
    params: {{path: {rm}}}
""")
    return config


def overrides(policy: Path) -> list[str]:
    # temperature 1.5: the memorized policy repeats its answers at 1.0, and a step whose groups all agree does not
    # move it (the resumed step must move the policy for the checks below to mean something)
    return [f"model.name_or_path={policy}", "data.limit=4", *GUARDED, "grpo.num_generations=4",
            "grpo.per_device_train_batch_size=4", "grpo.max_completion_length=24", "grpo.save_steps=1",
            "grpo.learning_rate=1e-3", "grpo.beta=0.01", "grpo.temperature=1.5", "torch_threads=1"]


# periodic evaluation (2 demo problems with answers, 2 samples, every 2 steps) and the guard, set to fire at its first
# reading (step 1: no drop required) and write best/ there, once (no later gain reaches best_min_gain 1)
GUARDED = ["data.eval_split=train", "data.eval_limit=2", "data.eval_n=2", "data.eval_every=2", "guard.warmup=1",
           "guard.min_drop=0", "guard.rel_drop=0", "guard.patience=1", "guard.best_min_gain=1"]


def assert_guard_fired_at_step_1(run_dir: Path, evaluated: tuple[int, ...] = (0, 2)) -> None:
    """The guard (on the training rollouts' verified accuracy) fired at step 1 and best/ holds step 1; the held-out
    set was evaluated at the steps `evaluated`."""
    from coreward.grpo.guard import GUARD_FILE, read_best

    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [row["step"] for row in rows if row.get("guard/alarm") == 1] == [1]
    assert tuple(sorted(row["step"] for row in rows if "eval/avg@2" in row)) == evaluated
    assert json.loads((run_dir / GUARD_FILE).read_text())["fired_at"] == 1
    assert read_best(run_dir)["step"] == 1 and (run_dir / "best" / "model.safetensors").is_file()


def engine_line(log: str) -> tuple[str, dict[str, tuple[int, int]]]:
    match = re.search(r"engine: (.+?) on 2 process\(es\); (.*)", log)
    assert match, log[-3000:]
    counts = {name: (int(p), int(t)) for name, p, t in re.findall(r"(\w+) (\d+)/(\d+) tensors partitioned", match.group(2))}
    return match.group(1), counts


def assert_close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float = 1e-6) -> None:
    assert sorted(a) == sorted(b)
    for name in a:
        assert torch.allclose(a[name].float(), b[name].float(), atol=atol, rtol=0), (name, (a[name] - b[name]).abs().max())


def flat_tensors(value, prefix: str = "") -> dict[str, torch.Tensor]:
    """Every tensor in a nested optimizer state (dicts, lists), by its path."""
    if torch.is_tensor(value):
        return {prefix: value}
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else []
    return {k: v for key, item in items for k, v in flat_tensors(item, f"{prefix}/{key}").items()}


def rm_optimizer(rm_dir: Path) -> dict[str, torch.Tensor]:
    """Cooper's RM optimizer state in a checkpoint: the gathered file (FSDP2) or DeepSpeed's per-rank shards."""
    files = sorted(rm_dir.glob("optimizer_full.pt")) or sorted(rm_dir.glob("rm_engine/rm/*optim_states.pt"))
    assert files, sorted(p.name for p in rm_dir.rglob("*"))
    return {f"{file.name}{k}": v for file in files
            for k, v in flat_tensors(torch.load(file, map_location="cpu", weights_only=False)).items()}


def has_deepspeed() -> bool:
    import importlib.util

    return importlib.util.find_spec("deepspeed") is not None


needs_deepspeed = pytest.mark.skipif(not has_deepspeed(), reason='the deepspeed extra: pip install -e ".[deepspeed]"')


@pytest.mark.parametrize("engine", [pytest.param("zero2", marks=needs_deepspeed),
                                    pytest.param("zero3", marks=needs_deepspeed), "fsdp2"])
def test_sharded_engine_runs_labelled_methods_guarded_and_resumes_exactly(engine, memorized_policy, tiny_rm_path, tmp_path):
    accelerate_config = ACCELERATE / f"{engine}_cpu.yaml"
    config, settings = labelled_methods(tmp_path, tiny_rm_path), overrides(memorized_policy)

    straight = launch(train_command(config, tmp_path / "reference", settings, MAX_STEPS, resume=False,
                                    accelerate_config=accelerate_config), tmp_path / "reference")
    assert straight.returncode == 0, straight.log[-3000:]
    assert_guard_fired_at_step_1(tmp_path / "reference")
    name, counts = engine_line(straight.log)
    policy_partial, policy_total = counts["policy"]
    rm_partial, rm_total = counts["rm"]
    if engine == "zero2":  # whole parameters, optimizer state split: one shard of it per process (policy and RM)
        assert name == "DeepSpeed ZeRO-2" and policy_partial == 0 and rm_partial == 0
        shards = sorted((tmp_path / "reference" / f"checkpoint-{MAX_STEPS}").glob("global_step*/*optim_states.pt"))
        assert len(shards) == 2, shards
    elif engine == "zero3":  # every tensor partitioned (threshold 0): policy, teacher (the reference) and RM
        assert name == "DeepSpeed ZeRO-3"
        assert policy_partial == policy_total > 0 and counts["reference"][0] == counts["reference"][1] > 0
        assert rm_partial == rm_total > 0
    else:  # FSDP2: DTensor shards, not DDP
        assert name == "FSDP2" and policy_partial > 0 and counts["reference"][0] > 0 and rm_partial > 0
    if engine != "zero2":  # the RM's optimizer state is split too: one DeepSpeed shard per process
        rm_engine = tmp_path / "reference" / f"checkpoint-{MAX_STEPS}" / "reward_sources" / "cooper" / "rm_engine"
        assert engine == "fsdp2" or len(sorted(rm_engine.glob("rm/*optim_states.pt"))) == 2

    run_dir = tmp_path / "killed"
    attempts = kill_and_resume(config, run_dir, settings, MAX_STEPS, ["reward"], random.Random(0),
                               accelerate_config=accelerate_config)
    assert [a.kill for a in attempts] == ["reward:2", ""]
    assert attempts[0].killed, attempts[0].log[-3000:]
    assert attempts[1].returncode == 0, attempts[1].log[-3000:]
    assert attempts[1].resumed_from == attempts[1].expected_from is not None
    assert [row["step"] for row in read_metrics(run_dir / "metrics.jsonl") if "reward" in row] == list(range(1, MAX_STEPS + 1))
    assert_guard_fired_at_step_1(run_dir)  # the alarm and best/ of step 1, from before the checkpoint, kept
    assert "restarts from the policy" not in attempts[1].log  # the teacher came back from the checkpoint

    ours, theirs = run_dir / f"checkpoint-{MAX_STEPS}", tmp_path / "reference" / f"checkpoint-{MAX_STEPS}"
    assert_close(load_file(ours / "model.safetensors"), load_file(theirs / "model.safetensors"))
    # and the resumed step had something to get right: the policy moved in it
    before = load_file(tmp_path / "reference" / f"checkpoint-{MAX_STEPS - 1}" / "model.safetensors")
    after = load_file(theirs / "model.safetensors")
    assert any(not torch.equal(before[k], after[k]) for k in after)
    teacher, teacher_ref = ours / "reward_sources" / "co_rewarding_2", theirs / "reward_sources" / "co_rewarding_2"
    assert_close(load_file(teacher / "teacher.safetensors"), load_file(teacher_ref / "teacher.safetensors"))
    assert json.loads((teacher / "teacher_state.json").read_text()) == json.loads((teacher_ref / "teacher_state.json").read_text())
    # the teacher is a whole model (gathered), and it moved away from the initial policy
    initial = load_file(Path(memorized_policy) / "model.safetensors")
    saved_teacher = load_file(teacher / "teacher.safetensors")
    assert all(saved_teacher[k].shape == initial[k].shape for k in initial if k in saved_teacher)
    assert any(not torch.equal(saved_teacher[k].float(), initial[k].float()) for k in initial if k in saved_teacher)
    rm, rm_ref = ours / "reward_sources" / "cooper", theirs / "reward_sources" / "cooper"
    assert json.loads((rm / "cooper_state.json").read_text()) == json.loads((rm_ref / "cooper_state.json").read_text())
    assert json.loads((rm_ref / "cooper_state.json").read_text())["updates"] > 0  # the RM took optimizer steps
    assert_close(load_file(rm / "rm" / "model.safetensors"), load_file(rm_ref / "rm" / "model.safetensors"))
    assert_close(rm_optimizer(rm), rm_optimizer(rm_ref))
    # the whole RM (not a shard), and it learned
    from coreward.rm.model import VerifyRM

    saved_rm = VerifyRM.from_pretrained(rm / "rm", device="cpu").model.state_dict()
    initial_rm = VerifyRM.from_pretrained(tiny_rm_path, device="cpu").model.state_dict()
    assert all(saved_rm[k].shape == initial_rm[k].shape for k in initial_rm)
    assert any(not torch.equal(saved_rm[k], initial_rm[k]) for k in initial_rm)
