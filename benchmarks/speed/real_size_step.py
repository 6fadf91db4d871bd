"""Step time and peak memory of rule, Cooper and Co-rewarding-II with a policy of Qwen2.5-0.5B's shape.

    python -m benchmarks.speed.real_size_step [--methods rule,cooper,co_rewarding_2] [--steps 2] [--dtype bfloat16]

Nothing is downloaded: the policy is a random-initialised `Qwen2ForCausalLM` built from Qwen2.5-0.5B's
configuration (the numbers below, from its config.json), and Cooper's RM is a `Qwen2ForSequenceClassification`
of the same shape. The demo tokenizer stands in for Qwen's (its 65 ids are a subset of the 151,936 the model
has; sampled ids outside it decode to nothing), so rewards carry no signal: this measures cost, not learning.
Cooper's RM updates only on verified positives, which a random policy rarely writes, so its RM training cost
is mostly not in these figures (its memory, weights and AdamW state, is). Each method runs as its own
`coreward train` process on CPU (`--steps` steps, 2 prompts x 4 completions, 16 new tokens, policy in
`--dtype`); the figures are the mean step time from metrics.jsonl and the process's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]

# Qwen2.5-0.5B's config.json (written here: nothing is fetched)
QWEN25_05B = {
    "vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
    "num_key_value_heads": 2, "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True, "hidden_act": "silu", "max_window_layers": 21, "sliding_window": None, "use_sliding_window": False,
}


def build_models(root: Path, dtype: str) -> tuple[Path, Path]:
    """The random policy and a VerifyRM of the same shape, saved with the demo tokenizer."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from coreward.demo.model import build_demo_tokenizer
    from coreward.rm.model import VerifyRM

    tokenizer = build_demo_tokenizer()
    ids = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
               "pad_token_id": tokenizer.pad_token_id}
    torch.manual_seed(0)
    policy = Qwen2ForCausalLM(Qwen2Config(**QWEN25_05B, **ids)).to(getattr(torch, dtype))
    policy.generation_config.pad_token_id = tokenizer.pad_token_id
    policy.save_pretrained(root / "policy")
    tokenizer.save_pretrained(root / "policy")
    del policy
    VerifyRM.from_backbone(root / "policy", device="cpu", add_template_tokens=False, max_length=256) \
        .save_pretrained(root / "rm")
    return root / "policy", root / "rm"


def run_method(method: str, policy: Path, rm: Path, steps: int, dtype: str, out: Path) -> dict:
    overrides = [f"model.name_or_path={policy}", f"model.dtype={dtype}", "data.limit=8", "data.eval_every=0",
                 "grpo.num_generations=4", "grpo.per_device_train_batch_size=8", "grpo.max_completion_length=16",
                 "grpo.save_steps=1000", "torch_threads=2"]
    if method == "cooper":
        overrides += [f"rewards.0.params.rm={rm}", "rewards.0.params.batch_size=8"]
    command = [sys.executable, __file__, "--child", method, "--out", str(out), "--steps", str(steps), *overrides]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{method} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return json.loads((out / "figures.json").read_text())


def child(method: str, out: Path, steps: int, overrides: list[str]) -> None:
    from coreward.grpo.config import TrainConfig
    from coreward.grpo.train import run_training
    from coreward.runtime.config import load_config
    from coreward.runtime.metrics import read_metrics

    config = load_config(TrainConfig, REPO / "configs" / "demo" / f"{method}.yaml", overrides)
    run_training(config, output_dir=str(out / "run"), max_steps=steps)
    rows = [row for row in read_metrics(out / "run" / "metrics.jsonl") if "step_time" in row or "time/update" in row]
    times = [row.get("step_time", 0.0) for row in rows]
    figures = {
        "steps": len(rows),
        "mean_step_s": sum(times) / len(times) if times else None,
        "generation_s": sum(r.get("time/generation", 0.0) for r in rows) / max(1, len(rows)),
        "reward_s": sum(r.get("time/reward", 0.0) for r in rows) / max(1, len(rows)),
        "update_s": sum(r.get("time/update", 0.0) for r in rows) / max(1, len(rows)),
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,  # Linux: KiB
    }
    (out / "figures.json").write_text(json.dumps(figures))


def main() -> None:
    if "--child" in sys.argv:
        parser = argparse.ArgumentParser()
        parser.add_argument("--child")
        parser.add_argument("--out", type=Path)
        parser.add_argument("--steps", type=int)
        args, overrides = parser.parse_known_args()
        child(args.child, args.out, args.steps, overrides)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", default="rule,cooper,co_rewarding_2")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        policy, rm = build_models(Path(tmp), args.dtype)
        print(f"policy: random Qwen2.5-0.5B shape ({args.dtype}); RM: same shape, fp32; {args.steps} steps, CPU")
        print("| method | mean step s | generation s | reward s | update s | peak RSS GB |")
        print("| --- | --- | --- | --- | --- | --- |")
        for method in args.methods.split(","):
            out = Path(tmp) / method
            out.mkdir()
            f = run_method(method, policy, rm, args.steps, args.dtype, out)
            print(f"| {method} | {f['mean_step_s']:.1f} | {f['generation_s']:.1f} | {f['reward_s']:.1f} | "
                  f"{f['update_s']:.1f} | {f['peak_rss_gb']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
