"""Runs run.py's decisions (the learning-rate pick, the frozen RM's matched checkpoints) and analyze.py end to end on
a runs directory of random numbers in the shape run.py writes, so that a fault in either shows before the real
results exist. Its numbers mean nothing. Then the record (`--record`): every job kept, copied back on a fresh machine
from it alone, which jobs count as done and which run again, and analyze.py on the record's copy.

    python studies/2026-12-05-preregistered-parts-b-c/synthetic_check.py [WORK_DIR]    # default: a temporary one
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path


HERE = Path(__file__).resolve().parent
OUT = Path("runs/prereg/smol")  # run.py's, relative to the working directory


def results(name: str, n: int, value: float) -> None:
    (OUT / name).mkdir(parents=True, exist_ok=True)
    (OUT / name / "results.json").write_text(json.dumps({"benchmarks": {"arith": {f"avg@{n}": value}}}))


def metrics(rng: random.Random, run: str, steps: int, cpu_per_step: float, rm: bool, collapse: bool) -> None:
    """metrics.jsonl rows with what the decisions and the analysis read; a collapsing run's accuracy falls midway."""
    (OUT / run).mkdir(parents=True, exist_ok=True)
    rows = []
    for step in range(1, steps + 1):
        accuracy = 0.05 if collapse and step > steps // 2 else min(0.9, 0.1 + 0.01 * step)
        row = {"step": step, "verified_accuracy": accuracy + rng.uniform(-0.05, 0.05), "reward": accuracy,
               "process_cpu_s": cpu_per_step * step}
        if rm:
            row |= {"rm/accepted_score": 0.8, "rm/rejected_score": min(0.8, 0.2 + 0.004 * step)}
        rows.append(row)
    (OUT / run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (OUT / run / "config.yaml").write_text("guard:\n  enabled: true\n")


def build(rng: random.Random, run) -> None:
    results("eval-base", 24, 0.15)
    for rate in run.RATES:
        for seed in run.SEEDS_PICK:
            results(f"eval-pick-lr{rate}-s{seed}", 8, rng.random())
    for seed in run.SEEDS_B:
        for arm, cpu in (("rule", 12), ("cooper", 50), ("cooper_rn", 40)):
            metrics(rng, f"{arm}-s{seed}", run.STEPS, cpu, rm=arm != "rule", collapse=arm == "cooper" and seed % 3 == 0)
            results(f"eval-{arm}-s{seed}", 24, rng.random())
            results(f"eval-best-{arm}-s{seed}", 8, rng.random())
        # the last seed's frozen run never reaches the Cooper arms' CPU-seconds: the departure the analysis names
        metrics(rng, f"model-s{seed}", run.FROZEN_STEPS, 13 if seed != run.SEEDS_B[-1] else 5, rm=True,
                collapse=seed % 2 == 0)
        for what, n in (("h1", 24), ("h2", 24), ("best", 8)):
            results(f"eval-model_{what}-s{seed}", n, rng.random())
    for seed in run.SEEDS_C:
        for method in run.METHODS_C:
            metrics(rng, f"{method}-s{seed}", run.STEPS, 30, rm=False, collapse=method in ("entropy", "majority"))
            results(f"eval-{method}-s{seed}", 24, rng.random())
    (OUT / "cpu.jsonl").write_text(json.dumps({"job": "rm-train", "cpu_s": 900.0, "wall_s": 1.0, "exit": 0}) + "\n")


def main() -> None:
    work = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="parts-b-c-check-"))
    work.mkdir(parents=True, exist_ok=True)
    os.chdir(work)
    spec = importlib.util.spec_from_file_location("parts_b_c_run", HERE / "run.py")
    run = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = run  # its dataclasses look their module up
    spec.loader.exec_module(run)
    build(random.Random(0), run)
    print("picked rate:", run.pick_rate())
    for seed in run.SEEDS_B:
        matched = run.match(seed)
        assert matched["H1"]["reached"] == (seed != run.SEEDS_B[-1]), matched
        assert matched["best"]["checkpoint_step"] % run.FROZEN_EVERY == 0, matched
    analysis = subprocess.run([sys.executable, str(HERE / "analyze.py"), str(OUT)], capture_output=True, text=True)
    print(analysis.stdout, analysis.stderr, sep="")
    assert analysis.returncode == 0 and "Holm p" in analysis.stdout and "PART C" in analysis.stdout
    weights_check(run)
    record_check(run, work)
    print(f"synthetic check passed ({work})")


