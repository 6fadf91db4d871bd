"""The documentation site builds with strict warnings (a broken link or anchor fails), its generated config
reference covers every key of every config with help text, its commands parse, and its figures are dated."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import subprocess
import sys
import typing

import pytest

from tests.helpers.markdown_checks import (
    NARRATION,
    REPO,
    check_command_list,
    command_list,
    commands,
    named_files,
    parse_command,
)


DOCS = REPO / "docs"
PAGES = sorted(DOCS.glob("*.md"))


def generator():
    spec = importlib.util.spec_from_file_location("gen_config_reference", DOCS / "gen_config_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_build_strictly(tmp_path):
    # mkdocs comes with the test extra: a missing mkdocs is a failure here, never a skip
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(REPO / "mkdocs.yml"),
                             "-d", str(tmp_path / "site")], cwd=REPO, capture_output=True, text=True,
                            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    page = (tmp_path / "site" / "reference" / "config" / "index.html").read_text()
    assert "rewards.N.params" in page and "alpha_start" in page
    for md in PAGES:
        assert (tmp_path / "site" / (md.stem if md.stem != "index" else "")).exists(), md.name


def test_config_reference_lists_every_key_with_help():
    gen = generator()
    page = gen.render()
    from coreward.rewards import registered_sources

    for _, _, cls, _ in gen.config_classes():
        for key, *_ in gen.rows(cls):
            assert f"| `{key}` |" in page, key
    for name, cls in registered_sources().items():
        assert f"#### `{name}`" in page
        for f in dataclasses.fields(cls.Params):
            assert f"| `params.{f.name}` |" in page, (name, f.name)
    assert gen.missing_help() == [], "add a comment beside these fields (their help in the config reference)"


def test_config_reference_reads_types_defaults_and_comments():
    from coreward.grpo.config import TrainConfig

    gen = generator()
    rows = {key: (tp, default, text) for key, tp, default, text in gen.rows(TrainConfig)}
    params = {name: {key: (tp, default) for key, tp, default, _ in section} for name, _, section in gen.reward_sections()}
    assert params["co_rewarding_1"]["params.view_loss"] == ('"joint" \\| "per_view"', '`"joint"`')
    assert rows["verifier.max_completion_chars"][1] == "`100000`"
    assert "truncated_completions" in rows["verifier.max_completion_chars"][2]  # the comment above the field
    assert rows["rewards.N.name"][1] == "required"


def test_help_written_in_the_generator_names_real_fields():
    gen = generator()
    classes, stack = {}, [cls for _, _, cls, _ in gen.config_classes()]
    while stack:  # every dataclass reachable from the configs: sections and list items (rewards: [RewardSpec])
        cls = stack.pop()
        classes[cls.__name__] = cls
        for tp in typing.get_type_hints(cls).values():
            stack += [t for t in (tp, *typing.get_args(tp)) if dataclasses.is_dataclass(t)]
    for entry in gen.WRITTEN_HERE:
        owner, _, name = entry.partition(".")
        assert owner in classes and name in {f.name for f in dataclasses.fields(classes[owner])}, entry


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_docs_commands_parse_and_files_exist(page):
    text = page.read_text()
    for command in commands(text):
        code, output = parse_command(command)
        assert code == 0, f"{page.name}: coreward {command}\n{output}"
    missing = sorted(p for p in named_files(text) if not (REPO / p).exists())
    assert not missing, (page.name, missing)


def test_docs_command_lists_name_every_command_and_only_real_options():
    lists = {page.name: command_list(page.read_text()) for page in PAGES}
    assert lists["getting-started.md"]  # the command list of the docs
    for name, lines in lists.items():
        assert not lines or check_command_list(lines) == [], name


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_docs_date_figures_instead_of_narrating(page):
    assert not NARRATION.findall(page.read_text()), page.name
