"""How coreward runs a typer app as a command: usage errors are click's (exit 2); a CorewardError is one clear
line and exit 2; a user's code that raised (runtime/user_code.py) is one line naming it, then its own frames, exit 2;
Ctrl-C (runtime/interrupt.py) is one line saying what it stopped and how to continue, exit 130.
`coreward` itself (coreward/cli.py) and a training run forked by `coreward demo` / `coreward map`
(experiments/jobs.py, through grpo/cli.py `run_train`) both go through here, so they fail the same way."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import typer

from coreward.runtime.errors import CorewardError
from coreward.runtime.interrupt import Interrupted, catch_ctrl_c
from coreward.runtime.quiet import quiet_libraries
from coreward.runtime.user_code import DEBUG_ENV, UserCodeError, as_user_code_error, debug_enabled


def resume_mode(resume: bool, resume_if_any: bool) -> bool | str:
    """A command's `--resume` / `--resume-if-any` as the `resume=` of `coreward train` and `coreward rm train`
    (runtime/checkpoints.py `RESUME_IF_ANY`); both at once is a usage error."""
    from coreward.runtime.checkpoints import RESUME_IF_ANY

    if resume and resume_if_any:
        raise typer.BadParameter("pass one of them: --resume (a checkpoint must be there) or --resume-if-any",
                                 param_hint="--resume / --resume-if-any")
    return RESUME_IF_ANY if resume_if_any else resume


def run_app(app: typer.Typer, arguments: Sequence[str] | None = None) -> None:
    """Run `app` on `arguments` (None: sys.argv[1:]); it exits through SystemExit with the command's status."""
    quiet_libraries()
    catch_ctrl_c()  # `kill -INT` stops a command started with SIGINT ignored (a script's `coreward ... &`) too
    try:
        app(args=None if arguments is None else list(arguments), prog_name="coreward")
    except SystemExit as done:  # typer turns a KeyboardInterrupt into exit 130, silently: one line says what stopped
        stop = interrupt_behind(done)
        if stop is not None:
            sys.stdout.flush()
            typer.echo(stop.line() if isinstance(stop, Interrupted) else "stopped by Ctrl-C", err=True)
        raise
    except CorewardError as err:
        report_error(err)
        sys.exit(2)
    except Exception as err:  # coreward's own failure keeps Python's traceback (exit 1); the user's code is theirs
        user = as_user_code_error(err)
        if user is None:
            raise
        report_error(user)
        sys.exit(2)


def interrupt_behind(error: BaseException) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt that `error` was raised from or while handling, if any; a command that said what
    stopped it already raised its exit `from None`, which ends the chain."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, KeyboardInterrupt):
            return error
        seen.add(id(error))
        error = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    return None


def report_error(err: CorewardError) -> None:
    """The error's line on stderr; for a user's code, their frames after it (the whole traceback with --debug)."""
    sys.stdout.flush()
    if isinstance(err, UserCodeError) and debug_enabled():
        typer.echo(err.full_traceback().rstrip(), err=True)
    typer.secho(f"error: {err}", fg=typer.colors.RED, err=True)
    if isinstance(err, UserCodeError) and not debug_enabled():
        frames = err.frames_text().rstrip()
        if frames:
            typer.echo(f"{frames}\n(the frames of your code; --debug or {DEBUG_ENV}=1 prints the whole traceback)",
                       err=True)
