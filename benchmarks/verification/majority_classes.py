"""Equivalence classes for majority votes (maj@n in evaluation; majority / Co-rewarding pseudo labels).

    python -m benchmarks.verification.majority_classes [--groups 64] [--n 8]

A vote needs every group's answers sorted into classes of math-verify-equivalent answers. Answers that are
equal strings or plain numbers are settled without math-verify; what costs is a group of distinct
*symbolic* answers, as a weak policy writes (each pair goes to math-verify in a worker process). Two groups
sets are timed, each both ways in this one run:

* per group:    `verifier.equivalence_classes(answers)` once per group (what a loop over problems does);
* all at once:  `verifier.equivalence_classes_many(groups)`: every group's pairs in one batch for the pool.

It also checks that both give the same classes. The printed ratio is per group / all at once.
"""

from __future__ import annotations

import argparse
import random
import time


def symbolic_groups(groups: int, n: int, rng: random.Random) -> list[list[str | None]]:
    """Mostly distinct LaTeX answers with a few equivalent spellings and some empty answers."""
    out = []
    for g in range(groups):
        answers = []
        for i in range(n):
            pick = rng.random()
            if pick < 0.15:
                answers.append(None)
            elif pick < 0.35:
                answers.append(rng.choice([f"\\frac{{{g + 1}}}{{2}}", f"{(g + 1) / 2}", f"\\frac{{{2 * g + 2}}}{{4}}"]))
            else:
                answers.append(rng.choice([f"x^{{{i}}}+{g}", f"\\sqrt{{{g + i + 2}}}", f"{i}\\pi+{g}",
                                           f"\\frac{{{i + 1}}}{{y+{g}}}"]))
        out.append(answers)
    return out


def numeric_groups(groups: int, n: int, rng: random.Random) -> list[list[str | None]]:
    return [[str(rng.randint(0, 20)) for _ in range(n)] for _ in range(groups)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=64)
    parser.add_argument("--n", type=int, default=8, help="answers per group")
    args = parser.parse_args()

    from coreward.verify import Verifier

    verifier = Verifier()
    verifier.equivalence_classes(["1", "x+1"])  # start the worker pool outside the timings
    rng = random.Random(0)
    print(f"{args.groups} groups of {args.n} answers, {verifier.num_workers} verifier workers\n")
    print("| answers | per group (s) | all at once (s) | ratio | same classes |")
    print("|---|---:|---:|---:|---|")
    for name, make in [("symbolic, mostly distinct", symbolic_groups), ("small integers", numeric_groups)]:
        groups = make(args.groups, args.n, rng)
        start = time.perf_counter()
        one_by_one = [verifier.equivalence_classes(g) for g in groups]
        per_group = time.perf_counter() - start
        start = time.perf_counter()
        together = verifier.equivalence_classes_many(groups)
        at_once = time.perf_counter() - start
        print(f"| {name} | {per_group:.2f} | {at_once:.2f} | {per_group / at_once:.1f}x | {one_by_one == together} |")
    verifier.close()


if __name__ == "__main__":
    main()
