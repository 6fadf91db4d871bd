"""The command line as a newcomer meets it: help that reads right, defaults that fit the model given."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from coreward.cli import app


COMMANDS = [["train"], ["demo"], ["sft"], ["eval"], ["report"], ["map"], ["verify"], ["rephrase"], ["push"],
            ["rm", "train"], ["rm", "annotate"], ["rm", "eval"], ["data", "list"], ["data", "show"], ["data", "export"]]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_shows_flags_without_fake_arguments(command):
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.output and "--help" in result.output


def test_eval_of_the_demo_policy_defaults_to_the_demo_task(tmp_path):
    from coreward.evaluation.evaluate import evaluate

    results = evaluate("demo", n=1, limit=2, temperature=0.0, output_dir=tmp_path)
    assert list(results.benchmarks) == ["demo"]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_shows_an_example_that_parses(command):
    import re
    import shlex

    help_text = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "400"}).output
    examples = re.findall(r"Examples?: (coreward [^│\n]+)", help_text)
    assert examples, f"coreward {' '.join(command)} --help shows no example"
    for example in examples:
        args = shlex.split(example.strip())[1:]
        result = CliRunner().invoke(app, [*args, "--help"])
        assert result.exit_code == 0, f"{example}\n{result.output}"
