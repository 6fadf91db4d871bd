"""Several processes with every option on: periodic evaluation and the overoptimization guard under DDP, FSDP2,
ZeRO-2 and ZeRO-3 (2 gloo processes), on training data without reference answers and a held-out set with them.

The guard then watches the held-out set's avg@N, and every decision of its (the alarm, the stop, best/'s collective
save) follows a row that only the evaluation produces: before every process logged the evaluation, the main process
entered the guard's broadcast alone and the run hung at its first evaluation. The guard is set to fire at its first
reading (`ALARM_AT_FIRST_READING`: no drop required), so each launch makes an alarm and writes best/ on every engine.

The runs of this file and the two-process runs of test_sharded.py and test_multinode.py (periodic evaluation of a
labelled held-out set and the guard on in all of them) form one covering design:

    | launch                                  | engine | training data | resumed  | reward methods                      |
    |-----------------------------------------|--------|---------------|----------|-------------------------------------|
    | test_multinode: one machine; two        | DDP    | labelled      | no; yes  | rule, cooper, co_rewarding_2, model |
    | test_sharded[zero2]: straight; killed   | ZeRO-2 | labelled      | no; yes  | rule, cooper, co_rewarding_2, model |
    | test_sharded[zero3]: straight; killed   | ZeRO-3 | labelled      | no; yes  | rule, cooper, co_rewarding_2, model |
    | test_sharded[fsdp2]: straight; killed   | FSDP2  | labelled      | no; yes  | rule, cooper, co_rewarding_2, model |
    | test_trainer: every stateless source    | DDP    | labelled      | no       | LABEL_FREE but CR-II, model         |
    | here: DDP, killed after its alarm       | DDP    | unlabelled    | yes      | LABEL_FREE                          |
    | here: FSDP2                             | FSDP2  | unlabelled    | no       | LABEL_FREE                          |
    | here: ZeRO-2                            | ZeRO-2 | unlabelled    | no       | LABEL_FREE                          |
    | here: ZeRO-3, guard.stop                | ZeRO-3 | unlabelled    | no       | LABEL_FREE                          |

LABEL_FREE = majority, self_certainty, entropy, co_rewarding_1, co_rewarding_2 (its teacher as the KL reference,
the only teacher a sharded engine holds). Every engine meets both kinds of training data, resumed and not, and every
reward method; both kinds of data meet resumed and straight runs and every method that can train on them. The pairs
left out cannot be run: rule, cooper and model with unlabelled data (refused before any model loads:
test_train_unlabeled.py). The guard sees the training rollouts' verified accuracy in the labelled
runs and the held-out avg@N here: both of its sources, under every engine.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from coreward.data.synthetic import demo_rephrasing, load_demo
from coreward.grpo.checkpoints import COMPLETE_MARKER
from coreward.grpo.guard import BEST_DIR, GUARD_FILE, read_best
from coreward.runtime.metrics import read_metrics
from tests.grpo.test_sharded import engine_line, needs_deepspeed
from tests.helpers.kill_resume import launch, train_command


REPO = Path(__file__).resolve().parents[2]
RULE = REPO / "configs" / "demo" / "rule.yaml"
ACCELERATE = REPO / "configs" / "accelerate"
ENGINE_NAMES = {"ddp": "DDP", "fsdp2": "FSDP2", "zero2": "DeepSpeed ZeRO-2", "zero3": "DeepSpeed ZeRO-3"}
LABEL_FREE = ("majority", "self_certainty", "entropy", "co_rewarding_1", "co_rewarding_2")
# the rule with no drop required: the alarm fires at the first reading at or after the warm-up (drop 0, fall 0)
ALARM_AT_FIRST_READING = ["guard.min_drop=0", "guard.rel_drop=0", "guard.patience=1"]


def unlabeled_data(tmp_path: Path) -> tuple[Path, Path]:
    """The four problems the memorized policy knows, as a user's file without answers, and their rephrasings."""
    problems = load_demo("train", 4)
    data, pairs = tmp_path / "unlabeled.jsonl", tmp_path / "rephrasings.jsonl"
    data.write_text("".join(json.dumps({"uid": r.id, "problem": r.question}) + "\n" for r in problems))
    pairs.write_text("".join(json.dumps({"id": r.id, "rephrased": demo_rephrasing(r)}) + "\n" for r in problems))
    return data, pairs


