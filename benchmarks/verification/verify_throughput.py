"""Throughput of `Verifier.verify_completions` on realistic completions, clean and with 5% pathological ones.

    python -m benchmarks.verification.verify_throughput [--workers N] [--timeout S] [--data DIR]

A batch is GRPO-shaped: 64 GSM8K + 64 MATH-500 problems x 8 completions = 1,024. Completions are the
datasets' own worked solutions (GSM8K ending in `#### x`, `\\boxed{x}` or "The answer is x."; MATH-500
ending in its `\\boxed{...}`), about half of them made wrong (GSM8K: another number; MATH-500: another
problem's answer) and half of the correct MATH ones rewritten in an equivalent form (`\\dfrac`,
spacing, `5.0`, a `\\left(...\\right)` wrapper), so fast paths, math-verify and its parser all get
exercised.
Each batch uses problems no other batch uses, so no cache carries answers over. Two warm-up batches
come first: math-verify's parser and sympy get faster as their caches fill (the first batch of a fresh
pool is reported too), and a training run verifies thousands of batches with the same workers.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import time
from pathlib import Path

from coreward.verify import Verifier


GROUPS_PER_SOURCE = 64
GROUP_SIZE = 8
PATHOLOGICAL_FRACTION = 0.05
CALC = re.compile(r"<<[^<>]*>>")


def data_dir(cli_value: str | None) -> Path:
    root = cli_value or os.environ.get("COREWARD_DATA")
    return Path(root) if root else Path(__file__).resolve().parents[3] / "shared" / "data"


def load_problems(root: Path) -> tuple[list[dict], list[dict]]:
    """GSM8K test (solution without its <<calc>> notes, gold after ####) and MATH-500."""
    gsm8k = []
    for line in (root / "gsm8k" / "test.jsonl").read_text().splitlines():
        solution = CALC.sub("", json.loads(line)["answer"])
        body, gold = solution.rsplit("####", 1)
        gsm8k.append({"body": body.strip(), "gold": gold.strip().replace(",", "")})
    math500 = json.loads((root / "math500" / "math500_test.json").read_text())
    return gsm8k, [{"solution": row["solution"], "gold": row["answer"]} for row in math500]


def gsm8k_completion(problem: dict, rng: random.Random) -> str:
    answer = problem["gold"]
    if rng.random() < 0.5:  # wrong
        answer = str(int(float(answer)) + rng.choice([-10, -1, 1, 2, 100]))
    ending = rng.choice([f"#### {answer}", f"The answer is $\\boxed{{{answer}}}$.", f"The answer is {answer}."])
    return f"{problem['body']}\n{ending}"


def equivalent_form(answer: str, rng: random.Random) -> str:
    """The same answer written differently, the way a model might."""
    if re.fullmatch(r"-?\d+", answer):
        return rng.choice([f"{answer}.0", f" {answer} "])
    form = answer.replace("\\frac", "\\dfrac").replace(",", ", ")
    return f"\\left({form}\\right)" if not form.startswith("(") and rng.random() < 0.3 else form


def math_completion(problem: dict, others: list[dict], rng: random.Random) -> str:
    solution = problem["solution"]
    start = solution.rfind("\\boxed{")
    if start < 0:
        return solution
    roll = rng.random()
    if roll < 0.5:  # wrong: another problem's answer
        answer = rng.choice(others)["gold"]
    elif roll < 0.75:
        answer = equivalent_form(problem["gold"], rng)
    else:
        return solution
    return f"{solution[:start]}\\boxed{{{answer}}}."


def build_batch(gsm8k: list[dict], math500: list[dict], batch_index: int, seed: int) -> tuple[list[str], list[str]]:
    """1,024 (completion, gold) from a slice of problems that no other batch index uses."""
    rng = random.Random(seed)
    take = slice(batch_index * GROUPS_PER_SOURCE, (batch_index + 1) * GROUPS_PER_SOURCE)
    completions, golds = [], []
    for problem in gsm8k[take]:
        for _ in range(GROUP_SIZE):
            completions.append(gsm8k_completion(problem, rng))
            golds.append(problem["gold"])
    for problem in math500[take]:
        for _ in range(GROUP_SIZE):
            completions.append(math_completion(problem, math500, rng))
            golds.append(problem["gold"])
    return completions, golds


def pathological_endings() -> list[str]:
    """Answers that make math-verify slow or hang (each measured in studies/2026-11-22-verifier-throughput/)."""
    return [
        "\\boxed{" + "(" * 400 + "1" + ")" * 400 + "}",
        "\\boxed{10^{10^{10^{10}}}}",
        "\\boxed{" + "+".join(str(i) for i in range(1, 250)) + "}",
        "\\boxed{" + "+".join(f"x_{{{i}}}" for i in range(90)) + "}",
        "\\boxed{" + "\\frac{" * 30 + "1}{2}" + "}{2}" * 29 + "}",
        "\\boxed{9^{9^{9}}}",
        "\\boxed{" + "{" * 200 + "2" + "}" * 200 + "}",
        "\\boxed{3^{1000000000}}",
    ]


def with_pathological(completions: list[str], rng: random.Random) -> list[str]:
    """Replace 5% of the completions' endings with pathological answers (a megabyte one among them)."""
    out = list(completions)
    endings = pathological_endings()
    victims = rng.sample(range(len(out)), int(PATHOLOGICAL_FRACTION * len(out)))
    for n, i in enumerate(victims):
        out[i] = out[i][:2000] + "\n" + endings[n % len(endings)]
    out[victims[0]] = "x" * 1_000_000 + out[victims[0]]
    return out


def workers_cpu_seconds(verifier: Verifier) -> float:
    """CPU time the pool's live workers have used (Linux /proc; reads a private attribute, benchmark only)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for worker in verifier._pool._workers if verifier._pool else []:
        fields = Path(f"/proc/{worker.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return total


def timed(verifier: Verifier, completions: list[str], golds: list[str]) -> tuple[float, int, int, float]:
    """Wall seconds, correct count, timed-out count, and a CPU-bound estimate of the wall time on idle
    cores: the caller's CPU plus the workers' CPU shared among them (the machine may be busy)."""
    start, caller_cpu, workers_cpu = time.perf_counter(), time.process_time(), workers_cpu_seconds(verifier)
    results = verifier.verify_completions(completions, golds)
    wall = time.perf_counter() - start
    workers_cpu = workers_cpu_seconds(verifier) - workers_cpu
    estimate = time.process_time() - caller_cpu + workers_cpu / verifier.num_workers
    return wall, sum(r.correct for r in results), sum(r.timed_out for r in results), estimate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=3.0)
    parser.add_argument("--data", default=None)
    args = parser.parse_args()

    gsm8k, math500 = load_problems(data_dir(args.data))
    rng = random.Random(0)
    rng.shuffle(gsm8k)
    rng.shuffle(math500)
    batches = [build_batch(gsm8k, math500, index, seed=index) for index in range(6)]
    n = len(batches[0][0])

    with Verifier(timeout_s=args.timeout, num_workers=args.workers) as verifier:
        print(f"workers: {verifier.num_workers}, timeout: {verifier.timeout_s:g} s, completions per batch: {n}")
        start = time.perf_counter()
        verifier.equivalent(["(1, 2)"] * 8, ["(1, 3)"] * 8)  # starts the pool
        print(f"  pool start: {time.perf_counter() - start:.3f} s")
        cold, _, _, _ = timed(verifier, *batches[0])
        timed(verifier, *batches[1])
        print(f"  first batch on a fresh pool (cold caches): {cold:.3f} s")
        stats_before = verifier.stats.math_verify, verifier.stats.fast_path
        clean = [timed(verifier, *batches[i]) for i in (2, 3, 4)]
        best = min(seconds for seconds, _, _, _ in clean)
        best_cpu = min(estimate for _, _, _, estimate in clean)
        for i, (seconds, correct, timeouts, estimate) in enumerate(clean, start=1):
            print(
                f"  clean batch {i}: {seconds:.3f} s ({estimate:.3f} s CPU-bound), "
                f"{correct} correct, {timeouts} timed out"
            )
        print(
            f"  per batch: {(verifier.stats.fast_path - stats_before[1]) / 3:.0f} decided by fast paths, "
            f"{(verifier.stats.math_verify - stats_before[0]) / 3:.0f} distinct pairs sent to math-verify"
        )
        print(f"CLEAN: best of 3 = {best:.3f} s  ->  {n / best:,.0f} completions/s")
        print(f"CLEAN, CPU-bound (as on idle cores): {best_cpu:.3f} s  ->  {n / best_cpu:,.0f} completions/s")

        completions, golds = batches[5]
        dirty = with_pathological(completions, random.Random(5))
        seconds, correct, timeouts, estimate = timed(verifier, dirty, golds)
        print(
            f"PATHOLOGICAL (5% = {int(PATHOLOGICAL_FRACTION * n)} items, one 1 MB): {seconds:.3f} s "
            f"({estimate:.3f} s CPU-bound), {correct} correct, {timeouts} timed out or over budget"
        )
        print(f"RATIO pathological / clean best: {seconds / best:.2f}x (CPU-bound: {estimate / best_cpu:.2f}x)")
        print(f"stats: {verifier.stats}")
    print(f"load average while running: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
