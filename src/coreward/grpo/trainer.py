"""`CorewardGRPOTrainer`: TRL's GRPOTrainer with reward sources computed on the global batch.

What we change in TRL (trl==1.16.0), and why:

* `_calculate_rewards` — TRL hands each reward function its own process's slice, which can split a
  prompt's group of G completions across processes (trl #3896). We gather every column first, give each
  `RewardSource` the whole batch, and return the global reward matrix TRL expects (TRL slices each
  process's advantages out of it itself).
* `_generate` / `_generate_and_score_completions` / `training_step` — wall time split into generation,
  reward and update; per-step hooks of the sources (an EMA teacher updates before rollouts).
* `_save_checkpoint` / `_load_optimizer_and_scheduler` — reward-source state (an RM and its optimizer,
  a teacher) and our own counters travel with TRL's checkpoints; a checkpoint is marked complete only
  once everything is on disk, so resume never picks a half-written one. TRL forgets its rollout buffer
  position (`_step`) on resume: it is saved too, so a resumed run continues exactly.
* `_get_train_sampler` / `_run_epoch` — the data order of epoch e depends on e, not on how many epochs
  this process has run (see `samplers.EpochReplay`): a run resumed after the first epoch sees the same
  batches as an uninterrupted one.
* `_compute_loss` (when a source declares `loss_per_view`, as Co-rewarding-I's `view_loss: per_view` does) —
  each view's loss is a token mean over its own tokens and the two are summed, L = Σ_v Σ_{t∈v} ℓ_t / N_v (the
  authors' dp_actor.py), instead of one token mean over both views: TRL's loss (bnpo: a token mean over the rows it is given) runs once per view on
  that view's rows of the micro-batch, and the losses add up. Every metric TRL logs inside it (entropy,
  KL, clip ratios) is also logged per view as `<name>/view0|1`, with `loss/view0|1`, as the authors log
  pg_loss, ppo_kl and clip fractions per view.
* `_generate_and_score_completions` also logs `kl/from_init`, the KL of the policy from its initial weights on
  the step's own samples, also when `beta` is 0: exact over the whole vocabulary, or k3 (`grpo/kl_from_init.py`:
  the two estimators, what each costs, where π_init comes from).
* `_get_grad_norm` — an optimizer step whose gradient is NaN or inf is skipped (weights and optimizer
  moments unchanged) and counted in `faults/nonfinite_grad_steps`, never applied.

Faults are counted in `faults/*` metrics (cumulative over the run, resumed runs included).
"""

from __future__ import annotations

import json
import logging
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate.utils import gather_object
from trl import GRPOTrainer

from coreward.evaluation.guard import source_metric_names
from coreward.grpo.checkpoints import discard, disk_full, last_complete_checkpoint, mark_complete, rotate_checkpoints
from coreward.grpo.fused_head import compact_on_cpu
from coreward.grpo.policy import TrainerPolicy
from coreward.grpo.token_stats import completion_token_stats
from coreward.rewards.base import RewardSource, RolloutBatch
from coreward.runtime.distributed import load_location
from coreward.runtime.errors import CorewardError
from coreward.runtime.faults import fault_point
from coreward.verify.extract import clip_completion


logger = logging.getLogger(__name__)

SOURCES_DIR = "reward_sources"
TRAINER_STATE = "coreward_trainer_state_{rank}.pt"
INIT_LOGPS = "coreward_init_per_token_logps"  # π_init's log-probabilities of the sampled tokens (kl/from_init)
INIT_HIDDEN = "coreward_init_completion_hidden"  # π_init's last hidden states at the completion positions (exact)
# The exact kl/from_init reads the policy's hidden states from the loss's own pass, instead of a no-grad pass of
# its own, when π_init's hidden states for the generation batch (kept from scoring to the loss, through TRL's
# shuffle) take at most this many bytes a process: a small model's fit easily, while long completions of a large
# model would take gigabytes and pay the policy's pass instead (grpo/kl_from_init.py).
KEEP_INIT_HIDDEN_BYTES = 2**28
FAULT_COUNTERS = ("nonfinite_grad_steps", "nonfinite_reward_samples", "truncated_completions")


def completion_text(completion: Any) -> str:
    """TRL gives conversational completions as message lists; rewards work on their text."""
    if isinstance(completion, str):
        return completion
    parts = []
    for message in completion:
        content = message.get("content", "")
        if isinstance(content, list):
            content = "".join(block.get("text", "") for block in content if isinstance(block, dict))
        parts.append(content or "")
    return "".join(parts)


def _placeholder_reward(name: str):
    """TRL wants `reward_funcs`; ours are only names and weights, since `_calculate_rewards` is ours."""

    def reward(**_: Any) -> list[float]:
        raise RuntimeError("coreward computes rewards in CorewardGRPOTrainer._calculate_rewards")

    reward.__name__ = name
    return reward


def has_paired_views(dataset: Any) -> bool:
    """Whether the dataset's rows are paired views of each problem (`data/rows.py`)."""
    return {"pair_id", "view"} <= set(getattr(dataset, "column_names", None) or ())


