"""Preregistration parts B and C (docs/preregistration.md): their registered commands as one resumable queue.

    python studies/2026-12-05-preregistered-parts-b-c/run.py            # run (again: resume)
    python studies/2026-12-05-preregistered-parts-b-c/run.py --check    # the queue, what is done, every config parsed

From the repository root of a checkout of the commit the runs start from (every run of a part at one commit, with
`PYTHONPATH=<checkout>/src` where coreward is installed from another one). Two jobs at a time, one thread each (the
trainings' registered `--set torch_threads=1`, `OMP_NUM_THREADS=1` for the rest); a job starts when what it needs is
done, in the order below, so the second core trains the rule arm and part C while the base model's long evaluation
blocks the reward model. Run it again to resume: a training with a complete final/, an evaluation with results.json,
a file a step writes, is done and skipped; a training stopped midway continues from its last checkpoint
(`--resume-if-any`) and an evaluation from its finished batches (`partial/`). Ctrl-C (or SIGTERM) passes the stop to
the running jobs (a training checkpoints the step in progress) and exits. Once every job that reads a finished
training's weights is done, its checkpoints and its reward sources' weights (a Cooper RM with its optimizer) are
removed, its policy kept (free_weights): kept whole, the queue's runs fill a 100 GB disk.

Across machines (`--record DIR`, with `--until`): the queue may go on on a fresh machine that holds only what git
holds, so each finished job's small outputs (results.json, metrics.jsonl, config.yaml, the RM's rows, the
decisions' files, cpu.jsonl and run.log) are copied into DIR, a folder of the repository, and committed there
(`--commit`). On start they are copied back, and a recorded job counts as done unless it is a job whose large outputs
(a policy's or the RM's weights, the base model's samples) a job still to run needs: that one runs again, with the
same command and seed. The RM is therefore built again on each machine that trains against it; the sha256 of its
weights goes into DIR (rm-train-*.json) so that every build can be compared with the first, and DIR/rm-build-of/JOB
names the build each training on the RM used. The record's run.log goes on across machines. `--until` (UTC) starts
no training whose own estimate plus its evaluations' would end after it, and no evaluation that would end after it;
the estimates are the longest recorded time of the same kind of job (its wall time, or 1.15 times its
CPU time where that is less: a stopped job's wall time runs on), else the defaults below.

Part B's steps (the registration's wording where it leaves a choice, fixed here before any run):
- the base model at n = 24 (eval-base); the RM rebuilt on the new split by the tutorial's commands: 160 train problems
  × 4 samples, its held-out rows the first 4 samples of each problem of eval-base (`--samples-per-problem 4`: the
  tutorial's base evaluation is avg@4, and the RM's held-out pass costs about a second a row), its held-out pairs those
  rows of the problems with a right and a wrong sample (`--pairs-only`), then `coreward rm train`;
- the co-optimized RM's learning rate on seeds 2100-2102 (pick.json, by the registered rule);
- per seed 2000-2007: rule, the authors' Cooper and rollout-negative Cooper to 60 steps, each evaluated at n = 24
  (final/) and n = 8 (best/, or final/ where the guard kept none); the frozen RM to 200 steps with a checkpoint every
  5; then match-sS.json: its H1 and H2 checkpoints (the first whose process_cpu_s reaches the Cooper arm's final
  process_cpu_s) and, for the secondary best/, the checkpoint at or before the step the guard's best/ held at the H1
  checkpoint (the guard replayed over the rows to that step; checkpoints are every 5 steps, so the step rounds down
  to one), each evaluated as the other arms (an H2 checkpoint that is H1's takes H1's evaluation: the same command).
Part C: majority, self-certainty, entropy, Co-rewarding-I and -II, 60 steps, seeds 2000-2003, evaluated at n = 24.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable


OUT = Path("runs/prereg/smol")
RM_DIR = Path("runs/smol_rm")
SEEDS_B = tuple(range(2000, 2008))
SEEDS_C = tuple(range(2000, 2004))
SEEDS_PICK = (2100, 2101, 2102)
RATES = ("1e-5", "1e-4", "2e-4")  # the registered candidates for the co-optimized RM's learning rate
TIE_POINTS = 1.0  # ties within 1 point go to the lower rate
METHODS_C = ("majority", "self_certainty", "entropy", "co_rewarding_1", "co_rewarding_2")
STEPS, FROZEN_STEPS, FROZEN_EVERY = 60, 200, 5
ARMS_B = {"rule": "configs/smol/rule.yaml", "cooper": "configs/smol/cooper.yaml",
          "cooper_rn": "configs/smol/cooper_rollout_negative.yaml", "model": "configs/smol/model.yaml"}
HEARTBEAT_S = 600
# wall seconds of one job of a kind on one core with the other core busy, until the record holds a measured one
# (the first start's measured costs, 1.2 times: a rollout-negative Cooper run about 1,740 CPU-s, a rule run 690)
DEFAULT_WALL_S = {"base-eval": 3600, "rm-rows": 1200, "rm-heldout": 300, "rm-pairs": 300, "rm-train": 900,
                  "rule": 1200, "cooper": 2100, "cooper_rn": 2100, "pick-lr": 2100, "model": 5400,
                  "eval-24": 900, "eval-8": 300}
DEFAULT_WALL_C = 2400  # a part C training


def train_args(config: str, seed: int, run: Path, *extra: str) -> list[str]:
    return ["coreward", "train", "--config", config, "--set", f"seed={seed}", "--set", "torch_threads=1", *extra,
            "--output-dir", str(run), "--resume-if-any"]


def eval_args(model: Path, n: int, out: Path) -> list[str]:
    return ["coreward", "eval", "--model", str(model), "--benchmarks", "arith", "--n", str(n), "--temperature", "0.7",
            "--top-p", "0.95", "--max-new-tokens", "128", "--batch-size", "16", "--seed", "0", "--output", str(out)]


def trained(run: Path) -> bool:
    return (run / "final" / "COREWARD_COMPLETE").is_file()


def evaluated(out: Path) -> bool:
    return (out / "results.json").is_file()


def kept_policy(run: Path) -> Path:
    """The guard's best/ where it kept one, else final/ (the registration's secondary outcome 1)."""
    return run / "best" if (run / "best" / "COREWARD_COMPLETE").is_file() else run / "final"


@dataclass
class Job:
    name: str
    command: Callable[[], list[str]] | None  # None: `action` runs in this process
    done: Callable[[], bool]
    needs: tuple[str, ...] = ()
    action: Callable[[], None] | None = None
    env: dict[str, str] = field(default_factory=dict)
    marker: bool = False  # done is OUT/done/NAME, written when its command exits 0 (no file of its own says so)
    keep: Callable[[], list[Path]] = list  # the small outputs the record keeps (--record)
    heavy: bool = False  # it leaves outputs the record does not keep: weights, samples
    reads: tuple[str, ...] = ()  # the heavy jobs whose outputs it reads (a subset of needs)


def small_files(folder: Path) -> Callable[[], list[Path]]:
    """A training's or an evaluation's outputs the analysis and the decisions read."""
    return lambda: [folder / name for name in ("results.json", "metrics.jsonl", "config.yaml")
                    if (folder / name).is_file()]


def readers(job: Job, queue: list[Job]) -> list[Job]:
    """The jobs that read the job's outputs."""
    return [other for other in queue if job.name in other.reads]


