"""The pairwise learner Cooper trains during RL: a VerifyRM, its own AdamW, and the Bradley-Terry update

    L(θ) = mean over pairs of −log σ(f_θ(q, a, o⁺) − f_θ(q, a, o⁻))

on (verified positive, wrong negative) pairs (with `anchor` λ > 0, a variant: L(θ) + (λ/2)·‖θ − θ_0‖², θ_0 the weights
the learner started from); gradient norm clipped, a step with a non-finite norm skipped
and counted. `save` / `load` carry weights (HF format, atomic), optimizer moments and counters through
checkpoints.

Several processes: every process holds the same pairs. The update is data-parallel with one result: each
process backpropagates its share, the gradients are summed across processes (all-reduce), and every process
applies the same clip and AdamW step to the same summed gradient. That is element-wise arithmetic on
bitwise-identical inputs, so the RMs stay bitwise identical, even on GPUs whose backward kernels are not
deterministic, and the work is split instead of repeated on every process.

Sharded (`sharding`: the policy's FSDP2 / ZeRO-2 / ZeRO-3, see rm/sharding.py): the same schedule and loss, but
the RM's parameters and optimizer state are split across the processes, and the engine reduces the gradients.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F

from coreward.rm.model import VerifyRM
from coreward.runtime.distributed import load_location, shard_bounds, world
from coreward.runtime.errors import CorewardError
from coreward.runtime.precision import is_low_precision, round_away_warning


logger = logging.getLogger(__name__)

RM_DIR, OPTIMIZER_FILE, STATE_FILE = "rm", "optimizer.pt", "cooper_state.json"
ANCHOR_FILE = "anchor_weights.pt"  # θ_0 of the `anchor` pull: the weights the run's RM started from
MASTERS_FILE = "master_weights.pt"  # a bf16 RM's float32 masters: its weights in rm/ are only their rounded copies
NORM_CHUNK = 1 << 22  # elements per float64 chunk of the update norms (32 MiB)


@dataclass
class Pair:
    question: str
    reference: str
    positive: str
    negative: str


@dataclass
class LearnerSettings:
    """The RM's optimizer and its update schedule per RL step: declared here once, Cooper's params of the same
    names (`rewards/cooper/reward.py`'s Params extend this class, so a config sets them as `rewards.N.params.lr`, ...)."""

    lr: float = 1e-5  # the RM's AdamW learning rate
    weight_decay: float = 0.01  # the RM's AdamW weight decay
    batch_size: int = 32  # sequences per RM forward pass (a pair is two)
    minibatch_size: int | None = None  # pairs per RM optimizer step (None: all of a step's pairs at once; the authors: 4)
    epochs: int = 1  # passes over each step's pairs (the authors' ppo_epochs)
    warmup_ratio: float = 0.0  # linear lr warmup over this fraction of the run's steps, then constant (the authors': none in effect)
    optimizer_offload: bool = False  # the RM's AdamW state (and float32 master weights) on the CPU, off its device
    optimizer_offload_step: Literal["cpu", "device"] = "cpu"  # with optimizer_offload, where AdamW steps: on the CPU, where its state stays (ours), or on the RM's device, the state brought there for each update and back after (the Cooper authors': verl's update_reward loads the offloaded optimizer to the GPU)
    gradient_checkpointing: bool = False  # the RM's update keeps each layer's input only and recomputes the rest in backward (less activation memory, a slower update; scoring never keeps activations)
    step_without_pairs: bool = False  # a step with no valid pair still takes an AdamW step on a zero gradient (the authors'), instead of leaving the RM as it is
    master_weights: Literal["float32", "none"] = "float32"  # AdamW steps float32 copies of a bf16 RM's weights; none: the bf16 weights themselves (the authors': updates below half a bf16 step round away)
    anchor: float = 0.0  # λ of an L2 pull toward the initial RM, L + (λ/2)·‖θ − θ_0‖² (0: none, the authors'); keeps a copy of θ_0 on the RM's device

    def keeps_masters(self, low_precision: bool) -> bool:
        """Whether AdamW steps float32 copies of the RM's weights rather than the weights (see RMLearner)."""
        return self.optimizer_offload or (low_precision and self.master_weights == "float32")

    def validate(self) -> None:
        """A ValueError names the field first."""
        if self.minibatch_size is not None and self.minibatch_size < 1:
            raise ValueError(f"minibatch_size must be >= 1 (or null: all pairs), got {self.minibatch_size}")
        if not 0 <= self.warmup_ratio <= 1:
            raise ValueError(f"warmup_ratio must be <= 1 (and >= 0), got {self.warmup_ratio}")
        for name, least in (("weight_decay", 0), ("batch_size", 2), ("epochs", 1)):
            if getattr(self, name) < least:
                raise ValueError(f"{name} must be >= {least}, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if not self.anchor >= 0:
            raise ValueError(f"anchor must be >= 0 (λ of the pull toward the initial RM), got {self.anchor}")

    @classmethod
    def of(cls, settings: Any = None, **fields: Any) -> LearnerSettings:
        """These settings taken from an object that holds them (Cooper's Params), by field name (None: the
        defaults), with any of `fields` given by keyword instead."""
        taken = {f.name: getattr(settings, f.name) for f in dataclasses.fields(cls)} if settings is not None else {}
        return cls(**{**taken, **fields})


def pairwise_loss(s_pos: torch.Tensor, s_neg: torch.Tensor) -> torch.Tensor:
    """−log σ(s⁺ − s⁻) per pair (Bradley-Terry): small when the RM ranks the positive above the negative."""
    return -F.logsigmoid(s_pos - s_neg)


class RMLearner:
    """A VerifyRM with its own AdamW, trained on (positive, negative) pairs; identical on every process.

    Schedule of one RL step's pairs: `epochs` passes; each pass splits the pairs into mini-batches of
    `minibatch_size` (None: all pairs, one optimizer step), in an order shuffled per pass with a seed every
    process shares. The learning rate warms up linearly over the first `warmup_ratio` of the run's RL steps,
    then stays constant (the authors: mini-batches of 4 × ppo_epochs; their 1% warmup ratio multiplies an
    unset total of -1 steps, so none).
    """

    def __init__(self, rm, settings: LearnerSettings | None = None, *, sharding=None, max_grad_norm: float = 1.0,
                 **fields: Any):
        """`settings` (default: LearnerSettings()'s), with any of its `fields` given by keyword instead."""
        settings = LearnerSettings.of(settings, **fields)
        self.settings = settings
        self.rm = rm
        self.step_without_pairs = settings.step_without_pairs
        self.lr = settings.lr
        self.batch_size = settings.batch_size
        self.max_grad_norm = max_grad_norm
        self.minibatch_size = settings.minibatch_size
        self.epochs = settings.epochs
        self.warmup_ratio = settings.warmup_ratio
        optimizer_offload, weight_decay, lr = settings.optimizer_offload, settings.weight_decay, settings.lr
        self.parameters = [p for p in rm.model.parameters() if p.requires_grad]
        if settings.gradient_checkpointing:  # in training mode only: scoring (eval, no grad) runs as before
            if not getattr(rm.model, "supports_gradient_checkpointing", False):
                raise CorewardError(f"gradient_checkpointing: the RM's model ({type(rm.model).__name__}) does not "
                                    "support it in transformers")
            enable = getattr(rm.model, "activation_checkpointing_enable", None)  # newer transformers; the old name warns
            if enable is not None:
                enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                rm.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            rm.model.config.use_cache = False  # an RM never generates; a cache beside checkpointing only warns
        if sharding is not None:
            for key, value in (("param_offload", rm.param_offload), ("max_tokens_per_pass", rm.max_tokens_per_pass)):
                if value:
                    raise CorewardError(f"{key}: not supported for an RM sharded like the policy (FSDP2 / DeepSpeed "
                                        f"ZeRO): set it off, or give the RM a device of its own (`device: cuda:1`), "
                                        f"which keeps it whole")
        # AdamW runs on float32 copies ("masters") of the parameters, copied back after each step, when
        # * the RM's weights are bf16 (rm_dtype) and master_weights is float32: Cooper's lr 1e-5 is below half a
        #   bf16 rounding step of most weights (runtime/precision.py), so stepped in place they would barely move;
        #   the masters sit on the RM's device, and scoring still runs on the bf16 weights;
        # * optimizer_offload: the masters on the CPU, so the RM's device holds weights and gradients only (12 of
        #   fp32 AdamW's 16 bytes per parameter leave it), for two copies per step; with optimizer_offload_step
        #   device only between updates: masters and moments come to the device for each update (`_optimizer_held`).
        # A sharded RM's masters are its shards' (rm/sharding.py builds them): none are made here for the whole RM.
        self.low_precision = any(is_low_precision(p.dtype) for p in self.parameters)
        self.masters = [p.detach().float().to("cpu" if optimizer_offload else rm.device, copy=True)
                        for p in self.parameters] if sharding is None and settings.keeps_masters(self.low_precision) else None
        if self.low_precision and self.masters is None and sharding is None:
            warning = round_away_warning("Cooper's RM", "master_weights", self.parameters, lr, self.parameters[0].dtype)
            if warning:
                logger.warning("cooper: %s", warning)
        self.optimizer = torch.optim.AdamW(self.optimized, lr=lr, weight_decay=weight_decay)
        # `anchor` (a variant): θ_0, the weights the learner starts from, as float32 on the RM's device (a loaded
        # learner takes the checkpoint's θ_0 instead, `load`); its gradient λ(θ − θ_0) joins the pairs' before the clip
        self.anchor = settings.anchor
        if settings.optimizer_offload and settings.optimizer_offload_step == "device" and sharding is not None:
            raise CorewardError("optimizer_offload_step: device is not supported for an RM sharded like the policy: "
                                "set it to cpu, or give the RM a device of its own (`device: cuda:1`), which keeps it whole")
        self.optimizer_to_device_for_updates = settings.optimizer_offload and settings.optimizer_offload_step == "device"
        if self.anchor and sharding is not None:
            raise CorewardError("anchor: not supported for an RM sharded like the policy: set it to 0, or give the RM "
                                "a device of its own (`device: cuda:1`), which keeps it whole")
        self.anchor_weights = [p.detach().float().to(rm.device, copy=True) for p in self.parameters] if self.anchor else None
        self.updates = 0  # optimizer steps taken
        self.skipped = 0  # steps skipped for a non-finite gradient norm
        self.calls = 0  # RL steps whose pairs were learned (seeds the shuffles)
        self.sharding = None  # a ShardedRM (rm/sharding.py) when the RM is sharded like the policy
        if sharding is not None:
            from coreward.rm.sharding import ShardedRM

            self.sharding = ShardedRM(self, sharding, weight_decay, optimizer_offload)

    @property
    def optimized(self) -> list[torch.Tensor]:
        """The tensors AdamW updates: the float32 masters where there are some, else the RM's parameters."""
        return self.masters or self.parameters

    def set_learning_rate(self, step: int, total_steps: int) -> float:
        """Linear warmup over the first `warmup_ratio` of `total_steps` RL steps, then the base rate."""
        warmup = self.warmup_ratio * total_steps
        lr = self.lr * min(1.0, (step + 1) / warmup) if warmup > 0 else self.lr
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def update(self, pairs: list[Pair]) -> dict[str, float]:
        """Learn one RL step's `pairs` (the same list on every process) on the schedule above.

        Metrics are those of the first pass: how well the RM ranked this step's pairs as it met them.
        No pairs: nothing moves, unless `step_without_pairs` (the authors' update masks invalid pairs out of
        the loss and still steps: AdamW on a zero gradient, so weight decay and the moments move the RM).
        A step that updates logs how far the RM moved (`rm/update_norm`, `rm/weight_norm`: `_update_norms`).
        """
        if not pairs and not self.step_without_pairs:
            return {}
        before = self._snapshot()
        # param_offload: the weights from the CPU and back, with the new values; optimizer_offload_step device: the
        # optimizer's state too
        with self.rm.weights_on_device(changed=True), self._optimizer_held():
            metrics = self._learn(pairs) if pairs else self._step_without_pairs()
        return metrics | self._update_norms(before)

    @contextmanager
    def _optimizer_held(self):
        """With `optimizer_offload_step: device`, the float32 masters and AdamW's moments on the RM's device inside,
        back on the CPU after: an offloaded optimizer that steps where the gradients are, as the Cooper authors' verl
        does (`fsdp_workers.update_reward`: load_fsdp_optimizer before the update, offload_fsdp_optimizer after). The
        tensors keep their identity (`.data` is moved), so the optimizer's parameter groups and state still match."""
        if not self.optimizer_to_device_for_updates:
            yield
            return
        self._move_optimizer(self.rm.device)
        try:
            yield
        finally:
            self._move_optimizer("cpu")

    def _move_optimizer(self, device) -> None:
        """The masters and every AdamW state tensor but its step counts (torch keeps those on the CPU) to `device`."""
        for master in self.masters or []:
            master.data = master.data.to(device)
        for state in self.optimizer.state.values():
            for key, value in state.items():
                if key != "step" and torch.is_tensor(value):
                    state[key] = value.to(device)

    def _learn(self, pairs: list[Pair]) -> dict[str, float]:
        """`epochs` passes over `pairs` in mini-batches (see `update`); the first pass's metrics."""
        first_pass, grad_norms = None, []
        size = self.minibatch_size or len(pairs)
        for epoch in range(self.epochs):
            order = list(range(len(pairs)))
            if epoch or self.minibatch_size:  # a fixed, shared shuffle: every process takes the same steps
                random.Random(self.calls * 1000 + epoch).shuffle(order)
            sums = torch.zeros(4, dtype=torch.float64)
            for start in range(0, len(pairs), size):
                part_sums, grad_norm = self._step([pairs[i] for i in order[start : start + size]])
                sums += part_sums
                grad_norms.append(grad_norm)
            if first_pass is None:
                first_pass = sums
        self.calls += 1
        loss, pos, neg, ordered = (first_pass / len(pairs)).tolist()
        return {"rm/loss": loss, "rm/score_pos": pos, "rm/score_neg": neg, "rm/train_pair_accuracy": ordered,
                "rm/grad_norm": sum(grad_norms) / len(grad_norms), "rm/skipped_updates": float(self.skipped),
                "rm/lr": self.optimizer.param_groups[0]["lr"]}

    # -- how far one RL step's update moved the RM (`rm/update_norm`: a frozen RM is a broken Cooper, health.py)
    def _local_weights(self) -> tuple[list[torch.Tensor], bool]:
        """This process's part of the weights AdamW updates (the float32 masters where there are some, else the RM's
        parameters), and whether those parts are split across processes (then their sums are added up over them)."""
        tensors = self.optimized
        kind = self.sharding.kind if self.sharding is not None else None
        if kind == "fsdp2":  # DTensor parameters, or masters made from this process's shards: one shard each
            return [t.to_local() if hasattr(t, "to_local") else t for t in tensors], True
        if kind == "zero3":  # partitioned parameters: this process's partition (zero padding on both sides of Δ)
            return [t.ds_tensor for t in tensors], True
        return tensors, False  # one process, DDP and ZeRO-2: the whole weights on every process

    def _snapshot(self) -> list[torch.Tensor]:
        """The weights before an update, on the CPU: one copy of the RM's (local) weights per RL step, in host
        memory, so the device holds nothing more than training does."""
        local, _ = self._local_weights()
        return [t.detach().to("cpu", copy=True) for t in local]

    @torch.no_grad()
    def _update_norms(self, before: list[torch.Tensor]) -> dict[str, float]:
        """rm/update_norm = ‖θ_after − θ_before‖₂ over every weight of the RM, and rm/weight_norm = ‖θ_after‖₂ (float64
        sums, as runtime/precision.py's `update_norm`: a change far below float32's resolution still shows). Summed
        over chunks of NORM_CHUNK elements, so the float64 copies are of one chunk at a time, never a whole tensor."""
        local, split = self._local_weights()
        sums = torch.zeros(2, dtype=torch.float64)  # Σ (θ_after − θ_before)², Σ θ_after²
        for now, old in zip(local, before, strict=True):
            now, old = now.detach().reshape(-1), old.reshape(-1)
            for start in range(0, now.numel(), NORM_CHUNK):
                part = now[start : start + NORM_CHUNK].double()
                sums[0] += (part - old[start : start + NORM_CHUNK].to(part.device, torch.float64)).pow(2).sum().cpu()
                sums[1] += part.pow(2).sum().cpu()
        if split:
            import torch.distributed as dist

            sums = sums.to(self.rm.device)
            dist.all_reduce(sums)
            sums = sums.cpu()
        return {"rm/update_norm": float(sums[0].sqrt()), "rm/weight_norm": float(sums[1].sqrt())}

    def _step(self, pairs: list[Pair]) -> tuple[torch.Tensor, float]:
        """One optimizer step on the mean pairwise loss of `pairs`; returns the summed metrics and the norm."""
        model = self.rm.model
        model.train()
        # sums over this process's share of the pairs: loss, σ(s⁺), σ(s⁻), s⁺ > s⁻
        sums = torch.zeros(4, dtype=torch.float64)
        rank, size = world()
        if self.sharding is None:  # this process's share, in passes of at most batch_size sequences (and tokens)
            start, stop = shard_bounds(len(pairs), rank, size)
            share = pairs[start:stop]
            passes = [[start + i for i in rows] for rows in self.rm.passes(
                len(share), lambda: self._pair_lengths(share), self.batch_size, rows_per_item=2)]
        else:  # every process makes the same number of passes; a padding pass (no pairs) counts 0
            from coreward.rm.sharding import lockstep_ranges

            passes = [list(range(first, stop)) for first, stop in lockstep_ranges(len(pairs), max(1, self.batch_size // 2))]
        for n, rows in enumerate(passes):
            part = [pairs[i] for i in rows] or pairs[:1]
            logits = self.rm.logits([p.question for p in part] * 2, [p.reference for p in part] * 2,
                                    [p.positive for p in part] + [p.negative for p in part])
            s_pos, s_neg = logits[: len(part)], logits[len(part) :]
            losses = pairwise_loss(s_pos, s_neg) * (1.0 if rows else 0.0)
            loss = losses.sum() / len(pairs)  # summed over passes and processes: the mean over all pairs
            loss.backward() if self.sharding is None else self.sharding.backward(loss, last=n == len(passes) - 1)
            if rows:
                sums += torch.stack([losses.sum(), s_pos.sigmoid().sum(), s_neg.sigmoid().sum(),
                                     (s_pos > s_neg).sum()]).detach().double().cpu()
        if size > 1:
            sums = self._sum_across_processes(sums)
        if self.anchor_weights is not None:  # ∇ (λ/2)·‖θ − θ_0‖² = λ(θ − θ_0), once (after the sum across processes)
            with torch.no_grad():
                for p, initial in zip(self.parameters, self.anchor_weights):
                    pull = (p.detach().float() - initial.to(p.device)).mul_(self.anchor).to(p.dtype)
                    p.grad = pull if p.grad is None else p.grad.add_(pull)
        if self.sharding is not None:  # the engine clips and steps (or skips) and clears the gradients
            grad_norm, stepped = self.sharding.clip_and_step(self)
            self.updates, self.skipped = self.updates + stepped, self.skipped + (not stepped)
            model.eval()
            return sums, grad_norm
        grad_norm = torch.nn.utils.clip_grad_norm_(self.parameters, self.max_grad_norm)
        if torch.isfinite(grad_norm):
            self._optimizer_step()
            self.updates += 1
        else:
            self.skipped += 1
            logger.warning("cooper: RM gradient norm is %s, update skipped (%d so far)", grad_norm.item(), self.skipped)
        self.optimizer.zero_grad(set_to_none=True)
        for p in self.parameters:  # with masters the optimizer's zero_grad reaches only those
            p.grad = None
        model.eval()
        return sums, float(grad_norm)

    def _pair_lengths(self, pairs: list[Pair]) -> list[int]:
        """Each pair's length in a pass: its longer sequence's tokens (both are padded to the pass's longest)."""
        lengths = self.rm.token_lengths([p.question for p in pairs] * 2, [p.reference for p in pairs] * 2,
                                        [p.positive for p in pairs] + [p.negative for p in pairs])
        return [max(a, b) for a, b in zip(lengths[: len(pairs)], lengths[len(pairs) :])]

    def _step_without_pairs(self) -> dict[str, float]:
        """`epochs` AdamW steps on a zero gradient (the same on every process: no data, no all-reduce).

        Under DeepSpeed the RM's engine steps only after its own backward, and there is no pair to run one on:
        the step is skipped there (with a warning); FSDP2 shards step like a replicated RM."""
        if self.sharding is not None and self.sharding.engine is not None:
            if not getattr(self, "_warned_no_pair_step", False):
                logger.warning("cooper: step_without_pairs is not applied to a DeepSpeed-sharded RM (no pair to run "
                               "its engine's backward on): steps without pairs leave it as it is")
                self._warned_no_pair_step = True
            return {"rm/lr": self.optimizer.param_groups[0]["lr"]}
        for _ in range(self.epochs):
            for p in self.parameters:
                p.grad = torch.zeros_like(p)  # zeros, not None: AdamW skips a parameter whose grad is None
            if self.sharding is not None:  # FSDP2: DTensor zeros, stepped by the sharding (clears the gradients)
                self.sharding.clip_and_step(self)
                self.updates += 1
                continue
            self._optimizer_step()
            self.updates += 1
            self.optimizer.zero_grad(set_to_none=True)
            for p in self.parameters:
                p.grad = None
        return {"rm/lr": self.optimizer.param_groups[0]["lr"]}

    def _optimizer_step(self, local=lambda t: t) -> None:
        """AdamW, one tensor at a time: on the parameters, or on their float32 masters (then copied back; `local`:
        the tensor a master copies, a DTensor's shard for FSDP2).

        Per tensor: its float32 gradient is made (on the masters' device) and the RM's gradient freed, AdamW steps
        that tensor alone, its gradient is freed, the new value copied back. So the step holds one tensor's float32
        gradient and AdamW's temporaries for one tensor, never a copy of every gradient at once (4 bytes per
        parameter for a bf16 RM's masters, more for AdamW's multi-tensor temporaries). It is the same AdamW: torch's
        skips a tensor whose .grad is None and keeps its step count per tensor, and the state_dict is unchanged.
        """
        optimized = self.masters or self.parameters
        grads = [p.grad for p in self.parameters]
        for p in self.parameters:
            p.grad = None
        for i, (target, p) in enumerate(zip(optimized, self.parameters)):
            grad, grads[i] = grads[i], None
            if grad is None:
                continue
            target.grad = grad if target is p else local(grad).detach().to(target.device, torch.float32)
            del grad  # the RM's own gradient (a master's float32 copy is made)
            self.optimizer.step()
            target.grad = None
            if target is not p:
                with torch.no_grad():
                    shard = local(p)
                    shard.copy_(target.to(shard.device, shard.dtype))

    def _sum_across_processes(self, sums: torch.Tensor) -> torch.Tensor:
        """All-reduce every gradient (a process without pairs contributes zeros) and the metric sums."""
        import torch.distributed as dist

        for p in self.parameters if self.sharding is None else []:  # a sharded RM's engine reduces its own
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad)
        sums = sums.to(self.rm.device)
        dist.all_reduce(sums)
        return sums.cpu()

    def save(self, directory: Path) -> None:
        """Weights (HF format, atomic), optimizer state and counters. Sharded: called on every process (the
        RM is gathered), the main process writes the weights and counters."""
        if self.sharding is not None:
            # the counters first: the sharded save ends in a barrier, so no process returns (and, say, loads this
            # directory) before the main process has written them (written after it, a fast rank read no file)
            if world()[0] == 0:
                Path(directory).mkdir(parents=True, exist_ok=True)
                self._write_state(directory)
            self.sharding.save(self, directory, RM_DIR, OPTIMIZER_FILE)
            return
        self.rm.save_pretrained(directory / RM_DIR)
        torch.save(self.optimizer.state_dict(), directory / OPTIMIZER_FILE)
        if self.masters is not None and self.low_precision:  # resume from the masters, not their rounding
            torch.save([m.cpu() for m in self.masters], directory / MASTERS_FILE)
        if self.anchor_weights is not None:  # θ_0 is the run's first RM, not the one resumed from
            torch.save([a.cpu() for a in self.anchor_weights], directory / ANCHOR_FILE)
        self._write_state(directory)

    def _write_state(self, directory: Path) -> None:
        (Path(directory) / STATE_FILE).write_text(json.dumps({"updates": self.updates, "skipped": self.skipped,
                                                              "calls": self.calls}))

    @classmethod
    def load(cls, directory: Path, device, dtype: str = "float32", settings: LearnerSettings | None = None, *,
             sharding=None, rm_options: dict[str, Any] | None = None, **fields: Any) -> RMLearner:
        """The learner `save` wrote: same weights, same optimizer moments and step counts (`settings` and
        `fields` as for the constructor; `rm_options`: VerifyRM's memory settings, RMInputSettings.rm_options)."""
        settings = LearnerSettings.of(settings, **fields)
        rm = VerifyRM.from_pretrained(directory / RM_DIR, device=device, dtype=dtype, batch_size=settings.batch_size,
                                      **(rm_options or {}))
        learner = cls(rm, settings, sharding=sharding)
        if learner.sharding is not None:  # the whole RM was loaded and sharded; now the optimizer's shards
            learner.sharding.load(learner, directory)
        else:
            if learner.masters is not None and (directory / MASTERS_FILE).is_file():
                for master, saved in zip(learner.masters, torch.load(directory / MASTERS_FILE, map_location="cpu")):
                    master.copy_(saved)
            if learner.anchor_weights is not None and (directory / ANCHOR_FILE).is_file():
                for initial, saved in zip(learner.anchor_weights, torch.load(directory / ANCHOR_FILE, map_location="cpu")):
                    initial.copy_(saved)
            learner.optimizer.load_state_dict(torch.load(directory / OPTIMIZER_FILE,
                                                         map_location=load_location(learner.rm.device)))
        state = json.loads((directory / STATE_FILE).read_text())
        learner.updates, learner.skipped = state["updates"], state["skipped"]
        learner.calls = state.get("calls", 0)
        return learner
