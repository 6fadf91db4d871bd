"""`coreward verify`: check one answer against a gold, or a JSONL file of (pred, gold) pairs.

    coreward verify "... so the answer is \\boxed{1/2}" --gold 0.5        prints true
    coreward verify --input pairs.jsonl --output verdicts.jsonl      one {"correct", "extracted"} per line
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from coreward.runtime.errors import CorewardError


def verify_command(
    pred: Annotated[str | None, typer.Argument(help="A completion or a bare answer (with --gold).")] = None,
    gold: Annotated[str | None, typer.Option("--gold", help="The reference answer for PRED.")] = None,
    input_path: Annotated[Path | None, typer.Option("--input", help="JSONL file with 'pred' and 'gold'.")] = None,
    output: Annotated[Path | None, typer.Option("--output", help="JSONL file to write the verdicts to.")] = None,
    last_number_fallback: Annotated[
        bool,
        typer.Option("--last-number-fallback", help="Without a boxed/####/'answer is' answer, use the last number."),
    ] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds allowed per comparison.")] = 3.0,
) -> None:
    """Does PRED's final answer verify equal to GOLD (math-verify, gold first)? Prints true or false."""
    from coreward.verify import Verifier

    if timeout <= 0:
        raise CorewardError(f"--timeout must be > 0, got {timeout}")
    if (pred is None) == (input_path is None):
        raise CorewardError("give either PRED with --gold, or --input FILE.jsonl with --output")
    with Verifier(timeout_s=timeout) as verifier:
        if pred is not None:
            if gold is None:
                raise CorewardError("PRED needs --gold")
            answer = answer_of(pred, last_number_fallback)
            typer.echo("true" if verifier.equivalent([gold], [answer])[0] else "false")
            return
        if output is None:
            raise CorewardError("--input needs --output")
        _verify_file(verifier, input_path, output, last_number_fallback)


def answer_of(pred: str | None, last_number_fallback: bool) -> str | None:
    """The extracted final answer; a PRED with none that is itself a short one-line answer ("0.5") counts as is."""
    from coreward.verify.extract import MAX_ANSWER_CHARS, clean_answer, extract_answer

    if pred is None:
        return None
    answer = extract_answer(pred, last_number_fallback)
    if answer is None and "\n" not in pred.strip() and len(pred) <= MAX_ANSWER_CHARS:
        answer = clean_answer(pred)
    return answer


def _verify_file(verifier, input_path: Path, output: Path, last_number_fallback: bool) -> None:
    rows = read_pairs(input_path)
    answers = [answer_of(pred, last_number_fallback) for pred, _ in rows]
    verdicts = verifier.equivalent([gold for _, gold in rows], answers)
    try:
        with open(output, "w", encoding="utf-8") as out:
            for correct, answer in zip(verdicts, answers):
                out.write(json.dumps({"correct": correct, "extracted": answer}) + "\n")
    except OSError as err:
        raise CorewardError(f"{output}: cannot write ({err.strerror})") from None
    typer.echo(
        f"{sum(verdicts)}/{len(rows)} correct, {verifier.stats.timeouts + verifier.stats.over_budget} "
        f"timed out; wrote {output}",
        err=True,
    )


def read_pairs(path: Path) -> list[tuple[str | None, str]]:
    """(pred, gold) per non-blank line; errors name the file, the line and the field."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="surrogateescape")
    except FileNotFoundError:
        raise CorewardError(f"{path}: no such file") from None
    except OSError as err:
        raise CorewardError(f"{path}: cannot read ({err.strerror})") from None
    rows = []
    for number, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            rows.append(_parse_line(path, number, line))
    return rows


def _parse_line(path: Path, number: int, line: str) -> tuple[str | None, str]:
    where = f"{path}, line {number}"
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        raise CorewardError(f"{where}: not valid JSON ({err.msg})") from None
    if not isinstance(row, dict):
        raise CorewardError(f"{where}: expected a JSON object with 'pred' and 'gold'")
    for field in ("pred", "gold"):
        if field not in row:
            raise CorewardError(f"{where}: missing field '{field}'")
    pred, gold = row["pred"], row["gold"]
    if pred is not None and not isinstance(pred, str):
        raise CorewardError(f"{where}: field 'pred' must be a string or null, got {type(pred).__name__}")
    if isinstance(gold, (int, float)) and not isinstance(gold, bool):
        gold = str(gold)
    if not isinstance(gold, str):
        raise CorewardError(f"{where}: field 'gold' must be a string or a number, got {type(gold).__name__}")
    return pred, gold


def register(app: typer.Typer) -> None:
    """Attach the `verify` command to the main app."""
    app.command("verify")(verify_command)