def pending_readers(job: Job, queue: list[Job], finished: set[str]) -> list[Job]:
    """The jobs not yet finished that read the job's outputs."""
    return [other for other in readers(job, queue) if other.name not in finished]


def free_weights(queue: list[Job], finished: set[str]) -> list[Path]:
    """Removes what no job still to run reads of each finished training whose readers are all done: its checkpoint-*
    folders and the reward sources' weights in final/ and best/ (the policy adapter stays). Returns what it removed."""
    removed = []
    for job in queue:
        run = OUT / job.name
        if not readers(job, queue) or job.name not in finished or not trained(run) or pending_readers(job, queue, finished):
            continue
        for path in [*run.glob("checkpoint-*"), run / "final" / "reward_sources", run / "best" / "reward_sources"]:
            if path.is_dir():
                shutil.rmtree(path)
                removed.append(path)
    return removed


# ------------------------------------------------------------------------------------------------ decisions
def pick_rate() -> str:
    """The registered rule: the highest mean held-out avg@8 of final/ over seeds 2100-2102; ties within 1 point go to
    the lower rate. Written to pick.json with every rate's per-seed values."""
    means, values = {}, {}
    for rate in RATES:
        values[rate] = [heldout(OUT / f"eval-pick-lr{rate}-s{seed}", 8) for seed in SEEDS_PICK]
        means[rate] = 100 * statistics.mean(values[rate])
    best = max(means.values())
    picked = min((float(rate), rate) for rate in RATES if means[rate] >= best - TIE_POINTS)[1]
    (OUT / "pick.json").write_text(json.dumps({"picked": picked, "mean_points": means, "avg@8": values}, indent=1))
    return picked


