"""The training progress bar (runtime/metrics.py `CompactProgressCallback`), driven as HF's Trainer drives it, on
one stream as a terminal shows stdout and stderr: it shows step N beside step N's values, and a line printed while
it is drawn starts on a line of its own."""

from __future__ import annotations

import io
import sys
from pathlib import Path

from transformers import TrainerControl, TrainerState, TrainingArguments

from coreward.runtime.metrics import CompactProgressCallback, LinesAboveTheBar


def screen_lines(text: str) -> list[str]:
    """What a terminal shows: each line as the last carriage return left it."""
    return [line.split("\r")[-1] for line in text.split("\n")]


def test_the_bar_shows_the_step_it_finished_and_printed_lines_start_their_own_line(monkeypatch, tmp_path):
    terminal = io.StringIO()
    monkeypatch.setattr(sys, "stderr", terminal)  # the bar's stream
    monkeypatch.setattr(sys, "stdout", terminal)  # print's: the same terminal
    args = TrainingArguments(output_dir=str(tmp_path), report_to=[])
    state, control = TrainerState(max_steps=2), TrainerControl()
    bar = CompactProgressCallback()
    bar.on_train_begin(args, state, control)
    assert isinstance(sys.stdout, LinesAboveTheBar)
    for step, reward in ((1, 0.25), (2, 0.75)):
        state.global_step = step
        control.should_log = True  # logging_steps 1: HF's flow callback asks for a log at every step's end
        bar.on_step_end(args, state, control)
        print(f"eval before step {step}'s log")  # an evaluation at the step's end logs before the step does
        bar.on_log(args, state, control, logs={"reward": reward, "verified_accuracy": reward})
        shown = bar.training_bar.format_meter(**bar.training_bar.format_dict)
        assert f"{step}/2" in shown and f"reward={reward:.3g}" in shown  # this step's values, not the one before
    print("guard: a summary line")
    bar.on_train_end(args, state, control)
    assert sys.stdout is terminal  # given back
    lines = screen_lines(terminal.getvalue())
    assert "guard: a summary line" in lines and "eval before step 2's log" in lines  # not glued to the bar's end
    assert lines[-2].startswith("100%") and "2/2" in lines[-2] and "reward=0.75" in lines[-2]


def test_a_bar_on_a_terminal_and_a_line_per_step_anywhere_else(monkeypatch, tmp_path):
    """`coreward train`'s default: the bar where stderr is a terminal with a width; in a log file, a pipe or a
    terminal of 0 columns one line per step (a bar redrawn into a file leaves a copy per redraw; tqdm draws
    nothing 0 columns wide)."""
    import fcntl
    import os
    import struct
    import termios

    from coreward.grpo.config import TrainConfig
    from coreward.grpo.train import build_grpo_args
    from coreward.runtime.config import load_config

    rule = Path(__file__).resolve().parents[2] / "configs" / "demo" / "rule.yaml"
    config = load_config(TrainConfig, rule, [])

    def shows_a_bar(stream) -> bool:
        monkeypatch.setattr(sys, "stderr", stream)
        return not build_grpo_args(config, tmp_path, 1).disable_tqdm

    main, terminal = os.openpty()
    try:
        with open(terminal, "w", closefd=False) as stream:
            fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
            assert shows_a_bar(stream)
            fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 0, 0, 0, 0))
            assert not shows_a_bar(stream)
    finally:
        os.close(main)
        os.close(terminal)
    with open(tmp_path / "train.log", "w") as log:
        assert not shows_a_bar(log)
    assert not shows_a_bar(io.StringIO())
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # the config's own setting wins: a bar in a log, if asked
    assert build_grpo_args(load_config(TrainConfig, rule, ["grpo.disable_tqdm=false"]), tmp_path, 1).disable_tqdm is False


def test_a_long_loop_prints_lines_with_the_time_left_where_no_bar_can_be_drawn(monkeypatch):
    """runtime/progress.py's `Progress`, as `coreward eval` generates with it: off a terminal, a line at most every
    `every_s` seconds and one at the end, each with the elapsed time and (before the end) the time left; `describe`
    words what was done; disabled, silent."""
    from coreward.runtime import progress as module

    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    clock = iter(range(0, 1000, 10))  # 10 s a unit
    monkeypatch.setattr(module.time, "monotonic", lambda: next(clock))
    meter = module.Progress(7, "work", every_s=25)
    for _ in range(7):
        meter.advance()
    assert log.getvalue().splitlines() == [
        "work: 3/7 (0m30s, about 0m40s left)",
        "work: 6/7 (1m00s, about 0m10s left)",
        "work: 7/7 (1m10s)",
    ]
    log.seek(0), log.truncate()
    meter = module.Progress(4, "work", every_s=10, describe=lambda: f"{meter.done * 2} problems")
    meter.advance(3)  # 10 s after the start
    meter.advance()
    assert log.getvalue().splitlines() == ["work: 6 problems (0m10s, about 0m03s left)", "work: 8 problems (0m20s)"]
    log.seek(0), log.truncate()
    quiet = module.Progress(2, "x", enabled=False)
    quiet.advance(2)
    assert log.getvalue() == ""


def test_a_rate_below_one_a_second_reads_as_the_time_each_takes():
    """`coreward eval`'s summary under load said "(0.0/s, ...)": a slow rate reads as the time per unit."""
    from coreward.runtime.progress import rate

    assert rate(32, 1000, "completion") == "31 s per completion"
    assert rate(1, 400, "problem") == "6m40s per problem"
    assert rate(32, 5, "completion") == "6.4 completions/s"
    assert rate(0, 5, "problem") == "no problem yet"