def weights_check(run) -> None:
    """free_weights removes a training's checkpoints and RM weights only once every job reading them is done, and
    keeps its policy and its small outputs."""
    queue = run.jobs()
    trainings = ("cooper-s2000", "model-s2001", "co_rewarding_2-s2000")
    for name in trainings:
        for folder in ("checkpoint-5", "checkpoint-10", "final/reward_sources", "best/reward_sources"):
            (OUT / name / folder).mkdir(parents=True, exist_ok=True)
            (OUT / name / folder / "weights.bin").write_bytes(b"0")
        (OUT / name / "final" / "COREWARD_COMPLETE").write_text("")
        (OUT / name / "final" / "adapter_model.safetensors").write_bytes(b"0")
    finished = {job.name for job in queue} - {"eval-model_best-s2001", "eval-best-cooper-s2000"}
    assert run.free_weights(queue, finished - {"co_rewarding_2-s2000"}) == []  # its training itself not done
    removed = run.free_weights(queue, finished)
    assert {path.relative_to(OUT).parts[0] for path in removed} == {"co_rewarding_2-s2000"}, removed
    assert (OUT / "model-s2001" / "checkpoint-5").is_dir()
    assert (OUT / "cooper-s2000" / "final" / "reward_sources").is_dir()
    removed = run.free_weights(queue, finished | {"eval-model_best-s2001", "eval-best-cooper-s2000"})
    assert len(removed) == 8 and not any((OUT / name / "checkpoint-5").exists() for name in trainings), removed
    assert all((OUT / name / "final" / "adapter_model.safetensors").is_file() for name in trainings)
    assert all((OUT / name / "metrics.jsonl").is_file() for name in trainings)


def record_check(run, work: Path) -> None:
    """Keeps every job's outputs in a record, then, on a fresh machine holding the record alone, checks what counts
    as done: all of it; with one evaluation missing, its training runs again (its weights are gone) and the RM's build
    with it where that training reads it; the analysis reads the record's copy as it read the runs."""
    queue = run.jobs()
    record = run.Record(work / "record", commit=False)
    cpu_lines = {line["job"]: line for line in map(json.loads, (OUT / "cpu.jsonl").read_text().splitlines())}
    for job in queue:
        record.keep(job, [cpu_lines[job.name]] if job.name in cpu_lines else [])
    fresh = work / "fresh"
    fresh.mkdir()
    os.chdir(fresh)
    assert run.finished_jobs(queue, record) == {job.name for job in queue}
    (record.folder / "done" / "eval-best-cooper_rn-s2003").unlink()
    finished = run.finished_jobs(queue, record)
    assert {job.name for job in queue} - finished == {"eval-best-cooper_rn-s2003", "cooper_rn-s2003", "rm-train"}, \
        sorted({job.name for job in queue} - finished)
    record.restore(finished & record.recorded())
    assert run.picked_rate() == json.loads((work / OUT / "pick.json").read_text())["picked"]
    assert not (OUT / "cooper_rn-s2003" / "metrics.jsonl").exists()  # it runs again and writes its own
    ours = subprocess.run([sys.executable, str(HERE / "analyze.py"), str(work / OUT)], capture_output=True, text=True)
    kept = subprocess.run([sys.executable, str(HERE / "analyze.py"), str(record.folder / OUT)], capture_output=True,
                          text=True)
    assert kept.returncode == 0 and kept.stdout == ours.stdout.replace(str(work / OUT), str(record.folder / OUT))
    os.chdir(work)


if __name__ == "__main__":
    main()
