"""Several "machines" on this one (test machinery): configs/slurm/launch_node.sh once per node, each with its
own MACHINE_RANK (its `accelerate launch --machine_rank`), all meeting at 127.0.0.1 on one port, all writing
one run directory — what configs/slurm/train_multinode.sbatch does on a cluster with a shared filesystem."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from coreward.runtime.faults import FAULT_ENV, FAULT_RANK_ENV
from tests.helpers.kill_resume import _kill_group, free_port, train_command


REPO = Path(__file__).resolve().parents[2]
LAUNCH_NODE = REPO / "configs" / "slurm" / "launch_node.sh"


@dataclass
class Node:
    """One node's launch: how it ended and what it printed."""

    machine_rank: int
    returncode: int
    log: str
    killed_by_harness: bool  # still running after another node died: stopped, as a scheduler would


def node_command(accelerate_config: Path, machine_rank: int, num_machines: int, port: int, config: Path,
                 run_dir: Path, overrides: list[str], max_steps: int, resume: bool) -> tuple[list[str], dict]:
    """configs/slurm/launch_node.sh as machine `machine_rank` of `num_machines` (one process each), the main
    process at 127.0.0.1:port: the command and the environment it reads (what SLURM would set)."""
    train = train_command(config, run_dir, overrides, max_steps, resume)  # [python, -m, coreward.cli, train, ...]
    arguments = train[train.index("--max-steps"):]  # launch_node.sh takes CONFIG RUN_DIR, then the rest
    env = {"MACHINE_RANK": str(machine_rank), "NUM_MACHINES": str(num_machines), "GPUS_PER_NODE": "1",
           "MAIN_HOST": "127.0.0.1", "MAIN_PORT": str(port), "ACCELERATE_CONFIG": str(accelerate_config),
           "PYTHON": sys.executable}
    return ["bash", str(LAUNCH_NODE), str(config), str(run_dir), *arguments], env


def warm_node_command(accelerate_config: Path, machine_rank: int, num_machines: int, port: int, config: Path,
                      run_dir: Path, overrides: list[str], max_steps: int, resume: bool) -> list[str]:
    """The `accelerate launch` line configs/slurm/launch_node.sh runs for one node (one process a node), for a launch
    forked warm (tests/helpers/warm_launch.py) rather than through the script."""
    train = train_command(config, run_dir, overrides, max_steps, resume)
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(accelerate_config),
            "--num_machines", str(num_machines), "--num_processes", str(num_machines), "--machine_rank",
            str(machine_rank), "--main_process_ip", "127.0.0.1", "--main_process_port", str(port), *train[1:]]


def launch_nodes(accelerate_config: Path, num_machines: int, config: Path, run_dir: Path, overrides: list[str],
                 max_steps: int, resume: bool, kill: dict[int, str] | None = None, timeout_s: float = 600,
                 grace_s: float = 60, while_running=None, run_dirs: list[Path] | None = None,
                 through_script: bool = True) -> list[Node]:
    """Start every node at once and wait for all. `kill` maps a machine rank to a `PHASE:STEP` kill point
    (COREWARD_FAULT_AT in that node's environment only: that machine dies there). When a node fails, the
    others get `grace_s` seconds to notice and exit; any still running then is SIGKILLed, as a scheduler
    ends a job whose node is lost. `while_running(run_dir, processes)` is called once after the start.
    `run_dirs` gives each node a directory of its own (a run directory that is not shared). `through_script`:
    each node through configs/slurm/launch_node.sh in new processes; else the `accelerate launch` it runs, forked
    warm (about 20 CPU-seconds of imports fewer for two nodes)."""
    from tests.helpers import warm_launch

    port = free_port()
    processes, logs = [], []
    for rank in range(num_machines):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
        env.pop(FAULT_ENV, None)
        env.pop(FAULT_RANK_ENV, None)
        if kill and rank in kill:
            env[FAULT_ENV] = kill[rank]
        log = tempfile.NamedTemporaryFile("w+")  # a file, not a pipe: a full pipe would stall the run
        node_dir = run_dirs[rank] if run_dirs else run_dir
        if through_script:
            command, node_env = node_command(accelerate_config, rank, num_machines, port, config, node_dir, overrides,
                                             max_steps, resume)
            env.update(node_env)
            processes.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, text=True,
                                              cwd=REPO))
        else:
            command = warm_node_command(accelerate_config, rank, num_machines, port, config, node_dir, overrides,
                                        max_steps, resume)
            processes.append(warm_launch.start(command, log.name, log.name, env, REPO))
        logs.append(log)
    if while_running is not None:
        while_running(run_dir, processes)
    deadline, first_failure = time.monotonic() + timeout_s, None
    stopped = [False] * num_machines
    while any(p.poll() is None for p in processes):
        now = time.monotonic()
        if first_failure is None and any(p.poll() not in (None, 0) for p in processes):
            first_failure = now
        if now > deadline or (first_failure is not None and now > first_failure + grace_s):
            for rank, process in enumerate(processes):
                if process.poll() is None:
                    _kill_group(process)
                    stopped[rank] = True
        time.sleep(0.1)
    nodes = []
    for rank, (process, log) in enumerate(zip(processes, logs)):
        log.seek(0)
        nodes.append(Node(rank, process.wait(), log.read(), stopped[rank]))
        log.close()
    return nodes
