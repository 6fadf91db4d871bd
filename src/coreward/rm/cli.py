"""Commands `coreward rm train | annotate | eval`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from coreward.runtime.assets import resolve_model
from coreward.runtime.errors import CorewardError


AUTO = "auto"


def train_command(
    config: Annotated[str, typer.Option("--config", help="YAML config (see configs/rm/)")],
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="override a config key, e.g. --set training.learning_rate=1e-5")] = None,
    output_dir: Annotated[str | None, typer.Option(
        "--output-dir", help="run directory (default: the config's)")] = None,
    resume: Annotated[bool, typer.Option(
        "--resume", help="continue the run in the run directory from its newest complete checkpoint (model, optimizer, "
        "scheduler, RNG and trainer state), with the same config")] = False,
    resume_if_any: Annotated[bool, typer.Option(
        "--resume-if-any", help="continue from the newest complete checkpoint if there is one, else start: for a job "
        "a scheduler may start again")] = False,
) -> None:
    """Train a VerifyRM with BCE on (question, reference_answer, completion, label) rows.

    Checkpoints are complete (what --resume needs) and written atomically, each epoch (training.save_strategy); the
    newest two are kept (training.save_total_limit). The first Ctrl-C stops after the step in progress with a
    checkpoint of it and prints the command that continues; a second stops at once, keeping the newest checkpoint.

    Example: coreward rm train --config configs/rm/demo.yaml
    """
    from coreward.rm.train import train_main
    from coreward.runtime.commands import resume_mode

    result = train_main(config, set_ or [], output_dir, resume_mode(resume, resume_if_any))
    typer.echo(_metrics_line("held-out", result.metrics))
    typer.echo(f"training throughput {result.train_examples_per_s:.1f} examples/s; final model in {result.final_model}")


def annotate_command(
    data: Annotated[str, typer.Option("--data", help="a benchmark name, a .jsonl/.json/.parquet/.csv file (verl too), "
                                      "a directory, or a hub dataset id (owner/name[:subset]), with references")],
    output: Annotated[str, typer.Option("--output", help="labelled rows, .jsonl or .parquet")],
    policy: Annotated[str | None, typer.Option("--policy", help="policy to sample from: a model directory, hub id, "
                                               "OpenAI-compatible URL, or 'demo'")] = None,
    columns: Annotated[str | None, typer.Option(
        "--columns", help="map the data's columns: question=COL,answer=COL (files, directories and hub datasets)"
    )] = None,
    split: Annotated[str, typer.Option("--split")] = "train",
    n: Annotated[int, typer.Option("--n", min=1, help="completions per problem")] = 4,
    limit: Annotated[int | None, typer.Option("--limit", help="first LIMIT problems only")] = None,
    judge: Annotated[str | None, typer.Option("--judge", help="LLM judge: model directory, hub id or URL "
                                              "(URL#model); without it the rule verifier labels alone")] = None,
    temperature: Annotated[float, typer.Option("--temperature")] = 1.0,
    max_tokens: Annotated[int, typer.Option("--max-tokens")] = 512,
    batch_size: Annotated[int, typer.Option("--batch-size", help="local policy: requests per generate call")] = 32,
    instruction: Annotated[str, typer.Option(
        "--instruction", help="appended to each question; 'auto': none for the demo task (its policy reads bare "
        "questions), else the papers' boxed-answer instruction; '' for none")] = AUTO,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    data_dir: Annotated[str | None, typer.Option("--data-dir")] = None,
    from_samples: Annotated[str | None, typer.Option(
        "--from-samples", help="label the completions `coreward eval` wrote (its output directory or "
        "samples.parquet, e.g. sampled fast with --backend vllm) instead of sampling a --policy")] = None,
    samples_per_problem: Annotated[int | None, typer.Option(
        "--samples-per-problem", min=1, help="with --from-samples: only each problem's first K samples")] = None,
    pairs_only: Annotated[bool, typer.Option(
        "--pairs-only", help="keep only the rows of problems with both a right and a wrong completion (the rows a "
        "pair accuracy reads: a held-out file for Cooper's eval_data)")] = False,
) -> None:
    """Sample a policy's completions and label them by rule verifier (+ LLM judge) agreement.

    Example: coreward rm annotate --policy demo --data demo --limit 100 --output runs/rm/rows.jsonl
    """
    if (policy is None) == (from_samples is None):
        raise CorewardError("give one of --policy (sample its completions) or --from-samples (label an eval's)")
    if samples_per_problem is not None and from_samples is None:
        raise CorewardError("--samples-per-problem picks among an eval's samples: give --from-samples (with --policy, "
                            "--n sets how many are sampled)")
    from coreward.data.benchmarks import default_instruction
    from coreward.data.sources import load_named, parse_columns
    from coreward.llm import build_generator
    from coreward.rm.annotate import annotate as run_annotation
    from coreward.rm.annotate import label_rows, pair_rows, rows_from_eval_samples, write_rows
    from coreward.verify import get_verifier

    records = load_named(data, split, limit, data_dir, key="--data", columns=parse_columns(columns))
    judge_model = build_generator(judge) if judge else None
    try:
        if from_samples is not None:  # label what `coreward eval` wrote: nothing is sampled
            rows, report = label_rows(rows_from_eval_samples(from_samples, records, samples_per_problem),
                                      get_verifier(), judge_model)
        else:
            if instruction == AUTO:
                instruction = default_instruction(data)
            with _policy_generator(policy, batch_size) as generator:
                rows, report = run_annotation(generator, records, n, get_verifier(), judge_model, temperature,
                                              max_tokens, seed, instruction or None)
    finally:
        if judge_model is not None:
            judge_model.close()
    if pairs_only:
        labelled = len(rows)
        rows = pair_rows(rows)
        report.kept, report.positives = len(rows), sum(row["label"] for row in rows)
        report.negatives = len(rows) - report.positives
        typer.echo(f"--pairs-only: {len(rows)} of {labelled} labelled rows are of problems with both a right and a "
                   "wrong completion")
        if not rows:
            raise CorewardError(f"--pairs-only: no problem of --data {data} has both a right and a wrong completion; "
                                f"nothing to write to {output}")
    write_rows(rows, output)
    Path(f"{output}.report.json").write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    typer.echo(report.text())
    typer.echo(f"wrote {output} and {output}.report.json")


def eval_command(
    data: Annotated[str, typer.Option("--data", help="labelled .jsonl/.parquet (question, reference_answer, "
                                      "completion, label)")],
    rm: Annotated[list[str] | None, typer.Option("--rm", help="scorer: an RM directory, 'demo' (the demo RM) or "
                                                 "'rule' (the rule verifier); repeat for a side-by-side table")] = None,
    threshold: Annotated[float, typer.Option(
        "--threshold", help="an RM predicts correct when σ(logit) > this")] = 0.5,
    device: Annotated[str, typer.Option("--device")] = AUTO,
    batch_size: Annotated[int, typer.Option("--batch-size")] = 64,
    limit: Annotated[int | None, typer.Option("--limit")] = None,
    output: Annotated[str | None, typer.Option("--output", help="also write the metrics as JSON")] = None,
    combine: Annotated[str | None, typer.Option(
        "--combine", help="also a column of the --rm RMs' scores combined per row, min or mean (as the `model` "
        "reward's ensemble of them scores)")] = None,
    judge: Annotated[str | None, typer.Option(
        "--judge", help="also an LLM judge (the `judge` reward's verifier): an endpoint URL#model, a model "
        "directory or hub id; adds the columns 'judge' and 'hybrid' (the rule where it accepts, else the judge)")] = None,
    judge_format: Annotated[str, typer.Option(
        "--judge-format", help="the judge's prompt and verdict format: plain, xverify, compassverifier, "
        "compassverifier_cot, general_verifier")] = "plain",
    judge_template: Annotated[str | None, typer.Option(
        "--judge-template", help="a file holding the format's prompt: needed for xverify and general_verifier, whose "
        "authors' licences keep their prompts out of coreward (their repository's file, or a text file of it)")] = None,
) -> None:
    """Accuracy, precision, recall and F1 of RMs, the rule verifier and an LLM judge on the same labelled set.

    Example: coreward rm eval --data runs/rm/rows.jsonl --rm rule --rm demo --judge http://localhost:8000/v1#model

    pair_acc ranks each question's right completions above its wrong ones (Cooper's held-out check; ties count
    half). With --combine min and several --rm, a column scores as the `model` reward's ensemble of them does.
    """
    from coreward.rm.evaluate import check_combine, evaluate_verifiers
    from coreward.rm.judge import Judge

    if not rm and not judge:
        raise CorewardError("give a scorer: --rm (an RM, 'demo' or 'rule', repeatable) and/or --judge")
    check_combine(combine, rm or [])
    verifier = Judge(judge, judge_format, template=judge_template, key="--judge",
                     template_key="--judge-template") if judge else None
    if verifier is not None:
        verifier.check()  # a template missing, a judge endpoint that is down: exit 2 before any RM loads
    try:
        report = evaluate_verifiers(data, rm or [], threshold, device, batch_size, limit, judge=verifier,
                                    combine=combine)
    finally:
        if verifier is not None:
            verifier.close()
    typer.echo(f"{data}: {next(iter(report.results.values()))['n']} labelled rows")
    typer.echo(report.table())
    if report.judge_failures:
        typer.echo(f"the judge gave no verdict on {report.judge_failures} rows (predicted incorrect)")
    if output:
        Path(output).write_text(json.dumps(report.results, indent=2) + "\n")


def register(app: typer.Typer) -> None:
    """Attach the `rm` command group to the main app."""
    rm_app = typer.Typer(help="The reference-based reward model (VerifyRM): train, annotate data, evaluate.",
                         no_args_is_help=True)
    rm_app.command("train")(train_command)
    rm_app.command("annotate")(annotate_command)
    rm_app.command("eval")(eval_command)
    app.add_typer(rm_app, name="rm")


def _policy_generator(policy: str, batch_size: int):
    from coreward.llm import build_generator

    if policy.startswith(("http://", "https://")):
        return build_generator(policy)
    policy = resolve_model(policy, "policy", key="--policy")
    return build_generator({"backend": "hf", "model_name_or_path": policy, "batch_size": batch_size})


def _metrics_line(name: str, metrics: dict[str, float]) -> str:
    shown = ", ".join(f"{k} {metrics[k]:.4f}" for k in ("accuracy", "precision", "recall", "f1") if k in metrics)
    return f"{name}: {shown}"
