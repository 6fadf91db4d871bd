"""Evaluation throughput of the demo policy on CPU (HF backend), and the time of its full held-out eval.

    python -m benchmarks.speed.eval_throughput [--model demo] [--batch-sizes 128,256,512,1024] [--probe 64]

1. Throughput: completions/s and tokens/s of sampling (temperature 0.7, top-p 0.95, n=8) on the first
   `--probe` demo test problems, for each batch size (sequences per `generate` call), one CPU thread.
2. The held-out eval as the demo reports it: `evaluate(model, benchmarks=["demo"], n=8)` on the demo test
   split with its defaults (`DEMO_HELDOUT_PROBLEMS` problems), wall time split into generation and scoring.
   The issue's goal: under 2 minutes on the 2-core machine.

The load average is printed too: the machine's cores are shared, and timings move with it.
"""

from __future__ import annotations

import argparse
import os
import time

from coreward.data.benchmarks import load_benchmark
from coreward.evaluation import evaluate
from coreward.evaluation.backends import HFBackend, load_model
from coreward.evaluation.evaluate import DEMO_HELDOUT_PROBLEMS, resolve_model_path
from coreward.runtime.devices import load_tokenizer
from coreward.verify import Verifier


N = 8
TEMPERATURE, TOP_P = 0.7, 0.95


def throughput(model, tokenizer, prompts: list[str], batch_size: int) -> tuple[float, float, float]:
    """(seconds, completions/s, tokens/s) for n=8 samples of each prompt."""
    backend = HFBackend(model, tokenizer, batch_size=batch_size, num_threads=1)
    start = time.perf_counter()
    generations = backend.generate(prompts, N, TEMPERATURE, TOP_P, 64, seed=0)
    elapsed = time.perf_counter() - start
    tokens = sum(g.num_tokens for group in generations for g in group)
    return elapsed, len(prompts) * N / elapsed, tokens / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="demo", help="model directory or 'demo' (the shipped demo policy)")
    parser.add_argument("--batch-sizes", default="128,256,512,1024")
    parser.add_argument("--probe", type=int, default=64, help="problems for the throughput sweep")
    args = parser.parse_args()

    path = resolve_model_path(args.model)
    model, tokenizer = load_model(path, device="cpu"), load_tokenizer(path)
    prompts = [r.question for r in load_benchmark("demo", "test", limit=args.probe)]
    print(
        f"model {path}: {model.num_parameters():,} parameters; load average {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} CPUs"
    )
    print(f"\nsampling throughput, {len(prompts)} problems x n={N}, 1 thread:")
    print(f"{'batch':>6} {'seconds':>8} {'completions/s':>14} {'tokens/s':>9}")
    for batch_size in (int(b) for b in args.batch_sizes.split(",")):
        seconds, per_s, tokens_per_s = throughput(model, tokenizer, prompts, batch_size)
        print(f"{batch_size:>6} {seconds:>8.2f} {per_s:>14.1f} {tokens_per_s:>9.0f}")

    print(f"\nheld-out eval: demo test, {DEMO_HELDOUT_PROBLEMS} problems x n={N} (evaluate() defaults)")
    with Verifier() as verifier:
        start = time.perf_counter()
        results = evaluate(model, tokenizer=tokenizer, benchmarks=["demo"], n=N, limit=DEMO_HELDOUT_PROBLEMS,
                           verifier=verifier)
        total = time.perf_counter() - start
    timing, demo = results.timing, results["demo"]
    print(
        f"total {total:.1f} s (generation {timing['generation_time_s']:.1f} s, scoring "
        f"{timing['scoring_time_s']:.1f} s); {timing['completions_per_s']:.1f} completions/s; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print(
        f"avg@{N} {100 * demo.avg:.2f}  pass@{N} {100 * demo.pass_at[N]:.2f}  maj@{N} {100 * demo.maj:.2f}  "
        f"mean length {demo.mean_completion_tokens:.1f} tokens, truncated {100 * demo.truncated_fraction:.1f}%"
    )
    print(f"goal (< 120 s): {'met' if total < 120 else 'NOT met'}")


if __name__ == "__main__":
    main()
