"""Preloaded by the tests' forkserver (tests/conftest.py), beside coreward's own preload (runtime/forkserver_ready.py):
what most of the suite's forked runs would each do again, done once in the server.

* the demo task's problems (`demo_problems`, cached per process): every run on the demo data draws all 20,000 train
  problems first, 0.3 s of one core quiet and 60 CPU-s over the suite (a py-spy profile of the suite, 2026-11-29);
* Muon's optimizer, which DeepSpeed imports in ZeRO's optimizer check (`is_zero_supported_optimizer`): 2.6 s of one
  core in each of the suite's DeepSpeed processes. With a CPU build of torch only, as coreward's own DeepSpeed preload.
"""

from __future__ import annotations

import importlib.util

from coreward.data.synthetic import demo_problems
from coreward.runtime.devices import cpu_only_torch


for split in ("train", "test"):
    demo_problems(split)

if cpu_only_torch() and importlib.util.find_spec("deepspeed") is not None:
    import deepspeed.runtime.zero.muon.muon_optimizer  # noqa: F401
