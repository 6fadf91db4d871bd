"""Co-rewarding-II: the EMA and its schedule against direct computations, pseudo labels on hand-built teacher
rollouts, LoRA adapters, and real runs (resume continues with the same teacher; the teacher as KL reference)."""

from __future__ import annotations

import copy
import json
import math
import os
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from coreward.rewards.co_rewarding_2 import CoRewarding2Reward
from coreward.rewards.co_rewarding_2.ema_teacher import EmaTeacher, cosine_alpha
from coreward.rewards.co_rewarding_2.teacher_weights import (
    STATE_FILE,
    WEIGHTS_FILE,
    adapter_pairs,
    add_teacher_adapter,
    full_pairs,
)
from coreward.runtime.errors import CorewardError
from coreward.verify import Verifier
from tests.helpers import warm_launch
from tests.helpers.batches import batch_of
from tests.helpers.kill_resume import free_port  # the same hand-built groups


REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "demo" / "co_rewarding_2.yaml"
# the demo config's schedule, α 0.05 → 0.005 (½(α_start − α_end) = 0.0225), worked out by hand at (t, T):
ALPHA = {(1, 2): 0.0275,  # cos(π/2) = 0: the midpoint, 0.005 + 0.0225
         (2, 3): 0.01625}  # cos(2π/3) = −0.5: 0.005 + 0.0225 · 0.5


# ---------------------------------------------------------------------------------- EMA and schedule
def test_cosine_schedule_at_steps_worked_by_hand():
    """α(t) = α_end + ½(α_start − α_end)(1 + cos(πt/T)), the authors' schedule, worked out by hand at each step."""
    start, end = 0.6, 0.1  # ½(α_start − α_end) = 0.25
    by_hand = {  # T = 4
        0: 0.6,  # cos 0 = 1: α_start
        1: 0.5267767,  # cos(π/4) = 0.7071068: 0.1 + 0.25 · 1.7071068
        2: 0.35,  # cos(π/2) = 0: the midpoint
        3: 0.1732233,  # cos(3π/4) = −0.7071068: 0.1 + 0.25 · 0.2928932
        4: 0.1,  # cos π = −1: α_end
        12: 0.1,  # past T it stays at α_end
    }
    for t, expected in by_hand.items():
        assert cosine_alpha(t, 4, start, end) == pytest.approx(expected, rel=1e-6), t
    # the schedules the runs below and test_teacher_behaviour.py use
    assert cosine_alpha(1, 3, 0.6, 0.1) == pytest.approx(0.475)  # cos(π/3) = 0.5: 0.1 + 0.25 · 1.5
    assert cosine_alpha(2, 3, 0.6, 0.1) == pytest.approx(0.225)  # cos(2π/3) = −0.5: 0.1 + 0.25 · 0.5
    assert cosine_alpha(1, 2, 0.05, 0.005) == pytest.approx(ALPHA[1, 2])
    assert cosine_alpha(2, 3, 0.05, 0.005) == pytest.approx(ALPHA[2, 3])
    assert cosine_alpha(5, 10, 0.01, 1e-4) == pytest.approx(0.00505)  # the authors' 0.01 → 1e-4 at mid-run


def test_ema_update_every_k_steps_matches_a_direct_loop():
    torch.manual_seed(0)
    policy = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    teacher_module = copy.deepcopy(policy).requires_grad_(False)
    teacher = EmaTeacher(alpha_start=0.3, alpha_end=0.01, update_every=2)
    teacher.bind(teacher_module, full_pairs(teacher_module, policy))
    T = 7
    expected = {n: p.detach().clone().double() for n, p in policy.named_parameters()}
    for t in range(T):
        with torch.no_grad():  # "training" moves the policy between updates
            for p in policy.parameters():
                p.add_(torch.randn_like(p))
        teacher.maybe_update(t, T)
        if t % 2 == 0:  # K = 2: updates before steps 0, 2, 4, 6
            alpha = 0.01 + 0.5 * (0.3 - 0.01) * (1 + math.cos(math.pi * t / T))
            for n, p in policy.named_parameters():
                expected[n] = alpha * p.detach().double() + (1 - alpha) * expected[n]
            assert teacher.last_alpha == pytest.approx(alpha)
        for n, p in teacher_module.named_parameters():
            assert torch.allclose(p.double(), expected[n], atol=1e-6), (t, n)
    assert teacher.last_update_step == 6


