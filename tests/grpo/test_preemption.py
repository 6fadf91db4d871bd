"""Preemption (grpo/preemption.py): SIGTERM / SIGUSR1 end the step in progress, write a complete checkpoint,
exit with status 75, and `--resume` continues with no step lost; in one process and in two (a signal to one)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from coreward.grpo.checkpoints import complete_checkpoints
from coreward.grpo.preemption import PREEMPTED_EXIT, signal_numbers
from coreward.runtime.metrics import read_metrics
from tests.helpers.kill_resume import free_port
from tests.helpers.runs import coreward_here, tiny_train_args


STEPS = 6


def steps_logged(run_dir: Path) -> list[int]:
    return [row["step"] for row in read_metrics(run_dir / "metrics.jsonl")] if (run_dir / "metrics.jsonl").exists() else []


def wait_for_a_step(process: subprocess.Popen, run_dir: Path, timeout_s: float = 300, poll_s: float = 0.2) -> None:
    deadline = time.monotonic() + timeout_s
    while not steps_logged(run_dir):
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "no step logged in time"
        time.sleep(poll_s)


def check_resumed_without_loss(policy: Path, run_dir: Path, stopped_at: int, nproc: int = 1) -> None:
    assert [p.name for p in complete_checkpoints(run_dir)][-1] == f"checkpoint-{stopped_at}"
    assert steps_logged(run_dir) == list(range(1, stopped_at + 1))
    assert not (run_dir / "final").exists()
    # each process recorded its measured peak when the preemption stopped it (no collective: its own file)
    for name in ["memory.json", *(f"memory-rank{rank}.json" for rank in range(1, nproc))]:
        memory = json.loads((run_dir / name).read_text())
        assert memory["stopped"] == "preemption" and memory["step"] == stopped_at, memory
        assert memory["measured"]["peak_bytes"] > 0 and memory["planned"]["peak_bytes"] > 0
    if nproc == 1:  # the resumed run is not what is tested here: in this process (no Python start-up)
        resumed = coreward_here(*launch_args(policy, run_dir, "--resume"))
        out, err = resumed.stdout, resumed.stderr
    else:  # torchrun forked warm (tests/helpers/warm_launch.py): the launcher's processes are the stop's subject, not
        # the resume's
        from tests.helpers import warm_launch

        resumed = warm_launch.run(launch_command(policy, run_dir, nproc, "--resume"),
                                  env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=Path(__file__).resolve().parents[2],
                                  timeout=600)
        out, err = resumed.stdout, resumed.stderr
    assert resumed.returncode == 0, err[-3000:]
    assert f"continuing from {run_dir / f'checkpoint-{stopped_at}'}" in out + err
    assert steps_logged(run_dir) == list(range(1, STEPS + 1))  # every step once: none lost, none repeated
    assert (run_dir / "final" / "config.json").is_file()


def launch_args(policy: Path, run_dir: Path, *extra: str) -> list[str]:
    return tiny_train_args(policy, run_dir, "--max-steps", str(STEPS), "--set", "grpo.save_steps=100",
                           "--set", "torch_threads=1", *extra)


def launch_command(policy: Path, run_dir: Path, nproc: int, *extra: str) -> list[str]:
    """`python -m coreward.cli train ...`, under torchrun on a free port with `nproc` > 1."""
    launcher = [sys.executable, "-m"]
    if nproc > 1:
        launcher += ["torch.distributed.run", "--nproc_per_node", str(nproc), "--master_port", str(free_port()), "-m"]
    return [*launcher, "coreward.cli", *launch_args(policy, run_dir, *extra)]


def launch(policy: Path, run_dir: Path, nproc: int, *extra: str, session: bool = False) -> subprocess.Popen:
    return subprocess.Popen(launch_command(policy, run_dir, nproc, *extra), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
                            start_new_session=session)


class ForkedRun:
    """A one-process `coreward train` forked from the preloaded forkserver (as the kill-and-resume harness starts
    them, tests/helpers/kill_resume.py), behind the part of Popen's interface these tests use. A signal reaches its
    trainer as it reaches a new process's; the Ctrl-C tests keep new processes (a terminal's process group)."""

    def __init__(self, args: list[str]):
        from tests.helpers.kill_resume import _start

        self.log = tempfile.NamedTemporaryFile("w+")
        self.process = _start([sys.executable, "-m", "coreward.cli", *args], self.log,
                              {**os.environ, "OMP_NUM_THREADS": "1"}, Path(__file__).resolve().parents[2])
        self.pid = self.process.pid

    def poll(self) -> int | None:
        return self.process.poll()

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def send_signal(self, number: int) -> None:
        self.process.send_signal(number)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Waits, then the output (stdout and stderr went to one file: it is given as both)."""
        self.process.wait(timeout)
        self.log.seek(0)
        text = self.log.read()
        self.log.close()
        return text, text


