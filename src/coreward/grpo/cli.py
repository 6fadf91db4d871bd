"""Command `coreward train`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


CONFIG_HELP = "YAML config file"
SET_HELP = "override a config key, e.g. --set grpo.learning_rate=1e-6 (repeatable)"


def train_command(
    config: str = typer.Option(..., "--config", help=CONFIG_HELP),
    set_: list[str] = typer.Option([], "--set", help=SET_HELP),
    output_dir: Optional[str] = typer.Option(None, "--output-dir", help="run directory (default: the config's output_dir)"),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", help="stop after this many optimizer steps"),
    resume: bool = typer.Option(False, "--resume", help="continue from the run directory's newest complete "
                                "checkpoint; a directory without one is an error that says what it holds"),
    resume_if_any: bool = typer.Option(False, "--resume-if-any", help="continue from the newest complete checkpoint "
                                       "if there is one, else start: for a job a scheduler may start again"),
    allow_config_change: bool = typer.Option(False, "--allow-config-change",
                                             help="with --resume: accept a config that differs from the run's"),
    no_plan_check: bool = typer.Option(False, "--no-plan-check", help="train even where the memory plan (`coreward "
                                       "plan`) exceeds the GPU's memory (refused before any weights load otherwise)"),
    debug: bool = typer.Option(False, "--debug", help="when your reward code raises, print the whole traceback "
                               "(not only your code's frames); the same as COREWARD_DEBUG=1"),
) -> None:
    """Run GRPO with the configured reward sources.

    Example: coreward train --config configs/demo/cooper.yaml --max-steps 10 --output-dir runs/try
    """
    from coreward.grpo.config import as_train_config
    from coreward.grpo.train import run_training
    from coreward.runtime.commands import resume_mode
    from coreward.runtime.distributed import exit_now, leave_process_group, print_once

    if debug:  # read where the error is reported (runtime/commands.py), in this process and the ones it starts
        import os

        from coreward.runtime.user_code import DEBUG_ENV

        os.environ[DEBUG_ENV] = "1"
    resume = resume_mode(resume, resume_if_any)
    train_config = as_train_config(config, set_)
    try:
        result = run_training(train_config, output_dir=output_dir, max_steps=max_steps,
                              resume=resume, allow_config_change=allow_config_change,
                              plan_check=not no_plan_check)
        distributed = leave_process_group()
    except KeyboardInterrupt as stop:  # during training, the first Ctrl-C stops after the step (below), not here
        print_once(interrupted_line(stop, Path(output_dir or train_config.output_dir)))
        raise typer.Exit(130) from None
    code = 0
    if result.preempted:
        from coreward.grpo.preemption import PREEMPTED_EXIT

        print_once(f"stopped by {result.stopped_by or 'a preemption signal'} after step {result.global_step} "
                   "(complete checkpoint written); continue with --resume")
        code = PREEMPTED_EXIT
    elif result.guard_stopped:
        best = result.run_dir / "best"
        print_once(f"stopped by the overoptimization guard at step {result.global_step}; final model in "
                   f"{result.final_model}" + (f", the best one in {best}" if best.is_dir() else ""))
    else:
        print_once(f"finished at step {result.global_step}; final model in {result.final_model}")
    if distributed:
        exit_now(code)
    if code:
        raise typer.Exit(code)


def push_command(
    run_dir: str = typer.Argument(..., help="a finished run directory (with final/)"),
    repo: str = typer.Option(..., "--repo", help="hub repository of the policy, e.g. me/qwen-grpo; each model a "
                             "reward source learnt goes to REPO-<name> (an RM to REPO-rm)"),
    private: bool = typer.Option(False, "--private", help="create private repositories"),
    dtype: str = typer.Option(None, "--dtype", help="publish the policy cast to bfloat16 or float16 (final/ keeps "
                              "the trained float32 weights; the cast copy is written to final-DTYPE/)"),
) -> None:
    """Publish a run: the policy with its model card, and the models its reward sources learnt.

    Example: coreward push runs/paper/cooper_gsm8k --repo me/qwen2.5-1.5b-cooper --private
    """
    from pathlib import Path

    from coreward.grpo.publish import push as push_run

    for url in push_run(Path(run_dir), repo, private=private, dtype=dtype):
        typer.echo(url)


def register(app: typer.Typer) -> None:
    """Attach `train` and `push` to the main app."""
    app.command("train")(train_command)
    app.command("push")(push_command)


def run_train(arguments: list[str]) -> None:
    """`coreward train ARGUMENTS` in this process, as the command line runs it (its output, its exit status): how a
    run forked by `coreward demo` or `coreward map` starts (experiments/jobs.py)."""
    from coreward.runtime.commands import run_app

    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command("train")(train_command)
    app.command("push")(push_command)  # two commands: typer keeps `train` as a subcommand, as `coreward train`
    run_app(app, arguments)


def interrupted_line(stop: KeyboardInterrupt, run_dir: Path) -> str:
    """What a Ctrl-C that stopped `coreward train` at once stopped, which one it was, and how to continue: a long
    phase before training (building a demo model) says what it kept; a second Ctrl-C during training is named so."""
    from coreward.runtime.interrupt import Interrupted, ctrl_c_count

    if isinstance(stop, Interrupted):
        return stop.line()
    which = "a second Ctrl-C" if ctrl_c_count() > 1 else "Ctrl-C"
    return f"stopped at once by {which}; {how_to_continue(run_dir)}"


def how_to_continue(run_dir: Path) -> str:
    """After a run stopped at once: `--resume` from its newest complete checkpoint, or, with none written, that the run
    starts again (`--resume` would be refused there)."""
    from coreward.grpo.checkpoints import last_complete_checkpoint

    newest = last_complete_checkpoint(run_dir) if run_dir.is_dir() else None
    if newest is not None:
        return f"continue with --resume from the newest complete checkpoint ({newest})"
    return f"no complete checkpoint was written in {run_dir}: run the same command again to start over"