def picked_rate() -> str:
    return json.loads((OUT / "pick.json").read_text())["picked"]


def heldout(out: Path, n: int) -> float:
    return json.loads((out / "results.json").read_text())["benchmarks"]["arith"][f"avg@{n}"]


def final_cpu_s(run: Path) -> float:
    from coreward.runtime.metrics import read_metrics

    return max(row["process_cpu_s"] for row in read_metrics(run / "metrics.jsonl") if "process_cpu_s" in row)


def match(seed: int) -> dict:
    """The frozen run's checkpoints at the Cooper arms' CPU-seconds, and the one for its best/ (module docstring)."""
    from coreward.evaluation.guard import replay
    from coreward.evaluation.plots import read_config
    from coreward.runtime.metrics import read_metrics

    frozen = OUT / f"model-s{seed}"
    rows = read_metrics(frozen / "metrics.jsonl")
    cpu = {row["step"]: row["process_cpu_s"] for row in rows if "process_cpu_s" in row and row.get("step", 0) > 0}
    result = {"seed": seed}
    for hypothesis, arm in (("H1", "cooper_rn"), ("H2", "cooper")):
        target = final_cpu_s(OUT / f"{arm}-s{seed}")
        reached = [step for step in range(FROZEN_EVERY, FROZEN_STEPS + 1, FROZEN_EVERY) if cpu.get(step, 0) >= target]
        step = reached[0] if reached else FROZEN_STEPS
        result[hypothesis] = {"target_cpu_s": target, "step": step, "cpu_s": cpu.get(step),
                              "reached": bool(reached)}  # not reached: step 200, a departure to report
    upto = result["H1"]["step"]
    # the guard's best/ as it stood at that step: its new-best readings, with the live guard's rewrite rule (a gain of
    # at least best_min_gain over the best written)
    from coreward.evaluation.guard import GuardSettings

    settings = GuardSettings(**read_config(frozen / "config.yaml").get("guard", {}))
    _, readings = replay([row for row in rows if row.get("step", 0) <= upto], settings)
    best_step, best = None, None
    for reading in readings:
        if reading.new_best and (best is None or reading.verified >= best + settings.best_min_gain):
            best_step, best = reading.step, reading.verified
    kept = None if best_step is None else max(FROZEN_EVERY, best_step - best_step % FROZEN_EVERY)
    result["best"] = {"guard_step": best_step, "checkpoint_step": kept if kept is not None else upto}
    (OUT / f"match-s{seed}.json").write_text(json.dumps(result, indent=1))
    return result


def matched(seed: int) -> dict:
    return json.loads((OUT / f"match-s{seed}.json").read_text())


def frozen_checkpoint(seed: int, step: int) -> Path:
    run = OUT / f"model-s{seed}"
    return run / "final" if step == FROZEN_STEPS and not (run / f"checkpoint-{step}").is_dir() else \
        run / f"checkpoint-{step}"


