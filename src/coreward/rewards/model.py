"""Static model-based reward: a frozen VerifyRM's probability that a completion is correct.

    r_i = σ(f_θ(<question>q</question>\\n<reference_answer>ref</reference_answer>\\n<completion>o_i</completion>))
    r_i = 1[σ(·) > threshold]          with the `threshold` option

θ never changes during the run. That is the point of this row of the Cooper paper: the policy keeps
moving while the RM stays where its training data left it, so completions unlike any it was trained on
(wrong answers of a kind it never saw as negatives) can score high, and the policy learns to produce them.
"""

from __future__ import annotations

import math

from coreward.errors import CorewardError
from coreward.rewards.base import RewardSource, RolloutBatch, register
from coreward.training.distributed import distributed_map


@register("model")
class ModelReward(RewardSource):
    needs_references = True

    def __init__(self, path: str = "demo", threshold: float | None = None, batch_size: int = 64,
                 device: str = "auto"):
        if threshold is not None and not 0 < threshold < 1:
            raise CorewardError(f"reward 'model': threshold must be in (0, 1), got {threshold}")
        self.path = path
        self.threshold = threshold
        self.batch_size = batch_size
        self.device = device
        self._rm = None

    def rm(self, trainer=None):
        """The RM, loaded on first use on `device` ("auto": the trainer's device, else GPU if any, else CPU)."""
        if self._rm is None:
            from coreward.rm.model import load_rm

            device = self.device
            if device == "auto" and trainer is not None:
                device = trainer.accelerator.device
            self._rm = load_rm(self.path, device=device, batch_size=self.batch_size)
            self._rm.model.requires_grad_(False)
        return self._rm

    def compute(self, batch: RolloutBatch) -> list[float]:
        questions = batch.columns.get("question")
        references = batch.references
        if questions is None or references is None:
            raise CorewardError(
                f"reward 'model' needs the dataset columns 'question' and "
                f"{batch.reference_column!r} (the question and its reference answer)"
            )
        rm = self.rm(batch.context.get("trainer"))
        triples = list(zip((str(q) for q in questions), (r or "" for r in references), batch.completions))
        # every process holds the whole batch: each scores its share and all gather the full list
        scores = distributed_map(lambda part: rm.score(*map(list, zip(*part))) if part else [], triples)
        # a NaN/inf logit scores NaN (see VerifyRM.score): the trainer skips that completion and counts it
        finite = [s for s in scores if math.isfinite(s)]
        batch.log("model/nonfinite_logits", float(len(scores) - len(finite)))
        if finite:
            batch.log("model/score_mean", sum(finite) / len(finite))
        if self.threshold is None:
            return scores
        return [s if not math.isfinite(s) else 1.0 if s > self.threshold else 0.0 for s in scores]
