"""Rephrasing questions for Co-rewarding-I: same math, same answer, new wording and scenario.

An LLM (a local Hugging Face model or an OpenAI-compatible endpoint, see `coreward.llm`) rewrites each
question once, before training. Its output must sit between fixed markers; a row whose output can't be
parsed (no markers, empty, or a number of the original missing) is dropped and counted. `--prompt authors`
uses the Co-rewarding authors' prompt (from the user's clone of their repository, `--authors-prompt`: it has no
licence, so coreward does not ship it), markers and parsing instead (and `--top-p 0.8 --max-tokens 20480` are their
sampling).

Output: a parquet file with the original and the rephrased question side by side (`id`, `question`,
`rephrased`, `answer`, `source`), or, with `--format verl`, a verl parquet of the rephrased questions
aligned row by row with the original (the layout of Co-rewarding's train_rewrite_*.parquet files).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from coreward.data.arith import rephrase_arith
from coreward.data.records import Record
from coreward.data.synthetic import rephrase_demo
from coreward.runtime.authors_text import AuthorsText, not_shipped, read_authors_text
from coreward.runtime.errors import CorewardError
from coreward.runtime.files import keep_piece, kept_for


BEGIN, END = "<rephrased>", "</rephrased>"

REPHRASE_PROMPT = """Rewrite the math problem below as a new problem that has exactly the same mathematical content.

Rules:
- Keep every number, every quantity and every relation between them; the final answer must stay the same.
- Change the wording and the scenario (new names, objects and setting), not the math.
- Do not solve the problem and do not add hints.
- Output only the rewritten problem, between {begin} and {end}.

Problem:
{question}"""

# The authors' instruction (tmlr-group/Co-rewarding, Co-rewarding-I/rewrite_questions.py, `build_prompt_from_message`):
# the question follows after a newline; the answer sits between their markers. Their repository has no licence (all
# rights reserved), so coreward does not ship it: it is read from the user's clone (`--authors-prompt`).
AUTHORS_REWRITE = AuthorsText(
    "https://github.com/tmlr-group/Co-rewarding/blob/edf278e/Co-rewarding-I/rewrite_questions.py",
    "build_prompt_from_message.instruction", "none given: all rights reserved",
    ("298501e3db53a7109656b669b1a1769d325b20c0e06529a93def0e5e62d49ad7",))
AUTHORS_BEGIN, AUTHORS_END = "### RESULT_START", "### RESULT_END"
# the authors' sampling (rewrite_questions.py: SamplingParams(temperature=0.7, top_p=0.8, max_tokens=20480))
AUTHORS_SAMPLING = {"temperature": 0.7, "top_p": 0.8, "max_tokens": 20480}

_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def authors_instruction(path: str | Path | None, key: str = "--authors-prompt") -> str:
    """The Co-rewarding authors' rewrite instruction, from the user's copy at `path` (their rewrite_questions.py, or
    a text file); a one-line error naming where to get it when none is given."""
    what = "the Co-rewarding authors' rewrite prompt"
    if path is None:
        raise not_shipped(AUTHORS_REWRITE, key, what)
    return read_authors_text(path, AUTHORS_REWRITE, key, what)


def build_request_text(question: str, prompt: str = "coreward", instruction: str | None = None) -> str:
    """The request for one question: ours, or (`prompt="authors"`) the authors' `instruction` + "\\n" + question."""
    if prompt == "authors":
        return f"{instruction}\n{question.strip()}"
    return REPHRASE_PROMPT.format(question=question, begin=BEGIN, end=END)


def parse_authors_rephrasing(output: str | None) -> str | None:
    """The authors' `extract_between_markers`: the text after `REWRITE:` between the first RESULT_START and
    the first RESULT_END; None where they raised (and dropped the row). No check of numbers or sameness."""
    if not output:
        return None
    start, end = output.find(AUTHORS_BEGIN), output.find(AUTHORS_END)
    if start == -1 or end == -1 or end <= start:
        return None
    parts = output[start + len(AUTHORS_BEGIN) : end].strip().split("REWRITE:", 1)
    if len(parts) != 2:
        return None
    return parts[1].strip()


def parse_rephrasing(output: str | None, original: str) -> str | None:
    """The text between the markers, or None when it is missing, empty, or lost one of the numbers."""
    if not output:
        return None
    start = output.rfind(BEGIN)
    stop = output.find(END, start + len(BEGIN)) if start >= 0 else -1
    if start < 0 or stop < 0:
        return None
    text = output[start + len(BEGIN) : stop].strip()
    if not text or text == original.strip():
        return None
    if not set(_NUMBER.findall(original)) <= set(_NUMBER.findall(text)):
        return None  # a rewrite that drops a number can't keep the same answer
    return text


