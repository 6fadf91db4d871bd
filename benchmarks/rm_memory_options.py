"""What Cooper's RM memory options cost: weights dtype and optimizer offload, at Qwen2.5-0.5B's shape.

    python benchmarks/rm_memory_options.py [--updates 3] [--pairs 2] [--options fp32,bf16,fp32-offload,bf16-offload]

Cooper trains its RM with its own AdamW on every process, beside the policy. The options (`rewards.N.params`):
`rm_dtype: bfloat16` (weights and gradients in bf16), `optimizer_offload: true` (AdamW state and float32 master
weights on the CPU, the RM's device keeps weights and gradients), `device:` (the RM on a device of its own).
Each option runs in a process of its own: a random-initialised VerifyRM with Qwen2.5-0.5B's configuration
(nothing downloaded; the demo's character tokenizer), `--updates` RM updates of `--pairs` (positive, negative)
pairs of ~200-character texts. It prints, per option:

- bytes the RM's device holds after an update (weights + gradients + optimizer state there), and bytes the
  CPU side holds for the offloaded optimizer (masters + AdamW moments), both counted from the tensors;
- the process's peak RSS (on this CPU machine both sides are the same memory);
- the mean time of an update after the first (the first creates AdamW's state), and the part of it spent
  copying gradients to the masters and weights back (offload's cost; CPU to CPU here, a lower bound of a
  PCIe copy).

On a CPU the device is the CPU, so "its own device" cannot be measured here, and bf16 compute speed on a CPU
says little about a GPU's: the byte counts carry over to GPUs, the times do not.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OPTIONS = {"fp32": ("float32", False), "bf16": ("bfloat16", False),
           "fp32-offload": ("float32", True), "bf16-offload": ("bfloat16", True)}


def build_rm(root: Path) -> Path:
    """A random VerifyRM of Qwen2.5-0.5B's shape (the policy shape of benchmarks/real_size_step.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from real_size_step import build_models

    _, rm = build_models(root, "float32")
    return rm


def measure(rm_path: str, dtype: str, offload: bool, updates: int, pairs: int) -> dict:
    import torch

    from coreward.rm.learner import Pair, RMLearner
    from coreward.rm.model import VerifyRM

    torch.manual_seed(0)
    rm = VerifyRM.from_pretrained(rm_path, device="cpu", dtype=dtype, max_length=256, batch_size=2 * pairs)
    learner = RMLearner(rm, lr=1e-6, optimizer_offload=offload)
    question = "What is the sum of the first forty odd numbers, and why? " * 2
    batch = [Pair(question, "1600", f"The sum is 40 squared, so the answer is {1600 + 0 * i}. " * 2,
                  f"Adding them up in pairs gives about {1560 + i}, so the answer is {1560 + i}. " * 2)
             for i in range(pairs)]
    times, copy_times = [], []
    copy_clock = [0.0]
    if offload:  # time the two copies the offload adds around AdamW
        plain_step = learner.optimizer.step

        def timed_step(*args, **kwargs):
            start = time.perf_counter()
            result = plain_step(*args, **kwargs)
            copy_clock[0] -= time.perf_counter() - start  # AdamW itself is not copy time
            return result

        learner.optimizer.step = timed_step
        inner = learner._optimizer_step

        def timed_optimizer_step():
            start = time.perf_counter()
            inner()
            copy_clock[0] += time.perf_counter() - start

        learner._optimizer_step = timed_optimizer_step
    for _ in range(updates):
        copy_clock[0] = 0.0
        start = time.perf_counter()
        learner.update(batch)
        times.append(time.perf_counter() - start)
        copy_times.append(copy_clock[0])

    def nbytes(tensors) -> int:
        return sum(t.numel() * t.element_size() for t in tensors if torch.is_tensor(t))

    params = learner.parameters
    state = [v for s in learner.optimizer.state.values() for v in s.values()]
    device_bytes = nbytes(params) + nbytes(p.grad for p in params if p.grad is not None)
    host_bytes = 0
    if offload:
        host_bytes = nbytes(learner.masters) + nbytes(state)
    else:
        device_bytes += nbytes(state)
    return {
        "parameters": sum(p.numel() for p in params),
        "device_bytes": device_bytes,
        "offloaded_bytes": host_bytes,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "update_s": sum(times[1:]) / max(1, len(times) - 1),
        "first_update_s": times[0],
        "offload_copy_s": sum(copy_times[1:]) / max(1, len(copy_times) - 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=3, help="RM updates per option (the first is not timed)")
    parser.add_argument("--pairs", type=int, default=2, help="pairs per update")
    parser.add_argument("--options", default=",".join(OPTIONS), help=f"comma-separated, of {', '.join(OPTIONS)}")
    parser.add_argument("--child", nargs=3, metavar=("RM", "DTYPE", "OFFLOAD"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        rm_path, dtype, offload = args.child
        print(json.dumps(measure(rm_path, dtype, offload == "1", args.updates, args.pairs)))
        return
    names = args.options.split(",")
    unknown = [n for n in names if n not in OPTIONS]
    if unknown:
        parser.error(f"unknown option(s) {unknown}; choose from {list(OPTIONS)}")
    with tempfile.TemporaryDirectory() as root:
        rm = build_rm(Path(root))
        print(f"{'option':14} {'params':>7} {'device GB':>9} {'B/param':>7} {'offloaded GB':>12} {'peak RSS GB':>11} "
              f"{'update s':>8} {'copies s':>8}")
        for name in names:
            dtype, offload = OPTIONS[name]
            done = subprocess.run([sys.executable, __file__, "--updates", str(args.updates), "--pairs", str(args.pairs),
                                   "--child", str(rm), dtype, "1" if offload else "0"],
                                  capture_output=True, text=True, check=True)
            r = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"{name:14} {r['parameters'] / 1e6:6.0f}M {r['device_bytes'] / 1e9:9.2f} "
                  f"{r['device_bytes'] / r['parameters']:7.1f} {r['offloaded_bytes'] / 1e9:12.2f} "
                  f"{r['peak_rss_bytes'] / 1e9:11.2f} {r['update_s']:8.2f} {r['offload_copy_s']:8.2f}", flush=True)


if __name__ == "__main__":
    main()
