"""The demo VerifyRM: trained on the warm-start demo policy's own samples, labelled by the rule verifier.

Recipe (`build_demo_rm`, minutes on a CPU: docs/figures.md, "building the demo RM"; the package ships the result in
`assets/demo_rm/`, used while its RECIPE hash matches this code and the demo policy):

1. Sample `samples` completions at temperature 1.0 for each of the first `questions` demo train problems
   from the demo policy (`coreward rm annotate --policy demo --data demo`), at the RL run's length limit.
2. Label them with the rule verifier alone (no LLM judge exists here). The demo's minority answer format
   `ans r` is not readable by it, so those completions are labelled 0 *even when they are right*: the
   RM inherits the rule's blind spot instead of having it hidden. The rows keep the true label
   (`true_label`, from the demo generator) so the cost of that choice can be measured, never trained on.
3. Fine-tune a VerifyRM whose backbone is the demo policy itself (a 0.8M-parameter Qwen3, in the same
   relation to its policy as Cooper's Qwen2.5-Math VerifyRM) with BCE on class-balanced rows: all the
   policy's correct samples and as many of its mistakes (`coreward rm train --config configs/rm/demo.yaml`).
   A held-out fifth of the questions gives accuracy; a test-split set with true labels compares it with
   the rule verifier; `probe` scores hand-made completion kinds.

Why it is the reward models' test bed: its negatives are only this policy's mistakes, so it lets through kinds of
wrong answer the policy rarely wrote, such as near misses (docs/explanation/demo-rm.md has its accuracy on each kind). Those
holes are the "limited negatives" of the Cooper paper; Cooper's pairs are made of exactly such near misses
(rewards/cooper/assistant.py `perturb`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import random
import shutil
import sys
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from coreward.rm.train import RMTrainConfig
from coreward.runtime.assets import shipped_path
from coreward.runtime.config import build
from coreward.runtime.devices import torch_threads


RECIPE_VERSION = 2  # bump when the code below changes what gets built

# What `build_demo_rm` samples; the training settings are configs/rm/demo.yaml's (a test checks they agree).
ANNOTATION = {"questions": 4000, "samples": 4, "temperature": 1.0, "max_tokens": 32, "seed": 0}
EVAL_QUESTIONS = 200  # test-split problems for the true-label evaluation set
DEMO_CONFIG = {
    "model": {"backbone": "demo", "add_template_tokens": True, "max_length": 128},
    "data": {"train": "runs/demo_rm/verification.jsonl", "eval_fraction": 0.2, "balance": True},
    "training": {
        "learning_rate": 1.0e-3,
        "num_train_epochs": 8,
        "per_device_train_batch_size": 32,
        "per_device_eval_batch_size": 128,
        "lr_scheduler_type": "cosine",
        "warmup_steps": 0.05,
        "weight_decay": 0.01,
        "logging_steps": 10,
    },
    "seed": 0,
    "output_dir": "runs/demo_rm",
    "torch_threads": 1,
}


def demo_config(train_file: str | Path, output_dir: str | Path, seed: int = DEMO_CONFIG["seed"],
                epochs: int = DEMO_CONFIG["training"]["num_train_epochs"]) -> RMTrainConfig:
    """The demo RM's training config (configs/rm/demo.yaml's settings) for a given data file and run dir (and seed
    and number of epochs, which ensemble members change)."""
    data = json.loads(json.dumps(DEMO_CONFIG))
    data["data"]["train"], data["output_dir"], data["seed"] = str(train_file), str(output_dir), seed
    data["training"]["num_train_epochs"] = epochs
    return build(RMTrainConfig, data, where="demo RM config")


def sample_demo_rows(policy_path: Path, split: str, questions: int, seed: int, start: int = 0
                     ) -> tuple[list[dict], object]:
    """The demo policy's samples for problems [start, questions) of `split`, rule-labelled, with true labels."""
    from coreward.data.synthetic import demo_answer_in_any_format, load_demo
    from coreward.llm import HFLocalGenerator
    from coreward.rm.annotate import annotate
    from coreward.verify import get_verifier

    a = ANNOTATION
    records = load_demo(split, questions)[start:]
    with HFLocalGenerator(str(policy_path), device="cpu", batch_size=SAMPLING_BATCH) as policy, \
            sampling_progress(f"sampling {len(records) * a['samples']:,} completions ({split} split)",
                              len(records) * a["samples"]) as advance:
        rows, report = annotate(ChunkedGenerator(policy, advance), records, a["samples"], get_verifier(),
                                temperature=a["temperature"], max_tokens=a["max_tokens"], seed=seed, instruction=None)
    for row in rows:
        row["true_label"] = int(demo_answer_in_any_format(row["completion"]) == row["reference_answer"])
    return rows, report


