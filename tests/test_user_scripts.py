"""What a new user runs, run as they run it: the Python API example (docs/how-to/your-reward.md) as a plain script, `coreward train`
in a folder of their own (a reward by import path, the demo policy with default data settings), failures that
leave nothing behind, and what the terminal shows. Every test is a subprocess in a fresh working directory."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers.runs import coreward_in


REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
QUESTIONS = [("3+4-2=", "5"), ("5+1-3=", "3"), ("2+2-1=", "3"), ("7+1-4=", "4")]
# a user's TRL-style reward that checks answers with coreward's Verifier: two forms of a polynomial take
# math-verify, so the Verifier's worker processes start inside the user's process
FORMAT_REWARD = textwrap.dedent("""\
    import coreward

    _verifier = coreward.Verifier(num_workers=1)


    def format_reward(completions, **kwargs):
        golds = ["(x+1)^2"] * len(completions)
        return [float(same) for same in _verifier.equivalent(golds, ["x^2+2x+1" if "#" in c else None for c in completions])]
    """)
LIBRARY_NOISE = ("Setting accelerator to CPU", "is_gradient_checkpointing")


def env(**extra: str) -> dict[str, str]:
    """The test's environment with coreward's sources first on the path (not the working directory)."""
    path = os.pathsep.join([str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", **extra}


def user_folder(tmp_path: Path) -> Path:
    """A user's folder: their questions (column `problem`) and a package of their own rewards."""
    folder = tmp_path / "project"
    (folder / "mypkg").mkdir(parents=True)
    (folder / "mypkg" / "__init__.py").write_text("")
    (folder / "mypkg" / "rewards.py").write_text(FORMAT_REWARD)
    (folder / "my_questions.jsonl").write_text(
        "".join(json.dumps({"problem": q, "answer": a}) + "\n" for q, a in QUESTIONS))
    return folder


def coreward(folder: Path, *args: str, timeout: int = 600, fresh: bool = False, **extra_env: str) -> subprocess.CompletedProcess:
    """`coreward ARGS` run by the user in `folder`: a process of its own (tests/helpers/runs.py `coreward_in`); `fresh`, a
    new interpreter, for settings its libraries read when imported."""
    if fresh:
        return subprocess.run([sys.executable, "-m", "coreward.cli", *args], cwd=folder, capture_output=True, text=True,
                              timeout=timeout, env=env(**extra_env))
    return coreward_in(folder, *args, env=env(**extra_env), timeout=timeout)


API_EXAMPLE = REPO / "docs" / "how-to" / "your-reward.md"


def readme_api_example() -> str:
    """The Python API example of the docs: its python block that calls `coreward.train(`."""
    blocks = re.findall(r"```python\n(.*?)```", API_EXAMPLE.read_text(), re.S)
    examples = [b for b in blocks if "coreward.train(" in b]
    assert examples, f"{API_EXAMPLE} has no python block calling coreward.train"
    return examples[0]


def test_readme_python_api_example_runs_as_a_plain_script(tmp_path):
    """Verbatim but for the model (the demo policy: no download), max_steps and the evaluation's size."""
    code = readme_api_example()
    code = re.sub(r'("name_or_path":\s*)"[^"]*"', r'\1"demo"', code)
    code = re.sub(r"max_steps=\d+", "max_steps=2", code)
    code = re.sub(r"(coreward\.evaluate\([^\n]*?)\bn=\d+", r"\1n=1, limit=2", code)
    assert "max_steps=2" in code and "limit=2" in code and '"demo"' in code
    folder = user_folder(tmp_path)
    (folder / "api_example.py").write_text("print('script started', flush=True)\n" + code)

    done = subprocess.run([sys.executable, "api_example.py"], cwd=folder, capture_output=True, text=True,
                          timeout=900, env=env())
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert done.stdout.count("script started") == 1  # no worker process ran the script again
    assert not [noise for noise in LIBRARY_NOISE if noise in output]
    run = folder / "runs" / "mine"
    assert (run / "final" / "config.json").is_file() and any((run / "eval").iterdir())
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2]


