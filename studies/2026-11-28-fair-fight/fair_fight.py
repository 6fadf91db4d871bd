"""Co-optimized against frozen reward models, judged on what users get: held-out accuracy of each run's final and
best-kept policy, paired over seeds, with each arm's total compute (RM building + RL) in CPU-seconds.

    python benchmarks/fair_fight.py MAP_DIR [MAP_DIR ...] --pair co_optimized_demo1:model_demo1 [--pair A:B ...]
        [--problems 500] [--n 4] [--seed 0] [--json out.json]

Reads the cells of one or more `coreward map` directories (map.json; every cell an ordinary run directory; a map still
running: its finished run directories) and, per finished cell:
    held-out    avg@n of `final/` and of `best/` (the policy the overoptimization guard kept at its best verified
                accuracy; `final/` when the guard kept none) on the demo's held-out problems, sampled as `coreward
                demo` scores its runs (temperature 0.7, top-p 0.95; demo/run.py `heldout_avg`); cached in the cell's
                fair_eval.json, so a second call costs nothing
    curves      final and peak verified accuracy of the training rollouts (EMA, the map's summary); "collapsed"
                when the final is below half the peak
    compute     the run's CPU-seconds (summary.json `process_cpu_s`: the process and its children, user + system;
                older runs: `train_runtime`, wall seconds of a one-thread run with a core of its own, flagged "wall")
and per arm (a config: the map's row) the RMs it reads (its config's `path`, `rm`, `member_rms`), each with its
build cost from the cache (`member.json` `build_s` of `demo:k`; `--build-cost NAME=SECONDS` for others, e.g. the
shipped `demo` RM), so an arm's total cost is its RMs' builds plus its mean RL cost.

Each `--pair A:B` is tested on the seeds (and learning rates) both arms ran, on final and on best-kept held-out
accuracy: the mean difference in points with its Student-t 95% interval, and the exact sign-flip (permutation) p of
the mean (every one of the 2^n sign patterns; two-sided). The number of tests made is printed with them: read a p
against 0.05 divided by it (Bonferroni) before calling a difference resolved.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import statistics
import sys
from pathlib import Path

import yaml
from compare_rewards import sign_flip_p, t_interval  # this directory is on sys.path when the script runs


EVAL_FILE = "fair_eval.json"


# --------------------------------------------------------------------------- one cell


@functools.cache
def heldout_records(problems: int) -> dict:
    """The demo's first `problems` held-out problems, loaded once for every model evaluated."""
    from coreward.data.benchmarks import load_benchmark
    from coreward.demo.run import TOY

    return {TOY.benchmark: load_benchmark(TOY.benchmark, split="test", limit=problems)}


def heldout(model_dir: Path, problems: int, n: int, seed: int, cache: Path) -> float:
    """avg@n of one saved policy on the demo's first `problems` held-out problems, as `coreward demo` scores runs."""
    from coreward.demo.run import TOY, heldout_avg
    from coreward.runtime.devices import torch_threads

    with torch_threads(1):
        return heldout_avg(model_dir, heldout_records(problems), n, seed, cache / f"eval-{model_dir.name}",
                           TOY.generation)


def evaluate_cell(run_dir: Path, problems: int, n: int, seed: int) -> dict:
    """The cell's held-out figures (cached in its fair_eval.json under these settings) and its compute."""
    key = f"problems={problems},n={n},seed={seed}"
    path = run_dir / EVAL_FILE
    saved = json.loads(path.read_text()) if path.is_file() else {}
    if key not in saved:
        best = run_dir / "best" if (run_dir / "best" / "config.json").is_file() else run_dir / "final"
        final = heldout(run_dir / "final", problems, n, seed, run_dir / "fair_eval")
        saved[key] = {"final": final, "best": final if best.name == "final" else heldout(best, problems, n, seed,
                                                                                          run_dir / "fair_eval"),
                      "best_kept": best.name == "best"}
        path.write_text(json.dumps(saved, indent=1) + "\n")
    summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").is_file() else {}
    cpu = summary.get("process_cpu_s")
    return {**saved[key], "cpu_s": cpu if cpu is not None else summary.get("train_runtime"),
            "cpu_kind": "cpu" if cpu is not None else "wall"}


