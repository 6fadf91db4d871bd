"""Cooper's RM sharded like the policy (rm/sharding.py), 2 gloo processes on CPU under torchrun: FSDP2, DeepSpeed
ZeRO-3 and ZeRO-2. The sharded learner must be the replicated one, split: the same scores, and after the same
pairs (5 pairs, so the processes' shares differ and one pads its passes; 2 epochs, so 2 optimizer steps per
update) the same weights within float tolerance. Its checkpoint is a whole RM `VerifyRM.from_pretrained` loads,
and a learner resumed from it and sharded again takes a next step equal to the replicated learner's next step
(which needs the AdamW moments back, not just the weights).

    python -m pytest -q tests/rewards/cooper/test_learner_sharded.py
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time
from pathlib import Path

import pytest
import torch


REPO = Path(__file__).resolve().parents[3]
SETTINGS = {"lr": 0.02, "weight_decay": 0.01, "batch_size": 4, "epochs": 2}


def pairs():
    from coreward.rewards.cooper.learner import Pair

    return [Pair(f"{a}+{b}=", str(a + b), f"{a}+{b}=#{a + b}", f"{a}+{b}=#{a + b + 1 + i}")
            for i, (a, b) in enumerate([(1, 2), (3, 4), (5, 6), (7, 1), (2, 2)])]


def triples():
    return [("1+2=", "3", "#3"), ("1+2=", "3", "#4"), ("3+4=", "7", "#7")]


def worker(engine: str, rm_path: str, out: str, offloads: list[bool]) -> None:
    """In each torchrun process: the sharded learner with each optimizer placement in turn (one launch for both of
    FSDP2's: a launch's start-up costs more than the learner's updates), each writing to `out`/offload-<0|1>."""
    from accelerate.state import PartialState

    state = PartialState(cpu=True)
    if engine != "fsdp2":
        import deepspeed

        deepspeed.init_distributed(dist_backend="gloo")
    for offload in offloads:
        sharded_learner(engine, rm_path, Path(out) / f"offload-{int(offload)}", offload, state.is_main_process)


def sharded_learner(engine: str, rm_path: str, out: Path, offload: bool, main_process: bool) -> None:
    """Scores, two updates, a save, a resumed learner's update and its save; the main process writes result.json."""
    from coreward.grpo.engines import partitioned_count
    from coreward.rewards.cooper.learner import STATE_FILE, RMLearner
    from coreward.rm.model import VerifyRM
    from coreward.rm.sharding import Sharding, score_unique

    sharding = Sharding(engine)
    rm = VerifyRM.from_pretrained(rm_path, device="cpu", batch_size=SETTINGS["batch_size"])
    learner = RMLearner(rm, **SETTINGS, optimizer_offload=offload, sharding=sharding)
    counts = partitioned_count(learner.rm.model)
    scores = score_unique(learner.rm, triples())
    metrics = [learner.update(pairs()), learner.update(pairs())]
    write_state = RMLearner._write_state

    def slow_write_state(self, directory):  # the main process slow to write its counters
        time.sleep(0.5)
        write_state(self, directory)

    if main_process:
        RMLearner._write_state = slow_write_state
    try:
        learner.save(out / "first")  # every process must still find the counters on return
    finally:
        RMLearner._write_state = write_state
    assert (out / "first" / STATE_FILE).is_file(), "save returned before the main process wrote the RM's counters"
    resumed = RMLearner.load(out / "first", "cpu", **SETTINGS, optimizer_offload=offload, sharding=sharding)
    metrics.append(resumed.update(pairs()))
    resumed.save(out / "second")
    if main_process:
        (out / "result.json").write_text(json.dumps({"counts": counts, "scores": scores, "metrics": metrics}))


def replicated(rm_path: Path, updates: int, offload: bool):
    from coreward.rewards.cooper.learner import RMLearner
    from coreward.rm.model import VerifyRM

    learner = RMLearner(VerifyRM.from_pretrained(rm_path, device="cpu", batch_size=SETTINGS["batch_size"]),
                        **SETTINGS, optimizer_offload=offload)
    metrics = [learner.update(pairs()) for _ in range(updates)]
    return learner, metrics


def has_deepspeed() -> bool:
    import importlib.util

    return importlib.util.find_spec("deepspeed") is not None


needs_deepspeed = pytest.mark.skipif(not has_deepspeed(), reason='the deepspeed extra: pip install -e ".[deepspeed]"')


@pytest.mark.parametrize("engine,offloads", [pytest.param("fsdp2", (False, True), id="fsdp2-offload-off-and-on"),
                                             pytest.param("zero3", (False,), marks=needs_deepspeed, id="zero3"),
                                             pytest.param("zero2", (False,), marks=needs_deepspeed, id="zero2")])
def test_sharded_learner_equals_replicated_and_resumes(engine, offloads, tiny_rm_path, tmp_path):
    from tests.helpers import warm_launch
    from tests.helpers.kill_resume import free_port

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
               __file__, engine, str(tiny_rm_path), str(tmp_path), ",".join(str(int(o)) for o in offloads)]
    done = warm_launch.run(command, env=env, cwd=REPO)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    for offload in offloads:
        check_learner(engine, offload, tiny_rm_path, tmp_path / f"offload-{int(offload)}")


