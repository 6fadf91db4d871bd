"""`CorewardGRPOTrainer`: TRL's GRPOTrainer with reward sources computed on the global batch.

What we change in TRL (trl==1.16.0), and why:

* `_calculate_rewards` — TRL hands each reward function its own process's slice, which can split a
  prompt's group of G completions across processes (trl #3896). We gather every column first, give each
  `RewardSource` the whole batch, and return the global reward matrix TRL expects (TRL slices each
  process's advantages out of it itself).
* `_generate` / `_generate_and_score_completions` / `training_step` — wall time split into generation,
  reward and update; per-step hooks of the sources (an EMA teacher updates before rollouts).
* `_save_checkpoint` / `_load_optimizer_and_scheduler` — reward-source state (an RM and its optimizer,
  a teacher) travels with TRL's checkpoints; a checkpoint is marked complete only once everything is on
  disk, so resume never picks a half-written one.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch
from accelerate.utils import gather_object
from trl import GRPOTrainer

from coreward.rewards.base import RewardSource, RolloutBatch
from coreward.training.token_stats import completion_token_stats

COMPLETE_MARKER = "COREWARD_COMPLETE"
SOURCES_DIR = "reward_sources"


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


class CorewardGRPOTrainer(GRPOTrainer):
    def __init__(
        self,
        *args: Any,
        reward_sources: list[RewardSource],
        verifier: Any,
        reference_column: str = "answer",
        keep_checkpoints: int | None = 2,
        paired_views: bool = False,
        **kwargs: Any,
    ):
        self.reward_sources = reward_sources
        self.verifier = verifier
        self.reference_column = reference_column
        self.keep_checkpoints = keep_checkpoints
        self.paired_views = paired_views
        self.needed_token_stats = sorted({s for src in reward_sources for s in src.needs_token_stats})
        self._last_prompt_ids: list[list[int]] | None = None
        self._generation_time = 0.0
        self._scoring_time = 0.0
        self._generation_step_seen = False
        self.last_batch: RolloutBatch | None = None
        names = [source.name for source in reward_sources]
        if len(set(names)) != len(names):
            names = [f"{n}_{i}" for i, n in enumerate(names)]
        super().__init__(*args, reward_funcs=[_placeholder_reward(n) for n in names], **kwargs)

    def _get_train_sampler(self, dataset=None):
        if not self.paired_views:
            return super()._get_train_sampler(dataset)
        from coreward.training.paired import PairedRepeatSampler

        dataset = dataset if dataset is not None else self.train_dataset
        return PairedRepeatSampler(
            num_rows=len(dataset),
            mini_repeat_count=self.num_generations,
            batch_size=self.args.generation_batch_size // self.num_generations,
            repeat_count=self.num_iterations * self.args.steps_per_generation,
            shuffle=self.shuffle_dataset,
            seed=self.args.seed,
        )

    # ----------------------------------------------------------------- generation and timing
    def _generate(self, prompts: list):
        start = time.perf_counter()
        result = super()._generate(prompts)
        self._last_prompt_ids = result[0]
        self._generation_time += time.perf_counter() - start
        return result

    def _generate_and_score_completions(self, inputs):
        mode = "train" if self.model.training else "eval"
        if mode == "train":
            for source in self.reward_sources:
                source.on_step_begin(self)
        start = time.perf_counter()
        self._generation_time = 0.0
        output = super()._generate_and_score_completions(inputs)
        total = time.perf_counter() - start
        if mode == "train":
            self._scoring_time = total
            self._generation_step_seen = True
            self._metrics[mode]["time/generation"].append(self._generation_time)
        return output

    def training_step(self, model, inputs, num_items_in_batch):
        start = time.perf_counter()
        self._generation_step_seen = False
        output = super().training_step(model, inputs, num_items_in_batch)
        elapsed = time.perf_counter() - start
        # `training_step` includes `_prepare_inputs`, hence generation and scoring when they happened
        update = elapsed - (self._scoring_time if self._generation_step_seen else 0.0)
        self._metrics["train"]["time/update"].append(update)
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

        batch = RolloutBatch(
            prompts=gather_object(list(prompts)),
            completions=gather_object([completion_text(c) for c in completions]),
            completion_ids=gather_object([list(ids) for ids in completion_ids_list]),
            group_ids=[],
            num_generations=G,
            columns={key: gather_object(values) for key, values in sorted(local_columns.items())},
            step=self.state.global_step,
            reference_column=self.reference_column,
            prompt_ids=gather_object([list(ids) for ids in self._last_prompt_ids or []]),
            token_stats={name: gather_object(values) for name, values in local_stats.items()},
            context={"verifier": self.verifier, "trainer": self, "mode": mode},
        )
        batch.group_ids = [i // G for i in range(len(batch))]
        check_groups(batch)

        rewards = torch.full((len(batch), len(self.reward_sources)), float("nan"))
        for j, source in enumerate(self.reward_sources):
            values = source.compute(batch)
            if len(values) != len(batch):
                raise RuntimeError(
                    f"reward source {source.name!r} returned {len(values)} rewards for {len(batch)} completions"
                )
            column = torch.tensor([float(v) if v is not None else float("nan") for v in values])
            nonfinite = ~torch.isfinite(column)
            if nonfinite.any():  # a NaN/inf reward is skipped (advantage 0), never propagated
                column[nonfinite] = float("nan")
            batch.log(f"rewards/{self.reward_func_names[j]}/nonfinite", float(nonfinite.sum()))
            rewards[:, j] = column

        batch.verdicts()  # verified accuracy is logged for every method: its cost belongs to the reward time
        self._log_batch_metrics(batch, mode, time.perf_counter() - start)
        self.last_batch = batch
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
        for name, value in batch.metrics.items():
            metrics[name].append(value)
        if mode == "train":
            metrics["time/reward"].append(reward_time)

    # ----------------------------------------------------------------- checkpoints
    def _save_checkpoint(self, model, trial):
        for callback in self.callback_handler.callbacks:
            if hasattr(callback, "flush"):  # metrics up to this step are on disk before the checkpoint is
                callback.flush()
        super()._save_checkpoint(model, trial)
        checkpoint = Path(self._get_output_dir(trial=trial)) / f"checkpoint-{self.state.global_step}"
        if self.args.should_save:
            for source in self.reward_sources:
                directory = checkpoint / SOURCES_DIR / source.name
                directory.mkdir(parents=True, exist_ok=True)
                source.save_state(directory)
            mark_complete(checkpoint)
            rotate_checkpoints(checkpoint.parent, self.keep_checkpoints)
        self.accelerator.wait_for_everyone()

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None:
            for source in self.reward_sources:
                directory = Path(checkpoint) / SOURCES_DIR / source.name
                if directory.is_dir():
                    source.load_state(directory)

    def save_sources(self, directory: Path) -> None:
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


def mark_complete(checkpoint: Path) -> None:
    """Write the completeness marker atomically: it exists only once every file before it is on disk."""
    _fsync_tree(checkpoint)
    tmp = checkpoint / (COMPLETE_MARKER + ".tmp")
    with open(tmp, "w") as handle:
        handle.write(json.dumps({"time": time.time()}))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, checkpoint / COMPLETE_MARKER)


def _fsync_tree(directory: Path) -> None:
    for path in directory.rglob("*"):
        if path.is_file():
            try:
                with open(path, "rb") as handle:
                    os.fsync(handle.fileno())
            except OSError:
                pass


def complete_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    found = []
    for path in Path(run_dir).glob("checkpoint-*"):
        suffix = path.name.rsplit("-", 1)[-1]
        if suffix.isdigit() and (path / COMPLETE_MARKER).is_file():
            found.append((int(suffix), path))
    return [path for _, path in sorted(found)]


def last_complete_checkpoint(run_dir: Path) -> Path | None:
    checkpoints = complete_checkpoints(run_dir)
    return checkpoints[-1] if checkpoints else None


def rotate_checkpoints(run_dir: Path, keep: int | None) -> None:
    """Delete old complete checkpoints beyond `keep`, and incomplete ones older than the newest complete."""
    complete = complete_checkpoints(run_dir)
    if not complete:
        return
    newest = int(complete[-1].name.rsplit("-", 1)[-1])
    for path in Path(run_dir).glob("checkpoint-*"):
        suffix = path.name.rsplit("-", 1)[-1]
        if suffix.isdigit() and not (path / COMPLETE_MARKER).is_file() and int(suffix) < newest:
            shutil.rmtree(path, ignore_errors=True)
    if keep:
        for path in complete[:-keep]:
            shutil.rmtree(path, ignore_errors=True)

