"""`coreward demo`: every reward method on the demo task, side by side, from the same warm start.

Each method trains the shipped demo policy with its own `configs/demo/<method>.yaml`, the same seed and
the same budget (steps, batch, learning rate: the configs differ only in their reward). Then the same
evaluation code as `coreward eval` scores every final policy on the held-out demo problems (avg@n), and
`coreward report` draws reward and verified accuracy against step for all runs.

`coreward demo --model smollm2-135m-instruct` does the same with a real pretrained model (`SMOL`): its
`configs/smol/<method>.yaml`, the `arith` task's held-out problems, GT-GRPO and majority voting by default.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from coreward.runtime.errors import CorewardError


def demo_methods() -> dict[str, str]:
    """Every built-in reward method by config name, with its table label, in the order of the Cooper paper's table
    (`coreward.rewards.builtin_methods`)."""
    from coreward.rewards import builtin_methods
    from coreward.rewards.base import label_of

    return {cls.name: label_of(cls) for cls in builtin_methods() if cls.in_demo}


# Stress-only rows: a demo config that is a setting of a method, not a method of its own, run under stress beside the
# method as its authors ran it (when that method is asked for). co_optimized.yaml is Cooper with rollout negatives, the
# co-optimized setting picked on the hackability map (docs/results.md, Cooper's variants).
STRESS_SETTINGS = {"co_optimized": ("cooper", "Cooper, rollout negatives (co_optimized.yaml)")}


def label(method: str) -> str:
    if method in STRESS_SETTINGS:
        return STRESS_SETTINGS[method][1]
    return "Baseline (no RL)" if method == "baseline" else demo_methods()[method]


def reference_based_methods() -> tuple[str, ...]:
    """The built-in methods that score against the reference answers (`needs_references`), in table order: the
    reward-model rows and the rule reward, their control; each followed by its stress-only settings."""
    from coreward.rewards import builtin_methods

    methods = [cls.name for cls in builtin_methods() if cls.needs_references and cls.in_demo]
    return tuple(name for method in methods
                 for name in (method, *(s for s, (base, _) in STRESS_SETTINGS.items() if base == method)))


@dataclass(frozen=True)
class Stress:
    """A second, harder setting for the reward-model rows: 4x the learning rate, twice the steps.

    At the demo's learning rate the policy stays close to the warm start, where the demo RM is accurate. Pushed
    harder, the policy drifts into outputs the RM never saw, and a frozen RM's holes start to pay: this is where
    a static RM gets hacked (reward held up while verified accuracy falls), with rule rewards as the control.
    """

    learning_rate: float
    steps: int
    methods: tuple[str, ...] = field(default_factory=reference_based_methods)  # rule, model, cooper, co_optimized


@dataclass(frozen=True)
class Budget:
    steps: int  # GRPO steps per method
    eval_problems: int  # held-out demo problems in the final evaluation
    eval_n: int  # samples per problem (avg@n)
    curve_every: int  # validation-curve evaluation every k steps (0: none)
    curve_problems: int
    stress: Stress | None = None  # the reward-model rows again under harder optimisation (None: skip)


# Sized for a 2-core CPU: the full demo in under 20 minutes, --quick in under 5 (docs/figures.md).
# The stress setting comes from a hackability map on seed 3, a seed the published table does not use
# (`coreward map`, docs/tutorials/demo.md): at 4x the demo's learning rate the frozen RM's rollouts peak in verified
# accuracy and then fall while its reward rises, and verified positives persist (Cooper keeps getting pairs);
# a much larger rate leaves no verified positive to learn from (docs/results.md).
FULL = Budget(steps=30, eval_problems=500, eval_n=8, curve_every=10, curve_problems=100,
              stress=Stress(learning_rate=2e-4, steps=60))
QUICK = Budget(steps=8, eval_problems=200, eval_n=8, curve_every=0, curve_problems=0)


@dataclass(frozen=True)
class DemoTask:
    """What a demo trains and where it looks: the policy, its configs (`configs/<configs>/<method>.yaml`), the
    held-out benchmark, the budgets, the methods run by default (None: every demo method) and the evaluation's
    generation settings."""

    policy: str
    configs: str
    benchmark: str
    full: Budget
    quick: Budget
    methods: tuple[str, ...] | None = None
    generation: dict[str, int] = field(default_factory=dict)

    def budget(self, quick: bool) -> Budget:
        return self.quick if quick else self.full


TOY = DemoTask(policy="demo", configs="demo", benchmark="demo", full=FULL, quick=QUICK)
# A real model on 2 CPU cores: a step of configs/smol/rule.yaml (4 prompts x 8 completions of <= 64 tokens) takes
# about a minute, the held-out evaluation (the 114 test problems x 4 samples of <= 128 tokens) minutes (docs/tutorials/real-model.md)
SMOL = DemoTask(policy="smollm2-135m-instruct", configs="smol", benchmark="arith",
                full=Budget(steps=20, eval_problems=114, eval_n=4, curve_every=0, curve_problems=0),
                quick=Budget(steps=2, eval_problems=8, eval_n=2, curve_every=0, curve_problems=0),
                methods=("rule", "majority"), generation={"max_new_tokens": 128, "batch_size": 64})
TASKS = {"demo": TOY, SMOL.policy: SMOL}


def demo_task(model: str | None) -> DemoTask:
    if model is None:
        return TOY
    if model not in TASKS:
        from coreward.runtime.names import did_you_mean

        raise CorewardError(f"--model: no demo for {model!r}{did_you_mean(model, TASKS)} (known: {', '.join(TASKS)}); "
                            "to train another model, point a config's model.name_or_path at it (coreward train)")
    return TASKS[model]


def configs_dir(task: DemoTask = TOY) -> Path:
    """`configs/<task.configs>` of the repository the package was installed from (pip install -e .)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent / "configs" / task.configs
        if candidate.is_dir():
            return candidate
    raise CorewardError(f"configs/{task.configs} not found: install coreward from a clone of its repository "
                        "(pip install -e .)")


