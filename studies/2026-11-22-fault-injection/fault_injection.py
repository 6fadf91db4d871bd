"""Kill-and-resume under fire: seeded SIGKILLs at random moments of real `coreward train` runs, then `--resume`.

    python benchmarks/fault_injection.py [--cycles 3] [--kills 4] [--steps 12] [--methods rule,cooper,co_rewarding_2]
                                         [--nproc 2]

For each method and cycle (cycle c trains with seed c), a run of `--steps` steps is made twice: once without
interruption (the reference, in this process) and once as `coreward train` subprocesses, each killed with
SIGKILL (`--kills` of them, by an RNG seeded with method and cycle: half at kill points of
`tests.helpers.kill_resume` drawn without repeats (generation, reward, update, a half-written checkpoint,
half-written reward-source state, before rotation), half "timed", a random 0-0.4 s after the launch's first
new checkpoint, wherever the run then is) and resumed with `--resume` until the run completes. It then
checks, and the table counts:

* every resume picked the newest complete checkpoint (never a half-written one), which loads in full;
* metrics.jsonl has each step exactly once (steps missing or duplicated: the "steps lost");
* the final weights, optimizer state and reward-source state (Cooper's RM and its optimizer, Co-rewarding-II's
  teacher) equal the uninterrupted run's: max |difference| over every tensor;
* work redone: steps logged after the last complete checkpoint at the moment of each kill.

With `--nproc 2` every run (the reference too) is a torchrun launch of two processes (gloo, CPU): a kill at a
named point hits one rank, drawn per cycle (torchrun then stops the other), and a timed kill takes the
whole process group.

The runs use a tiny policy taught four demo problems by heart (so rewards vary and weights move) and a tiny
random RM for Cooper, built here; 2 prompts × 4 completions a step, a checkpoint every step, 1 thread.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch


# the kill-and-resume harness and the tiny-model builders are test machinery, kept in tests/helpers
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs" / "demo"


def build_models(root: Path) -> tuple[Path, Path]:
    """The memorized tiny policy and a random tiny VerifyRM (the recipes of tests/conftest.py's fixtures)."""
    from tests.helpers.tiny_models import build_memorized_policy, build_random_rm

    return build_memorized_policy(root / "policy"), build_random_rm(root / "rm")


def overrides_for(method: str, policy: Path, rm: Path, seed: int, nproc: int = 1) -> list[str]:
    shared = [f"model.name_or_path={policy}", "data.limit=4", "data.eval_every=0", "grpo.num_generations=4",
              f"grpo.per_device_train_batch_size={8 // nproc}", "grpo.max_completion_length=24", "grpo.save_steps=1",
              "grpo.learning_rate=1e-3", "torch_threads=1", f"seed={seed}"]
    if method == "cooper":
        shared += [f"rewards.0.params.rm={rm}", "rewards.0.params.lr=0.001"]
    return shared


def max_difference(a: Path, b: Path) -> float:
    """Max |a - b| over every tensor of two checkpoint files (safetensors or torch-saved optimizer state)."""
    if a.suffix == ".safetensors":
        from safetensors.torch import load_file

        first, second = load_file(a), load_file(b)
    else:
        first, second = flatten(torch.load(a, weights_only=True)), flatten(torch.load(b, weights_only=True))
    if sorted(first) != sorted(second):
        return float("inf")
    return max((first[k].double() - second[k].double()).abs().max().item() for k in first if first[k].numel())


def flatten(tree, prefix: str = "") -> dict[str, torch.Tensor]:
    out = {}
    if isinstance(tree, dict):
        for key, value in tree.items():
            out.update(flatten(value, f"{prefix}{key}."))
    elif isinstance(tree, (list, tuple)):
        for i, value in enumerate(tree):
            out.update(flatten(value, f"{prefix}{i}."))
    elif isinstance(tree, torch.Tensor):
        out[prefix] = tree
    elif isinstance(tree, (int, float)) and not isinstance(tree, bool):
        out[prefix] = torch.tensor(float(tree))
    return out


STATE_FILES = {
    "rule": [],
    "co_rewarding_1": [],
    "cooper": ["reward_sources/cooper/rm/model.safetensors", "reward_sources/cooper/optimizer.pt"],
    "co_rewarding_2": ["reward_sources/co_rewarding_2/teacher.safetensors"],
}


def cycle(method: str, seed: int, steps: int, kills: int, policy: Path, rm: Path, root: Path, nproc: int = 1) -> dict:
    from coreward.grpo.checkpoints import complete_checkpoints
    from coreward.grpo.config import TrainConfig
    from coreward.grpo.train import run_training
    from coreward.runtime.config import load_config
    from coreward.runtime.metrics import read_metrics
    from tests.helpers.kill_resume import PHASES, check_checkpoint, kill_and_resume, launch, train_command

    config = CONFIGS / f"{method}.yaml"
    overrides = overrides_for(method, policy, rm, seed, nproc)
    reference_dir = root / f"{method}-{seed}-reference"
    if nproc == 1:
        run_training(load_config(TrainConfig, config, overrides), output_dir=str(reference_dir), max_steps=steps)
    else:
        straight = launch(train_command(config, reference_dir, overrides, steps, resume=False, nproc=nproc), reference_dir)
        if straight.returncode != 0:
            raise SystemExit(f"the uninterrupted {method} run failed:\n{straight.log[-3000:]}")

    rng = random.Random(f"{method}:{seed}")  # a str seed is hashed deterministically (not by PYTHONHASHSEED)
    fault_rank = rng.randrange(nproc) if nproc > 1 else None
    named = kills - kills // 2  # half the kills at named points (drawn without repeats), half at random moments
    plan = [point for _ in range(-(-named // len(PHASES))) for point in rng.sample(PHASES, len(PHASES))][:named]
    plan += ["timed"] * (kills // 2)
    rng.shuffle(plan)
    run_dir = root / f"{method}-{seed}-killed"
    attempts = kill_and_resume(config, run_dir, overrides, steps, plan, rng, nproc=nproc, fault_rank=fault_rank)
    *killed, last = attempts
    logged = [row["step"] for row in read_metrics(run_dir / "metrics.jsonl")]
    newest = complete_checkpoints(run_dir)[-1]
    reference = reference_dir / f"checkpoint-{steps}"
    differences = [max_difference(newest / name, reference / name)
                   for name in ["model.safetensors", "optimizer.pt", *STATE_FILES[method]]]
    redone = []
    for attempt in killed:
        redone.append(attempt.last_logged_step - attempt.checkpoint_after)
    return {
        "kills": sum(a.killed for a in killed),
        "phases": [a.kill.split(":")[0] for a in killed if a.killed],
        "completed": last.returncode == 0 and f"finished at step {steps}" in last.log and check_checkpoint(newest) == steps,
        "resumes": len(attempts) - 1,
        "right_resumes": sum(a.resumed_from == a.expected_from is not None for a in attempts[1:]),
        "half_written_passed_over": sum(bool(a.incomplete) for a in killed),
        "steps_lost": len(set(range(1, steps + 1)) - set(logged)) + (len(logged) - len(set(logged))),
        "max_difference": max(differences),
        "redone": redone,
        "seconds": sum(a.seconds for a in attempts),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=3, help="kill-and-resume cycles per method (seeds 0..N-1)")
    parser.add_argument("--kills", type=int, default=4, help="SIGKILLs per cycle")
    parser.add_argument("--steps", type=int, default=12, help="optimizer steps per run")
    parser.add_argument("--methods", default="rule,cooper,co_rewarding_2")
    parser.add_argument("--nproc", type=int, choices=(1, 2), default=1, help="processes per run (torchrun when 2)")
    args = parser.parse_args()
    torch.set_num_threads(1)

    started = time.perf_counter()
    results: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        policy, rm = build_models(root)
        for method in args.methods.split(","):
            results[method] = []
            for seed in range(args.cycles):
                result = cycle(method, seed, args.steps, args.kills, policy, rm, root, args.nproc)
                results[method].append(result)
                print(f"{method} seed {seed}: {result['kills']} kills ({', '.join(result['phases'])}), "
                      f"completed={result['completed']}, steps lost {result['steps_lost']}, "
                      f"max |Δ| {result['max_difference']:.1e}, {result['seconds']:.0f} s", file=sys.stderr)

    print(f"\n{args.cycles} cycles per method, {args.kills} SIGKILLs drawn per cycle, {args.steps} steps per run, "
          f"{args.nproc} process(es) per run "
          f"({time.perf_counter() - started:.0f} s)\n")
    print("| method | SIGKILLs | runs completed | resumes from the newest complete checkpoint | half-written "
          "checkpoints passed over | steps lost (missing or duplicated) | max abs weight/state difference vs. "
          "uninterrupted | steps redone per kill |")
    print("|---|---|---|---|---|---|---|---|")
    totals = {"kills": 0, "completed": 0, "runs": 0, "lost": 0, "diff": 0.0}
    for method, rows in results.items():
        redone = [r for row in rows for r in row["redone"]]
        kills = sum(row["kills"] for row in rows)
        completed = sum(row["completed"] for row in rows)
        lost = sum(row["steps_lost"] for row in rows)
        diff = max(row["max_difference"] for row in rows)
        print(f"| {method} | {kills} | {completed}/{len(rows)} | {sum(r['right_resumes'] for r in rows)}/"
              f"{sum(r['resumes'] for r in rows)} | {sum(r['half_written_passed_over'] for r in rows)} | {lost} | "
              f"{diff:.1e} | {statistics.mean(redone) if redone else 0:.2f} |")
        totals["kills"] += kills
        totals["completed"] += completed
        totals["runs"] += len(rows)
        totals["lost"] += lost
        totals["diff"] = max(totals["diff"], diff)
    print(f"\ntotal: {totals['kills']} SIGKILLs, {totals['completed']}/{totals['runs']} runs completed, "
          f"{totals['lost']} steps lost, max |Δ| {totals['diff']:.1e}")


if __name__ == "__main__":
    main()
