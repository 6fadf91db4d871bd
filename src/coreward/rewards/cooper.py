"""Cooper: the policy and the reward model learn together (ZJU-REAL/Cooper, recipe/cooper).

Each training step, on the global batch of G rollouts o_1..o_G per prompt q (reference answer a):

    1. reward      r_i = σ(f_θ(q, a, o_i))                     θ = the RM *before* this step's update
    2. positive    o⁺ = first o_i the rule verifier accepts     ("hardest": the accepted o_i of lowest r_i)
                   no accepted o_i → no pair for q
    3. negative    o⁻ = assistant(q, o⁺): a plausible solution whose answer does not verify equal to o⁺'s;
                   asked again (at most `max_retries` times) while it does, or has no answer (the authors
                   keep an answerless one: `answerless_negative: accept`); else no pair
                   (variant, not the paper's: negative="rollout" takes o⁻ = the rejected o_i of highest r_i,
                   the policy's own wrong answer the RM likes most; no rejected o_i → no pair)
    4. RM update   L(θ) = mean over valid pairs of −log σ(f_θ(q, a, o⁺) − f_θ(q, a, o⁻))
                   one AdamW step (lr 1e-5, wd 0.01), gradient norm clipped to 1.0; a step whose norm is
                   not finite is skipped (and counted). The next step's rewards come from the new θ.

Why it resists reward hacking: the RM's negatives are made fresh from what the policy writes *now*,
rewritten to be wrong, so a kind of wrong completion the policy drifts toward soon shows up as a negative;
a static RM (`model`) never sees it. Positives are rule-verified, so they are precise.

Several processes: every process holds the whole batch (see `rewards/base.py`). Scoring is split across
them; the assistant is called once, on the main process, batched over all prompts, and its negatives are
broadcast, so every process has the same pairs; the RM update (`rm/learner.py`) is data-parallel with one
result, so the RMs stay identical. Under FSDP2 / DeepSpeed ZeRO-2 / ZeRO-3 the RM is sharded like the policy
(`rm/sharding.py`; `device: auto` only: an RM on a device of its own stays whole).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from coreward.rewards.base import Policy, RewardSource, RolloutBatch, register
from coreward.rm.assistant import Assistant, NegativeRequest, Negatives, build_assistant, request_seed, write_negatives
from coreward.rm.evaluate import evaluate_rm, rollout_pair_accuracy, score_unique
from coreward.rm.labelled import read_labelled
from coreward.rm.learner import STATE_FILE, Pair, RMLearner
from coreward.rm.model import VerifyRM
from coreward.runtime.assets import resolve_file
from coreward.runtime.distributed import on_main_then_broadcast

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- 2. positives


def select_positives(correct: list[bool], scores: list[float], G: int, rule: str = "first") -> list[int | None]:
    """Per group of G rows, the row of its positive, or None when the verifier accepted none of them."""
    positives = []
    for start in range(0, len(correct), G):
        accepted = [i for i in range(start, start + G) if correct[i]]
        if not accepted:
            positives.append(None)
        elif rule == "first":
            positives.append(accepted[0])
        else:  # "hardest": the accepted rollout the RM likes least (the first of equals; NaN scores last)
            positives.append(min(accepted, key=lambda i: (math.isnan(scores[i]), scores[i])))
    return positives


# --------------------------------------------------------------------------- 3. negatives: `write_negatives`
# (rm/assistant.py) asks the assistant for all of a step's negatives at once and asks again for those whose
# answer still verifies equal to the positive's. 4. the update: `RMLearner.update` (rm/learner.py).


# --------------------------------------------------------------------------- the reward source


@register("cooper")
class CooperReward(RewardSource):
    """σ(RM logit) as the reward, and the RM updated every step on (verified positive, negative) pairs."""

    needs_references = True

    @dataclass
    class Params:
        rm: str = "demo"  # the RM to start from: a directory, a hub id, or "demo" (the demo VerifyRM)
        assistant: Any = "perturb"  # who writes negatives: "perturb", an endpoint `http://host:port/v1#model`, a local model path, or a `coreward.llm` generator dict
        positive: Literal["first", "hardest"] = "first"  # "first" accepted rollout (the authors'), or the accepted one the RM likes least
        negative: Literal["assistant", "rollout"] = "assistant"  # the assistant's wrong solution (the authors'), or the group's rejected rollout the RM scores highest (ours)
        lr: float = 1e-5  # the RM's AdamW learning rate
        weight_decay: float = 0.01  # the RM's AdamW weight decay
        max_retries: int = 3  # times the assistant is asked again when its negative still verifies equal to the positive
        eval_every: int = 0  # held-out RM accuracy every K steps (0: never)
        eval_data: str | None = None  # held-out pairs: "demo" or a labelled file (question, reference_answer, completion, label)
        batch_size: int = 32  # sequences per RM forward pass (a pair is two)
        device: str = "auto"  # "auto": the policy's device; or "cpu", "cuda:1", ...
        optimizer_offload: bool = False  # the RM's AdamW state (and float32 master weights) on the CPU, off its device
        seed: int = 0  # seeds the assistant's requests
        # -- the RM's update schedule per RL step (rm/learner.py); defaults: one AdamW step on all pairs, fp32
        minibatch_size: int | None = None  # pairs per RM optimizer step (None: all of a step's pairs at once; the authors: 4)
        epochs: int = 1  # passes over each step's pairs (the authors' ppo_epochs)
        warmup_ratio: float = 0.0  # linear lr warmup over this fraction of the run's steps, then constant (the authors: 0.01)
        rm_dtype: Literal["float32", "bfloat16"] = "float32"  # the RM's weights (the authors: bfloat16)
        # -- fidelity options (docs/fidelity.md): the authors' behaviour where coreward's default differs
        assistant_prompt: Literal["coreward", "authors"] = "coreward"  # an LLM assistant's wording: ours (adds "same answer format"), or the authors' verbatim
        answerless_negative: Literal["reject", "accept"] = "reject"  # a negative with no extractable answer: asked again (ours), or kept (the authors')
        binary: bool = False  # reward 1[σ > 0.5] instead of σ (the authors' reward_model.reward_scale)
        rm_cut: Literal["coreward", "cooper"] = "coreward"  # RM input cutting: every field + tokens from the left (ours), or the authors' (rm/model.py)

        def validate(self) -> None:
            if not self.rm:
                raise ValueError("rm must name an RM directory, a hub id or 'demo'")
            if not isinstance(self.assistant, (str, dict, Assistant)) or not self.assistant:
                raise ValueError(f"assistant must be 'perturb', an endpoint URL, a model path or a generator dict, "
                                 f"got {self.assistant!r}")
            if self.minibatch_size is not None and self.minibatch_size < 1:
                raise ValueError(f"minibatch_size must be >= 1 (or null: all pairs), got {self.minibatch_size}")
            if not 0 <= self.warmup_ratio <= 1:
                raise ValueError(f"warmup_ratio must be <= 1 (and >= 0), got {self.warmup_ratio}")
            for name, least in (("weight_decay", 0), ("max_retries", 0), ("eval_every", 0), ("batch_size", 2), ("epochs", 1)):
                if getattr(self, name) < least:
                    raise ValueError(f"{name} must be >= {least}, got {getattr(self, name)}")
            if not self.lr > 0:
                raise ValueError(f"lr must be > 0, got {self.lr}")
            if self.eval_every and self.eval_data is None:
                raise ValueError("eval_data is needed with eval_every > 0: 'demo' or a labelled file")
            if self.eval_data is not None:
                resolve_file(self.eval_data, "rm_pairs", key="eval_data")

    def __init__(self, **params):
        super().__init__(**params)
        self.learner: RMLearner | None = None
        self._assistant: Assistant | None = None
        self._resume_from: Path | None = None
        self._eval_rows: list[dict] | None = None

    @property
    def learner_settings(self) -> dict[str, Any]:
        p = self.params
        return {"lr": p.lr, "weight_decay": p.weight_decay, "batch_size": p.batch_size,
                "minibatch_size": p.minibatch_size, "epochs": p.epochs, "warmup_ratio": p.warmup_ratio,
                "optimizer_offload": p.optimizer_offload}

    # -- lazily built parts ---------------------------------------------------------------------------

    def get_learner(self, policy: Policy | None = None) -> RMLearner:
        """The RM and its optimizer, on the policy's device: from the checkpoint when resuming, else from `rm`."""
        if self.learner is None:
            from coreward.rm.sharding import sharding_for

            device = policy.device if self.params.device == "auto" and policy is not None else self.params.device
            sharding = sharding_for(policy) if self.params.device == "auto" else None  # the policy's engine's
            if self._resume_from is not None:
                self.learner = RMLearner.load(self._resume_from, device, dtype=self.params.rm_dtype,
                                              sharding=sharding, **self.learner_settings)
            else:
                rm = VerifyRM.from_pretrained(self.params.rm, device=device, dtype=self.params.rm_dtype,
                                              batch_size=self.params.batch_size)
                self.learner = RMLearner(rm, sharding=sharding, **self.learner_settings)
            self.learner.rm.use_cut(self.params.rm_cut)
        return self.learner

    def get_assistant(self) -> Assistant:
        """Built on first use, on the main process only (the other processes never call it)."""
        if self._assistant is None:
            self._assistant = build_assistant(self.params.assistant, self.params.assistant_prompt)
        return self._assistant

    # -- one step -------------------------------------------------------------------------------------

    def compute(self, batch: RolloutBatch) -> list[float]:
        questions, references = batch.require_columns(self.name, "question", "reference")
        learner = self.get_learner(batch.policy)
        scores = score_unique(learner.rm, list(zip((str(q) for q in questions), (r or "" for r in references),
                                                   batch.completions)))  # 1. the RM before this step's update
        # a NaN/inf logit scores NaN (see VerifyRM.score): the engine skips that completion and counts it
        batch.log("rm/nonfinite_logits", float(sum(not math.isfinite(s) for s in scores)))
        if batch.mode != "train":
            return self._reward(scores)  # evaluation batches score, they don't teach the RM
        if self.params.eval_every and batch.step % self.params.eval_every == 0:  # the RM that scored this step
            if self._eval_rows is None:
                self._eval_rows = read_labelled(resolve_file(self.params.eval_data, "rm_pairs", key="eval_data"))
            for name, value in evaluate_rm(learner.rm, self._eval_rows).items():
                batch.log(name, value)
        accuracy = rollout_pair_accuracy([v.correct for v in batch.verdicts()], scores, batch.num_generations)
        if accuracy is not None:  # the RM that scored this step, on this step's rollouts
            batch.log("rm/rollout_pair_accuracy", accuracy)
        pairs = self.make_pairs(batch, scores)  # 2 and 3
        start = time.perf_counter()
        if batch.policy is not None:
            learner.set_learning_rate(batch.step, batch.policy.max_steps)
        for name, value in learner.update(pairs).items():  # 4
            batch.log(name, value)
        batch.log("time/rm_update", time.perf_counter() - start)
        return self._reward(scores)

    def _reward(self, scores: list[float]) -> list[float]:
        """σ, or with `binary` 1[σ > 0.5] (the authors' dp_reward.py `reward_scale`); NaN stays NaN (skipped)."""
        if not self.params.binary:
            return scores
        return [s if math.isnan(s) else float(s > 0.5) for s in scores]

    def make_pairs(self, batch: RolloutBatch, scores: list[float]) -> list[Pair]:
        """Steps 2 and 3: a verified positive per prompt and its negative (the assistant's, or a rejected rollout)."""
        verdicts = batch.verdicts()
        rows = select_positives([v.correct for v in verdicts], scores, batch.num_generations, self.params.positive)
        chosen = [(group, row) for group, row in enumerate(rows) if row is not None]
        if self.params.negative == "rollout":
            pairs = self._rollout_pairs(batch, scores, [v.correct for v in verdicts], chosen)
        else:
            pairs = self._assistant_pairs(batch, verdicts, chosen)
        batch.log("rm/positive_rate", len(chosen) / len(rows))
        batch.log("rm/valid_pair_rate", len(pairs) / len(rows))
        return pairs

    def _assistant_pairs(self, batch: RolloutBatch, verdicts, chosen: list[tuple[int, int]]) -> list[Pair]:
        """negative="assistant" (the authors'): the assistant writes a wrong solution from each positive."""
        questions = batch.columns["question"]
        requests = [
            NegativeRequest(str(questions[row]), batch.completions[row], verdicts[row].extracted,
                            request_seed(self.params.seed, batch.step, group))
            for group, row in chosen
        ]
        start = time.perf_counter()
        negatives = on_main_then_broadcast(
            lambda: write_negatives(self.get_assistant(), batch.verifier, requests, self.params.max_retries,
                                    accept_answerless=self.params.answerless_negative == "accept")
            if requests else Negatives([])
        )
        batch.log("time/assistant", time.perf_counter() - start)
        pairs = [
            Pair(request.question, batch.references[row], request.positive, negative)
            for (_, row), request, negative in zip(chosen, requests, negatives.texts)
            if negative is not None
        ]
        batch.log("assistant/failures", float(negatives.failures))
        batch.log("assistant/rejected", float(negatives.rejected))
        if negatives.latencies:
            batch.log("assistant/latency", sum(negatives.latencies) / len(negatives.latencies))
        if requests and negatives.failures == len(requests):
            logger.warning("cooper: every assistant request of step %d failed; its pairs are dropped", batch.step)
        return pairs

    def _rollout_pairs(self, batch: RolloutBatch, scores: list[float], correct: list[bool],
                       chosen: list[tuple[int, int]]) -> list[Pair]:
        """negative="rollout": each positive's negative is its group's rejected rollout with the highest score."""
        G, pairs = batch.num_generations, []
        for group, row in chosen:
            rejected = [i for i in range(group * G, group * G + G) if not correct[i] and math.isfinite(scores[i])]
            if rejected:
                worst = max(rejected, key=lambda i: scores[i])  # the wrong answer the RM is most fooled by
                pairs.append(Pair(str(batch.columns["question"][row]), batch.references[row],
                                  batch.completions[row], batch.completions[worst]))
        return pairs

    # -- checkpoints ----------------------------------------------------------------------------------

    def save_state(self, directory: Path) -> None:
        from coreward.runtime.distributed import world

        if self.learner is not None and (world()[0] == 0 or self.learner.sharding is not None):
            self.learner.save(Path(directory))  # replicated: one process writes; sharded: all gather, one writes

    def engine_models(self, policy: Policy) -> dict[str, Any]:
        """The RM for the engine line printed at start (built now, sharded like the policy)."""
        return {"rm": self.get_learner(policy).rm.model}

    def export_models(self, directory: Path) -> dict[str, Path]:
        """The RM `save_state` wrote in HF format: `VerifyRM.from_pretrained` (or transformers'
        AutoModelForSequenceClassification) loads it."""
        from coreward.rm.learner import RM_DIR

        folder = Path(directory) / RM_DIR
        return {"rm": folder} if (folder / "config.json").is_file() else {}

    def load_state(self, directory: Path) -> None:
        """Remember the checkpoint: the RM is loaded from it on first use, on the policy's device."""
        if (Path(directory) / STATE_FILE).is_file():
            self._resume_from = Path(directory)
            self.learner = None

    def close(self) -> None:
        if self._assistant is not None:
            self._assistant.close()
            self._assistant = None
