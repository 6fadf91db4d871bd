"""Paired views for Co-rewarding-I: each question and its rephrasing are rolled out in the same step.

The dataset holds two rows per pair (`view` 0: the question, `view` 1: its rephrasing, same `pair_id`).
The sampler shuffles *pairs* and emits `[q]×G + [q']×G` side by side, so a pair's 2G rollouts always
land in one generation batch — and, because rewards are computed on the gathered global batch, they
are scored together however the batch is split across processes.
"""

from __future__ import annotations

from typing import Any, Iterator

import torch
from torch.utils.data import Sampler


def paired_rows(pairs: list[tuple[dict[str, Any], str]]) -> list[dict[str, Any]]:
    """Two dataset rows per (row, rephrased question): the original (view 0) then the rephrasing (view 1)."""
    rows = []
    for row, rephrased in pairs:
        pair_id = str(row["id"])
        rows.append({**row, "pair_id": pair_id, "view": 0})
        rows.append({**row, "question": rephrased, "pair_id": pair_id, "view": 1})
    return rows


class PairedRepeatSampler(Sampler[int]):
    """TRL's RepeatSampler over pairs: rows 2p and 2p+1 are one unit, each repeated G times.

    `batch_size` counts prompts per generation batch (both views), so it must be even.
    """

    def __init__(self, num_rows: int, mini_repeat_count: int, batch_size: int, repeat_count: int = 1,
                 shuffle: bool = True, seed: int | None = 0):
        if num_rows % 2:
            raise ValueError(f"a paired dataset has an even number of rows, got {num_rows}")
        if batch_size % 2:
            raise ValueError(f"paired views need an even number of prompts per generation batch, got {batch_size}")
        self.num_pairs = num_rows // 2
        self.pairs_per_batch = batch_size // 2
        self.mini_repeat_count = mini_repeat_count
        self.repeat_count = repeat_count
        self.shuffle = shuffle
        self.generator = torch.Generator()
        if seed is not None:
            self.generator.manual_seed(seed)

    def __iter__(self) -> Iterator[int]:
        order = torch.randperm(self.num_pairs, generator=self.generator).tolist() if self.shuffle else list(range(self.num_pairs))
        chunks = [order[i : i + self.pairs_per_batch] for i in range(0, len(order), self.pairs_per_batch)]
        for chunk in (c for c in chunks if len(c) == self.pairs_per_batch):
            for _ in range(self.repeat_count):
                for pair in chunk:
                    for row in (2 * pair, 2 * pair + 1):
                        for _ in range(self.mini_repeat_count):
                            yield row

    def __len__(self) -> int:
        usable_pairs = (self.num_pairs // self.pairs_per_batch) * self.pairs_per_batch
        return usable_pairs * 2 * self.mini_repeat_count * self.repeat_count
