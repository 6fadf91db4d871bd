"""Evaluation during training: every `every` steps, avg@n, pass@n and maj@n of the current policy on a held-out set.

The numbers go through the trainer's own logging (HF `Trainer.log`), so TensorBoard, the progress bar,
`state.log_history` and coreward's metrics.jsonl (`MetricsFileCallback.on_log` merges them into the step's
row) all see them as `eval/avg@n`, `eval/pass@n`, `eval/maj@n` and `time/eval`. A held-out set without reference
answers logs the label-free `eval/agree@n` (majority-class share) and `eval/answered` instead.

Multi-process runs shard the held-out problems: each process samples and verifies its share, the scored
samples are gathered, the main process computes the metrics and every process logs them (a callback's `on_log`
runs on every process, as for the training metrics). Shards are padded to equal size so
that every process makes the same number of `generate` calls, which ZeRO-3 and FSDP need (every rank takes
part in every forward pass). Sampling runs under a forked RNG, so evaluating does not change the training
run's random stream, and with a fixed seed each evaluation draws the same noise: steps differ by the policy only.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from transformers import Trainer, TrainerCallback

from coreward.data.records import Record
from coreward.data.sources import load_eval_sets
from coreward.evaluation.backends import HFBackend
from coreward.evaluation.evaluate import (
    Problem,
    build_problems,
    model_defaults,
    sample,
    score,
    summarize,
)
from coreward.runtime.errors import CorewardError


DEFAULT_MAX_NEW_TOKENS = 256  # when the trainer's args have no max_completion_length


def load_eval_records(data) -> list[Record] | None:
    """The held-out records named by a `DataSettings` (`data.eval`: benchmark or file), or None when eval is off.

    Call it before loading any model so that a typo in `data.eval` costs a second.
    """
    if not data.eval or data.eval_every <= 0:
        return None
    # the loader of `coreward eval`: every row with a reference answer, or none (label-free agree@n)
    (records,) = load_eval_sets([data.eval], data.eval_split, data.eval_limit, data.data_dir, key="data.eval",
                                columns=data.eval_columns).values()
    return records


def add_periodic_eval(trainer: Trainer, data, seed: int = 0, records: list[Record] | None = None):
    """Build a `PeriodicEvalCallback` from `DataSettings` and add it to `trainer`; None when eval is off.

    Prompts are built with the training prompt settings (format, instruction, system prompt).
    """
    records = records if records is not None else load_eval_records(data)
    if records is None:
        return None
    callback = PeriodicEvalCallback(
        trainer,
        records,
        every=data.eval_every,
        n=data.eval_n,
        temperature=data.eval_temperature,
        prompt_format=data.prompt_format,
        instruction=data.instruction,
        system=data.system_prompt,
        seed=seed,
        name=Path(data.eval).stem,
    )
    trainer.add_callback(callback)
    return callback


def shard(problems: list[Problem], rank: int, world: int) -> tuple[list[Problem], int]:
    """This process's contiguous share, padded with its last problem to ceil(len/world); and how many are real."""
    size = -(-len(problems) // world)
    own = problems[rank * size : (rank + 1) * size]
    filler = own[-1:] if own else problems[-1:]
    return own + filler * (size - len(own)), len(own)


class PeriodicEvalCallback(TrainerCallback):
    """Evaluates `trainer`'s policy at step 0 (`at_start`), every `every` steps, and at the last step.

    `max_new_tokens` defaults to the trainer's `max_completion_length`, `batch_size` to the model kind's
    default, `verifier` to the trainer's own (CorewardGRPOTrainer has one) or the shared process pool.
    """

    def __init__(
        self,
        trainer: Trainer,
        records: list[Record],
        every: int,
        n: int = 4,
        temperature: float = 0.7,
        top_p: float = 0.95,
        max_new_tokens: int | None = None,
        prompt_format: str = "chat",
        instruction: str | None = None,
        system: str | None = None,
        batch_size: int | None = None,
        seed: int = 0,
        name: str = "eval",
        at_start: bool = True,
        verifier: Any = None,
    ):
        if every < 1:
            raise CorewardError(f"evaluation every {every} steps: give a positive number of steps")
        if not records:
            raise CorewardError("evaluation during training needs at least one held-out problem")
        self.trainer = trainer
        tokenizer = trainer.processing_class
        self.problems = build_problems({name: records}, tokenizer, prompt_format, instruction, system)
        self.every, self.n, self.temperature, self.top_p = every, n, temperature, top_p
        self.max_new_tokens = max_new_tokens
        self.batch_size = batch_size or model_defaults(tokenizer).batch_size
        self.seed = seed
        self.at_start = at_start
        self._verifier = verifier

    def on_train_begin(self, args, state, control, **kwargs):
        if self.at_start and state.global_step == 0:
            self.evaluate(args, state, control)

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.every == 0 or state.global_step == state.max_steps:
            self.evaluate(args, state, control)

    def evaluate(self, args, state, control=None) -> dict[str, float]:
        """Run one evaluation on every process; every process logs the main process's metrics and returns them.

        Every process logs them, as HF's own evaluation does: the callbacks' `on_log` then runs on every process
        equally often, so one that enters a collective there (the guard) is met by all (the loggers write on the
        main process only). HF's `on_log` clears `control.should_log`; it is restored, or the step's own training
        log would be skipped.
        """
        from coreward.runtime.distributed import on_main_then_broadcast

        start = time.perf_counter()
        accelerator = self.trainer.accelerator
        problems, real = shard(self.problems, accelerator.process_index, accelerator.num_processes)
        samples = self._sample(args, problems)[: real * self.n]
        score(samples, self.verifier)
        if accelerator.num_processes > 1:
            from accelerate.utils import gather_object

            samples = gather_object(samples)

        def metrics() -> dict[str, float]:
            (result,) = summarize(samples, self.verifier).values()
            values = {f"eval/{key}": value for key, value in result.metrics().items() if key != "pass@1"}
            values["time/eval"] = time.perf_counter() - start
            return values

        values = on_main_then_broadcast(metrics)
        should_log = control.should_log if control is not None else None
        Trainer.log(self.trainer, dict(values))  # HF's logging, not GRPOTrainer.log (which flushes rollout metrics)
        if control is not None:
            control.should_log = should_log
        return values

    @property
    def verifier(self):
        if self._verifier is None:
            from coreward.verify import get_verifier

            self._verifier = getattr(self.trainer, "verifier", None) or get_verifier()
        return self._verifier

    def _sample(self, args, problems: list[Problem]):
        """Sample from the unwrapped policy in eval mode, without touching the training RNG."""
        import torch
        from trl.distributed import DistributedBackend
        from trl.models import unwrap_model_for_generation

        wrapped = self.trainer.model_wrapped
        accelerator = self.trainer.accelerator
        devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
        max_new_tokens = self.max_new_tokens or getattr(args, "max_completion_length", None) or DEFAULT_MAX_NEW_TOKENS
        with (
            unwrap_model_for_generation(
                wrapped,
                accelerator,
                gather_deepspeed3_params=getattr(args, "ds3_gather_for_generation", True),
                gradient_checkpointing_kwargs=getattr(args, "gradient_checkpointing_kwargs", None),
            ) as model,
            DistributedBackend(accelerator).summon_full_params(wrapped, recurse=False),
            torch.random.fork_rng(devices=devices),
        ):
            was_training = model.training
            model.eval()
            try:
                backend = HFBackend(model, self.trainer.processing_class, batch_size=self.batch_size)
                return sample(backend, problems, self.n, self.temperature, self.top_p, max_new_tokens, self.seed)
            finally:
                model.train(was_training)
                reshard(wrapped)


def reshard(model) -> None:
    """Put an FSDP2 policy back in shards after forward passes with no backward. FSDP2 leaves the root module's
    parameters gathered after a forward, for the backward that follows in training: after sampling they stayed
    whole, plain tensors beside the DTensor shards of the rest, and the next step's first reader of the parameters
    (an EMA teacher pairing the policy's tensors with its own shards) failed on the mix."""
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()
