"""What Cooper's RM memory options cost, per process: weights dtype, optimizer offload, and sharding the RM
like the policy (FSDP2, DeepSpeed ZeRO-3 / ZeRO-2 on 2 gloo processes), at Qwen2.5-0.5B's shape.

    python -m benchmarks.memory.rm_memory_options [--updates 3] [--pairs 2] [--max-length 256] [--options fp32,fsdp2,...]
                                           [--markdown]

Sharded options (`fsdp2`, `fsdp2-offload`, `zero3`, `zero3-offload`, `zero2`) run the RM learner sharded as
`rm/sharding.py` does under a policy of that engine, in 2 processes (torchrun, gloo), and report the largest
process's bytes: weights, gradients and optimizer state held by the process (the shards it owns; DeepSpeed's
fp32 master partitions count as optimizer state), and what `optimizer_offload` moved to the CPU side.
Gradients are counted just before the optimizer step, where they peak. With R parameters and N processes fp32
AdamW holds ≈ 16R replicated and ≈ 16R/N sharded (ZeRO-3 keeps its own fp32 masters besides fp32 weights:
≈ 20R/N; ZeRO-2 keeps weights whole: ≈ 4R + 16R/N); offload moves the optimizer's part (8R/N moments, masters) to the CPU.

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
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from coreward.experiments import jobs


OPTIONS = {"fp32": ("float32", False), "bf16": ("bfloat16", False),
           "fp32-offload": ("float32", True), "bf16-offload": ("bfloat16", True)}
SHARDED = {"fsdp2": ("fsdp2", False), "fsdp2-offload": ("fsdp2", True), "zero3": ("zero3", False),
           "zero3-offload": ("zero3", True), "zero2": ("zero2", False)}  # fp32, 2 processes
PROCESSES = 2


def nbytes(tensors) -> int:
    import torch

    total = 0
    for t in tensors:
        if torch.is_tensor(t):
            t = t.to_local() if hasattr(t, "to_local") else t
            total += t.numel() * t.element_size()
    return total


def sharded_bytes(learner) -> dict:
    """(weights, optimizer, offloaded) bytes this process holds of a sharded learner (gradients: `grad_bytes`)."""
    sharding, state = learner.sharding, learner.optimizer
    if sharding.engine is None:  # FSDP2: DTensor shards; offload: CPU masters + moments of this process's shards
        moments = nbytes(v for s in state.state.values() for v in s.values())
        weights = nbytes(learner.parameters)
        if learner.masters is not None:
            return {"weights": weights, "optimizer": 0, "offloaded": moments + nbytes(learner.masters)}
        return {"weights": weights, "optimizer": moments, "offloaded": 0}
    zero = state  # DeepSpeed's ZeRO optimizer: partitions, fp32 masters, the inner optimizer's moments
    moments = nbytes(v for s in zero.optimizer.state.values() for v in s.values())
    if sharding.kind == "zero3":
        weights = nbytes(p.ds_tensor for p in learner.parameters)
        masters = nbytes(zero.fp32_partitioned_groups_flat)
    else:
        weights = nbytes(learner.parameters)
        masters = nbytes(zero.single_partition_of_fp32_groups)
    if sharding.offload:
        return {"weights": weights, "optimizer": 0, "offloaded": masters + moments}
    return {"weights": weights, "optimizer": masters + moments, "offloaded": 0}


def grad_bytes(learner) -> int:
    """Gradient bytes this process holds before the optimizer step."""
    sharding = learner.sharding
    if sharding is None or sharding.engine is None:
        return nbytes(p.grad for p in learner.parameters if p.grad is not None)
    zero = learner.optimizer
    if sharding.kind == "zero3":
        buffer = getattr(zero, "grad_partitions_flat_buffer", None)
        return nbytes([buffer]) if buffer is not None else nbytes(zero.averaged_gradients.values())
    return nbytes(g for grads in zero.averaged_gradients.values() for g in grads)


def build_rm(root: Path) -> Path:
    """A random VerifyRM of Qwen2.5-0.5B's shape (the policy shape of benchmarks/speed/real_size_step.py)."""
    from benchmarks.speed.real_size_step import build_models

    _, rm = build_models(root, "float32")
    return rm