# ------------------------------------------------------------------------------------------------ the queue
def jobs() -> list[Job]:
    one_thread = {"OMP_NUM_THREADS": "1"}
    queue = [
        Job("base-eval", lambda: eval_args(Path("smollm2-135m-instruct"), 24, OUT / "eval-base"),
            lambda: evaluated(OUT / "eval-base"), env=one_thread),
        Job("rm-rows", lambda: ["coreward", "rm", "annotate", "--policy", "smollm2-135m-instruct", "--data", "arith",
                                "--split", "train", "--limit", "160", "--n", "4", "--max-tokens", "64",
                                "--temperature", "0.7", "--batch-size", "64", "--seed", "0",
                                "--output", str(RM_DIR / "rows.jsonl")],
            lambda: (RM_DIR / "rows.jsonl.report.json").is_file(), env=one_thread),
        Job("rm-heldout", lambda: ["coreward", "rm", "annotate", "--data", "arith", "--split", "test", "--from-samples",
                                   str(OUT / "eval-base"), "--samples-per-problem", "4",
                                   "--output", str(RM_DIR / "heldout.jsonl")],
            lambda: (RM_DIR / "heldout.jsonl.report.json").is_file(), ("base-eval",), env=one_thread),
        Job("rm-pairs", lambda: ["coreward", "rm", "annotate", "--data", "arith", "--split", "test", "--from-samples",
                                 str(OUT / "eval-base"), "--samples-per-problem", "4", "--pairs-only",
                                 "--output", str(RM_DIR / "heldout_pairs.jsonl")],
            lambda: (RM_DIR / "heldout_pairs.jsonl.report.json").is_file(), ("base-eval",), env=one_thread),
        Job("rm-train", lambda: ["coreward", "rm", "train", "--config", "configs/rm/smol.yaml", "--set",
                                 "torch_threads=1"],
            lambda: (OUT / "done" / "rm-train").is_file(), ("rm-rows", "rm-heldout"), env=one_thread, marker=True),
    ]
    for rate in RATES:
        for seed in SEEDS_PICK:
            run = OUT / f"pick-lr{rate}-s{seed}"
            queue += [
                Job(f"pick-lr{rate}-s{seed}", lambda run=run, rate=rate, seed=seed: train_args(
                    ARMS_B["cooper_rn"], seed, run, "--set", f"grpo.max_steps={STEPS}", "--set",
                    f"rewards.0.params.lr={rate}"), lambda run=run: trained(run), ("rm-train", "rm-pairs")),
                Job(f"eval-pick-lr{rate}-s{seed}", lambda run=run, rate=rate, seed=seed: eval_args(
                    run / "final", 8, OUT / f"eval-pick-lr{rate}-s{seed}"),
                    lambda rate=rate, seed=seed: evaluated(OUT / f"eval-pick-lr{rate}-s{seed}"),
                    (f"pick-lr{rate}-s{seed}",), env=one_thread),
            ]
    queue.append(Job("pick", None, lambda: (OUT / "pick.json").is_file(),
                     tuple(f"eval-pick-lr{r}-s{s}" for r in RATES for s in SEEDS_PICK), action=pick_rate))

    def arm_jobs(arm: str, config: str, seed: int, needs: tuple[str, ...], extra: Callable[[], list[str]],
                 best: bool) -> list[Job]:
        run = OUT / f"{arm}-s{seed}"
        out = [Job(f"{arm}-s{seed}", lambda: train_args(config, seed, run, "--set", f"grpo.max_steps={STEPS}",
                                                        *extra()), lambda: trained(run), needs),
               Job(f"eval-{arm}-s{seed}", lambda: eval_args(run / "final", 24, OUT / f"eval-{arm}-s{seed}"),
                   lambda: evaluated(OUT / f"eval-{arm}-s{seed}"), (f"{arm}-s{seed}",), env=one_thread)]
        if best:
            out.append(Job(f"eval-best-{arm}-s{seed}", lambda: eval_args(kept_policy(run), 8,
                                                                         OUT / f"eval-best-{arm}-s{seed}"),
                           lambda: evaluated(OUT / f"eval-best-{arm}-s{seed}"), (f"{arm}-s{seed}",), env=one_thread))
        return out

    rm_ready = ("rm-train", "rm-pairs")
    for seed in SEEDS_B:
        queue += arm_jobs("rule", ARMS_B["rule"], seed, (), list, True)
        queue += arm_jobs("cooper", ARMS_B["cooper"], seed, rm_ready, list, True)
        queue += arm_jobs("cooper_rn", ARMS_B["cooper_rn"], seed, (*rm_ready, "pick"),
                          lambda: ["--set", f"rewards.0.params.lr={picked_rate()}"], True)
        frozen = OUT / f"model-s{seed}"
        queue += [
            Job(f"model-s{seed}", lambda seed=seed, frozen=frozen: train_args(
                ARMS_B["model"], seed, frozen, "--set", f"grpo.max_steps={FROZEN_STEPS}", "--set",
                f"grpo.save_steps={FROZEN_EVERY}", "--set", "grpo.save_total_limit=40"),
                lambda frozen=frozen: trained(frozen), ("rm-train", f"cooper-s{seed}", f"cooper_rn-s{seed}")),
            Job(f"match-s{seed}", None, lambda seed=seed: (OUT / f"match-s{seed}.json").is_file(),
                (f"model-s{seed}", f"cooper-s{seed}", f"cooper_rn-s{seed}"), action=lambda seed=seed: match(seed)),
        ]
        for what, n, key in (("h1", 24, "H1"), ("h2", 24, "H2"), ("best", 8, "best")):
            name = f"eval-model_{what}-s{seed}"
            field_name = "checkpoint_step" if key == "best" else "step"
            queue.append(Job(name, lambda seed=seed, key=key, field_name=field_name, name=name, n=n: eval_args(
                frozen_checkpoint(seed, matched(seed)[key][field_name]), n, OUT / name),
                lambda name=name: evaluated(OUT / name), (f"match-s{seed}",), env=one_thread))
            if key == "H2":  # the same checkpoint as H1's: the same command's results (seed 0), copied, not sampled again
                queue[-1].needs += (f"eval-model_h1-s{seed}",)
                queue[-1].command = lambda seed=seed, name=name, plain=queue[-1].command: (
                    ["cp", "-rT", str(OUT / f"eval-model_h1-s{seed}"), str(OUT / name)]
                    if matched(seed)["H1"]["step"] == matched(seed)["H2"]["step"] else plain())
    for seed in SEEDS_C:
        for method in METHODS_C:
            queue += arm_jobs(method, f"configs/smol/{method}.yaml", seed, (), list, False)
    return [with_record(job) for job in queue]


