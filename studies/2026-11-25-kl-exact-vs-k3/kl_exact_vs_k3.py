"""kl/from_init, exact over the whole vocabulary vs the sampled k3 estimator, on one demo run.

    python benchmarks/kl_exact_vs_k3.py [--steps 60] [--lr 2e-4] [--seed 3] [--plot docs/kl_exact_vs_k3.png]

Trains the rule demo (configs/demo/rule.yaml, no periodic evaluation) at `--lr` (4× the demo's 5e-5 by default,
the hackability map's setting) with `kl_from_init_estimator: exact`, which logs both estimators of the same
step's samples (`kl/from_init` exact, `kl/from_init_k3`). Prints, for each, how much it moves between consecutive
steps (mean |Δ KL|, mean |Δ √KL|) and how many steps go backwards along √KL, i.e. √KL smaller than the step
before while the policy only moves away from π_init in the long run. Then trains the same run again with
`kl_from_init_estimator: k3`: the metric's passes draw no random numbers, so it is the same trajectory (checked:
its kl/from_init equals the first run's kl/from_init_k3), and `time/kl_from_init` of the two runs is the price of
each estimator. Writes a PNG of √KL per step and of verified accuracy against √KL for both. 7 min wall (2 min 51 s
of CPU) on a loaded 2-core CPU, 2026-11-25 (docs/figures.md).
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]


def train(steps: int, lr: float, seed: int, estimator: str, run_dir: Path) -> list[dict]:
    from coreward.grpo.config import TrainConfig
    from coreward.grpo.train import run_training
    from coreward.runtime.config import load_config
    from coreward.runtime.metrics import read_metrics

    config = load_config(TrainConfig, REPO / "configs" / "demo" / "rule.yaml", [
        "data.eval_every=0", f"grpo.save_steps={steps + 1}", f"grpo.learning_rate={lr}", f"seed={seed}",
        f"kl_from_init_estimator={estimator}"])
    run_training(config, output_dir=str(run_dir), max_steps=steps)
    return [row for row in read_metrics(run_dir / "metrics.jsonl") if "kl/from_init" in row]


def variation(values: list[float]) -> dict[str, float]:
    """How a per-step KL curve moves between consecutive steps."""
    root = [math.sqrt(max(v, 0.0)) for v in values]
    steps = list(zip(values, values[1:]))
    return {
        "mean |Δ KL|": statistics.mean(abs(b - a) for a, b in steps),
        "mean |Δ √KL|": statistics.mean(abs(b - a) for a, b in zip(root, root[1:])),
        "steps backwards along √KL": sum(b < a for a, b in zip(root, root[1:])),
        # the path walked beyond the net change: 0 for a curve that only goes one way
        "back-and-forth √KL": sum(abs(b - a) for a, b in zip(root, root[1:])) - abs(root[-1] - root[0]),
    }


def plot(rows: list[dict], path: Path, title: str) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    steps = [row["step"] for row in rows]
    curves = {"exact (whole vocabulary)": [row["kl/from_init"] for row in rows],
              "k3 (sampled tokens)": [row["kl/from_init_k3"] for row in rows]}
    accuracy = [row["verified_accuracy"] for row in rows]
    figure = Figure(figsize=(11, 4.2))
    FigureCanvasAgg(figure)
    left, right = figure.subplots(1, 2)
    for (name, values), color in zip(curves.items(), ("tab:blue", "tab:orange")):
        root = [math.sqrt(max(v, 0.0)) for v in values]
        left.plot(steps, root, marker=".", color=color, label=name)
        right.plot(root, accuracy, marker=".", color=color, label=name, alpha=0.8)
    left.set(xlabel="step", ylabel="√KL(π ‖ π_init)  (√nats per completion)", title="√KL per step")
    right.set(xlabel="√KL(π ‖ π_init)", ylabel="verified accuracy of the step's rollouts",
              title="the same steps along √KL (joined in step order)")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend()
    figure.suptitle(title)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--plot", default=str(REPO / "docs" / "kl_exact_vs_k3.png"))
    parser.add_argument("--no-k3-run", action="store_true", help="skip the second (k3-only) run")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        rows = train(args.steps, args.lr, args.seed, "exact", Path(tmp) / "exact")
        k3_rows = [] if args.no_k3_run else train(args.steps, args.lr, args.seed, "k3", Path(tmp) / "k3")

    print(f"rule demo, lr {args.lr:g}, seed {args.seed}, {len(rows)} steps; both estimators on each step's samples")
    exact, k3 = variation([r["kl/from_init"] for r in rows]), variation([r["kl/from_init_k3"] for r in rows])
    print(f"{'':28}{'exact':>10}{'k3':>10}")
    for key in exact:
        print(f"{key:28}{exact[key]:10.3f}{k3[key]:10.3f}")
    last = rows[-1]
    print(f"last step: exact {last['kl/from_init']:.3f}, k3 {last['kl/from_init_k3']:.3f} nats per completion; mean "
          f"over the steps: exact {statistics.mean(r['kl/from_init'] for r in rows):.3f}, "
          f"k3 {statistics.mean(r['kl/from_init_k3'] for r in rows):.3f}")
    print("k3 of steps 30-35: " + ", ".join(f"{r['kl/from_init_k3']:.2f}" for r in rows[29:35])
          + "; exact: " + ", ".join(f"{r['kl/from_init']:.2f}" for r in rows[29:35]))
    time_exact = statistics.mean(r["time/kl_from_init"] for r in rows)
    step_exact = statistics.mean(r["step_time"] for r in rows if "step_time" in r)
    print(f"time/kl_from_init, exact run: {time_exact:.3f} s of a {step_exact:.2f} s mean step")
    if k3_rows:
        time_k3 = statistics.mean(r["time/kl_from_init"] for r in k3_rows)
        step_k3 = statistics.mean(r["step_time"] for r in k3_rows if "step_time" in r)
        print(f"time/kl_from_init, k3 run:    {time_k3:.3f} s of a {step_k3:.2f} s mean step")
        same = max(abs(a["kl/from_init_k3"] - b["kl/from_init"]) / max(b["kl/from_init"], 1e-3)
                   for a, b in zip(rows, k3_rows))
        print(f"same trajectory: k3 run's kl/from_init vs exact run's kl/from_init_k3, largest relative gap {same:.1e}")
    plot(rows, Path(args.plot), f"kl/from_init on the rule demo at lr {args.lr:g}, seed {args.seed}: exact vs k3")
    print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
