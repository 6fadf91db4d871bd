"""Evaluation as the Cooper and Co-rewarding papers report it: n samples per problem, mean accuracy.

For problem i with c_i of its n samples verified correct:

    avg@n  = mean_i c_i / n                                   (the papers' headline number)
    pass@k = mean_i [1 - C(n - c_i, k) / C(n, k)]             (unbiased estimator, Chen et al. 2021)
    maj@n  = mean_i [the most common extracted answer is correct]

On data without reference answers (a benchmark whose rows have no answer) nothing can be verified, so those
three are absent and the label-free figures are reported instead, the majority vote's own statistics:

    agree@n  = mean_i (size of problem i's largest answer class) / n   (self-consistency)
    answered = share of samples with an extracted final answer

and every sample carries its problem's majority answer (`majority_answer` in samples.parquet), the
pseudo-label the label-free methods train on. Both figures are also reported for labelled data.

With a judge (`judge`: an LLM, the `judge` reward's verifier, rm/judge.py) a sample's verdict is the judge's
(`judge_mode: judge`), or the rule verifier's where it accepts and the judge's where it does not (`hybrid`); the
rule's own verdict is kept beside it (`rule_correct`) and results.json says how often they disagree.

pass@1 equals avg@n; it is reported anyway because it is the name most readers look for. For maj@n the
answers are grouped by verified equivalence ("0.5" and "\\frac{1}{2}" vote together), samples without an
extracted answer do not vote, and a tie goes to the answer seen first.

The pipeline is three plain steps so that evaluation during training (grpo/periodic_eval.py) can run them on
shards of a held-out set: `sample` (generation), `score` (verification, one sample at a time), `summarize`
(per-problem metrics). `evaluate(model, EvalSettings(...))` runs all three on a saved or loaded model.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from coreward.data.prompts import INSTRUCTION, PLAIN_CHAT_TEMPLATE, build_messages, plain_prompt, render_prompt
from coreward.data.records import Record
from coreward.data.sources import load_eval_sets, refuse_mixed_references
from coreward.evaluation.backends import Backend, HFBackend, VLLMBackend, load_model
from coreward.runtime.assets import resolve_model
from coreward.runtime.devices import load_tokenizer
from coreward.runtime.errors import CorewardError


PAPER_BENCHMARKS = ("gsm8k", "svamp", "math500", "olympiadbench", "mathodyssey")
# The demo's held-out set: the whole demo test split, small enough for n=8 in minutes on a CPU
# (benchmarks/speed/eval_throughput.py measures it: docs/figures.md).
DEMO_HELDOUT_PROBLEMS = 500


# --------------------------------------------------------------------------- metrics


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct: 1 - C(n-c, k) / C(n, k), computed stably."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / m for m in range(n - c + 1, n + 1))


def _majority_index(classes: Sequence[int | None]) -> int | None:
    """The first sample of the largest answer class (ties: the class seen first); None when no sample answered."""
    votes = Counter(c for c in classes if c is not None)
    if not votes:
        return None
    top = max(votes.values())
    return next(j for j, c in enumerate(classes) if c is not None and votes[c] == top)


def majority_correct(classes: Sequence[int | None], correct: Sequence[bool]) -> bool:
    """Whether the majority answer is correct; `classes[j]` is sample j's answer class (None: no answer)."""
    winner = _majority_index(classes)  # first seen wins ties
    return winner is not None and bool(correct[winner])


# --------------------------------------------------------------------------- data


@dataclass
class Problem:
    benchmark: str
    index: int  # position in its benchmark: groups samples even when ids repeat
    record: Record
    prompt: str


@dataclass
class Sample:
    """One completion, as written to samples.parquet."""

    benchmark: str
    problem_index: int
    problem_id: str
    sample_index: int
    prompt: str
    completion: str
    gold: str  # "" when the benchmark has no reference answers
    completion_tokens: int
    truncated: bool
    extracted: str | None = None
    correct: bool | None = False  # None: nothing to verify against (no reference answer)
    timed_out: bool = False
    majority_answer: str | None = None  # the problem's most common answer class (first-seen member)
    rule_correct: bool | None = None  # with a judge: the rule verifier's verdict (`correct` is then the judge's)