def with_record(job: Job) -> Job:
    """What the record keeps of a job, and whether the jobs needing it read outputs the record does not keep."""
    name = job.name
    job.reads = tuple(need for need in job.needs if need == "rm-train" or need == "base-eval")
    if name.startswith("eval-"):  # the policy it evaluates
        policy = name.removeprefix("eval-").removeprefix("best-")
        job.reads += (re.sub(r"^model_[a-z0-9]+-", "model-", policy),) if policy.startswith(("model_", "pick-")) or \
            any(policy.startswith(f"{arm}-s") for arm in (*ARMS_B, *METHODS_C)) else ()
    if name == "base-eval":
        job.keep, job.heavy = small_files(OUT / "eval-base"), True  # its samples label the RM's held-out rows
    elif name.startswith("rm-") and name != "rm-train":
        path = {"rm-rows": "rows.jsonl", "rm-heldout": "heldout.jsonl", "rm-pairs": "heldout_pairs.jsonl"}[name]
        job.keep = lambda path=path: [RM_DIR / path, RM_DIR / f"{path}.report.json"]
    elif name == "rm-train":
        job.heavy = True
    elif name.startswith("eval-"):
        job.keep = small_files(OUT / name)
    elif name == "pick":
        job.keep = lambda: [OUT / "pick.json"]
    elif name.startswith("match-"):
        job.keep = lambda name=name: [OUT / f"{name}.json"]
    else:  # a training: its weights are what its evaluations (and a frozen run's match) read
        job.keep, job.heavy = small_files(OUT / name), True
    return job