def parse_methods(text: str | None, task: DemoTask = TOY) -> list[str]:
    known = [m for m in demo_methods() if task is TOY or (configs_dir(task) / f"{m}.yaml").is_file()]
    if not text:
        return list(task.methods) if task.methods else known
    methods = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in methods if m not in known]
    if unknown:
        from coreward.runtime.names import did_you_mean

        raise CorewardError(f"--methods: unknown method {', '.join(unknown)}{did_you_mean(unknown, known)} (known: {', '.join(known)})")
    return methods


def method_overrides(method: str, budget: Budget, seed: int, task: DemoTask = TOY) -> tuple[Path, list[str]]:
    """The method's demo config file and the `--set` items that give it the budget and the seed."""
    path = configs_dir(task) / f"{method}.yaml"
    if not path.is_file():
        raise CorewardError(f"no demo config for method {method!r}: {path} is missing")
    # one line per step (`StepLinesCallback`): a progress bar redrawn in place shows nothing in a log or a CI job
    overrides = [f"grpo.max_steps={budget.steps}", f"seed={seed}", f"grpo.save_steps={budget.steps}",
                 "grpo.disable_tqdm=true"]
    if budget.curve_every:
        overrides += [
            f"data.eval={task.benchmark}", "data.eval_split=test", f"data.eval_limit={budget.curve_problems}",
            f"data.eval_every={budget.curve_every}", "data.eval_n=2",
        ]
    else:
        overrides.append("data.eval_every=0")
    return path, overrides


def method_config(method: str, budget: Budget, seed: int, task: DemoTask = TOY):
    from coreward.grpo.config import TrainConfig
    from coreward.runtime.config import load_config

    return load_config(TrainConfig, *method_overrides(method, budget, seed, task))


