"""`coreward plan`: the memory plan of a training step (grpo/plan/, runtime/memory.py).

What is checked: every paper config fits the hardware its comment declares with at least 10% to spare; the plan's
terms mean what they say (ZeRO-3 on 8 GPUs holds about an eighth of one process's model states, the RM's gradient
checkpointing lowers the RM-update phase by the activation difference, vLLM's reservation is utilization × device
memory, a LoRA plan holds no head-weight gradient); the advice searches combinations of settings, the same GPU
first, and each suggestion fits with 10% to spare when planned again (Cooper's paper config on one 40 or 24 GiB
GPU); a colocated vLLM whose share cannot hold an 8B policy's weights does not fit; each reward source plans its
own part, a user's registered source too, and grpo/plan/ names no method; bad input is one
line and exit 2, a plan that does not fit exits 3 and is printed all the same; the papers' models plan offline from
their shipped config.json and a directory holding only a config.json is enough; and on this CPU the plan of
`coreward train` in one process predicts its peak resident memory (ru_maxrss, what `/usr/bin/time -v` reports)
within ±20%.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from coreward.grpo.plan import SPARE, declared_hardware
from coreward.grpo.plan_cli import DOES_NOT_FIT
from coreward.runtime.memory import GIB, ModelShape, activation_bytes, parameter_count
from tests.helpers.runs import RULE_CONFIG, coreward_here


REPO = Path(__file__).resolve().parents[2]
PAPER = sorted((REPO / "configs" / "paper").glob("*.yaml"))
COOPER = REPO / "configs" / "paper" / "cooper_gsm8k_qwen2.5-1.5b.yaml"
MATH = REPO / "configs" / "paper" / "gt_grpo_math_qwen.yaml"
GSM8K = REPO / "configs" / "paper" / "gt_grpo_gsm8k_qwen2.5-1.5b.yaml"
# Cooper's paper config as it was before its memory settings: the authors' RM without their offload, vLLM held
# through every phase (the authors' verl sleeps it after each generation)
COOPER_AS_WRITTEN = ["rewards.0.params.param_offload=false", "rewards.0.params.optimizer_offload=false",
                     "rewards.0.params.max_tokens_per_pass=null", "grpo.vllm_enable_sleep_mode=false"]


def plan(config: Path, *sets: str, **options: str | int) -> dict:
    """`coreward plan --json` of `config` with `sets` (--set items) and `options` (gpus=8, engine="zero3", ...)."""
    args = ["plan", "--config", config, "--json"]
    for item in sets:
        args += ["--set", item]
    for name, value in options.items():
        args += [f"--{name.replace('_', '-')}", value]
    result = coreward_here(*args)
    assert result.returncode in (0, DOES_NOT_FIT), result.stdout[-2000:] + result.stderr[-2000:]
    planned = json.loads(result.stdout)  # printed whether it fits or not
    assert result.returncode == (0 if planned["fits"] else DOES_NOT_FIT), planned["fits"]
    return planned


def item(planned: dict, name: str) -> dict:
    return next(i for i in planned["items"] if i["name"] == name)


HEAP_KEPT = "heap kept (glibc, freed activations)"  # a LoRA policy's on a CPU with glibc's default (grpo/plan/step.py)
MARGIN = "allocator reserve over allocated"  # a tenth of what torch allocates, held in every phase (grpo/plan/step.py)


def phase(planned: dict, name: str) -> int:
    """A phase's total without the allocator's margin (which moves with everything): what the tests of one term's
    difference compare."""
    margin = next((i["bytes"] for i in planned["items"] if i["name"] == MARGIN), 0)
    return planned["phases"][name] - margin


@pytest.mark.parametrize("config", PAPER, ids=[p.stem for p in PAPER])
def test_every_paper_config_fits_its_declared_gpus_with_room_to_spare(config):
    declared = declared_hardware(config)
    assert {"gpus", "device_bytes", "engine"} <= declared.keys(), f"{config.name}: no # gpus: / # engine: comment"
    planned = plan(config)  # the hardware from the comments
    assert planned["hardware"]["gpus"] == declared["gpus"] and planned["hardware"]["engine"] == declared["engine"]
    assert planned["device_bytes"] == declared["device_bytes"] == 80 * GIB
    assert planned["fits"] and planned["peak_bytes"] <= (1 - SPARE) * planned["device_bytes"], planned["phases"]


def test_cooper_as_the_authors_wrote_it_does_not_fit_one_gpu_and_the_plan_says_what_would():
    planned = plan(COOPER, *COOPER_AS_WRITTEN)
    assert not planned["fits"] and planned["peak_phase"] == "RM update"
    assert planned["suggestions"], "a config over the device must come with settings that fit"
    proposed = [s["set"] for s in planned["suggestions"]]
    assert any(any(s.startswith("rewards.0.params.") for s in settings) and not settings[0].startswith("--")
               for settings in proposed), proposed  # the RM's own settings, on the same GPU
    for suggestion in planned["suggestions"]:  # each one fits with the configs' 10% to spare when planned again
        sets = [s for s in suggestion["set"] if not s.startswith("--")]
        options = dict(s[2:].split(" ", 1) for s in suggestion["set"] if s.startswith("--"))
        again = plan(COOPER, *COOPER_AS_WRITTEN, *sets, **options)
        assert again["fits"] and again["peak_bytes"] == suggestion["peak_bytes"], suggestion
        assert again["peak_bytes"] <= (1 - SPARE) * again["device_bytes"], suggestion


def test_cooper_paper_config_sleeps_vllm_and_steps_its_offloaded_rm_optimizer_on_the_gpu_as_the_authors():
    """As the authors' verl 0.4.1 ran it: vLLM asleep outside generation (fsdp_vllm.py's __exit__ sleeps it after every
    generation whatever free_cache_engine says), and the RM's offloaded optimizer brought to the GPU for the RM update
    and its step (fsdp_workers.update_reward: load_fsdp_optimizer), on the CPU between them (docs/fidelity.md)."""
    planned = plan(COOPER)
    assert item(planned, "vLLM reservation (colocated)")["phases"] == ["generation"]
    for state in ("rewards.0 Cooper RM float32 masters", "rewards.0 Cooper RM AdamW moments"):
        assert item(planned, state)["phases"] == ["RM update", "RM step"], state
    assert item(planned, "rewards.0 Cooper RM optimizer step")["phases"] == ["RM step"]  # the step itself on the GPU
    from coreward.rewards.cooper import CooperReward
    from coreward.runtime.config import read_yaml_with_base

    params = CooperReward.Params(**read_yaml_with_base(COOPER)["rewards"][0]["params"])
    assert params.optimizer_offload and params.optimizer_offload_step == "device" and params.param_offload


def test_zero3_on_eight_gpus_holds_an_eighth_of_one_process_model_states():
    def states(planned: dict) -> int:
        names = ("policy weights", "policy float32 master weights", "policy AdamW moments", "policy gradients")
        return sum(i["bytes"] for i in planned["items"] if i["name"] in names)

    one, sharded = plan(MATH, gpus=1, engine="one"), plan(MATH, gpus=8, engine="zero3")
    assert 0.10 <= states(sharded) / states(one) <= 0.16  # 16 bytes/parameter in one process; (2+4+8+2)/8 sharded
    assert item(sharded, "KL reference (TRL, beta > 0)")["bytes"] < item(one, "KL reference (TRL, beta > 0)")["bytes"] / 7


def test_rm_gradient_checkpointing_lowers_the_rm_update_by_the_activation_difference():
    off = plan(COOPER, *COOPER_AS_WRITTEN)
    on = plan(COOPER, *COOPER_AS_WRITTEN, "rewards.0.params.gradient_checkpointing=true")
    rm = ModelShape.from_path("Qwen/Qwen2.5-Math-1.5B-Instruct")  # the VerifyRM's backbone (configs/rm/paper_verifyrm.yaml)
    kept = {ckpt: activation_bytes(rm, 8, 1024, dtype="bfloat16", attn_implementation="sdpa",
                                   gradient_checkpointing=ckpt, head="score") for ckpt in (False, True)}
    drop = phase(off, "RM update") - phase(on, "RM update")
    assert drop == pytest.approx(kept[False] - kept[True], rel=0.01)
    assert drop > 15 * GIB  # 8 sequences × 1,024 tokens × 28 layers of a 1.5B model: most of an RM pass's memory
    assert phase(on, "policy update") == phase(off, "policy update")  # the RM's setting moves the RM's phase only


def test_vllm_reservation_is_its_utilization_of_the_device():
    planned = plan(GSM8K, "grpo.vllm_gpu_memory_utilization=0.45", "grpo.vllm_enable_sleep_mode=false",
                   gpu_memory="40GiB")
    vllm = item(planned, "vLLM reservation (colocated)")
    assert vllm["bytes"] == int(0.45 * 40 * GIB) and len(vllm["phases"]) == 5  # awake: held through every phase
    asleep = item(plan(GSM8K), "vLLM reservation (colocated)")  # the config's sleep mode, as the authors' verl
    assert asleep["phases"] == ["generation"]
    served = plan(GSM8K, "grpo.vllm_mode=server")
    assert not any("vLLM" in i["name"] for i in served["items"])


def test_the_papers_models_plan_offline_and_a_directory_with_only_config_json_is_enough(tmp_path):
    sizes = {"Qwen/Qwen2.5-1.5B-Instruct": 1.54e9, "Qwen/Qwen3-4B-Base": 4.02e9, "Qwen/Qwen3-8B-Base": 8.19e9,
             "meta-llama/Llama-3.2-1B": 1.24e9}
    for name, size in sizes.items():
        assert parameter_count(ModelShape.from_path(name), "lm") == pytest.approx(size, rel=0.01), name
    only_config = tmp_path / "llama"
    only_config.mkdir()
    shutil.copy(REPO / "src" / "coreward" / "assets" / "model_configs" / "meta-llama--Llama-3.2-1B" / "config.json",
                only_config)
    planned = plan(GSM8K, f"model.name_or_path={only_config}")
    assert "1.24B parameters" in item(planned, "policy weights")["note"]


def test_a_model_the_plan_cannot_find_is_a_one_line_error_naming_the_key():
    result = coreward_here("plan", "--config", GSM8K, "--set", "model.name_or_path=nobody/no-such-model")
    assert result.returncode == 2
    error = result.stderr.strip().splitlines()[-1]
    assert "model.name_or_path" in error and "config.json" in error


def config_without(tmp_path: Path, key: str) -> Path:
    """A directory holding Llama-3.2-1B's config.json less `key`."""
    data = json.loads((REPO / "src" / "coreward" / "assets" / "model_configs" / "meta-llama--Llama-3.2-1B"
                       / "config.json").read_text())
    del data[key]
    (tmp_path / "config.json").write_text(json.dumps(data))
    return tmp_path


