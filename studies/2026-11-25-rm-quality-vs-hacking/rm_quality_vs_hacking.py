"""How the quality of a frozen reward model decides whether GRPO against it helps or gets gamed.

    python -m coreward.demo.rm runs/demo_rm              # a demo RM build: run/checkpoint-* after every epoch
    python benchmarks/studies/rm_quality_vs_hacking.py runs/demo_rm [--steps 30] [--epochs 1,2,4,8] [--output DIR]

Each checkpoint of one demo-RM build (the same recipe stopped after 1, 2, ... epochs) is the frozen reward of
the demo's static-RM run (`configs/demo/model.yaml`, same seed and budget as `coreward demo`). For each, the
table gives the RM's held-out accuracy at that epoch (rule labels, from the build's metrics.jsonl), the
training reward and the verified accuracy of the same rollouts (means of the first and of the last 5 steps),
and the trained policy's held-out avg@8 on 500 demo test problems, against the warm-start policy's.

Reward hacking shows as a reward that rises while the verified accuracy of the same rollouts does not.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]  # benchmarks/studies/ -> the repository


def checkpoints_by_epoch(build: Path) -> dict[int, tuple[Path, float]]:
    """epoch -> (checkpoint directory, held-out accuracy logged at the end of that epoch)."""
    run = build / "run"
    accuracy = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if "eval_accuracy" in row:
            accuracy[round(row["epoch"])] = row["eval_accuracy"]
    steps = sorted(int(p.name.split("-")[1]) for p in run.glob("checkpoint-*"))
    return {epoch: (run / f"checkpoint-{step}", accuracy.get(epoch, float("nan")))
            for epoch, step in enumerate(steps, start=1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("build", type=Path, help="a demo RM build directory (python -m coreward.demo.rm DIR)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--epochs", default="", help="comma-separated epochs (default: all)")
    parser.add_argument("--eval-problems", type=int, default=500)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()

    from coreward.data.benchmarks import load_benchmark
    from coreward.demo.policy import ensure_demo_policy
    from coreward.demo.run import Budget, final_metrics, heldout_avg, method_config
    from coreward.grpo.train import run_training

    output = args.output or Path(tempfile.mkdtemp(prefix="rm_quality_"))
    budget = Budget(steps=args.steps, eval_problems=args.eval_problems, eval_n=8, curve_every=0, curve_problems=0)
    heldout = {"demo": load_benchmark("demo", split="test", limit=args.eval_problems)}

    def evaluate_model(model: Path | str, name: str) -> float:
        return heldout_avg(model, heldout, n=8, seed=0, output_dir=output / "eval" / name)

    checkpoints = checkpoints_by_epoch(args.build)
    wanted = [int(e) for e in args.epochs.split(",") if e] or sorted(checkpoints)
    baseline = evaluate_model(ensure_demo_policy(), "baseline")
    lines = [
        f"warm-start policy: held-out avg@8 {100 * baseline:.1f}; {args.steps} GRPO steps per row, seed 0",
        "",
        ("| RM epochs | RM held-out acc. | train reward (first 5 → last 5) | train verified acc. (first 5 → last 5) "
        "| held-out avg@8 | Δ |"),
        "|---:|---:|---|---|---:|---:|",
    ]
    for epoch in wanted:
        checkpoint, rm_accuracy = checkpoints[epoch]
        config = method_config("model", budget, seed=0)
        config.rewards[0].params["path"] = str(checkpoint)
        run_dir = output / f"epoch-{epoch}"
        result = run_training(config, output_dir=str(run_dir))
        first, last = final_metrics(run_dir, first=True), final_metrics(run_dir)
        avg = evaluate_model(result.final_model, f"epoch-{epoch}")
        lines.append(
            f"| {epoch} | {rm_accuracy:.2f} | {first['train_reward']:.2f} → {last['train_reward']:.2f} | "
            f"{100 * first['train_verified_accuracy']:.0f}% → {100 * last['train_verified_accuracy']:.0f}% | "
            f"{100 * avg:.1f} | {100 * (avg - baseline):+.1f} |"
        )
        print(lines[-1], flush=True)
    print("\n".join(lines))
    (output / "table.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
