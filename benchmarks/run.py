"""Regenerate every figure docs/figures.md quotes from the maintained harnesses, and say on which machine.

    python benchmarks/run.py [--group speed|memory|gpu|verification] [--quick] [--only NAME,...] [--log FILE]
    python benchmarks/run.py --list            # each harness, its group and the command it runs

First it prints the machine (CPU model, cores, GPUs, load average), the commit and the library versions; then
it runs each harness of the group(s) one after the other (never side by side: they would time each other) as
`python -m benchmarks.GROUP.NAME ARGS` from the repository root, and prints its wall time, its exit status and
the last lines of its output: the figures the docs quote, each row of docs/figures.md naming its harness.
`--quick` runs each at a smoke size (the figures it prints are not the docs'; it checks that all still run).
A harness that needs what this machine lacks (a GPU, vLLM, other graders' test cases) is reported as skipped
with the reason; on a machine without CUDA the GPU group runs its CPU forms (`--tiny`, `--dry-run`).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]
GROUPS = ("speed", "memory", "gpu", "verification")


@dataclass(frozen=True)
class Harness:
    group: str
    name: str
    full: tuple[str, ...] = ()  # the arguments of the figure the docs quote
    quick: tuple[str, ...] | None = None  # smoke-size arguments (None: the same as full)
    needs: str | None = None  # "cuda" | "vllm" | "peer_cases": skipped, with the reason, where missing
    cpu_form: tuple[str, ...] | None = None  # without CUDA, the GPU harness's CPU arguments instead of skipping

    @property
    def module(self) -> str:
        return f"benchmarks.{self.group}.{self.name}"


# In the order they run. OUT is replaced by a folder under --out, PEER by --peer-cases.
HARNESSES = [
    Harness("speed", "grpo_step_time", ("--steps", "5"), ("--steps", "3")),
    Harness("speed", "eval_throughput", (), ("--batch-sizes", "256", "--probe", "16")),
    Harness("speed", "rm_throughput", ("--threads", "1"), ("--threads", "1", "--score-rows", "512", "--train-rows", "256")),
    Harness("speed", "rm_pass_order", (), ("--limit", "64", "--repeats", "1")),
    Harness("speed", "cooper_step_time", (), ("--steps", "3", "--rounds", "1")),
    Harness("speed", "co_rewarding_2_step_time", (), ("--steps", "3", "--rounds", "1")),
    Harness("speed", "reward_phase_split", ("--groups", "256"), ("--groups", "32", "--processes", "1,2")),
    Harness("speed", "hub_offline"),
    Harness("speed", "step_floor", (), ("--configs", "rule", "--steps", "3", "--count-steps", "1")),
    Harness("speed", "threads_by_size", ("--hidden", "128,256,512,768,1024"), ("--hidden", "128,256", "--repeats", "1")),
    Harness("speed", "run_startup", (), ("--steps", "5", "--repeats", "1")),
    Harness("speed", "real_size_step", (), ("--methods", "rule", "--steps", "1")),
    Harness("speed", "demo_jobs_speedup", ("--full", "--jobs", "2"), ()),
    Harness("speed", "real_model_rollouts", ("--output", "OUT"),
            ("--tokens", "8", "--repeats", "1", "--steps", "2", "--output", "OUT")),
    Harness("memory", "paper_plans"),
    Harness("memory", "peer_runs", ("--markdown",)),
    Harness("memory", "plan_vs_rss", ("--markdown", "--work", "OUT"), ("--only", "rule", "--steps", "2", "--work", "OUT")),
    Harness("memory", "rm_memory_controls", ("--layers", "1", "--markdown"),
            ("--layers", "1", "--updates", "1", "--variants", "plain,checkpointing", "--no-timing")),
    Harness("memory", "rm_memory_options", ("--markdown",), ("--options", "fp32", "--updates", "1")),
    Harness("memory", "memory_plan_accuracy", ("--json", "OUT/memory_plan_accuracy.json"), ("--quick",)),
    Harness("gpu", "gpu_check", ("--out", "OUT"), ("--steps", "1", "--parts", "rule", "--out", "OUT"), needs="cuda",
            cpu_form=("--tiny", "--steps", "1", "--no-vllm", "--out", "OUT")),
    Harness("gpu", "gpu_memory_check", ("--out", "OUT"), ("--parts", "one", "--out", "OUT"), needs="cuda",
            cpu_form=("--dry-run", "--out", "OUT")),
    Harness("gpu", "teacher_generation_vllm", ("--steps", "6"), ("--steps", "2"), needs="vllm"),
    Harness("verification", "verify_throughput"),
    Harness("verification", "majority_classes", (), ("--groups", "16")),
    Harness("verification", "verify_peer_suites", ("PEER", "--markdown"), needs="peer_cases"),
]
# Files of the groups that are not harnesses of their own (tests/test_benchmarks.py checks the two lists cover
# every file): a module a harness imports, and the tool that builds verify_peer_suites' input from other graders'
# checkouts (it measures nothing).
NOT_RUN = {"gpu_memory_cooper": "the cooper part's reward source, imported by gpu_memory_check",
           "collect_peer_cases": "builds verify_peer_suites' input (--peer-cases) from other graders' checkouts"}


def has_cuda() -> bool:
    """Without importing torch (a second or more): nvidia-smi listing a GPU."""
    if shutil.which("nvidia-smi") is None:
        return False
    done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return done.returncode == 0 and "GPU" in done.stdout


def arguments(harness: Harness, quick: bool, cuda: bool, out: Path, peer_cases: Path | None) -> tuple[str, ...] | str:
    """The harness's arguments here, or the reason it is skipped."""
    args = harness.full if not quick or harness.quick is None else harness.quick
    if harness.needs == "cuda" and not cuda:
        args = harness.cpu_form if harness.cpu_form is not None else "no CUDA GPU here"
    elif harness.needs == "vllm" and importlib.util.find_spec("vllm") is None:
        args = "vLLM is not installed (CI's second-stage environment has it)"
    elif harness.needs == "peer_cases" and peer_cases is None:
        args = "no --peer-cases (build them with python -m benchmarks.verification.collect_peer_cases)"
    if isinstance(args, str):
        return args
    folder = out / harness.name
    return tuple(str(peer_cases) if a == "PEER" else a.replace("OUT", str(folder)) for a in args)


