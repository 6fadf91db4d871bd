"""`TrainerPolicy`: the `coreward.rewards.Policy` interface, answered from TRL's GRPOTrainer.

Reward sources never see the trainer: whatever they may ask of the policy (its device, its weights, the
KL reference, sampling from a model of its architecture, the processes) goes through this class, so TRL's
private attributes are read in one place.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from typing import Any, Callable, Sequence

import torch

from coreward.runtime.distributed import distributed_map
from coreward.runtime.generation import generate_from_ids


class TrainerPolicy:
    def __init__(self, trainer: Any):
        from trl.distributed import DistributedBackend

        self._trainer = trainer
        backend = DistributedBackend(trainer.accelerator)
        self.is_zero3 = bool(backend.is_zero3)
        self.is_sharded = bool(backend.is_zero3 or backend.is_fsdp)

    # -- facts ------------------------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self._trainer.accelerator.device

    @property
    def step(self) -> int:
        return self._trainer.state.global_step

    @property
    def max_steps(self) -> int:
        return self._trainer.state.max_steps

    @property
    def rank(self) -> int:
        return self._trainer.accelerator.process_index

    @property
    def world_size(self) -> int:
        return self._trainer.accelerator.num_processes

    @property
    def tokenizer(self) -> Any:
        tokenizer = self._trainer.processing_class
        return getattr(tokenizer, "tokenizer", tokenizer)  # a multimodal processor wraps its tokenizer

    @property
    def kl_beta(self) -> float:
        return float(self._trainer.beta)

    @property
    def syncs_reference(self) -> bool:
        return bool(self._trainer.args.sync_ref_model)

    @property
    def is_peft(self) -> bool:
        return hasattr(self.module(), "peft_config")

    @property
    def max_completion_length(self) -> int:
        return self._trainer.max_completion_length

    # -- models -----------------------------------------------------------------------------------------
    def module(self) -> Any:
        return self._trainer.accelerator.unwrap_model(self._trainer.model)

    def reference(self) -> Any | None:
        ref = getattr(self._trainer, "ref_model", None)
        return None if ref is None else self._trainer.accelerator.unwrap_model(ref)

    @contextmanager
    def gathered(self, tensors: Sequence[torch.Tensor], modifier_rank: int | None = None):
        if self.is_zero3:
            import deepspeed

            with deepspeed.zero.GatheredParameters(list(tensors), modifier_rank=modifier_rank):
                yield
        else:
            yield

    @torch.no_grad()
    def generate(self, model: Any, prompt_ids: list[list[int]], num_generations: int, temperature: float,
                 adapter: str | None = None) -> list[list[str]]:
        """Sampling with `generate` in eval mode (no dropout; no activation checkpointing, so the KV cache is
        used), with the trainer's top-p/top-k, length limit and stop tokens."""
        from transformers import GenerationConfig
        from trl.trainer.utils import use_adapter

        if not prompt_ids:
            return []
        trainer, tokenizer = self._trainer, self.tokenizer
        config = GenerationConfig(
            max_new_tokens=trainer.max_completion_length,
            do_sample=True,
            temperature=temperature,
            top_p=trainer.top_p,
            top_k=trainer.top_k,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=trainer.eos_token_ids,
            disable_compile=True,
        )
        with use_adapter(model, adapter) if adapter else nullcontext(), trainer.accelerator.autocast():
            rows = generate_from_ids(model, prompt_ids, tokenizer.pad_token_id, self.device, repeat=num_generations,
                                     generation_config=config)
        texts = tokenizer.batch_decode(rows, skip_special_tokens=True)
        return [texts[i : i + num_generations] for i in range(0, len(texts), num_generations)]

    # -- processes --------------------------------------------------------------------------------------
    def map_shards(self, fn: Callable[[list], list], items: Sequence[Any]) -> list:
        return distributed_map(fn, items)