def split_views(inputs: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """(view, that view's rows of every per-row tensor) for each view present in a micro-batch; scalars and
    other entries are shared."""
    views = inputs["view"]
    rows_of = [(int(v), views == v) for v in views.unique()]
    size = views.shape[0]
    return [
        (view, {key: value[rows] if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == size
                else value for key, value in inputs.items()})
        for view, rows in rows_of
    ]


@dataclass
class StepTimes:
    """Wall time of one training step, as three TRL overrides see it: `_generate` adds the generation time,
    `_generate_and_score_completions` the whole scoring (generation included), and `training_step` logs the rest
    as the update. A step that reuses buffered rollouts has no scoring."""

    generation: float = 0.0  # seconds in `_generate` since the current scoring began
    scoring: float = 0.0  # this step's generation and scoring (train mode)


@dataclass
class UpdateTokens:
    """Tokens the loss's passes of one micro-batch ran (`ran`: each shared prompt once, grpo/shared_prompts.py) and
    what TRL's pass over whole rows would have run (`unshared`): `update/tokens`, `update/tokens_unshared`."""

    ran: int = 0
    unshared: int = 0


class CorewardGRPOTrainer(GRPOTrainer):
    def __init__(
        self,
        *args: Any,
        reward_sources: list[RewardSource],
        verifier: Any,
        reference_column: str = "answer",
        keep_checkpoints: int | None = 2,
        kl_from_init: bool = True,
        kl_from_init_estimator: str = "exact",
        sampling: tuple[str, str] = ("auto", "auto"),
        micro_batches: str = "by_prompt",
        **kwargs: Any,
    ):
        # what the sources declare (`RewardSource.data_needs`): each view's loss a token mean of its own tokens
        self.per_view_loss = any(source.needs.loss_per_view for source in reward_sources)
        self.reward_sources = reward_sources
        self.verifier = verifier
        self.reference_column = reference_column
        self.keep_checkpoints = keep_checkpoints
        # paired views (two rows per problem, `pair_id` and `view`: `grpo/samplers.py`) are a property of the data
        self.paired_views = has_paired_views(kwargs.get("train_dataset"))
        self.needed_token_stats = sorted({s for src in reward_sources for s in src.needs_token_stats})
        self._last_prompt_ids: list[list[int]] | None = None
        self._times = StepTimes()
        self._update_tokens = UpdateTokens()
        self.last_batch: RolloutBatch | None = None
        self.fault_counts = dict.fromkeys(FAULT_COUNTERS, 0)  # cumulative, saved with checkpoints
        self._train_sampler = None
        self._policy: TrainerPolicy | None = None
        self.sampling_settings = sampling  # (engine, dtype): the config's sampling.engine and sampling.dtype
        self._sampling = None  # (SamplingPlan, SamplingCopy or None), decided at the first rollout
        self._sampling_loads = 0  # checkpoints loaded: the copy's weights are written again after one
        self._sampling_pending = None  # the sampler's log-probabilities of the next loss pass's rows, and their mask
        names = source_metric_names([source.name for source in reward_sources])
        compact_on_cpu()  # the loss's head projects completion positions only on a CPU too (grpo/fused_head.py)
        super().__init__(*args, reward_funcs=[_placeholder_reward(n) for n in names], **kwargs)
        self.length_grouping = self._length_grouping(micro_batches)  # config's micro_batches: grpo/micro_batches.py
        self.prompt_sharing = self.length_grouping and self._prompt_sharing(micro_batches)  # grpo/shared_prompts.py
        self.kl_init_source, self.kl_init_model = self._initial_policy_for_kl() if kl_from_init else (None, None)
        self.kl_estimator = self._kl_estimator(kl_from_init_estimator) if kl_from_init else None

    @property
    def compute_dtype(self) -> torch.dtype | None:
        """The dtype mixed precision computes in (grpo.bf16 / fp16: autocast over the weights), None without it.
        TRL's KL reference is built like the policy, with float32 weights (grpo/train.py `weights_dtype`), and kept
        so, although nothing steps it: under autocast only the matrix products run in bf16, the norms and the
        embedding read their weights as they are stored, so a bf16 reference would differ from the initial policy
        at step 0, and the KL term's gradient (which AdamW scales up to a full step) would pull the policy toward
        that rounding."""
        return torch.bfloat16 if self.args.bf16 else torch.float16 if self.args.fp16 else None

    def _initial_policy_for_kl(self) -> tuple[str, Any]:
        """How `kl/from_init` gets π_init's log-probabilities (see grpo/kl_from_init.py), built while the policy
        still holds its initial weights (a resumed run loads its checkpoint later, in `train`)."""
        from trl.trainer.utils import add_fused_lm_head

        from coreward.grpo.kl_from_init import frozen_copy, moves_reference

        if self.beta != 0.0 and not moves_reference(self):
            return "reference", None  # TRL's reference (or a PEFT policy's adapter-off pass) is π_init
        model = self.accelerator.unwrap_model(self.model)
        if hasattr(model, "peft_config"):
            return "adapter_off", None
        if self.is_deepspeed_enabled or self.is_fsdp_enabled:  # built and sharded as TRL builds its reference
            from trl.models.utils import prepare_deepspeed, prepare_fsdp
            from trl.trainer.grpo_trainer import create_model_from_path, get_config_model_id

            with torch.random.fork_rng(devices=[]):  # the run's sampling RNG stays as it would be without the copy
                copy = create_model_from_path(get_config_model_id(model.config), dtype=model.dtype, device_map=None,
                                              trust_remote_code=self.args.trust_remote_code)
            copy.requires_grad_(False)
            add_fused_lm_head(copy, temperature=self.temperature, cast_lm_head_to_fp32=self.args.cast_lm_head_to_fp32)
            prepare = prepare_deepspeed if self.is_deepspeed_enabled else prepare_fsdp
            copy = prepare(copy, self.accelerator)
        else:
            copy = frozen_copy(model)
            # TRL's log-probability pass calls `model(..., fused_lm_head=True)`: patched onto the copy itself, as
            # TRL patches its reference (the closure is over the copy, never the policy)
            add_fused_lm_head(copy, temperature=self.temperature, cast_lm_head_to_fp32=self.args.cast_lm_head_to_fp32)
            copy = self.accelerator.prepare_model(copy, evaluation_mode=True)
        return "copy", copy

    def _kl_estimator(self, asked: str) -> str:
        """The estimator `kl/from_init` uses: the one asked for, or k3 where the exact KL cannot read a model's LM head
        as one projection (said in a line)."""
        from coreward.grpo.kl_from_init import ESTIMATORS, unreadable_head
        from coreward.runtime.distributed import print_once

        if asked not in ESTIMATORS:
            raise CorewardError(f"key kl_from_init_estimator must be one of {', '.join(ESTIMATORS)}, got {asked!r}")
        if asked == "exact":
            init = self.kl_init_model if self.kl_init_source == "copy" else getattr(self, "ref_model", None)
            for name, model in (("the policy", self.model), ("pi_init", init)):
                why = unreadable_head(self.accelerator.unwrap_model(model)) if model is not None else None
                if why is not None:
                    print_once(f"kl/from_init: k3 instead of the exact KL: {name}'s {why}")
                    return "k3"
        return asked

    def create_accelerator_and_postprocess(self):
        from coreward.grpo.engines import promote_fsdp_on_cpu

        super().create_accelerator_and_postprocess()
        if promote_fsdp_on_cpu(self.accelerator):  # a CPU launch with an FSDP config: shard, not DDP
            self.is_fsdp_enabled = True

    def _prepare_for_training(self, *args, **kwargs):
        from coreward.grpo.engines import sharding_report
        from coreward.runtime.distributed import print_once

        prepared = super()._prepare_for_training(*args, **kwargs)
        if self.accelerator.num_processes > 1:  # a single process has nothing to report
            models = {"policy": self.model_wrapped, "reference": getattr(self, "ref_model", None)}
            for source in self.reward_sources:  # models a source trains itself, on every process
                models.update(source.engine_models(self.policy))
            print_once(sharding_report(self.accelerator, models))
        return prepared

    @property
    def policy(self) -> TrainerPolicy:
        """What reward sources may ask of the policy (built on first use: the accelerator must be ready)."""
        if self._policy is None:
            self._policy = TrainerPolicy(self)
        return self._policy

    def _get_train_sampler(self, dataset=None):
        from coreward.grpo.samplers import PairedRepeatSampler, ResumableRepeatSampler

        dataset = dataset if dataset is not None else self.train_dataset
        settings = {
            "mini_repeat_count": self.num_generations,
            "batch_size": self.args.generation_batch_size // self.num_generations,
            "repeat_count": self.num_iterations * self.args.steps_per_generation,
            "shuffle": self.shuffle_dataset,
            "seed": self.args.seed,
        }
        if self.paired_views:
            self._train_sampler = PairedRepeatSampler(num_rows=len(dataset), **settings)
        else:
            self._train_sampler = ResumableRepeatSampler(data_source=dataset, **settings)
        return self._train_sampler

    def _run_epoch(self, *args, **kwargs):
        """Each epoch's data order from the epoch number, not from how many epochs this process has run.

        accelerate forwards `set_epoch` to the sampler only in some wrappings (not through the batch-skipping
        one of a multi-process resume), so it is set here as well; `set_epoch` is idempotent.
        """
        sampler = getattr(self, "_train_sampler", None)
        if sampler is not None and kwargs.get("epoch") is not None:
            sampler.set_epoch(kwargs["epoch"])
        return super()._run_epoch(*args, **kwargs)

    # ----------------------------------------------------------------- generation and timing
    @property
    def sampling_plan(self):
        """Where rollouts sample (runtime/sampling.py `plan_sampling`): decided once, with the prepared model."""
        if self._sampling is None:
            from coreward.runtime.distributed import print_once
            from coreward.runtime.sampling import SamplingCopy, plan_sampling

            module = self.accelerator.unwrap_model(self.model)
            base = module.get_base_model() if hasattr(module, "get_base_model") else module
            parameters = sum(p.numel() for name, p in base.named_parameters() if "lora_" not in name)
            plan = plan_sampling(*self.sampling_settings, on_gpu=self.accelerator.device.type != "cpu",
                                 use_vllm=bool(self.use_vllm), sharded=self.policy.is_sharded,
                                 lora=hasattr(module, "peft_config"), parameters=parameters,
                                 weights_dtype=next(base.parameters()).dtype)
            self._sampling = (plan, SamplingCopy(plan.dtype) if plan.use_copy else None)
            if plan.use_copy:  # TRL's own path, as before, says nothing
                print_once(plan.describe())
        return self._sampling[0]

    @property
    def sampling_copy(self):
        """The SamplingCopy rollouts use (None when they sample from the policy itself)."""
        self.sampling_plan  # noqa: B018 - decides
        return self._sampling[1]

    def sampling_model(self, source: Any = None, adapter: str | None = None) -> Any | None:
        """The model to sample `source` (the policy when None; an EMA teacher's copy, or the policy with `adapter`)
        from: the sampling copy holding its current weights, or None where rollouts sample from the model itself.
        Weights change only at an optimizer step, so the copy follows the global step (and any checkpoint load)."""
        from coreward.runtime.sampling import UnsupportedSource

        copy = self.sampling_copy
        if copy is None:
            return None
        source = source if source is not None else self.accelerator.unwrap_model(self.model)
        start = time.perf_counter()
        try:
            model = copy.follow(source, (self.state.global_step, self._sampling_loads), adapter)
        except UnsupportedSource as err:
            from coreward.runtime.distributed import print_once

            print_once(f"sampling: from the model itself ({err})")
            self._sampling = (self._sampling[0], None)
            return None
        self._metrics["train" if self.model.training else "eval"]["time/sampling_sync"].append(
            time.perf_counter() - start)
        return model

    def _load_from_checkpoint(self, *args, **kwargs):
        self._sampling_loads += 1
        return super()._load_from_checkpoint(*args, **kwargs)

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        """TRL's generation, from the sampling copy where there is one (text prompts); the sampled tokens'
        log-probabilities under the copy come back as TRL's `logprobs` (its `sampling_per_token_logps`)."""
        model = self.sampling_model() if images is None and not multimodal_fields else None
        if model is None:
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations,
                                                 has_tool_images)
        from coreward.runtime.sampling import sample_token_ids

        model.generation_config = self.generation_config  # TRL's settings, not the checkpoint's defaults
        return sample_token_ids(model, prompt_ids, self.generation_config, self._tokenizer.pad_token_id,
                                self.eos_token_ids, self.temperature, self.accelerator.device)

    def _record_sampling_mismatch(self, sampler_logps, policy_logps, mask) -> None:
        """`sampling/logprob_mismatch/{mean,max}` (|Δ| per token, Δ = the copy's log-probability of a sampled token
        minus the trainer's) and `sampling/kl_sampler_policy` (mean Δ), over every process's tokens."""
        from coreward.runtime.sampling import logprob_mismatch

        abs_sum, abs_max, signed, tokens = logprob_mismatch(sampler_logps, policy_logps, mask)
        sums = self.accelerator.gather(torch.stack([abs_sum, signed, tokens]).float().view(1, 3)).sum(dim=0)
        worst = self.accelerator.gather(abs_max.float().view(1)).max()
        metrics = self._metrics["train"]
        count = max(float(sums[2]), 1.0)
        metrics["sampling/logprob_mismatch/mean"].append(float(sums[0]) / count)
        metrics["sampling/logprob_mismatch/max"].append(float(worst))
        metrics["sampling/kl_sampler_policy"].append(float(sums[1]) / count)

    def _generate(self, prompts: list):
        start = time.perf_counter()
        result = super()._generate(prompts)
        self._last_prompt_ids = result[0]
        self._times.generation += time.perf_counter() - start
        if self.model.training:
            fault_point("generation", self.state.global_step + 1)
        return result

    def _generate_and_score_completions(self, inputs):
        mode = "train" if self.model.training else "eval"
        if mode == "train":
            for source in self.reward_sources:
                source.on_step_begin(self.policy)
        start = time.perf_counter()
        self._times.generation = 0.0
        output = super()._generate_and_score_completions(inputs)
        if (self.per_view_loss or self.paired_views) and mode == "train":  # rows stay aligned through the shuffle
            output["view"] = torch.tensor([int(row["view"]) for row in inputs], device=output["completion_mask"].device)
        if mode == "train" and self.kl_init_source is not None:
            self._log_kl_from_init(output)
        if mode == "train" and not self.use_vllm and output.get("sampling_per_token_logps") is not None:
            if output.get("old_per_token_logps") is not None:  # TRL computed the policy's: compared now
                mask = output["completion_mask"] * output["tool_mask"] if "tool_mask" in output \
                    else output["completion_mask"]
                self._record_sampling_mismatch(output["sampling_per_token_logps"], output["old_per_token_logps"], mask)
            # otherwise the loss's pass computes them, before any update of this generation batch: compared there
            # (`_compute_loss`); the sampler's travel with their rows through TRL's shuffle
        if mode == "train":
            self._times.scoring = time.perf_counter() - start
            self._metrics[mode]["time/generation"].append(self._times.generation)
        return output

    def _length_grouping(self, micro_batches: str) -> bool:
        """Whether the update's micro-batches group rows by length and drop their shared padding (`micro_batches:
        by_length`, where `groups_exactly` finds the step's gradient unchanged by it)."""
        from coreward.grpo.micro_batches import groups_exactly

        if micro_batches not in ("by_length", "by_prompt"):
            return False
        why_not = groups_exactly(self.args, self.paired_views)
        if why_not is not None:
            logger.info("micro-batches: TRL's random cut (%s)", why_not)
        return why_not is None

    def _prompt_sharing(self, micro_batches: str) -> bool:
        """Whether the loss's pass runs each distinct prompt of a micro-batch once (`micro_batches: by_prompt`, where
        `why_not_shared` finds the step's gradient unchanged by it; by length otherwise)."""
        from coreward.grpo.shared_prompts import why_not_shared

        if micro_batches != "by_prompt":
            return False
        why_not = why_not_shared(self.args, self.accelerator.unwrap_model(self.model),
                                 sharded=self.is_deepspeed_enabled or self.is_fsdp_enabled,
                                 paired_views=self.paired_views)
        if why_not is not None:
            logger.info("micro-batches: by length, each row's prompt in the update's pass (%s)", why_not)
        return why_not is None

    def _prepare_inputs(self, generation_batch):
        """TRL's buffer of micro-batches, its shuffle made view-balanced for paired views (`balanced_view_shuffle`) or
        followed by a grouping of rows by prompt (`prompt_grouped`, where the loss's pass shares prompts) or by length
        (`length_grouped`); each micro-batch then cut to its own width."""
        if not self.model.training or not (self.paired_views or self.length_grouping):
            return super()._prepare_inputs(generation_batch)
        import trl.trainer.grpo_trainer as grpo

        from coreward.grpo.micro_batches import length_grouped, trim_padding
        from coreward.grpo.samplers import balanced_view_shuffle
        from coreward.grpo.shared_prompts import prompt_grouped

        shuffle, chunks = grpo.shuffle_sequence_dict, self.args.steps_per_generation
        if self.paired_views:
            grpo.shuffle_sequence_dict = lambda batch: balanced_view_shuffle(batch, chunks) or shuffle(batch)
        else:
            grouped = prompt_grouped if self.prompt_sharing else length_grouped
            grpo.shuffle_sequence_dict = lambda batch: grouped(shuffle(batch))
        try:
            inputs = super()._prepare_inputs(generation_batch)
        finally:
            grpo.shuffle_sequence_dict = shuffle
        return trim_padding(inputs) if self.length_grouping else inputs

    def _log_kl_from_init(self, output: dict[str, Any]) -> None:
        """`kl/from_init` (sequence KL, nats) and `kl/from_init_per_token` of this step's samples.

        exact: both distributions at every completion position, from one no-grad pass of the policy and one of
        π_init, chunk by chunk (`_exact_kl_from_init`); recorded here. k3: π_init's log-probabilities are computed
        here; the policy's are TRL's: `old_per_token_logps` when TRL computed them; otherwise the rollouts are
        on-policy and TRL's loss computes exactly those log-probabilities (before any update of this generation
        batch), so they are taken from there (`_get_per_token_logps_and_entropies` below) instead of paying for
        another forward pass of the policy.
        """
        start = time.perf_counter()
        ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
        attention = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        if self.kl_estimator == "exact" and self._exact_kl_in_loss_pass(output, ids):
            self._keep_init_hidden(output, ids, attention)
        elif self.kl_estimator == "exact":
            self._exact_kl_from_init(ids, attention, output["completion_mask"])
        else:
            self._k3_kl_from_init(output, ids, attention)
        self._metrics["train"]["time/kl_from_init"].append(time.perf_counter() - start)

    @contextmanager
    def _initial_policy(self):
        """The model that computes π_init (see `_initial_policy_for_kl`), with a LoRA policy's adapter off inside."""
        from trl.trainer.utils import use_adapter

        if self.kl_init_source == "copy":
            yield self.kl_init_model
        elif self.kl_init_source == "reference" and getattr(self, "ref_model", None) is not None:
            yield self.ref_model
        else:  # a PEFT policy: its base (or TRL's "ref" adapter) is π_init
            model = self.accelerator.unwrap_model(self.model)
            ref_adapter = "ref" if self.kl_init_source == "adapter_off" and "ref" in model.peft_config else None
            with use_adapter(model, adapter_name=ref_adapter):
                yield self.model

    def _k3_kl_from_init(self, output: dict[str, Any], ids: torch.Tensor, attention: torch.Tensor) -> None:
        width, batch_size = output["completion_ids"].size(1), self.args.per_device_train_batch_size
        init_logps = output.get("ref_per_token_logps") if self.kl_init_source == "reference" else None
        if init_logps is None:  # π_init's are not TRL's reference log-probabilities: computed here
            with self._initial_policy() as model:
                init_logps = self._get_per_token_logps_and_entropies(model, ids, attention, width, batch_size)[0]
        if output.get("old_per_token_logps") is not None:
            self._record_kl_from_init(output["old_per_token_logps"], init_logps, output["completion_mask"])
        else:  # travels with its rows through TRL's shuffle and split into micro-batches; read in the loss
            output[INIT_LOGPS] = init_logps

    def _exact_kl_in_loss_pass(self, output: dict[str, Any], ids: torch.Tensor) -> bool:
        """Whether the exact KL can take the policy's side from the loss's own pass (`_keep_init_hidden`): the
        rollouts are on-policy (TRL computed no old log-probabilities, so the loss's pass runs the policy that
        sampled them, before any update), π_init is a model of its own (a frozen copy or the reference), one process
        or DDP holds whole weights (a ZeRO-3 or FSDP2 head gathered inside the loss's pass is not risked), and
        π_init's hidden states fit KEEP_INIT_HIDDEN_BYTES."""
        from coreward.grpo.kl_from_init import causal_lm

        if output.get("old_per_token_logps") is not None or self.kl_init_source not in ("copy", "reference"):
            return False
        if self.is_deepspeed_enabled or self.is_fsdp_enabled:
            return False
        hidden = causal_lm(self.accelerator.unwrap_model(self.model)).config.get_text_config().hidden_size
        return ids.size(0) * output["completion_mask"].size(1) * hidden * 4 <= KEEP_INIT_HIDDEN_BYTES

    def _keep_init_hidden(self, output: dict[str, Any], ids: torch.Tensor, attention: torch.Tensor) -> None:
        """π_init's pass over the generation batch, one micro-batch at a time: its hidden states at the completion
        positions and its log-probabilities of the sampled tokens travel with their rows to the loss, whose own pass
        of the policy gives the other side (`_get_per_token_logps_and_entropies`): one forward pass a step instead
        of two."""
        width = output["completion_mask"].size(1)
        hidden, logps = [], []
        with self._metric_passes():
            for part in self._micro_batches(ids):
                with self._initial_policy() as init:
                    part_logps, part_hidden = self._hidden_pass(init, ids[part], attention[part], width)
                logps.append(part_logps)
                hidden.append(part_hidden)
        output[INIT_HIDDEN], output[INIT_LOGPS] = torch.cat(hidden), torch.cat(logps)

    def _exact_kl_from_init(self, ids: torch.Tensor, attention: torch.Tensor, mask: torch.Tensor) -> None:
        """KL_t over the whole vocabulary at each completion position (grpo/kl_from_init.py `token_kl`), from the
        policy's and π_init's last hidden states, kept from TRL's own log-probability pass over one micro-batch at
        a time (`_hidden_pass`), so that one micro-batch's hidden states live at once. The same passes give both
        models' log-probabilities of the sampled tokens: k3 is logged beside, `kl/from_init_k3`."""
        from coreward.grpo.kl_from_init import sequence_k3, token_kl

        width, unwrap = mask.size(1), self.accelerator.unwrap_model
        exact, k3 = [], []
        with self._metric_passes():
            for part in self._micro_batches(ids):
                policy_logps, policy_hidden = self._hidden_pass(self.model, ids[part], attention[part], width)
                with self._initial_policy() as init:
                    init_logps, init_hidden = self._hidden_pass(init, ids[part], attention[part], width)
                    kl_t = token_kl(policy_hidden, unwrap(self.model), init_hidden, unwrap(init), mask[part],
                                    temperature=self.temperature)
                exact.append(kl_t.sum(dim=1))
                k3.append(sequence_k3(policy_logps, init_logps, mask[part].float()))
        self._record_exact_kl(torch.cat(exact), torch.cat(k3), mask)

    @contextmanager
    def _metric_passes(self):
        """No gradients, and the run's random numbers left as a run without the metric would have them (a policy
        with dropout draws some in a forward pass)."""
        devices = [torch.cuda.current_device()] if self.accelerator.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices), torch.no_grad():
            yield

    def _micro_batches(self, ids: torch.Tensor) -> list[slice]:
        rows = self.args.per_device_train_batch_size
        return [slice(start, start + rows) for start in range(0, ids.size(0), rows)]

    def _hidden_pass(self, model, ids: torch.Tensor, attention: torch.Tensor, width: int
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """TRL's log-probability pass of `model` over one micro-batch, and its backbone's last hidden states at the
        completion positions (`completion_hidden_states`): (log-probabilities of the sampled tokens, hidden states)."""
        from coreward.grpo.kl_from_init import completion_hidden_states

        with completion_hidden_states(self.accelerator.unwrap_model(model), width) as kept:
            logps = self._get_per_token_logps_and_entropies(model, ids, attention, width, ids.size(0))[0]
        return logps, kept[-1]

    def _record_exact_kl(self, sequence_kl: torch.Tensor, sequence_k3: torch.Tensor, completion_mask: torch.Tensor
                         ) -> None:
        """`kl/from_init` and `kl/from_init_per_token` of the exact estimator, and k3 on the same samples beside it."""
        self._record_kl(sequence_kl, completion_mask)
        self._metrics["train"]["kl/from_init_k3"].append(self.accelerator.gather(sequence_k3).mean().item())

    def _record_kl(self, sequence_kl: torch.Tensor, completion_mask: torch.Tensor) -> None:
        """`kl/from_init` (mean over all processes' completions of Σ_t KL_t) and `kl/from_init_per_token`."""
        kl = self.accelerator.gather(sequence_kl.float())
        tokens = self.accelerator.gather(completion_mask.float().sum(dim=1))
        metrics = self._metrics["train"]
        metrics["kl/from_init"].append(kl.mean().item())
        metrics["kl/from_init_per_token"].append((kl.sum() / tokens.sum().clamp(min=1)).item())

    def _record_kl_from_init(self, policy_logps, init_logps, completion_mask) -> None:
        from coreward.grpo.kl_from_init import sequence_k3

        self._record_kl(sequence_k3(policy_logps.detach(), init_logps, completion_mask.float()), completion_mask)

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        sampling, self._sampling_pending = self._sampling_pending, None
        result = self._logps_and_kl(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)
        if sampling is not None:
            self._record_sampling_mismatch(sampling[0], result[0], sampling[1])
        return result

    def _logps_and_kl(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        """TRL's log-probability pass, recording kl/from_init when the loss's pass was asked to (`_kl_pending`)."""
        pending, self._kl_pending = getattr(self, "_kl_pending", None), None
        if torch.is_grad_enabled():  # the loss's pass: what TRL's would run, over whole rows (update/tokens_unshared)
            self._update_tokens.unshared += input_ids.numel()
        if pending is None or pending[2] is None:
            result = self._shared_prompt_logps(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)
            if result is None:
                result = super()._get_per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep,
                                                                    *args, **kwargs)
                if torch.is_grad_enabled():
                    self._update_tokens.ran += input_ids.numel()
            if pending is not None:  # the loss's pass over an on-policy micro-batch: the policy's log-probabilities
                self._record_kl_from_init(result[0], pending[0], pending[1])
            return result
        # exact, the policy's side from this pass (_keep_init_hidden): its hidden states at the completion positions
        from coreward.grpo.kl_from_init import completion_hidden_states, sequence_k3, token_kl

        init_logps, mask, init_hidden = pending
        policy = self.accelerator.unwrap_model(self.model)
        with completion_hidden_states(policy, logits_to_keep) as kept:
            result = super()._get_per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep,
                                                                *args, **kwargs)
        self._update_tokens.ran += input_ids.numel()
        start = time.perf_counter()
        with self._initial_policy() as init:
            kl_t = token_kl(kept[-1], policy, init_hidden, self.accelerator.unwrap_model(init), mask,
                            temperature=self.temperature)
        self._record_exact_kl(kl_t.sum(dim=1), sequence_k3(result[0].detach(), init_logps, mask.float()), mask)
        self._metrics["train"]["time/kl_from_init_in_loss"].append(time.perf_counter() - start)
        return result

    def _shared_prompt_logps(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        """TRL's (log-probabilities, entropies, aux loss) from the pass that runs each distinct prompt once
        (grpo/shared_prompts.py); None where it does not apply."""
        from coreward.grpo.shared_prompts import shared_prompt_logps

        if not getattr(self, "prompt_sharing", False) or not torch.is_grad_enabled():
            return None  # the loss's pass only: no-grad passes (a metric's, which may hook the backbone) are TRL's
        causal_lm = self.accelerator.unwrap_model(model)
        causal_lm = causal_lm.get_base_model() if hasattr(causal_lm, "get_base_model") else causal_lm
        trls_pass = super()._get_per_token_logps_and_entropies
        ran: list[int] = []
        result = shared_prompt_logps(model, causal_lm, trls_pass, self.accelerator.autocast, ran, input_ids,
                                     attention_mask, logits_to_keep, *args, **kwargs)
        if result is not None:
            self._update_tokens.ran += sum(ran)
        return result

    def _expect_sampling_mismatch(self, inputs) -> None:
        """The next log-probability pass (the loss's, over `inputs`) compares the sampler's log-probabilities with the
        policy's, when TRL computed none of its own (on-policy rollouts: the loss's pass is the policy that sampled)."""
        if "sampling_per_token_logps" in inputs and "old_per_token_logps" not in inputs and not self.use_vllm \
                and self.model.training:
            mask = inputs["completion_mask"] * inputs["tool_mask"] if "tool_mask" in inputs else inputs["completion_mask"]
            self._sampling_pending = (inputs["sampling_per_token_logps"], mask)  # tool output is no sampled token

    def _expect_kl_from_init(self, inputs) -> None:
        """The next log-probability pass (the loss's, over `inputs`) records kl/from_init; see _log_kl_from_init."""
        if INIT_LOGPS in inputs and self.model.training:
            self._kl_pending = (inputs[INIT_LOGPS], inputs["completion_mask"], inputs.get(INIT_HIDDEN))

    def _compute_loss(self, model, inputs):
        if not (self.per_view_loss and "view" in inputs):
            self._expect_kl_from_init(inputs)
            self._expect_sampling_mismatch(inputs)
            return super()._compute_loss(model, inputs)
        mode = "train" if self.model.training else "eval"
        metrics = self._metrics[mode]
        total = None
        for view, part in split_views(inputs):
            before = {key: len(values) for key, values in metrics.items()}
            self._expect_kl_from_init(part)
            self._expect_sampling_mismatch(part)
            loss = super()._compute_loss(model, part)
            for key in [k for k in metrics if "/view" not in k]:  # what TRL logged for this view alone
                metrics[f"{key}/view{view}"].extend(metrics[key][before.get(key, 0):])
            scale = self.current_gradient_accumulation_steps if mode == "train" else 1
            metrics[f"loss/view{view}"].append(loss.detach().item() * scale)
            total = loss if total is None else total + loss
        return total

    def training_step(self, model, inputs, num_items_in_batch):
        start = time.perf_counter()
        self._times = StepTimes()
        self._update_tokens = UpdateTokens()
        output = super().training_step(model, inputs, num_items_in_batch)
        # `training_step` includes `_prepare_inputs`, hence generation and scoring when they happened
        # the step's logged value is the mean of what its micro-batches append: each appends its own time x their
        # number, so the mean is the optimizer step's whole update (with gradient accumulation, one micro-batch's time
        # alone would hide the rest of the update in step_time: docs/figures.md, Speed, "`time/update` under gradient
        # accumulation")
        micro_batches = self.args.gradient_accumulation_steps
        self._metrics["train"]["time/update"].append((time.perf_counter() - start - self._times.scoring) * micro_batches)
        if self._update_tokens.unshared:  # summed over the step's micro-batches the same way
            self._metrics["train"]["update/tokens"].append(self._update_tokens.ran * micro_batches)
            self._metrics["train"]["update/tokens_unshared"].append(self._update_tokens.unshared * micro_batches)
        return output

    # ----------------------------------------------------------------- rewards on the global batch
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        start = time.perf_counter()
        mode = "train" if self.model.training else "eval"
        G = self.num_generations if mode == "train" else self.num_generations_eval

        local_columns = {
            key: [example.get(key) for example in inputs]
            for key in inputs[0]
            if key not in ("prompt", "completion", "completion_ids")
        }
        local_stats = self._token_stats(completion_ids_list) if self.needed_token_stats else {}

        # completions are untrusted: past `max_completion_chars` only the tail (where the answer is) is kept
        max_chars = getattr(self.verifier, "max_completion_chars", None)
        texts = [completion_text(c) for c in completions]
        clipped = [clip_completion(t, max_chars) for t in texts]
        batch = RolloutBatch(
            prompts=gather_object(list(prompts)),
            completions=gather_object(clipped),
            completion_ids=gather_object([list(ids) for ids in completion_ids_list]),
            group_ids=[],
            num_generations=G,
            columns={key: gather_object(values) for key, values in sorted(local_columns.items())},
            step=self.state.global_step,
            reference_column=self.reference_column,
            prompt_ids=gather_object([list(ids) for ids in self._last_prompt_ids or []]),
            token_stats={name: gather_object(values) for name, values in local_stats.items()},
            context={"verifier": self.verifier, "mode": mode},
            policy=self.policy,
        )
        batch.group_ids = [i // G for i in range(len(batch))]
        check_groups(batch)
        truncated = sum(gather_object([sum(a is not b for a, b in zip(texts, clipped))]))

        rewards = torch.full((len(batch), len(self.reward_sources)), float("nan"))
        faulty = torch.zeros(len(batch), dtype=torch.bool)
        for j, source in enumerate(self.reward_sources):
            values = source.compute(batch)
            if len(values) != len(batch):
                raise RuntimeError(
                    f"reward source {source.name!r} returned {len(values)} rewards for {len(batch)} completions"
                )
            # None: the source does not apply to this completion (TRL's convention); anything else must be a number
            column = torch.tensor([_as_float(v) for v in values], dtype=torch.float32)
            nonfinite = ~torch.isfinite(column) & torch.tensor([v is not None for v in values])
            faulty |= nonfinite
            batch.log(f"rewards/{self.reward_func_names[j]}/nonfinite", float(nonfinite.sum()))
            rewards[:, j] = column
        # A NaN/inf reward is a fault, not a score: the whole completion is skipped (every source NaN, so TRL
        # leaves it out of its group's baseline and gives it advantage 0), never propagated into the loss.
        rewards[faulty] = float("nan")

        if mode == "train":
            self.fault_counts["nonfinite_reward_samples"] += int(faulty.sum())
            self.fault_counts["truncated_completions"] += truncated
        batch.verdicts()  # verified accuracy is logged for every method: its cost belongs to the reward time
        self._log_batch_metrics(batch, mode, time.perf_counter() - start)
        self.last_batch = batch
        if mode == "train":
            fault_point("reward", self.state.global_step + 1)
        return rewards.to(self.accelerator.device)

    def _token_stats(self, completion_ids_list) -> dict[str, list[float]]:
        model = self.accelerator.unwrap_model(self.model)
        was_training = model.training
        model.eval()
        try:
            stats = completion_token_stats(
                model,
                self._last_prompt_ids,
                completion_ids_list,
                pad_token_id=self._tokenizer.pad_token_id,
                batch_size=max(1, self.args.per_device_train_batch_size),
                temperature=self.args.temperature,  # for the statistics of logits / T
            )
        finally:
            model.train(was_training)
        return {name: stats[name] for name in self.needed_token_stats}

    def _log_batch_metrics(self, batch: RolloutBatch, mode: str, reward_time: float) -> None:
        metrics = self._metrics[mode]
        verdicts = batch.verdicts()
        if verdicts is not None:
            metrics["verified_accuracy"].append(sum(v.correct for v in verdicts) / len(verdicts))
            metrics["verify/timeouts"].append(float(sum(v.timed_out for v in verdicts)))
            metrics["verify/no_answer"].append(sum(v.extracted is None for v in verdicts) / len(verdicts))
            # what a method that learns from verified rollouts has to work with
            groups = list(batch.groups())
            metrics["verify/prompts_with_verified"].append(
                sum(any(verdicts[i].correct for i in rows) for rows in groups) / max(1, len(groups)))
        for name, value in batch.metrics.items():
            metrics[name].append(value)
        if mode == "train":
            metrics["time/reward"].append(reward_time)
            for name in ("nonfinite_reward_samples", "truncated_completions"):
                metrics[f"faults/{name}"].append(float(self.fault_counts[name]))

    # ----------------------------------------------------------------- numerical faults in the update
    def _get_grad_norm(self, model, grad_norm=None):
        """The step's gradient norm; when it is NaN or inf, the optimizer step is skipped and counted.

        Dropping every gradient (`grad = None`) makes the optimizer pass over each parameter: no weight,
        moment or step count changes. The norm is the same number on every process (gradients are
        all-reduced first), so all of them skip together. The learning-rate schedule still advances.
        """
        grad_norm = super()._get_grad_norm(model, grad_norm=grad_norm)
        fault_point("update", self.state.global_step + 1)
        if grad_norm is not None and not math.isfinite(float(grad_norm)):
            if self.is_deepspeed_enabled:  # its engine holds the gradients: we can't drop them from here
                logger.warning("step %d: gradient norm is %s under DeepSpeed, which decides on the step itself",
                               self.state.global_step + 1, float(grad_norm))
                return grad_norm
            for param in model.parameters():
                param.grad = None
            self.fault_counts["nonfinite_grad_steps"] += 1
            logger.warning("step %d: gradient norm is %s, optimizer step skipped (%d so far)",
                           self.state.global_step + 1, float(grad_norm), self.fault_counts["nonfinite_grad_steps"])
        self._metrics["train"]["faults/nonfinite_grad_steps"].append(float(self.fault_counts["nonfinite_grad_steps"]))
        return grad_norm

    # ----------------------------------------------------------------- checkpoints
    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """TRL's save, except under DeepSpeed with a bf16/fp16 module: there the weights are written from DeepSpeed's
        float32 master partitions, not the module's 16-bit copies (at lr 1e-6 most of a short run's learning is
        below a bf16 rounding step of the weights: written in bf16, `final/` would equal the initial model)."""
        from coreward.runtime.precision import is_low_precision

        module = self.accelerator.unwrap_model(self.model_wrapped) if self.is_deepspeed_enabled else None
        if module is None or hasattr(module, "peft_config") or not is_low_precision(next(module.parameters()).dtype):
            return super().save_model(output_dir, _internal_call)
        from deepspeed.utils import safe_get_full_fp32_param

        output_dir = output_dir or self.args.output_dir
        state = module.state_dict() if self.args.should_save else {}  # buffers, and the names of tied weights
        masters: dict[int, torch.Tensor] = {}
        for name, param in module.named_parameters(remove_duplicate=False):  # collective: every process, same order
            if id(param) not in masters:
                full = safe_get_full_fp32_param(param)
                masters[id(param)] = full.detach().cpu() if full is not None else param.detach().float().cpu()
            if self.args.should_save:
                state[name] = masters[id(param)]
        self._save(output_dir, state_dict=state)
        if self.args.should_save:  # save_pretrained records the module's dtype; the tensors are float32
            config = Path(output_dir) / "config.json"
            written = json.loads(config.read_text())
            written["dtype"] = "float32"
            config.write_text(json.dumps(written, indent=2, sort_keys=True) + "\n")

    def _save_checkpoint(self, model, trial):
        for callback in self.callback_handler.callbacks:
            if hasattr(callback, "flush"):  # metrics up to this step are on disk before the checkpoint is
                callback.flush()
        checkpoint = Path(self._get_output_dir(trial=trial)) / f"checkpoint-{self.state.global_step}"
        if self.args.should_save and checkpoint.exists():  # left by a killed attempt at this step: start clean
            discard(checkpoint)
        self.accelerator.wait_for_everyone()
        try:
            super()._save_checkpoint(model, trial)
            checkpoint.mkdir(parents=True, exist_ok=True)  # every process writes its own state file
            torch.save(self._resume_state(), checkpoint / TRAINER_STATE.format(rank=self.accelerator.process_index))
            fault_point("checkpoint-sources", self.state.global_step)
            self.save_sources(checkpoint)  # every process: a sharded teacher is gathered collectively
            self.accelerator.wait_for_everyone()  # every process's files are written before the marker is
            if self.args.should_save:
                mark_complete(checkpoint)
        except (OSError, RuntimeError) as err:
            if not disk_full(err, checkpoint.parent):
                raise
            discard(checkpoint)  # the incomplete checkpoint goes (freeing its space); the previous one is untouched
            previous = last_complete_checkpoint(checkpoint.parent)
            raise CorewardError(
                f"cannot write {checkpoint}: the disk is full ({type(err).__name__}: {err}); the previous complete checkpoint "
                f"({previous or 'none'}) is intact: free space, then continue with --resume"
            ) from None
        if self.args.should_save:
            fault_point("rotation", self.state.global_step)
            rotate_checkpoints(checkpoint.parent, self.keep_checkpoints)
        self.accelerator.wait_for_everyone()

    def _save_optimizer_and_scheduler(self, output_dir):
        fault_point("checkpoint", self.state.global_step)  # the model's weights are written, nothing else
        super()._save_optimizer_and_scheduler(output_dir)

    def _resume_state(self) -> dict[str, Any]:
        """What TRL does not save: where this process is in a reused rollout buffer, and our fault counters."""
        generate_every = self.args.steps_per_generation * self.num_iterations
        mid_buffer = self._step % generate_every != 0  # the next step reuses rollouts made before the checkpoint
        return {
            "step": self._step,
            "buffered_inputs": self._buffered_inputs if mid_buffer else None,
            "fault_counts": dict(self.fault_counts),
        }

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        state_file = Path(checkpoint) / TRAINER_STATE.format(rank=self.accelerator.process_index)
        if state_file.is_file():  # our own file, with tensors and lists: not a weights-only pickle
            state = torch.load(state_file, map_location=load_location(self.accelerator.device), weights_only=False)
            self._step = state["step"]
            self._buffered_inputs = state["buffered_inputs"]
            self.fault_counts.update(state["fault_counts"])
        self.load_sources(checkpoint)

    def load_sources(self, checkpoint) -> None:
        """Each reward source's state from a checkpoint (an RM and its optimizer, a teacher)."""
        for source in self.reward_sources:
            directory = Path(checkpoint) / SOURCES_DIR / source.name
            if directory.is_dir():
                source.load_state(directory)

    def save_sources(self, directory: Path) -> None:
        """Every process calls this (sources gather sharded state); the main process writes the files."""
        for source in self.reward_sources:
            target = directory / SOURCES_DIR / source.name
            target.mkdir(parents=True, exist_ok=True)
            source.save_state(target)


def check_groups(batch: RolloutBatch) -> None:
    """Every group of G rows must share one prompt: the sampler's contract that rewards rely on."""
    if len(batch) % batch.num_generations:
        raise RuntimeError(f"global batch of {len(batch)} is not a multiple of num_generations={batch.num_generations}")
    for rows in batch.groups():
        first = json.dumps(batch.prompts[rows.start], sort_keys=True, default=str)
        for i in rows[1:]:
            if json.dumps(batch.prompts[i], sort_keys=True, default=str) != first:
                raise RuntimeError(f"prompt group starting at row {rows.start} mixes prompts: sampler order broken")


def _as_float(value: Any) -> float:
    """A reward as a float; None (not applicable) and anything that is not a number become NaN."""
    if value is None:
        return float("nan")
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return float("nan")
