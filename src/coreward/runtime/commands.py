"""How coreward runs a typer app as a command: usage errors are click's (exit 2); a CorewardError is one clear
line and exit 2; a user's code that raised (runtime/user_code.py) is one line naming it, then its own frames, exit 2.
`coreward` itself (coreward/cli.py) and a training run forked by `coreward demo` / `coreward map`
(experiments/jobs.py, through grpo/cli.py `run_train`) both go through here, so they fail the same way."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import typer

from coreward.runtime.errors import CorewardError
from coreward.runtime.quiet import quiet_libraries
from coreward.runtime.user_code import DEBUG_ENV, UserCodeError, as_user_code_error, debug_enabled


def run_app(app: typer.Typer, arguments: Sequence[str] | None = None) -> None:
    """Run `app` on `arguments` (None: sys.argv[1:]); it exits through SystemExit with the command's status."""
    quiet_libraries()
    try:
        app(args=None if arguments is None else list(arguments), prog_name="coreward")
    except CorewardError as err:
        report_error(err)
        sys.exit(2)
    except Exception as err:  # coreward's own failure keeps Python's traceback (exit 1); the user's code is theirs
        user = as_user_code_error(err)
        if user is None:
            raise
        report_error(user)
        sys.exit(2)


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
