"""A user's code that fails (a reward function or `RewardSource` of theirs, loaded by import path or registered from
their script): one line that names it and its exception, the frames of their own files, not the trainer's
(`--debug` or COREWARD_DEBUG=1 prints the whole traceback), exit 2 (runtime/commands.py).

A frame is the user's when its file is in a module loaded as theirs (`claim_module`: what a config names by import
path) or outside coreward and outside the Python installation (the standard library and site-packages), so a reward
written in the working directory or an editable install of theirs is theirs, torch's or TRL's frames are not.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import traceback
from pathlib import Path
from types import TracebackType

from coreward.runtime.errors import CorewardError


DEBUG_ENV = "COREWARD_DEBUG"
_PACKAGE = Path(__file__).resolve().parents[1]  # src/coreward
_CLAIMED: set[str] = set()  # files of modules a config named by import path


def debug_enabled() -> bool:
    """`--debug` (which sets COREWARD_DEBUG=1) or COREWARD_DEBUG set to anything but 0/false/no/empty."""
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


def claim_module(module_name: str) -> None:
    """The module (a config's `mypkg.rewards` of `mypkg.rewards:f`) is the user's, wherever it is installed."""
    module = sys.modules.get(module_name)
    filename = getattr(module, "__file__", None)
    if filename:
        _CLAIMED.add(str(Path(filename).resolve()))


def _installation() -> list[Path]:
    names = ("stdlib", "platstdlib", "purelib", "platlib")
    return [Path(p).resolve() for p in {sysconfig.get_paths().get(name) for name in names} if p]


def is_user_file(filename: str) -> bool:
    """Whether a traceback's file is the user's code (not coreward, not a library, not Python's)."""
    if filename.startswith("<"):  # <frozen runpy>, <string>
        return False
    path = Path(filename).resolve()
    if str(path) in _CLAIMED:
        return True
    return not any(path.is_relative_to(root) for root in (_PACKAGE, *_installation()))


def user_frames(tb: TracebackType | None) -> list[traceback.FrameSummary]:
    """The frames of `tb` in the user's files, outermost first."""
    return [frame for frame in traceback.extract_tb(tb) if is_user_file(frame.filename)]


def _frame_name(tb: TracebackType | None) -> str | None:
    """`module:qualname` of the outermost user frame: the function coreward called (`mypkg.rewards:f`,
    `mypkg.rewards:MyReward.compute`)."""
    while tb is not None:
        code = tb.tb_frame.f_code
        if is_user_file(code.co_filename):
            module = tb.tb_frame.f_globals.get("__name__", Path(code.co_filename).stem)
            return f"{module}:{getattr(code, 'co_qualname', code.co_name)}"
        tb = tb.tb_next
    return None


class UserCodeError(CorewardError):
    """The user's code raised `error`; the message is one line naming the function and the exception."""

    def __init__(self, function: str, error: BaseException, where: str = ""):
        self.function, self.error, self.where = function, error, where
        detail = str(error).strip().splitlines()
        exception = type(error).__name__ + (f": {detail[0]}" if detail else "")
        super().__init__(f"your code {function} raised {exception}" + (f" {where}" if where else ""))

    def with_where(self, where: str) -> UserCodeError:
        """The same error, its line continued by `where` ("during step 3", the run directory it leaves)."""
        return UserCodeError(self.function, self.error, f"{self.where} {where}".strip())

    def frames_text(self) -> str:
        """The user's frames of the traceback, as Python prints them."""
        return "".join(traceback.format_list(user_frames(self.error.__traceback__)))

    def full_traceback(self) -> str:
        return "".join(traceback.format_exception(self.error))


def as_user_code_error(error: BaseException) -> UserCodeError | None:
    """`error` as a UserCodeError when it was raised in the user's code (a frame of theirs is on its traceback),
    else None (a CorewardError says what is wrong already; coreward's own bug keeps its traceback)."""
    if isinstance(error, UserCodeError):
        return error
    if isinstance(error, CorewardError) or not isinstance(error, Exception):
        return None
    name = _frame_name(error.__traceback__)
    return UserCodeError(name, error) if name else None
