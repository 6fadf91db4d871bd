"""The training dataset of `coreward train`: records in, TRL rows out, built once before any model loads.

    records (data.train) -> reference checks -> rows: `prompt` (text or chat messages) + every record field
                                                  + the user's own columns (`Record.user_columns`)
                                                  + paired views (`paired`: rows `pair_id`, `view`), or
                                                  + `teacher_prompt` (`teacher`: each question's rephrasing)

Every column of a row reaches the reward sources (`RolloutBatch.columns`) and a TRL-style reward function's keyword
arguments, as TRL passes every dataset column: coreward's fields (`question`, `answer`, `id`, `solution`, `source`,
...) and the user's columns under their own names (`problem`, ...). Where a name is both, coreward's field is passed.

`data` is the config's `DataSettings` (`grpo/config.py`); the engine says which rewards score against the
references and which rephrasings the rewards ask for (`RewardSource.data_needs`). Prompts longer than
`data.max_prompt_tokens` are dropped once the tokenizer is loaded (`drop_long_prompts`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from coreward.data.records import Record
from coreward.runtime.distributed import print_once
from coreward.runtime.errors import CorewardError


# names that TRL or coreward give a meaning of their own: TRL's reward-function arguments and row keys, coreward's
# paired views and teacher prompts. A user's column of one of these names is not passed on.
RESERVED_COLUMNS = ("prompt", "completion", "completion_ids", "prompts", "completions", "trainer_state", "pair_id",
                    "view", "teacher_prompt")


@dataclass(frozen=True)
class Rephrasings:
    """Where each question's rephrasing comes from, and the config key that named it (for errors)."""

    source: str  # "demo" or "arith" (the task's own rephrasings) or a file from `coreward rephrase` / a verl rewrite parquet
    key: str


def build_train_dataset(data: Any, reference_users: list[str], reference_free: str = "",
                        paired: Rephrasings | None = None, teacher: Rephrasings | None = None):
    """The training `datasets.Dataset` of `data` (a `DataSettings`). `reference_users`: the configured rewards that
    score against the reference answers (their names, for errors); `reference_free`: the methods that need none.
    `paired`: each question is followed by its rephrasing (paired views); else `teacher`: each row gets its
    rephrasing as a `teacher_prompt`."""
    from coreward.data.sources import load_named

    records = load_named(data.train, data.split, data.limit, data.data_dir, key="data.train", columns=data.columns)
    records = check_references(records, data, reference_users, reference_free)
    if paired:
        return to_dataset(build_paired_rows(records, data, paired))
    if teacher:
        return to_dataset(build_teacher_rows(records, data, teacher))
    return to_dataset(build_rows(records, data))


def user_column_names(records) -> list[str]:
    """The user's columns passed on with each row, in the data's order: every column of any row, less coreward's own
    field names (coreward's value is passed under those) and `RESERVED_COLUMNS`."""
    own = set(Record.__dataclass_fields__) | set(RESERVED_COLUMNS)
    names = dict.fromkeys(name for record in records for name in (record.user_columns or {}))
    return [name for name in names if name not in own]


def build_rows(records, data: Any) -> list[dict[str, Any]]:
    """Dataset rows for TRL: `prompt` (plain text or chat messages), every record field and the user's own columns."""
    from coreward.data.prompts import build_messages, plain_prompt

    passed = user_column_names(records)
    rows = []
    for record in records:
        given = record.user_columns or {}
        row = {**{name: given.get(name) for name in passed}, **record.to_dict()}
        if record.messages is not None:  # the data's own chat prompt: TRL applies the chat template
            row["prompt"] = record.messages
        elif data.prompt_format == "chat":
            row["prompt"] = build_messages(record.question, instruction=data.instruction, system=data.system_prompt)
        else:
            row["prompt"] = plain_prompt(record.question, instruction=data.instruction)
        rows.append(row)
    return rows


def to_dataset(rows: list[dict[str, Any]]):
    """The rows as a `datasets.Dataset`. A user's column that Arrow cannot hold as it is (a number in one row and
    text in the next, as hand-typed values are) is passed as text (numbers, lists and objects as JSON), with a note."""

    import pyarrow as pa
    from datasets import Dataset

    try:
        return Dataset.from_list(rows)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
        pass
    mixed = []
    for name in rows[0]:
        try:
            pa.array([row.get(name) for row in rows])
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
            mixed.append(name)
    if not mixed:
        raise CorewardError("key data.train: the rows cannot be made a dataset (pyarrow refused them)")
    print_once(f"column{'s' if len(mixed) > 1 else ''} {', '.join(mixed)} of data.train mix{'' if len(mixed) > 1 else 'es'}"
               " value types (say, text in one row and a number in another): passed to reward functions as text")
    as_text = [{**row, **{name: _as_text(row.get(name)) for name in mixed}} for row in rows]
    return Dataset.from_list(as_text)


def _as_text(value: Any) -> str | None:
    import json

    return value if value is None or isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def rephrased_pairs(records: list[Record], source: str, key: str) -> list[tuple[Record, str]]:
    """(record, its rephrased question) for each record that has one in `source`: "demo" or "arith" (the task's own
    rephrasings) or a file from `coreward rephrase` / a verl rewrite parquet. `key` names the setting in errors."""
    from coreward.data.rephrase import TASK_REPHRASINGS, load_rephrasings, task_pairs

    if source in TASK_REPHRASINGS:
        return task_pairs(records, source)
    try:
        rephrased = load_rephrasings(source, records)
    except CorewardError as err:
        raise CorewardError(f"key {key}: {err}") from None
    pairs = [(r, rephrased[r.id]) for r in records if r.id in rephrased]
    if not pairs:
        raise CorewardError(f"{key} {source}: no id matches the training data")
    if len(pairs) < len(records):
        print_once(f"{len(records) - len(pairs)} of {len(records)} questions have no rephrasing and are left out")
    return pairs


