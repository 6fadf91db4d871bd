"""What the RM's precision does to Cooper's RM update, on the demo: the same pairs, the same schedule, three RMs.

    python benchmarks/studies/rm_precision.py [--steps 10] [--lr 1e-5]

The demo VerifyRM learns `--steps` RL steps of 16 (verified positive, wrong negative) pairs of demo train problems
(the positive the demo's worked solution, the negative the same solution with its final answer off by one), in
mini-batches of 4 pairs (the authors' ppo_mini_batch_size), at `--lr` (1e-5: the authors'; the demo's Cooper uses
1e-4), once each with:

    float32                        float32 weights (coreward's default rm_dtype)
    bfloat16                       bf16 weights, AdamW on float32 masters (coreward's default for rm_dtype: bfloat16)
    bfloat16, master_weights none  bf16 weights stepped in place (the authors' RM worker)

and prints the update's norm ‖θ_after − θ_before‖ of the weights AdamW updates (the masters, where there are), its
ratio to float32's, the share of weights that changed, and the held-out pair accuracy on 200 demo test pairs before
and after. A markdown table, with the date, machine, commit and command.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]  # benchmarks/studies/ -> the repository
sys.path.insert(0, str(REPO / "benchmarks"))


def pairs_of(records, offset: int = 1):
    from coreward.data.synthetic import demo_solution
    from coreward.rewards.cooper.learner import Pair

    made = []
    for record in records:
        positive = demo_solution(record)
        head, _, answer = positive.rpartition(" ")  # "... #### 58" -> "... #### 59"
        made.append(Pair(record.question, record.answer, positive, f"{head} {int(answer) + offset}"))
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--lr", type=float, default=1e-5)
    args = parser.parse_args(argv)

    import torch
    from readme_figures import machine

    from coreward.data.synthetic import load_demo
    from coreward.demo.rm import ensure_demo_rm
    from coreward.rewards.cooper.learner import RMLearner
    from coreward.rm.evaluate import evaluate_rm
    from coreward.rm.model import VerifyRM
    from coreward.runtime.precision import rounded_away_fraction, update_norm

    torch.manual_seed(0)
    path = ensure_demo_rm()
    train = pairs_of(load_demo("train", 16 * args.steps))
    held_out = load_demo("test", 100)
    rows = [{"question": p.question, "reference_answer": p.reference, "completion": c, "label": label}
            for p in pairs_of(held_out) for c, label in ((p.positive, 1), (p.negative, 0))]

    results = {}
    for name, dtype, settings in (("float32", "float32", {}), ("bfloat16", "bfloat16", {}),
                                  ("bfloat16, master_weights none", "bfloat16", {"master_weights": "none"})):
        rm = VerifyRM.from_pretrained(path, device="cpu", dtype=dtype)
        learner = RMLearner(rm, lr=args.lr, batch_size=8, minibatch_size=4, **settings)
        updated = lambda learner=learner: [t.detach().float().clone() for t in learner.optimized]  # noqa: E731
        before = updated()
        accuracy_before = evaluate_rm(rm, rows)["rm/pair_accuracy"]
        start = time.perf_counter()
        for step in range(args.steps):
            learner.update(train[16 * step: 16 * (step + 1)])
        after = updated()
        changed = sum(int((a != b).sum()) for a, b in zip(after, before)) / sum(b.numel() for b in before)
        results[name] = {"norm": update_norm(dict(enumerate(before)), dict(enumerate(after))), "changed": changed,
                         "accuracy": (accuracy_before, evaluate_rm(rm, rows)["rm/pair_accuracy"]),
                         "seconds": time.perf_counter() - start,
                         "rounded_away": rounded_away_fraction(learner.parameters, args.lr, torch.bfloat16)}
    reference = results["float32"]["norm"]
    print(f"{machine()}\ncommand: `{shlex.join(['python', 'benchmarks/studies/rm_precision.py', *(sys.argv[1:] if argv is None else argv)])}`\n")
    print(f"demo VerifyRM, {args.steps} RL steps x 16 pairs, mini-batches of 4, lr {args.lr:g}; a bf16 step rounds "
          f"away for {results['float32']['rounded_away']:.0%} of the weights at this lr\n")
    print("| RM weights | update norm | vs float32 | weights changed | held-out pair accuracy before → after |")
    print("|---|---:|---:|---:|---:|")
    for name, r in results.items():
        print(f"| {name} | {r['norm']:.3e} | {r['norm'] / reference:.2f} | {r['changed']:.1%} | "
              f"{r['accuracy'][0]:.3f} → {r['accuracy'][1]:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