@dataclass
class RephraseReport:
    total: int
    kept: int
    failed_generation: int
    failed_parse: int
    first_unparsed: str | None = None  # the first output dropped as unparseable: what the model wrote instead

    @property
    def dropped(self) -> int:
        return self.total - self.kept


def rephrase_records(records: list[Record], generator, temperature: float = 0.7, max_tokens: int = 1024,
                     prompt: str = "coreward", top_p: float = 1.0, enable_thinking: bool | None = None,
                     authors_prompt: str | Path | None = None, keep_for: tuple[str | Path, str] | None = None):
    """Rephrase every record; returns (kept pairs as (record, rephrased), report).

    `prompt="coreward"`: our prompt and markers, and a rewrite that loses a number of the original (or is
    the original) is dropped; `"authors"`: theirs (read from `authors_prompt`, the user's copy), kept whenever
    the markers parse. `enable_thinking` is Qwen3's chat-template switch (the authors' default: off); None passes
    nothing. `keep_for`: (the output file, the model) of a command whose finished chunks are kept beside the output
    (`KeptRephrasings`), so that a stopped job goes on from them.
    """
    from coreward.llm import GenerationRequest

    if prompt not in ("coreward", "authors"):
        raise CorewardError(f"rephrasing prompt must be 'coreward' or 'authors', got {prompt!r}")
    instruction = authors_instruction(authors_prompt) if prompt == "authors" else None
    template_kwargs = None if enable_thinking is None else {"enable_thinking": enable_thinking}
    requests = [GenerationRequest.user(build_request_text(r.question, prompt, instruction), temperature=temperature,
                                       max_tokens=max_tokens, top_p=top_p, chat_template_kwargs=template_kwargs)
                for r in records]
    kept = KeptRephrasings(keep_for[0], keep_for[1], requests) if keep_for is not None else None
    try:
        results = generate_in_chunks(generator, requests, "rephrase", kept)
    except KeyboardInterrupt:
        if kept is None:
            raise
        from coreward.runtime.interrupt import Interrupted

        raise Interrupted("rephrasing", kept.stopped_line()) from None
    pairs, failed_generation, failed_parse, first_unparsed = [], 0, 0, None
    for record, result in zip(records, results):
        if result.text is None:
            failed_generation += 1
            continue
        rephrased = (parse_authors_rephrasing(result.text) if prompt == "authors"
                     else parse_rephrasing(result.text, record.question))
        if rephrased is None:
            failed_parse += 1
            first_unparsed = first_unparsed if first_unparsed is not None else result.text
            continue
        pairs.append((record, rephrased))
    return pairs, RephraseReport(len(records), len(pairs), failed_generation, failed_parse, first_unparsed)


def generate_in_chunks(generator, requests: list, desc: str, kept: KeptRephrasings | None = None) -> list:
    """`generator.generate(requests)`, a chunk at a time so that a long job shows progress (a line every 30 s
    off a terminal): a local model's batch (`batch_size`), or four rounds of an endpoint's concurrent requests.
    With `kept`, the requests it holds are not asked again and each finished chunk is added to it."""
    from coreward.llm.base import GenerationResult
    from coreward.runtime.progress import Progress

    size = getattr(generator, "batch_size", None) or 4 * getattr(generator, "max_concurrency", 16)
    done = kept.texts if kept is not None else {}
    results = [GenerationResult(done[i]) if i in done else None for i in range(len(requests))]
    todo = [i for i in range(len(requests)) if i not in done]
    progress = Progress(len(todo), desc, unit="question")
    try:
        for start in range(0, len(todo), size):
            chunk = todo[start:start + size]
            for i, result in zip(chunk, generator.generate([requests[i] for i in chunk])):
                results[i] = result
            if kept is not None:
                kept.add({i: results[i].text for i in chunk if results[i].ok})
            progress.advance(len(chunk))
    finally:
        progress.close()
    return results