@dataclass
class BenchmarkResult:
    name: str
    num_problems: int
    n: int
    avg: float | None  # None (with pass_at empty and maj None): the benchmark has no reference answers
    pass_at: dict[int, float]
    maj: float | None
    agree: float
    answered: float
    mean_completion_tokens: float
    truncated_fraction: float
    verifier_timeouts: int

    @property
    def labelled(self) -> bool:
        return self.avg is not None

    def metrics(self) -> dict[str, float]:
        """The headline numbers under their usual names: avg@n, pass@k, maj@n (fractions in [0, 1]); without
        reference answers, the label-free agree@n and answered."""
        if not self.labelled:
            return {f"agree@{self.n}": self.agree, "answered": self.answered}
        values = {f"avg@{self.n}": self.avg}
        values.update({f"pass@{k}": v for k, v in self.pass_at.items()})
        values[f"maj@{self.n}"] = self.maj
        return values

    def to_dict(self) -> dict[str, Any]:
        return {
            "num_problems": self.num_problems,
            "num_samples": self.num_problems * self.n,
            "labelled": self.labelled,
            **self.metrics(),
            f"agree@{self.n}": self.agree,
            "answered": self.answered,
            "mean_completion_tokens": self.mean_completion_tokens,
            "truncated_fraction": self.truncated_fraction,
            "verifier_timeouts": self.verifier_timeouts,
        }


@dataclass
class EvalResults:
    model: str
    settings: dict[str, Any]
    benchmarks: dict[str, BenchmarkResult]
    samples: list[Sample] = field(repr=False)
    timing: dict[str, Any] = field(default_factory=dict)
    model_card: Path | None = None  # a run's final/README.md this evaluation was added to (grpo.publish)
    judge: dict[str, Any] | None = None  # with a judge: its calls, failures, agreement with the rule, overturned

    def __getitem__(self, name: str) -> BenchmarkResult:
        return self.benchmarks[name]

    def average(self) -> dict[str, float]:
        """Unweighted mean over benchmarks of each metric, as the papers' Average column (a metric over the
        benchmarks that have it: accuracies over the labelled ones)."""
        keys = dict.fromkeys(key for r in self.benchmarks.values() for key in r.metrics())
        averages = {}
        for key in keys:
            values = [r.metrics()[key] for r in self.benchmarks.values() if key in r.metrics()]
            averages[key] = sum(values) / len(values)
        return averages

    def table(self, label: str | None = None) -> str:
        from coreward.evaluation.tables import results_table

        return results_table(self, label)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "settings": self.settings,
            **self.timing,
            **({"judge": self.judge} if self.judge is not None else {}),
            "benchmarks": {name: result.to_dict() for name, result in self.benchmarks.items()},
            "average": self.average(),
        }

    def save(self, output_dir: str | Path) -> Path:
        """Write results.json and samples.parquet (every completion with its verdict) into `output_dir`."""
        import pandas as pd

        output_dir = Path(output_dir)
        try:
            output_dir.mkdir(parents=True, exist_ok=True)
            (output_dir / "results.json").write_text(json.dumps(self.to_dict(), indent=2) + "\n")
            pd.DataFrame([asdict(s) for s in self.samples]).to_parquet(output_dir / "samples.parquet", index=False)
        except OSError as err:
            raise CorewardError(f"cannot write evaluation results to {output_dir}: {err}") from None
        return output_dir


# --------------------------------------------------------------------------- the three steps


