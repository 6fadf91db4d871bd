"""Fixtures shared by the test files: a tiny random policy, one that knows four demo problems, a tiny
reward model, and a verifier pool."""

from __future__ import annotations

from pathlib import Path

import pytest


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
