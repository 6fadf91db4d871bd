"""What coreward's own choices change against the authors' (docs/fidelity.md), on the demo policy's samples.

    python benchmarks/studies/fidelity_options.py [--problems 200] [--n 8]

Samples n completions per held-out demo problem from the shipped demo policy (temperature 1.0, as in
training), then, per group of n:

1. Pseudo labels (majority voting, Co-rewarding): the majority answer under each reading
   (extract default | boxed_raw) × (match verified | exact): how often the group has a label at all, and how
   often that label is the true answer; and the share of rollouts rewarded.
2. Cooper's answerless negatives: among completions the verifier finds no answer in (the demo's `ans r`
   format), the share that is in fact right (their last number is the gold); how many of those the authors'
   whole-text check (`not verify(parse(text), parse(positive))`: math-verify reads the last number) refuses,
   as `answerless_negative: accept` now does; and how many right ones it would still keep, handing them to the
   RM as *wrong* solutions.
"""

from __future__ import annotations

import argparse
import re

import torch

from coreward.data.benchmarks import load_benchmark
from coreward.evaluation.backends import HFBackend, load_model
from coreward.evaluation.evaluate import resolve_model_path
from coreward.rewards.voting import extract, majority_votes
from coreward.runtime.devices import load_tokenizer
from coreward.verify import Verifier


_LAST_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", type=int, default=200)
    parser.add_argument("--n", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(1)

    path = resolve_model_path("demo")
    model, tokenizer = load_model(path, device="cpu"), load_tokenizer(path)
    records = load_benchmark("demo", "test", limit=args.problems)
    generations = HFBackend(model, tokenizer, batch_size=512, num_threads=1).generate(
        [r.question for r in records], args.n, 1.0, 1.0, 64, seed=0)
    groups = [[g.text for g in group] for group in generations]
    golds = [r.answer for r in records]
    print(f"demo policy, {len(records)} held-out problems x {args.n} samples at temperature 1.0\n")

    with Verifier() as verifier:
        print("| extract | match | groups with a label | label = true answer | rollouts rewarded |")
        print("|---|---|---:|---:|---:|")
        for how in ("default", "boxed_raw"):
            answers = [[extract(c, how) for c in group] for group in groups]
            for match in ("verified", "exact"):
                votes = majority_votes(answers, match, verifier)
                labels = [v[0] for v in votes]
                labelled = [(l, g) for l, g in zip(labels, golds) if l is not None]
                right = verifier.equivalent([g for _, g in labelled], [l for l, _ in labelled]) if labelled else []
                rewarded = sum(c == v[2] and c is not None for v in votes for c in v[1])
                print(f"| {how} | {match} | {len(labelled) / len(groups):.3f} | {sum(right) / len(groups):.3f} "
                      f"| {rewarded / (len(groups) * args.n):.3f} |")

        flat = [(c, gold) for group, gold in zip(groups, golds) for c in group]
        verdicts = verifier.verify_completions([c for c, _ in flat], [g for _, g in flat])
        answerless = [(c, gold) for (c, gold), v in zip(flat, verdicts) if v.extracted is None]
        right = sum(bool(_LAST_NUMBER.findall(c)) and _LAST_NUMBER.findall(c)[-1] == str(gold) for c, gold in answerless)
        print(f"\nanswerless completions: {len(answerless)} of {len(flat)} ({len(answerless) / len(flat):.3f}); "
              f"of those, right by their last number: {right} ({right / max(1, len(answerless)):.3f})")
        whole = verifier.whole_text_equal([c for c, _ in answerless], [str(gold) for _, gold in answerless])
        kept = [(c, gold) for (c, gold), (equal, _) in zip(answerless, whole) if not equal]
        kept_right = sum(bool(_LAST_NUMBER.findall(c)) and _LAST_NUMBER.findall(c)[-1] == str(gold) for c, gold in kept)
        print(f"the authors' whole-text check refuses {len(answerless) - len(kept)} of them "
              f"({sum(late for _, late in whole)} timed out) and keeps {len(kept)}, of which right by their last "
              f"number: {kept_right}")


if __name__ == "__main__":
    main()
