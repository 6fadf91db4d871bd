"""A run tells the truth about itself (issue 38, item 2, part): broken invariants are warned about while it trains
and summed up at its end in health.json, which `coreward report` shows. Each fault happens for real: a random
policy never writes a verified answer, so a 0/1 rule reward is constant in every group (no learning signal), and
Cooper never gets a verified positive, so its RM never learns (it is a static RM under Cooper's name)."""

from __future__ import annotations

import json

import pytest

from tests.helpers.runs import REPO, coreward_here


STEPS = 5  # grpo/health.py's PATIENCE: the warning comes at the fifth step in a row


def run(config: str, policy, run_dir) -> str:
    result = coreward_here("train", "--config", REPO / "configs" / "demo" / f"{config}.yaml", "--output-dir", run_dir,
                           "--max-steps", STEPS, "--set", f"model.name_or_path={policy}", "--set", "data.limit=4",
                           "--set", "data.eval_every=0", "--set", "grpo.num_generations=4",
                           "--set", "grpo.per_device_train_batch_size=8", "--set", "grpo.max_completion_length=12",
                           "--set", "grpo.save_steps=100", "--set", "torch_threads=1")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout + result.stderr


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_a_reward_that_never_varies_is_called_out(tiny_policy, tmp_path):
    log = run("rule", tiny_policy, tmp_path / "rule")
    assert f"step {STEPS}: for {STEPS} steps in a row every group's rewards have been constant" in log
    health = json.loads((tmp_path / "rule" / "health.json").read_text())
    assert health["no_signal"] == health["steps"] == STEPS
    assert f"steps with no learning signal (all groups' rewards constant): {STEPS} of {STEPS}" in health["lines"]

    from coreward.evaluation.report import make_report

    make_report([tmp_path / "rule"], tmp_path / "report")
    assert "## Health" in (tmp_path / "report" / "report.md").read_text()


def test_cooper_without_a_verified_positive_says_its_rm_never_learned(tiny_policy, tmp_path):
    log = run("cooper", tiny_policy, tmp_path / "cooper")
    assert "Cooper has had no valid pair, so its RM has not learned: no verified positive" in log
    health = json.loads((tmp_path / "cooper" / "health.json").read_text())
    assert health["rm_updates"] == 0 and health["no_pair"] == health["cooper_steps"] == STEPS
    assert any(line.startswith(f"Cooper: RM updated on 0 of {STEPS} steps") for line in health["lines"])


def test_a_sources_own_watch_is_run_warned_and_summed_up(tmp_path, capsys):
    """A reward source's invariants come from the source (`health_watches`), not from the engine: a user's watch on
    its own metric is warned about at once and counted in health.json; two sources returning the same watch class
    (Cooper's LLM judge beside the `judge` reward) count once."""
    from types import SimpleNamespace

    from coreward.grpo.health import HealthCallback
    from coreward.rewards.health import Check, HealthWatch
    from coreward.rewards.judge import JudgeWatch

    class TooLong(HealthWatch):
        def __init__(self):
            self.steps = 0

        def check(self, logs, step):
            self.steps += 1
            return [Check("too_long", logs["mine/length"] > 100, lambda: "my completions ran long", at_once=True)]

        def report(self, broken):
            return {"mine_steps": self.steps}, [f"mine: long on {broken['too_long']} of {self.steps} steps"]

    callback = HealthCallback(tmp_path, [TooLong(), JudgeWatch(), JudgeWatch()])
    assert len(callback.watches) == 2
    for step, (length, calls) in enumerate([(50, 2), (150, 2), (60, 2)], start=1):
        state = SimpleNamespace(global_step=step, is_world_process_zero=True)
        callback.on_log(None, state, None, logs={"frac_reward_zero_std": 0.0, "mine/length": length,
                                                 "judge/calls": calls, "judge/failures": 0})
    callback.on_train_end(None, state, None)
    health = json.loads((tmp_path / "health.json").read_text())
    assert health["too_long"] == 1 and health["mine_steps"] == 3 and health["judge_steps"] == 3
    assert health["warnings"] == ["warning: step 2: my completions ran long"]
    assert "mine: long on 1 of 3 steps" in health["lines"] and "my completions ran long" in capsys.readouterr().out
