"""The documentation site builds with strict warnings (a broken link or anchor fails), lists every page in its nav
and on its home page, its generated references cover every config key and every command and option, its commands
parse, and its guides hold no dated measurement (those live on the results and figures pages)."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
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
PAGES = sorted(DOCS.rglob("*.md"))
GENERATED = ["reference/config.md", "reference/cli.md"]  # made by the mkdocs hooks at build time
# the pages that hold dated measurements: findings (results.md), timings (figures.md), the plan of the runs that
# decide the open findings (preregistration.md)
DATED = {"results.md", "figures.md", "preregistration.md"}


def page_name(page) -> str:
    return page.relative_to(DOCS).as_posix()


def generator(module_name: str = "gen_config_reference"):
    spec = importlib.util.spec_from_file_location(module_name, DOCS / f"{module_name}.py")
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
    for md in PAGES:  # a page's folder in the site: tutorials/demo.md is site/tutorials/demo/
        built = tmp_path / "site" / md.relative_to(DOCS).with_suffix("")
        assert (built if md.stem != "index" else built.parent).exists(), page_name(md)
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text()
    assert "coreward rm annotate" in cli and "--resume-if-any" in cli


def test_nav_and_home_page_list_every_page():
    import yaml

    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]

    def pages(entries):
        for entry in entries:
            value = next(iter(entry.values())) if isinstance(entry, dict) else entry
            yield from pages(value) if isinstance(value, list) else [value]

    in_nav = sorted(pages(nav))
    on_disk = sorted([page_name(p) for p in PAGES] + GENERATED)
    assert in_nav == on_disk
    home = (DOCS / "index.md").read_text()
    linked = set(re.findall(r"\]\(([\w/.-]+\.md)(?:#[\w-]+)?\)", home))
    assert sorted(set(on_disk) - {"index.md"} - linked) == []


def test_cli_reference_lists_every_command_and_option():
    gen = generator("gen_cli_reference")
    page = gen.render()
    for path, command, _ in gen.commands():
        assert f"`{path}`" in page, path
        for param in command.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("--"):
                    assert opt in page, (path, opt)


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


@pytest.mark.parametrize("page", PAGES, ids=page_name)
def test_docs_commands_parse_and_files_exist(page):
    text = page.read_text()
    for command in commands(text):
        code, output = parse_command(command)
        assert code == 0, f"{page_name(page)}: coreward {command}\n{output}"
    missing = sorted(p for p in named_files(text) if not (REPO / p).exists())
    assert not missing, (page_name(page), missing)


def test_docs_command_lists_name_every_command_and_only_real_options():
    lists = {page_name(page): command_list(page.read_text()) for page in PAGES}
    assert lists["tutorials/getting-started.md"]  # the command list a newcomer reads first
    for name, lines in lists.items():
        assert not lines or check_command_list(lines) == [], name


def test_getting_started_config_loads():
    """The config a newcomer copies first is a whole, valid training config."""
    import yaml

    from coreward.grpo.config import TrainConfig
    from coreward.runtime.config import build

    blocks = re.findall(r"```yaml\n(.*?)```", (DOCS / "tutorials" / "getting-started.md").read_text(), re.S)
    assert blocks
    for block in blocks:
        config = build(TrainConfig, yaml.safe_load(block))
        assert config.rewards and config.grpo


@pytest.mark.parametrize("page", PAGES, ids=page_name)
def test_docs_date_figures_instead_of_narrating(page):
    assert not NARRATION.findall(page.read_text()), page_name(page)


@pytest.mark.parametrize("page", [p for p in PAGES if page_name(p) not in DATED], ids=page_name)
def test_guides_and_references_hold_no_dated_measurement_nor_commit(page):
    """A date or a commit id belongs to a measurement, and measurements live on the results and figures pages."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    text = re.sub(r"studies/20\d\d-\d\d-\d\d-", "studies/", text)  # a study's folder is named by its date
    assert not re.findall(r"\b20\d\d-\d\d-\d\d\b", text), page_name(page)
    # a commit id: 7 to 40 hex digits, at least one a letter (so that "at 1048576" is a number)
    assert not re.findall(r"\b(?:commits?|at|of|in) (?=\d*[a-f])[0-9a-f]{7,40}\b", text), page_name(page)