def reads_demo_rm(config) -> bool:
    """Whether a reward of `config` starts from the demo RM: a parameter of its demo config set to "demo" (the
    static RM's `path`, Cooper's `rm`)."""
    return any(value == "demo" for spec in config.rewards for value in spec.params.values())


def final_metrics(run_dir: Path, last: int = 5, first: bool = False) -> dict[str, float | None]:
    """Mean training reward and verified accuracy over the last (or, with `first`, the first) `last` steps."""
    from coreward.runtime.metrics import read_metrics

    rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if "reward" in r]
    rows = rows[:last] if first else rows[-last:]

    def mean(key: str) -> float | None:
        values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
        return sum(values) / len(values) if values else None

    return {"train_reward": mean("reward"), "train_verified_accuracy": mean("verified_accuracy")}


def stress_overrides(method: str, budget: Budget, seed: int, task: DemoTask = TOY) -> tuple[Path, list[str]]:
    """The method's demo config at the stress setting's learning rate and steps (no validation curve)."""
    path, overrides = method_overrides(method, replace(budget, steps=budget.stress.steps, curve_every=0), seed, task)
    return path, [*overrides, f"grpo.learning_rate={budget.stress.learning_rate!r}"]


@dataclass
class DemoRun:
    """One training run of the demo: a method's row (or its stress row) for one seed."""

    method: str
    seed: int
    stress: bool
    config_file: Path
    overrides: list[str]
    run_dir: Path
    eval_dir: Path
    result: dict[str, Any] | None = None  # its table row, once trained and evaluated

    @property
    def title(self) -> str:
        return f"{'stress, ' if self.stress else ''}{label(self.method)}"

    def config(self):
        from coreward.grpo.config import TrainConfig
        from coreward.runtime.config import load_config

        return load_config(TrainConfig, self.config_file, self.overrides)


def plan_runs(methods: list[str], budget: Budget, seed: int, output_dir: Path, task: DemoTask = TOY) -> list[DemoRun]:
    """The seed's runs in table order: every method, then the stress rows."""
    runs = [DemoRun(m, seed, False, *method_overrides(m, budget, seed, task), output_dir / m, output_dir / "eval" / m)
            for m in methods]
    def asked(method: str) -> bool:  # a stress-only setting runs when its method does
        return (STRESS_SETTINGS[method][0] if method in STRESS_SETTINGS else method) in methods

    stressed = [m for m in budget.stress.methods if asked(m)] if budget.stress else []
    runs += [DemoRun(m, seed, True, *stress_overrides(m, budget, seed, task), output_dir / "stress" / m,
                     output_dir / "eval" / f"stress-{m}") for m in stressed]
    return runs


def heldout_avg(model: Path | str, heldout: dict, n: int, seed: int, output_dir: Path,
                generation: dict[str, int] | None = None) -> float:
    """avg@n of `model` on the held-out problems (`heldout`: one benchmark's records by name), sampled as the demo
    does (temperature 0.7, top-p 0.95; `generation`: the task's length cap and batch size)."""
    from coreward.evaluation import evaluate

    # its progress (problems as they finish, the rate, the time left) goes to stderr: the job's log when forked
    result = evaluate(str(model), benchmarks=heldout, n=n, temperature=0.7, top_p=0.95, seed=seed,
                      output_dir=output_dir, show_progress=True, **(generation or {}))
    return result[next(iter(heldout))].avg


def demo_output_dir(output_dir: str | Path | None, overwrite: bool) -> Path:
    """Where a demo writes: the given directory (refused when it holds earlier results, unless `overwrite`),
    or by default runs/demo, and runs/demo-<time> once runs/demo holds a demo, so no result is ever lost."""
    if output_dir is None:
        default = Path("runs/demo")
        return default if overwrite or not default.exists() else Path(f"runs/demo-{time.strftime('%Y%m%d-%H%M%S')}")
    output_dir = Path(output_dir)
    if output_dir.exists() and any(output_dir.iterdir()) and not overwrite:
        raise CorewardError(f"{output_dir} already holds demo results (table.md, runs, reports): pass --overwrite to "
                            "replace them, or pick another --output-dir")
    return output_dir


