"""Run `grpo_probe_worker.py` (a tiny GRPO run that records what each process's reward functions saw) in one
process or under torchrun, and read back each rank's record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import warm_launch
from tests.helpers.kill_resume import free_port


WORKER = Path(__file__).parent / "grpo_probe_worker.py"
G = 4


def run_worker(model: Path, out: Path, nproc: int, per_device: int, steps: int = 2,
               reward: str = "length_rank_probe", max_completion_length: int = 12) -> list[dict]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    args = [str(WORKER), str(model), str(out), str(steps), str(per_device), reward, str(max_completion_length)]
    if nproc == 1:
        cmd = [sys.executable, *args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
               "--master_port", str(free_port()), *args]
    done = (warm_launch.run(cmd, env=env) if nproc > 1 else
            subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]
