"""Static model-based reward: a frozen VerifyRM's probability that a completion is correct.

    r_i = σ(f_θ(<question>q</question>\\n<reference_answer>ref</reference_answer>\\n<completion>o_i</completion>))
    r_i = 1[σ(·) > threshold]          with the `threshold` option

θ never changes during the run. That is the point of this row of the Cooper paper: the policy keeps
moving while the RM stays where its training data left it, so completions unlike any it was trained on
(wrong answers of a kind it never saw as negatives) can score high, and the policy learns to produce them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from coreward.rewards.base import Policy, RewardSource, RolloutBatch, register
from coreward.rm.evaluate import rollout_pair_accuracy, score_unique
from coreward.rm.inputs import RMInputSettings
from coreward.rm.model import VerifyRM


@register("model")
class ModelReward(RewardSource):
    label = "Static reward model"
    table_order = 1

    needs_references = True

    @dataclass
    class Params(RMInputSettings):
        # -- device, rm_cut, question_field: declared once, in rm/inputs.py's RMInputSettings (shared with Cooper)
        path: str = "demo"  # the RM: a directory, a hub id, or "demo" (the demo VerifyRM)
        threshold: float | None = None  # None: σ(logit) as the reward; a value in (0, 1): 1[σ(logit) > threshold]
        batch_size: int = 64  # completions scored per forward pass

        def validate(self) -> None:
            if self.threshold is not None and not 0 < self.threshold < 1:
                raise ValueError(f"threshold must be in (0, 1), got {self.threshold}")
            if self.batch_size < 1:
                raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")

    def __init__(self, **params):
        super().__init__(**params)
        self._rm: VerifyRM | None = None

    def rm(self, policy: Policy | None = None) -> VerifyRM:
        """The RM, loaded on first use on `device` ("auto": the policy's device, else GPU if any, else CPU)."""
        if self._rm is None:
            device = policy.device if self.params.device == "auto" and policy is not None else self.params.device
            self._rm = VerifyRM.from_pretrained(self.params.path, device=device, batch_size=self.params.batch_size,
                                               cut=self.params.rm_cut)
            self._rm.model.requires_grad_(False)
        return self._rm

    def compute(self, batch: RolloutBatch) -> list[float]:
        (references,) = batch.require_columns(self.name, "reference")
        questions = self.params.questions(batch, self.name)
        rm = self.rm(batch.policy)
        # every process holds the whole batch: each scores its share of the distinct triples, all get all
        scores = score_unique(rm, list(zip(questions, (r or "" for r in references), batch.completions)))
        # a NaN/inf logit scores NaN (see VerifyRM.score): the engine skips that completion and counts it
        finite = [s for s in scores if math.isfinite(s)]
        batch.log("model/nonfinite_logits", float(len(scores) - len(finite)))
        if finite:
            batch.log("model/score_mean", sum(finite) / len(finite))
        verdicts = batch.verdicts() if batch.mode == "train" and "verifier" in batch.context else None
        accuracy = rollout_pair_accuracy([v.correct for v in verdicts], scores, batch.num_generations) if verdicts else None
        if accuracy is not None:  # the frozen RM on what the policy writes now (falls when it is hacked)
            batch.log("rm/rollout_pair_accuracy", accuracy)
        if self.params.threshold is None:
            return scores
        return [s if not math.isfinite(s) else 1.0 if s > self.params.threshold else 0.0 for s in scores]
