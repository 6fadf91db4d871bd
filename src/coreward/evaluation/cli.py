"""Commands `coreward eval` (avg@n on math benchmarks) and `coreward report` (plots of training runs)."""

from __future__ import annotations

from pathlib import Path

from typing import Optional

import typer

from coreward.runtime.errors import CorewardError
from coreward.evaluation.evaluate import PAPER_BENCHMARKS


def parse_benchmarks(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise CorewardError("--benchmarks is empty; give comma-separated names, e.g. gsm8k,svamp")
    return list(dict.fromkeys(names))


def register(app: typer.Typer) -> None:
    @app.command("eval")
    def eval_command(
        model: str = typer.Option(..., "--model", help="saved model directory, hub id, or 'demo' (the demo policy)"),
        benchmarks: str | None = typer.Option(
            None, "--benchmarks", help="comma-separated: a benchmark name, a .jsonl/.json/.parquet/.csv file (verl too), "
            f"a directory, or a hub dataset id (owner/name[:subset]) (default: the model's own task, demo, for the demo "
            f"policy; else the papers' {','.join(PAPER_BENCHMARKS)})"
        ),
        output: Path = typer.Option(..., "--output", help="directory for results.json and samples.parquet"),
        n: int = typer.Option(8, "--n", min=1, help="samples per problem"),
        temperature: float = typer.Option(0.7, "--temperature", min=0.0, help="0 = greedy"),
        top_p: float = typer.Option(0.95, "--top-p", min=0.0, max=1.0),
        limit: int | None = typer.Option(None, "--limit", min=1, help="first K problems of each benchmark"),
        seed: int = typer.Option(0, "--seed", help="same seed, same samples"),
        backend: str = typer.Option("hf", "--backend", help="hf (transformers generate) or vllm"),
        batch_size: int | None = typer.Option(
            None, "--batch-size", min=1, help="sequences per generate call (default: 512 for the demo policy, else 64)"
        ),
        max_new_tokens: int | None = typer.Option(
            None, "--max-new-tokens", min=1, help="completion length cap (default: 64 for the demo policy, else 2048)"
        ),
        prompt_format: str | None = typer.Option(
            None, "--prompt-format", help="chat or plain (default: plain for the demo tokenizer, else chat)"
        ),
        instruction: str | None = typer.Option(
            None,
            "--instruction",
            help="text appended to each question, '' for none (default: none for the "
            "demo, else the papers' \\boxed{} instruction)",
        ),
        split: str = typer.Option("test", "--split"),
        columns: str | None = typer.Option(None, "--columns", help="map the data's columns: question=COL,answer=COL (files, directories and hub datasets)"),
        data_dir: Path | None = typer.Option(None, "--data-dir", help="benchmark directory"),
        device: str = typer.Option("auto", "--device", help="auto, cpu, cuda, cuda:1, ..."),
        dtype: str = typer.Option(
            "auto", "--dtype", help="auto (hf: bf16 on GPU, fp32 on CPU; vllm: its own choice, recorded in "
            "results.json), float32, bfloat16, float16"
        ),
        vllm_memory: float | None = typer.Option(
            None, "--vllm-memory", min=0.01, max=1.0,
            help="vllm: share of GPU memory it reserves (on CPU: of the machine's memory; default vLLM's 0.92)",
        ),
    ) -> None:
        """Sample n completions per problem and report avg@n, pass@k and maj@n (the papers' protocol); on data
        without reference answers, agree@n (majority-answer share) and answered instead.

        Example: coreward eval --model demo --n 8 --limit 100 --output runs/eval/demo
        """
        from coreward.data.benchmarks import parse_columns
        from coreward.evaluation.evaluate import evaluate

        results = evaluate(
            model,
            benchmarks=parse_benchmarks(benchmarks) if benchmarks is not None else None,
            n=n,
            temperature=temperature,
            top_p=top_p,
            max_new_tokens=max_new_tokens,
            seed=seed,
            prompt_format=prompt_format,
            batch_size=batch_size,
            output_dir=output,
            instruction=instruction,
            limit=limit,
            split=split,
            data_dir=data_dir,
            columns=parse_columns(columns),
            backend=backend,
            device=device,
            dtype=dtype,
            show_progress=True,
            vllm_memory=vllm_memory,
        )
        typer.echo("")
        typer.echo(results.table(label=model))
        typer.echo("")
        timing = results.timing
        typer.echo(
            f"{len(results.samples)} completions in {timing['generation_time_s']:.1f} s "
            f"({timing['completions_per_s']:.1f}/s, {timing['tokens_per_s']:.0f} tokens/s); "
            f"scoring {timing['scoring_time_s']:.1f} s; total {timing['wall_time_s']:.1f} s"
        )
        typer.echo(f"wrote {output / 'results.json'} and {output / 'samples.parquet'}")

    @app.command("report")
    def report_command(
        run_dirs: list[Path] = typer.Argument(..., help="training run directories (each with metrics.jsonl)"),
        output: Optional[Path] = typer.Option(
            None, "--output", help="directory for the PNG plots and report.md (default: RUN_DIR/report for one run, "
            "else report/ in the runs' common parent directory)"),
        smooth: float = typer.Option(0.6, "--smooth", help="EMA weight for per-step curves, 0 = none"),
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
