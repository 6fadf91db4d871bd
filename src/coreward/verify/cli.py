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
    timeout: Annotated[
        float | None, typer.Option("--timeout", help="Last-resort deadline per comparison, seconds (default 10).")
    ] = None,
    decimal_comma: Annotated[
        bool, typer.Option("--decimal-comma", help="Read `1000,99` as 1000.99 (default: a list of two numbers).")
    ] = False,
) -> None:
    """Does PRED's final answer verify equal to GOLD? Prints true or false.

    The same path as the training reward (`Verifier.verify_completions`), so the same verdict.

    Examples: coreward verify "so the answer is \\boxed{1/2}" --gold 0.5
              coreward verify --input pairs.jsonl --output verdicts.jsonl
    """
    from coreward.verify import Verifier

    if timeout is not None and timeout <= 0:
        raise CorewardError(f"--timeout must be > 0, got {timeout}")
    if (pred is None) == (input_path is None):
        raise CorewardError("give either PRED with --gold, or --input FILE.jsonl (and --output, else standard output)")
    with Verifier(**({} if timeout is None else {"timeout_s": timeout}), decimal_comma=decimal_comma) as verifier:
        if pred is not None:
            if gold is None:
                raise CorewardError("PRED needs --gold")
            [result] = verifier.verify_completions([pred], [gold], last_number_fallback)
            typer.echo("true" if result.correct else "false")
            return
        _verify_file(verifier, input_path, output, last_number_fallback)


def _verify_file(verifier, input_path: Path, output: Path | None, last_number_fallback: bool) -> None:
    """One {"correct", "extracted"} line per input line, into `output` or, without it, to standard output."""
    rows = read_pairs(input_path)
    results = verifier.verify_completions([pred for pred, _ in rows], [gold for _, gold in rows], last_number_fallback)
    verdicts = [result.correct for result in results]
    lines = "".join(json.dumps({"correct": r.correct, "extracted": r.extracted}) + "\n" for r in results)
    if output is None:
        typer.echo(lines, nl=False)
    else:
        try:
            Path(output).write_text(lines, encoding="utf-8")
        except OSError as err:
            raise CorewardError(f"{output}: cannot write ({err.strerror})") from None
    typer.echo(
        f"{sum(verdicts)}/{len(rows)} correct, {verifier.stats.timeouts + verifier.stats.over_budget} "
        f"timed out" + (f"; wrote {output}" if output is not None else ""),
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