def sample(
    backend: Backend, problems: list[Problem], n: int, temperature: float, top_p: float, max_new_tokens: int, seed: int,
    kept=None,
) -> list[Sample]:
    """n completions per problem from `backend`, unscored. `kept` (evaluation/kept.py `KeptGenerations`): the
    completions a stopped evaluation kept are not sampled again, and each finished batch is kept."""
    import inspect

    keeps = kept is not None and "on_batch" in inspect.signature(backend.generate).parameters  # a backend of ours
    more = {"kept": kept.generations, "on_batch": kept.add} if keeps else {}
    generations = backend.generate([p.prompt for p in problems], n, temperature, top_p, max_new_tokens, seed, **more)
    return [
        Sample(
            benchmark=p.benchmark,
            problem_index=p.index,
            problem_id=p.record.id,
            sample_index=j,
            prompt=p.prompt,
            completion=g.text,
            gold=p.record.answer,
            completion_tokens=g.num_tokens,
            truncated=g.truncated,
        )
        for p, group in zip(problems, generations)
        for j, g in enumerate(group)
    ]


def score(samples: list[Sample], verifier) -> None:
    """Fill each sample's extracted answer and verdict (a verifier timeout counts as incorrect). A sample with
    no reference answer gets its extracted answer only: its verdict stays None."""
    verdicts = verifier.verify_completions([s.completion for s in samples], [s.gold for s in samples])
    for s, v in zip(samples, verdicts):
        s.extracted, s.timed_out = v.extracted, bool(v.timed_out)
        s.correct = bool(v.correct) if s.gold else None


def judge_samples(samples: list[Sample], questions: dict[tuple[str, int], str], judge, mode: str = "hybrid"
                  ) -> dict[str, Any]:
    """Scored samples re-decided by an LLM judge (`rm.judge.Judge`; `questions` by (benchmark, problem index)):
    asked about every labelled sample (`judge`) or only those the rule rejected (`hybrid`), each distinct prompt
    once; a failed or unreadable verdict is incorrect. Returns the judge's statistics for results.json."""
    labelled = [s for s in samples if s.gold]
    asked = [s for s in labelled if mode == "judge" or not s.correct]
    replies = judge.judge([questions[s.benchmark, s.problem_index] for s in asked], [s.gold for s in asked],
                          [s.completion for s in asked], [s.extracted for s in asked])
    for s in labelled:
        s.rule_correct = s.correct
    for s, verdict in zip(asked, replies.verdicts):
        s.correct = verdict == 1
    given = [(s.rule_correct, v) for s, v in zip(asked, replies.verdicts) if v is not None]
    return {"mode": mode, "calls": replies.calls, "judged": len(asked), "failures": replies.failed + replies.unreadable,
            "agreement": sum(r == bool(v) for r, v in given) / len(given) if given else None,
            "overturned": sum(not r and v == 1 for r, v in given)}


def summarize(samples: list[Sample], verifier) -> dict[str, BenchmarkResult]:
    """Per-benchmark metrics from scored samples (benchmarks in order of first appearance)."""
    by_benchmark: dict[str, dict[int, list[Sample]]] = {}
    for s in samples:
        by_benchmark.setdefault(s.benchmark, {}).setdefault(s.problem_index, []).append(s)
    return {name: _benchmark_result(name, list(groups.values()), verifier) for name, groups in by_benchmark.items()}


def _benchmark_result(name: str, groups: list[list[Sample]], verifier) -> BenchmarkResult:
    n = len(groups[0])
    if any(len(g) != n for g in groups):
        raise ValueError(f"{name}: every problem needs the same number of samples")
    flat = [s for g in groups for s in g]
    labelled = all(s.correct is not None for s in flat)
    if not labelled and any(s.correct is not None for s in flat):
        raise CorewardError(f"{name}: some problems have reference answers and some do not; give all or none")
    classes = verifier.equivalence_classes_many([[s.extracted for s in group] for group in groups])
    winners = [_majority_index(c) for c in classes]
    for group, winner in zip(groups, winners):
        for s in group:
            s.majority_answer = None if winner is None else group[winner].extracted
    counts = [sum(bool(s.correct) for s in g) for g in groups]
    majority_sizes = [0 if w is None else c.count(c[w]) for c, w in zip(classes, winners)]
    return BenchmarkResult(
        name=name,
        num_problems=len(groups),
        n=n,
        avg=sum(c / n for c in counts) / len(groups) if labelled else None,
        pass_at={k: sum(pass_at_k(n, c, k) for c in counts) / len(groups) for k in sorted({1, n})} if labelled else {},
        maj=sum(w is not None and bool(g[w].correct) for g, w in zip(groups, winners)) / len(groups) if labelled
        else None,
        agree=sum(size / n for size in majority_sizes) / len(groups),
        answered=sum(s.extracted is not None for s in flat) / len(flat),
        mean_completion_tokens=sum(s.completion_tokens for s in flat) / len(flat),
        truncated_fraction=sum(s.truncated for s in flat) / len(flat),
        verifier_timeouts=sum(s.timed_out for s in flat),
    )