def child_env() -> dict[str, str]:
    """This checkout's src/ and root first on the harnesses' PYTHONPATH (as benchmarks/_common.py's child_env)."""
    path = os.pathsep.join([str(REPO / "src"), str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**os.environ, "PYTHONPATH": path}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 2)[2])
    parser.add_argument("--group", choices=GROUPS, action="append", help="only this group (repeatable)")
    parser.add_argument("--only", help="comma-separated harness names")
    parser.add_argument("--quick", action="store_true", help="each harness at a smoke size")
    parser.add_argument("--list", action="store_true", help="print each harness and its command, run nothing")
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "benchmarks",
                        help="where harnesses that write files write them, a folder each (default: runs/benchmarks)")
    parser.add_argument("--peer-cases", type=Path, help="collect_peer_cases' output, for verify_peer_suites")
    parser.add_argument("--log", type=Path, help="also write everything printed to this file")
    parser.add_argument("--tail", type=int, default=12, help="lines of each harness's output to print")
    args = parser.parse_args(argv)
    chosen = [h for h in HARNESSES if (not args.group or h.group in args.group)
              and (not args.only or h.name in args.only.split(","))]
    unknown = set(args.only.split(",")) - {h.name for h in HARNESSES} if args.only else set()
    if unknown:
        parser.error(f"unknown harness(es) {sorted(unknown)}; choose from {[h.name for h in HARNESSES]}")
    cuda = has_cuda()
    if args.list:
        for h in chosen:
            planned = arguments(h, args.quick, cuda, args.out, args.peer_cases)
            shown = f"skipped: {planned}" if isinstance(planned, str) else " ".join(["python -m", h.module, *planned])
            print(f"{h.group:13} {h.name:26} {shown}")
        return 0
    env = child_env()
    first = subprocess.run([sys.executable, "-m", "benchmarks._common"], capture_output=True, text=True, cwd=REPO,
                           env=env)
    lines = [(first.stdout or first.stderr).strip() + (" (--quick: smoke sizes, not the docs' figures)"
                                                       if args.quick else "")]
    print(lines[0], flush=True)
    failed = []
    for harness in chosen:
        planned = arguments(harness, args.quick, cuda, args.out, args.peer_cases)
        if isinstance(planned, str):
            block = [f"\n== {harness.group}/{harness.name}: skipped ({planned})"]
        else:
            (args.out / harness.name).mkdir(parents=True, exist_ok=True)
            command = [sys.executable, "-m", harness.module, *planned]
            start = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env)
            seconds = time.perf_counter() - start
            output = (done.stdout + (done.stderr if done.returncode else "")).strip().splitlines()
            block = [f"\n== {harness.group}/{harness.name}: python -m {harness.module} {' '.join(planned)}  "
                     f"({seconds:.0f} s, exit {done.returncode}, load average {os.getloadavg()[0]:.2f})",
                     *output[-args.tail:]]
            if done.returncode:
                failed.append(harness.name)
        print("\n".join(block), flush=True)
        lines.extend(block)
    if failed:
        lines.append(f"\nfailed: {', '.join(failed)}")
        print(lines[-1])
    if args.log:
        args.log.write_text("\n".join(lines) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