def map_cells(map_dir: Path) -> list[dict]:
    """A map's finished cells at its longest horizon: from map.json once the map has ended, else (a map still running)
    from its run directories (runs/<reward>/lr<lr>_seed<seed>/ with a complete final/), summarized as `coreward map`
    does (EMA 0.6, evaluation/overoptimization.py)."""
    if (map_dir / "map.json").is_file():
        result = json.loads((map_dir / "map.json").read_text())
        horizon = str(max(result["settings"]["horizons"]))
        return [{**cell, "summary": cell["horizons"][horizon]} for cell in result["cells"]
                if cell["status"] == "done" and cell["horizons"].get(horizon)]
    from coreward.evaluation.overoptimization import summarize
    from coreward.evaluation.plots import load_run
    from coreward.experiments.hackability import MapSettings
    from coreward.grpo.train import final_complete

    cells = []
    for run_dir in sorted(map_dir.glob("runs/*/lr*_seed*")):
        if not final_complete(run_dir):
            continue
        lr, seed = run_dir.name[2:].split("_seed")
        summary = summarize(load_run(run_dir, run_dir.parent.name), MapSettings.smooth)  # the map's default
        if summary is not None:
            cells.append({"reward": run_dir.parent.name, "lr": float(lr), "seed": int(seed), "run_dir": str(run_dir),
                          "summary": summary.to_dict()})
    return cells


def rms_read(run_dir: Path) -> list[str]:
    """The RMs a run's rewards start from or score with: `model`'s path(s), `cooper`'s rm and member_rms."""
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    names = []
    for reward in config.get("rewards") or []:
        params = reward.get("params") or {}
        if reward.get("name") == "model":
            path = params.get("path", "demo")
            names += path if isinstance(path, list) else [path]
        elif reward.get("name") == "cooper":
            names += [params.get("rm", "demo"), *(params.get("member_rms") or [])]
    return names


def build_costs(overrides: dict[str, float]) -> dict[str, float]:
    """Seconds to build each cached demo ensemble member (its member.json `build_s`), and the given ones."""
    from coreward.runtime.assets import cache_root

    costs = {}
    for member in sorted(cache_root().glob("demo_rm_member*/member.json")):
        summary = json.loads(member.read_text())
        costs[summary["member"]] = float(summary["build_s"])
    return {**costs, **overrides}