# --------------------------------------------------------------------------- prompts and defaults


@dataclass(frozen=True)
class ModelDefaults:
    """Settings that depend on what kind of model is evaluated, used wherever the caller gives none."""

    prompt_format: str
    instruction: str | None
    max_new_tokens: int
    batch_size: int
    cpu_threads: int | None  # None: torch's default


# The demo policy reads bare questions (no instruction: its vocabulary has no words for it) and writes
# ~30-token solutions; a tiny model on CPU runs fastest in large batches on one thread (backends.torch_threads).
DEMO_DEFAULTS = ModelDefaults("plain", None, 64, 512, 1)
CHAT_DEFAULTS = ModelDefaults("chat", INSTRUCTION, 2048, 64, None)
# The papers' 2,048 tokens in batches of 64 take hours on a CPU: a small chat model's finished answers fit in 512
# tokens, and a batch of 8 decoded the most tokens per second of the sizes tried (a finished sequence still costs its
# batch's every step). A chat model on a CPU gets these unless the user sets them (and is told
# so: `cpu_note`).
CPU_CHAT_DEFAULTS = replace(CHAT_DEFAULTS, max_new_tokens=512, batch_size=8)


def reads_plain_text(tokenizer) -> bool:
    """A model whose chat template only concatenates (the demo policy): it gets plain prompts, small-model defaults."""
    return getattr(tokenizer, "chat_template", None) == PLAIN_CHAT_TEMPLATE


def model_defaults(tokenizer, device: str | None = None) -> ModelDefaults:
    """The defaults for the model's kind and, for a chat model, the device it runs on ("cpu": `CPU_CHAT_DEFAULTS`)."""
    if reads_plain_text(tokenizer):
        return DEMO_DEFAULTS
    return CPU_CHAT_DEFAULTS if device == "cpu" else CHAT_DEFAULTS


def cpu_note(settings: EvalSettings, defaults: ModelDefaults) -> str | None:
    """The line that says which CPU defaults an evaluation took and how to choose otherwise (None: it took none)."""
    if defaults is not CPU_CHAT_DEFAULTS or (settings.max_new_tokens and settings.batch_size):
        return None
    tokens = (f" at most {defaults.max_new_tokens} new tokens a completion (the papers' {CHAT_DEFAULTS.max_new_tokens}; "
              "--max-new-tokens sets it)" if settings.max_new_tokens is None else "")
    batches = (f" in batches of {defaults.batch_size} (on a GPU {CHAT_DEFAULTS.batch_size}; --batch-size sets it)"
               if settings.batch_size is None else "")
    return f"on a CPU, to finish in reasonable time: generating{tokens}{batches}"


def build_prompt(
    question: str, tokenizer, prompt_format: str, instruction: str | None, system: str | None = None
) -> str:
    """The prompt text as training renders it for the same settings (chat messages through the tokenizer's chat
    template, or plain text)."""
    if prompt_format == "chat":
        return render_prompt(tokenizer, build_messages(question, instruction=instruction, system=system))
    if prompt_format == "plain":
        return plain_prompt(question, instruction=instruction)
    raise CorewardError(f"unknown prompt format {prompt_format!r}; use chat or plain")


