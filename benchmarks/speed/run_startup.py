"""What a side-by-side run of `coreward demo` / `coreward map` pays before its first step, and what two runs on two
cores cost each other, in one run of this script:

    python -m benchmarks.speed.run_startup [--steps 20] [--repeats 2]

1. start-up: `coreward train` on the demo's rule config for 1 step, started as a fresh `python -m coreward.cli`
   process and forked from the forkserver that preloaded the training stack (experiments/jobs.py), wall time of
   each (best of `--repeats`);
2. side by side: the same config for `--steps` steps alone, then two copies at once (both forked), each with one
   torch thread: the wall time of the pair over the single run's (1.0 would be a free second core).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]


def run(jobs: list, parallel: int) -> float:
    from coreward.experiments.jobs import run_jobs

    start = time.perf_counter()
    run_jobs(jobs, parallel, prefix="bench", say=lambda line: None)
    assert all(job.status == "done" for job in jobs), [(j.label, j.returncode, j.log) for j in jobs]
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    from benchmarks._common import machine
    from coreward.experiments import jobs as jobs_module
    from coreward.experiments.jobs import Job, train_command

    print(machine())
    config = REPO / "configs" / "demo" / "rule.yaml"
    sets = ["data.eval_every=0", "grpo.disable_tqdm=true", "verifier.num_workers=1", "torch_threads=1"]
    with tempfile.TemporaryDirectory() as root:
        root = Path(root)

        def job(name: str, steps: int) -> Job:
            return Job(name, train_command(config, root / name, [*sets, f"grpo.max_steps={steps}",
                                                                 f"grpo.save_steps={steps}"]),
                       root / name, root / f"{name}.log", steps)

        fresh, forked = [], []
        original = jobs_module._train_arguments
        for i in range(args.repeats):
            jobs_module._train_arguments = lambda command: None  # every command as a fresh subprocess
            fresh.append(run([job(f"fresh{i}", 1)], 1))
            jobs_module._train_arguments = original
            forked.append(run([job(f"forked{i}", 1)], 1))
        print(f"one step of the rule demo config, start to exit: fresh process {min(fresh):.1f} s, forked from the "
              f"preloaded forkserver {min(forked):.1f} s (best of {args.repeats})")
        alone = run([job("alone", args.steps)], 1)
        pair = run([job("a", args.steps), job("b", args.steps)], 2)
        print(f"{args.steps} steps: one run alone {alone:.1f} s, two side by side {pair:.1f} s: the pair takes "
              f"{pair / alone:.2f}x one run's time ({2 * alone / pair:.2f}x the throughput)")


if __name__ == "__main__":
    main()
