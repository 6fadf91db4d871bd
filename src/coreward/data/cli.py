"""`coreward data list | show | export`: look at the benchmarks and turn them into training files.

NAME is a registered benchmark or, for show and export, a user's .jsonl/.json/.parquet file
(Record columns or verl format), so a Cooper/Co-rewarding parquet can be inspected and converted too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from coreward.data.benchmarks import (
    BENCHMARKS,
    benchmark_splits,
    count_rows,
    list_benchmarks,
    load_benchmark,
    resolve_data_dir,
)
from coreward.data.records import Record
from coreward.runtime.errors import CorewardError


EXPORT_FORMATS = ("verl", "jsonl")

DataDir = Annotated[
    Path | None,
    typer.Option("--data-dir", help="Benchmark directory (default: $COREWARD_DATA, else shared/data beside the repo)."),
]
Split = Annotated[str, typer.Option("--split", "-s", help="Split to read (train or test).")]
Source = Annotated[str, typer.Option("--source", help="'local' (data directory) or 'hub' (Hugging Face).")]


def _load(name: str, split: str, data_dir: Path | None, limit: int | None, source: str) -> list[Record]:
    """A registered benchmark by name (from the data directory or, `source="hub"`, its hub copy), else a file,
    directory or hub dataset id, as `data.train` reads it."""
    if name in BENCHMARKS:
        return load_benchmark(name, split, data_dir=data_dir, limit=limit, source=source)
    from coreward.data.sources import load_named

    return load_named(name, split, limit, data_dir, key="NAME")


def _count_cell(name: str, split: str, data_dir: Path | None) -> str:
    """Row count, or a red 'missing' when the file (or the demo generator) is not there."""
    try:
        return str(count_rows(name, split, data_dir))
    except CorewardError:
        return "[red]missing[/red]"


def list_command(data_dir: DataDir = None) -> None:
    """Every benchmark with the row count of each split found in the data directory.

    Example: coreward data list
    """
    from rich.console import Console
    from rich.table import Table

    console = Console()
    try:
        root = resolve_data_dir(data_dir)
    except CorewardError as err:
        if data_dir is not None:
            raise
        console.print(f"[yellow]{err}[/yellow]")
        root = None
    table = Table(title=f"benchmarks in {root}" if root else "benchmarks")
    for column in ("benchmark", "split", "rows", "hub"):
        table.add_column(column, justify="right" if column == "rows" else "left")
    for name in list_benchmarks():
        hub = BENCHMARKS[name].hub
        for split in benchmark_splits(name):
            table.add_row(name, split, _count_cell(name, split, root), hub.path if hub else "-")
    console.print(table)


def _print_record(console, record: Record) -> None:
    """One record as a panel; Text objects keep LaTeX like `[asy]` from being read as rich markup."""
    from rich.panel import Panel
    from rich.text import Text

    body = Text(record.question)
    body.append("\n\nanswer: ", style="bold")
    body.append(record.answer, style="green")
    details = " · ".join(str(v) for v in (record.source, record.split, record.level, record.subject) if v)
    console.print(Panel(body, title=Text(record.id), subtitle=Text(details), title_align="left"))


def show_command(
    name: Annotated[str, typer.Argument(help="Benchmark name or a .jsonl/.json/.parquet file.")],
    split: Split = "test",
    limit: Annotated[int, typer.Option("--limit", "-k", help="Number of records to print.")] = 5,
    data_dir: DataDir = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON lines instead of panels.")] = False,
    source: Source = "local",
) -> None:
    """Print the first K records of a benchmark split.

    Example: coreward data show math500 --limit 3
    """
    records = _load(name, split, data_dir, limit, source)
    if as_json:
        for record in records:
            typer.echo(json.dumps(record.to_dict(), ensure_ascii=False))
        return
    from rich.console import Console

    console = Console()
    for record in records:
        _print_record(console, record)


def export_command(
    name: Annotated[str, typer.Argument(help="Benchmark name or a .jsonl/.json/.parquet file.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="File to write.")],
    split: Split = "test",
    fmt: Annotated[str, typer.Option("--format", "-f", help="verl (parquet) or jsonl (Record columns).")] = "verl",
    limit: Annotated[int | None, typer.Option("--limit", "-k", help="Export only the first K records.")] = None,
    data_dir: DataDir = None,
    source: Source = "local",
) -> None:
    """Write a benchmark split as verl parquet (for training) or as JSON lines.

    Example: coreward data export gsm8k --split train --format verl --output gsm8k_train.parquet
    """
    from coreward.data.readers import write_records_jsonl
    from coreward.data.verl import write_verl

    if fmt not in EXPORT_FORMATS:
        raise CorewardError(f"unknown export format {fmt!r}; use one of: {', '.join(EXPORT_FORMATS)}")
    records = _load(name, split, data_dir, limit, source)
    (write_verl if fmt == "verl" else write_records_jsonl)(records, output)
    typer.echo(f"wrote {len(records)} records to {output}")


def preprocess_command(
    name: Annotated[str, typer.Argument(help="dapo, openrs or amc (the Co-rewarding authors' preprocessors)")],
    input: Annotated[Path, typer.Option("--input", "-i", help="A local copy of the dataset: .parquet, .jsonl or .json.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="verl parquet to write.")],
    data_source: Annotated[str, typer.Option("--data-source", help="data_source of amc rows (amc.py's argument)")] = "AMC-TTT",
) -> None:
    """Turn a downloaded DAPO / Open-RS / AMC file into verl parquet laid out as the authors' scripts write it.

    Example: coreward data preprocess dapo --input dapo.parquet --output dapo_verl.parquet
    """
    from coreward.data.preprocess import preprocess_file

    count = preprocess_file(name, input, output, data_source)
    typer.echo(f"wrote {count} rows to {output}")


def register(app: typer.Typer) -> None:
    """Attach the `data` command group to the main app."""
    data_app = typer.Typer(help="Benchmarks and training files: list, show, export.", no_args_is_help=True)
    data_app.command("list")(list_command)
    data_app.command("show")(show_command)
    data_app.command("export")(export_command)
    data_app.command("preprocess")(preprocess_command)
    app.add_typer(data_app, name="data")