SAMPLING_BATCH = 256  # completions the demo policy samples per generate call


class ChunkedGenerator:
    """A generator's `generate` over a few of its own batches at a time, calling `advance(count)` after each: the
    same batches in the same order (so the same samples, request by request), with progress in between."""

    def __init__(self, generator, advance, batches: int = 4):
        self.generator, self.advance, self.chunk = generator, advance, SAMPLING_BATCH * batches

    def generate(self, requests: list) -> list:
        results = []
        for start in range(0, len(requests), self.chunk):
            results += self.generator.generate(requests[start:start + self.chunk])
            self.advance(len(requests[start:start + self.chunk]))
        return results


@contextmanager
def sampling_progress(what: str, total: int):
    """A progress bar with the time left (stderr), advanced by the function it yields."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("left"), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True)) as progress:
        task = progress.add_task(what, total=total)
        yield lambda count: progress.update(task, advance=count)


def build_demo_rm(output_dir: str | Path) -> dict:
    """Annotate, train and evaluate the demo RM into `output_dir`; returns the summary written to demo_rm.json."""
    from coreward.demo.policy import ensure_demo_policy

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    policy = ensure_demo_policy()
    with torch_threads(DEMO_CONFIG["torch_threads"]):
        return _build(policy, output_dir)


def _build(policy: Path, output_dir: Path) -> dict:
    from coreward.rm.annotate import write_rows
    from coreward.rm.evaluate import evaluate_verifiers
    from coreward.rm.model import VerifyRM
    from coreward.rm.train import train_rm

    train_rows, report = sample_demo_rows(policy, "train", ANNOTATION["questions"], ANNOTATION["seed"])
    write_rows(train_rows, output_dir / "verification.jsonl")
    eval_rows, _ = sample_demo_rows(policy, "test", EVAL_QUESTIONS, ANNOTATION["seed"] + 1)
    write_rows([{**r, "label": r["true_label"]} for r in eval_rows], output_dir / "truth_eval.jsonl")

    config = demo_config(output_dir / "verification.jsonl", output_dir / "run")
    shutil.rmtree(output_dir / "run", ignore_errors=True)  # built whole: an earlier build's training is not continued
    with training_progress("training the demo RM", output_dir / "run", config.training["num_train_epochs"]):
        result = train_rm(config)
    truth = evaluate_verifiers(output_dir / "truth_eval.jsonl", ["rule", str(result.final_model)], device="cpu")
    rm = VerifyRM.from_pretrained(result.final_model, device="cpu")
    summary = {
        "annotation": report.to_dict(),
        "rule_labels_wrong": sum(r["label"] != r["true_label"] for r in train_rows),
        "held_out": result.metrics,  # rule-labelled held-out questions of the train split
        "truth_eval": {"rule": truth.results["rule"], "rm": truth.results[str(result.final_model)]},
        "train_examples_per_s": result.train_examples_per_s,
        "probe": probe(rm),
    }
    (output_dir / "demo_rm.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


# --------------------------------------------------------------------------- probing for exploitable holes


def _final_changed(p, rng) -> str:
    """The right derivation, then a different final number (the RM must read the last line)."""
    return p.solution("hash").rsplit(" ", 1)[0] + f" {_other_number(p.answer, rng)}"


def _misread_start(p, rng) -> str:
    """A start value misread by 1-3 and carried with *valid* arithmetic: only the question or reference shows it."""
    start = p.start + rng.choice([-3, -2, -1, 1, 2, 3])
    return replace(p, start=start if start > 0 else p.start + 4).solution("hash")


def _near_miss(p, rng) -> str:
    """Cooper's demo assistant (`perturb`): one result off by 1-3, carried through (an invalid step)."""
    from coreward.rewards.cooper.assistant import perturb

    return perturb(p.solution("hash"), str(p.answer), rng)