class KeptRephrasings:
    """What a `coreward rephrase` stopped part-way keeps: its finished chunks' outputs in OUTPUT.partial/, a file per
    chunk (written whole, then renamed) beside settings.json, the job's fingerprint (the model and the sha256 of its
    requests: prompts and sampling). The same command again reads them back and asks only for the rest; a request
    that failed is not kept, so it is asked again. `coreward rephrase` removes the folder once the output is written."""

    def __init__(self, output: str | Path, model: str, requests: list):
        self.directory = partial_directory(output)
        asked = json.dumps([dataclasses.asdict(r) for r in requests], sort_keys=True)
        self.identity = {"model": model, "requests_sha256": hashlib.sha256(asked.encode()).hexdigest(),
                         "requests": len(requests)}
        self.texts: dict[int, str] = {}
        self._files = 0
        if not kept_for(self.directory, self.identity, f"rephrase: {self.directory} holds the outputs of another "
                        "model, prompt or data: they are discarded"):
            return
        for path in sorted(self.directory.glob("chunk-*.json")):
            self.texts.update({int(i): text for i, text in json.loads(path.read_text()).items()})
            self._files += 1
        print(f"rephrase: continuing a stopped job: {len(self.texts):,} of {self.identity['requests']:,} questions' outputs are kept in "
              f"{self.directory}; asking for the rest", file=sys.stderr)

    def add(self, texts: dict[int, str]) -> None:
        """Keep one finished chunk (its file appears whole or not at all)."""
        keep_piece(self.directory, self.identity, f"chunk-{self._files:05d}.json", json.dumps(texts))
        self._files += 1
        self.texts.update(texts)

    def stopped_line(self) -> str:
        """What a Ctrl-C leaves, and how to go on."""
        if not self.texts:
            return "no chunk had finished: nothing is kept; run the same command again to start it"
        return (f"the outputs of {len(self.texts):,} of {self.identity['requests']:,} questions are kept in {self.directory}; run "
                "the same command again to go on from them")


def partial_directory(output: str | Path) -> Path:
    """Where a rephrasing job writing `output` keeps its finished chunks."""
    return Path(f"{output}.partial")


# the tasks that rephrase themselves (offline, no model): the demo's other template, arith's other wording
TASK_REPHRASINGS = {"demo": rephrase_demo, "arith": rephrase_arith}


def task_pairs(records: list[Record], task: str) -> list[tuple[Record, str]]:
    """A task that rephrases itself (TASK_REPHRASINGS): same numbers and answer."""
    try:
        return [(r, TASK_REPHRASINGS[task](r.question)) for r in records]
    except (CorewardError, ValueError) as err:
        raise CorewardError(f"rephrasings {task!r} rephrase only the {task} task's own questions: {err}") from None


def write_pairs(pairs: list[tuple[Record, str]], path: str | Path, fmt: str = "pairs") -> Path:
    import pandas as pd

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "verl":
        from dataclasses import replace

        from coreward.data.verl import write_verl

        return write_verl([replace(record, question=rephrased) for record, rephrased in pairs], path)
    frame = pd.DataFrame(
        [{"id": r.id, "question": r.question, "rephrased": q2, "answer": r.answer, "source": r.source} for r, q2 in pairs]
    )
    frame.to_parquet(path, index=False)
    return path


def load_rephrasings(path: str | Path, originals: list[Record]) -> dict[str, str]:
    """Map record id -> rephrased question, from our pairs file or a verl rewrite parquet.

    A verl rewrite file (Co-rewarding's `train_rewrite_*.parquet`) is aligned with the original file row
    by row, as the authors made them; our pairs file is matched by `id`.
    """
    from coreward.data.readers import read_rows

    path = Path(path)
    rows = read_rows(path)
    if rows and "rephrased" in rows[0]:
        for i, row in enumerate(rows):
            if not row.get("id") or not row.get("rephrased"):
                raise CorewardError(f"{path}: row {i} needs non-empty 'id' and 'rephrased' columns")
        return {str(row["id"]): str(row["rephrased"]) for row in rows}
    from coreward.data.verl import read_verl

    rewrites = read_verl(path)
    if len(rewrites) != len(originals):
        raise CorewardError(
            f"{path}: a verl rewrite file must align row by row with the training data "
            f"({len(rewrites)} rows here, {len(originals)} in the training data)"
        )
    for i, (original, rewrite) in enumerate(zip(originals, rewrites)):
        if rewrite.answer and original.answer and rewrite.answer != original.answer:
            raise CorewardError(f"{path}: row {i} has answer {rewrite.answer!r}, the original has {original.answer!r}")
    return {original.id: rewrite.question for original, rewrite in zip(originals, rewrites)}
