"""Fixtures shared by the test files: a tiny random policy, one that knows four demo problems, a tiny
reward model, and a verifier pool."""

from __future__ import annotations

from pathlib import Path

import pytest


# The slowest test files, slowest first (one `pytest -n 2 --dist loadfile --durations=0` run of the whole suite on 2
# busy cores, each file's setup, call and teardown summed: 20-130 s each, less since for the files that computed on
# torch's default threads), run first: `--dist loadfile` hands whole files to the workers in collection order, and a
# slow file handed out last keeps one worker busy while the other has finished. The rest follow in collection order,
# most of them a few seconds each.
SLOWEST_FILES = ("test_gpu_check.py", "grpo/test_preemption.py", "demo/test_run.py", "runtime/test_real_models.py",
                 "rewards/cooper/test_memory_controls.py", "grpo/test_plan.py", "grpo/test_sharded.py",
                 "grpo/test_trainer_faults.py", "rewards/cooper/test_cooper.py", "grpo/test_multinode.py",
                 "grpo/test_precision.py", "grpo/test_kl_from_init.py", "grpo/test_run_dir.py",
                 "test_user_scripts.py", "rm/test_train_resume.py", "grpo/test_sharded_teacher.py",
                 "grpo/test_guard.py", "grpo/test_trainer.py", "rewards/cooper/test_learner.py",
                 "test_paper_configs.py", "rewards/test_co_rewarding_2.py", "grpo/test_train_learns.py",
                 "rewards/test_teacher_behaviour.py", "verify/test_equivalence.py", "evaluation/test_compare.py",
                 "demo/test_sft.py", "grpo/test_every_option.py")


def pytest_configure(config):
    """Whatever first starts this process's forkserver (a verifier pool, a forked run of the kill-and-resume harness)
    starts it with the training stack imported, so every one-process `coreward` command and every torchrun or
    accelerate launch the tests make is forked from it rather than paying its imports again (tests/helpers/runs.py,
    tests/helpers/kill_resume.py, tests/helpers/warm_launch.py).

    Workers keep torch's default threads (every core): set to one per worker, a worker's file ran alone on one core
    whenever the other waited on a process it had started, and the whole suite took longer (docs/figures.md, "the
    test suite"). Tests whose small models lose on a second thread ask for one (`one_torch_thread`)."""
    from coreward.experiments.jobs import PRELOAD
    from coreward.runtime import forkserver

    forkserver.context(*PRELOAD, "tests.helpers.forkserver_warm")


def pytest_collection_finish(session):
    """The objects the collection made (every test module and what it imports: about a million) go to the collector's
    permanent generation. Each in-process training run makes a full collection (transformers' Trainer, at the start
    of its loop), and in a worker holding the whole suite's modules that took about 1 s (a py-spy profile of the
    suite, 2026-11-29); frozen, only what the tests made since is scanned. Nothing collectable is frozen: the
    collection runs first."""
    import gc

    gc.collect()
    gc.freeze()


def pytest_collection_modifyitems(config, items):
    tests = Path(__file__).parent

    def rank(item) -> int:
        path = Path(str(item.fspath))
        relative = path.relative_to(tests).as_posix() if path.is_relative_to(tests) else ""
        return SLOWEST_FILES.index(relative) if relative in SLOWEST_FILES else len(SLOWEST_FILES)

    items.sort(key=rank)  # stable: the other files, and the tests within a file, keep their order


@pytest.fixture(autouse=True)
def signal_handlers_left_as_found():
    """A test leaves SIGINT and SIGTERM as it found them: a handler left installed (a training's "stop after the
    current step") changes what Ctrl-C does in every later test of the same worker, so a leak fails the test that
    made it, and is undone for the tests that follow."""
    import signal

    numbers = (signal.SIGINT, signal.SIGTERM)
    before = {number: signal.getsignal(number) for number in numbers}
    yield
    from coreward.runtime.interrupt import _raise_keyboard_interrupt

    # a command run in this process installs `catch_ctrl_c`'s handler for the process's life, by design: undone, not a leak
    leaked = {signal.Signals(n).name: signal.getsignal(n) for n in numbers
              if signal.getsignal(n) not in (before[n], _raise_keyboard_interrupt)}
    for number, handler in before.items():
        signal.signal(number, handler)
    assert not leaked, f"the test left these signal handlers installed: {leaked}"


@pytest.fixture(scope="session")
def tiny_policy(tmp_path_factory) -> Path:
    """A small random-initialised demo-architecture policy (engine mechanics need no skill)."""
    from tests.helpers.tiny_models import build_random_policy

    return build_random_policy(tmp_path_factory.mktemp("tiny_policy"), hidden=64, layers=2)


@pytest.fixture(scope="module")
def one_torch_thread():
    """Models this small run faster on one thread: with two, thread synchronisation costs more than the math.
    A module opts in with `pytestmark = pytest.mark.usefixtures("one_torch_thread")`."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def verifier():
    from coreward.verify import Verifier

    with Verifier(num_workers=1) as v:
        yield v


@pytest.fixture(scope="session")
def memorized_policy(tmp_path_factory) -> Path:
    """A tiny policy that knows the first four demo train problems by heart: at temperature 1 it is often
    right, so rule rewards vary within a group (GRPO has a signal) and Cooper finds verified positives."""
    from tests.helpers.tiny_models import build_memorized_policy

    return build_memorized_policy(tmp_path_factory.mktemp("memorized_policy"))


@pytest.fixture(scope="session")
def tiny_rm_path(tmp_path_factory) -> Path:
    """A random tiny VerifyRM (hidden 32) with the template's tags as tokens."""
    from tests.helpers.tiny_models import build_random_rm

    return build_random_rm(tmp_path_factory.mktemp("tiny_rm") / "rm")


@pytest.fixture(scope="session")
def other_rm(tiny_rm_path, tmp_path_factory) -> str:
    """The tiny RM with its one-logit head drawn again (seed 1, scaled up so that its scores differ by tenths): a
    second RM for ensembles whose members start from different RMs (Cooper's `member_rms`)."""
    import torch

    from coreward.rm.model import VerifyRM

    rm = VerifyRM.from_pretrained(tiny_rm_path, device="cpu")
    with torch.no_grad():
        head = rm.model.score.weight
        head.copy_(30 * torch.randn(head.shape, generator=torch.Generator().manual_seed(1)) / 32)
    return str(rm.save_pretrained(tmp_path_factory.mktemp("other_rm") / "rm"))
