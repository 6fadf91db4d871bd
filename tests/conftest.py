"""Fixtures shared by the test files: a tiny random policy and a verifier pool."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_policy(tmp_path_factory) -> Path:
    """A small random-initialised demo-architecture policy (engine mechanics need no skill)."""
    from coreward.training.demo_model import build_demo_model, build_demo_tokenizer

    path = tmp_path_factory.mktemp("tiny_policy")
    tokenizer = build_demo_tokenizer()
    build_demo_model(tokenizer, seed=0, hidden=64, layers=2, heads=2, kv_heads=1, intermediate=128).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def verifier():
    from coreward.verify import Verifier

    with Verifier(num_workers=1) as v:
        yield v