def test_bfloat16_teacher_keeps_a_float32_average():
    """With α = 1e-4, a bfloat16 weight can't hold one EMA step; the float32 master does, and the teacher follows it."""
    policy = torch.nn.Linear(8, 8, bias=False).to(torch.bfloat16)
    teacher_module = copy.deepcopy(policy).requires_grad_(False)
    with torch.no_grad():
        policy.weight.add_(1.0)
    teacher = EmaTeacher(alpha_start=1e-4, alpha_end=1e-4)
    teacher.bind(teacher_module, full_pairs(teacher_module, policy))
    start = teacher_module.weight.detach().double().clone()
    direct = start.clone()
    for t in range(200):
        teacher.maybe_update(t, 200)
        direct = 1e-4 * policy.weight.double() + (1 - 1e-4) * direct
    assert torch.allclose(teacher.masters[0].double(), direct, atol=1e-5)
    assert torch.allclose(teacher_module.weight.double(), direct.to(torch.bfloat16).double())
    assert not torch.equal(teacher_module.weight.double(), start)  # it moved (~0.02), which bf16 EMA alone can't


def test_lora_ema_touches_only_the_teacher_adapter():
    from peft import LoraConfig, get_peft_model

    from coreward.demo.model import build_demo_model, build_demo_tokenizer

    model = build_demo_model(build_demo_tokenizer(), hidden=32, layers=1, heads=2, kv_heads=1, intermediate=64)
    model = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM"))
    add_teacher_adapter(model, "teacher")
    pairs = adapter_pairs(model, "teacher")
    assert pairs and all(".teacher." in name for name, _, _ in pairs)
    assert all(torch.equal(t, p) and not t.requires_grad for _, t, p in pairs)  # a frozen copy of the adapter
    with torch.no_grad():  # the trained adapter moves
        for name, p in model.named_parameters():
            if ".default." in name:
                p.add_(torch.randn_like(p))
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    teacher = EmaTeacher(alpha_start=0.25, alpha_end=0.25)
    teacher.bind(model, pairs, adapter="teacher")
    teacher.maybe_update(0, 10)
    for name, p in model.named_parameters():
        if ".teacher." in name:
            policy_value = before[name.replace(".teacher.", ".default.")]
            assert torch.allclose(p, 0.25 * policy_value + 0.75 * before[name]), name
        else:  # the base weights and the trained adapter are untouched
            assert torch.equal(p, before[name]), name
    assert model.active_adapter == "default"


# ---------------------------------------------------------------------------------- pseudo labels
def test_pseudo_labels_from_hand_built_teacher_rollouts(verifier):
    teacher = [
        ["\\boxed{1/2}", "#### 0.5", "\\boxed{3}", "no answer"],  # 1/2 ≡ 0.5: label 1/2 (2 votes to 1)
        ["no idea", "", "still nothing", "?"],  # the teacher never answers: no label
        ["\\boxed{6}", "\\boxed{5}", "\\boxed{5}", "\\boxed{6}"],  # tie: first seen (6)
    ]
    policy = [
        ["The answer is \\frac{1}{2}.", "\\boxed{0.5}", "\\boxed{3}", ""],
        ["\\boxed{4}", "\\boxed{4}", "\\boxed{4}", "\\boxed{4}"],
        ["\\boxed{5}", "#### 6", "\\boxed{6}", "\\boxed{7}"],
    ]
    batch = batch_of(policy, verifier, answers=["0.5", "4", "5"])
    rewards = CoRewarding2Reward().score(batch, teacher)
    assert rewards == [1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0]
    m = batch.metrics
    assert m["co_rewarding_2/teacher_policy_agreement"] == pytest.approx(4 / 12)
    assert m["co_rewarding_2/no_label_rate"] == pytest.approx(1 / 3)
    assert m["co_rewarding_2/label_accuracy"] == pytest.approx(1 / 3)  # 1/2 right, none, 6 wrong (gold 5)
    assert m["co_rewarding_2/teacher_accuracy"] == pytest.approx(4 / 12)  # 1/2, 0.5, and the two 5s

    # the authors' exact strings: "1/2" and "0.5" are different answers, so the tie goes to "1/2"
    exact = batch_of(policy, verifier)
    assert CoRewarding2Reward(match="exact").score(exact, teacher)[:4] == [0, 0, 0, 0]
    assert "co_rewarding_2/label_accuracy" not in exact.metrics  # no references, no accuracy


