"""Command `coreward plan`: the memory plan of a training run (grpo/plan/), without loading any weights."""

from __future__ import annotations

import json
from typing import Optional

import typer

from coreward.grpo.cli import CONFIG_HELP, SET_HELP


# the exit status of a plan over the device's memory (the plan is printed all the same): distinct from 0 (fits), 1
# (coreward's own failure) and 2 (bad input: click's usage errors, CorewardError), so a script can tell them apart
DOES_NOT_FIT = 3


def plan_command(
    config: str = typer.Option(..., "--config", help=CONFIG_HELP),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP),
    gpus: Optional[int] = typer.Option(None, "--gpus", help="GPUs (processes) the run trains on (default: the "
                                       "config's `# gpus: N x SIZE` comment, else 1)"),
    gpu_memory: Optional[str] = typer.Option(None, "--gpu-memory", help="memory of one GPU, with its unit, e.g. "
                                             "80GiB, 24GB, 81920MiB (default: the config's `# gpus:` comment, else "
                                             "80GiB); with --device cpu, the RAM"),
    engine: Optional[str] = typer.Option(None, "--engine", help="one | ddp | fsdp2 | zero2 | zero3 (default: the "
                                         "config's `# engine:` comment, else one process / DDP)"),
    device: str = typer.Option("cuda", "--device", help="cuda: plan for the GPUs above; cpu: this machine's RAM, "
                               "one process, as `coreward train` runs here (its peak resident memory)"),
    as_json: bool = typer.Option(False, "--json", help="print the plan as JSON (peak_bytes, device_bytes, fits, "
                                 "peak_phase, items, suggestions; where nothing fits with 10% to spare, near and "
                                 "fewest_gpus)"),
    lengths: str = typer.Option("worst", "--lengths", help="worst: every completion at grpo.max_completion_length; "
                                "data: the completions a run logged (--from-run), beside the worst case; prompts are "
                                "the training data's longest in tokens either way (data.max_prompt_tokens if smaller)"),
    from_run: Optional[str] = typer.Option(None, "--from-run", help="with --lengths data: the run directory whose "
                                           "metrics.jsonl gives the completions' length (default: the config's "
                                           "output_dir)"),
    percentile: float = typer.Option(100.0, "--percentile", help="with --lengths data: plan at this percentile of "
                                     "the logged steps' longest completion (100: the longest of all)"),
) -> None:
    """Predict the peak memory per device of one training step, item by item, from the models' config.json only.

    Example: coreward plan --config configs/paper/cooper_gsm8k_qwen2.5-1.5b.yaml --gpus 1 --gpu-memory 80GiB

    Exit status: 0 the plan fits; 3 it does not fit (printed all the same, --json too); 2 bad input.
    """
    from coreward.grpo.config import as_train_config
    from coreward.grpo.plan import plan_with_suggestions, processes, resolve_hardware
    from coreward.runtime.errors import CorewardError

    if device not in ("cuda", "cpu"):
        raise CorewardError(f"--device must be cuda or cpu, got {device!r}")
    if lengths not in ("worst", "data"):
        raise CorewardError(f"--lengths must be worst or data, got {lengths!r}")
    if not 0 < percentile <= 100:
        raise CorewardError(f"--percentile must be in (0, 100], got {percentile:g}")
    hardware = resolve_hardware(config, gpus, gpu_memory, engine, device)
    with processes(hardware):  # the config's batch checks count every planned process
        train_config = as_train_config(config, set_)
    prompts = data_prompt_bound(train_config, even_with_limit=lengths == "data")
    if lengths == "data":
        plan = plan_from_data(train_config, hardware, prompts, from_run or train_config.output_dir, percentile)
    else:
        plan = plan_with_suggestions(train_config, hardware, prompts)
    if as_json:
        typer.echo(json.dumps(plan.to_json(), indent=2))
    else:
        typer.echo(plan.render())
    if not plan.fits:
        raise typer.Exit(DOES_NOT_FIT)


def plan_from_data(train_config, hardware, prompts: int | None, run_dir: str, percentile: float):
    """The plan at the completions' length `run_dir` logged (the worst case's peak beside it); without logs, the
    worst case, and a note saying so."""
    from coreward.grpo.plan import logged_completion_tokens, plan_run, plan_with_suggestions

    completions = logged_completion_tokens(run_dir, percentile)
    plan = plan_with_suggestions(train_config, hardware, prompts, completions)
    plan.worst_case_peak_bytes = plan_run(train_config, hardware, prompts).peak_bytes
    if completions is None:
        plan.notes.append(f"--lengths data: {run_dir} has no logged completions (metrics.jsonl): completions planned "
                          "at grpo.max_completion_length")
    return plan


def data_prompt_bound(config, even_with_limit: bool = False) -> int | None:
    """What `coreward train` bounds the prompts by when data.max_prompt_tokens is unset: the training data's longest
    prompt in the policy's tokens where its tokenizer is at hand, else in characters (`prompt_token_bound`), so `coreward plan` plans the run `coreward train` will plan. None when the limit is
    set (it decides) or the data can't be read here (a hub dataset offline: the plan then assumes 256 tokens, and
    says so)."""
    if config.data.max_prompt_tokens is not None and not even_with_limit:
        return None
    from coreward.grpo.plan import data_tokenizer, prompt_token_bound
    from coreward.grpo.train import build_train_dataset, resolve_prompt_format
    from coreward.runtime.assets import resolve_model
    from coreward.runtime.errors import CorewardError

    try:
        dataset = build_train_dataset(resolve_prompt_format(config))
    except (CorewardError, OSError, ValueError):
        return None
    if "prompt" not in dataset.column_names:
        return None
    try:
        tokenizer = data_tokenizer(resolve_model(config.model.name_or_path, "policy", key="model.name_or_path"),
                                   config.model.trust_remote_code)
    except CorewardError:  # the model can't be found here: the plan reads its shape elsewhere, or says why not
        tokenizer = None
    return prompt_token_bound(dataset["prompt"], tokenizer)


def register(app: typer.Typer) -> None:
    """Attach `plan` to the main app."""
    app.command("plan")(plan_command)