def build_problems(
    benchmarks: dict[str, list[Record]],
    tokenizer,
    prompt_format: str,
    instruction: str | None,
    system: str | None = None,
) -> list[Problem]:
    return [
        Problem(name, i, record, render_prompt(tokenizer, record.messages) if record.messages is not None
                else build_prompt(record.question, tokenizer, prompt_format, instruction, system))
        for name, records in benchmarks.items()
        for i, record in enumerate(records)
    ]


# --------------------------------------------------------------------------- the settings and the entry point


@dataclass
class EvalSettings:
    """What one evaluation samples and how: `coreward eval`'s options (`--top-p` sets `top_p`) and the keywords of
    `coreward.evaluate`. A setting left None takes the model kind's default once its tokenizer is known
    (`DEMO_DEFAULTS` for the demo policy, else `CHAT_DEFAULTS`, on a CPU `CPU_CHAT_DEFAULTS`). Bad choices fail here,
    before any model loads."""

    benchmarks: list[str] | dict[str, list[Record]] | None = field(default=None, metadata={"help": (
        "registered benchmark names, .jsonl/.json/.parquet/.csv files (verl too), directories or hub dataset ids "
        "(owner/name[:subset]), also as one comma-separated string; from Python also ready records by name "
        "(`{name: [Record, ...]}`) (default: `demo`, its own task, for the demo policy; else the papers' "
        f"{', '.join(PAPER_BENCHMARKS)})")})
    n: int = field(default=8, metadata={"help": "samples per problem"})
    temperature: float = field(default=0.7, metadata={"help": "sampling temperature; 0 = greedy"})
    top_p: float = field(default=0.95, metadata={"help": "nucleus sampling's top-p"})
    max_new_tokens: int | None = field(default=None, metadata={
        "help": "completion length cap (default: 64 for the demo policy, else 2048, or 512 on a CPU)"})
    seed: int = field(default=0, metadata={"help": "same seed, same samples (with the same coreward, torch and "
                                                  "kind of machine: a sampler's change redraws them)"})
    prompt_format: str | None = field(default=None, metadata={
        "help": "chat or plain (default: plain for the demo tokenizer, else chat)"})
    instruction: str | None = field(default=None, metadata={
        "help": "text appended to each question, '' for none (default: none for the demo, else the papers' "
                "\\boxed{} instruction)"})
    system: str | None = field(default=None, metadata={
        "help": "a system message before each question (chat format; default: none)"})
    batch_size: int | None = field(default=None, metadata={
        "help": "sequences per generate call (default: 512 for the demo policy, else 64, or 8 on a CPU)"})
    limit: int | None = field(default=None, metadata={"help": "first K problems of each benchmark (default: all)"})
    split: str = field(default="test", metadata={"help": "split of each benchmark to read"})
    data_dir: str | Path | None = field(default=None, metadata={
        "help": "where registered benchmarks are read (default: $COREWARD_DATA, else shared/data beside the "
                "repository)"})
    columns: dict[str, str] | None = field(default=None, metadata={
        "help": "the data's column names, e.g. {question: problem, answer: solution} (files, directories and hub "
                "datasets)"})
    backend: str = field(default="hf", metadata={"help": "hf (transformers generate) or vllm"})
    device: str = field(default="auto", metadata={
        "help": "auto, cpu, cuda, cuda:1, ... (where a model given by path is loaded)"})
    dtype: str = field(default="auto", metadata={
        "help": "auto (hf: bf16 on GPU, fp32 on CPU; vllm: its own choice, recorded in results.json), float32, "
                "bfloat16, float16"})
    vllm_memory: float | None = field(default=None, metadata={
        "help": "vllm: share of GPU memory it reserves, its gpu_memory_utilization (on CPU: of the machine's "
                "memory; default vLLM's 0.92)"})
    output_dir: str | Path | None = field(default=None, metadata={
        "help": "directory for results.json and samples.parquet (default: none, nothing is written)"})
    show_progress: bool = field(default=False, metadata={"help": "show a progress bar while generating"})
    judge: str | None = field(default=None, metadata={
        "help": "an LLM judge decides correctness with the rule verifier (the `judge` reward's verifier): an "
                "endpoint URL#model, a model directory or hub id (default: none, the rule verifier alone)"})
    judge_format: str = field(default="plain", metadata={
        "help": "the judge's prompt and verdict format: plain, xverify, compassverifier, compassverifier_cot, "
                "general_verifier"})
    judge_template: str | None = field(default=None, metadata={
        "help": "a file holding the judge format's prompt: needed for xverify and general_verifier, whose authors' "
                "licences keep their prompts out of coreward (their repository's file, or a text file of it)"})
    judge_mode: str = field(default="hybrid", metadata={
        "help": "hybrid (the judge decides only where the rule verifier rejects) or judge (it decides every sample)"})

    def __post_init__(self) -> None:
        if isinstance(self.benchmarks, str):
            self.benchmarks = parse_benchmarks(self.benchmarks)
        if self.n < 1:
            raise CorewardError(f"n must be at least 1, got {self.n}")
        if self.prompt_format not in (None, "chat", "plain"):
            raise CorewardError(f"unknown prompt format {self.prompt_format!r}; use chat or plain")
        if self.backend not in ("hf", "vllm"):
            raise CorewardError(f"unknown backend {self.backend!r}; use hf or vllm")
        if self.judge_mode not in ("hybrid", "judge"):
            raise CorewardError(f"unknown judge mode {self.judge_mode!r}; use hybrid or judge")

    def recorded(self, defaults: ModelDefaults) -> dict[str, Any]:
        """The settings as results.json records them: each None replaced by the model kind's default."""
        return {
            "n": self.n,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_new_tokens": self.max_new_tokens or defaults.max_new_tokens,
            "seed": self.seed,
            "prompt_format": self.prompt_format or defaults.prompt_format,
            "instruction": defaults.instruction if self.instruction is None else (self.instruction or None),
            "system": self.system,
            "batch_size": self.batch_size or defaults.batch_size,
            "backend": self.backend,
            "split": self.split,
            "limit": self.limit,
            **({"judge": self.judge, "judge_format": self.judge_format, "judge_mode": self.judge_mode,
                "judge_template": self.judge_template} if self.judge else {}),
        }


