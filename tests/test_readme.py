"""The README is a front page read in three minutes: at most 120 lines of at most 160 characters, the sections a
newcomer looks for, a methods table that matches the registry and links each method to its reference, a "which to
pick" of at most 8 lines whose every pick links its row of the results page, commands the CLI accepts, links and files
that exist, and no dated measurement nor commit id (those live in docs/results.md and docs/figures.md). The detail
lives in the docs site (tests/test_docs.py)."""

from __future__ import annotations

import re

import pytest

from tests.helpers.markdown_checks import (
    NARRATION,
    REPO,
    anchors,
    commands,
    local_links,
    named_files,
    parse_command,
)


README = (REPO / "README.md").read_text()
SECTIONS = ["Two commands", "Methods", "GPUs and several machines", "Documentation"]


def test_readme_is_a_front_page():
    lines = README.splitlines()
    assert len(lines) <= 120
    assert [n for n, line in enumerate(lines, 1) if len(line) > 160] == []
    headings = re.findall(r"^## (.+)$", README, re.M)
    assert headings == SECTIONS
    assert "bash .ci/run" in README and "python -m pip install -e . && coreward demo" in README
    # the two commands' times link to where they were measured
    assert "figures.md#the-demo" in README and "figures.md#the-test-suite" in README


def test_which_to_pick_is_short_and_links_each_pick_to_its_result():
    section = [line for line in README.split("**Which to pick**", 1)[1].split("\n\n## ", 1)[0].splitlines() if line]
    assert len(section) <= 8
    picks = [line for line in section if line.startswith("- ")]
    assert len(picks) >= 4
    for pick in picks:
        assert "docs/results.md#" in pick, pick
        item = section[section.index(pick):]
        text = " ".join([item[0]] + [line for line in item[1:] if line.startswith("  ")][:2])
        # what the pick rests on: its seeds, or that it rests on no measurement
        assert re.search(r"\d+ seeds|not on a demo measurement", text), pick


def test_readme_holds_no_date_nor_commit_id():
    assert not re.findall(r"\b20\d\d-\d\d-\d\d\b", README)
    assert not re.findall(r"\b(?:commits?|at|of|in) (?=\d*[a-f])[0-9a-f]{7,40}\b", README)


@pytest.mark.parametrize("command", commands(README))
def test_readme_command_parses(command):
    code, output = parse_command(command)
    assert code == 0, f"coreward {command}\n{output}"


def test_readme_names_files_and_links_that_exist():
    missing = sorted(p for p in named_files(README) if not (REPO / p).exists())
    assert not missing, missing
    for path, anchor in local_links(README):
        assert (REPO / path).exists(), path
        if anchor:
            assert anchor in anchors(REPO / path), f"{path}#{anchor}"
    assert len(commands(README)) >= 3


def test_methods_table_matches_the_registry_and_links_each_method():
    from coreward.rewards import builtin_methods  # not every registered source: tests register their own

    section = README.split("## Methods", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)`.*\[\w+\]\((docs/reference/methods\.md#[\w-]+)\) \|$", section, re.M)
    assert sorted(name for name, _ in rows) == sorted(cls.name for cls in builtin_methods())
    methods_anchors = anchors(REPO / "docs" / "reference" / "methods.md")
    assert all(link.split("#")[1] in methods_anchors for _, link in rows)


def test_readme_dates_figures_instead_of_narrating():
    assert not NARRATION.findall(README)