def ctrl_c(process: subprocess.Popen) -> None:
    """What a terminal's Ctrl-C does: SIGINT to the whole foreground process group (the run, its verifier
    workers and the forkserver alike)."""
    os.killpg(process.pid, signal.SIGINT)


def test_ctrl_c_ends_the_step_with_a_checkpoint_like_sigterm(tiny_policy, tmp_path):
    run_dir = tmp_path / "run"
    process = launch(tiny_policy, run_dir, 1, session=True)
    wait_for_a_step(process, run_dir)
    ctrl_c(process)
    out, err = process.communicate(timeout=300)
    assert process.returncode == PREEMPTED_EXIT, err[-3000:]
    stopped_at = steps_logged(run_dir)[-1]
    assert stopped_at < STEPS
    assert "Ctrl-C: stopping after the current step" in out
    assert f"stopped by Ctrl-C after step {stopped_at} (complete checkpoint written); continue with --resume" in out
    assert [p.name for p in complete_checkpoints(run_dir)][-1] == f"checkpoint-{stopped_at}"


def test_a_second_ctrl_c_stops_at_once(tiny_policy, tmp_path):
    run_dir = tmp_path / "run"
    log = tmp_path / "out.log"
    # Both Ctrl-Cs must land in one step: step 1's log line marks the start of step 2, which takes about 2 s
    # here (256 completions of up to 64 tokens). The second is sent once the first was handled (its line printed):
    # two SIGINTs that arrive while the main thread is inside one long torch call reach Python's handler as one
    with log.open("w") as sink:
        process = subprocess.Popen([sys.executable, "-m", "coreward.cli", *launch_args(
            tiny_policy, run_dir, "--set", "grpo.per_device_train_batch_size=256",
            "--set", "grpo.max_completion_length=64")], stdout=sink, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}, start_new_session=True)
        wait_for_a_step(process, run_dir, poll_s=0.02)
        ctrl_c(process)
        deadline = time.monotonic() + 60
        while "Ctrl-C: stopping after the current step" not in log.read_text():
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.02)
        ctrl_c(process)
        process.wait(timeout=120)
    out = log.read_text()
    assert process.returncode == 130, out[-3000:]
    assert "stopped at once by a second Ctrl-C" in out
    assert not complete_checkpoints(run_dir)  # save_steps=100: the step in progress was not saved
    # so it does not send the user to --resume, which would be refused there
    assert f"no complete checkpoint was written in {run_dir}: run the same command again to start over" in out


def test_after_a_stop_the_way_on_names_the_checkpoint_to_resume_from(tmp_path):
    from coreward.grpo.checkpoints import COMPLETE_MARKER
    from coreward.grpo.cli import how_to_continue

    assert "run the same command again" in how_to_continue(tmp_path / "never_made")
    (tmp_path / "checkpoint-2").mkdir()
    (tmp_path / "checkpoint-2" / COMPLETE_MARKER).write_text("2")
    (tmp_path / "checkpoint-3").mkdir()  # half written: no marker
    assert how_to_continue(tmp_path) == f"continue with --resume from the newest complete checkpoint ({tmp_path / 'checkpoint-2'})"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1])
def test_a_signal_ends_the_step_writes_a_checkpoint_and_resume_loses_nothing(tiny_policy, tmp_path, sig):
    run_dir = tmp_path / "run"
    process = ForkedRun(launch_args(tiny_policy, run_dir))
    wait_for_a_step(process, run_dir)
    process.send_signal(sig)
    out, err = process.communicate(timeout=300)
    assert process.returncode == PREEMPTED_EXIT, err[-3000:]
    assert "preemption signal" in out + err
    stopped_at = steps_logged(run_dir)[-1]
    assert stopped_at < STEPS
    check_resumed_without_loss(tiny_policy, run_dir, stopped_at)