# ---------------------------------------------------------------------------------- real runs
def train(policy: Path, run_dir: Path, max_steps: int, *overrides: str, resume: bool = False, config: Path = CONFIG):
    from coreward.grpo.config import TrainConfig
    from coreward.grpo.train import run_training
    from coreward.runtime.config import load_config

    config = load_config(TrainConfig, config, [
        f"model.name_or_path={policy}", "grpo.per_device_train_batch_size=16", "grpo.max_completion_length=12",
        "grpo.save_steps=1", "grpo.learning_rate=1e-3", "data.eval_every=0", *overrides,
    ])
    return run_training(config, output_dir=str(run_dir), max_steps=max_steps, resume=resume)


def saved(run_dir: Path, step: int) -> tuple[dict, dict, dict]:
    """(teacher tensors, teacher state, policy tensors) of checkpoint-`step`."""
    checkpoint = run_dir / f"checkpoint-{step}"
    source = checkpoint / "reward_sources" / "co_rewarding_2"
    return (load_file(source / WEIGHTS_FILE), json.loads((source / STATE_FILE).read_text()),
            load_file(checkpoint / "model.safetensors"))


def alpha(t: int, T: int) -> float:
    return ALPHA[t, T]


def moving_config(tmp_path: Path) -> Path:
    """The demo's Co-rewarding-II config with an entropy reward beside it (weight 0.1): on the tiny policy a step's
    groups may all agree with the teacher or all miss (no advantage, a policy that does not move); entropy differs
    between any two completions, so every step moves the policy and the teacher must trail it."""
    import yaml

    config = yaml.safe_load(CONFIG.read_text())
    config["base"] = str(CONFIG.parent / config["base"])
    config["rewards"].append({"name": "entropy", "weight": 0.1})
    path = tmp_path / "co_rewarding_2_moving.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_resumed_run_continues_with_the_same_teacher(tiny_policy, tmp_path):
    run_dir = tmp_path / "run"
    config = moving_config(tmp_path)
    train(tiny_policy, run_dir, 2, config=config)
    teacher1, state1, policy1 = saved(run_dir, 1)
    teacher2, state2, policy2 = saved(run_dir, 2)
    initial = load_file(tiny_policy / "model.safetensors")
    assert state1["last_update_step"] == 0 and state2["last_update_step"] == 1
    for name, t in teacher1.items():  # before step 1 the teacher is the initial policy
        assert torch.allclose(t, initial[name], atol=1e-6), name
    for name, t in teacher2.items():  # before step 2: one EMA step towards the policy after step 1
        assert torch.allclose(t, alpha(1, 2) * policy1[name] + (1 - alpha(1, 2)) * teacher1[name], atol=1e-6), name
    assert any(not torch.allclose(teacher2[n], policy2[n], atol=1e-4) for n in teacher2)  # teacher ≠ policy

    result = train(tiny_policy, run_dir, 3, resume=True, config=config)
    assert result.global_step == 3
    teacher3, state3, _ = saved(run_dir, 3)
    assert state3["last_update_step"] == 2
    # the resumed run started from checkpoint-2's teacher (not a fresh copy of the policy) and took step t=2
    for name, t in teacher3.items():
        assert torch.allclose(t, alpha(2, 3) * policy2[name] + (1 - alpha(2, 3)) * teacher2[name], atol=1e-6), name
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2, 3]
    for key in ("co_rewarding_2/alpha", "co_rewarding_2/teacher_policy_agreement", "co_rewarding_2/label_accuracy",
                "co_rewarding_2/teacher_accuracy", "time/teacher_generation"):
        assert key in rows[-1], key
    assert rows[-1]["co_rewarding_2/alpha"] == pytest.approx(alpha(2, 3))