# --------------------------------------------------------------------------- the report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("maps", type=Path, nargs="+", help="coreward map directories (their map.json)")
    parser.add_argument("--pair", action="append", default=[], help="A:B, two arms (map rows) to compare paired")
    parser.add_argument("--problems", type=int, default=500, help="held-out problems (the demo's final evaluation)")
    parser.add_argument("--n", type=int, default=4, help="samples per problem (avg@n; the demo's own evaluation draws 8)")
    parser.add_argument("--seed", type=int, default=0, help="the evaluation's sampling seed, the same for every model")
    parser.add_argument("--build-cost", action="append", default=[], help="NAME=SECONDS: an RM's build cost")
    parser.add_argument("--json", type=Path, help="write every cell's figures here")
    args = parser.parse_args()

    cells = {}
    for map_dir in args.maps:
        for cell in map_cells(map_dir):
            summary, run_dir = cell["summary"], Path(cell["run_dir"])
            print(f"evaluating {cell['reward']} seed {cell['seed']} ({run_dir})", file=sys.stderr, flush=True)
            cells[(cell["reward"], cell["lr"], cell["seed"])] = {
                **evaluate_cell(run_dir, args.problems, args.n, args.seed),
                "final_verified": summary["final_verified"], "peak_verified": summary["peak_verified"],
                "collapsed": summary["final_verified"] < 0.5 * summary["peak_verified"], "rms": rms_read(run_dir)}
    costs = build_costs({k: float(v) for k, v in (item.split("=", 1) for item in args.build_cost)})

    def pct(values: list[float]) -> str:
        mean, low, high = t_interval([100 * v for v in values])
        return f"{mean:.1f}" if math.isnan(low) else f"{mean:.1f} [{low:.1f}, {high:.1f}]"

    print(f"held out: the demo's first {args.problems} test problems, avg@{args.n}, temperature 0.7, top-p 0.95, "
          f"seed {args.seed}\n")
    print("| arm | seeds | held-out final | held-out best-kept | rollouts final | rollouts peak | collapsed "
          "| RMs read | RM builds (s) | RL (CPU-s, mean) | total (s) |")
    print("|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|")
    for arm in dict.fromkeys(k[0] for k in cells):
        mine = [v for k, v in sorted(cells.items()) if k[0] == arm]
        seeds = ",".join(str(k[2]) for k in sorted(cells) if k[0] == arm)
        rms = list(dict.fromkeys(mine[0]["rms"]))
        builds = [costs.get(rm) for rm in rms]
        build = sum(b for b in builds if b is not None) if all(b is not None for b in builds) else None
        rl = statistics.fmean(v["cpu_s"] for v in mine) if all(v["cpu_s"] is not None for v in mine) else None
        kind = "" if all(v["cpu_kind"] == "cpu" for v in mine) else " (wall)"
        print(f"| {arm} | {seeds} | {pct([v['final'] for v in mine])} | {pct([v['best'] for v in mine])} | "
              f"{pct([v['final_verified'] for v in mine])} | {pct([v['peak_verified'] for v in mine])} | "
              f"{sum(v['collapsed'] for v in mine)} of {len(mine)} | {', '.join(rms) or '–'} | "
              f"{'–' if build is None else f'{build:.0f}'} | {'–' if rl is None else f'{rl:.0f}{kind}'} | "
              f"{'–' if build is None or rl is None else f'{build + rl:.0f}'} |")
    seeds = sorted({k[2] for k in cells})
    print("\nPer seed, held-out final (best-kept) in %; * below half its rollouts' peak:\n")
    print("| arm | " + " | ".join(str(s) for s in seeds) + " |")
    print("|---|" + "---:|" * len(seeds))
    for arm in dict.fromkeys(k[0] for k in cells):
        row = []
        for seed in seeds:
            found = [v for k, v in cells.items() if k[0] == arm and k[2] == seed]
            row.append(f"{100 * found[0]['final']:.0f} ({100 * found[0]['best']:.0f}){'*' if found[0]['collapsed'] else ''}"
                       if found else "–")
        print(f"| {arm} | " + " | ".join(row) + " |")
    missing = sorted({rm for v in cells.values() for rm in v["rms"]} - set(costs))
    if missing:
        print(f"\nno build cost for {', '.join(missing)}: give it with --build-cost NAME=SECONDS")

    tests = 2 * len(args.pair)
    if tests:
        print(f"\nPaired over seeds, A − B in points ({tests} tests: final and best-kept per pair; Bonferroni "
              f"threshold 0.05/{tests} = {0.05 / tests:.4f}):\n")
    for pair in args.pair:
        a, b = pair.split(":")
        shared = sorted((lr, seed) for (arm, lr, seed) in cells if arm == a and (b, lr, seed) in cells)
        if not shared:
            print(f"- {a} − {b}: no seed both ran")
            continue
        for what in ("final", "best"):
            diffs = [100 * (cells[(a, lr, s)][what] - cells[(b, lr, s)][what]) for lr, s in shared]
            mean, low, high = t_interval(diffs)
            p = sign_flip_p(diffs)
            print(f"- {a} − {b}, held-out {what}: {mean:+.1f} [{low:+.1f}, {high:+.1f}] over {len(diffs)} seeds, "
                  f"sign-flip p = {p:.3f}")
    if args.json:
        args.json.write_text(json.dumps([{"arm": k[0], "lr": k[1], "seed": k[2], **v} for k, v in cells.items()],
                                        indent=1) + "\n")


if __name__ == "__main__":
    main()
