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

    def tokenize_prompt(self, prompt: Any) -> list[int]:
        """Token ids of a dataset prompt as TRL 1.16's `_tokenize_prompts` makes them: chat messages through the
        chat template with the generation prompt, plain text through the tokenizer."""
        tokenizer = self.tokenizer
        if isinstance(prompt, str):
            return list(tokenizer(text=prompt)["input_ids"])
        encoded = tokenizer.apply_chat_template(list(prompt), add_generation_prompt=True, tokenize=True,
                                                return_dict=True)
        return list(encoded["input_ids"])

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
        used), with the trainer's top-p/top-k, length limit and stop tokens; from the trainer's sampling copy of
        `model` (with `adapter`) where rollouts sample from one (runtime/sampling.py)."""
        from transformers import GenerationConfig
        from trl.trainer.utils import use_adapter

        if self.vllm_engine is not None:  # even with no prompts: loading weights may be collective (ZeRO-3, TP)
            return self._generate_vllm(model, prompt_ids, num_generations, temperature, adapter)
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
        sampler = trainer.sampling_model(model, adapter)  # `model`'s current weights in the sampling copy, or None
        if sampler is not None:
            rows = generate_from_ids(sampler, prompt_ids, tokenizer.pad_token_id, self.device, repeat=num_generations,
                                     generation_config=config)
        else:
            with use_adapter(model, adapter) if adapter else nullcontext(), trainer.accelerator.autocast():
                rows = generate_from_ids(model, prompt_ids, tokenizer.pad_token_id, self.device,
                                         repeat=num_generations, generation_config=config)
        texts = tokenizer.batch_decode(rows, skip_special_tokens=True)
        return [texts[i : i + num_generations] for i in range(0, len(texts), num_generations)]

    # -- vLLM -------------------------------------------------------------------------------------------
    @property
    def vllm_engine(self) -> Any | None:
        """TRL's colocated vLLM generation (None without `use_vllm`, or in server mode: the engine is then in
        another process, and `generate` samples with transformers)."""
        trainer = self._trainer
        engine = getattr(trainer, "vllm_generation", None) if getattr(trainer, "use_vllm", False) else None
        return engine if engine is not None and engine.mode == "colocate" else None

    def _named_weights(self, model: Any, adapter: str | None):
        """`model`'s weights under the names vLLM loads. A PEFT adapter goes through TRL's own iterator (it
        merges the active adapter, here `adapter`, into the base weights for the read); a full model (the
        teacher's copy, or the sharded reference) is read parameter by parameter, gathered when partitioned (ZeRO-3)
        or sharded (FSDP2)."""
        engine = self.vllm_engine
        if adapter is not None:
            from trl.trainer.utils import use_adapter

            with use_adapter(model, adapter):
                yield from engine._iter_named_params()
            return
        for name, param in model.named_parameters():
            with self.gathered([param]):
                value = param.data
                if hasattr(value, "full_tensor"):  # an FSDP2 shard (DTensor): all-gather (every process iterates)
                    value = value.full_tensor()
                yield engine._fix_param_name_to_vllm(name), value

    @torch.no_grad()
    def _generate_vllm(self, model: Any, prompt_ids: list[list[int]], num_generations: int, temperature: float,
                       adapter: str | None) -> list[list[str]]:
        """Sample from `model` with the policy's vLLM engine: load `model`'s weights into it, sample, and leave
        the engine marked stale, so TRL pushes the policy's weights back before its next generation (it syncs
        whenever `_last_loaded_step` differs from the step). One engine, one copy of the weights in it."""
        from vllm import SamplingParams

        trainer, engine = self._trainer, self.vllm_engine
        if engine.enable_sleep_mode:
            engine.llm.wake_up()  # weights and KV cache: TRL puts both to sleep after its own generation
        load = engine.llm.llm_engine.model_executor.driver_worker.model_runner.model.load_weights
        stale = trainer._last_loaded_step != self.step or engine.enable_sleep_mode  # sleep level 2 drops weights
        if model is not self.module() or adapter is not None or stale:
            for name, weight in self._named_weights(model, adapter):
                load([(name, weight)])
            engine.llm.reset_prefix_cache()  # cached prefixes were computed with the other weights
            trainer._last_loaded_step = -1  # the engine holds `model` now, not the policy

        prompts, own = prompt_ids, slice(0, len(prompt_ids))
        if engine.tensor_parallel_size > 1:  # every rank of a TP group must run the same batch, as in TRL
            gathered = [None] * engine.tensor_parallel_size
            torch.distributed.all_gather_object(gathered, prompt_ids, group=engine.tp_group)
            rank = torch.distributed.get_rank(group=engine.tp_group)
            start = sum(len(g) for g in gathered[:rank])
            prompts, own = [p for g in gathered for p in g], slice(start, start + len(prompt_ids))
        params = SamplingParams(
            n=num_generations,
            temperature=temperature,
            top_p=trainer.top_p,
            top_k=trainer.top_k,  # as TRL passes them to vLLM for the policy's own rollouts
            min_p=0.0 if trainer.min_p is None else trainer.min_p,
            repetition_penalty=trainer.repetition_penalty,
            max_tokens=trainer.max_completion_length,
        )
        requests = [{"prompt_token_ids": ids} for ids in prompts]
        outputs = engine.llm.generate(requests, sampling_params=params, use_tqdm=False)[own] if requests else []
        if engine.enable_sleep_mode:
            engine.llm.sleep(level=2)
            engine._llm_weights_sleeping = True
        tokenizer = self.tokenizer
        return [[tokenizer.decode(o.token_ids, skip_special_tokens=True) for o in out.outputs] for out in outputs]

    # -- processes --------------------------------------------------------------------------------------
    def map_shards(self, fn: Callable[[list], list], items: Sequence[Any]) -> list:
        return distributed_map(fn, items)
