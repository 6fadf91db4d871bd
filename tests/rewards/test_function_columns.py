"""A TRL-style reward function receives every column of the user's own data under its own name, as TRL passes every
dataset column: a real user file (`problem`, `solution`, `final`, `difficulty`), a real function module named by import
path, one real training step."""

from __future__ import annotations

import json
import textwrap

import pytest

from coreward.data.synthetic import load_demo
from coreward.grpo.config import TrainConfig
from coreward.runtime.config import load_config
from tests.helpers.runs import RULE_CONFIG


pytestmark = pytest.mark.usefixtures("one_torch_thread")

REWARD_MODULE = '''
import json

SEEN = {seen!r}


def uses_my_columns(completions, problem, solution, **kwargs):
    """Scores 1 when a completion contains the final line of the row's own `solution`, and writes down what it got."""
    with open(SEEN, "a") as out:
        out.write(json.dumps({{"problem": problem, "solution": solution, **kwargs}}, default=str) + "\\n")
    return [float(s.rsplit("#### ", 1)[-1] in c) for c, s in zip(completions, solution)]
'''


def test_a_reward_function_receives_the_users_own_columns(tiny_policy, tmp_path, monkeypatch):
    from coreward.grpo.train import run_training

    records = load_demo("train", 4)
    difficulty = [3, "hard", 2, "easy"]  # a hand-typed column: a number in one row, text in the next
    data = tmp_path / "mine.jsonl"
    data.write_text("".join(json.dumps({"problem": r.question, "solution": r.solution, "final": r.answer,
                                        "difficulty": d}) + "\n" for r, d in zip(records, difficulty)))
    package = tmp_path / "code" / "mypkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    seen = tmp_path / "seen.jsonl"
    (package / "rewards.py").write_text(textwrap.dedent(REWARD_MODULE.format(seen=str(seen))))
    monkeypatch.syspath_prepend(str(tmp_path / "code"))

    config = load_config(TrainConfig, RULE_CONFIG, [
        f"model.name_or_path={tiny_policy}", f"data.train={data}", "data.columns={question: problem, answer: final}",
        "rewards=[{name: 'mypkg.rewards:uses_my_columns'}]", "data.eval_every=0", "grpo.num_generations=4",
        "grpo.per_device_train_batch_size=8", "grpo.max_completion_length=8", "torch_threads=1"])
    run_training(config, output_dir=str(tmp_path / "run"), max_steps=1)

    (call,) = [json.loads(line) for line in seen.read_text().splitlines()]
    # the user's columns, under their own names, one value per completion, each the row's own value
    by_problem = {r.question: (r.solution, r.answer, str(d)) for r, d in zip(records, difficulty)}
    assert len(call["problem"]) == 8 and set(call["problem"]) <= set(by_problem)
    for i, problem in enumerate(call["problem"]):
        assert (call["solution"][i], call["final"][i], call["difficulty"][i]) == by_problem[problem]
        # beside coreward's own fields: the mapped question and answer
        assert call["question"][i] == problem and call["answer"][i] == by_problem[problem][1]
    assert {"id", "source", "split", "level", "trainer_state"} <= set(call)
    assert not {"prompt", "completion"} & set(call)  # TRL's own keys are not columns