# ------------------------------------------------------------------------------------------------ the record
class Record:
    """The small outputs of finished jobs, in a folder of the repository (module docstring: across machines)."""

    def __init__(self, folder: Path, commit: bool) -> None:
        self.folder, self.commit_each = folder, commit
        self.rm_build_file: str | None = None  # this machine's RM build, once made
        (folder / "done").mkdir(parents=True, exist_ok=True)

    def recorded(self) -> set[str]:
        return {path.name for path in (self.folder / "done").iterdir()}

    def restore(self, names: set[str]) -> None:
        """Copies the recorded files of these jobs back where the queue's jobs read them (files present are kept), and
        the record's run.log, which the queue then goes on appending to."""
        if (self.folder / OUT / "run.log").is_file() and not (OUT / "run.log").is_file():
            OUT.mkdir(parents=True, exist_ok=True)
            shutil.copy2(self.folder / OUT / "run.log", OUT / "run.log")
        for name in sorted(names):
            for relative in json.loads((self.folder / "done" / name).read_text()):
                target = Path(relative)
                if not target.exists():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(self.folder / relative, target)

    def keep(self, job: Job, cpu_lines: list[dict]) -> None:
        files = [path for path in job.keep() if path.is_file()]
        for path in files:
            (self.folder / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, self.folder / path)
        for line in cpu_lines:
            self.attempt(line)
        if "rm-train" in job.reads:  # the RM build it trained on (each machine builds its own)
            (self.folder / "rm-build-of").mkdir(exist_ok=True)
            builds = sorted(self.folder.glob("rm-train-*.json"))  # the newest: this machine's, made before the queue restarted
            used = self.rm_build_file or (builds[-1].name if builds else "unknown")
            (self.folder / "rm-build-of" / job.name).write_text(f"{used}\n")
        (self.folder / "done" / job.name).write_text(json.dumps([str(path) for path in files]) + "\n")
        self.save(f"done {job.name}")

    def attempt(self, cpu_line: dict) -> None:
        (self.folder / OUT).mkdir(parents=True, exist_ok=True)
        with open(self.folder / OUT / "cpu.jsonl", "a") as handle:  # beside the outputs: analyze.py reads it
            handle.write(json.dumps(cpu_line) + "\n")

    def rm_build(self) -> str:
        """The sha256 of the RM's weights, with the CPU that built it and its held-out rows of metrics.jsonl, written as
        rm-train-<UTC>.json; the line says how it compares with the first build."""
        digests = {str(path): hashlib.sha256(path.read_bytes()).hexdigest()
                   for path in sorted(RM_DIR.rglob("*.safetensors")) if "checkpoint-" not in str(path)}
        earlier = sorted(self.folder.glob("rm-train-*.json"))
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        from coreward.runtime.metrics import read_metrics

        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), "unknown") if Path("/proc/cpuinfo").is_file() else "unknown"
        held_out = [row for row in read_metrics(RM_DIR / "metrics.jsonl") if any(k.startswith("eval") for k in row)] \
            if (RM_DIR / "metrics.jsonl").is_file() else []
        self.rm_build_file = f"rm-train-{stamp}.json"
        (self.folder / self.rm_build_file).write_text(json.dumps(
            {"sha256": digests, "cpu": cpu, "held_out": held_out}, indent=1) + "\n")
        if not earlier:
            return "the RM's first build: its weights' sha256 recorded"
        first = json.loads(earlier[0].read_text())["sha256"]
        return ("the RM built again: its weights equal the first build's (sha256)" if first == digests else
                f"the RM built again: its weights DIFFER from the first build's ({earlier[0].name})")

    def save(self, message: str) -> None:
        """Copies run.log in; with --commit, commits the record's folder alone (other changes stay as they are)."""
        if (OUT / "run.log").is_file():
            (self.folder / OUT).mkdir(parents=True, exist_ok=True)
            shutil.copy2(OUT / "run.log", self.folder / OUT / "run.log")
        if not self.commit_each:
            return
        for attempt in range(5):  # another git command holding the index lock: try again
            added = subprocess.run(["git", "add", "-A", "."], cwd=self.folder, capture_output=True, text=True)
            done = added.returncode == 0 and subprocess.run(
                ["git", "commit", "-q", "-m", f"parts B-C record: {message}", "--", "."], cwd=self.folder,
                capture_output=True, text=True).returncode == 0
            if done:
                return
            time.sleep(2 + 3 * attempt)
        print(f"warning: the record's commit failed ({message}); it is committed with the next one", flush=True)


def finished_jobs(queue: list[Job], record: Record | None) -> set[str]:
    """Done here, or recorded, less the recorded heavy jobs whose outputs a job still to run reads."""
    local = {job.name for job in queue if job.done()}
    finished = local | (record.recorded() if record else set())
    changed = True
    while changed:
        changed = False
        for job in queue:
            if job.name in finished and job.name not in local and job.heavy and pending_readers(job, queue, finished):
                finished.discard(job.name)
                changed = True
    return finished


def kind(name: str) -> str:
    for rate in RATES:
        name = name.replace(f"lr{rate}", "lr")
    return re.sub(r"-s\d+$", "", name)


def estimate_s(job: Job, walls: dict[str, float]) -> float:
    """The longest recorded time of its kind (walls()), else the default."""
    if kind(job.name) in walls:
        return walls[kind(job.name)]
    if job.name.startswith("eval-"):
        return DEFAULT_WALL_S["eval-8" if "best" in job.name or "pick" in job.name else "eval-24"]
    return DEFAULT_WALL_S.get(kind(job.name), DEFAULT_WALL_S.get(kind(job.name).split("-")[0], DEFAULT_WALL_C))