def test_two_processes_stop_together_when_one_is_signalled(tiny_policy, tmp_path):
    run_dir = tmp_path / "run"
    process = launch(tiny_policy, run_dir, 2)
    wait_for_a_step(process, run_dir)
    # torchrun's own children are the workers (their verifier pools, deeper down, inherit RANK too)
    workers = {int(p.environ()["RANK"]): p for p in psutil.Process(process.pid).children() if "RANK" in p.environ()}
    assert set(workers) == {0, 1}
    workers[1].send_signal(signal.SIGTERM)  # one process only, as when one node is told first
    out, err = process.communicate(timeout=300)
    assert process.returncode != 0  # torchrun reports its workers' status 75 as a failure of the launch
    assert "preempted: checkpoint of step" in out + err
    stopped_at = steps_logged(run_dir)[-1]
    assert stopped_at < STEPS
    state = json.loads((run_dir / f"checkpoint-{stopped_at}" / "trainer_state.json").read_text())
    assert state["global_step"] == stopped_at
    check_resumed_without_loss(tiny_policy, run_dir, stopped_at, nproc=2)


def test_preempt_signals_are_checked_and_can_be_turned_off(tiny_policy, tmp_path):
    assert signal_numbers(["SIGTERM", "usr1"]) == [signal.SIGTERM, signal.SIGUSR1]
    bad = coreward_here(*tiny_train_args(tiny_policy, tmp_path / "run", "--set", "preempt_signals=[SIGKILL]"))
    assert bad.returncode == 2 and "key preempt_signals: 'SIGKILL' is not a signal a run can catch" in bad.stderr


def test_with_preempt_signals_off_a_sigterm_is_no_preemption(tiny_policy, tmp_path):
    """`preempt_signals: []`: the run installs no handler, so a SIGTERM during a step goes to the handler the process
    had before the run (by default SIG_DFL, which ends the process): no stop at the step's end, no preemption
    checkpoint. In this process, so the handler before the run is a recording one, and the run goes on to its end."""
    from transformers import TrainerCallback

    from coreward.grpo.config import TrainConfig
    from coreward.grpo.train import run_training
    from coreward.runtime.config import load_config
    from tests.helpers.runs import RULE_CONFIG

    received, handlers_during_the_run = [], []

    class SigtermAfterStep1(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 1:
                handlers_during_the_run.append(signal.getsignal(signal.SIGTERM))
                signal.raise_signal(signal.SIGTERM)

    def before_the_run(number, frame):
        received.append(number)

    overrides = [f"model.name_or_path={tiny_policy}", "grpo.per_device_train_batch_size=16", "grpo.max_completion_length=12",
                 "grpo.save_steps=100", "data.eval_every=0", "torch_threads=1", "preempt_signals=[]"]
    config = load_config(TrainConfig, RULE_CONFIG, overrides)
    previous = signal.signal(signal.SIGTERM, before_the_run)  # (a test on a thread other than the main one fails here)
    try:
        result = run_training(config, output_dir=str(tmp_path / "run"), max_steps=2, extra_callbacks=[SigtermAfterStep1()])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert handlers_during_the_run == [before_the_run]  # the run left SIGTERM's handler as it found it
    assert received == [signal.SIGTERM]  # ... and that handler got the signal
    assert not result.preempted and result.global_step == 2  # the run did not stop after step 1
    assert steps_logged(tmp_path / "run") == [1, 2] and (tmp_path / "run" / "final" / "config.json").is_file()
    # save_steps=100: the only checkpoint is the last step's; a preemption would have written checkpoint-1
    assert [p.name for p in complete_checkpoints(tmp_path / "run")] == ["checkpoint-2"]


def test_a_run_that_raises_gives_the_callers_signal_handlers_back(tiny_policy, tmp_path):
    """A run stopped by an error (here: a callback raising after step 1) never reaches the trainer's on_train_end;
    the handlers the calling process had are back all the same, so its next Ctrl-C interrupts it, not a finished run."""
    from transformers import TrainerCallback

    from coreward.grpo.config import TrainConfig
    from coreward.grpo.train import run_training
    from coreward.runtime.config import load_config
    from tests.helpers.runs import RULE_CONFIG

    during = {}

    class FailAfterStep1(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            during.update({number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)})
            raise RuntimeError("a failure in the middle of the run")

    overrides = [f"model.name_or_path={tiny_policy}", "grpo.per_device_train_batch_size=16", "grpo.max_completion_length=12",
                 "grpo.save_steps=100", "data.eval_every=0", "torch_threads=1"]
    before = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    with pytest.raises(Exception, match="raised RuntimeError: a failure in the middle of the run"):  # named as user code
        run_training(load_config(TrainConfig, RULE_CONFIG, overrides), output_dir=str(tmp_path / "run"), max_steps=2,
                     extra_callbacks=[FailAfterStep1()])
    assert all(during[number] != before[number] for number in before), during  # the run's own, while it ran
    assert {number: signal.getsignal(number) for number in before} == before