def write_summary(output_dir: Path, summary: dict[str, Any]) -> None:
    """results.json (every number, every seed) and table.md (what the command prints)."""
    (output_dir / "results.json").write_text(json.dumps(summary, indent=2))
    (output_dir / "table.md").write_text(summary["table"] + "\n")


def report_paths(output_dir: Path, summary: dict[str, Any]) -> list[Path]:
    """Every report a demo wrote: the table, the main report and, with stress runs, the stress report."""
    seeds = summary.get("seeds") or []
    runs = [output_dir / f"seed-{s}" for s in seeds] if len(seeds) > 1 else [output_dir]
    paths = [output_dir / "table.md"]
    for run in runs:
        paths.append(run / "report" / "report.md")
        if summary.get("stress_rows"):
            paths.append(run / "stress" / "report" / "report.md")
    return paths


def run_demo(methods: list[str], quick: bool, output_dir: str | Path, seed: int = 0,
             budget: Budget | None = None, jobs: int = 1, task: DemoTask = TOY) -> dict[str, Any]:
    """The demo for one seed, in `output_dir`: the table, results.json and the reports."""
    return run_demo_seeds(methods, quick, output_dir, [seed], budget, jobs, task)


def run_demo_seeds(methods: list[str], quick: bool, output_dir: str | Path, seeds: list[int],
                   budget: Budget | None = None, jobs: int = 1, task: DemoTask = TOY) -> dict[str, Any]:
    """Every method (and stress row) for every seed, then the tables. One seed writes in `output_dir`; several
    write each seed's own demo in `seed-<s>/` and one table of mean ± std over seeds (results.json keeps every
    seed's value). `jobs` > 1 trains that many runs side by side, each a `coreward train` process with one
    torch thread (experiments/jobs.py); the runs are the same as one at a time, in the same directories."""
    from coreward.data.benchmarks import load_benchmark
    from coreward.demo.policy import ensure_demo_policy

    if jobs > 1:  # started before this process's own imports and checks, which its imports overlap
        from coreward.experiments.jobs import warm_forkserver

        warm_forkserver()
    budget = budget or task.budget(quick)
    output_dir, started = Path(output_dir), time.perf_counter()
    seed_dirs = {s: output_dir if len(seeds) == 1 else output_dir / f"seed-{s}" for s in seeds}
    runs = [run for s in seeds for run in plan_runs(methods, budget, s, seed_dirs[s], task)]
    configs = [run.config() for run in runs]  # every config checked before any training
    if task is TOY:
        policy = ensure_demo_policy()
    else:  # a real model: found (converted once from its GGUF) before any run starts
        from coreward.runtime.assets import resolve_model

        policy = resolve_model(task.policy, "policy", key="--model")
    if any(reads_demo_rm(config) for config in configs):
        # build the demo RM now if it isn't cached: built lazily inside a run, its sampling would draw on
        # that run's random stream, and the first demo would differ from every later one
        from coreward.demo.rm import ensure_demo_rm

        ensure_demo_rm()
    heldout = {task.benchmark: load_benchmark(task.benchmark, split="test", limit=budget.eval_problems)}
    generation = task.generation
    baselines = {}

    def baseline_evaluated(seed: int, avg: float) -> None:
        baselines[seed] = avg
        print(f"baseline ({'warm-started demo policy' if task is TOY else task.policy}"
              f"{'' if len(seeds) == 1 else f', seed {seed}'}): "
              f"held-out avg@{budget.eval_n} = {avg:.3f}")

    def evaluated(run: DemoRun, seconds: float, avg: float) -> None:
        run.result = {"method": run.method, "heldout_avg": avg, **final_metrics(run.run_dir),
                      "seconds": round(seconds, 1)}
        if run.stress:
            run.result.update({f"start_{k}": v for k, v in final_metrics(run.run_dir, first=True).items()})
        print(f"{run.title}{'' if len(seeds) == 1 else f' (seed {run.seed})'}: held-out avg@{budget.eval_n} = "
              f"{avg:.3f}" + (f"; train verified accuracy "
              f"{_share(run.result['start_train_verified_accuracy'])} (first 5 steps) -> "
              f"{_share(run.result['train_verified_accuracy'])} (last 5)" if run.stress else ""))

    for run in runs:
        shutil.rmtree(run.run_dir, ignore_errors=True)  # a demo run always starts fresh: same seed, same table
    for s in seeds:
        seed_dirs[s].mkdir(parents=True, exist_ok=True)
    if jobs > 1:
        baseline_jobs = [evaluation_job("baseline", policy, heldout, budget.eval_n, s, seed_dirs[s] / "eval" / "baseline",
                                        {"seed": s}, generation) for s in seeds]
        train_side_by_side(runs, configs, jobs, baseline_jobs, heldout, budget.eval_n, baseline_evaluated, evaluated,
                           generation)
    else:
        for s in seeds:
            baseline_evaluated(s, heldout_avg(policy, heldout, budget.eval_n, s, seed_dirs[s] / "eval" / "baseline",
                                              generation))
        from coreward.grpo.train import run_training

        for run, config in zip(runs, configs):
            steps = budget.stress.steps if run.stress else budget.steps
            print(f"\n== {run.title}: {steps} GRPO steps" + (f" at learning rate {budget.stress.learning_rate:g}"
                  if run.stress else "") + f" ({run.run_dir})")
            began = time.perf_counter()
            run_training(config, output_dir=str(run.run_dir))
            seconds = time.perf_counter() - began
            evaluated(run, seconds, heldout_avg(run.run_dir / "final", heldout, budget.eval_n, run.seed, run.eval_dir,
                                                generation))

    summaries = [seed_summary(s, [r for r in runs if r.seed == s], baselines[s], budget, quick, seed_dirs[s], task)
                 for s in seeds]
    if len(seeds) == 1:
        summaries[0]["seconds"] = round(time.perf_counter() - started, 1)
        write_summary(output_dir, summaries[0])
        return summaries[0]
    rows, stress_rows = combine_seeds(summaries, "rows"), combine_seeds(summaries, "stress_rows")
    table = f"{len(seeds)} seeds ({', '.join(map(str, seeds))}): mean ± std over seeds\n\n" + demo_table(rows, budget, task)
    if stress_rows:
        table += "\n\n" + stress_table(stress_rows, rows[0]["heldout_avg"], budget)
    summary = {"budget": asdict(budget), "seeds": seeds, "quick": quick, "jobs": jobs, "rows": rows,
               "stress_rows": stress_rows, "table": table, "seconds": round(time.perf_counter() - started, 1)}
    write_summary(output_dir, summary)
    return summary