def chain_s(job: Job, queue: list[Job], walls: dict[str, float], finished: set[str]) -> float:
    """A job with the jobs still to run that read its outputs, for as long as those are needed: a training with its
    evaluations, the base evaluation with the RM's held-out rows, the RM's build with the cheapest training on it."""
    readers = pending_readers(job, queue, finished)
    if job.name == "rm-train":
        return estimate_s(job, walls) + min((chain_s(r, queue, walls, finished) for r in readers), default=0.0)
    return estimate_s(job, walls) + sum(estimate_s(reader, walls) for reader in readers)


# ------------------------------------------------------------------------------------------------ the scheduler
def log(line: str) -> None:
    text = f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime())} {line}"
    print(text, flush=True)
    with open(OUT / "run.log", "a") as handle:
        handle.write(text + "\n")


def check(queue: list[Job], record: Record | None) -> None:
    """Every training config with its overrides parses (a typo fails now, not hours in); the queue and its state."""
    from coreward.grpo.config import as_train_config
    from coreward.runtime.errors import CorewardError

    names = {job.name for job in queue}
    for job in queue:
        missing = [need for need in job.needs if need not in names]
        assert not missing, (job.name, missing)
        if job.command is not None and job.name.split("-")[0] not in ("eval", "base", "rm"):
            try:
                args = job.command()
            except (OSError, KeyError):  # a rate not picked yet: checked with the first rate instead
                args = train_args(ARMS_B["cooper_rn"], 0, OUT / "x", "--set", f"rewards.0.params.lr={RATES[0]}")
            config = args[args.index("--config") + 1]
            sets = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
            try:
                as_train_config(config, sets)
            except CorewardError as error:  # the RM and its held-out pairs are files the queue writes first
                if str(RM_DIR) not in str(error):
                    raise
    finished = finished_jobs(queue, record)
    for job in queue:
        print(f"{'done' if job.name in finished else 'to do':6} {job.name}" + (f"  (needs {', '.join(job.needs)})"
                                                                             if job.needs else ""))
    print(f"{len(finished)} of {len(queue)} jobs done")