def test_teacher_as_kl_reference_is_trls_reference_model(tiny_policy, tmp_path):
    run_dir = tmp_path / "run"
    result = train(tiny_policy, run_dir, 2, "rewards.0.params.as_reference=true", "grpo.beta=0.01")
    reference = result.trainer.accelerator.unwrap_model(result.trainer.ref_model)
    assert result.trainer.reward_sources[0].teacher.module is reference  # no second copy
    # the reference moves with the teacher (`moves_reference`), so the KL from init keeps a copy of π_init
    assert result.trainer.kl_init_source == "copy"
    # TRL's reference moved: one EMA step from the initial policy towards the policy after step 1
    initial = load_file(tiny_policy / "model.safetensors")
    _, _, policy1 = saved(run_dir, 1)
    for name, param in reference.named_parameters():
        expected = alpha(1, 2) * policy1[name] + (1 - alpha(1, 2)) * initial[name]
        assert torch.allclose(param, expected, atol=1e-6), name
    with pytest.raises(CorewardError, match="grpo.beta is 0"):
        train(tiny_policy, tmp_path / "no_beta", 1, "rewards.0.params.as_reference=true", "grpo.beta=0.0")


def test_lora_teacher_as_reference_is_the_ref_adapter(tiny_policy, tmp_path):
    """With LoRA, the teacher is the `ref` adapter TRL's reference pass uses, and it holds the EMA of the policy's
    adapter: after 2 steps at a constant α = 0.5, ref = ½·(adapter after step 1) + ½·(initial adapter), neither the
    initial adapter (TRL's own frozen reference) nor the policy's. Weight decay moves the adapter at every step
    even when a step's advantages are all 0 (the tiny random policy rarely answers)."""
    run = tmp_path / "run"
    result = train(tiny_policy, run, 2, "lora.enabled=true", "lora.r=4", "rewards.0.params.as_reference=true",
                   "grpo.beta=0.01", "rewards.0.params.alpha_start=0.5", "rewards.0.params.alpha_end=0.5",
                   "grpo.learning_rate=1e-2", "grpo.weight_decay=0.5")
    model = result.trainer.accelerator.unwrap_model(result.trainer.model)
    assert "ref" in model.peft_config and model.active_adapter == "default"  # TRL's reference pass uses "ref"
    params = {name: p.detach() for name, p in model.named_parameters()}
    teacher1 = load_file(run / "checkpoint-1" / "reward_sources" / "co_rewarding_2" / WEIGHTS_FILE)  # before step 1
    assert teacher1 and all(".ref." in name and "lora_" in name for name in teacher1)  # adapter weights only
    initial = teacher1  # before step 1 the teacher is the policy's initial adapter
    policy1 = load_file(run / "checkpoint-1" / "adapter_model.safetensors")  # the policy's adapter after step 1
    for name, t0 in initial.items():
        expected = 0.5 * policy1[name.replace(".ref.", ".")] + 0.5 * t0
        assert torch.allclose(params[name], expected, atol=1e-6), name
    assert max((params[name] - initial[name]).abs().max().item() for name in initial) > 1e-4  # it moved off the start
    assert max((params[name] - params[name.replace(".ref.", ".default.")]).abs().max().item()
               for name in initial) > 1e-4  # and is not the policy's adapter
    final_teacher = load_file(run / "final" / "reward_sources" / "co_rewarding_2" / WEIGHTS_FILE)
    assert all(torch.equal(final_teacher[name], params[name]) for name in initial)
    # published: the teacher adapter as a folder peft loads onto the base model, with the ref adapter's values
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    folder = run / "final" / "reward_sources" / "co_rewarding_2" / "teacher"
    loaded = dict(PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_policy), folder).named_parameters())
    for name in initial:
        assert torch.equal(loaded[name.replace(".ref.", ".default.")], params[name]), name


