"""One torch thread against torch's default, per model size, on this machine's CPU: where `torch_threads` left
unset should switch from one thread to the default (`coreward.runtime.devices.pick_torch_threads`).

    python -m benchmarks.speed.threads_by_size [--hidden 128,256,512,1024] [--repeats 3]

For each size it builds a random Qwen3 model of the demo policy's layout (4 layers, head size 32, MLP 3x wide,
the demo tokenizer's 65 symbols) and times what a demo GRPO step does with it: sampling 128 completions of 32
tokens after a 20-token prompt (`generate`, KV cache) and one forward and backward pass over those 128 x 52
tokens. Each at 1 thread and at torch's default (one per core), best of `--repeats`, in one run, with the load
average printed: on cores shared with other jobs the default loses more (docs/figures.md).
"""

from __future__ import annotations

import argparse
import os
import time


def build(hidden: int):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(vocab_size=65, hidden_size=hidden, intermediate_size=3 * hidden, num_hidden_layers=4,
                         num_attention_heads=hidden // 32, num_key_value_heads=max(1, hidden // 64), head_dim=32,
                         max_position_embeddings=256, tie_word_embeddings=True, pad_token_id=0, bos_token_id=1,
                         eos_token_id=2)
    return Qwen3ForCausalLM(config).float()


def step_seconds(model, threads: int, repeats: int) -> tuple[float, float]:
    """(generation, forward + backward) seconds, best of `repeats`, on `threads` threads."""
    import torch

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    prompts = torch.randint(3, 65, (128, 20))
    best_generate = best_update = float("inf")
    for _ in range(repeats):
        model.eval()
        start = time.perf_counter()
        with torch.no_grad():
            rows = model.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=32,
                                  min_new_tokens=32, do_sample=True, top_k=0, pad_token_id=0)
        best_generate = min(best_generate, time.perf_counter() - start)
        model.train()
        start = time.perf_counter()
        logits = model(rows).logits
        torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 65), rows[:, 1:].reshape(-1)).backward()
        best_update = min(best_update, time.perf_counter() - start)
        model.zero_grad(set_to_none=True)
    return best_generate, best_update


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", default="128,256,512,1024", help="hidden sizes, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import torch

    from benchmarks._common import machine

    print(machine())
    default = torch.get_num_threads()
    print(f"torch's default: {default} threads\n")
    print(f"{'hidden':>6} {'parameters':>11} | {'1 thread: gen + update s':>24} | {f'{default} threads':>16} | "
          f"{'default / 1 thread':>18}")
    for hidden in (int(h) for h in args.hidden.split(",")):
        model = build(hidden)
        parameters = sum(p.numel() for p in model.parameters())
        one = step_seconds(model, 1, args.repeats)
        many = step_seconds(model, default, args.repeats)
        print(f"{hidden:>6} {parameters / 1e6:10.1f}M | {one[0]:9.2f} + {one[1]:5.2f} = {sum(one):6.2f} | "
              f"{sum(many):16.2f} | {sum(many) / sum(one):18.2f}")
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
