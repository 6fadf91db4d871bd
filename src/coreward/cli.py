"""The `coreward` command line: one typer app; each subpackage registers its own commands.

Heavy libraries (torch, transformers, trl) are imported inside the command bodies so that
`coreward --help` and `coreward verify` start fast.
"""

from __future__ import annotations

import typer

from coreward.runtime.commands import run_app


def _flags_without_a_type(option_class) -> None:
    """typer 0.2x's rich help prints a type after every option, `--resume <bool>` and `--help <bool>` included,
    as if a flag took a value; a flag shows none (presentation only: parsing is click's, untouched)."""
    shown = getattr(option_class, "display_type_rich", None)
    if shown is None:  # an older typer (the range pyproject.toml admits) prints no type there
        return

    def display_type_rich(self, ctx):
        return None if getattr(self, "is_flag", False) else shown(self, ctx)

    option_class.display_type_rich = display_type_rich


_flags_without_a_type(typer.core.TyperOption)

app = typer.Typer(
    name="coreward",
    help="RL for LLM reasoning with co-optimized (Cooper) and co-derived (Co-rewarding) rewards.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _register_all() -> None:
    from coreward.data import cli as data_cli
    from coreward.data import rephrase_cli
    from coreward.demo import cli as demo_cli
    from coreward.evaluation import cli as evaluation_cli
    from coreward.evaluation import compare_cli
    from coreward.experiments import cli as map_cli
    from coreward.grpo import cli as grpo_cli
    from coreward.grpo import plan_cli
    from coreward.rm import cli as rm_cli
    from coreward.verify import cli as verify_cli

    data_cli.register(app)
    rephrase_cli.register(app)
    verify_cli.register(app)
    grpo_cli.register(app)
    plan_cli.register(app)
    demo_cli.register(app)
    evaluation_cli.register(app)
    compare_cli.register(app)
    map_cli.register(app)
    rm_cli.register(app)


_register_all()


def main() -> None:
    """Entry point: usage errors are click's (exit 2); a CorewardError is one clear line and exit 2."""
    run_app(app)


if __name__ == "__main__":
    main()