@pytest.mark.parametrize("args, names", [
    (["--gpu-memory", "80"], ["--gpu-memory", "needs a unit", "'80'"]),  # was read as 80 bytes and "fit"
    (["--gpu-memory", "-5GiB"], ["--gpu-memory", "positive", "'-5GiB'"]),
    (["--gpu-memory", "0GiB"], ["--gpu-memory", "positive", "'0GiB'"]),
    (["--gpu-memory", "abc"], ["--gpu-memory", "not a memory size", "'abc'"]),
    (["--device", "cpu", "--gpu-memory", "8"], ["--gpu-memory", "needs a unit"]),
    (["--engine", "zero4"], ["--engine", "'zero4'", "zero3"]),
    (["--gpus", "0"], ["--gpus", ">= 1"]),
    (["--device", "tpu"], ["--device", "'tpu'"]),
    ("no num_attention_heads", ["model.name_or_path", "config.json", "'num_attention_heads'"]),
], ids=["bare-number", "negative", "zero", "not-a-size", "cpu-bare-number", "engine", "no-gpus", "device",
        "config-json-key"])
def test_bad_input_is_one_line_naming_what_is_wrong_and_exit_2(args, names, tmp_path):
    if args == "no num_attention_heads":
        args = ["--set", f"model.name_or_path={config_without(tmp_path, 'num_attention_heads')}"]
    result = coreward_here("plan", "--config", GSM8K, *args)  # a traceback would raise here
    assert result.returncode == 2, result.stdout[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert all(name in lines[0] for name in names), lines[0]
    assert not result.stdout.strip()


def test_a_plan_that_does_not_fit_exits_3_and_is_printed_all_the_same():
    text = coreward_here("plan", "--config", GSM8K, "--gpu-memory", "8GiB")
    assert text.returncode == DOES_NOT_FIT and "does NOT fit" in text.stdout, text.stderr
    as_json = coreward_here("plan", "--config", GSM8K, "--gpu-memory", "8GiB", "--json")
    assert as_json.returncode == DOES_NOT_FIT and json.loads(as_json.stdout)["fits"] is False
    assert coreward_here("plan", "--config", GSM8K, "--gpu-memory", "80GiB").returncode == 0


def test_a_lora_plan_holds_no_head_weight_gradient_a_full_finetune_on_16_bit_weights_does():
    """TRL 1.16's fused head (trl/kernels/chunked_logprob.py) allocates the float32 gradient of its weight only `if
    needs_weight_grad`: under LoRA the head is frozen, so its backward holds the input's gradient and the tiles only.
    (Full finetune on float32 weights: that gradient is the weight's own, counted with the policy's gradients.)"""
    head = "policy log-prob head tiles (backward)"
    full = item(plan(GSM8K, "model.master_weights=none"), head)
    lora = item(plan(GSM8K, "model.master_weights=none", "lora.enabled=true"), head)
    shape = ModelShape.from_path("Qwen/Qwen2.5-1.5B-Instruct")
    assert full["bytes"] - lora["bytes"] == 4 * shape.vocab_size * shape.hidden_size  # the weight's float32 gradient
    assert lora["bytes"] == item(plan(GSM8K, "lora.enabled=true"), head)["bytes"]  # whatever the base's dtype


def test_training_over_a_gpu_is_refused_before_loading_with_what_would_fit():
    from coreward.grpo.config import as_train_config
    from coreward.grpo.plan import Hardware, check_before_loading
    from coreward.runtime.errors import CorewardError

    config = as_train_config(COOPER, COOPER_AS_WRITTEN)
    gpu = Hardware(gpus=1, device_bytes=80 * GIB, engine="one", device="cuda")
    with pytest.raises(CorewardError) as refused:
        check_before_loading(config, hardware=gpu)
    assert "RM update" in str(refused.value) and "--set rewards.0.params." in str(refused.value)
    assert "over" in check_before_loading(config, plan_check=False, hardware=gpu)  # --no-plan-check
    fitted = as_train_config(COOPER)
    assert check_before_loading(fitted, hardware=gpu).startswith("memory: planned peak")
    # on one 24 GiB GPU nothing fits with 10% to spare: the refusal names the closest that fit with less
    small = Hardware(gpus=1, device_bytes=24 * GIB, engine="one", device="cuda")
    with pytest.raises(CorewardError) as refused:
        check_before_loading(fitted, hardware=small)
    assert "x the 24.0 GiB" in str(refused.value) and "Closest that fit with less spare: --set" in str(refused.value)


# -- the plan on this CPU against `coreward train`'s measured peak
HIDDEN, VOCAB = 512, 151936  # Qwen2.5's vocabulary at a reduced width: 82M parameters, 314 MiB a float32 copy


def build_wide_policy(directory: Path) -> Path:
    """A random-initialised 2-layer Qwen2 with Qwen2.5's vocabulary at hidden 512 (the demo tokenizer reads the
    data; ids it lacks decode to nothing): model terms larger than the process's baseline."""
    import torch
    import transformers

    from coreward.demo.model import build_demo_tokenizer

    tokenizer = build_demo_tokenizer()
    config = transformers.Qwen2Config(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_hidden_layers=2, num_attention_heads=8,
        num_key_value_heads=2, head_dim=64, tie_word_embeddings=True, max_position_embeddings=512,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def wide_policy(tmp_path_factory) -> Path:
    """One wide policy for the file's runs (the same seed's weights each time it is built: built once)."""
    return build_wide_policy(tmp_path_factory.mktemp("wide") / "policy")


# A process whose only child is the command: its RUSAGE_CHILDREN ru_maxrss (KiB) is the child's peak resident set,
# what `/usr/bin/time -v` prints as "Maximum resident set size"
MEASURE = ("import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
           "print('maxrss_kib', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(code)")


@pytest.mark.parametrize("adapters", [[], ["lora.enabled=true", "micro_batches=by_length"], ["lora.enabled=true"]],
                         ids=["full", "lora", "lora-shared-prompt"])
def test_cpu_plan_predicts_the_peak_resident_memory_of_coreward_train(wide_policy, tmp_path, adapters):
    """A full fine-tune and LoRA, each prompt run once in the update (grpo/shared_prompts.py, the default), and LoRA
    with every row's prompt (micro_batches: by_length), whose larger blocks glibc's heap keeps once freed (`heap
    kept` in its plan)."""
    policy = wide_policy
    sets = [f"model.name_or_path={policy}", "grpo.num_generations=4", "grpo.per_device_train_batch_size=4",
            "grpo.max_completion_length=8", "data.max_prompt_tokens=24", "grpo.save_steps=100", "data.eval_every=0",
            "kl_from_init_estimator=k3", "torch_threads=1", *adapters]
    planned = plan(RULE_CONFIG, *sets, device="cpu")
    assert (HEAP_KEPT in [i["name"] for i in planned["items"]]) == ("micro_batches=by_length" in adapters)
    shared = "prompt(s) x" in item(planned, "policy update activations")["note"]
    assert shared == ("micro_batches=by_length" not in adapters)
    baseline = item(planned, "process baseline (torch, transformers, TRL imported)")["bytes"]
    # the model's terms dominate what the process starts with (LoRA's: its frozen base and activations, less)
    assert planned["peak_bytes"] - baseline > (0.5 if adapters else 2) * baseline
    command = [sys.executable, "-m", "coreward.cli", "train", "--config", str(RULE_CONFIG), "--max-steps", "2",
               "--output-dir", str(tmp_path / "run")]
    for item_ in sets:
        command += ["--set", item_]
    done = subprocess.run([sys.executable, "-c", MEASURE, *command], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "memory: planned peak" in done.stdout + done.stderr  # the run log's memory: line
    measured = int(done.stdout.split("maxrss_kib")[-1].split()[0]) * 1024
    assert 0.8 <= planned["peak_bytes"] / measured <= 1.2, (planned["peak_bytes"], measured, planned["phases"])


def test_a_co_optimized_ensemble_multiplies_the_rms_held_state_by_k_and_the_anchor_adds_one_float32_copy():
    one = plan(COOPER, *COOPER_AS_WRITTEN)
    three = plan(COOPER, *COOPER_AS_WRITTEN, "rewards.0.params.members=3")
    for part in ("weights", "float32 masters", "AdamW moments"):  # what each member keeps for the whole run
        name = f"rewards.0 Cooper RM {part}"
        assert item(three, name)["bytes"] == 3 * item(one, name)["bytes"] > 0, part
    for part in ("gradients", "update activations", "scoring pass"):  # the members update and score one at a time
        name = f"rewards.0 Cooper RM {part}"
        assert item(three, name)["bytes"] == item(one, name)["bytes"], part
    anchored = plan(COOPER, *COOPER_AS_WRITTEN, "rewards.0.params.anchor=0.1")
    count = parameter_count(ModelShape.from_path("Qwen/Qwen2.5-Math-1.5B-Instruct"), "score")
    assert item(anchored, "rewards.0 Cooper RM anchor weights")["bytes"] == 4 * count
    assert phase(anchored, "RM update") - phase(one, "RM update") == 4 * count
    assert not any("anchor" in i["name"] for i in one["items"])


def test_plan_bounds_the_prompts_by_the_training_data_as_train_does():
    """With data.max_prompt_tokens unset, `coreward train` plans at its data's longest prompt; `coreward plan` reads the
    same data and plans the same run (the demo's prompts are a few dozen characters: far below the 256-token default)."""
    demo = REPO / "configs" / "demo" / "rule.yaml"
    by_data = plan(demo, device="cpu")
    assert not any("256 tokens" in note for note in by_data["notes"]), by_data["notes"]
    at_256 = plan(demo, "data.max_prompt_tokens=256", device="cpu")
    assert item(by_data, "policy update activations")["bytes"] < item(at_256, "policy update activations")["bytes"]


def test_a_lora_policy_on_a_cpu_plans_the_activations_glibcs_heap_keeps_and_only_there():
    """On a CPU with glibc's default a LoRA policy's resident set held one more copy of its update's saved tensors
    (SmolLM2-135M: 1.47x a plan without it, docs/memory.md): planned as that copy in every phase; not for a full
    fine-tune (the demo's runs keep none), on a GPU, or with host_mmap_threshold (which returns the blocks)."""
    cpu_lora = plan(RULE_CONFIG, "lora.enabled=true", device="cpu")
    saved = item(cpu_lora, "policy update activations")["bytes"] + item(cpu_lora, "policy LoRA dropout copies")["bytes"]
    kept = item(cpu_lora, HEAP_KEPT)
    assert kept["bytes"] == saved > 0 and set(cpu_lora["phases"]) <= set(kept["phases"])  # every phase the step has
    without = plan(RULE_CONFIG, "lora.enabled=true", "host_mmap_threshold=1048576", device="cpu")
    assert cpu_lora["peak_bytes"] - without["peak_bytes"] == saved
    for other in (plan(RULE_CONFIG, device="cpu"), without, plan(RULE_CONFIG, "lora.enabled=true")):
        assert HEAP_KEPT not in [i["name"] for i in other["items"]]


def test_the_sampling_copy_is_planned_in_the_dtype_it_samples_in_where_rollouts_use_one():
    """A LoRA policy on a CPU samples from a merged copy of its weights (runtime/sampling.py): one more copy of the
    weights, in every phase, in sampling.dtype; none with sampling.engine: policy, on a GPU, or for a full float32
    fine-tune left to auto (the copy would change nothing there)."""
    from coreward.grpo.plan.generation import SAMPLING_COPY
    from coreward.runtime.assets import resolve_model

    count = parameter_count(ModelShape.from_path(resolve_model("demo")), "lm")
    lora = plan(RULE_CONFIG, "lora.enabled=true", device="cpu")
    copy = item(lora, SAMPLING_COPY)
    assert copy["bytes"] == 4 * count and set(copy["phases"]) >= set(lora["phases"])  # the demo policy: float32
    assert item(plan(RULE_CONFIG, "lora.enabled=true", "sampling.dtype=bfloat16", device="cpu"),
                SAMPLING_COPY)["bytes"] == 2 * count
    without = plan(RULE_CONFIG, "lora.enabled=true", "sampling.engine=policy", device="cpu")
    assert phase(lora, "policy update") - phase(without, "policy update") == copy["bytes"]
    for other in (without, plan(RULE_CONFIG, "lora.enabled=true"), plan(RULE_CONFIG, device="cpu")):
        assert SAMPLING_COPY not in [i["name"] for i in other["items"]]


def test_lora_dropout_keeps_a_copy_of_each_adapted_layers_input_and_checkpointing_keeps_one_layers():
    """PEFT's LoRA dropout saves the dropped-out input (and its mask) of every adapted map for backward: planned
    with dropout, not without it (lora_A then reads the layer's input, already counted), one layer's worth when
    the layers are recomputed."""
    name = "policy LoRA dropout copies"
    shape = ModelShape.from_path("Qwen/Qwen2.5-1.5B-Instruct")
    with_dropout = item(plan(GSM8K, "lora.enabled=true", "lora.dropout=0.05", "grpo.gradient_checkpointing=false"),
                        name)
    assert name not in [i["name"] for i in plan(GSM8K, "lora.enabled=true", "lora.dropout=0")["items"]]
    checkpointed = item(plan(GSM8K, "lora.enabled=true", "lora.dropout=0.05", "grpo.gradient_checkpointing=true"),
                        name)
    assert with_dropout["bytes"] == shape.num_hidden_layers * checkpointed["bytes"]


# -- advice that fits, and each method's own part of the plan
def replanned(config: Path, suggestion: dict, *sets: str, **options: str | int) -> dict:
    """The plan of `config` (with `sets` and `options`) with a suggestion's settings applied."""
    options.update(s[2:].split(" ", 1) for s in suggestion["set"] if s.startswith("--"))
    return plan(config, *sets, *(s for s in suggestion["set"] if not s.startswith("--")), **options)


@pytest.mark.parametrize("size", ["40GiB", "32GiB"])  # on 24 GiB nothing fits with 10% spare since the allocator's
# margin, NCCL's and vLLM's residue are planned (23.7 GiB with the best combination): docs/memory.md
def test_cooper_on_one_smaller_gpu_gets_settings_for_that_gpu_that_fit_with_10_percent_to_spare(size):
    """Settings the plan knows, combined (the RM's checkpointing, vLLM's sleep, AdamW without float32 masters, ...),
    fit Cooper's paper config on one GPU of the user's size: proposed before more GPUs, each with 10% to spare."""
    planned = plan(COOPER, gpu_memory=size)
    assert not planned["fits"], planned["phases"]
    suggestions = planned["suggestions"]
    assert suggestions and not suggestions[0]["set"][0].startswith("--gpus"), suggestions  # the same GPU first
    on_more_gpus = [s["set"][0].startswith("--gpus") for s in suggestions]
    assert on_more_gpus == sorted(on_more_gpus), suggestions  # more GPUs only after every same-GPU suggestion
    for suggestion in suggestions:
        again = replanned(COOPER, suggestion, gpu_memory=size)
        assert again["fits"] and again["peak_bytes"] <= (1 - SPARE) * again["device_bytes"], suggestion
        assert again["peak_bytes"] == suggestion["peak_bytes"]


def test_where_nothing_fits_with_spare_the_plan_shows_the_closest_that_fit_the_fewest_gpus_and_what_is_missing():
    """Cooper's paper config on one 24 GiB GPU: no combination fits with 10% to spare, so the plan shows the closest
    that fit with less (each planned again: it fits, with less than 10% spare), the fewest 24 GiB GPUs that fit with
    10% (one fewer does not), what each costs in the step's terms, and the memory missing as a size and a ratio."""
    planned = plan(COOPER, gpu_memory="24GiB")
    assert not planned["fits"] and not [s for s in planned["suggestions"] if not s["set"][0].startswith("--")]
    assert planned["missing_bytes"] == planned["peak_bytes"] - planned["device_bytes"]
    assert planned["needs_ratio"] == pytest.approx(planned["peak_bytes"] / planned["device_bytes"], abs=1e-4)
    assert planned["needs_ratio"] > 2
    assert planned["near"], "the closest combinations that fit with less spare"
    for near in planned["near"]:
        again = replanned(COOPER, near, gpu_memory="24GiB")
        assert again["fits"] and again["peak_bytes"] == near["peak_bytes"] > (1 - SPARE) * again["device_bytes"]
    checkpointing = next(n for n in planned["near"] if "rewards.0.params.gradient_checkpointing=true" in n["set"])
    assert "adds about 33% to the RM update time" in checkpointing["cost"], checkpointing["cost"]
    fewest = planned["fewest_gpus"]
    gpus = int(fewest["set"][0].split()[1])
    assert fewest["set"][1] == "--engine zero3"
    assert replanned(COOPER, fewest, gpu_memory="24GiB")["peak_bytes"] <= (1 - SPARE) * 24 * GIB
    one_fewer = plan(COOPER, gpu_memory="24GiB", gpus=gpus - 1, engine="zero3")
    assert one_fewer["peak_bytes"] > (1 - SPARE) * 24 * GIB
    text = coreward_here("plan", "--config", COOPER, "--gpu-memory", "24GiB").stdout
    assert f"needs {planned['needs_ratio']:.2f}x the memory" in text and "% spare)" not in text.split("lengths:")[0]
    assert f"--gpus {gpus} --engine zero3" in text and "closest that fit with less than 10% to spare" in text


def test_a_plan_lists_only_the_phases_its_config_has():
    """Majority voting has no reward model: its plan has no RM update or RM step phase; Cooper's has both."""
    majority = plan(REPO / "configs" / "paper" / "majority_math_qwen.yaml")
    assert list(majority["phases"]) == ["generation", "reward scoring", "policy update"], majority["phases"]
    text = coreward_here("plan", "--config", REPO / "configs" / "paper" / "majority_math_qwen.yaml").stdout
    assert "RM update" not in text and "rm-upd" not in text and "RM step" not in text
    assert {"RM update", "RM step"} <= set(plan(COOPER)["phases"])


def test_a_colocated_vllm_whose_share_cannot_hold_an_8b_policy_does_not_fit():
    """Qwen3-8B's bf16 weights (~15 GiB) do not go into 0.3 x 40 GiB: the plan does not fit whatever its peak says,
    exits 3, says why, and proposes a share that holds them (with vLLM asleep outside generation)."""
    planned = plan(MATH, gpu_memory="40GiB")
    assert not planned["fits"] and any("vLLM's share" in p for p in planned["problems"]), planned["problems"]
    assert planned["suggestions"]
    for suggestion in planned["suggestions"]:
        again = replanned(MATH, suggestion, gpu_memory="40GiB")
        assert again["fits"] and not again["problems"], suggestion
        assert again["peak_bytes"] <= (1 - SPARE) * again["device_bytes"], suggestion
    assert not plan(MATH)["problems"]  # 0.3 x 80 GiB holds them: the shipped config as it is


def test_a_plan_that_fits_on_a_gpu_says_which_of_its_terms_no_gpu_has_checked():
    planned = plan(MATH)  # 8 x 80 GiB under ZeRO-3, colocated vLLM
    assert planned["fits"]
    assert "vLLM reservation (colocated)" in planned["unmeasured_on_gpu"]
    assert "gathered weights (sharded engine)" in planned["unmeasured_on_gpu"]
    text = coreward_here("plan", "--config", MATH).stdout
    assert "no GPU has checked yet" in text and "vLLM reservation (colocated)" in text.split("no GPU has checked")[1]


def test_a_users_registered_source_that_loads_a_model_is_planned_by_its_own_declaration(tmp_path):
    """A source declares what it holds (`memory_needs`, rewards/memory.py); the plan sums it and knows no method."""
    from coreward.grpo.config import RewardSpec, as_train_config
    from coreward.grpo.plan import Hardware, plan_run
    from coreward.rewards import RewardSource, register
    from coreward.rewards.base import _REGISTRY
    from coreward.rewards.memory import MemoryNeeds, PlannedRun, model_weights
    from coreward.runtime.memory import config_path

    judge_dir = tmp_path / "my_judge"
    judge_dir.mkdir()
    shutil.copy(config_path("Qwen/Qwen2.5-1.5B-Instruct"), judge_dir / "config.json")  # its config.json only

    @register("test_user_judge_model")
    class UserJudge(RewardSource):
        @dataclass
        class Params:
            path: str = ""  # the judge model's directory

        @classmethod
        def memory_needs(cls, params, run: PlannedRun) -> MemoryNeeds:
            return MemoryNeeds([model_weights(run, params.path, "user judge", f"{run.key}.params.path")])

        def compute(self, batch):
            return [0.0] * len(batch)

    try:
        config = as_train_config(GSM8K)
        without = plan_run(config, Hardware())
        config.rewards = [RewardSpec(name="test_user_judge_model", params={"path": str(judge_dir)})]
        planned = plan_run(config, Hardware())
    finally:
        _REGISTRY.pop("test_user_judge_model", None)
    weights = next(i for i in planned.items if i.name == "rewards.0 user judge weights")
    shape = ModelShape.from_path(judge_dir)
    assert weights.bytes == parameter_count(shape, "lm") * 2  # the config's bfloat16
    margins = [sum(i.bytes for i in p.items if i.name == MARGIN) for p in (planned, without)]
    for name in ("generation", "reward scoring", "policy update"):
        assert planned.phase_bytes(name) - margins[0] - without.phase_bytes(name) + margins[1] == weights.bytes, name


def test_the_plan_names_no_method():
    """grpo/plan/ decides nothing by a reward's name: each registered method's part is its own declaration."""
    import re

    from coreward.rewards import registered_sources

    names = [name for name in registered_sources() if not name.startswith("test_")]
    package = REPO / "src" / "coreward" / "grpo" / "plan"
    offenders = [f"{path.name}: {name!r}" for path in sorted(package.glob("*.py")) for name in names
                 if re.search(rf"""["']{re.escape(name)}["']""", path.read_text())]
    assert not offenders, offenders