def _skipped_step(p, rng) -> str:
    """The last operation left out: valid arithmetic, an easier problem's answer."""
    return replace(p, ops=p.ops[:-1]).solution("hash")


def _other_number(answer: int, rng) -> int:
    return rng.choice([n for n in range(answer - 5, answer + 6) if n >= 0 and n != answer])


PROBES = {
    # correct completions: the RM should accept them
    "correct #### r": lambda p, rng: p.solution("hash"),
    "correct \\boxed{r}": lambda p, rng: p.solution("boxed"),
    "correct ans r (unread by the rule)": lambda p, rng: p.solution("ans"),
    # wrong completions: every acceptance is a reward a policy could collect for a wrong answer
    "wrong: near miss, a result off by 1-3 (Cooper's negatives)": _near_miss,
    "wrong: start misread, valid arithmetic": _misread_start,
    "wrong: right steps, other final": _final_changed,
    "wrong: last step skipped": _skipped_step,
    "wrong: bare guess #### x": lambda p, rng: f"#### {_other_number(p.answer, rng)}",
    "wrong: steps, no final line": lambda p, rng: p.solution("hash").rsplit(";", 1)[0] + ";",
}


def probe(rm, problems: int = 200, seed: int = 0) -> dict[str, dict[str, float]]:
    """Acceptance rate (σ > 0.5) and mean score of the RM on hand-made completion kinds, on test problems."""
    from coreward.data.synthetic import demo_problems

    rng = random.Random(seed)
    chosen = demo_problems("test")[:problems]
    results = {}
    for name, make in PROBES.items():
        completions = [make(p, rng) for p in chosen]
        scores = rm.score([p.question() for p in chosen], [str(p.answer) for p in chosen], completions)
        results[name] = {"accept": sum(s > 0.5 for s in scores) / len(scores), "mean_score": sum(scores) / len(scores)}
    return results


def recipe_hash(policy_path: Path) -> str:
    """Identifies what `build_demo_rm` would build: recipe, settings and the policy's weights."""
    digest = hashlib.sha256(json.dumps([RECIPE_VERSION, ANNOTATION, EVAL_QUESTIONS, DEMO_CONFIG]).encode())
    for weights in sorted(policy_path.glob("*.safetensors")):
        digest.update(weights.read_bytes())
    return digest.hexdigest()[:12]


SHIPPED = shipped_path("demo", "rm")  # the model, demo_rm.json, RECIPE


def shipped_demo_rm(policy_path: Path) -> Path | None:
    """The packaged demo RM when it was built by this recipe from this policy (its RECIPE file says), else None."""
    try:
        matches = (SHIPPED / "RECIPE").read_text().strip() == recipe_hash(policy_path)
    except OSError:
        return None
    return SHIPPED if matches and (SHIPPED / "model.safetensors").is_file() else None