# An evaluation's length in rule steps (the unit of `RewardSource.step_cost`), from their times on one core
# (docs/figures.md). Shorter than any run, so side by side the evaluations wait for the training runs and fill the
# cores the last of them leave idle.
EVAL_COST = 7.0
HELDOUT_FILE = "heldout_avg.json"


def heldout_eval(model: str, heldout: dict, n: int, seed: int, output_dir: Path,
                 generation: dict[str, int] | None = None) -> None:
    """`heldout_avg` as a job of its own (forked, experiments/jobs.py): the value goes to `output_dir`/HELDOUT_FILE
    (JSON keeps a float exactly, so the table is the one `--jobs 1` makes)."""
    avg = heldout_avg(model, heldout, n, seed, output_dir, generation)
    (Path(output_dir) / HELDOUT_FILE).write_text(json.dumps({"heldout_avg": avg}))


def evaluation_job(label: str, model: Path | str, heldout: dict, n: int, seed: int, eval_dir: Path, extra: dict,
                   generation: dict[str, int] | None = None):
    from coreward.evaluation.kept import kept_problems
    from coreward.experiments.jobs import Job

    (eval_dir / HELDOUT_FILE).unlink(missing_ok=True)  # an earlier demo's, with --overwrite
    problems = sum(len(records) for records in heldout.values())
    log = eval_dir.parent / f"{eval_dir.name}.log"
    return Job(f"evaluation of {label}", ["heldout_eval", str(model)], eval_dir, log,
               0, cost=EVAL_COST, extra=extra, target=heldout_eval,
               args=(str(model), heldout, n, seed, eval_dir, generation),
               # a real model's evaluation takes minutes: the demo's progress line repeats the last one it logged
               # (problems as they finish, the rate, the time left), or counts its finished batches before one
               progress=lambda: last_progress(log) or f"{kept_problems(eval_dir)}/{problems} problems")