def test_a_plain_script_using_the_verifier_pool_runs_once(tmp_path):
    """The verifier's worker processes do not import the caller's `__main__` (no `if __name__ == "__main__"`)."""
    (tmp_path / "check.py").write_text(textwrap.dedent("""\
        from coreward.verify.pool import WorkerPool
        print("script started", flush=True)

        class Stats:
            worker_restarts = 0

        pool = WorkerPool(2, 10.0, Stats())
        print(pool.run([("\\\\frac{1}{2}", "0.5"), ("3", "4")]))
        pool.close()
        """))
    done = subprocess.run([sys.executable, "check.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env=env())
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["script started", "[(True, False), (False, False)]"]


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """`coreward train` in a user's folder: the demo policy, default data settings, a reward from ./mypkg, a config
    whose output_dir differs from the --output-dir used."""
    folder = user_folder(tmp_path_factory.mktemp("cli"))
    config = {
        "model": {"name_or_path": "demo"},
        "data": {"train": "my_questions.jsonl", "columns": {"question": "problem"}},
        "rewards": [{"name": "rule"}, {"name": "mypkg.rewards:format_reward", "weight": 0.5}],
        "grpo": {"num_generations": 4, "per_device_train_batch_size": 8, "max_completion_length": 24},
        "output_dir": "runs/from_the_config",
        "torch_threads": 1,
    }
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    done = coreward(folder, "train", "--config", "config.yaml", "--output-dir", "runs/used", "--max-steps", "1")
    return folder, done


def test_a_reward_by_import_path_loads_from_the_working_directory(cli_run):
    folder, done = cli_run
    assert done.returncode == 0, done.stderr[-3000:]
    row = json.loads((folder / "runs" / "used" / "metrics.jsonl").read_text().splitlines()[0])
    assert "rewards/format_reward/mean" in row or any("format_reward" in key for key in row)


def test_a_missing_reward_module_says_where_it_looked(tmp_path):
    folder = user_folder(tmp_path)
    done = coreward(folder, "train", "--config", str(REPO / "configs" / "demo" / "rule.yaml"), "--output-dir", "r",
                    "--set", "rewards=[{name: nopkg.rewards:f}]")
    assert done.returncode == 2
    assert "No module named 'nopkg'" in done.stderr and f"working directory {folder}" in done.stderr
    assert "PYTHONPATH" in done.stderr


def test_the_demo_policy_gets_plain_prompts_by_default(cli_run):
    folder, done = cli_run
    assert done.returncode == 0, done.stderr[-3000:]
    saved = yaml.safe_load((folder / "runs" / "used" / "config.yaml").read_text())
    assert saved["data"]["prompt_format"] == "plain" and saved["data"]["instruction"] is None
    row = json.loads((folder / "runs" / "used" / "metrics.jsonl").read_text().splitlines()[0])
    assert row["completions/max_length"] > 2  # it writes solutions, not one end-of-text token
    assert "every completion" not in done.stdout


def test_completions_of_one_or_two_tokens_are_warned_about(tmp_path):
    """As when the demo policy, given chat prompts with the \\boxed{} instruction (words it can't read), ends every
    answer at once; made certain here by a length limit of 2 tokens."""
    folder = user_folder(tmp_path)
    config = {"model": {"name_or_path": "demo"}, "data": {"train": "demo", "prompt_format": "chat"},
              "grpo": {"num_generations": 4, "per_device_train_batch_size": 8, "max_completion_length": 2},
              "torch_threads": 1}
    (folder / "chat.yaml").write_text(yaml.safe_dump(config))
    done = coreward(folder, "train", "--config", "chat.yaml", "--output-dir", "r", "--max-steps", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "every completion of step 1 is at most 2 tokens long" in done.stdout
    assert "data.prompt_format" in done.stdout


def test_what_a_run_leaves_behind(cli_run):
    folder, done = cli_run
    assert done.returncode == 0, done.stderr[-3000:]
    run = folder / "runs" / "used"
    assert yaml.safe_load((run / "config.yaml").read_text())["output_dir"] == "runs/used"  # the one used
    assert not (run / "README.md").exists()  # TRL's card ("fine-tuned version of [None]"); the run's is final/'s
    assert (run / "final" / "README.md").is_file()
    again = coreward(folder, "train", "--config", "config.yaml", "--output-dir", "runs/used", "--max-steps", "1")
    assert again.returncode == 2 and "already holds a run" in again.stderr and "--resume" in again.stderr


@pytest.mark.parametrize("content, expected", [
    ('{"problem": "1+1-1=", "answer": "no answer given here"}\n',
     "row 1 (id prose-0): the reference answer 'no answer given here' is words with no readable answer"),
    ('{"problem": "1+1-1=", "answer": "1"}\n{"problem": "2+2-1=", "answer": \n',
     "prose.jsonl: line 2: invalid JSON"),
])
def test_bad_training_data_is_one_line(tmp_path, content, expected):
    (tmp_path / "prose.jsonl").write_text(content)
    done = coreward(tmp_path, "train", "--config", str(REPO / "configs" / "demo" / "rule.yaml"), "--output-dir", "r",
                    "--set", "data.train=prose.jsonl", "--set", "data.columns.question=problem")
    assert done.returncode == 2
    assert expected in done.stderr
    assert done.stderr.strip().count("\n") == 0 and done.stderr.startswith("error:")  # no pyarrow line before it
    assert not (tmp_path / "r").exists()


def test_an_unreachable_hub_fails_fast_and_leaves_no_run_directory(tmp_path):
    started = time.monotonic()
    done = coreward(tmp_path, "train", "--config", str(REPO / "configs" / "demo" / "rule.yaml"), "--output-dir", "r",
                    "--set", "model.name_or_path=someone/not-cached-model", timeout=300, fresh=True,
                    HF_ENDPOINT="http://127.0.0.1:9", HF_HUB_OFFLINE="", TRANSFORMERS_OFFLINE="")
    assert done.returncode == 2, done.stderr[-3000:]
    assert "'someone/not-cached-model' is a Hugging Face hub id, the hub can't be reached" in done.stderr
    assert "hf download someone/not-cached-model" in done.stderr
    assert "Retrying" not in done.stderr and done.stderr.strip().count("\n") == 0
    assert time.monotonic() - started < 120  # mostly importing TRL; no retries
    assert not (tmp_path / "r").exists()


def test_a_run_that_fails_to_start_removes_the_directory_it_made(tmp_path):
    """A model folder with no model in it fails before training (the model-path check names it) and leaves no run
    directory behind."""
    (tmp_path / "empty_model").mkdir()
    done = coreward(tmp_path, "train", "--config", str(REPO / "configs" / "demo" / "rule.yaml"), "--output-dir", "r",
                    "--set", "model.name_or_path=./empty_model")
    assert done.returncode == 2 and "empty_model is not a saved model (no config.json in it)" in done.stderr
    assert not (tmp_path / "r").exists()


def test_ci_builds_its_vllm_environment_outside_the_source_tree(tmp_path):
    line = next(line for line in (REPO / ".ci" / "run").read_text().splitlines() if line.startswith("venv="))
    home = tmp_path / "home"
    shown = subprocess.run(["bash", "-c", f"{line}; echo \"$venv\""], capture_output=True, text=True, check=True,
                           env={"HOME": str(home), "PATH": os.environ["PATH"]}).stdout.strip()
    assert shown == str(home / ".cache" / "coreward" / "ci-venv-vllm")
    assert REPO not in Path(shown).parents
