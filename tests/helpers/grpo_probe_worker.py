"""A GRPO run with a group-level probe reward, launched by the tests with 1 process or with torchrun.

The probe's reward is a completion's length rank within its group, which is only right when the source
sees the whole group. Each process writes what the source saw and the advantages TRL got back.

    python tests/helpers/grpo_probe_worker.py MODEL_DIR OUT_DIR STEPS PER_DEVICE_BATCH [REWARD [MAX_COMPLETION_LENGTH]]
    torchrun --nproc_per_node 2 tests/helpers/grpo_probe_worker.py MODEL_DIR OUT_DIR STEPS PER_DEVICE_BATCH [REWARD [...]]

REWARD is a comma-separated list of registered source names (default: the probe); every call's batch and rewards are
recorded. MAX_COMPLETION_LENGTH: tokens per completion (default 12).

With G=4 and a per-device batch of 6, groups straddle the two processes (rows 4-7 are one group).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from coreward.rewards.base import RewardSource, RolloutBatch, register


def length_ranks(batch: RolloutBatch) -> list[float]:
    """Rank of each completion's token count inside its group, scaled to [0, 1]; ties by row order."""
    rewards = []
    for rows in batch.groups():
        lengths = [len(batch.completion_ids[i]) for i in rows]
        order = sorted(range(len(lengths)), key=lambda k: (lengths[k], k))
        ranks = [0] * len(lengths)
        for rank, k in enumerate(order):
            ranks[k] = rank
        rewards += [rank / (len(lengths) - 1) for rank in ranks]
    return rewards


@register("length_rank_probe")
class LengthRankProbe(RewardSource):
    def compute(self, batch: RolloutBatch) -> list[float]:
        return length_ranks(batch)


class Recording(RewardSource):
    """Wraps a source and records each global batch it saw with the rewards it gave."""

    def __init__(self, inner: RewardSource):
        self.inner = inner
        self.name = inner.name
        self.needs_token_stats = inner.needs_token_stats
        self.calls = []

    def compute(self, batch: RolloutBatch) -> list[float]:
        rewards = self.inner.compute(batch)
        self.calls.append(
            {
                "step": batch.step,
                "group_ids": batch.group_ids,
                "ids": batch.columns["id"],
                "prompts": batch.prompts,
                "prompt_ids": batch.prompt_ids,
                "completion_ids": batch.completion_ids,
                "completions": batch.completions,
                "answers": batch.columns["answer"],
                "columns": batch.columns,
                "rewards": rewards,
            }
        )
        return rewards


def main(model_dir: str, out_dir: str, steps: int, per_device_batch: int, reward: str, max_completion_length: int = 12) -> None:
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig

    from coreward.data.synthetic import load_demo
    from coreward.grpo.trainer import CorewardGRPOTrainer
    from coreward.rewards import registered_sources
    from coreward.verify import Verifier

    class RecordingTrainer(CorewardGRPOTrainer):
        advantages: list = []

        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            self.advantages.append(output["advantages"].tolist())
            return output

    records = load_demo("train", limit=16)
    rows = [{"prompt": r.question, "answer": r.answer, "id": r.id, "question": r.question} for r in records]
    paired = "co_rewarding_1" in reward
    if paired:  # each question next to its rephrasing, as Co-rewarding-I trains
        from coreward.data.rows import paired_rows
        from coreward.data.synthetic import demo_rephrasing

        rows = paired_rows([(row, demo_rephrasing(r)) for row, r in zip(rows, records)])
        for row in rows:
            row["prompt"] = row["question"]
    dataset = Dataset.from_list(rows)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    sources = [Recording(registered_sources()[name]()) for name in reward.split(",")]
    args = GRPOConfig(
        output_dir=str(Path(out_dir) / "run"),
        num_generations=4,
        per_device_train_batch_size=per_device_batch,
        max_completion_length=max_completion_length,
        max_steps=steps,
        learning_rate=1e-3,
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        report_to="none",
        logging_steps=1,
        save_strategy="no",
        seed=7,
        remove_unused_columns=False,
        disable_tqdm=True,
    )
    with Verifier(num_workers=1) as verifier:
        trainer = RecordingTrainer(
            model=model_dir,
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            reward_sources=sources,
            verifier=verifier,
        )
        trainer.train()
    rank = trainer.accelerator.process_index
    result = {
        "rank": rank,
        "world": trainer.accelerator.num_processes,
        "calls": {source.name: source.calls for source in sources},
        "advantages": RecordingTrainer.advantages,
    }
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / f"rank{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    from coreward.runtime.distributed import exit_now, leave_process_group

    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] if len(sys.argv) > 5 else "length_rank_probe",
         int(sys.argv[6]) if len(sys.argv) > 6 else 12)
    # ended as `coreward train` ends a distributed run: the group left together, then no interpreter teardown (whose
    # destruction of gloo's threads aborts a rank now and then, exit -6, after its report is written)
    if leave_process_group():
        exit_now(0)
