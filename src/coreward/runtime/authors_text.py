"""Texts coreward may not ship (a prompt whose licence forbids redistribution or derivatives, or that has none),
read from the user's own copy instead.

`AuthorsText` says where the authors publish a text and the sha256 of their text; `read_authors_text(path, text,
key)` reads the user's copy: a text file, or the authors' own Python file from a clone of their repository, from
which the string assigned to the text's variable is read (the file is parsed, never run). A copy whose sha256 is not
the authors' is used with a warning: a model trained on one wording can read another worse. `not_shipped` is the
one-line error for a text the user has not given, naming where to get it.
"""

from __future__ import annotations

import ast
import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from coreward.runtime.errors import CorewardError


logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AuthorsText:
    """Where a text's authors publish it, and the sha256 of their text (of each copy they publish)."""

    url: str  # the authors' file, at a commit: https://github.com/owner/repo/blob/<commit>/<path>
    variable: str  # what holds the text in that file: `NAME`, or `function.NAME` for a string assigned in a function
    licence: str  # the licence it comes with (why coreward does not ship it)
    sha256: tuple[str, ...]

    @property
    def repository(self) -> str:
        return self.url.partition("/blob/")[0]

    @property
    def path(self) -> str:
        """The file's path inside a clone of the repository."""
        return self.url.partition("/blob/")[2].partition("/")[2]


def not_shipped(text: AuthorsText, key: str, what: str) -> CorewardError:
    """The error for `what` (e.g. "the xverify prompt") when the user has not given a copy in setting `key`."""
    option = key.rsplit(".", 1)[-1].removeprefix("key ")
    return CorewardError(f"{key}: {what} is not shipped with coreward (its authors' licence: {text.licence}): clone "
                         f"{text.repository} and give its file <clone>/{text.path} as {option} (or a text file "
                         f"holding its {text.variable})")


def read_authors_text(path: str | os.PathLike, text: AuthorsText, key: str, what: str) -> str:
    """The text in the user's file at `path` (setting `key`): the whole file, or, for a `.py` file, the string its
    `text.variable` is assigned. One-line CorewardError when the file is missing or holds no such string."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise CorewardError(f"{key}: no such file: {file} ({what}: {text.url}, {text.variable})")
    try:
        source = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise CorewardError(f"{key}: cannot read {file}: {err}") from None
    value = _assigned_string(source, file, text.variable, key) if file.suffix == ".py" else source
    digest = hashlib.sha256(value.encode("utf-8")).hexdigest()
    if digest not in text.sha256:
        logger.warning("%s: %s is not the authors' text of %s (sha256 %s..., theirs %s...: %s): used as it is; a "
                       "model trained on their wording may read another worse", key, file, what, digest[:12],
                       text.sha256[0][:12], text.url)
    return value


def _assigned_string(source: str, file: Path, variable: str, key: str) -> str:
    """The string literal assigned to `variable` (`NAME` at module level, or `function.NAME` inside a function)."""
    try:
        tree = ast.parse(source, str(file))
    except SyntaxError as err:
        raise CorewardError(f"{key}: {file} is not a Python file ({err})") from None
    *scope, name = variable.split(".")
    body = tree.body
    if scope:
        body = next((node.body for node in ast.walk(tree)
                     if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == scope[0]), [])
    for node in body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                continue
            if isinstance(value, str):
                return value
    raise CorewardError(f"{key}: {file} assigns no string to {variable} (where the authors' file holds the text): give "
                        "their file, or the text as a text file")
