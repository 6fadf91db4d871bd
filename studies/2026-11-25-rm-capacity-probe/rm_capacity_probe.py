"""Can the demo RM learn to reject a hacked policy's answers when it is shown them? (Cooper's capacity vs its pairs)

    python benchmarks/studies/rm_capacity_probe.py HACKED_SAMPLES POSITIVE_SAMPLES [--updates 60] [--pairs-per-update 16]

Under the demo's stress setting Cooper's RM is hacked like the frozen one. Two explanations compete: the RM
(0.8M parameters) cannot represent "these degenerate derivations are wrong", or it never gets the pairs that
would teach it (positives vanish as the policy degrades; the assistant's negatives are near misses, not the
policy's degenerate outputs). This probe separates them. From the held-out evaluation of a hacked policy
(`runs/demo/seed-S/eval/stress-cooper/samples.parquet`) it takes wrong answers as negatives, and from another
policy's evaluation (e.g. the baseline's) right answers to the same problems as positives. Problems are split in
half: the shipped demo RM is trained with Cooper's own learner and settings (RMLearner, lr 1e-4, one AdamW step
per update of `--pairs-per-update` pairs, as one RL step of the demo at most yields) on one half, and its pair
accuracy (positive ranked above the hacked negative) and the share of hacked answers it scores above 0.5 are
measured on the other half, every few updates.

If a few dozen updates of such pairs fix the held-out ranking, capacity is not what limits Cooper here: the
pairs are.
"""

from __future__ import annotations

import argparse
import random

import pandas as pd


def pairs_by_problem(hacked: pd.DataFrame, positives: pd.DataFrame, seed: int) -> dict[int, list[tuple]]:
    """problem index -> [(question, reference, positive, negative)], one pair per hacked wrong answer."""
    rng = random.Random(seed)
    right = positives[positives.correct == True].groupby("problem_index")  # noqa: E712 (pandas column)
    out: dict[int, list[tuple]] = {}
    for index, group in hacked[hacked.correct == False].groupby("problem_index"):  # noqa: E712
        if index not in right.groups:
            continue
        good = right.get_group(index).completion.tolist()
        out[index] = [(row.prompt, row.gold, rng.choice(good), row.completion) for row in group.itertuples()]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("hacked", help="samples.parquet of the hacked policy's evaluation")
    parser.add_argument("positives", help="samples.parquet of an evaluation with right answers (e.g. the baseline)")
    parser.add_argument("--updates", type=int, default=60)
    parser.add_argument("--pairs-per-update", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-4, help="Cooper's demo RM learning rate")
    parser.add_argument("--every", type=int, default=10, help="measure every N updates")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import torch

    from coreward.rewards.cooper.learner import Pair, RMLearner
    from coreward.rm.model import VerifyRM

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    by_problem = pairs_by_problem(pd.read_parquet(args.hacked), pd.read_parquet(args.positives), args.seed)
    problems = sorted(by_problem)
    random.Random(args.seed).shuffle(problems)
    half = len(problems) // 2
    train = [Pair(*p) for i in problems[:half] for p in by_problem[i]]
    test = [Pair(*p) for i in problems[half:] for p in by_problem[i]]
    print(f"{len(problems)} problems with a right answer and a hacked wrong one; pairs: {len(train)} train, "
          f"{len(test)} held out (other problems)")
    rm = VerifyRM.from_pretrained("demo", device="cpu")
    learner = RMLearner(rm, lr=args.lr)

    def measure(updates: int) -> None:
        pos = rm.score([p.question for p in test], [p.reference for p in test], [p.positive for p in test])
        neg = rm.score([p.question for p in test], [p.reference for p in test], [p.negative for p in test])
        ranked = sum(a > b for a, b in zip(pos, neg)) / len(test)
        accepted = sum(b > 0.5 for b in neg) / len(test)
        print(f"after {updates:3d} updates ({updates * args.pairs_per_update:5d} pairs seen): held-out pair accuracy "
              f"{ranked:.3f}, hacked answers scored > 0.5: {accepted:.3f}, right answers > 0.5: "
              f"{sum(a > 0.5 for a in pos) / len(test):.3f}", flush=True)

    measure(0)
    rng = random.Random(args.seed)
    for update in range(1, args.updates + 1):
        learner.update(rng.sample(train, min(args.pairs_per_update, len(train))))
        if update % args.every == 0:
            measure(update)


if __name__ == "__main__":
    main()