def measure(rm_path: str, dtype: str, offload: bool, updates: int, pairs: int, engine: str | None = None,
            max_length: int = 256) -> dict:
    import torch

    from coreward.rewards.cooper.learner import Pair, RMLearner
    from coreward.rm.model import VerifyRM

    sharding = None
    if engine is not None:
        from accelerate.state import PartialState

        from coreward.rm.sharding import Sharding

        PartialState(cpu=True)  # gloo, from torchrun's environment
        if engine != "fsdp2":
            import deepspeed

            deepspeed.init_distributed(dist_backend="gloo")
        sharding = Sharding(engine)
    torch.manual_seed(0)
    rm = VerifyRM.from_pretrained(rm_path, device="cpu", dtype=dtype, max_length=max_length, batch_size=2 * pairs)
    learner = RMLearner(rm, lr=1e-6, optimizer_offload=offload, sharding=sharding)
    grads_seen = [0]
    if sharding is not None:  # count the gradients where they peak: just before the step
        inner_step = learner.sharding.clip_and_step

        def counted_step(lrn):
            grads_seen[0] = max(grads_seen[0], grad_bytes(lrn))
            return inner_step(lrn)

        learner.sharding.clip_and_step = counted_step
    question = "What is the sum of the first forty odd numbers, and why? " * 2
    batch = [Pair(question, "1600", f"The sum is 40 squared, so the answer is {1600 + 0 * i}. " * 2,
                  f"Adding them up in pairs gives about {1560 + i}, so the answer is {1560 + i}. " * 2)
             for i in range(pairs)]
    times, copy_times = [], []
    copy_clock = [0.0]
    if sharding is None:  # replicated: count the gradients just before the step too
        counted_inner = learner._optimizer_step

        def counted_optimizer_step():
            grads_seen[0] = max(grads_seen[0], grad_bytes(learner))
            counted_inner()

        learner._optimizer_step = counted_optimizer_step
    if offload and sharding is None:  # time the two copies the offload adds around AdamW
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

    if sharding is not None:
        held = sharded_bytes(learner)
        result = {"parameters": sum(getattr(p, "ds_numel", p.numel()) for p in learner.parameters),
                  "device_bytes": held["weights"] + grads_seen[0] + held["optimizer"],
                  "weights_bytes": held["weights"], "grad_bytes": grads_seen[0], "optimizer_bytes": held["optimizer"],
                  "offloaded_bytes": held["offloaded"],
                  "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "update_s": sum(times[1:]) / max(1, len(times) - 1), "first_update_s": times[0],
                  "offload_copy_s": 0.0}
        from accelerate.utils import gather_object

        return max(gather_object([result]), key=lambda r: r["device_bytes"])  # the largest process

    params = learner.parameters
    state = [v for s in learner.optimizer.state.values() for v in s.values()]
    device_bytes = nbytes(params) + grads_seen[0]
    host_bytes = 0
    if offload:
        host_bytes = nbytes(learner.masters) + nbytes(state)
    else:
        device_bytes += nbytes(state)
    return {
        "parameters": sum(p.numel() for p in params),
        "device_bytes": device_bytes, "weights_bytes": nbytes(params), "grad_bytes": grads_seen[0],
        "optimizer_bytes": 0 if offload else nbytes(state),
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
    every = [*OPTIONS, *SHARDED]
    parser.add_argument("--options", default="fp32,fp32-offload,fsdp2,fsdp2-offload,zero3,zero3-offload,zero2",
                        help=f"comma-separated, of {', '.join(every)}")
    parser.add_argument("--max-length", type=int, default=256,
                        help="RM tokens per text (bytes held do not depend on it; time does)")
    parser.add_argument("--markdown", action="store_true", help="print the table as markdown too")
    parser.add_argument("--child", nargs=4, metavar=("RM", "DTYPE", "OFFLOAD", "ENGINE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        rm_path, dtype, offload, engine = args.child
        result = measure(rm_path, dtype, offload == "1", args.updates, args.pairs, None if engine == "-" else engine,
                         args.max_length)
        if os.environ.get("RANK", "0") == "0":
            print(json.dumps(result))
        return
    names = args.options.split(",")
    unknown = [n for n in names if n not in every]
    if unknown:
        parser.error(f"unknown option(s) {unknown}; choose from {every}")
    header = ["option", "processes", "params", "weights GB", "grads GB", "optimizer GB", "per-process GB", "B/param",
              "offloaded GB", "peak RSS GB", "update s"]
    rows = []
    with tempfile.TemporaryDirectory() as root:
        rm = build_rm(Path(root))
        print(" | ".join(header), flush=True)
        for name in names:
            if name in SHARDED:
                engine, offload = SHARDED[name]
                dtype, processes = "float32", PROCESSES
                launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes),
                            "--master_port", str(jobs.free_port())]
            else:
                (dtype, offload), engine, processes = OPTIONS[name], "-", 1
                launcher = [sys.executable]
            done = subprocess.run([*launcher, __file__, "--updates", str(args.updates), "--pairs", str(args.pairs),
                                   "--max-length", str(args.max_length),
                                   "--child", str(rm), dtype, "1" if offload else "0", engine],
                                  capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
            if done.returncode != 0:
                raise SystemExit(f"{name} failed:\n{done.stderr[-3000:]}")
            r = json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])
            gb = lambda key, r=r: f"{r[key] / 1e9:.2f}"  # noqa: E731
            rows.append([name, str(processes), f"{r['parameters'] / 1e6:.0f}M", gb("weights_bytes"), gb("grad_bytes"),
                         gb("optimizer_bytes"), gb("device_bytes"), f"{r['device_bytes'] / r['parameters']:.1f}",
                         gb("offloaded_bytes"), gb("peak_rss_bytes"), f"{r['update_s']:.2f}"])
            print(" | ".join(rows[-1]), flush=True)
    if args.markdown:
        print("\n| " + " | ".join(header) + " |\n|" + "---|" * len(header))
        for row in rows:
            print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
