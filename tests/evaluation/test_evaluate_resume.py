"""`coreward eval` stopped by Ctrl-C keeps its finished batches and the same command again goes on from them: a real
evaluation of the demo policy in a new process, SIGINT sent once its first batch is kept, then the same evaluation
again, compared with one never stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd

from coreward.evaluation import EvalSettings, evaluate
from coreward.evaluation.kept import PARTIAL_DIR, kept_problems
from coreward.runtime.files import KEPT_SETTINGS


ARGS = {"n": 4, "limit": 96, "batch_size": 32}  # 8 problems a batch: 12 batches


def test_a_stopped_eval_keeps_its_batches_and_the_same_command_goes_on_from_them(tmp_path, capsys):
    out = tmp_path / "eval"
    command = [sys.executable, "-m", "coreward.cli", "eval", "--model", "demo", "--output", str(out),
               *(f"--{key.replace('_', '-')}={value}" for key, value in ARGS.items())]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 120
        while not list((out / PARTIAL_DIR).glob("batch-*.jsonl")) and process.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(process.pid, signal.SIGINT)
        output, _ = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130, output[-3000:]
    kept_files = sorted((out / PARTIAL_DIR).glob("batch-*.jsonl"))
    kept = {json.loads(line)["prompt"]: json.loads(line)["generations"] for f in kept_files
            for line in f.read_text().splitlines()}
    assert 8 <= len(kept) < 96 and len(kept) % 8 == 0, len(kept)  # whole batches only
    assert kept_problems(out) == len(kept)  # what a progress line read from outside counts (coreward demo's)
    assert (f"stopped by Ctrl-C while evaluating {_demo_path()}; the completions of {len(kept)} of 96 problems are "
            f"kept in {out / PARTIAL_DIR}; run the same command again to go on from them") in output, output[-2000:]
    assert "Traceback" not in output and not (out / "results.json").exists()

    # mark one kept completion: read back, not sampled again, it reaches samples.parquet as it is
    first = kept_files[0]
    rows = [json.loads(line) for line in first.read_text().splitlines()]
    rows[0]["generations"][0][0] = "KEPT"
    first.write_text("".join(json.dumps(row) + "\n" for row in rows))

    resumed = evaluate("demo", EvalSettings(output_dir=out, **ARGS))  # the same evaluation, in this process
    assert (f"eval: continuing a stopped evaluation: {len(kept)} of 96 problems' completions are kept in "
            f"{out / PARTIAL_DIR}; sampling the rest") in capsys.readouterr().err
    assert not (out / PARTIAL_DIR).exists()  # results.json is written: nothing more to keep
    assert json.loads((out / "results.json").read_text())["kept_completions"] == len(kept) * 4
    whole = evaluate("demo", EvalSettings(**ARGS))  # never stopped
    marked = [s for s in resumed.samples if s.completion == "KEPT"]
    assert len(marked) == 1 and marked[0].problem_index == rows[0]["prompt"] and marked[0].sample_index == 0
    assert [(s.problem_index, s.sample_index, s.completion) for s in resumed.samples if s is not marked[0]] == [
        (s.problem_index, s.sample_index, s.completion) for s in whole.samples
        if (s.problem_index, s.sample_index) != (marked[0].problem_index, 0)]
    assert len(pd.read_parquet(out / "samples.parquet")) == 96 * 4


def test_kept_completions_of_other_settings_are_discarded(tmp_path, capsys):
    from coreward.evaluation.backends import Generation
    from coreward.evaluation.kept import KeptGenerations

    kept = KeptGenerations(tmp_path, {"settings": {"n": 4}}, total=2)
    kept.add([0], [[Generation("a", 1, False)]])
    assert KeptGenerations(tmp_path, {"settings": {"n": 4}}, total=2).generations == {0: [Generation("a", 1, False)]}
    assert "1 of 2 problems' completions are kept" in capsys.readouterr().err
    assert KeptGenerations(tmp_path, {"settings": {"n": 8}}, total=2).generations == {}
    assert "holds completions of an evaluation with other settings" in capsys.readouterr().err
    assert not (tmp_path / PARTIAL_DIR / KEPT_SETTINGS).exists()


def _demo_path() -> str:
    from coreward.evaluation.evaluate import resolve_model_path

    return resolve_model_path("demo")