def label_free_overrides(policy: Path, tmp_path: Path, eval_every: int, warmup: int) -> list[str]:
    data, pairs = unlabeled_data(tmp_path)
    # Co-rewarding-II's teacher as TRL's KL reference (grpo.beta > 0): the only teacher a sharded engine can hold
    rewards = ("[{name: majority}, {name: self_certainty}, {name: entropy}, "
               f"{{name: co_rewarding_1, params: {{rephrasings: {pairs}}}}}, "
               "{name: co_rewarding_2, params: {alpha_start: 0.05, alpha_end: 0.005, as_reference: true}}]")
    return [f"model.name_or_path={policy}", f"data.train={data}", "data.columns.question=problem",
            "data.columns.id=uid", f"rewards={rewards}", *held_out(eval_every),
            # 2 questions and their rephrasings, 4 rollouts each, per step (8 rows per process)
            "grpo.num_generations=4", "grpo.per_device_train_batch_size=8", "grpo.max_completion_length=16",
            "grpo.learning_rate=1e-3", "grpo.beta=0.01", "torch_threads=1",
            f"guard.warmup={warmup}", *ALARM_AT_FIRST_READING]


def held_out(eval_every: int) -> list[str]:
    """Two demo problems with their answers (ones the memorized policy knows), 2 samples each."""
    return ["data.eval=demo", "data.eval_split=train", "data.eval_limit=2", "data.eval_n=2",
            f"data.eval_every={eval_every}"]


def command(engine: str, run_dir: Path, overrides: list[str], max_steps: int, resume: bool = False) -> list[str]:
    if engine == "ddp":
        return train_command(RULE, run_dir, overrides, max_steps, resume, nproc=2)
    return train_command(RULE, run_dir, overrides, max_steps, resume, accelerate_config=ACCELERATE / f"{engine}_cpu.yaml")


def assert_guarded(log: str, rows: list[dict], run_dir: Path, engine: str, alarm_at: int) -> None:
    """The engine ran on 2 processes, the guard said once what it watches, fired once at `alarm_at` and best/ holds
    that step's policy, whole and loadable."""
    assert engine_line(log)[0] == ENGINE_NAMES[engine]
    assert log.count("guard: watches the held-out set demo's eval/avg@2") == 1, log[-3000:]
    assert [row["step"] for row in rows if row.get("guard/alarm") == 1] == [alarm_at], rows
    assert all(row["guard/alarm"] == 0 for row in rows if row["step"] != alarm_at and "reward" in row)
    summary = json.loads((run_dir / GUARD_FILE).read_text())
    assert summary["fired_at"] == alarm_at and summary["source"] == "held-out evaluation"
    best = read_best(run_dir)
    assert best is not None and best["step"] == alarm_at and best["source"] == "held-out evaluation"
    evaluated = {row["step"]: row["eval/avg@2"] for row in rows if "eval/avg@2" in row}
    assert best["verified"] == pytest.approx(evaluated[alarm_at])  # the held-out score it was kept for
    weights = load_file(run_dir / BEST_DIR / "model.safetensors")
    final = load_file(run_dir / "final" / "model.safetensors")
    assert sorted(weights) == sorted(final) and all(weights[k].shape == final[k].shape for k in final)  # whole
    assert (run_dir / BEST_DIR).is_symlink() and (run_dir / BEST_DIR).resolve().name == f".best-{alarm_at}"


