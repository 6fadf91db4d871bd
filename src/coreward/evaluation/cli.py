"""Commands `coreward eval` (avg@n on math benchmarks) and `coreward report` (plots of training runs).

The option of each evaluation setting carries that setting's default and help from `EvalSettings`, where it is
declared; the command builds the settings once and hands them to `evaluate`.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Annotated

import typer

from coreward.evaluation.evaluate import PAPER_BENCHMARKS, EvalSettings


_HELP = {f.name: f.metadata["help"] for f in fields(EvalSettings)}


def _setting(name: str, **limits) -> typer.models.OptionInfo:
    """The option `--name-with-dashes` of the EvalSettings field `name`, with the field's help."""
    return typer.Option("--" + name.replace("_", "-"), help=_HELP[name], **limits)


def eval_command(
    model: Annotated[str, typer.Option("--model", help="saved model directory, hub id, or 'demo' (the demo policy)")],
    output: Annotated[Path, typer.Option("--output", help="directory for results.json and samples.parquet")],
    benchmarks: Annotated[str | None, typer.Option(
        "--benchmarks", help="comma-separated: a benchmark name, a .jsonl/.json/.parquet/.csv file (verl too), a "
        "directory, or a hub dataset id (owner/name[:subset]) (default: the model's own task, demo, for the demo "
        f"policy; else the papers' {','.join(PAPER_BENCHMARKS)})")] = None,
    n: Annotated[int, _setting("n", min=1)] = EvalSettings.n,
    temperature: Annotated[float, _setting("temperature", min=0.0)] = EvalSettings.temperature,
    top_p: Annotated[float, _setting("top_p", min=0.0, max=1.0)] = EvalSettings.top_p,
    limit: Annotated[int | None, _setting("limit", min=1)] = EvalSettings.limit,
    seed: Annotated[int, _setting("seed")] = EvalSettings.seed,
    backend: Annotated[str, _setting("backend")] = EvalSettings.backend,
    batch_size: Annotated[int | None, _setting("batch_size", min=1)] = EvalSettings.batch_size,
    max_new_tokens: Annotated[int | None, _setting("max_new_tokens", min=1)] = EvalSettings.max_new_tokens,
    prompt_format: Annotated[str | None, _setting("prompt_format")] = EvalSettings.prompt_format,
    instruction: Annotated[str | None, _setting("instruction")] = EvalSettings.instruction,
    split: Annotated[str, _setting("split")] = EvalSettings.split,
    columns: Annotated[str | None, typer.Option(
        "--columns", help="map the data's columns: question=COL,answer=COL (files, directories and hub datasets)"
    )] = None,
    data_dir: Annotated[Path | None, _setting("data_dir")] = None,
    device: Annotated[str, _setting("device")] = EvalSettings.device,
    dtype: Annotated[str, _setting("dtype")] = EvalSettings.dtype,
    vllm_memory: Annotated[float | None, _setting("vllm_memory", min=0.01, max=1.0)] = EvalSettings.vllm_memory,
    judge: Annotated[str | None, _setting("judge")] = EvalSettings.judge,
    judge_format: Annotated[str, _setting("judge_format")] = EvalSettings.judge_format,
    judge_mode: Annotated[str, _setting("judge_mode")] = EvalSettings.judge_mode,
    judge_template: Annotated[str | None, _setting("judge_template")] = EvalSettings.judge_template,
) -> None:
    """Sample n completions per problem and report avg@n, pass@k and maj@n (the papers' protocol); on data
    without reference answers, agree@n (majority-answer share) and answered instead.

    Stopped by Ctrl-C, it keeps the batches it finished in OUTPUT/partial/: the same command again goes on from them.

    Example: coreward eval --model demo --n 8 --limit 100 --output runs/eval/demo
    """
    from coreward.data.sources import parse_columns
    from coreward.evaluation.evaluate import evaluate
    from coreward.runtime.progress import rate

    settings = EvalSettings(
        benchmarks=benchmarks, n=n, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, seed=seed,
        prompt_format=prompt_format, instruction=instruction, batch_size=batch_size, limit=limit, split=split,
        data_dir=data_dir, columns=parse_columns(columns), backend=backend, device=device, dtype=dtype,
        vllm_memory=vllm_memory, output_dir=output, show_progress=True, judge=judge, judge_format=judge_format,
        judge_mode=judge_mode, judge_template=judge_template,
    )
    results = evaluate(model, settings)
    typer.echo("")
    typer.echo(results.table(label=model))
    typer.echo("")
    timing = results.timing
    seconds = timing["generation_time_s"]
    typer.echo(
        f"{len(results.samples)} completions in {seconds:.1f} s ({rate(len(results.samples), seconds, 'completion')}, "
        f"{rate(round(timing['tokens_per_s'] * seconds), seconds, 'token')}); "
        f"scoring {timing['scoring_time_s']:.1f} s; total {timing['wall_time_s']:.1f} s"
    )
    if results.judge is not None:
        j = results.judge
        typer.echo(f"judge ({j['mode']}): {j['calls']} requests for {j['judged']} samples, {j['failures']} without a "
                   f"verdict; it overturned {j['overturned']} of the rule verifier's rejections")
    typer.echo(f"wrote {output / 'results.json'} and {output / 'samples.parquet'}")
    if results.model_card is not None:
        typer.echo(f"updated {results.model_card}: the run's model card, with this evaluation in its table")


def report_command(
    run_dirs: Annotated[list[Path], typer.Argument(help="training run directories (each with metrics.jsonl)")],
    output: Annotated[Path | None, typer.Option(
        "--output", help="directory for the PNG plots and report.md (default: RUN_DIR/report for one run, "
        "else report/ in the runs' common parent directory)")] = None,
    smooth: Annotated[float, typer.Option("--smooth", help="EMA weight for per-step curves, 0 = none")] = 0.6,
) -> None:
    """Plot training runs (reward, verified and held-out accuracy, length, reward model) and summarize them.

    Example: coreward report runs/demo/rule runs/demo/cooper
    """
    import os

    from coreward.evaluation.report import make_report

    if output is None:
        parent = run_dirs[0] if len(run_dirs) == 1 else Path(os.path.commonpath([p.resolve() for p in run_dirs]))
        output = parent / "report"
    for path in make_report(run_dirs, output, smooth=smooth):
        typer.echo(f"wrote {path}")


def register(app: typer.Typer) -> None:
    """Attach `eval` and `report` to the main app."""
    app.command("eval")(eval_command)
    app.command("report")(report_command)
