"""How coreward runs a typer app as a command: usage errors are click's (exit 2); a CorewardError is one clear
line and exit 2. `coreward` itself (coreward/cli.py) and a training run forked by `coreward demo` / `coreward map`
(experiments/jobs.py, through grpo/cli.py `run_train`) both go through here, so they fail the same way."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import typer

from coreward.runtime.errors import CorewardError
from coreward.runtime.quiet import quiet_libraries


def run_app(app: typer.Typer, arguments: Sequence[str] | None = None) -> None:
    """Run `app` on `arguments` (None: sys.argv[1:]); it exits through SystemExit with the command's status."""
    quiet_libraries()
    try:
        app(args=None if arguments is None else list(arguments), prog_name="coreward")
    except CorewardError as err:
        typer.secho(f"error: {err}", fg=typer.colors.RED, err=True)
        sys.exit(2)
