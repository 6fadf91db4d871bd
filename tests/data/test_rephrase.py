"""Rephrasing for Co-rewarding-I: parsing between markers, drop counting, demo pairs, verl rewrite files."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

from coreward.data.records import Record
from coreward.data.rephrase import BEGIN, END, load_rephrasings, parse_rephrasing, rephrase_records, write_pairs
from coreward.runtime.errors import CorewardError
from tests.helpers.llm_test_server import LLMTestServer
from tests.helpers.runs import coreward_in


Q = "Ann has 12 apples, buys 5, sells 3. How many?"


def record(i: int, question: str = Q, answer: str = "14") -> Record:
    return Record(id=f"r{i}", question=question, answer=answer, source="test", split="train")


def test_parse_keeps_text_between_markers_with_every_number():
    good = f"Sure.\n{BEGIN}A shop holds 12 pens, gets 5 more, gives away 3. How many remain?{END}"
    assert parse_rephrasing(good, Q) == "A shop holds 12 pens, gets 5 more, gives away 3. How many remain?"
    assert parse_rephrasing("no markers at all", Q) is None
    assert parse_rephrasing(f"{BEGIN}   {END}", Q) is None  # empty
    assert parse_rephrasing(f"{BEGIN}{Q}{END}", Q) is None  # unchanged
    assert parse_rephrasing(f"{BEGIN}A shop holds 12 pens, gets 5. How many?{END}", Q) is None  # lost the 3
    assert parse_rephrasing(None, Q) is None


def test_endpoint_failures_and_unparseable_outputs_are_dropped_and_counted():
    from coreward.llm import OpenAIEndpointGenerator

    records = [record(0), record(1, "Bob had 40 cards, lost 7. How many left?", "33")]
    with LLMTestServer() as server:
        generator = OpenAIEndpointGenerator(server.url, "test-model", backoff_s=0.01, timeout_s=2.0,
                                            max_retries=1, deadline_s=10.0)
        from coreward.data.rephrase import build_request_text

        server.script(build_request_text(records[1].question), then="500")  # this one always fails
        pairs, report = rephrase_records(records, generator)
        generator.close()
    # the healthy item echoes the prompt back: the markers enclose " and ", which lost every number
    assert pairs == []
    assert (report.total, report.kept, report.failed_generation, report.failed_parse) == (2, 0, 1, 1)
    assert build_request_text(records[0].question) in report.first_unparsed  # the echo is what the model wrote


def test_a_long_job_goes_in_chunks_with_progress_and_keeps_each_rephrasing_with_its_question(capsys):
    """Nine questions through an endpoint of one request at a time: chunks of four rounds (4, 4, 1), a progress line,
    and every rephrasing paired with its own question (the server rewords the question it was asked)."""
    from coreward.llm import OpenAIEndpointGenerator

    def reword(prompt: str) -> str:
        question = prompt.rsplit("Problem:\n", 1)[1]
        return f"{BEGIN}In a new story: {question}{END}"

    records = [record(i, f"Zoe has {i + 10} shells and finds {i + 2} more. How many now?", str(2 * i + 12))
               for i in range(9)]
    with LLMTestServer(reply=reword) as server:
        generator = OpenAIEndpointGenerator(server.url, "test-model", max_concurrency=1, timeout_s=5.0)
        pairs, report = rephrase_records(records, generator)
        generator.close()
    assert report.kept == 9 and [r.id for r, _ in pairs] == [r.id for r in records]
    assert all(text == f"In a new story: {r.question}" for r, text in pairs)
    assert server.max_in_flight == 1
    assert "rephrase: 9/9" in capsys.readouterr().err


def test_a_job_stopped_by_ctrl_c_keeps_its_finished_chunks_and_the_same_command_asks_only_for_the_rest(tmp_path):
    """Nine questions, chunks of four: a real SIGINT while the second chunk is asked stops the job with the first
    chunk kept beside the output; `coreward rephrase` with the same data, model and output then asks the endpoint only
    for the other five, pairs every rephrasing with its own question and removes what was kept; another model's job
    does not read what one kept."""
    import json
    import signal

    from coreward.data.rephrase import partial_directory
    from coreward.llm import OpenAIEndpointGenerator
    from coreward.runtime.interrupt import Interrupted, catch_ctrl_c

    # SIGINT raises here as in a `coreward` command, whatever this worker inherited: a test run started as a script's
    # background job starts with SIGINT ignored, and the Ctrl-C below then did nothing (conftest restores the handler)
    catch_ctrl_c()
    questions = [f"Zoe has {i + 10} shells and finds {i + 2} more. How many now?" for i in range(9)]
    data = tmp_path / "questions.jsonl"
    data.write_text("".join(json.dumps({"question": q, "answer": str(2 * i + 12)}) + "\n"
                            for i, q in enumerate(questions)))
    records = [record(i, q, str(2 * i + 12)) for i, q in enumerate(questions)]
    asked, stop_at = [], [5]

    def reword(prompt: str) -> str:
        asked.append(prompt)
        if len(asked) == stop_at[0]:  # the second chunk's first request: Ctrl-C, as a terminal sends it
            stop_at[0] = 0
            os.kill(os.getpid(), signal.SIGINT)
        return f"{BEGIN}In a new story: {prompt.rsplit('Problem:', 1)[1].strip()}{END}"

    output = tmp_path / "pairs.parquet"
    with LLMTestServer(reply=reword) as server:
        model = f"{server.url}#test-model"
        generator = OpenAIEndpointGenerator(server.url, "test-model", max_concurrency=1, timeout_s=5.0)
        with pytest.raises(Interrupted) as stopped:
            rephrase_records(records, generator, keep_for=(output, model))
        generator.close()
        assert "the outputs of 4 of 9 questions are kept" in stopped.value.line()
        assert partial_directory(output).is_dir()
        # 5, or 6 when the next queued request reached the server while the interrupt was being raised
        asked_before_resume = len(asked)
        done = coreward_in(tmp_path, "rephrase", "--input", str(data), "--model", model, "--output", str(output),
                           env=dict(os.environ))
        assert done.returncode == 0, done.stdout + done.stderr
        assert len(asked) - asked_before_resume == 5 and "continuing a stopped job: 4 of 9" in done.stderr
    frame = pd.read_parquet(output)
    assert list(frame["rephrased"]) == [f"In a new story: {q}" for q in questions]
    assert not partial_directory(output).exists()

    other = tmp_path / "other.parquet"
    asked.clear()
    stop_at[0] = 5
    with LLMTestServer(reply=reword) as server:
        generator = OpenAIEndpointGenerator(server.url, "test-model", max_concurrency=1, timeout_s=5.0)
        with pytest.raises(Interrupted):
            rephrase_records(records, generator, keep_for=(other, "model-a"))
        generator.close()  # the stopped job's requests still queued are dropped here
    asked.clear()  # after its server stopped: a request of the stopped job still in flight is not counted below
    with LLMTestServer(reply=reword) as server:
        generator = OpenAIEndpointGenerator(server.url, "test-model", max_concurrency=1, timeout_s=5.0)
        rephrase_records(records, generator, keep_for=(other, "model-b"))
        generator.close()
    assert len(asked) == 9  # another model: what model-a's job kept is discarded, every question asked again


def test_cli_demo_rephrasings_write_side_by_side_pairs(tmp_path):
    out = tmp_path / "pairs.parquet"
    done = coreward_in(Path.cwd(), "rephrase", "--input", "demo", "--split", "train", "--limit", "5", "--model", "demo",
                       "--output", str(out), env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    frame = pd.read_parquet(out)
    assert list(frame.columns) == ["id", "question", "rephrased", "answer", "source"]
    assert len(frame) == 5 and (frame["question"] != frame["rephrased"]).all()
    assert load_rephrasings(out, [])[frame["id"][0]] == frame["rephrased"][0]


def test_verl_rewrite_file_aligns_row_by_row(tmp_path):
    originals = [record(0), record(1, "Bob had 40 cards, lost 7. How many left?", "33")]
    rewrites = [(originals[0], "Sue owns 12 eggs, wins 5, uses 3. How many in the end?"),
                (originals[1], "Tom starts with 40 pens, gives 7. How many now?")]
    path = write_pairs(rewrites, tmp_path / "train_rewrite.parquet", fmt="verl")
    assert load_rephrasings(path, originals) == {"r0": rewrites[0][1], "r1": rewrites[1][1]}
    with pytest.raises(CorewardError, match="align row by row"):
        load_rephrasings(path, originals[:1])


# a stand-in for the authors' instruction (their repository has no licence: coreward and its tests do not hold it),
# with their markers; the sha256 of theirs (Co-rewarding-I/rewrite_questions.py at edf278e) is pinned below
STAND_IN = ("Rewrite the problem below (test stand-in).\n\n### RESULT_START\nORIGINAL:\n<original question>\n"
            "REWRITE:\n<rewritten question>\n### RESULT_END\n")
AUTHORS_SHA256 = "298501e3db53a7109656b669b1a1769d325b20c0e06529a93def0e5e62d49ad7"


def test_authors_prompt_sampling_and_thinking_switch_reach_the_endpoint(tmp_path):
    """prompt="authors": their instruction (the user's copy) + "\\n" + question, their markers and parsing (no
    number check), top-p and max tokens as passed, and Qwen3's enable_thinking in chat_template_kwargs."""
    from coreward.data.rephrase import AUTHORS_REWRITE, AUTHORS_SAMPLING, parse_authors_rephrasing
    from coreward.llm import OpenAIEndpointGenerator

    assert AUTHORS_REWRITE.sha256 == (AUTHORS_SHA256,)
    assert parse_authors_rephrasing("x ### RESULT_START\nORIGINAL:\nq\nREWRITE:\n new q \n### RESULT_END") == "new q"
    assert parse_authors_rephrasing("### RESULT_START\nORIGINAL: q\n### RESULT_END") is None  # no REWRITE:
    assert parse_authors_rephrasing("### RESULT_END ### RESULT_START") is None
    instruction = tmp_path / "instruction.txt"
    instruction.write_text(STAND_IN)
    with LLMTestServer() as server:
        generator = OpenAIEndpointGenerator(server.url, "test-model", backoff_s=0.01, timeout_s=2.0,
                                            max_retries=1, deadline_s=10.0)
        with pytest.raises(CorewardError, match=r"^--authors-prompt: the Co-rewarding authors' rewrite prompt is not "
                                                r"shipped with coreward .*clone https://github.com/tmlr-group/"
                                                r"Co-rewarding and give its file <clone>/Co-rewarding-I/"
                                                r"rewrite_questions.py as --authors-prompt"):
            rephrase_records([record(0)], generator, prompt="authors")
        pairs, report = rephrase_records([record(0)], generator, prompt="authors", enable_thinking=False,
                                         authors_prompt=instruction, **AUTHORS_SAMPLING)
        generator.close()
        body = server.bodies[0]
    assert body["messages"] == [{"role": "user", "content": STAND_IN + "\n" + Q}]
    assert (body["top_p"], body["max_tokens"], body["temperature"]) == (0.8, 20480, 0.7)
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    # the echo carries the template's own placeholder between the markers: the authors' parser keeps it
    assert [q for _, q in pairs] == ["<rewritten question>"] and report.kept == 1
    with pytest.raises(CorewardError, match="rephrasing prompt must be"):
        rephrase_records([record(0)], generator, prompt="mine")


def test_a_users_copy_of_the_authors_rewrite_prompt_is_their_text():
    import hashlib
    import os
    from pathlib import Path

    from coreward.data.rephrase import authors_instruction

    root = os.environ.get("COREWARD_JUDGE_PROMPTS")  # a folder with clones of the authors' repositories
    if not root:
        pytest.skip("COREWARD_JUDGE_PROMPTS (a folder with a clone of tmlr-group/Co-rewarding) is not set")
    text = authors_instruction(Path(root) / "Co-rewarding" / "Co-rewarding-I" / "rewrite_questions.py")
    assert hashlib.sha256(text.encode()).hexdigest() == AUTHORS_SHA256
