"""Fixtures shared by the test files: a tiny random policy, one that knows four demo problems, a tiny
reward model, and a verifier pool."""

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


@pytest.fixture(scope="session")
def memorized_policy(tmp_path_factory) -> Path:
    """A tiny policy that knows the first four demo train problems by heart: at temperature 1 it is often
    right, so rule rewards vary within a group (GRPO has a signal) and Cooper finds verified positives."""
    import torch

    from coreward.data.synthetic import load_demo
    from coreward.training.demo_model import build_demo_model, build_demo_tokenizer

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        tokenizer = build_demo_tokenizer()
        model = build_demo_model(tokenizer, seed=0, hidden=64, layers=2, heads=2, kv_heads=1, intermediate=128)
        texts = [r.question + r.solution + tokenizer.eos_token for r in load_demo("train", 4)]
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        for _ in range(60):
            encoded = tokenizer(texts, return_tensors="pt", padding=True)
            labels = encoded["input_ids"].masked_fill(encoded["attention_mask"] == 0, -100)
            model(**encoded, labels=labels).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    finally:
        torch.set_num_threads(threads)
    path = tmp_path_factory.mktemp("memorized_policy")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_rm_path(tmp_path_factory) -> Path:
    """A random tiny VerifyRM (hidden 32) with the template's tags as tokens."""
    import torch

    from coreward.rm.model import VerifyRM
    from coreward.training.demo_model import build_demo_model, build_demo_tokenizer

    tokenizer = build_demo_tokenizer()
    model = build_demo_model(tokenizer, seed=0, hidden=32, layers=2, heads=2, kv_heads=1, intermediate=64)
    backbone = tmp_path_factory.mktemp("rm_backbone")
    model.save_pretrained(backbone)
    tokenizer.save_pretrained(backbone)
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny_rm") / "rm"
    VerifyRM.from_backbone(backbone, device="cpu", add_template_tokens=True, max_length=128).save(path)
    return path
