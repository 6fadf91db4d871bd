"""Command `coreward rephrase`: make the rephrased views Co-rewarding-I trains on."""

from __future__ import annotations

from typing import Optional

import typer


def rephrase_command(
    input: str = typer.Option(..., "--input", help="a benchmark name, a .jsonl/.json/.parquet/.csv file (verl too), a directory, or a hub dataset id (owner/name[:subset])"),
    columns: Optional[str] = typer.Option(None, "--columns", help="map the data's columns: question=COL,answer=COL (files, directories and hub datasets)"),
    output: str = typer.Option(..., "--output", help="output parquet"),
    model: str = typer.Option(..., "--model", help="local model path, hub id, http(s)://endpoint[#model], or 'demo' / 'arith' (the task rephrases its own questions, offline)"),
    split: str = typer.Option("train", "--split"),
    limit: Optional[int] = typer.Option(None, "--limit"),
    fmt: str = typer.Option("pairs", "--format", help="pairs (original and rephrased side by side) or verl"),
    temperature: float = typer.Option(0.7, "--temperature"),
    max_tokens: int = typer.Option(1024, "--max-tokens"),
    data_dir: Optional[str] = typer.Option(None, "--data-dir"),
    prompt: str = typer.Option("coreward", "--prompt", help="coreward, or authors (Co-rewarding's rewrite_questions.py prompt, markers and parsing)"),
    top_p: float = typer.Option(1.0, "--top-p", help="the authors used 0.8"),
    thinking: Optional[bool] = typer.Option(None, "--thinking/--no-thinking", help="Qwen3 chat-template switch (the authors: off); unset passes nothing"),
    authors_prompt: Optional[str] = typer.Option(None, "--authors-prompt", help="with --prompt authors: their Co-rewarding-I/rewrite_questions.py from a clone of github.com/tmlr-group/Co-rewarding (or a text file of its instruction); not shipped: their repository has no licence"),
) -> None:
    """Rewrite each question with new wording and scenario, same numbers and answer.

    Example: coreward rephrase --input math --limit 100 --model http://localhost:8000/v1#Qwen/Qwen3-32B --output rephrased.jsonl
    """
    import shutil

    from coreward.data.rephrase import TASK_REPHRASINGS, partial_directory, rephrase_records, task_pairs, write_pairs
    from coreward.data.sources import load_named, parse_columns
    from coreward.runtime.errors import CorewardError

    if fmt not in ("pairs", "verl"):
        raise CorewardError(f"--format must be 'pairs' or 'verl', got {fmt!r}")
    if prompt == "authors" and model not in TASK_REPHRASINGS:
        from coreward.data.rephrase import authors_instruction

        authors_instruction(authors_prompt)  # missing or unreadable: one line now, before any data or model loads
    records = load_named(input, split, limit, data_dir, key="--input", columns=parse_columns(columns))
    if model in TASK_REPHRASINGS:
        pairs = task_pairs(records, model)
        typer.echo(f"{model} task: {len(pairs)} rephrasings in the task's own other wording (offline)")
    else:
        from coreward.llm import build_generator

        generator = build_generator(model)
        try:
            if hasattr(generator, "health_check"):
                generator.health_check()
            pairs, report = rephrase_records(records, generator, temperature, max_tokens, prompt, top_p, thinking,
                                             authors_prompt, keep_for=(output, model))
        finally:
            generator.close()
        typer.echo(
            f"kept {report.kept} of {report.total} rows; dropped {report.dropped} "
            f"({report.failed_generation} generation failures, {report.failed_parse} unparseable outputs)"
        )
        if report.first_unparsed is not None:  # what the model wrote instead tells a user which model or prompt to change
            shown = report.first_unparsed.strip().replace("\n", " ")
            typer.echo(f"the first unparseable output: {shown[:300]!r}{' ...' if len(shown) > 300 else ''}")
    if not pairs:
        raise CorewardError("no row could be rephrased; nothing written")
    typer.echo(f"wrote {write_pairs(pairs, output, fmt)}")
    shutil.rmtree(partial_directory(output), ignore_errors=True)  # the finished chunks kept for a stop: written now


def register(app: typer.Typer) -> None:
    """Attach `rephrase` to the main app."""
    app.command("rephrase")(rephrase_command)