def run(queue: list[Job], workers: int, record: Record | None, until: datetime | None) -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "logs").mkdir(exist_ok=True)
    (OUT / "done").mkdir(exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    finished = finished_jobs(queue, record)
    if record is not None:
        record.restore(finished & record.recorded())
        attempts = [json.loads(line) for line in (OUT / "cpu.jsonl").read_text().splitlines()] \
            if (OUT / "cpu.jsonl").is_file() else []
        for job in queue:  # done here but not kept (the queue stopped between the two): kept now
            if job.name in finished - record.recorded():
                record.keep(job, [line for line in attempts if line["job"] == job.name and line["exit"] == 0])
    log(f"parts B and C at {commit}: {len(finished)} of {len(queue)} jobs done"
        + (f" ({len(record.recorded() - finished)} recorded ones to run again)" if record is not None else "")
        + (f"; starting no job that would end after {until:%Y-%m-%d %H:%M} UTC" if until else ""))

    def walls() -> dict[str, float]:
        measured: dict[str, float] = {}
        for path in [OUT / "cpu.jsonl"] + ([record.folder / OUT / "cpu.jsonl"] if record is not None else []):
            for line in path.read_text().splitlines() if path.is_file() else []:
                row = json.loads(line)
                if row["exit"] == 0:  # a stop (SIGSTOP) lengthens the wall time, not the CPU time of one thread
                    seconds = min(row["wall_s"], 1.15 * row["cpu_s"])
                    measured[kind(row["job"])] = max(measured.get(kind(row["job"]), 0.0), seconds)
        return measured

    def fits(job: Job, measured: dict[str, float]) -> bool:
        return until is None or time.time() + chain_s(job, queue, measured, finished) <= until.timestamp()
    failed: set[str] = set()
    running: dict[str, tuple[subprocess.Popen, float]] = {}
    stopping = False

    def stop(signum, frame):
        nonlocal stopping
        stopping = True
        for process, _ in running.values():
            try:
                os.killpg(process.pid, signal.SIGINT)  # a training checkpoints the step in progress, then exits
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    last_beat = time.time()
    while True:
        for name, (process, started) in list(running.items()):
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)  # its rusage: the job's CPU, children included
            if pid == 0:
                continue
            code = process.returncode = os.waitstatus_to_exitcode(status)
            del running[name]
            job = next(j for j in queue if j.name == name)
            minutes = (time.time() - started) / 60
            cpu_line = {"job": name, "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
                        "wall_s": round(time.time() - started, 1), "exit": code}
            with open(OUT / "cpu.jsonl", "a") as handle:  # a resumed job has a line per attempt: their sum is its cost
                handle.write(json.dumps(cpu_line) + "\n")
            if code == 0 and job.marker:
                (OUT / "done" / name).write_text(f"{time.time()}\n")
            if code == 0 and job.done():
                finished.add(name)
                log(f"done {name} ({minutes:.0f} min)")
                if record is not None:
                    if name == "rm-train":
                        log(record.rm_build())
                    record.keep(job, [cpu_line])
                freed = free_weights(queue, finished)
                if freed:
                    log(f"removed {len(freed)} folders of weights no job still to run reads "
                        f"({', '.join(sorted({p.relative_to(OUT).parts[0] for p in freed}))})")
            else:
                failed.add(name)
                log(f"FAILED {name}: exit {code} after {minutes:.0f} min (log: {OUT / 'logs' / name}.log)")
                if record is not None:  # every attempt's cost, a stopped one's too
                    record.attempt(cpu_line)
        if stopping:
            if not running:
                log("stopped: run this again to resume")
                return 130
            time.sleep(1)
            continue
        blocked = failed | {j.name for j in queue if any(n in failed for n in j.needs)}
        ready = [j for j in queue if j.name not in finished | blocked | set(running)
                 and all(n in finished for n in j.needs)]
        # the jobs that read a finished training's weights first: a machine that ends with them undone loses it
        ready.sort(key=lambda job: not job.reads or job.reads == ("rm-train",))
        decisions = [job for job in ready if job.action is not None]
        for job in decisions:  # a decision in this process (seconds): it may make more jobs ready
            try:
                job.action()
                finished.add(job.name)
                log(f"done {job.name}")
                if record is not None:
                    record.keep(job, [])
            except Exception as error:  # noqa: BLE001 - reported and the queue goes on without its dependants
                failed.add(job.name)
                log(f"FAILED {job.name}: {type(error).__name__}: {error}")
        if decisions:
            continue
        measured = walls() if ready and len(running) < workers else {}  # read once a pass, only when a core is free
        for job in ready:
            if len(running) >= workers:
                break
            if not fits(job, measured):
                continue
            args = job.command()
            handle = open(OUT / "logs" / f"{job.name}.log", "a")
            handle.write(f"$ {' '.join(args)}\n")
            handle.flush()
            process = subprocess.Popen(args, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True,
                                       env={**os.environ, "TOKENIZERS_PARALLELISM": "false", **job.env},
                                       stdin=subprocess.DEVNULL)
            running[job.name] = (process, time.time())
            log(f"start {job.name}")
        if not running:
            left = [j.name for j in queue if j.name not in finished]
            log(f"queue ended: {len(finished)} done, {len(failed)} failed, {len(left)} not run"
                + (f" (failed: {', '.join(sorted(failed))})" if failed else "")
                + (" (the rest would end after --until)" if ready and until else ""))
            if record is not None:
                record.save("queue ended")
            return 1 if failed else (3 if left else 0)
        if time.time() - last_beat > HEARTBEAT_S:
            last_beat = time.time()
            log(f"running {', '.join(f'{n} ({(time.time() - t) / 60:.0f} min)' for n, (_, t) in running.items())}; "
                f"{len(finished)} of {len(queue)} done")
        time.sleep(5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="list the queue and what is done; parse every config")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--record", type=Path, help="a folder of the repository for the finished jobs' small outputs")
    parser.add_argument("--commit", action="store_true", help="commit the record's folder after each finished job")
    parser.add_argument("--until", help="UTC, YYYY-MM-DDTHH:MM: start no job that would end after it")
    args = parser.parse_args()
    queue = jobs()
    record = Record(args.record.resolve(), args.commit) if args.record else None
    if args.check:
        check(queue, record)
        return
    until = datetime.strptime(args.until, "%Y-%m-%dT%H:%M").replace(tzinfo=timezone.utc) if args.until else None
    code = run(queue, args.workers, record, until)
    if code == 0:
        (OUT / "done" / "all").write_text("")
    sys.exit(code)


if __name__ == "__main__":
    main()
