"""Tiny models built in seconds, without a download: what tests, fault-injection runs and benchmarks train.

* `build_random_policy`: a random-initialised demo-architecture policy, for mechanics that need no skill.
* `build_memorized_policy`: a 2-layer demo-architecture policy that knows the first few demo train problems by
  heart. At temperature 1 it is often right, so rule rewards vary within a group (GRPO has a signal) and
  Cooper finds verified positives.
* `build_answering_policy`: a 2-layer demo-architecture policy that ends any demo question (or its rephrasing) with
  one of a few fixed endings, about equally often, whatever the question: group-level answer rewards vary within
  and across groups on any seed.
* `build_random_rm`: a randomly initialised tiny VerifyRM with the template's tags as tokens.
"""

from __future__ import annotations

from pathlib import Path

import torch


def build_random_policy(directory: str | Path, hidden: int = 64, layers: int = 2) -> Path:
    """A random demo-architecture policy (2 heads, 1 KV head, MLP twice `hidden`) saved with its tokenizer."""
    from coreward.demo.model import build_demo_model, build_demo_tokenizer

    tokenizer = build_demo_tokenizer()
    model = build_demo_model(tokenizer, seed=0, hidden=hidden, layers=layers, heads=2, kv_heads=1, intermediate=2 * hidden)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return Path(directory)


def train_small_policy(directory: str | Path, texts_of, steps: int) -> Path:
    """A demo-architecture policy (hidden 64, 2 layers) trained full-batch on `texts_of(tokenizer)` for `steps`
    AdamW steps (lr 1e-2, one thread: a model this small trains fastest, and identically, on one), then saved."""
    from coreward.demo.model import build_demo_model, build_demo_tokenizer

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        tokenizer = build_demo_tokenizer()
        model = build_demo_model(tokenizer, seed=0, hidden=64, layers=2, heads=2, kv_heads=1, intermediate=128)
        encoded = tokenizer(texts_of(tokenizer), return_tensors="pt", padding=True)
        labels = encoded["input_ids"].masked_fill(encoded["attention_mask"] == 0, -100)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        for _ in range(steps):
            model(**encoded, labels=labels).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    finally:
        torch.set_num_threads(threads)
    directory = Path(directory)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def build_memorized_policy(directory: str | Path, problems: int = 4, steps: int = 60) -> Path:
    """Train the policy on `problems` demo questions+solutions for `steps` full-batch steps (one thread)."""
    from coreward.data.synthetic import load_demo

    return train_small_policy(directory, lambda tokenizer: [r.question + r.solution + tokenizer.eos_token
                                                            for r in load_demo("train", problems)], steps)


def build_answering_policy(directory: str | Path, endings: tuple[str, ...] = ("#### 1", "#### 2", " How many?"),
                           problems: int = 16, steps: int = 40) -> Path:
    """Train the policy on each of the first `problems` demo questions and their rephrasings followed by each of
    `endings` (then end of text), for `steps` full-batch steps (one thread, about 2 s): at temperature 1 it writes
    one of the endings, each about equally often, after any of those questions (`"#### 1"` has the answer 1;
    `" How many?"` has none)."""
    from coreward.data.synthetic import demo_rephrasing, load_demo

    records = load_demo("train", problems)
    questions = [r.question for r in records] + [demo_rephrasing(r) for r in records]
    return train_small_policy(directory, lambda tokenizer: [q + ending + tokenizer.eos_token for q in questions
                                                            for ending in endings], steps)


def build_random_rm(directory: str | Path) -> Path:
    """A random tiny VerifyRM (hidden 32, 2 layers) saved to `directory` (its backbone beside it)."""
    from coreward.demo.model import build_demo_model, build_demo_tokenizer
    from coreward.rm.model import VerifyRM

    directory = Path(directory)
    tokenizer = build_demo_tokenizer()
    model = build_demo_model(tokenizer, seed=0, hidden=32, layers=2, heads=2, kv_heads=1, intermediate=64)
    backbone = directory.with_name(directory.name + "_backbone")
    model.save_pretrained(backbone)
    tokenizer.save_pretrained(backbone)
    torch.manual_seed(0)
    VerifyRM.from_backbone(backbone, device="cpu", add_template_tokens=True, max_length=128).save_pretrained(directory)
    return directory
