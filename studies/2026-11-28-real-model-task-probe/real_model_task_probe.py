"""Where does a small real model have a learning signal? SmolLM2-135M-Instruct's accuracy on candidate tasks.

    python benchmarks/studies/real_model_task_probe.py --task easy [--problems 16] [--n 8] [--max-new-tokens 96]

For each task, `--problems` random problems (seed 0) asked as coreward asks a chat model (its ChatML template, the
papers' `\\boxed{}` instruction), `--n` samples each at temperature 0.7, top-p 0.95, in one `generate` call;
verified by the rule (strict: a boxed, `####` or "the answer is" answer; loose: also the last number). Prints the
sample accuracy, pass@n, the share with an extracted answer, the mean length and the share cut at the cap. Tasks:
add (two-digit sums), word (one-step word problems, numbers 3-30), easy (a op b, numbers 2-20, + - *: the `arith`
task), easyword (one-step word problems, numbers 2-12). The answer chose `arith` (coreward/data/arith.py).
"""

from __future__ import annotations

import argparse
import random
import time


NAMES = ["Sam", "Ann", "Tom", "Lily", "Ben", "Mia"]
ITEMS = ["apples", "books", "pencils", "stickers", "marbles", "cookies"]


def problem(kind: str, rng: random.Random) -> tuple[str, int]:
    if kind == "add":
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        return f"What is {a} + {b}?", a + b
    if kind == "easy":
        a, b, op = rng.randint(2, 20), rng.randint(2, 20), rng.choice("+-*")
        if op == "-":
            a, b = max(a, b), min(a, b)
        return f"What is {a} {op} {b}?", {"+": a + b, "-": a - b, "*": a * b}[op]
    high = 12 if kind == "easyword" else 30
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, b = rng.randint(2 if high == 12 else 3, high), rng.randint(2 if high == 12 else 3, high)
    if rng.random() < 0.5:
        return f"{name} has {a} {item} and buys {b} more. How many {item} does {name} have now?", a + b
    return f"{name} has {a + b} {item} and gives away {b}. How many {item} does {name} have left?", a


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=["add", "word", "easy", "easyword"], default="easy")
    parser.add_argument("--problems", type=int, default=16)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from coreward.data.prompts import INSTRUCTION
    from coreward.runtime.assets import resolve_model
    from coreward.verify.verifier import Verifier

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    path = resolve_model(args.model)
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    rng = random.Random(0)
    problems = [problem(args.task, rng) for _ in range(args.problems)]
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": f"{q} {INSTRUCTION}"}], tokenize=False,
                                             add_generation_prompt=True) for q, _ in problems]
    encoded = tokenizer(prompts, return_tensors="pt", padding=True)
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(**encoded, do_sample=True, temperature=0.7, top_p=0.95, max_new_tokens=args.max_new_tokens,
                             num_return_sequences=args.n, pad_token_id=tokenizer.pad_token_id)
    seconds = time.perf_counter() - start
    generated = out[:, encoded.input_ids.shape[1]:]
    texts = tokenizer.batch_decode(generated, skip_special_tokens=True)
    lengths = [int((row != tokenizer.pad_token_id).sum()) for row in generated]
    golds = [str(answer) for _, answer in problems for _ in range(args.n)]
    verifier = Verifier()
    strict = verifier.verify_completions(texts, golds, False)
    loose = verifier.verify_completions(texts, golds, True)
    per_problem = [sum(r.correct for r in strict[i * args.n:(i + 1) * args.n]) for i in range(args.problems)]
    total = len(texts)
    print(f"{args.task}: strict {sum(r.correct for r in strict) / total:.3f}, loose "
          f"{sum(r.correct for r in loose) / total:.3f}, pass@{args.n} "
          f"{sum(c > 0 for c in per_problem) / args.problems:.2f}, answered "
          f"{sum(r.extracted is not None for r in strict) / total:.2f}, mean length {sum(lengths) / total:.0f}, cut "
          f"{sum(n >= args.max_new_tokens for n in lengths) / total:.2f}, {sum(lengths) / seconds:.0f} tokens/s")
    for text in texts[:2]:
        print(repr(text[:300]))


if __name__ == "__main__":
    main()
