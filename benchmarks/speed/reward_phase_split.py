"""CPU time of the reward phase per process, with 1, 2 and 4 CPU processes on the same global batch.

    python -m benchmarks.speed.reward_phase_split [--groups 64] [--group-size 8] [--processes 1,2,4] [--data DIR]

The global batch: GSM8K test problems (`--groups` of them) x `--group-size` completions, each a worked
solution ending in "The answer is $\\boxed{X}$." with X the gold answer or, for about half, another number, and
half of the time written as a fraction (\\frac{2X}{2}) so that math-verify, not a string match, decides. Every
process gets the whole batch (as the engine hands it to reward sources) and runs what the rule reward and
majority voting do: verification of every completion (`batch.verdicts()`), answer extraction, and the
verified vote classes of each group. Reported per process: CPU seconds of the process and of its verifier
worker (one each, so 4 processes use 4 workers), measured with psutil around the phase, after one warm-up
batch. With the work split (coreward >= this script), the per-process figure falls with the process count;
when every process repeated the whole batch it stayed flat.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from coreward.experiments import jobs


def cpu_seconds() -> float:
    """User + system CPU time of this process and its children (the verifier's worker)."""
    import psutil

    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.NoSuchProcess:
            pass
    return total


def build_batch(records, group_size: int, seed: int):
    from coreward.rewards.base import RolloutBatch

    rng = random.Random(seed)
    completions, answers, prompts = [], [], []
    for record in records:
        for _ in range(group_size):
            gold = str(record.answer)
            guess = gold if rng.random() < 0.5 else str(rng.randint(0, 999))
            if rng.random() < 0.5:  # an equivalent form: no string fast path, math-verify parses and compares
                guess = f"\\frac{{{2 * int(guess) if guess.lstrip('-').isdigit() else guess}}}{{2}}"
            completions.append(f"Let me work it out step by step. The answer is $\\boxed{{{guess}}}$.")
            answers.append(gold)
            prompts.append(record.question)
    return RolloutBatch(prompts=prompts, completions=completions, completion_ids=[[0]] * len(completions),
                        group_ids=[i // group_size for i in range(len(completions))], num_generations=group_size,
                        columns={"answer": answers}, reference_column="answer")


def worker(args) -> None:
    import torch.distributed as dist
    from accelerate import PartialState

    from coreward.data.sources import load_named
    from coreward.rewards.majority import MajorityVoteReward
    from coreward.rewards.rule import RuleReward
    from coreward.verify import Verifier

    state = PartialState(cpu=True)
    records = load_named("gsm8k", "test", 2 * args.groups, args.data, key="--data")
    with Verifier(num_workers=1) as verifier:
        timings = []
        for attempt, share in enumerate((records[: args.groups], records[args.groups :])):  # warm-up, then measured
            batch = build_batch(share, args.group_size, seed=attempt)
            batch.context["verifier"] = verifier
            dist.barrier()
            start = cpu_seconds()
            RuleReward().compute(batch)
            MajorityVoteReward().compute(batch)
            timings.append(cpu_seconds() - start)
            dist.barrier()
    Path(args.out, f"rank{state.process_index}.json").write_text(json.dumps({"cpu_s": timings[-1],
                                                                             "completions": len(batch)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=64)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--processes", default="1,2,4")
    parser.add_argument("--data", default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if "RANK" in os.environ:
        worker(args)
        return

    print(f"global batch: {args.groups} GSM8K problems x {args.group_size} completions = "
          f"{args.groups * args.group_size}; CPU seconds of the reward phase per process (process + its verifier worker)")
    print("| processes | mean CPU s per process | max | sum over processes |")
    print("| --- | --- | --- | --- |")
    for count in [int(n) for n in args.processes.split(",")]:
        with tempfile.TemporaryDirectory() as out:
            command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(count),
                       "--master_port", str(jobs.free_port()), __file__, "--groups", str(args.groups),
                       "--group-size", str(args.group_size), "--out", out]
            if args.data:
                command += ["--data", args.data]
            env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
            subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
            cpu = [json.loads(p.read_text())["cpu_s"] for p in sorted(Path(out).glob("rank*.json"))]
        print(f"| {count} | {sum(cpu) / len(cpu):.2f} | {max(cpu):.2f} | {sum(cpu):.2f} |", flush=True)


if __name__ == "__main__":
    main()