def parse_benchmarks(text: str) -> list[str]:
    """`gsm8k,svamp` as a list of names (repeats dropped)."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise CorewardError("--benchmarks is empty; give comma-separated names, e.g. gsm8k,svamp")
    return list(dict.fromkeys(names))


def evaluate(
    model: Any, settings: EvalSettings | None = None, *, tokenizer: Any = None, verifier: Any = None, **keywords: Any
) -> EvalResults:
    """Sample n completions per problem, verify them, and compute avg@n, pass@{1,n} and maj@n per benchmark.

    `model` is a path, a hub id, `"demo"`, or a loaded model (then `tokenizer` is required, and the settings'
    `device` and `dtype`, which apply to loading, are ignored). `settings` says what to evaluate and how; the
    keywords are its fields, so `evaluate(m, benchmarks=["gsm8k"], n=8)` is
    `evaluate(m, EvalSettings(benchmarks=["gsm8k"], n=8))` (given both, the keywords replace those fields).
    `verifier` is a `coreward.Verifier` to reuse; without it one is opened for this call. With
    `output_dir`, results.json and samples.parquet are written there.
    """
    settings = EvalSettings(**keywords) if settings is None else replace(settings, **keywords)
    started, start = datetime.now(UTC).isoformat(timespec="seconds"), time.perf_counter()
    records, tokenizer = _records(model, tokenizer, settings)
    judge = _open_judge(settings)  # a judge endpoint that is down fails here, before any model loads
    try:
        return _evaluate(model, settings, tokenizer, verifier, records, judge, started, start)
    finally:
        if judge is not None:
            judge.close()


def _open_judge(settings: EvalSettings):
    if not settings.judge:
        return None
    from coreward.rm.judge import Judge

    judge = Judge(settings.judge, settings.judge_format, template=settings.judge_template, key="--judge",
                  template_key="--judge-template")
    judge.check()
    return judge


def _evaluate(model, settings: EvalSettings, tokenizer, verifier, records, judge, started: str, start: float
              ) -> EvalResults:
    label, loaded, tokenizer = _load(model, tokenizer, settings)
    placement = _placement(loaded)
    defaults = model_defaults(tokenizer, placement["device"])
    recorded = {**settings.recorded(defaults), **placement}
    recorded["data"] = data_sources(records, settings.split)
    if not any(d["split"] for d in recorded["data"].values()):  # files only: no split was read
        recorded["split"] = None
    if note := cpu_note(settings, defaults):
        print(note, file=sys.stderr, flush=True)
    engine = loaded
    if not isinstance(loaded, VLLMBackend):
        threads = defaults.cpu_threads if recorded["device"] == "cpu" else None
        engine = HFBackend(loaded, tokenizer, batch_size=recorded["batch_size"], show_progress=settings.show_progress,
                           num_threads=threads)
    problems = build_problems(records, tokenizer, recorded["prompt_format"], recorded["instruction"], settings.system)

    kept = None
    if settings.output_dir is not None:  # finished batches are kept there; a stopped evaluation goes on from them
        from coreward.evaluation.kept import KeptGenerations, fingerprint

        kept = KeptGenerations(settings.output_dir, fingerprint(label, recorded, [p.prompt for p in problems]),
                               len(problems))
    before = [g for group in kept.generations.values() for g in group] if kept is not None else []  # sampled before a stop
    reused = (len(before), sum(g.num_tokens for g in before))
    generation_start = time.perf_counter()
    try:  # a Ctrl-C while sampling, or scoring what was sampled, keeps every finished batch
        samples = sample(engine, problems, settings.n, settings.temperature, settings.top_p,
                         recorded["max_new_tokens"], settings.seed, kept=kept)
        scoring_start = time.perf_counter()
        questions = {(p.benchmark, p.index): p.record.question for p in problems}
        judged: dict[str, Any] = {}

        def judge_step() -> None:  # between the rule's verdicts and the summary (maj@n, avg@n from the final verdicts)
            if judge is not None:
                judged.update(judge_samples(samples, questions, judge, settings.judge_mode))

        per_benchmark = _score_and_summarize(samples, verifier, judge_step)
    except KeyboardInterrupt:
        if kept is None:
            raise
        from coreward.runtime.interrupt import Interrupted

        raise Interrupted(f"evaluating {label}", kept.stopped_line()) from None
    timing = _timing(started, samples, start, generation_start, scoring_start, time.perf_counter(), reused)
    results = EvalResults(label, recorded, per_benchmark, samples, timing, judge=judged or None)
    if settings.output_dir is not None:
        results.save(settings.output_dir)
        kept.remove()
        if isinstance(model, (str, Path)):  # a run's final/ evaluated into the run: its card's table shows it
            from coreward.evaluation.card import add_evaluation_to_card

            results.model_card = add_evaluation_to_card(model, settings.output_dir)
    return results


def data_sources(records: dict[str, list[Record]], split: str) -> dict[str, dict[str, Any]]:
    """Where each evaluated set came from, for results.json: a registered benchmark and the split read, a file (no
    split), or the split its rows name (a directory, a hub dataset, records given by name)."""
    from coreward.data.benchmarks import list_benchmarks

    sources = {}
    for name, rows in records.items():
        if name in list_benchmarks():
            sources[name] = {"source": f"benchmark {name}", "split": split}
        elif Path(name).is_file():
            sources[name] = {"source": str(Path(name).resolve()), "split": None}
        else:
            splits = sorted({r.split for r in rows if r.split and r.split != "unknown"})
            sources[name] = {"source": name, "split": ", ".join(splits) or None}
    return sources


def resolve_model_path(model: str | Path) -> str:
    """A model directory or hub id (see `coreward.runtime.assets.resolve_model`; `demo` is the demo policy)."""
    return resolve_model(model, "policy", key="--model")


def _records(model, tokenizer, settings: EvalSettings) -> tuple[dict[str, list[Record]], Any]:
    """The records to evaluate by benchmark (a bad name fails before any model loads), and the tokenizer, loaded
    here when the default benchmarks depend on the model's kind."""
    names = settings.benchmarks
    if names is None:  # what fits the model: its own task for a plain-text model (the demo policy)
        if tokenizer is None and isinstance(model, (str, Path)):
            tokenizer = load_tokenizer(resolve_model_path(model), key="--model")
        names = ["demo"] if tokenizer is not None and reads_plain_text(tokenizer) else list(PAPER_BENCHMARKS)
    if not isinstance(names, dict):  # a bad name fails here, before any model loads
        if not names:
            raise CorewardError("no benchmarks given")
        return load_eval_sets(names, settings.split, settings.limit, settings.data_dir, key="--benchmarks",
                              columns=settings.columns, where="{key} {name}"), tokenizer
    records = {name: rows[: settings.limit] for name, rows in names.items()}
    for name, rows in records.items():
        refuse_mixed_references(rows, f"benchmark {name}")
    return records, tokenizer


