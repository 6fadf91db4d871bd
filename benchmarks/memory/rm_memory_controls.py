"""What Cooper's RM memory settings save in one RM update, and what gradient checkpointing costs in time, at the
real width of Qwen2.5-1.5B (hidden 1536, intermediate 8960, 12 heads, 2 KV heads, vocab 151,936) with few layers.

    python -m benchmarks.memory.rm_memory_controls [--layers 1] [--tokens 1024] [--sequences 8] [--updates 2]
                                            [--variants plain,checkpointing,...] [--markdown]

The RM is a random-initialised VerifyRM of that shape (nothing downloaded; the demo tokenizer, whose ids all lie in
the vocabulary) in bf16 with float32 master weights (`rm_dtype: bfloat16`, the default `master_weights: float32`),
SDPA attention, trained on `--sequences / 2` pairs of digit texts cut to exactly `--tokens` tokens each. Each variant
runs `--updates` updates in a process of its own (glibc keeps memory a previous variant freed; a fixed
MALLOC_MMAP_THRESHOLD_ makes it return what an update frees), and prints:

- peak: the process's resident high-water mark during the last update above its resident memory just before it
  (weights, masters, tokenizer and AdamW's moments, made in the first update, are in that baseline);
- passes / step / norms: that peak split by phase (the weights' snapshot and the forward and backward passes; the
  AdamW step; the update norms `rm/update_norm` logs), each a high-water mark (VmHWM, reset through
  /proc/self/clear_refs at the phase's start) above the same baseline;
- then (`--timing`, one more process) the time of an update with gradient checkpointing against one without,
  alternated on one learner (`--timed` of each after a warm-up, so both see the same machine load), as
  wall-clock and CPU seconds (the CPU time of a shared machine varies less).

Variants: `plain` (every setting off), `checkpointing` (gradient_checkpointing), `token_budget`
(max_tokens_per_pass = 2 × --tokens: one pair per pass), `param_offload`, and `before`: the optimizer step and the
update norms as they were before they went one tensor at a time (every master's float32 gradient made at once, then
one AdamW step; each whole tensor copied to float64 for the norms), so `plain` against `before` is what that change
saves. On a CPU the RM's device is the CPU: param_offload cannot lower a peak here (it copies the weights for each
use; on a GPU it frees their device memory between uses), and bf16 speed on a CPU says little about a GPU's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from coreward.runtime.resident import reset_peak, resident


VARIANTS = ("plain", "checkpointing", "token_budget", "param_offload", "before")
QWEN25_15B_WIDTH = {"vocab_size": 151936, "hidden_size": 1536, "intermediate_size": 8960, "num_attention_heads": 12,
                    "num_key_value_heads": 2, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
                    "tie_word_embeddings": True}
MB = 1 << 20


def worker(variant: str, layers: int, tokens: int, sequences: int, updates: int) -> dict:
    """One variant's updates in this process; its peaks (bytes above the baseline) and times."""
    import random

    import torch
    from transformers import Qwen2Config, Qwen2ForSequenceClassification

    from coreward.demo.model import build_demo_tokenizer
    from coreward.rewards.cooper.learner import NORM_CHUNK, Pair, RMLearner
    from coreward.rm.model import VerifyRM

    class Before(RMLearner):
        """The optimizer step and the update norms as they were: all masters' float32 gradients at once, whole
        tensors copied to float64."""

        def _optimizer_step(self) -> None:
            for master, p in zip(self.masters, self.parameters):
                master.grad = p.grad.detach().to(master.device, torch.float32) if p.grad is not None else None
            self.optimizer.step()
            with torch.no_grad():
                for master, p in zip(self.masters, self.parameters):
                    p.copy_(master.to(p.device, p.dtype))

        @torch.no_grad()
        def _update_norms(self, before):
            sums = torch.zeros(2, dtype=torch.float64)
            for now, old in zip(self._local_weights()[0], before):
                now = now.detach().double()
                sums[0] += (now - old.to(now.device, torch.float64)).pow(2).sum()
                sums[1] += now.pow(2).sum()
            return {"rm/update_norm": float(sums[0].sqrt()), "rm/weight_norm": float(sums[1].sqrt())}

    assert NORM_CHUNK  # the chunked norms are the learner's own (`plain` and the settings' variants)
    tokenizer = build_demo_tokenizer()
    config = Qwen2Config(**QWEN25_15B_WIDTH, num_hidden_layers=layers, max_position_embeddings=max(tokens, 1024),
                         num_labels=1, pad_token_id=tokenizer.pad_token_id, attn_implementation="sdpa")
    torch.manual_seed(0)
    model = Qwen2ForSequenceClassification(config).to(torch.bfloat16)
    rm = VerifyRM(model, tokenizer, device="cpu", max_length=tokens, batch_size=sequences,
                  max_tokens_per_pass=2 * tokens if variant == "token_budget" else None,
                  param_offload=variant == "param_offload")
    learner = (Before if variant == "before" else RMLearner)(rm, lr=1e-5, batch_size=sequences,
                                                             gradient_checkpointing=variant == "checkpointing")
    rng = random.Random(0)

    def digits() -> str:  # 2,000 digits: cut to 1,500 characters, then to `tokens` tokens
        return "".join(rng.choice("0123456789") for _ in range(2000))

    batches = [[Pair("1+1=", "2", digits(), digits()) for _ in range(sequences // 2)] for _ in range(updates)]
    lengths = rm.token_lengths(["1+1="], ["2"], [batches[0][0].positive])
    assert lengths == [tokens], lengths
    if variant == "timing":  # plain and checkpointed updates alternated on one learner: the same load on both
        return timing(learner, batches)
    phases = {}
    step, norms = learner._optimizer_step, learner._update_norms

    def measured(name, call):
        def wrapped(*args):
            if name == "step":
                phases["passes"] = resident()[1] - base  # the snapshot and the passes before this step
            reset_peak()
            result = call(*args)
            phases[name] = resident()[1] - base
            reset_peak()
            return result
        return wrapped

    learner._optimizer_step, learner._update_norms = measured("step", step), measured("norms", norms)
    times = []
    for pairs in batches:  # the last update's peaks: AdamW's moments, made in the first, are in its baseline
        base, _ = resident()
        reset_peak()
        start = time.perf_counter()
        learner.update(pairs)
        times.append(time.perf_counter() - start)
    assert learner.updates == updates
    return {"variant": variant, "peak_mb": max(phases.values()) / MB, **{f"{k}_mb": v / MB for k, v in phases.items()},
            "update_s": statistics.median(times[1:] or times), "baseline_mb": base / MB,
            "parameters": sum(p.numel() for p in model.parameters())}


def timing(learner, batches) -> dict:
    """Seconds (wall and CPU) of updates with gradient checkpointing off and on, alternated, after one warm-up."""
    learner.update(batches[0])
    seconds = {False: [], True: []}
    for i, pairs in enumerate(batches[1:]):
        checkpointing = i % 2 == 1
        if checkpointing:
            learner.rm.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        else:
            learner.rm.model.gradient_checkpointing_disable()
        wall, cpu = time.perf_counter(), time.process_time()
        learner.update(pairs)
        seconds[checkpointing].append((time.perf_counter() - wall, time.process_time() - cpu))
    return {key: {"wall_s": statistics.median(w for w, _ in runs), "cpu_s": statistics.median(c for _, c in runs),
                  "updates": len(runs)}
            for key, runs in (("plain", seconds[False]), ("checkpointing", seconds[True]))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=1, help="decoder layers (Qwen2.5-1.5B has 28)")
    parser.add_argument("--tokens", type=int, default=1024, help="tokens per sequence (Cooper's RM: 1,024)")
    parser.add_argument("--sequences", type=int, default=8, help="sequences per update (a pair is two)")
    parser.add_argument("--updates", type=int, default=2, help="updates per variant (times: those after the first)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {','.join(VARIANTS)}")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    parser.add_argument("--timing", action=argparse.BooleanOptionalAction, default=True,
                        help="time plain against checkpointed updates (alternated in one more process)")
    parser.add_argument("--timed", type=int, default=2, help="updates of each kind the timing takes (after a warm-up)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.layers, args.tokens, args.sequences, args.updates)))
        return 0
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"--variants: unknown {', '.join(unknown)} (known: {', '.join(VARIANTS)})")
    shape = f"{args.layers} layer(s), {args.sequences} sequences x {args.tokens} tokens, bf16 + float32 masters"
    print(f"RM update at Qwen2.5-1.5B's width, {shape}; MB above the process's resident memory before the updates",
          flush=True)
    rows = []
    for variant in variants:
        done = subprocess.run(worker_command(variant, args), capture_output=True, text=True, env=WORKER_ENV)
        if done.returncode != 0:
            print(f"{variant}: failed ({done.returncode})\n{done.stderr[-3000:]}", flush=True)
            continue
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"  {variant}: peak {rows[-1]['peak_mb']:.0f} MB", flush=True)
    plain = next((r for r in rows if r["variant"] == "plain"), None)
    header = ["variant", "peak MB", "passes MB", "step MB", "norms MB", "peak vs plain"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] if args.markdown else \
        [f"{'variant':<15}" + "".join(f"{h:>15}" for h in header[1:])]
    for r in rows:
        cells = [f"{r['peak_mb']:.0f}", f"{r['passes_mb']:.0f}", f"{r['step_mb']:.0f}", f"{r['norms_mb']:.0f}",
                 f"{r['peak_mb'] - plain['peak_mb']:+.0f} MB" if plain else "–"]
        lines.append("| " + " | ".join([r["variant"], *cells]) + " |" if args.markdown else
                     f"{r['variant']:<15}" + "".join(f"{c:>15}" for c in cells))
    if rows:
        lines.append(f"parameters: {rows[0]['parameters']:,}; resident memory before the measured update "
                     f"{rows[0]['baseline_mb']:.0f} MB")
    ok = len(rows) == len(variants)
    if args.timing:
        done = subprocess.run(worker_command("timing", args), capture_output=True, text=True, env=WORKER_ENV)
        if done.returncode != 0:
            print(f"timing: failed ({done.returncode})\n{done.stderr[-3000:]}", flush=True)
            ok = False
        else:
            t = json.loads(done.stdout.strip().splitlines()[-1])
            plain_t, check_t = t["plain"], t["checkpointing"]
            lines.append(f"update time, plain vs gradient checkpointing (alternated in one process, median of "
                         f"{plain_t['updates']} each): wall {plain_t['wall_s']:.1f} s vs {check_t['wall_s']:.1f} s "
                         f"({check_t['wall_s'] / plain_t['wall_s']:.2f}x); CPU {plain_t['cpu_s']:.1f} s vs "
                         f"{check_t['cpu_s']:.1f} s ({check_t['cpu_s'] / plain_t['cpu_s']:.2f}x)")
    print("\n".join(lines))
    return 0 if ok else 1


def worker_command(variant: str, args) -> list[str]:
    updates = 1 + 2 * args.timed if variant == "timing" else args.updates
    return [sys.executable, os.path.abspath(__file__), "--worker", variant, "--layers", str(args.layers),
            "--tokens", str(args.tokens), "--sequences", str(args.sequences), "--updates", str(updates)]


# A fixed mmap threshold: glibc otherwise raises it as large blocks are freed (up to 32 MiB) and keeps freed heap
# memory, which the next update reuses unseen; with it, what is freed goes back and the resident memory follows
# what is live
WORKER_ENV = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(1 << 20)}


if __name__ == "__main__":
    sys.exit(main())
