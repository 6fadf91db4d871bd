"""Threads picked when a config leaves `torch_threads` unset (runtime/devices.py `pick_torch_threads`): the cores
other jobs leave idle, at least one, at most torch's default."""

from __future__ import annotations

import os

import pytest
import torch

from coreward.runtime.devices import idle_cores, idle_share, pick_torch_threads


@pytest.fixture
def default_threads():
    """torch's default as a machine with 4 cores has it, whatever this process was given (one thread per xdist worker:
    tests/conftest.py): a default of 1 would make every bound below 1 too."""
    threads = torch.get_num_threads()
    torch.set_num_threads(4)
    yield 4
    torch.set_num_threads(threads)


def test_the_idle_cores_decide_shared_among_the_runs_processes(default_threads):
    default = default_threads
    threads, why = pick_torch_threads(797_056, "cpu", idle=0.1)  # every core busy with other jobs
    assert threads == 1 and "0.8M-parameter model on the CPU, 0.1 core(s) idle" in why
    threads, _ = pick_torch_threads(797_056, "cpu", idle=64.0)  # never above torch's default
    assert threads == default
    threads, why = pick_torch_threads(1_540_000_000, "cpu", idle=8.0, processes=4)
    assert threads == min(default, 2) and "1.54B-parameter" in why and "shared by 4 processes" in why
    threads, why = pick_torch_threads(797_056, "cuda", idle=None)  # the GPU does the work: left alone
    assert threads is None and "runs on cuda" in why
    threads, why = pick_torch_threads(797_056, "cpu", idle=None)
    assert threads is None and "could not be read" in why


def test_idle_cores_is_the_idle_share_of_the_machine_within_this_processs_cores():
    # 2 cores, 100 ticks each between the samples: 150 of the 200 idle -> 1.5 cores idle
    assert idle_share((1000, 4000), (1150, 4200), machine_cores=2, usable=2) == 1.5
    assert idle_share((1000, 4000), (1390, 4400), machine_cores=4, usable=2) == 2  # at most the cores it may use
    assert idle_share((1000, 4000), (1000, 4000), machine_cores=2, usable=2) is None  # no time passed
    measured = idle_cores(0.2)  # this machine, now: whatever the load, within its cores
    assert measured is not None and 0 <= measured <= len(os.sched_getaffinity(0))
