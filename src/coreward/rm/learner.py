"""The pairwise learner Cooper trains during RL: a VerifyRM, its own AdamW, and the Bradley-Terry update

    L(θ) = mean over pairs of −log σ(f_θ(q, a, o⁺) − f_θ(q, a, o⁻))

on (verified positive, wrong negative) pairs; gradient norm clipped, a step with a non-finite norm skipped
and counted. `save` / `load` carry weights (HF format, atomic), optimizer moments, the LR schedule's step and
counters through checkpoints.

Update schedule (the authors' is verl's critic update: mini-batches of 4 pairs, ppo_epochs passes, lr warmed up
linearly over 1% of the run's steps, then constant):
    for each of `epochs` passes, for each mini-batch of `minibatch_size` pairs (None: all pairs, one step)
        θ ← AdamW(θ, ∇ mean_{mini-batch} L)            lr_t = lr · min(1, t / (warmup_ratio · total_steps))
where t counts RL steps (one scheduler step per `update` call, as verl steps its critic scheduler per RL step).

Several processes: every process holds the same pairs. The update is data-parallel with one result: each
process backpropagates its share, the gradients are summed across processes (all-reduce), and every process
applies the same clip and AdamW step to the same summed gradient. That is element-wise arithmetic on
bitwise-identical inputs, so the RMs stay bitwise identical, even on GPUs whose backward kernels are not
deterministic, and the work is split instead of repeated on every process.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from transformers import get_constant_schedule_with_warmup

from coreward.rm.model import VerifyRM
from coreward.runtime.distributed import load_location, shard_bounds, world

logger = logging.getLogger(__name__)

RM_DIR, OPTIMIZER_FILE, SCHEDULER_FILE, STATE_FILE = "rm", "optimizer.pt", "scheduler.pt", "cooper_state.json"
RM_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass
class Pair:
    question: str
    reference: str
    positive: str
    negative: str


def pairwise_loss(s_pos: torch.Tensor, s_neg: torch.Tensor) -> torch.Tensor:
    """−log σ(s⁺ − s⁻) per pair (Bradley-Terry): small when the RM ranks the positive above the negative."""
    return -F.logsigmoid(s_pos - s_neg)


class RMLearner:
    """A VerifyRM with its own AdamW, trained on (positive, negative) pairs; identical on every process."""

    def __init__(self, rm, lr: float = 1e-5, weight_decay: float = 0.01, batch_size: int = 32,
                 max_grad_norm: float = 1.0, minibatch_size: int | None = None, epochs: int = 1,
                 warmup_ratio: float = 0.0, total_steps: int = 0, rm_dtype: str = "float32"):
        if rm_dtype not in RM_DTYPES:
            raise ValueError(f"rm_dtype must be one of {sorted(RM_DTYPES)}, got {rm_dtype!r}")
        self.rm = rm
        rm.model.to(RM_DTYPES[rm_dtype])  # the authors train their RM in bf16; float32 is today's default
        self.batch_size = batch_size
        self.max_grad_norm = max_grad_norm
        self.minibatch_size, self.epochs = minibatch_size, epochs
        self.parameters = [p for p in rm.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.parameters, lr=lr, weight_decay=weight_decay)
        warmup = int(warmup_ratio * total_steps)  # verl: int(lr_warmup_steps_ratio * total_training_steps)
        self.scheduler = get_constant_schedule_with_warmup(self.optimizer, num_warmup_steps=warmup)
        self.updates = 0  # optimizer steps taken
        self.skipped = 0  # steps skipped for a non-finite gradient norm

    def update(self, pairs: list[Pair]) -> dict[str, float]:
        """`epochs` passes over `pairs` (the same list on every process), one optimizer step per mini-batch."""
        if not pairs:
            self.scheduler.step()  # the warmup counts RL steps, with pairs or without
            return {}
        model = self.rm.model
        model.train()
        size = self.minibatch_size or len(pairs)
        sums, norms = torch.zeros(4, dtype=torch.float64), []  # loss, σ(s⁺), σ(s⁻), s⁺ > s⁻ over every pass
        for _ in range(self.epochs):
            for first in range(0, len(pairs), size):
                part_sums, norm = self._step(pairs[first : first + size])
                sums, norms = sums + part_sums, norms + [norm]
        self.scheduler.step()  # one schedule step per RL step
        model.eval()
        loss, pos, neg, ordered = (sums / (len(pairs) * self.epochs)).tolist()
        return {"rm/loss": loss, "rm/score_pos": pos, "rm/score_neg": neg, "rm/train_pair_accuracy": ordered,
                "rm/grad_norm": sum(norms) / len(norms), "rm/skipped_updates": float(self.skipped),
                "rm/lr": self.optimizer.param_groups[0]["lr"]}

    def _step(self, pairs: list[Pair]) -> tuple[torch.Tensor, float]:
        """One optimizer step on the mean pairwise loss of `pairs`, split across processes; metric sums and norm."""
        sums = torch.zeros(4, dtype=torch.float64)
        rank, size = world()
        start, stop = shard_bounds(len(pairs), rank, size)
        chunk = max(1, self.batch_size // 2)  # a pair is two sequences
        for first in range(start, stop, chunk):
            part = pairs[first : min(first + chunk, stop)]
            logits = self.rm.logits([p.question for p in part] * 2, [p.reference for p in part] * 2,
                                    [p.positive for p in part] + [p.negative for p in part])
            s_pos, s_neg = logits[: len(part)], logits[len(part) :]
            losses = pairwise_loss(s_pos, s_neg)
            (losses.sum() / len(pairs)).backward()  # summed over chunks and processes: the mean over all pairs
            sums += torch.stack([losses.sum(), s_pos.sigmoid().sum(), s_neg.sigmoid().sum(),
                                 (s_pos > s_neg).sum()]).detach().double().cpu()
        if size > 1:
            sums = self._sum_across_processes(sums)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.parameters, self.max_grad_norm)
        if torch.isfinite(grad_norm):
            self.optimizer.step()
            self.updates += 1
        else:
            self.skipped += 1
            logger.warning("cooper: RM gradient norm is %s, update skipped (%d so far)", grad_norm.item(), self.skipped)
        self.optimizer.zero_grad(set_to_none=True)
        return sums, grad_norm.item()

    def _sum_across_processes(self, sums: torch.Tensor) -> torch.Tensor:
        """All-reduce every gradient (a process without pairs contributes zeros) and the metric sums."""
        import torch.distributed as dist

        for p in self.parameters:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad)
        sums = sums.to(self.rm.device)
        dist.all_reduce(sums)
        return sums.cpu()

    def save(self, directory: Path) -> None:
        """Weights (HF format, atomic), optimizer state and counters."""
        self.rm.save_pretrained(directory / RM_DIR)
        torch.save(self.optimizer.state_dict(), directory / OPTIMIZER_FILE)
        torch.save(self.scheduler.state_dict(), directory / SCHEDULER_FILE)
        (directory / STATE_FILE).write_text(json.dumps({"updates": self.updates, "skipped": self.skipped}))

    @classmethod
    def load(cls, directory: Path, device, **settings) -> RMLearner:
        """The learner `save` wrote: same weights, same optimizer moments and step counts."""
        learner = cls(VerifyRM.from_pretrained(directory / RM_DIR, device=device, batch_size=settings["batch_size"]), **settings)
        learner.optimizer.load_state_dict(torch.load(directory / OPTIMIZER_FILE, map_location=load_location(learner.rm.device)))
        if (directory / SCHEDULER_FILE).is_file():  # checkpoints written before the schedule existed have none
            learner.scheduler.load_state_dict(torch.load(directory / SCHEDULER_FILE))
        state = json.loads((directory / STATE_FILE).read_text())
        learner.updates, learner.skipped = state["updates"], state["skipped"]
        return learner