def two_process_worker(model_dir: str, out: str) -> None:
    """Run by `test_two_processes_split_teacher_rollouts` under torchrun: 2 steps, 3 groups of 4 over 2 processes."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig

    from coreward.data.synthetic import load_demo
    from coreward.grpo.trainer import CorewardGRPOTrainer

    records = load_demo("train", limit=16)
    dataset = Dataset.from_list([{"prompt": r.question, "answer": r.answer, "id": r.id} for r in records])
    source, calls, shares = CoRewarding2Reward(alpha_start=0.5, alpha_end=0.1), [], []
    score, generate = source.score, source.teacher.generate

    def recorded_score(batch, teacher_completions):  # every group's teacher rollouts and the rewards
        rewards = score(batch, teacher_completions)
        calls.append([teacher_completions, rewards])
        return rewards

    def recorded_generate(policy, prompt_ids, G):  # how many groups this process rolled out
        shares.append(len(prompt_ids))
        return generate(policy, prompt_ids, G)

    source.score, source.teacher.generate = recorded_score, recorded_generate
    args = GRPOConfig(output_dir=f"{out}/run", num_generations=4, per_device_train_batch_size=6, max_completion_length=12,
                      max_steps=2, learning_rate=1e-3, use_cpu=True, bf16=False, report_to="none", save_strategy="no",
                      seed=7, remove_unused_columns=False, disable_tqdm=True)
    with Verifier(num_workers=1) as verifier:
        trainer = CorewardGRPOTrainer(model=model_dir, args=args, train_dataset=dataset,
                                      processing_class=AutoTokenizer.from_pretrained(model_dir),
                                      reward_sources=[source], verifier=verifier)
        trainer.train()
    teacher = {name: t.tolist() for name, t, _ in source.teacher.pairs}
    result = {"calls": calls, "shares": shares, "teacher": teacher}
    Path(out, f"rank{trainer.accelerator.process_index}.json").write_text(json.dumps(result))


def test_two_processes_split_teacher_rollouts(tiny_policy, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
           "-m", "tests.rewards.test_co_rewarding_2", str(tiny_policy), str(tmp_path)]
    done = warm_launch.run(cmd, env=env, cwd=REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rank0, rank1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert rank0["shares"] == [2, 2] and rank1["shares"] == [1, 1]  # each process rolled out its share of groups
    assert rank0["calls"] == rank1["calls"]  # ... and both got every group's teacher rollouts and the same rewards
    assert [len(teacher) for teacher, _ in rank0["calls"]] == [3, 3]
    assert all(len(group) == 4 for teacher, _ in rank0["calls"] for group in teacher)
    assert rank0["teacher"] == rank1["teacher"]  # the EMA keeps the teachers identical


if __name__ == "__main__":
    from coreward.runtime.distributed import exit_now, leave_process_group

    two_process_worker(sys.argv[1], sys.argv[2])
    if leave_process_group():  # no interpreter teardown: gloo's threads can abort a finished rank there (exit -6)
        exit_now(0)


def test_teacher_rolls_out_the_rephrased_question(tmp_path, monkeypatch):
    """teacher_prompt: rephrased with teacher_rephrasings (the authors' use_aug): the policy's prompts are
    the originals, the teacher's the rephrasings of the same questions, group by group. Asserted on the token ids
    the teacher model was given to generate from, and on the rollouts the labels were then computed from."""
    import re

    from coreward.data.synthetic import demo_rephrasing, load_demo
    from coreward.grpo import policy as policy_module
    from coreward.grpo import trainer as trainer_module
    from coreward.grpo.config import TrainConfig
    from coreward.grpo.train import run_training
    from coreward.runtime.config import load_config
    from coreward.runtime.errors import CorewardError

    generated = []  # (model, prompt ids, sampled rows) of every generate_from_ids call the policy wrapper makes
    real_generate = policy_module.generate_from_ids

    def recording_generate(model, prompt_ids, *args, **kwargs):
        rows = real_generate(model, prompt_ids, *args, **kwargs)
        generated.append((model, [list(ids) for ids in prompt_ids], rows))
        return rows

    scored = []  # the teacher rollouts each batch's labels came from
    real_score = CoRewarding2Reward.score

    def recording_score(self, batch, teacher_completions):
        scored.append(teacher_completions)
        return real_score(self, batch, teacher_completions)

    captured = {}
    real_rewards = trainer_module.CorewardGRPOTrainer._calculate_rewards

    def capture(self, inputs, prompts, completions, completion_ids_list):
        captured.setdefault("prompts", list(prompts))
        return real_rewards(self, inputs, prompts, completions, completion_ids_list)

    monkeypatch.setattr(policy_module, "generate_from_ids", recording_generate)
    monkeypatch.setattr(CoRewarding2Reward, "score", recording_score)
    monkeypatch.setattr(trainer_module.CorewardGRPOTrainer, "_calculate_rewards", capture)
    overrides = ["rewards.0.params.teacher_rephrasings=demo", "rewards.0.params.teacher_prompt=rephrased", "data.eval_every=0",
                 "grpo.save_steps=100", "torch_threads=1"]
    result = run_training(load_config(TrainConfig, CONFIG, overrides), output_dir=str(tmp_path / "run"), max_steps=1)
    source, tokenizer = result.trainer.reward_sources[0], result.trainer.processing_class
    G = 8
    policy_questions = [p.strip() for p in captured["prompts"][::G]]
    # what the teacher model was given: one call, each group's prompt once (G samples each)
    (teacher_model, teacher_ids, rows), = [call for call in generated if call[0] is source.teacher.module]
    teacher_questions = [tokenizer.decode(ids, skip_special_tokens=True).strip() for ids in teacher_ids]
    assert len(teacher_questions) == len(policy_questions) > 0
    by_question = {r.question: r for r in load_demo("train")}
    for original, given in zip(policy_questions, teacher_questions):
        assert given != original  # the teacher did not roll out the policy's prompt ...
        assert given == demo_rephrasing(by_question[original])  # ... but that question's rephrasing
        assert re.findall(r"\d+", given) == re.findall(r"\d+", original)  # the same numbers: the same problem
    # the labels came from exactly those rollouts: G per rephrased prompt
    texts = tokenizer.batch_decode(rows, skip_special_tokens=True)
    assert len(scored) == 1 and [len(group) for group in scored[0]] == [G] * len(teacher_questions)
    assert [c.strip() for group in scored[0] for c in group] == [t.strip() for t in texts]
    with pytest.raises(CorewardError, match="rephrased needs teacher_rephrasings"):
        load_config(TrainConfig, CONFIG, ["rewards.0.params.teacher_prompt=rephrased"])


def test_teacher_rollouts_are_dumped_per_step_with_the_authors_reading(verifier, tmp_path):
    """dump_dir: one JSON line per group (prompt, teacher rollouts and answers, label, reference); with
    extract=boxed_raw, `#### 0.5` is no answer and the raw `\\boxed{1/2}` string is the label."""
    import json

    teacher = [["\\boxed{1/2}", "#### 0.5", "\\boxed{1/2}", "x"], ["\\boxed{6}", "\\boxed{5}", "\\boxed{5}", "y"]]
    policy = [["\\boxed{1/2}", "#### 1/2", "", ""], ["\\boxed{5}", "#### 5", "", ""]]
    batch = batch_of(policy, verifier, answers=["0.5", "5"])
    source = CoRewarding2Reward(match="exact", extract="boxed_raw", dump_dir=str(tmp_path / "dump"))
    assert source.score(batch, teacher) == [1, 0, 0, 0, 1, 0, 0, 0]
    lines = [json.loads(l) for l in (tmp_path / "dump" / f"step_{batch.step}.jsonl").read_text().splitlines()]
    assert [l["label"] for l in lines] == ["1/2", "5"] and [l["reference"] for l in lines] == ["0.5", "5"]
    assert lines[0]["teacher_answers"] == ["1/2", None, "1/2", None] and lines[1]["teacher_completions"] == teacher[1]
    assert lines[0]["prompt"] == batch.prompts[0]