def assert_every_source_scored(rows: list[dict], names) -> None:
    for name in names:
        assert all(f"rewards/{name}/mean" in row for row in rows if "reward" in row), (name, rows[-1])


@pytest.mark.parametrize("engine,stop", [pytest.param("fsdp2", False), pytest.param("zero2", False, marks=needs_deepspeed),
                                         pytest.param("zero3", True, marks=needs_deepspeed)])
def test_label_free_methods_with_evaluation_and_guard(engine, stop, memorized_policy, tmp_path):
    """Two steps: evaluations at steps 0 and 2, the guard's reading (alarm, best/) at step 2, checkpoint-2. With
    guard.stop (ZeRO-3) the run is asked for 3 steps and every process stops at the alarm."""
    run_dir = tmp_path / "run"
    overrides = [*label_free_overrides(memorized_policy, tmp_path, eval_every=2, warmup=2), "grpo.save_steps=2",
                 f"guard.stop={str(stop).lower()}"]
    run = launch(command(engine, run_dir, overrides, 3 if stop else 2), run_dir, timeout_s=240)
    assert run.returncode == 0, run.log[-3000:]
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert sorted(row["step"] for row in rows if "eval/avg@2" in row) == [0, 2]
    assert [row["step"] for row in rows if "reward" in row] == [1, 2]
    assert all("verified_accuracy" not in row for row in rows)  # no references in the training data
    assert_guarded(run.log, rows, run_dir, engine, alarm_at=2)
    assert_every_source_scored(rows, LABEL_FREE)
    assert (run_dir / "checkpoint-2" / COMPLETE_MARKER).is_file()
    if stop:
        assert "stopped by the overoptimization guard at step 2" in run.log
        assert json.loads((run_dir / GUARD_FILE).read_text())["stopped_at"] == 2


def test_a_guarded_label_free_run_resumes_after_its_alarm(memorized_policy, tmp_path):
    """DDP, 2 steps, checkpoints 1 and 2: evaluated at step 2, where the guard fires and writes best/; killed while
    checkpoint-2 is written, it resumes from checkpoint-1: the alarm and best/ of step 2 belong to a step it trains
    again, so best/ is dropped, the alarm fires again at step 2 (once in metrics.jsonl) and best/ is rewritten."""
    run_dir = tmp_path / "run"
    # rollouts (the policy's, the teacher's, the evaluation's) from a bfloat16 sampling copy (runtime/sampling.py)
    overrides = [*label_free_overrides(memorized_policy, tmp_path, eval_every=2, warmup=2), "grpo.save_steps=1",
                 "sampling.engine=copy", "sampling.dtype=bfloat16"]
    killed = launch(command("ddp", run_dir, overrides, 2), run_dir, kill="checkpoint:2", timeout_s=240)
    assert killed.killed, killed.log[-3000:]
    assert "guard: step 2:" in killed.log and read_best(run_dir)["step"] == 2  # the alarm and best/ were written

    started = time.time()
    resumed = launch(command("ddp", run_dir, overrides, 2, resume=True), run_dir, timeout_s=240)
    assert resumed.returncode == 0, resumed.log[-3000:]
    assert resumed.resumed_from == str(run_dir / "checkpoint-1")
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [row["step"] for row in rows if "reward" in row] == [1, 2]
    assert_guarded(resumed.log, rows, run_dir, "ddp", alarm_at=2)
    assert "sampling: from a copy of the policy in bfloat16" in resumed.log
    # the copy's log-probabilities of its samples against the trainer's: bf16's rounding, not another policy's
    assert all(0 < row["sampling/logprob_mismatch/mean"] < 0.1 for row in rows if "reward" in row), rows
    marker = json.loads((run_dir / BEST_DIR / COMPLETE_MARKER).read_text())
    assert marker["time"] > started  # written again by the resumed run
    assert_every_source_scored(rows, LABEL_FREE)
