"""Threads picked when a config leaves `torch_threads` unset (runtime/devices.py `pick_torch_threads`)."""

from __future__ import annotations

import torch

from coreward.runtime.devices import ONE_THREAD_BELOW_PARAMETERS, pick_torch_threads


def test_a_small_model_on_the_cpu_gets_one_thread_and_a_large_one_torchs_default():
    threads, why = pick_torch_threads(797_056, "cpu")
    assert threads == 1 and "0.8M-parameter model on the CPU" in why
    threads, why = pick_torch_threads(ONE_THREAD_BELOW_PARAMETERS, "cpu")
    assert threads is None and f"torch's default, {torch.get_num_threads()}" in why
    threads, why = pick_torch_threads(1_540_000_000, "cpu")
    assert threads is None and "1.54B-parameter" in why
    threads, why = pick_torch_threads(797_056, "cuda")  # the GPU does the work: the CPU threads are left alone
    assert threads is None and "runs on cuda" in why
