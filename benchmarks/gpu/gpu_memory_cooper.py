"""Cooper whose RM update really runs on a random policy: the reward source of benchmarks/gpu_memory_check.py's
`cooper` part, named in its config as `benchmarks.gpu.gpu_memory_cooper:CooperWithReferencePositives`.

A random policy writes no verified answer, so Cooper would find no positive, make no pair and never update its RM:
the phase the plan names as Cooper's peak (RM update) would never be reached. Here every group gets one positive
built from a reference completion: the group's first rollout, repeated until it fills the RM's 1,024 tokens (the
length the plan counts each RM sequence at), ending in `#### <reference answer>`, which the rule accepts; its
negative is the same text ending in a wrong answer. Everything else (the RM's scoring, its optimizer, its memory
settings, the update's schedule) is Cooper's own.
"""

from __future__ import annotations

from coreward.rewards.cooper import CooperReward
from coreward.rewards.cooper.learner import Pair


RM_TOKENS = 1024  # VerifyRM's max_length: the plan counts every RM sequence at it


def filled(text: str, tokenizer, tokens: int = RM_TOKENS) -> str:
    """`text` repeated until it holds at least `tokens` tokens of `tokenizer` (the RM cuts the rest)."""
    text = text.strip() or "0"
    each = max(1, len(tokenizer(text, add_special_tokens=False).input_ids))
    return " ".join([text] * (tokens // each + 1))


def wrong_answer(reference: str) -> str:
    try:
        return str(int(float(reference)) + 1)
    except ValueError:
        return reference + "1"


class CooperWithReferencePositives(CooperReward):
    """Cooper with one reference-made positive per group (see the module's docstring)."""

    def make_pairs(self, batch, scores, questions=None, correct=None) -> list[Pair]:
        questions = questions if questions is not None else self.questions(batch)
        pairs = []
        for first in range(0, len(batch.completions), batch.num_generations):
            reference = str(batch.references[first] or "0")
            body = filled(batch.completions[first], batch.policy.tokenizer)
            pairs.append(Pair(questions[first], reference, f"{body}\n#### {reference}",
                              f"{body}\n#### {wrong_answer(reference)}"))
        batch.log("rm/positive_rate", 1.0)
        batch.log("rm/valid_pair_rate", 1.0)
        return pairs


if __name__ == "__main__":  # a module for `coreward train` to import, not a command: --help says so
    import argparse

    argparse.ArgumentParser(description=__doc__.split("\n\n")[0] + " (imported by a run, not run itself)").parse_args()
