"""The tests' warm torchrun (tests/helpers/warm_launch.py) gives its workers what torchrun's exec'd workers have: the
distributed environment, a process group that works, unbuffered streams, an interpreter's signal handlers, no signal
when the launcher dies, and torchrun's exit status for a worker that ends with os._exit(0) (how `coreward train`
ends a distributed run), exits 2, or dies of SIGKILL. The file doubles as the worker:

    torchrun --nproc_per_node 2 tests/test_warm_launch.py OUT MODE
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import warm_launch
from tests.helpers.kill_resume import free_port


REPO = Path(__file__).resolve().parents[1]


def launch(out: Path, mode: str, fresh: bool = False):
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
               str(free_port()), __file__, str(out), mode]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    if fresh:
        import subprocess

        return subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    return warm_launch.run(command, env=env, cwd=REPO, timeout=300)


@pytest.mark.parametrize("fresh", [False, True], ids=["warm", "fresh"])
def test_a_warm_worker_is_what_torchrun_execs(tmp_path, fresh):
    done = launch(tmp_path, "report", fresh)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["rank"] for r in ranks] == [0, 1] and {r["world"] for r in ranks} == {2}
    assert ranks[0]["sum"] == ranks[1]["sum"] == 1  # all_reduce over gloo: 0 + 1
    for r in ranks:
        assert r["handlers"] == {"SIGTERM": "default", "SIGHUP": "default", "SIGQUIT": "default", "SIGINT": "python"}
        assert r["parent_death_signal"] == 0
        assert r["argv0"].endswith("test_warm_launch.py")
    # printed just before os._exit(0), which flushes nothing: there only because the stream is unbuffered
    assert done.stdout.count("unflushed line from rank") == 2


@pytest.mark.parametrize("mode,killed", [("exit2", False), ("sigkill", True)])
def test_a_failing_worker_fails_the_launch_as_torchrun_reports_it(tmp_path, mode, killed):
    """Rank 1 exits 2 or dies of SIGKILL while rank 0 waits: the launcher stops rank 0 and reports rank 1 as torchrun
    does, with exit status 1."""
    done = launch(tmp_path, mode)
    assert done.returncode == 1, (done.stdout + done.stderr)[-3000:]  # torchrun's status for a failed worker
    assert "ChildFailedError" in done.stderr and "rank      : 1 (local_rank: 1)" in done.stderr, done.stderr[-3000:]
    assert ("Signal 9 (SIGKILL)" if killed else "exitcode  : 2") in done.stderr, done.stderr[-3000:]


def _worker(out: Path, mode: str) -> None:
    import ctypes

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    total = torch.tensor([rank])
    dist.all_reduce(total)
    if mode in ("exit2", "sigkill"):
        if rank == 1:
            sys.exit(2) if mode == "exit2" else os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)  # rank 0 waits outside any collective, to be stopped by the launcher
    death = ctypes.c_int(-1)
    ctypes.CDLL(None, use_errno=True).prctl(2, ctypes.byref(death))  # PR_GET_PDEATHSIG

    def handler(number: int) -> str:
        current = signal.getsignal(number)
        return "default" if current == signal.SIG_DFL else "python" if current == signal.default_int_handler else repr(current)

    report = {"rank": rank, "world": dist.get_world_size(), "sum": int(total), "parent_death_signal": death.value,
              "handlers": {s.name: handler(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGINT)},
              "argv0": sys.argv[0]}
    (out / f"rank{rank}.json").write_text(json.dumps(report))
    dist.barrier()
    dist.destroy_process_group()
    print(f"unflushed line from rank {rank}")
    os._exit(0)


if __name__ == "__main__":
    _worker(Path(sys.argv[1]), sys.argv[2])