def _load(model, tokenizer, settings: EvalSettings):
    """(label, loaded model or VLLMBackend, tokenizer) for a path, hub id, "demo", or an already loaded model."""
    if not isinstance(model, (str, Path)):
        if settings.backend != "hf":
            raise CorewardError("a loaded model can only be evaluated with the hf backend")
        if tokenizer is None:
            raise CorewardError("evaluating a loaded model needs its tokenizer")
        return getattr(model, "name_or_path", type(model).__name__), model, tokenizer
    path = resolve_model_path(model)
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(path, key="--model")
    if settings.backend == "vllm":
        memory = {} if settings.vllm_memory is None else {"gpu_memory_utilization": settings.vllm_memory}
        return path, VLLMBackend(path, dtype=settings.dtype, seed=settings.seed, **memory), tokenizer
    return path, load_model(path, device=settings.device, dtype=settings.dtype), tokenizer


def _placement(loaded) -> dict[str, str]:
    """Where the model actually ran, for results.json ("auto" resolved)."""
    if isinstance(loaded, VLLMBackend):
        return {"device": loaded.device, "dtype": loaded.dtype}
    parameter = next(loaded.parameters())
    return {"device": str(parameter.device), "dtype": str(parameter.dtype).removeprefix("torch.")}


def _timing(started: str, samples: list[Sample], start: float, generation: float, scoring: float, end: float,
            reused: tuple[int, int] = (0, 0)):
    """Wall time split into generation and scoring, and sampling throughput, for results.json. `reused`: completions
    and their tokens kept from a stopped evaluation, not sampled in this run's time."""
    generation_s = max(scoring - generation, 1e-9)
    sampled = len(samples) - reused[0]
    sampled_tokens = sum(s.completion_tokens for s in samples) - reused[1]
    return {
        "started_at": started,
        "wall_time_s": round(end - start, 3),
        "generation_time_s": round(generation_s, 3),
        "scoring_time_s": round(end - scoring, 3),
        "completions_per_s": round(sampled / generation_s, 2),
        "tokens_per_s": round(sampled_tokens / generation_s, 1),
        **({"kept_completions": reused[0]} if reused[0] else {}),
    }


def _score_and_summarize(samples: list[Sample], verifier, after_scoring=lambda: None) -> dict[str, BenchmarkResult]:
    """Verify with the given verifier, or with a process pool opened for this evaluation only; `after_scoring` runs
    between the verdicts and the summary."""
    if verifier is not None:
        score(samples, verifier)
        after_scoring()
        return summarize(samples, verifier)
    from coreward.verify import Verifier

    with Verifier() as own:
        score(samples, own)
        after_scoring()
        return summarize(samples, own)