def last_progress(log: Path) -> str | None:
    """What an evaluation's last progress line in `log` says (`generate: ...`, evaluation/backends.py), or None."""
    try:
        with open(log, "rb") as file:
            file.seek(0, 2)
            file.seek(max(0, file.tell() - 4096))
            tail = file.read().decode("utf-8", "replace")
    except OSError:
        return None
    lines = [line for line in tail.replace("\r", "\n").splitlines() if line.startswith("generate: ")]
    return lines[-1].removeprefix("generate: ") if lines else None


def train_side_by_side(runs: list[DemoRun], configs: list, jobs: int, baseline_jobs: list, heldout: dict, n: int,
                       baseline_evaluated, evaluated, generation: dict[str, int] | None = None) -> None:
    """Every run as a `coreward train` process, `jobs` at a time, the longest first, and every evaluation (the
    baselines', each run's once it has finished) as a forked job of its own, after the training runs: the evaluations
    fill the cores the last runs leave idle. A failed run or evaluation fails the demo, naming its log."""
    from coreward.experiments.jobs import Job, run_jobs, side_by_side_settings, step_cost, train_command
    from coreward.grpo.train import final_complete

    pool = [Job(f"{run.title} seed {run.seed}",
                train_command(run.config_file, run.run_dir, [*run.overrides, *side_by_side_settings(jobs)]),
                run.run_dir, run.run_dir.parent / f"{run.run_dir.name}.log", config.grpo["max_steps"],
                cost=config.grpo["max_steps"] * step_cost([spec.name for spec in config.rewards]), extra={"run": run})
            for run, config in zip(runs, configs)]
    evaluations = list(baseline_jobs)

    def finished(job: Job) -> list[Job]:
        if job.target is None:  # a training run: its evaluation
            run = job.extra["run"]
            evaluations.append(evaluation_job(run.title, run.run_dir / "final", heldout, n, run.seed, run.eval_dir,
                                              {"run": run, "train_seconds": job.seconds}, generation))
            return evaluations[-1:]
        avg = json.loads((job.run_dir / HELDOUT_FILE).read_text())["heldout_avg"]
        if "run" in job.extra:
            evaluated(job.extra["run"], job.extra["train_seconds"], avg)
        else:
            baseline_evaluated(job.extra["seed"], avg)
        return []

    def succeeded(job: Job) -> bool:
        return (job.run_dir / HELDOUT_FILE).is_file() if job.target else final_complete(job.run_dir)

    print(f"demo: {len(pool)} runs, {jobs} side by side (one torch thread each), the longest first, then their "
          "evaluations; each run's log is beside its directory")
    run_jobs([*pool, *baseline_jobs], jobs, prefix="demo", succeeded=succeeded, on_finish=finished)
    failed = [job for job in [*pool, *evaluations] if job.status != "done"]
    if failed:
        raise CorewardError(f"{len(failed)} demo job(s) failed: " + "; ".join(f"{j.label} (see {j.log})" for j in failed))