def paired_rows(pairs: list[tuple[dict[str, Any], str]]) -> list[dict[str, Any]]:
    """Two dataset rows per (row, rephrased question): the original (view 0) then the rephrasing (view 1)."""
    rows = []
    for row, rephrased in pairs:
        pair_id = str(row["id"])
        rows.append({**row, "pair_id": pair_id, "view": 0})
        rows.append({**row, "question": rephrased, "pair_id": pair_id, "view": 1})
    return rows


def build_paired_rows(records, data: Any, rephrasings: Rephrasings) -> list[dict[str, Any]]:
    """Paired views: each record's question (view 0) next to its rephrasing (view 1)."""
    from coreward.data.records import with_question

    pairs = rephrased_pairs(records, rephrasings.source, rephrasings.key)
    originals = build_rows([r for r, _ in pairs], data)
    views = build_rows([with_question(r, q2) for r, q2 in pairs], data)
    rows = paired_rows([(row, q2) for row, (_, q2) in zip(originals, pairs)])
    for i, view_row in enumerate(views):  # the rephrased view's prompt is rendered from its own question
        rows[2 * i + 1]["prompt"] = view_row["prompt"]
    return rows


def build_teacher_rows(records, data: Any, rephrasings: Rephrasings) -> list[dict[str, Any]]:
    """Rows whose `teacher_prompt` is the rephrased question, rendered as the prompt is (Co-rewarding-II's
    use_aug: the policy answers the original, the EMA teacher the rephrasing)."""
    from dataclasses import replace

    pairs = rephrased_pairs(records, rephrasings.source, rephrasings.key)
    rows = build_rows([r for r, _ in pairs], data)
    for row, teacher_row in zip(rows, build_rows([replace(r, question=q2) for r, q2 in pairs], data)):
        row["teacher_prompt"] = teacher_row["prompt"]
    return rows


def check_references(records, data: Any, reference_users: list[str], reference_free: str = ""):
    """The reference column exists, and, when a reward scores against it (`reference_users`), every reference can
    be verified.

    A bad reference in the user's file is an error naming file, row and id; in a registered benchmark
    (which the user can't fix: MATH's train split has two empty answers) the problem is left out and counted.
    """
    from dataclasses import fields

    from coreward.data.benchmarks import list_benchmarks
    from coreward.verify.equivalence import reference_problem

    column = data.reference_column
    columns = [f.name for f in fields(Record)]
    if column not in columns:
        raise CorewardError(
            f"key data.reference_column: {column!r} is not a column of the training data "
            f"(columns: {', '.join(columns)})"
        )
    if not reference_users:
        return records
    source = data.train
    if all(not getattr(record, column) for record in records):
        raise CorewardError(
            f"key rewards: reward {reference_users[0]!r} scores completions against reference answers, and {source} "
            f"has none (no {data.columns.get('answer', 'answer')!r} column: map yours with data.columns.answer); "
            f"{reference_free} need none"
        )
    registered = source in list_benchmarks()
    kept, dropped = [], []
    for row, record in enumerate(records, start=1):
        reference = getattr(record, column)
        why = reference_problem(reference) or _prose_problem(reference)
        if why is None:
            kept.append(record)
        elif registered:
            dropped.append(record.id)
        else:
            raise CorewardError(
                f"key data.train: {source}: row {row} (id {record.id}): the reference answer {str(reference)!r:.80} "
                f"{why}; reward {reference_users[0]!r} scores completions against it"
            )
    if dropped:
        print_once(f"left out {len(dropped)} of {len(records)} problems of {source} whose reference answer can't be "
                   f"verified: {', '.join(dropped[:10])}{' ...' if len(dropped) > 10 else ''}")
    if not kept:
        raise CorewardError(f"key data.train: no problem of {source} has a usable reference answer")
    return kept


def _prose_problem(reference) -> str | None:
    """Words and nothing else ("no answer given here"): math-verify reads them as a product of letters, which no
    completion will ever match. A word or two ("yes", "Evelyn", "x y") can be an answer; three words with no number,
    symbol or LaTeX are not."""
    words = str(reference).split()
    if len(words) >= 3 and all(word.isalpha() for word in words):
        return "is words with no readable answer (no number, expression or LaTeX)"
    return None


def drop_long_prompts(dataset, tokenizer, max_tokens: int, paired: bool = False):
    """Drop rows whose rendered prompt is longer than `max_tokens` (TRL 1.16 has no prompt truncation).

    With paired views a pair is dropped whole, so the two views stay side by side.
    """

    from coreward.data.prompts import render_prompt

    def length(prompt) -> int:
        if isinstance(prompt, list):
            prompt = render_prompt(tokenizer, prompt)
        return len(tokenizer(prompt, add_special_tokens=False)["input_ids"])

    fits = [length(prompt) <= max_tokens for prompt in dataset["prompt"]]
    if paired:
        fits = [fits[i] and fits[i ^ 1] for i in range(len(fits))]  # rows 2p and 2p+1 are one pair
    kept = dataset.select([i for i, ok in enumerate(fits) if ok])
    if len(kept) < len(dataset):
        print_once(f"dropped {len(dataset) - len(kept)} of {len(dataset)} prompts longer than {max_tokens} tokens")
    if len(kept) == 0:
        raise CorewardError(f"every prompt is longer than data.max_prompt_tokens={max_tokens}")
    return kept
