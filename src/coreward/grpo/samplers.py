"""Paired views for Co-rewarding-I: each question and its rephrasing are rolled out in the same step.

The dataset holds two rows per pair (`view` 0: the question, `view` 1: its rephrasing, same `pair_id`;
`data/rows.py`).
The sampler shuffles *pairs* and emits `[q]×G + [q']×G` side by side, so a pair's 2G rollouts always
land in one generation batch — and, because rewards are computed on the gathered global batch, they
are scored together however the batch is split across processes.
"""

from __future__ import annotations

from typing import Any, Iterator

import torch
from torch.utils.data import Sampler
from trl.trainer.utils import RepeatSampler


class EpochReplay:
    """`set_epoch(e)`: the shuffling generator as an uninterrupted run has it when epoch `e` begins.

    TRL's `RepeatSampler` seeds its generator once and draws one permutation per pass, so epoch e's order
    depends on how many passes *this process* has made. A run resumed in epoch e > 0 made none, and
    would replay epoch 0's order (a different batch, so different weights). Reseeding and drawing the e
    earlier permutations again restores the exact order; it is the same stream an uninterrupted run uses.
    """

    seed: int | None
    shuffle: bool
    generator: torch.Generator

    def _units(self) -> int:
        raise NotImplementedError

    def set_epoch(self, epoch: int) -> None:
        if not self.shuffle or self.seed is None:
            return
        self.generator.manual_seed(self.seed)
        for _ in range(epoch):
            torch.randperm(self._units(), generator=self.generator)


class ResumableRepeatSampler(EpochReplay, RepeatSampler):
    """TRL's `RepeatSampler` (one prompt's G copies side by side) with `set_epoch` (see `EpochReplay`)."""

    def _units(self) -> int:
        return self.num_samples


class PairedRepeatSampler(EpochReplay, Sampler[int]):
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
        self.seed = seed
        self.generator = torch.Generator()
        if seed is not None:
            self.generator.manual_seed(seed)

    def _units(self) -> int:
        return self.num_pairs

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


def balanced_view_shuffle(batch: dict[str, Any], chunks: int) -> dict[str, Any] | None:
    """TRL's shuffle of a generation batch before it is cut into `chunks` micro-batches, with every micro-batch
    holding as many question rows (view 0) as rephrasing rows (view 1): random question rows, each beside its
    rephrasing's row (the k-th question row of the batch and the k-th rephrasing row are one pair and one rollout
    index). None where the batch can't be balanced (then TRL's own shuffle applies).

    The authors' `update_policy` (Co-rewarding-I dp_actor.py) zips the k-th micro-batch of questions with the k-th
    of rephrasings, each view cut in its own order (`_balance_batch` applied to each view apart), so theirs pair
    unrelated questions. With `view_loss: per_view` that pairing does not change the loss: it is Σ_k of each view's
    token mean over its rows in micro-batch k, and the two views' sums are taken apart (tests/grpo/test_view_balance.py).
    Which rows of one view share a micro-batch does change it: here random rows, theirs in order (docs/reference/paper-settings.md)."""
    views = batch.get("view")
    if not isinstance(views, torch.Tensor):
        return None
    questions, rephrasings = (torch.nonzero(views == v).flatten() for v in (0, 1))
    size = views.shape[0]
    if len(questions) != len(rephrasings) or size % chunks or (size // chunks) % 2:
        return None
    half, pairs = size // chunks // 2, torch.randperm(len(questions))
    order = torch.cat([torch.cat([questions[pairs[j * half:(j + 1) * half]], rephrasings[pairs[j * half:(j + 1) * half]]])
                       for j in range(chunks)])
    return permute_rows(batch, order)


def permute_rows(batch: dict[str, Any], order: torch.Tensor) -> dict[str, Any]:
    """A generation batch's rows in `order`: every tensor and list along its first dimension, as TRL's
    `shuffle_sequence_dict` moves them (None and 0-d tensors, such as `num_items_in_batch`, as they are)."""

    def permute(value):
        if value is None or (isinstance(value, torch.Tensor) and value.ndim == 0):
            return value
        if isinstance(value, torch.Tensor):
            return value[order.to(value.device)]
        return [value[i] for i in order.tolist()]

    return {key: permute(value) for key, value in batch.items()}