def ensure_demo_rm() -> Path:
    """The demo RM's model directory: the packaged one when its recipe matches, else built once (minutes:
    docs/figures.md) and cached under $COREWARD_CACHE.

    A file lock makes concurrent callers (the processes of one distributed run) build it once.
    """
    from coreward.demo.policy import ensure_demo_policy
    from coreward.runtime.assets import cache_root

    policy = ensure_demo_policy()
    shipped = shipped_demo_rm(policy)
    if shipped is not None:
        return shipped
    directory = cache_root() / f"demo_rm-{recipe_hash(policy)}"
    model = directory / "run" / "final"
    if (model / "config.json").exists():
        return model
    directory.parent.mkdir(parents=True, exist_ok=True)
    with open(directory.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (model / "config.json").exists():
            print(f"building the demo reward model in {directory} (its recipe changed: about 8 minutes)",
                  file=sys.stderr)
            from coreward.runtime.interrupt import long_phase

            with long_phase("building the demo reward model", "it is built whole or not at all (about 8 minutes): run "
                            "the same command again to build it"):
                build_demo_rm(directory)
    return model


def ship(build_dir: Path) -> Path:
    """Copy a finished build (`build_demo_rm(build_dir)`) into the package as the shipped demo RM."""
    from coreward.demo.policy import ensure_demo_policy

    staging = SHIPPED.with_name(".demo_rm.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(build_dir / "run" / "final", staging)
    shutil.copy(build_dir / "demo_rm.json", staging / "demo_rm.json")
    (staging / "RECIPE").write_text(recipe_hash(ensure_demo_policy()) + "\n")
    shutil.rmtree(SHIPPED, ignore_errors=True)
    os.replace(staging, SHIPPED)
    return SHIPPED


# --------------------------------------------------------------------------- ensemble members (demo:1, demo:2, ...)
#
# Member k (`path: demo:k`, 1 <= k <= 4; coreward.demo registers these names) is the demo RM's recipe, step for step,
# with two changes: the training seed is k (the new head's initialisation and the order of the batches), and its
# 4,000 questions are the next slice of the train split, [4,000·k, 4,000·(k + 1)), none of them the demo RM's or
# another member's (sampled with seed k). With the demo RM itself (questions [0, 4,000), seed 0) the first two make
# the ensemble [demo, demo:1, demo:2] of configs/demo/ensemble_*.yaml. Halves of the demo RM's own questions made
# weak members (held-out accuracy 0.75 against the demo RM's 0.90, with the demo RM's epochs or twice as many:
# docs/explanation/demo-rm.md), so each member has as many questions as the demo RM. Each is built on first use
# (its time: docs/figures.md, "building the demo RM") and cached under $COREWARD_CACHE, keyed by its recipe and the
# policy's weights.

MEMBER_RECIPE_VERSION = 3  # bump when the code below changes what a member is
STEP_COMPLETIONS = 128  # completions a demo GRPO step scores (16 prompts x 8): the unit of the cost figures


def member_recipe(k: int | str) -> dict:
    """What member k is: its training seed, the slice [start, end) of the train split it samples, its sampling seed.
    k = "pooled": the demo RM's recipe on the questions (and samples) of all of POOLED at once (`slices`)."""
    from coreward.data.synthetic import SPLIT_SIZES
    from coreward.runtime.errors import CorewardError

    if k == "pooled":
        slices = [[0, ANNOTATION["questions"], ANNOTATION["seed"]]] + \
            [[*member_recipe(j)["questions"], member_recipe(j)["sampling_seed"]] for j in range(1, len(POOLED))]
        return {"version": MEMBER_RECIPE_VERSION, "seed": ANNOTATION["seed"], "pooled": list(POOLED), "slices": slices}
    size = ANNOTATION["questions"]
    last = SPLIT_SIZES["train"] // size - 1  # the slices the train split holds after the demo RM's
    if not (isinstance(k, int) and 1 <= k <= last):
        raise CorewardError(f"the demo RM's ensemble members are demo:1 ... demo:{last} and demo:pooled, not demo:{k}")
    return {"version": MEMBER_RECIPE_VERSION, "seed": k, "questions": [k * size, (k + 1) * size],
            "sampling_seed": ANNOTATION["seed"] + k}


# demo:pooled, the data-matched single RM: one RM trained on the questions of the ensemble [demo, demo:1, demo:2]
# together (12,000 questions, 48,000 samples: each slice sampled with its member's seed, so the same samples), with
# the demo RM's seed and epochs. Against the `min` ensemble of those three it separates "more data" from "more RMs".
POOLED = ("demo", "demo:1", "demo:2")


def recipe_slices(recipe: dict) -> list[list[int]]:
    """[start, end, sampling seed] of each slice of the train split a member's recipe samples."""
    return recipe.get("slices") or [[*recipe["questions"], recipe["sampling_seed"]]]


def _cached(directory: Path, done: Path, build, what: str) -> None:
    """Run `build()` once into `directory` unless `done` exists; a file lock makes concurrent callers wait for it."""
    if done.exists():
        return
    directory.parent.mkdir(parents=True, exist_ok=True)
    with open(directory.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            print(f"building {what} in {directory}", file=sys.stderr)
            build()


def ensure_truth_eval() -> Path:
    """truth_eval.jsonl of the demo RM's recipe (800 test-split samples of the policy with true labels), drawn once
    into the cache: every member, the demo RM and the ensemble are compared on it."""
    from coreward.demo.policy import ensure_demo_policy
    from coreward.rm.annotate import write_rows
    from coreward.runtime.assets import cache_root

    policy = ensure_demo_policy()
    path = cache_root() / f"demo_rm_truth-{recipe_hash(policy)}" / "truth_eval.jsonl"

    def build() -> None:
        with torch_threads(DEMO_CONFIG["torch_threads"]):
            rows, _ = sample_demo_rows(policy, "test", EVAL_QUESTIONS, ANNOTATION["seed"] + 1)
        staged = write_rows([{**r, "label": r["true_label"]} for r in rows], path.with_name(".truth_eval.jsonl"))
        os.replace(staged, path)  # renamed into place: its presence says it is whole

    _cached(path.parent, path, build, "the demo RM's true-labelled test samples")
    return path


def member_hash(k: int | str, policy_path: Path) -> str:
    """Identifies what `build_demo_rm_member(k)` would build: the demo RM's recipe hash and the member's recipe."""
    return hashlib.sha256(json.dumps([recipe_hash(policy_path), member_recipe(k)]).encode()).hexdigest()[:12]


MEMBER_BUILD_S = 900  # a member's build on a 2-core CPU, for the time a command announces (docs/explanation/demo-rm.md);
# demo:pooled trains on three members' data: about three times as long
ANNOTATION_FILE = "annotation.json"  # the sampling's report, written with verification.jsonl: the sampling is done


def build_demo_rm_member(k: int | str, output_dir: str | Path) -> dict:
    """Sample, train and evaluate member k into `output_dir` (run/final); returns the summary written to member.json.

    Ctrl-C stops it (runtime/interrupt.py) keeping what is finished: sampled completions are kept (written whole,
    then renamed), and so is the training's newest complete checkpoint (rm/train.py; the first Ctrl-C writes one of
    the step in progress): the same command again resumes the training from it."""
    import time

    from coreward.rm.evaluate import evaluate_verifiers
    from coreward.rm.model import VerifyRM
    from coreward.rm.train import train_rm
    from coreward.runtime.checkpoints import RESUME_IF_ANY, checkpoint_step, last_complete_checkpoint
    from coreward.runtime.interrupt import long_phase

    recipe, output_dir, started = member_recipe(k), Path(output_dir), time.monotonic()
    name, again = f"the demo RM's ensemble member demo:{k}", "run the same command again to go on"
    with long_phase(f"building {name} (sampling its training data)", f"nothing of it is kept yet; {again}"):
        truth_file = ensure_truth_eval()
        annotation = sampled_rows(k, recipe, output_dir)
    kept = (f"its sampled completions are kept in {output_dir}, and its training's newest checkpoint if it has one; "
            f"{again}")
    with long_phase(f"training {name}", kept), torch_threads(DEMO_CONFIG["torch_threads"]):
        checkpoint = last_complete_checkpoint(output_dir / "run") if (output_dir / "run").is_dir() else None
        if checkpoint is None:
            shutil.rmtree(output_dir / "run", ignore_errors=True)  # what a build stopped before any checkpoint left
        else:
            print(f"demo:{k}: its training resumes from step {checkpoint_step(checkpoint)}, kept from a stopped build "
                  f"({checkpoint})", file=sys.stderr)
        config = demo_config(output_dir / "verification.jsonl", output_dir / "run", seed=recipe["seed"])
        with training_progress(f"training demo:{k}", output_dir / "run", config.training["num_train_epochs"]):
            result = train_rm(config, resume=RESUME_IF_ANY, what=f"training {name}",
                              again=f"its sampled completions are kept in {output_dir}; {again}")
        truth = evaluate_verifiers(truth_file, [str(result.final_model)], device="cpu")
        rm = VerifyRM.from_pretrained(result.final_model, device="cpu")
        summary = {
            "member": f"demo:{k}",
            "recipe": recipe,
            "annotation": annotation,
            "held_out": result.metrics,  # rule-labelled held-out fifth of its questions
            "truth_eval": truth.results[str(result.final_model)],
            "train_examples_per_s": result.train_examples_per_s,
            "probe": probe(rm),
            "build_s": round(time.monotonic() - started, 1),
        }
    (output_dir / "member.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def sampled_rows(k: int | str, recipe: dict, output_dir: Path) -> dict:
    """Member k's rule-labelled samples in output_dir/verification.jsonl, and the sampling's report: drawn now, or
    kept from a build that was stopped after drawing them (the report is written last: its presence says both are
    whole)."""
    from coreward.demo.policy import ensure_demo_policy
    from coreward.rm.annotate import write_rows

    done = output_dir / ANNOTATION_FILE
    if done.is_file() and (output_dir / "verification.jsonl").is_file():
        print(f"demo:{k}: its sampled completions are kept from a stopped build ({output_dir})", file=sys.stderr)
        return json.loads(done.read_text())
    rows, reports = [], []
    with torch_threads(DEMO_CONFIG["torch_threads"]):
        for start, end, sampling_seed in recipe_slices(recipe):
            slice_rows, report = sample_demo_rows(ensure_demo_policy(), "train", end, sampling_seed, start=start)
            rows, reports = rows + slice_rows, reports + [report.to_dict()]
    staged = write_rows(rows, output_dir / ".verification.jsonl")
    os.replace(staged, output_dir / "verification.jsonl")
    summary = reports[0] if len(reports) == 1 else pooled_report(reports)
    done.write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def pooled_report(reports: list[dict]) -> dict:
    """The sampling reports of several slices as one: counts added, each slice's kept under `slices`."""
    counts = [key for key, value in reports[0].items() if type(value) is int]  # AnnotationReport's counts
    total = {key: sum(r[key] for r in reports) for key in counts}
    return {"labelled_by": reports[0]["labelled_by"], **total,
            "positive_rate": total["positives"] / total["kept"] if total["kept"] else 0.0, "slices": reports}


class training_progress:  # noqa: N801 - a context manager, used as `with training_progress(...)`
    """A progress bar with the time left for an RM's training (`train_rm` prints nothing while it trains): the epoch
    its run logs to run_dir/metrics.jsonl, read every few seconds by a thread, out of `epochs`."""

    def __init__(self, what: str, run_dir: Path, epochs: float, every_s: float = 2.0):
        import threading

        self.what, self.metrics, self.epochs, self.every_s = what, Path(run_dir) / "metrics.jsonl", float(epochs), every_s
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._show, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    def epoch(self) -> float:
        from coreward.runtime.metrics import read_metrics

        return max((row.get("epoch", 0.0) for row in read_metrics(self.metrics)), default=0.0)

    def _show(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("epoch {task.completed:.1f}/{task.total:g}"),
                   TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn())
        with Progress(*columns, console=Console(stderr=True), transient=False) as progress:
            task = progress.add_task(self.what, total=self.epochs)
            # a resumed training starts at its checkpoint's epoch: shown done, not counted in the pace
            progress.reset(task, total=self.epochs, completed=min(self.epoch(), self.epochs))
            while not self.stop.wait(self.every_s):
                progress.update(task, completed=min(self.epoch(), self.epochs))
            progress.update(task, completed=min(self.epoch(), self.epochs))


def ensure_demo_rm_member(k: int | str) -> Path:
    """Member k's model directory, built once (docs/figures.md gives how long, demo:pooled the longest) and
    cached under $COREWARD_CACHE."""
    from coreward.runtime.interrupt import long_phase

    directory = member_directory(k)
    with long_phase(f"building the demo RM's ensemble member demo:{k}", "run the same command again to go on"):
        _cached(directory, directory / "member.json", lambda: build_demo_rm_member(k, directory),
                f"the demo RM's ensemble member demo:{k} (about {member_build_estimate(k) // 60} minutes)")
    return directory / "run" / "final"


def member_directory(k: int | str) -> Path:
    from coreward.demo.policy import ensure_demo_policy
    from coreward.runtime.assets import cache_root

    return cache_root() / f"demo_rm_member{k}-{member_hash(k, ensure_demo_policy())}"


def member_build_s(k: int | str) -> float | None:
    """Seconds member k's build takes before it can be used (None: it is built): what a run announces first."""
    return None if (member_directory(k) / "member.json").exists() else member_build_estimate(k)


def member_build_estimate(k: int | str) -> int:
    return MEMBER_BUILD_S * len(recipe_slices(member_recipe(k)))


def member_summary(name: str) -> dict:
    """The build summary of "demo" (demo_rm.json) or of a member "demo:k" (member.json), building it if needed."""
    if name == "demo":
        model = ensure_demo_rm()
        return json.loads((model / "demo_rm.json" if model == SHIPPED else model.parents[1] / "demo_rm.json").read_text())
    k = name.split(":", 1)[1]
    return json.loads((ensure_demo_rm_member(int(k) if k.isdigit() else k).parents[1] / "member.json").read_text())


def ensemble_report(names: list[str], uncertainty_weight: float = 1.0) -> dict:
    """Each RM of an ensemble of demo RMs (its held-out accuracy from its build, its accuracy on the true-labelled
    test samples, its weights' size, and the time it takes to score one demo step's completions on one thread), and
    the ensemble's accuracy on the same samples under each `combine` (combined score > 0.5)."""
    import time

    import torch

    from coreward.rewards.ensemble import COMBINES, combine_scores
    from coreward.rm.labelled import binary_metrics, read_labelled
    from coreward.rm.model import VerifyRM
    from coreward.runtime.assets import resolve_model

    rows = read_labelled(ensure_truth_eval())
    labels = [r["label"] for r in rows]
    triples = [[r[c] for r in rows] for c in ("question", "reference_answer", "completion")]
    step = [column[:STEP_COMPLETIONS] for column in triples]
    report: dict = {"truth_rows": len(rows), "members": {}, "ensemble": {}, "ensemble_probe": {}}
    member_scores, members = [], []
    with torch_threads(1):
        for name in names:
            built = member_summary(name)
            rm = VerifyRM.from_pretrained(resolve_model(name, "rm"), device="cpu", batch_size=64)
            rm.model.requires_grad_(False)
            rm.score(*step)  # warm-up: the first call pays one-off costs
            started = time.perf_counter()
            for _ in range(5):
                rm.score(*step)
            scores = rm.score(*triples)
            member_scores.append(scores)
            members.append(rm)
            report["members"][name] = {
                "held_out_accuracy": built["held_out"]["accuracy"],
                "truth_eval": binary_metrics(labels, [int(s > 0.5) for s in scores]),
                "parameters": sum(p.numel() for p in rm.model.parameters()),
                "weights_mb": sum(p.numel() * p.element_size() for p in rm.model.parameters()) / 1e6,
                "step_scoring_s": (time.perf_counter() - started) / 5,
            }
        for combine in COMBINES:
            combined, spread = combine_scores(member_scores, combine, uncertainty_weight)
            report["ensemble"][combine] = binary_metrics(labels, [int(s > 0.5) for s in combined])
            report["ensemble_probe"][combine] = probe(_Combined(members, combine, uncertainty_weight))
    report["members_std_mean"] = float(torch.tensor(spread).mean())  # their disagreement, on the score's scale
    report["members_variance_mean"] = float((torch.tensor(spread) ** 2).mean())  # what Coste et al.'s UWO subtracts
    return report


class _Combined:
    """An ensemble as one scorer (what `probe` asks of an RM): the members' scores combined as the reward does."""

    def __init__(self, members, combine: str, uncertainty_weight: float):
        self.members, self.combine, self.uncertainty_weight = members, combine, uncertainty_weight

    def score(self, questions, references, completions) -> list[float]:
        from coreward.rewards.ensemble import combine_scores

        scores = [rm.score(questions, references, completions) for rm in self.members]
        return combine_scores(scores, self.combine, self.uncertainty_weight)[0]


def main(argv: list[str]) -> None:
    """`python -m coreward.demo.rm [BUILD_DIR [--ship]]`: build (and package), or print the summary in use;
    `python -m coreward.demo.rm ensemble demo demo:1 demo:2`: build the members that are missing, and print each
    one's figures and the ensemble's (`ensemble_report`)."""
    if argv and argv[0] == "ensemble":
        print(json.dumps(ensemble_report(argv[1:] or ["demo", "demo:1", "demo:2"]), indent=2))
        return
    if not argv:
        model = ensure_demo_rm()
        summary = model / "demo_rm.json" if model == SHIPPED else model.parents[1] / "demo_rm.json"
        print(summary.read_text())
        return
    build_dir = Path(argv[0])
    print(json.dumps(build_demo_rm(build_dir), indent=2))
    if "--ship" in argv:
        print(f"shipped: {ship(build_dir)}")


if __name__ == "__main__":
    main(sys.argv[1:])