def assert_same_to_rounding(saved: dict, expected: dict, what) -> None:
    """Every weight within 1e-4 (0.5% of one step's size, lr) but at most 0.1% of them: AdamW divides by √v, so where
    a gradient is tiny a rounding difference of the reduction order moves a weight by up to a step's size (how much
    depends on the CPU's kernels: an AMD EPYC moved one q_proj weight of this RM by just over 1e-4)."""
    off = sum(int(((saved[key] - expected[key]).abs() > 1e-4).sum()) for key in expected)
    total = sum(tensor.numel() for tensor in expected.values())
    assert off <= 1e-3 * total, (what, f"{off} of {total} weights off by more than 1e-4")


def distance(first: dict, second: dict) -> float:
    return sum(float((first[key] - second[key]).double().pow(2).sum()) for key in second) ** 0.5


def check_learner(engine: str, offload: bool, tiny_rm_path: Path, out: Path) -> None:
    from coreward.rewards.cooper.learner import RMLearner
    from coreward.rm.model import VerifyRM

    result = json.loads((out / "result.json").read_text())
    partial, total = result["counts"]
    assert total > 0 and (partial == 0 if engine == "zero2" else partial > 0)  # ZeRO-2: whole weights, split optimizer

    learner, metrics = replicated(tiny_rm_path, 2, offload)
    assert result["scores"] == pytest.approx(VerifyRM.from_pretrained(tiny_rm_path, device="cpu").score(
        *map(list, zip(*triples()))), abs=1e-6)
    for name in ("rm/loss", "rm/train_pair_accuracy"):
        assert [m[name] for m in result["metrics"][:2]] == pytest.approx([m[name] for m in metrics], abs=1e-5), name
    # the replicated learner groups pairs into passes by length, the sharded one by position: the same gradient,
    # summed in another order (a norm of about 1.6 moved by about 1e-5)
    assert [m["rm/grad_norm"] for m in result["metrics"][:2]] == pytest.approx(
        [m["rm/grad_norm"] for m in metrics], rel=1e-4)
    for name in ("rm/update_norm", "rm/weight_norm"):  # summed over the shards: the whole RM's, as replicated
        assert [m[name] for m in result["metrics"][:2]] == pytest.approx([m[name] for m in metrics], rel=1e-3), name
    initial = VerifyRM.from_pretrained(tiny_rm_path, device="cpu").model.state_dict()
    for checkpoint, expected in (("first", learner.rm.model.state_dict()), ("second", None)):
        if expected is None:  # one more update on both sides: equal only if the optimizer's moments came back
            from_fresh_moments = RMLearner(copy.deepcopy(learner.rm), **SETTINGS, optimizer_offload=offload)
            from_fresh_moments.update(pairs())
            learner.update(pairs())
            expected = learner.rm.model.state_dict()
        saved = VerifyRM.from_pretrained(out / checkpoint / "rm", device="cpu").model.state_dict()
        assert sorted(saved) == sorted(expected)
        assert_same_to_rounding(saved, expected, (offload, checkpoint))
    # the resumed step is the replicated learner's next step, far nearer to it than a step from fresh moments is
    assert distance(saved, expected) < 0.1 * distance(from_fresh_moments.rm.model.state_dict(), expected)
    assert any(not torch.equal(saved[k], initial[k]) for k in initial)  # the RM learned
    # the checkpoint names the model's own class (FSDP2 renames it to FSDP<class> while sharded)
    architectures = json.loads((out / "first" / "rm" / "config.json").read_text())["architectures"]
    assert architectures == [type(learner.rm.model).__name__]


if __name__ == "__main__":
    from coreward.runtime.distributed import exit_now, leave_process_group

    worker(sys.argv[1], sys.argv[2], sys.argv[3], [flag == "1" for flag in sys.argv[4].split(",")])
    # ended as `coreward train` ends a distributed run: the group left together, then no interpreter teardown (whose
    # destruction of gloo's threads aborted a ZeRO-3 rank, exit -6, after its files were written)
    if leave_process_group():
        exit_now(0)
