"""Two "machines" on this one: two `accelerate launch`es of configs/accelerate/multi_node_cpu.yaml
(`num_machines: 2`, one gloo process each, `--machine_rank` 0 and 1, rendezvous at 127.0.0.1) training rule,
Cooper (its RM optimizer offloaded and stepped on the RM's device, as its authors ran it), Co-rewarding-II and a frozen RM,
with periodic evaluation and the guard on, into one shared run directory, as configs/slurm/train_multinode.sbatch does on a
cluster. Machine 1 dies while checkpoint-2 is half written (SIGKILL: machine 0 has written its part, the marker is
missing), machine 0 is stopped as a scheduler would, both resume from checkpoint-1 (the half-written one passed over);
the run ends where a one-machine run of two processes ends: the policy, the EMA teacher, Cooper's RM and its counters.
(Kills of every process in another phase under 2 processes: tests/grpo/test_sharded.py, the reward phase, three
engines; every phase on one process: tests/grpo/test_trainer_faults.py.)

What a multi-node run can get wrong and this test would see:
* per-process files keyed by the node-local rank: both nodes would write `rng_state_0.pth` and the
  rollout buffer of rank 0 (each node's first process is local rank 0); resumed, machine 1 would continue
  from machine 0's buffer and RNG, and the weights would leave the one-machine run's. `num_iterations: 2`
  makes checkpoint 1 hold a half-used rollout buffer, so the buffer really is needed for an exact resume;
* shared files written by each node's main process: `metrics.jsonl` would hold every step twice;
* a run directory that is not shared (each machine its own disk): machine 1 would see no complete checkpoint
  and start from step 0 beside machine 0; both must refuse, naming what each sees;
* the run-directory lock taken per node (node 1 would refuse: node 0 holds it) or not at all (a second,
  unrelated run on the directory would be let in).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import psutil
import pytest
import torch
from safetensors.torch import load_file

from coreward.grpo.checkpoints import COMPLETE_MARKER, complete_checkpoints
from coreward.grpo.run_dir import LOCK_FILE, RunLock
from coreward.grpo.trainer import TRAINER_STATE
from coreward.rewards.cooper.variants import MEMBER_DIR
from coreward.runtime.errors import CorewardError
from coreward.runtime.metrics import read_metrics
from tests.grpo.test_sharded import GUARDED, assert_close, assert_guard_fired_at_step_1, labelled_methods
from tests.helpers.kill_resume import launch, train_command
from tests.helpers.multinode import REPO, launch_nodes


MULTI_NODE = REPO / "configs" / "accelerate" / "multi_node_cpu.yaml"
MAX_STEPS = 3


def settings(policy: Path) -> list[str]:
    # temperature 1.5: the memorized policy repeats its answers at 1.0, and a step whose groups all agree does not
    # move it (the runs must move for "the two machines end where one ends" to mean something)
    return [f"model.name_or_path={policy}", "data.limit=4", *GUARDED, "grpo.num_generations=4",
            "grpo.per_device_train_batch_size=4", "grpo.max_completion_length=16", "grpo.save_steps=1",
            "grpo.num_iterations=2", "grpo.learning_rate=1e-3", "grpo.beta=0.01", "grpo.temperature=1.5",
            "torch_threads=1"]


def lock_probe(outcome: dict):
    """While the nodes run: the lock is held by a process of machine 0, and a second run's lock is refused
    (the `RunLock` every `coreward train` takes, here taken at once rather than after a second start-up)."""

    def probe(run_dir: Path, nodes: list) -> None:
        deadline = time.monotonic() + 300
        while not ((run_dir / LOCK_FILE).is_file() and (run_dir / LOCK_FILE).read_text().strip()):
            assert time.monotonic() < deadline and all(n.poll() is None for n in nodes), "the run never took its lock"
            time.sleep(0.1)
        holder = json.loads((run_dir / LOCK_FILE).read_text())["pid"]
        outcome["holder_machine"] = [m for m, node in enumerate(nodes)
                                     if holder in [p.pid for p in psutil.Process(node.pid).children(recursive=True)]]
        try:
            with RunLock(run_dir):
                outcome["second_run"] = "let in"
        except CorewardError as err:
            outcome["second_run"] = str(err)
        outcome["nodes_alive"] = all(n.poll() is None for n in nodes)

    return probe


@pytest.mark.slow
def test_two_machines_share_a_run_directory_and_resume_as_one(memorized_policy, tiny_rm_path, other_rm, tmp_path):
    # Cooper's RM optimizer offloaded and stepped on the RM's device (the Cooper authors' verl setting, its paper config's):
    # its state moves in and out around every update on both processes, and resumes from the checkpoint. Cooper is a
    # co-optimized ensemble of two members that start from different RMs (member_rms), each saved and resumed.
    config = labelled_methods(tmp_path, tiny_rm_path, ", optimizer_offload: true, optimizer_offload_step: device, "
                                                      f"members: 2, member_rms: [{other_rm}]")
    overrides = settings(memorized_policy)

    # one machine, two processes: what the two machines must reproduce
    single = launch(train_command(config, tmp_path / "one_machine", overrides, MAX_STEPS, resume=False, nproc=2),
                    tmp_path / "one_machine")
    assert single.returncode == 0, single.log[-3000:]
    assert_guard_fired_at_step_1(tmp_path / "one_machine", evaluated=(0, 2, 3))
    # the update ran each prompt once for its rows on this process (grpo/shared_prompts.py), under DDP
    steps = [row for row in read_metrics(tmp_path / "one_machine" / "metrics.jsonl") if "update/tokens" in row]
    assert len(steps) == MAX_STEPS and all(r["update/tokens"] < r["update/tokens_unshared"] for r in steps), steps

    run_dir = tmp_path / "shared"
    lock = {}
    killed = launch_nodes(MULTI_NODE, 2, config, run_dir, overrides, MAX_STEPS, resume=False,
                          kill={1: "checkpoint:2"}, while_running=lock_probe(lock))
    assert "engine: DDP on 2 process(es)" in killed[0].log, killed[0].log[-3000:]
    assert killed[1].returncode != 0 and not killed[1].killed_by_harness, killed[1].log[-3000:]  # it died itself
    assert killed[0].returncode != 0  # its peer was lost: it failed, or the "scheduler" stopped it
    # node 1 was not refused (it got as far as its kill point); a second run was
    assert "is in use by" not in killed[1].log
    assert lock["nodes_alive"] and lock["holder_machine"] == [0], lock
    assert "is in use by" in lock["second_run"], lock
    assert [p.name for p in complete_checkpoints(run_dir)] == ["checkpoint-1"]
    assert (run_dir / "checkpoint-2").is_dir()  # half written: machine 0's part on disk, no marker, so passed over
    buffers = [torch.load(run_dir / "checkpoint-1" / TRAINER_STATE.format(rank=r), weights_only=False) for r in (0, 1)]
    assert all(b["buffered_inputs"] is not None for b in buffers)  # checkpoint 1 sits in the middle of a buffer

    # a run directory each machine holds on its own disk: they would start from different steps; both refuse
    local = [tmp_path / "machine0_disk", tmp_path / "machine1_disk"]
    shutil.copytree(run_dir, local[0])
    # (forked warm: the refusal is the run directory's check, not the script's)
    apart = launch_nodes(MULTI_NODE, 2, config, run_dir, overrides, MAX_STEPS, resume=True, run_dirs=local,
                         through_script=False)
    for node in apart:
        assert node.returncode != 0 and not node.killed_by_harness, node.log[-3000:]
        assert "the processes see different checkpoints" in node.log, node.log[-3000:]
    assert [p.name for p in complete_checkpoints(local[0])] == ["checkpoint-1"] and not (local[1] / "checkpoint-1").exists()

    resumed = launch_nodes(MULTI_NODE, 2, config, run_dir, overrides, MAX_STEPS, resume=True)
    for node in resumed:
        assert node.returncode == 0, (node.machine_rank, node.log[-3000:])
    assert f"--resume: continuing from {run_dir / 'checkpoint-1'}" in resumed[0].log
    assert "finished at step 3" in resumed[0].log and "finished at step" not in resumed[1].log

    # written once: the global main process's files hold each step once; per-process files, one per global rank
    assert [row["step"] for row in read_metrics(run_dir / "metrics.jsonl")] == list(range(MAX_STEPS + 1))  # 0: eval
    assert_guard_fired_at_step_1(run_dir, evaluated=(0, 2, 3))
    for checkpoint in complete_checkpoints(run_dir):
        assert sorted(p.name for p in checkpoint.glob("rng_state*.pth")) == ["rng_state_0.pth", "rng_state_1.pth"]
        assert sorted(p.name for p in checkpoint.glob(TRAINER_STATE.format(rank="*"))) == [
            TRAINER_STATE.format(rank=0), TRAINER_STATE.format(rank=1)]
        assert (checkpoint / COMPLETE_MARKER).is_file() and (checkpoint / "model.safetensors").is_file()

    # the two machines end where one machine with two processes ends
    ours, theirs = run_dir / f"checkpoint-{MAX_STEPS}", tmp_path / "one_machine" / f"checkpoint-{MAX_STEPS}"
    assert_close(load_file(ours / "model.safetensors"), load_file(theirs / "model.safetensors"))
    initial = load_file(Path(memorized_policy) / "model.safetensors")
    moved = load_file(ours / "model.safetensors")
    assert any(not torch.equal(moved[k].float(), initial[k].float()) for k in initial if k in moved)
    member = f"{MEMBER_DIR.format(k=1)}/rm/model.safetensors"
    for source, weights in (("co_rewarding_2", "teacher.safetensors"), ("cooper", "rm/model.safetensors"),
                            ("cooper", member)):
        assert_close(load_file(ours / "reward_sources" / source / weights),
                     load_file(theirs / "reward_sources" / source / weights))
    # the second member grew from member_rms[0], not from the first member's RM: its score head is still other_rm's
    # far more than tiny_rm's (a few steps at lr 1e-3 move it by little)
    head = "score.weight"
    grown = load_file(ours / "reward_sources" / "cooper" / member)[head]
    starts = {name: load_file(Path(path) / "model.safetensors")[head] for name, path in
              (("other", other_rm), ("tiny", tiny_rm_path))}
    assert (grown - starts["other"]).abs().max() < 0.1 * (grown - starts["tiny"]).abs().max()
    assert json.loads((ours / "reward_sources" / "cooper" / "cooper_state.json").read_text()) == \
        json.loads((theirs / "reward_sources" / "cooper" / "cooper_state.json").read_text())
    assert (run_dir / "final" / COMPLETE_MARKER).is_file()


def test_a_shared_filesystem_without_flock_runs_unlocked_and_says_so(tmp_path, monkeypatch, capsys):
    """Lustre mounted without `-o flock` answers flock with ENOSYS: the run goes on unlocked, with a warning,
    rather than dying on an OSError; a filesystem that locks still refuses a second holder."""
    import errno
    import fcntl

    with RunLock(tmp_path / "locking"):
        try:
            with RunLock(tmp_path / "locking"):
                raise AssertionError("a second holder was let in")
        except CorewardError as err:
            assert "is in use by" in str(err)

    def no_flock(handle, operation):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    with RunLock(tmp_path / "lustre"):
        pass
    assert "does not support flock" in capsys.readouterr().out
