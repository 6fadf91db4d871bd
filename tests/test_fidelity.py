"""docs/reference/paper-settings.md's table against the paper configs: every row with a key must hold, in every
config its `configs` column names, the value its `paper configs` column states (configs read with their `base:`)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import yaml

from coreward.runtime.config import read_yaml_with_base


REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "reference" / "paper-settings.md"


def table_rows() -> list[dict[str, str]]:
    """Every row of every settings table in the document (those with a `key` column), as {header: cell}."""
    rows, header = [], None
    for line in DOC.read_text().splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if header is None:
            header = cells
        elif "key" in header and not set("".join(cells)) <= set("-: "):  # the settings tables, not the figures
            rows.append(dict(zip(header, cells)))
    return rows


def checked_rows() -> list[dict[str, str]]:
    return [r for r in table_rows() if r["key"] not in ("—", "")]


def lookup(config: dict, key: str):
    node = config
    for part in key.split("."):
        if isinstance(node, list):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            raise KeyError(key)
    return node


def same(expected, actual) -> bool:
    numbers = (int, float)
    if isinstance(expected, numbers) and isinstance(actual, numbers) and not isinstance(actual, bool):
        return math.isclose(float(expected), float(actual), rel_tol=1e-12)
    if isinstance(expected, str) and isinstance(actual, (int, float)) and not isinstance(actual, bool):
        try:  # PyYAML reads `1e-5` (no dot) as a string; the configs' loader converts it
            return math.isclose(float(expected), float(actual), rel_tol=1e-12)
        except ValueError:
            return False
    return expected == actual


def configs_of(row: dict[str, str]) -> list[Path]:
    paths = []
    for pattern in row["configs"].replace("`", "").split(","):
        found = sorted((REPO / "configs").glob(pattern.strip() + ".yaml"))
        assert found, f"{DOC.name}: row {row['setting']!r}: no config matches {pattern.strip()!r}"
        paths += found
    return paths


def test_the_table_has_rows_for_every_method_and_every_paper_config_is_covered():
    rows = checked_rows()
    assert len(rows) >= 60
    covered = {p for row in rows for p in configs_of(row)}
    shipped = set((REPO / "configs" / "paper").glob("*.yaml")) | {REPO / "configs" / "rm" / "paper_verifyrm.yaml"}
    assert shipped <= covered, f"paper configs the table never checks: {sorted(p.name for p in shipped - covered)}"
    for row in table_rows():
        assert row["source"] and row["authors' value"], f"row {row['setting']!r} needs the authors' value and source"


@pytest.mark.parametrize("row", checked_rows(), ids=lambda r: f"{r['key']}={r['paper configs']}")
def test_each_paper_config_holds_the_value_the_table_states(row):
    expected = yaml.safe_load(row["paper configs"].strip("`"))
    for path in configs_of(row):
        config = read_yaml_with_base(path)
        try:
            actual = lookup(config, row["key"].strip("`"))
        except (KeyError, IndexError):
            pytest.fail(f"{path.relative_to(REPO)} does not set {row['key']} (the table says {expected!r})")
        assert same(expected, actual), f"{path.relative_to(REPO)}: {row['key']} is {actual!r}, the table says {expected!r}"


# ---------------------------------------------------------------------------------- Cooper section


def section_rows(title: str) -> list[dict[str, str]]:
    """The checked rows of the table under the `## <title>` heading."""
    text = DOC.read_text()
    start = text.index(f"## {title}")
    section = text[start : text.find("\n## ", start + 1)]
    return [r for r in checked_rows() if f"\n| {r['setting']} |" in section]


def test_cooper_rows_name_real_options_and_every_gsm8k_paper_config_builds():
    """Each Cooper row's reward key is a parameter of the config's reward source, and the source accepts the config."""
    from coreward.rewards import build_source, registered

    rows = [r for r in section_rows("Cooper (GSM8K") if r["key"].strip("`").startswith("rewards.0.params.")]
    assert len(rows) >= 20
    for row in rows:
        field = row["key"].strip("`").split(".")[3]
        for path in configs_of(row):
            reward = read_yaml_with_base(path)["rewards"][0]
            assert field in registered()[reward["name"]].Params.__dataclass_fields__, f"{path.name}: no option {field!r}"
    for path in sorted((REPO / "configs" / "paper").glob("*gsm8k*.yaml")):
        reward = read_yaml_with_base(path)["rewards"][0]
        build_source(reward["name"], reward.get("params", {}))


def test_co_rewarding_exact_votes_and_matches_like_the_authors_reward_managers(verifier):
    """`match: exact` gives the labels and rewards of the authors' reward managers (co_rewarding_II.py, co_reward.py,
    majority_voting.py): `Counter(raw answers).most_common(1)`, blank answers dropped, reward `ans == pseudo_label`
    on the raw strings (whitespace counts)."""
    from collections import Counter

    from coreward.rewards.voting import majority_votes, matches_label

    def authors(teacher: list[str], policy: list[str]) -> tuple[str, list[float]]:
        votes = [a for a in teacher if a is not None and str(a).strip() != ""]
        label = Counter(votes).most_common(1)[0][0] if votes else ""
        return label, [1.0 if label != "" and a == label else 0.0 for a in policy]

    cases = [([" 3", " 3", "3", " "], ["3", " 3", " ", "4"]), (["1/2", "0.5", "0.5", "1/2 "], ["0.5", "1/2", "1/2 ", ""]),
             (["", " ", "", ""], ["", "1", " ", "x"])]
    for teacher, policy in cases:
        label, rewards = authors(teacher, policy)
        (ours, _, _), = majority_votes([[a or None for a in teacher]], "exact", verifier)
        assert (ours or "") == label
        assert [1.0 if ok else 0.0 for ok in matches_label(ours, [a or None for a in policy], "exact", verifier)] == rewards
