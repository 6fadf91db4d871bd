"""A user's code that fails: `coreward train` exits 2 with one line naming their function and its exception, then
their own frames (not the trainer's); the run directory and health.json stay; --debug / COREWARD_DEBUG=1 print the
whole traceback. Run as a user runs it: their package in a folder of their own, `coreward train` in a process of its own."""

from __future__ import annotations

import importlib
import json
import textwrap

from coreward.runtime.user_code import UserCodeError, as_user_code_error
from tests.test_user_scripts import REPO, coreward


USER_REWARDS = textwrap.dedent("""\
    import coreward


    def lookup(completion):
        return {"yes": 1.0}[completion[:0] + "missing"]


    def bad_reward(completions, **kwargs):
        return [lookup(c) for c in completions]


    def short_reward(completions, **kwargs):
        return [1.0]


    class Picky(coreward.RewardSource):
        @classmethod
        def check_data(cls, params, data):
            return data.no_such_setting
    """)


def user_package(folder):
    (folder / "mypkg").mkdir(parents=True)
    (folder / "mypkg" / "__init__.py").write_text("")
    (folder / "mypkg" / "rewards.py").write_text(USER_REWARDS)
    return folder


def train(folder, reward: str, *options: str, **extra_env: str):
    return coreward(folder, "train", "--config", str(REPO / "configs" / "demo" / "rule.yaml"), "--output-dir", "r",
                    "--max-steps", "2", "--set", f"rewards=[{{name: {reward}}}]", "--set", "data.eval_every=0",
                    *options, **extra_env)


def test_a_reward_that_raises_at_step_1_is_one_line_with_its_frames_and_keeps_the_run(tmp_path):
    folder = user_package(tmp_path)
    done = train(folder, "mypkg.rewards:bad_reward")
    assert done.returncode == 2, done.stderr[-3000:]
    error = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1
    assert "mypkg.rewards:bad_reward raised KeyError: 'missing' during step 1" in error[0]
    assert "run directory r is kept, with health.json" in error[0]
    after = done.stderr.split(error[0], 1)[1]
    assert 'mypkg/rewards.py", line 9, in bad_reward' in after and 'line 5, in lookup' in after
    assert "trainer.py" not in done.stderr and "Traceback" not in done.stderr  # the trainer's frames are not theirs
    assert "--debug" in after
    health = json.loads((folder / "r" / "health.json").read_text())
    assert "mypkg.rewards:bad_reward raised KeyError" in health["error"]
    assert (folder / "r" / "config.yaml").is_file()


def test_debug_prints_the_whole_traceback(tmp_path):
    """Through the environment variable, for a user's RewardSource whose check_data (run at config load) has a bug."""
    folder = user_package(tmp_path)
    done = train(folder, "mypkg.rewards:Picky", COREWARD_DEBUG="1")
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback (most recent call last)" in done.stderr and "grpo/config.py" in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(
        "error: your code mypkg.rewards:Picky.check_data raised AttributeError")


def test_a_reward_returning_the_wrong_count_names_the_function(tmp_path):
    folder = user_package(tmp_path)
    done = train(folder, "mypkg.rewards:short_reward", "--debug")
    assert done.returncode == 2, done.stderr[-3000:]
    assert ("error: reward function mypkg.rewards:short_reward returned 1 values for 128 completions"
            in done.stderr)


def test_only_a_traceback_through_the_users_files_is_theirs(tmp_path, monkeypatch):
    import sys

    user_package(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [name for name in sys.modules if name == "mypkg" or name.startswith("mypkg.")]:
        monkeypatch.delitem(sys.modules, name)  # another test's `mypkg` imported in this worker is not this one
    rewards = importlib.import_module("mypkg.rewards")
    try:
        rewards.bad_reward(["a"])
    except KeyError as err:  # as run_app sees it: the frames from coreward's call inward, no frame of this test
        user = as_user_code_error(err.with_traceback(err.__traceback__.tb_next))
    assert isinstance(user, UserCodeError) and user.function == "mypkg.rewards:bad_reward"
    frames = [line for line in user.frames_text().splitlines() if line.startswith("  File")]
    where = tmp_path / "mypkg" / "rewards.py"
    assert frames[0] == f'  File "{where}", line 9, in bad_reward' and frames[-1] == f'  File "{where}", line 5, in lookup'
    assert all(str(where) in frame for frame in frames)

    from coreward.grpo.preemption import signal_numbers

    try:
        signal_numbers(["NOT_A_SIGNAL"])  # coreward's own ValueError: not the user's
    except ValueError as err:
        own = err.with_traceback(err.__traceback__.tb_next)
    assert as_user_code_error(own) is None