def seed_summary(seed: int, runs: list[DemoRun], baseline: float, budget: Budget, quick: bool,
                 output_dir: Path, task: DemoTask = TOY) -> dict[str, Any]:
    """One seed's rows, table, results.json and reports (the main runs' and the stress runs')."""
    from coreward.evaluation.report import make_report

    for run in runs:  # each arm against the baseline on the same problems
        run.result["heldout_delta_ci"] = paired_interval(run.eval_dir, output_dir / "eval" / "baseline")
    rows = [{"method": "baseline", "heldout_avg": baseline, "train_reward": None, "train_verified_accuracy": None,
             "seconds": None}] + [run.result for run in runs if not run.stress]
    stress_rows = [run.result for run in runs if run.stress]
    table = demo_table(rows, budget, task)
    if stress_rows:
        table += "\n\n" + stress_table(stress_rows, baseline, budget)
    summary = {"budget": asdict(budget), "seed": seed, "quick": quick, "rows": rows, "stress_rows": stress_rows,
               "table": table, "seconds": round(sum(r["seconds"] for r in rows[1:] + stress_rows), 1)}
    write_summary(output_dir, summary)
    for kind, directory in ((False, output_dir / "report"), (True, output_dir / "stress" / "report")):
        run_dirs = [run.run_dir for run in runs if run.stress == kind]
        if run_dirs:  # the report says what each run's periodic evaluation measured; this, what table.md did
            steps = budget.stress.steps if kind else budget.steps
            make_report(run_dirs, directory, note=f"The demo's table.md measures after training: avg@{budget.eval_n} "
                        f"on {budget.eval_problems} held-out problems of {task.benchmark} (test split); its train "
                        f"columns average {steps_span(max(1, steps - 4), steps)}, this report's are the last step's.")
    return summary


CONFIDENCE = 0.95  # of the demo table's intervals


def problem_accuracies(eval_dir: Path) -> dict[str, float]:
    """Each problem's share of correct samples in an evaluation's samples.parquet (empty where there is none)."""
    import pandas as pd

    path = Path(eval_dir) / "samples.parquet"
    if not path.is_file():
        return {}
    samples = pd.read_parquet(path, columns=["benchmark", "problem_id", "correct"])
    samples["correct"] = samples["correct"].fillna(False).astype(float)
    shares = samples.groupby(["benchmark", "problem_id"])["correct"].mean()
    return {f"{b}/{p}": float(v) for (b, p), v in shares.items()}


def paired_interval(arm_dir: Path, baseline_dir: Path) -> list[float] | None:
    """The CONFIDENCE t interval of the arm's held-out avg minus the baseline's, paired over the problems both
    evaluated (evaluation/stats.py): what a difference on this few problems can and cannot say. None under 2."""
    from coreward.evaluation.stats import paired

    arm, base = problem_accuracies(arm_dir), problem_accuracies(baseline_dir)
    common = sorted(set(arm) & set(base))
    if len(common) < 2:
        return None
    comparison = paired([arm[p] for p in common], [base[p] for p in common], CONFIDENCE)
    return [comparison.low, comparison.high]


def delta_cell(row: dict[str, Any], baseline: Any) -> str:
    """Δ vs the baseline in points, with its paired interval where one seed's run has one."""
    from coreward.evaluation.tables import spread_cell

    cell = spread_cell(delta(row["heldout_avg"], baseline), 100, sign=True)
    interval = row.get("heldout_delta_ci")
    if isinstance(row["heldout_avg"], list) or not interval or None in interval:
        return cell
    return f"{cell} [{100 * interval[0]:+.1f}, {100 * interval[1]:+.1f}]"


def steps_span(first: int, last: int) -> str:
    return f"step {first}" if first == last else f"steps {first}-{last}"


