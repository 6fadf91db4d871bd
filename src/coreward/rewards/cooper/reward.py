"""Cooper: the policy and the reward model learn together (ZJU-REAL/Cooper, recipe/cooper).

Each training step, on the global batch of G rollouts o_1..o_G per prompt q (reference answer a):

    1. reward      r_i = σ(f_θ(q, a, o_i))                     θ = the RM *before* this step's update
    2. positive    o⁺ = first o_i the rule accepts              ("hardest": the accepted o_i of lowest r_i)
                   (math-verify; `positive_match: gsm8k_strict`: verl's `#### <number>` string match, the
                   authors' GSM8K rule; `judge`: an LLM judge's, `hybrid`: the rule's, else the judge's, as the
                   `judge` reward decides, rewards/judge.py); no accepted o_i → no pair for q
    3. negative    o⁻ = assistant(q, o⁺): a plausible solution whose answer does not verify equal to o⁺'s;
                   asked again (at most `max_retries` times) while it does, or has no answer (the authors
                   keep an answerless one unless its last number is o⁺'s answer: `answerless_negative: accept`);
                   else no pair
    4. RM update   L(θ) = mean over valid pairs of −log σ(f_θ(q, a, o⁺) − f_θ(q, a, o⁻))
                   one AdamW step (lr 1e-5, wd 0.01), gradient norm clipped to 1.0; a step whose norm is
                   not finite is skipped (and counted). The next step's rewards come from the new θ.
                   No valid pair: θ stays (the authors still step, on a zero gradient: `step_without_pairs`).

Variants (ours: rollout and mixed negatives, replay, an anchor, a co-optimized ensemble) are settings whose
defaults are the above: rewards/cooper/variants.py.

Why it resists reward hacking: the RM's negatives are made fresh from what the policy writes *now*,
rewritten to be wrong, so a kind of wrong completion the policy drifts toward soon shows up as a negative;
a static RM (`model`) never sees it. Positives are rule-verified, so they are precise.

Several processes: every process holds the whole batch (rewards/base.py) and scores its share; the assistant
runs on the main process and its negatives are broadcast, so all have the same pairs; the RM update
(rewards/cooper/learner.py) is data-parallel with one result, or sharded like the policy (rm/sharding.py, `device: auto`).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Literal

from coreward.rewards.base import RewardSource, RolloutBatch, register
from coreward.rewards.cooper.assistant import NegativeRequest, Negatives, request_seed, write_negatives
from coreward.rewards.cooper.health import CooperHealth  # health_watches: whether the RM learns
from coreward.rewards.cooper.learner import LearnerSettings, Pair
from coreward.rewards.cooper.memory import CooperMemory  # memory_needs: what the RM learner holds, for the memory plan
from coreward.rewards.cooper.owner import RMOwner
from coreward.rewards.cooper.variants import CooperVariants, VariantSettings, hardest_positive, rollout_negatives
from coreward.rewards.judge import JudgeReward
from coreward.rewards.rollout_diagnostics import log_rollout_diagnostics
from coreward.rewards.rule import gsm8k_strict_answer, rule_correct
from coreward.rm.inputs import RMInputSettings, as_chat_reply
from coreward.runtime.distributed import on_main_then_broadcast
from coreward.runtime.errors import CorewardError


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
        else:  # "hardest" (a variant): the accepted rollout the RM likes least
            positives.append(hardest_positive(accepted, scores))
    return positives


# --------------------------------------------------------------------------- the reward source
# 3. negatives: `write_negatives` (rewards/cooper/assistant.py), all of a step's at once; 4. `RMLearner.update` (rewards/cooper/learner.py)


@register("cooper")
class CooperReward(CooperMemory, CooperHealth, CooperVariants, RMOwner, RewardSource):
    """σ(RM logit) as the reward, and the RM updated every step on (verified positive, negative) pairs.
    The RM, the assistant and their checkpoints are `RMOwner`'s (rewards/cooper/owner.py)."""

    needs_references = True
    step_cost = 1.6

    @dataclass
    class Params(RMInputSettings, LearnerSettings, VariantSettings):
        # -- declared once elsewhere: the RM's optimizer and update schedule per RL step (lr, weight_decay, batch_size,
        # minibatch_size, epochs, warmup_ratio, optimizer_offload, gradient_checkpointing, step_without_pairs,
        # master_weights, anchor) in rewards/cooper/learner.py's LearnerSettings; replay_size, replay_per_step, members,
        # member_split, member_rms in rewards/cooper/variants.py's VariantSettings; device, rm_cut, question_field,
        # max_tokens_per_pass and param_offload (shared with the static RM) in rm/inputs.py's RMInputSettings
        rm: str = "demo"  # the RM to start from: a directory, a hub id, or "demo" (the demo VerifyRM)
        assistant: Any = "perturb"  # who writes negatives: "perturb", an endpoint `http://host:port/v1#model`, a local model path, or a `coreward.llm` generator dict
        positive: Literal["first", "hardest"] = "first"  # "first" accepted rollout (the authors'), or the accepted one the RM likes least
        negative: Literal["assistant", "rollout", "mixed"] = "assistant"  # the assistant's wrong solution (the authors'), the group's rejected rollout the RM scores highest, or both (ours)
        max_retries: int = 3  # times the assistant is asked again when its negative still verifies equal to the positive
        eval_every: int = 0  # held-out RM accuracy every K steps (0: never)
        eval_data: str | None = None  # held-out pairs: "demo" or a labelled file (question, reference_answer, completion, label)
        seed: int = 0  # seeds the assistant's requests
        rm_dtype: Literal["float32", "bfloat16"] = "float32"  # the RM's weights (the authors: bfloat16)
        # -- fidelity options (docs/reference/paper-settings.md): the authors' behaviour where coreward's default differs
        assistant_prompt: Literal["coreward", "authors"] = "coreward"  # an LLM assistant's wording: ours (adds "same answer format"), or the authors' verbatim
        answerless_negative: Literal["reject", "accept"] = "reject"  # a negative with no extractable answer: asked again (ours), or kept (the authors')
        binary: bool = False  # reward 1[σ > 0.5] instead of σ (the authors' reward_model.reward_scale)
        positive_match: Literal["verified", "gsm8k_strict", "judge", "hybrid"] = "verified"  # what makes a rollout a positive: math-verify, verl's strict `#### <number>` (the authors' GSM8K rule), an LLM judge (`positive_judge`), or the rule where it accepts, else the judge
        positive_judge: Any = None  # with positive_match judge or hybrid: the judge LLM, as the `judge` reward's `judge` (an endpoint `http://host:port/v1#model`, a model path, a generator dict)
        positive_judge_format: Literal["plain", "xverify", "compassverifier", "compassverifier_cot", "general_verifier"] = "plain"  # its prompt and verdict format (the `judge` reward's `format`)
        positive_judge_template: str | None = None  # its prompt's file (the `judge` reward's `template`: needed for xverify and general_verifier)
        negative_form: Literal["text", "chat"] = "text"  # a negative as written (ours), or through the policy's chat template, cut to the response length (the authors': rm/inputs.py)
        retry_failed: bool = False  # a failed assistant request uses up an attempt and is asked again (the authors'), instead of being dropped (ours: the endpoint has retried it)

        def validate(self) -> None:
            RMOwner.check_params(self)
            self.validate_variants()
            if self.positive_match in ("judge", "hybrid") and not self.positive_judge:
                raise ValueError(f"positive_judge must name the judge LLM with positive_match {self.positive_match!r}")

    def __init__(self, **params):
        super().__init__(**params)
        p = self.params
        # positives by an LLM judge: the `judge` reward itself, its 1s the accepted rollouts (its metrics logged too)
        self._judge = None if p.positive_match not in ("judge", "hybrid") else JudgeReward(
            judge=p.positive_judge, format=p.positive_judge_format, template=p.positive_judge_template,
            mode="judge" if p.positive_match == "judge" else "hybrid", question_field=p.question_field)

    def preflight(self) -> None:
        super().preflight()  # the assistant's endpoint (rewards/cooper/owner.py)
        if self._judge is not None:
            where = f"reward {self.name!r}: key {self.config_key}.params"
            self._judge.preflight(f"{where}.positive_judge", f"{where}.positive_judge_template")

    def close(self) -> None:
        super().close()
        if self._judge is not None:
            self._judge.close()

    def positive_correct(self, batch: RolloutBatch) -> list[bool]:
        """Which rollouts may be a positive: the rule's verdicts (`positive_match`), or the judge's."""
        if self._judge is None:
            return rule_correct(batch, self.params.positive_match)
        return [r == self._judge.params.correct for r in self._judge.compute(batch)]

    def questions(self, batch: RolloutBatch) -> list[str]:
        """The question field of every row: the dataset's question, or the whole user message of its prompt."""
        return self.params.questions(batch, self.name)

    # -- one step -------------------------------------------------------------------------------------

    def compute(self, batch: RolloutBatch) -> list[float]:
        questions, (references,) = self.questions(batch), batch.require_columns(self.name, "reference")
        learner = self.get_learner(batch.policy)
        # 1. the RM before this step's update (with `members`: the members' min)
        scores = self.score_members(list(zip(questions, (r or "" for r in references), batch.completions)), batch)
        # a NaN/inf logit scores NaN (see VerifyRM.score): the engine skips that completion and counts it
        batch.log("rm/nonfinite_logits", float(sum(not math.isfinite(s) for s in scores)))
        if batch.mode != "train":
            return self._reward(scores)  # evaluation batches score, they don't teach the RM
        self.evaluate_held_out(batch, learner)  # every `eval_every` steps: the RM that scored this step (rewards/cooper/owner.py)
        correct = self.positive_correct(batch)
        log_rollout_diagnostics(batch, correct, scores)  # the RM that scored this step, on this step's rollouts
        pairs = self.make_pairs(batch, scores, questions, correct)  # 2 and 3
        start = time.perf_counter()
        self.learn(pairs, batch)  # 4: `learner.update(pairs)` at the step's learning rate (variants: cooper/variants.py)
        batch.log("time/rm_update", time.perf_counter() - start)
        return self._reward(scores)

    def _reward(self, scores: list[float]) -> list[float]:
        """σ, or with `binary` 1[σ > 0.5] (the authors' dp_reward.py `reward_scale`); NaN stays NaN (skipped)."""
        if not self.params.binary:
            return scores
        return [s if math.isnan(s) else float(s > 0.5) for s in scores]

    def make_pairs(self, batch: RolloutBatch, scores: list[float], questions: list[str] | None = None,
                   correct: list[bool] | None = None) -> list[Pair]:
        """Steps 2 and 3: a verified positive per prompt and its negative (the assistant's, or a rejected rollout)."""
        questions = questions if questions is not None else self.questions(batch)
        correct = correct if correct is not None else self.positive_correct(batch)
        rows = select_positives(correct, scores, batch.num_generations, self.params.positive)
        chosen = [(group, row) for group, row in enumerate(rows) if row is not None]
        pairs = self._assistant_pairs(batch, questions, chosen) if self.params.negative != "rollout" else []
        assistant_pairs = len(pairs)
        if self.params.negative in ("rollout", "mixed"):  # variants: the rejected rollout the RM scores highest
            worst = rollout_negatives(correct, scores, batch.num_generations, [group for group, _ in chosen])
            pairs += [Pair(questions[row], batch.references[row], batch.completions[row], batch.completions[worst[group]])
                      for group, row in chosen if group in worst]
        batch.log("rm/positive_rate", len(chosen) / len(rows))
        batch.log("rm/valid_pair_rate", len(pairs) / len(rows))
        batch.log("rm/pairs_assistant", float(assistant_pairs))  # counts by kind of negative (replay: rm/replay_pairs)
        batch.log("rm/pairs_rollout", float(len(pairs) - assistant_pairs))
        return pairs

    def _assistant_pairs(self, batch: RolloutBatch, questions: list[str], chosen: list[tuple[int, int]]) -> list[Pair]:
        """negative="assistant" (the authors'): the assistant writes a wrong solution from each positive."""
        p = self.params
        answers = ([gsm8k_strict_answer(c) for c in batch.completions] if p.positive_match == "gsm8k_strict"
                   else [v.extracted for v in batch.verdicts()])
        if self._judge is not None:  # a positive the judge accepted and the rule did not: its answer is the reference
            answers = [v.extracted if v.correct else ref for v, ref in zip(batch.verdicts(), batch.references)]
        requests = [NegativeRequest(questions[row], batch.completions[row], answers[row], request_seed(p.seed, batch.step, group))
                    for group, row in chosen]
        start = time.perf_counter()
        negatives = on_main_then_broadcast(
            lambda: write_negatives(self.get_assistant(), batch.verifier, requests, p.max_retries,
                                    accept_answerless=p.answerless_negative == "accept", retry_failed=p.retry_failed)
            if requests else Negatives([])
        )
        batch.log("time/assistant", time.perf_counter() - start)
        if p.negative_form == "chat" and batch.policy is None:
            raise CorewardError("cooper: negative_form 'chat' needs the policy's tokenizer (a batch from the trainer)")
        pairs = [
            Pair(request.question, batch.references[row], request.positive,
                 negative if p.negative_form == "text" else
                 as_chat_reply(batch.policy.tokenizer, batch.prompts[row], negative, batch.policy.max_completion_length))
            for (_, row), request, negative in zip(chosen, requests, negatives.texts)
            if negative is not None
        ]
        negatives.report(batch.log, batch.step)  # failures, rejections, latency; a warning when none came back
        return pairs
