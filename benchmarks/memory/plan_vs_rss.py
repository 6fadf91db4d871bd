"""The CPU memory plan (`coreward plan --device cpu`) against the peak resident memory `coreward train` measures.

Every GRPO config under configs/demo/ (sft.yaml trains the demo policy itself, no GRPO step: left out) in one
process, the rule and Cooper configs under FSDP2 on two gloo processes (`accelerate launch` of
configs/accelerate/fsdp2_cpu.yaml), and a random Qwen3-style policy of a width no config uses (hidden 1,792, 3
layers, the demo tokenizer's vocabulary) are trained for `--steps` steps (3: AdamW's moments exist from the first
step, so steps 2 and 3 are the steady state). Each process's peak resident set is read from the run's
memory.json / memory-rank1.json (`getrusage(RUSAGE_SELF).ru_maxrss`, written before the final model is saved), and
set beside two plans of the same run on this machine: the worst case (every prompt at the data's longest, every
completion at grpo.max_completion_length) and `--lengths data --from-run RUN_DIR` (the completions the run logged).

    OMP_NUM_THREADS=1 python -m benchmarks.memory.plan_vs_rss [--only rule,cooper] [--work /tmp/plan_vs_rss] [--markdown]

Runs are kept under --work with what they measured (measured.json): a second call plans them again without training
(`--remeasure` trains them again). One training process at a time (two for an FSDP2 case).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "configs" / "demo"
FSDP2_CPU = REPO / "configs" / "accelerate" / "fsdp2_cpu.yaml"
MIB = 1024**2
# what every run sets: no held-out evaluation or checkpoint inside the measured steps, one torch thread
COMMON = ["data.eval_every=0", "grpo.save_steps=100", "torch_threads=1"]
# a width no config uses: hidden 1,792 (Qwen3-style: q/k norms, head_dim 128, GQA), 3 layers; 4 prompts x 8
# rollouts a step, completions of up to 32 tokens
WIDE = {"hidden_size": 1792, "intermediate_size": 4608, "num_hidden_layers": 3, "num_attention_heads": 14,
        "num_key_value_heads": 2, "head_dim": 128}
WIDE_SETS = ["grpo.num_generations=8", "grpo.per_device_train_batch_size=32", "grpo.max_completion_length=32"]


def cases(work: Path) -> list[dict]:
    """name, config, --set items, processes (2: FSDP2 over gloo)."""
    out = [{"name": p.stem, "config": p, "sets": [], "processes": 1}
           for p in sorted(DEMO.glob("*.yaml")) if p.stem != "sft"]
    out += [{"name": f"{name} fsdp2x2", "config": DEMO / f"{name}.yaml", "sets": [], "processes": 2}
            for name in ("rule", "cooper")]
    out.append({"name": "qwen3-style h1792 x3", "config": DEMO / "rule.yaml", "processes": 1,
                "sets": [f"model.name_or_path={work / 'wide_policy'}", *WIDE_SETS]})
    return out


def build_wide_policy(directory: Path) -> Path:
    """A random Qwen3-style policy at WIDE's shape over the demo tokenizer (its vocabulary, 65 entries)."""
    if (directory / "config.json").is_file():
        return directory
    import torch
    import transformers

    from coreward.demo.model import build_demo_tokenizer

    tokenizer = build_demo_tokenizer()
    config = transformers.Qwen3Config(
        vocab_size=len(tokenizer), tie_word_embeddings=True, max_position_embeddings=512, **WIDE,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def run_dir(work: Path, case: dict) -> Path:
    return work / "runs" / case["name"].replace(" ", "_")


def train(case: dict, directory: Path, steps: int) -> list[int]:
    """Train the case; each process's peak RSS (bytes) from its memory file, rank 0 first."""
    import shutil

    shutil.rmtree(directory, ignore_errors=True)
    command = ["-m", "coreward.cli", "train", "--config", str(case["config"]), "--max-steps", str(steps),
               "--output-dir", str(directory)]
    for item in COMMON + case["sets"]:
        command += ["--set", item]
    if case["processes"] > 1:
        command = ["-m", "accelerate.commands.launch", "--config_file", str(FSDP2_CPU), "--num_processes",
                   str(case["processes"]), "--main_process_port", "0", "--mixed_precision", "no", *command]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, *command], capture_output=True, text=True, env=env)
    (directory.parent / f"{directory.name}.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"{case['name']}: coreward train exited {done.returncode}: {done.stderr[-1500:]}")
    files = [directory / "memory.json"] + [directory / f"memory-rank{r}.json" for r in range(1, case["processes"])]
    return [json.loads(f.read_text())["measured"]["peak_rss"] for f in files]


def planned(case: dict, directory: Path, lengths: str) -> dict:
    """`coreward plan --device cpu --json` of the case as it ran (FSDP2: 2 processes), worst case or data lengths."""
    command = [sys.executable, "-m", "coreward.cli", "plan", "--config", str(case["config"]), "--device", "cpu",
               "--json", "--lengths", lengths]
    if lengths == "data":
        command += ["--from-run", str(directory)]
    if case["processes"] > 1:
        command += ["--gpus", str(case["processes"]), "--engine", "fsdp2"]
    for item in COMMON + case["sets"]:
        command += ["--set", item]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if done.returncode not in (0, 3):
        raise RuntimeError(f"{case['name']}: coreward plan exited {done.returncode}: {done.stderr.strip()[-800:]}")
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/plan_vs_rss"), help="runs and measured.json")
    parser.add_argument("--only", help="comma-separated case names (default: all)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--remeasure", action="store_true", help="train again cases already measured")
    parser.add_argument("--no-train", action="store_true", help="plan only the cases already measured")
    parser.add_argument("--measure-only", action="store_true", help="train and measure, plan nothing")
    parser.add_argument("--markdown", action="store_true", help="print the table as markdown")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    build_wide_policy(args.work / "wide_policy")
    store = args.work / "measured.json"
    measured = json.loads(store.read_text()) if store.is_file() else {}
    chosen = [c for c in cases(args.work) if not args.only or c["name"] in args.only.split(",")]
    rows = []
    for case in chosen:
        directory = run_dir(args.work, case)
        if (args.remeasure or case["name"] not in measured) and not args.no_train:
            measured[case["name"]] = train(case, directory, args.steps)
            store.write_text(json.dumps(measured, indent=1) + "\n")
        if case["name"] not in measured or args.measure_only:
            continue
        worst, data = planned(case, directory, "worst"), planned(case, directory, "data")
        for rank, rss in enumerate(measured[case["name"]]):
            rows.append((case["name"] + (f" rank {rank}" if case["processes"] > 1 else ""), worst, data, rss))
    if args.markdown:
        print("| run | lengths from the run's data | planned (data lengths) | planned (worst case) | measured peak RSS "
              "| data plan / measured | worst / measured |")
        print("|---|---|---:|---:|---:|---:|---:|")
    for name, worst, data, rss in rows:
        lengths = data.get("lengths", {})
        said = f"prompt {lengths.get('prompt_tokens')}, completion {lengths.get('completion_tokens')}"
        if args.markdown:
            print(f"| {name} | {said} | {data['peak_bytes'] / MIB:,.0f} MiB | {worst['peak_bytes'] / MIB:,.0f} MiB | "
                  f"{rss / MIB:,.0f} MiB | {data['peak_bytes'] / rss:.2f} | {worst['peak_bytes'] / rss:.2f} |")
        else:
            print(f"{name:<28} measured {rss / MIB:7,.0f} MiB   data plan {data['peak_bytes'] / MIB:7,.0f} MiB "
                  f"({data['peak_bytes'] / rss:.2f}, {data['peak_phase']}; {said})   worst {worst['peak_bytes'] / MIB:7,.0f} "
                  f"MiB ({worst['peak_bytes'] / rss:.2f})")


if __name__ == "__main__":
    main()
