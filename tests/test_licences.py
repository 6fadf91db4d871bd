"""What the package may ship: the Apache-2.0 licence it declares, a NOTICE naming every quoted third-party text that
remains, and none of the texts whose licences forbid shipping them (xVerify's, General-Reasoner's and Co-rewarding's
prompts: read from the user's copy). The unshipped texts are known here by their sha256 only: every string literal
in src/ is hashed, so pasting one back (verbatim) fails."""

from __future__ import annotations

import ast
import hashlib
import re
import tomllib
from pathlib import Path

from coreward.data.rephrase import AUTHORS_REWRITE
from coreward.rm.judge import JUDGE_FORMATS


ROOT = Path(__file__).resolve().parents[1]
APACHE_2_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"  # apache.org/licenses/LICENSE-2.0.txt


def test_the_licence_file_is_the_apache_2_text_pyproject_declares():
    assert hashlib.sha256((ROOT / "LICENSE").read_bytes()).hexdigest() == APACHE_2_SHA256
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == {"text": "Apache-2.0"}


def test_no_unshipped_authors_text_is_in_the_package():
    unshipped = {fmt.authors.url: set(fmt.authors.sha256) for fmt in JUDGE_FORMATS.values() if fmt.template is None}
    unshipped[AUTHORS_REWRITE.url] = set(AUTHORS_REWRITE.sha256)
    assert len(unshipped) == 3  # xVerify, General-Reasoner, Co-rewarding
    hashes = set().union(*unshipped.values())
    found = []
    for path in sorted((ROOT / "src" / "coreward").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) > 200:
                if hashlib.sha256(node.value.encode()).hexdigest() in hashes:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found


def test_notice_names_files_that_exist_and_every_unshipped_text():
    notice = (ROOT / "NOTICE").read_text()
    for listed in re.findall(r"In: (src/\S+)", notice):
        assert (ROOT / listed).is_file(), listed
    for url in (AUTHORS_REWRITE.url, *(f.authors.url for f in JUDGE_FORMATS.values() if f.template is None)):
        repository = url.partition("/blob/")[0]
        assert repository in notice, repository