def short_of_full(budget: Budget, task: DemoTask) -> str:
    """The table's first line where its setting is smaller than the task's full one (--quick): a pipeline check."""
    full = task.full
    if (budget.steps, budget.eval_problems, budget.eval_n) >= (full.steps, full.eval_problems, full.eval_n):
        return ""
    return (f"**Pipeline check, not a result**: {budget.steps} steps, {budget.eval_problems} held-out problems x "
            f"{budget.eval_n} samples (the full setting: {full.steps} steps, {full.eval_problems} x {full.eval_n}). "
            f"Brackets: the {CONFIDENCE:.0%} t interval of Δ, paired over the problems.\n\n")


def _share(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def stress_table(rows: list[dict[str, Any]], baseline: Any, budget: Budget) -> str:
    """The stress runs: reward and verified accuracy of the rollouts at the start and the end, and held out.

    A value is one run's, or a list of per-seed values (shown as mean ± std over seeds)."""
    from coreward.evaluation.tables import spread_cell

    def pair(row: dict[str, Any], key: str, percent: bool) -> str:
        scale, digits = (100, 1) if percent else (1, 3)
        start, end = spread_cell(row[f"start_{key}"], scale, digits), spread_cell(row[key], scale, digits)
        return "–" if "–" in (start, end) else f"{start} → {end}"

    stress = budget.stress
    first, last = steps_span(1, min(5, stress.steps)), steps_span(max(1, stress.steps - 4), stress.steps)
    lines = [
        (f"Stress: learning rate {stress.learning_rate:g}, {stress.steps} steps (train columns: mean of {first} → "
         f"mean of {last})"),
        "",
        f"| Method | Demo held-out avg@{budget.eval_n} | Δ vs baseline [{CONFIDENCE:.0%} interval] | Train reward | "
        "Train verified acc. |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(f"| {label(row['method'])} | {spread_cell(row['heldout_avg'], 100)} | "
                     f"{delta_cell(row, baseline)} | "
                     f"{pair(row, 'train_reward', False)} | {pair(row, 'train_verified_accuracy', True)} |")
    return "\n".join(lines)


def delta(value: Any, baseline: Any) -> Any:
    """value − baseline, per seed when both are per-seed lists (paired: the same seed's baseline)."""
    if isinstance(value, list):
        return [v - b for v, b in zip(value, baseline)]
    return value - baseline


def demo_table(rows: list[dict[str, Any]], budget: Budget, task: DemoTask = TOY) -> str:
    """Markdown in the Cooper paper's layout: one row per method, held-out accuracy first (per-seed lists: mean ± std)."""
    from coreward.evaluation.tables import spread_cell

    baseline = rows[0]["heldout_avg"]
    span = steps_span(max(1, budget.steps - 4), budget.steps)  # final_metrics: the last 5 steps' mean
    lines = [
        (f"| Method | {task.benchmark.capitalize()} held-out avg@{budget.eval_n} | Δ vs baseline "
         f"[{CONFIDENCE:.0%} interval] | Train reward, mean of {span} | Train verified acc., mean of {span} |"),
        "|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        change = "" if row["method"] == "baseline" else delta_cell(row, baseline)
        lines.append(f"| {label(row['method'])} | {spread_cell(row['heldout_avg'], 100)} | {change} | "
                     f"{spread_cell(row['train_reward'], 1, 3)} | {spread_cell(row['train_verified_accuracy'], 100)} |")
    return short_of_full(budget, task) + "\n".join(lines)


def combine_seeds(summaries: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """Rows of several seeds' summaries merged: each number becomes the list of its per-seed values."""
    merged = []
    for rows in zip(*(s[key] for s in summaries)):
        assert len({r["method"] for r in rows}) == 1, "every seed runs the same methods in the same order"
        merged.append({k: rows[0][k] if k == "method" else [r[k] for r in rows] for k in rows[0]})
    return merged
