"""Commands `coreward rm train | annotate | eval`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from coreward.runtime.assets import resolve_model

AUTO = "auto"


def register(app: typer.Typer) -> None:
    rm_app = typer.Typer(help="The reference-based reward model (VerifyRM): train, annotate data, evaluate.",
                         no_args_is_help=True)
    app.add_typer(rm_app, name="rm")

    @rm_app.command()
    def train(
        config: str = typer.Option(..., "--config", help="YAML config (see configs/rm/)"),
        set_: list[str] = typer.Option([], "--set", help="override a config key, e.g. --set training.learning_rate=1e-5"),
        output_dir: Optional[str] = typer.Option(None, "--output-dir", help="run directory (default: the config's)"),
    ) -> None:
        """Train a VerifyRM with BCE on (question, reference_answer, completion, label) rows.

        Example: coreward rm train --config configs/rm/demo.yaml
        """
        from coreward.rm.train import train_main

        result = train_main(config, set_, output_dir)
        typer.echo(_metrics_line("held-out", result.metrics))
        typer.echo(f"training throughput {result.train_examples_per_s:.1f} examples/s; final model in {result.final_model}")

    @rm_app.command()
    def annotate(
        policy: str = typer.Option(..., "--policy", help="policy to sample from: a model directory, hub id, "
                                   "OpenAI-compatible URL, or 'demo'"),
        data: str = typer.Option(..., "--data", help="a benchmark name, a .jsonl/.json/.parquet/.csv file (verl too), a directory, or a hub dataset id (owner/name[:subset]), with references"),
        columns: Optional[str] = typer.Option(None, "--columns", help="map the data's columns: question=COL,answer=COL (files, directories and hub datasets)"),
        output: str = typer.Option(..., "--output", help="labelled rows, .jsonl or .parquet"),
        split: str = typer.Option("train", "--split"),
        n: int = typer.Option(4, "--n", min=1, help="completions per problem"),
        limit: Optional[int] = typer.Option(None, "--limit", help="first LIMIT problems only"),
        judge: Optional[str] = typer.Option(None, "--judge", help="LLM judge: model directory, hub id or URL "
                                            "(URL#model); without it the rule verifier labels alone"),
        temperature: float = typer.Option(1.0, "--temperature"),
        max_tokens: int = typer.Option(512, "--max-tokens"),
        batch_size: int = typer.Option(32, "--batch-size", help="local policy: requests per generate call"),
        instruction: str = typer.Option(AUTO, "--instruction", help="appended to each question; 'auto': none "
                                        "for the demo task (its policy reads bare questions), else the papers' "
                                        "boxed-answer instruction; '' for none"),
        seed: int = typer.Option(0, "--seed"),
        data_dir: Optional[str] = typer.Option(None, "--data-dir"),
    ) -> None:
        """Sample a policy's completions and label them by rule verifier (+ LLM judge) agreement.

        Example: coreward rm annotate --policy demo --data demo --limit 100 --output runs/rm/rows.jsonl
        """
        from coreward.llm import build_generator
        from coreward.rm.annotate import annotate as run_annotation, write_rows
        from coreward.data.benchmarks import default_instruction, load_named, parse_columns
        from coreward.verify import get_verifier

        records = load_named(data, split, limit, data_dir, key="--data", columns=parse_columns(columns))
        if instruction == AUTO:
            instruction = default_instruction(data)
        with _policy_generator(policy, batch_size) as generator:
            judge_model = build_generator(judge) if judge else None
            try:
                rows, report = run_annotation(generator, records, n, get_verifier(), judge_model, temperature,
                                              max_tokens, seed, instruction or None)
            finally:
                if judge_model is not None:
                    judge_model.close()
        write_rows(rows, output)
        Path(f"{output}.report.json").write_text(json.dumps(report.to_dict(), indent=2) + "\n")
        typer.echo(report.text())
        typer.echo(f"wrote {output} and {output}.report.json")

    @rm_app.command("eval")
    def eval_(
        rm: list[str] = typer.Option(..., "--rm", help="scorer: an RM directory, 'demo' (the demo RM) or 'rule' "
                                     "(the rule verifier); repeat for a side-by-side table"),
        data: str = typer.Option(..., "--data", help="labelled .jsonl/.parquet (question, reference_answer, "
                                 "completion, label)"),
        threshold: float = typer.Option(0.5, "--threshold", help="an RM predicts correct when σ(logit) > this"),
        device: str = typer.Option(AUTO, "--device"),
        batch_size: int = typer.Option(64, "--batch-size"),
        limit: Optional[int] = typer.Option(None, "--limit"),
        output: Optional[str] = typer.Option(None, "--output", help="also write the metrics as JSON"),
    ) -> None:
        """Accuracy, precision, recall and F1 of RMs and/or the rule verifier on a labelled set.

        Example: coreward rm eval --data runs/rm/rows.jsonl --rm rule --rm demo
        """
        from coreward.rm.evaluate import evaluate_verifiers

        report = evaluate_verifiers(data, rm, threshold, device, batch_size, limit)
        typer.echo(f"{data}: {next(iter(report.results.values()))['n']} labelled rows")
        typer.echo(report.table())
        if output:
            Path(output).write_text(json.dumps(report.results, indent=2) + "\n")


def _policy_generator(policy: str, batch_size: int):
    from coreward.llm import build_generator

    if policy.startswith(("http://", "https://")):
        return build_generator(policy)
    policy = resolve_model(policy, "policy", key="--policy")
    return build_generator({"backend": "hf", "model_name_or_path": policy, "batch_size": batch_size})


def _metrics_line(name: str, metrics: dict[str, float]) -> str:
    shown = ", ".join(f"{k} {metrics[k]:.4f}" for k in ("accuracy", "precision", "recall", "f1") if k in metrics)
    return f"{name}: {shown}"
