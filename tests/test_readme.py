"""The README is a front page: short, with the sections a newcomer looks for, a methods table that matches the
registry and links each method to its docs section, which of the papers' findings reproduce, commands the CLI accepts, a config that loads, and links and
files that exist. The detail lives in the docs site (tests/test_docs.py)."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.helpers.markdown_checks import (
    NARRATION,
    REPO,
    anchors,
    check_command_list,
    command_list,
    commands,
    local_links,
    named_files,
    parse_command,
)


README = (REPO / "README.md").read_text()
SECTIONS = ["Two commands", "Methods", "The command line", "A config", "Python",
            "Running the papers' settings on GPUs", "What the demo and the map show", "Documentation"]


def test_readme_is_a_front_page():
    assert len(README.splitlines()) <= 250
    headings = re.findall(r"^## (.+)$", README, re.M)
    assert headings == SECTIONS
    assert "bash .ci/run" in README and "python -m pip install -e . && coreward demo" in README


@pytest.mark.parametrize("command", commands(README))
def test_readme_command_parses(command):
    code, output = parse_command(command)
    assert code == 0, f"coreward {command}\n{output}"


def test_readme_command_list_names_every_command_and_only_real_options():
    lines = command_list(README)
    assert lines and check_command_list(lines) == []


def test_readme_names_files_and_links_that_exist():
    missing = sorted(p for p in named_files(README) if not (REPO / p).exists())
    assert not missing, missing
    for path, anchor in local_links(README):
        assert (REPO / path).exists(), path
        if anchor:
            assert anchor in anchors(REPO / path), f"{path}#{anchor}"
    assert len(commands(README)) >= 4


def test_methods_table_matches_the_registry_and_links_each_method():
    from coreward.rewards import builtin_methods  # not every registered source: tests register their own

    section = README.split("## Methods", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)`.*\[\w+\]\((docs/methods\.md#[\w-]+)\) \|$", section, re.M)
    assert sorted(name for name, _ in rows) == sorted(cls.name for cls in builtin_methods())
    methods_anchors = anchors(REPO / "docs" / "methods.md")
    assert all(link.split("#")[1] in methods_anchors for _, link in rows)


def test_readme_config_loads():
    from coreward.grpo.config import TrainConfig
    from coreward.runtime.config import build

    blocks = re.findall(r"```yaml\n(.*?)```", README, re.S)
    assert blocks
    for block in blocks:
        config = build(TrainConfig, yaml.safe_load(block))
        assert config.rewards and config.grpo


def test_readme_dates_figures_instead_of_narrating():
    assert not NARRATION.findall(README)
