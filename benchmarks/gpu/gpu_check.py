"""One command for the GPU checks: bf16 GRPO steps of real-size models, vLLM generation, and evaluation.

    python -m benchmarks.gpu.gpu_check                        # a GPU: Qwen2.5-1.5B shapes, bf16, colocated vLLM
    python -m benchmarks.gpu.gpu_check --tiny --steps 1       # CPU (the default without CUDA): tiny shapes
    python -m benchmarks.gpu.gpu_check --parts rule,eval_vllm # a subset

Nothing is downloaded. The policy is a random-initialised `Qwen2ForCausalLM` built from Qwen2.5-1.5B's
config.json (written out below), Cooper's RM a `VerifyRM` of the same shape; a stand-in tokenizer (the demo
tokenizer's pieces, padded with filler tokens to Qwen's 151,936 ids, so every id a random model samples
decodes) replaces Qwen's, and prompts come from the demo task. Rewards therefore carry no signal: this checks
that each configuration runs, and measures its cost. The parts, each its own process:

    rule                   rule reward, policy generation in a colocated vLLM engine
    cooper                 Cooper: its RM scored and trained on the policy's device, colocated vLLM
    cooper_rm_own_device   Cooper with the RM on a device of its own: the second GPU when there is one, else
                           the RM on the GPU with its AdamW state offloaded to the CPU (optimizer_offload)
    cooper_sharded         Cooper under FSDP2 (`accelerate launch`, one process per GPU; on CPU two gloo
                           processes generating with transformers), so the RM is sharded like the policy where
                           the engine shards it
    rm_update              Cooper's RM learner alone (rm/learner.py) on synthetic (positive, negative) pairs of
                           RM-length text, on the RM's own device (the second GPU when there is one): a random
                           policy writes no verified positive, so the Cooper parts above score with the RM and
                           hold its weights but make no RM update; this part measures the update
    co_rewarding_2         Co-rewarding-II: the EMA teacher's rollouts sampled by the policy's vLLM engine
    eval_vllm              `coreward eval --backend vllm` of the policy

`--rm-settings gradient_checkpointing=true,max_tokens_per_pass=4096,param_offload=true,optimizer_offload=true` (any
of them) turns the RM's memory settings on for `rm_update` and the Cooper parts (`cooper_sharded` takes
gradient_checkpointing and optimizer_offload only: a sharded RM refuses the others); `rm_update` runs the batch it
asks for (`--pairs` pairs; 4 sequences a pass in the learning check), given to the learner as its `batch_size`.

The learning check (on by default on a GPU, `--learning` on CPU): every training part runs at the papers' policy
learning rate (1e-6) in bf16 (`model.dtype: bfloat16`: float32 weights, bf16 autocast) and once more as an
float32 reference (float32 weights and compute, the same seed, steps and batch), and its row gives the update's
norm ‖θ_final − θ_init‖ (read from each run's `final/`) as a ratio to the reference's; a ratio outside 0.5–2×
fails the row (pure bf16 weights give ~0.1×: their AdamW steps round away). A random policy earns the same
reward on every completion, so GRPO's advantages would all be 0 and nothing would move: the learning check adds
the entropy reward (weight 0.01) to each part, whose logit pass lands in the reward column. Co-rewarding-II's
EMA teacher is compared the same way; `rm_update` compares Cooper's RM learner in bf16 (float32 masters, the
default) and with the authors' pure bf16 (`master_weights: none`) with a float32 RM (the norm of the weights the
optimizer updates, over its steps at lr 1e-5).

Without vLLM installed, the training parts generate with transformers (the table says so) and eval_vllm is
skipped; on CPU with vLLM, vLLM's CPU build runs through tests/helpers/vllm_cpu.py (weights kept syncable).
Per part the table gives the median step time over the steps after the first (all steps when there is one),
split into phases from metrics.jsonl (generation, reward, update; the teacher's sampling and the RM's update
are parts of the reward phase; for eval_vllm, its sampling and answer-checking times sit in the generation and
reward columns), and the peak memory per device over the part: GPU memory in use on each GPU
(nvidia-smi, every process on it), or the peak resident memory of the part's process tree on CPU.
Beside it, the memory plan (grpo/plan.py, `coreward plan`) is checked: the plan's peak per device (and its phase)
for the part's own config on its own hardware, the peak its main process measured, and measured / planned. A
`coreward train` part's numbers are its run's memory.json (planned by the run itself before it loaded: this GPU's
memory, the launch's processes and engine; measured: `torch.cuda.max_memory_allocated`, or the peak RSS on CPU);
rm_update plans the RM update phase of a Cooper plan with its settings (the RM's items, plus the process baseline
on CPU) and measures the same way after its updates; eval_vllm is not planned.
The table is printed and written to `--out` (default benchmarks/results/) as gpu_check-DATE-DEVICE.json and .md,
with the date, machine, commit and command.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]
PARTS = ("rule", "cooper", "cooper_rm_own_device", "cooper_sharded", "rm_update", "co_rewarding_2", "eval_vllm")

# Qwen2.5-1.5B's config.json (written here: nothing is fetched)
QWEN25_15B = {
    "vocab_size": 151936, "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28, "num_attention_heads": 12,
    "num_key_value_heads": 2, "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True, "hidden_act": "silu", "max_window_layers": 21, "sliding_window": None, "use_sliding_window": False,
}
# tiny: the same architecture at the demo's scale (head size 32, which vLLM's CPU attention supports)
TINY = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "max_position_embeddings": 512, "rope_theta": 10000.0, "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True, "hidden_act": "silu"}

# the RM's memory settings `--rm-settings` may turn on (rm/learner.py's LearnerSettings, rm/inputs.py's RMInputSettings)
RM_SETTINGS = {"gradient_checkpointing": bool, "optimizer_offload": bool, "param_offload": bool, "max_tokens_per_pass": int}
RM_OPTIONS = ("param_offload", "max_tokens_per_pass")  # the VerifyRM's (RMInputSettings.rm_options); the rest the learner's
SHARDED_REFUSES = RM_OPTIONS  # an RM sharded like the policy refuses these


def parse_rm_settings(text: str) -> dict:
    """`key=value,...` of RM_SETTINGS into typed values (an unknown key or a bad value: an error naming it)."""
    settings = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, _, value = item.partition("=")
        kind = RM_SETTINGS.get(key)
        if kind is None:
            raise argparse.ArgumentTypeError(f"unknown {key!r} (known: {', '.join(RM_SETTINGS)})")
        if kind is bool and value.lower() in ("true", "false"):
            settings[key] = value.lower() == "true"
        elif kind is int and value.isdigit():
            settings[key] = int(value)
        else:
            raise argparse.ArgumentTypeError(f"{key} takes {'true or false' if kind is bool else 'a count'}, got {value!r}")
    return settings


LEARNING_LR = 1e-6  # the papers' policy learning rate (Cooper; Co-rewarding: 3e-6)
LEARNING_BAND = (0.5, 2.0)  # the update norm's ratio to the float32 reference that counts as "learns as fp32"

# per-step work: (prompts x completions, completion tokens); the GPU sizes are a small real batch
GPU_BATCH = {"prompts": 8, "generations": 8, "completion_tokens": 512, "vllm_memory": 0.3}
TINY_BATCH = {"prompts": 2, "generations": 4, "completion_tokens": 16, "vllm_memory": 0.1}


# --------------------------------------------------------------------------- models
def standin_tokenizer(vocab_size: int | None):
    """The demo tokenizer, padded with `<|f{i}|>` filler pieces to `vocab_size` ids (None: as it is)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from coreward.demo import model as demo

    tokenizer = demo.build_demo_tokenizer()
    if vocab_size is None:
        return tokenizer
    pieces = list(demo.demo_vocabulary())
    pieces += [f"<|f{i}|>" for i in range(vocab_size - len(pieces))]
    backend = Tokenizer(models.WordLevel({p: i for i, p in enumerate(pieces)}, unk_token=demo.UNK))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(demo.PIECE_PATTERN), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token=demo.PAD, bos_token=demo.BOS,
                                   eos_token=demo.EOS, unk_token=demo.UNK, padding_side="left",
                                   clean_up_tokenization_spaces=False, model_max_length=4096,
                                   chat_template=demo.CHAT_TEMPLATE)


def build_models(root: Path, tiny: bool) -> tuple[Path, Path]:
    """The random policy (bf16 on GPU shapes, fp32 tiny) and a VerifyRM of the same shape."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from coreward.rm.model import VerifyRM

    tokenizer = standin_tokenizer(None if tiny else QWEN25_15B["vocab_size"])
    shape = {**TINY, "vocab_size": len(tokenizer)} if tiny else QWEN25_15B
    ids = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
               "pad_token_id": tokenizer.pad_token_id}
    torch.manual_seed(0)
    policy = Qwen2ForCausalLM(Qwen2Config(**shape, **ids)).to(torch.float32 if tiny else torch.bfloat16)
    policy.generation_config.pad_token_id = tokenizer.pad_token_id
    policy.save_pretrained(root / "policy")
    tokenizer.save_pretrained(root / "policy")
    del policy
    VerifyRM.from_backbone(root / "policy", device="cpu", add_template_tokens=False,
                           max_length=256 if tiny else 1024).save_pretrained(root / "rm")
    return root / "policy", root / "rm"


# --------------------------------------------------------------------------- memory
class PeakMemory:
    """Peak memory per device while a part runs, polled every 0.2 s: on GPU `nvidia-smi`'s memory.used of each
    GPU (what every process holds there, vLLM's reservation included), on CPU the summed RSS of the part's
    process tree (its own workers included)."""

    def __init__(self, gpus: int, process: subprocess.Popen):
        self.gpus, self.process, self.peak = gpus, process, {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> dict[str, float]:
        if self.gpus:
            out = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True).stdout
            return {f"cuda:{i.strip()}": float(m) / 1024 for i, m in (line.split(",") for line in out.splitlines() if "," in line)}
        import psutil

        try:
            root = psutil.Process(self.process.pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return {}
        total = 0
        for member in tree:
            try:
                total += member.memory_info().rss
            except psutil.NoSuchProcess:
                pass
        return {"cpu": total / 2**30}

    def _poll(self) -> None:
        while not self._stop.is_set():
            for device, gib in self._sample().items():
                self.peak[device] = max(self.peak.get(device, 0.0), gib)
            self._stop.wait(0.2)


# --------------------------------------------------------------------------- parts
def has_vllm() -> bool:
    return importlib.util.find_spec("vllm") is not None


def part_command(part: str, policy: Path, rm: Path, run_dir: Path, steps: int, tiny: bool, gpus: int,
                 use_vllm: bool, learning: bool = False, reference: bool = False,
                 rm_settings: dict | None = None) -> list[str] | None:
    """The command of one part (None: it cannot run here). `learning`: at lr 1e-6 in bf16 with the entropy reward
    added (see the module's docstring); `reference`: that run's float32 reference; `rm_settings`: RM_SETTINGS."""
    batch = TINY_BATCH if tiny else GPU_BATCH
    rm_settings = rm_settings or {}
    if part == "rm_update":
        device = "cuda:1" if gpus >= 2 else "cuda:0" if gpus else "cpu"
        return [sys.executable, str(Path(__file__).resolve()), "--rm-child", str(rm), "--device", device,
                "--steps", str(max(steps, 2)), "--dtype", "float32" if tiny and not learning else "bfloat16",
                "--pairs", str(batch["prompts"]), "--text-chars", "100" if tiny else "1000",
                "--out", str(run_dir / "rm_update.json"), "--rm-settings", json.dumps(rm_settings),
                "--policy", str(policy), *(["--learning"] if learning else [])]
    if part == "eval_vllm":
        if not use_vllm:
            return None
        return [sys.executable, "-m", "coreward.cli", "eval", "--model", str(policy), "--benchmarks", "demo",
                "--n", str(batch["generations"]), "--limit", str(4 * batch["prompts"]), "--backend", "vllm",
                "--vllm-memory", str(batch["vllm_memory"]), "--max-new-tokens", str(batch["completion_tokens"]),
                "--prompt-format", "plain", "--instruction", "", "--output", str(run_dir)]
    method = "cooper" if part.startswith("cooper") else part
    dtype = "float32" if (tiny and not learning) or reference else "bfloat16"
    overrides = [f"model.name_or_path={policy}", f"model.dtype={dtype}", f"data.limit={4 * batch['prompts']}",
                 "data.eval_every=0", "data.eval=null", f"grpo.num_generations={batch['generations']}",
                 f"grpo.per_device_train_batch_size={batch['prompts'] * batch['generations']}",
                 f"grpo.max_completion_length={batch['completion_tokens']}", "grpo.save_strategy='no'",
                 f"grpo.use_vllm={str(use_vllm).lower()}", f"torch_threads={1 if tiny and not gpus else 'null'}"]
    if use_vllm:
        overrides += ["grpo.vllm_mode=colocate", f"grpo.vllm_gpu_memory_utilization={batch['vllm_memory']}"]
        if not tiny:
            overrides += [f"grpo.vllm_max_model_length={4 * batch['completion_tokens']}"]
    config = REPO / "configs" / "demo" / f"{method}.yaml"
    if learning:
        from coreward.runtime.config import read_yaml_with_base

        rewards = read_yaml_with_base(config)["rewards"] + [{"name": "entropy", "weight": 0.01}]
        overrides += [f"grpo.learning_rate={LEARNING_LR}", f"rewards={json.dumps(rewards)}"]
    if reference:
        overrides += ["grpo.bf16=false", "grpo.fp16=false"]
    if method == "cooper":
        overrides += [f"rewards.0.params.rm={rm}", "rewards.0.params.eval_every=0",
                      f"rewards.0.params.rm_dtype={'float32' if tiny or reference else 'bfloat16'}",
                      f"rewards.0.params.batch_size={min(32, batch['prompts'] * batch['generations'])}"]
    if method == "cooper":
        overrides += [f"rewards.0.params.{key}={json.dumps(value)}" for key, value in rm_settings.items()
                      if part != "cooper_sharded" or key not in SHARDED_REFUSES]
    if part == "cooper_rm_own_device":
        overrides += ["rewards.0.params.device=cuda:1"] if gpus >= 2 else \
            ["rewards.0.params.optimizer_offload=true"] if gpus == 1 else ["rewards.0.params.device=cpu"]
    train = ["train", "--config", str(config), "--output-dir", str(run_dir), "--max-steps", str(steps)]
    for item in overrides:
        train += ["--set", item]
    if part == "cooper_sharded":
        accelerate = REPO / "configs" / "accelerate" / ("fsdp2.yaml" if gpus else "fsdp2_cpu.yaml")
        processes = max(gpus, 1) if gpus else 2
        precision = ["--mixed_precision", "no" if reference or (tiny and not learning) else "bf16"]
        return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(accelerate),
                "--num_processes", str(processes), "--main_process_port", "0", *precision, "-m", "coreward.cli",
                *train]
    if use_vllm and not gpus:  # vLLM's CPU build: weights kept in a form TRL's sync can write (test helper)
        return [sys.executable, str(REPO / "tests" / "helpers" / "vllm_cpu.py"), *train]
    return [sys.executable, "-m", "coreward.cli", *train]


def phase_times(run_dir: Path) -> dict[str, float]:
    """Median seconds per step of each phase, over the steps after the first (all of them if only one)."""
    from coreward.runtime.metrics import read_metrics

    rows = [row for row in read_metrics(run_dir / "metrics.jsonl") if "step_time" in row]
    rows = rows[1:] or rows
    keys = {"step": "step_time", "generation": "time/generation", "reward": "time/reward", "update": "time/update",
            "teacher_generation": "time/teacher_generation", "rm_update": "time/rm_update"}
    return {name: statistics.median(row[key] for row in rows) for name, key in keys.items()
            if rows and all(key in row for row in rows)} | {"steps_timed": len(rows)}


def engine_line(log: str) -> str | None:
    for line in log.splitlines():
        if line.startswith("engine:"):
            return line.strip()
    return None


def run_part(part: str, policy: Path, rm: Path, root: Path, steps: int, tiny: bool, gpus: int,
             use_vllm: bool, timeout_s: float, learning: bool = False, rm_settings: dict | None = None) -> dict:
    run_dir = root / part
    # on CPU the sharded part generates with transformers: vLLM's CPU build needs the one-process test wrapper
    use_vllm = use_vllm and (gpus > 0 or part != "cooper_sharded")
    if part == "rm_update":
        run_dir.mkdir(parents=True, exist_ok=True)
    command = part_command(part, policy, rm, run_dir, steps, tiny, gpus, use_vllm, learning, rm_settings=rm_settings)
    if command is None:
        return {"part": part, "status": "skipped", "why": "vllm is not installed"}
    start = time.perf_counter()
    returncode, text, peak = run_logged(command, gpus, timeout_s)
    result = {"part": part, "status": "ok" if returncode == 0 else f"failed ({returncode})",
              "generation": "–" if part == "rm_update" else "vllm" if use_vllm else "transformers", "seconds": round(time.perf_counter() - start, 1),
              "peak_memory_gib": {k: round(v, 2) for k, v in sorted(peak.items())},
              "command": shlex.join(command)}
    if returncode != 0:
        result["log_tail"] = text[-4000:]
    elif part == "rm_update":
        result["phases_s"] = json.loads((run_dir / "rm_update.json").read_text())
        if learning:
            result["learning"] = result["phases_s"].pop("learning")
        result["memory_plan"] = part_memory(part, run_dir, result["phases_s"])
        result["phases_s"].pop("memory", None)
    elif part == "eval_vllm":
        result["memory_plan"] = part_memory(part, run_dir, None)
        results = json.loads((run_dir / "results.json").read_text())
        result["eval"] = {"settings": results.get("settings"),  # results.json's timing keys are top-level
                          "timing": {k: v for k, v in results.items() if k.endswith(("_s", "per_s"))}}
    else:
        result["phases_s"] = phase_times(run_dir)
        result["memory_plan"] = part_memory(part, run_dir, None)
        result["engine"] = engine_line(text)
        result["precision"] = next((line for line in text.splitlines() if line.startswith("precision:")), None)
        if learning:
            result["learning"] = learning_check(part, policy, rm, root, run_dir, steps, tiny, gpus, use_vllm, timeout_s,
                                                rm_settings)
    if result["status"] == "ok" and "learning" in result and not result["learning"]["ok"]:
        result["status"] = "failed (learning)"
    import shutil

    for folder in (run_dir, root / f"{part}-fp32"):  # a real-size run's files are GBs: the next part needs the disk
        shutil.rmtree(folder, ignore_errors=True)
    return result


def run_logged(command: list[str], gpus: int, timeout_s: float) -> tuple[int, str, dict[str, float]]:
    """Run a part's command from the repository root: its exit status, its output and its peak memory per device."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO), os.environ.get("PYTHONPATH", "")]),
           "TOKENIZERS_PARALLELISM": "false"}
    if not gpus:
        env.setdefault("OMP_NUM_THREADS", "1")
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, text=True, env=env, cwd=REPO)
        with PeakMemory(gpus, process) as memory:
            try:
                returncode = process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                returncode = process.wait()
        log.seek(0)
        return returncode, log.read(), memory.peak


def moved(initial: dict, final_file: Path) -> float:
    """‖final − initial‖ of the tensors a saved file holds (float64 sums)."""
    from safetensors.torch import load_file

    from coreward.runtime.precision import update_norm

    return update_norm(initial, load_file(final_file))


def learning_check(part: str, policy: Path, rm: Path, root: Path, run_dir: Path, steps: int, tiny: bool, gpus: int,
                   use_vllm: bool, timeout_s: float, rm_settings: dict | None = None) -> dict:
    """The part's bf16 run against its float32 reference (the same `rm_settings`): the policy's update norm (and the
    EMA teacher's), as a ratio; `ok` when each ratio lies in LEARNING_BAND."""
    from safetensors.torch import load_file

    reference_dir = root / f"{part}-fp32"
    command = part_command(part, policy, rm, reference_dir, steps, tiny, gpus, use_vllm, True, reference=True,
                           rm_settings=rm_settings)
    returncode, text, _ = run_logged(command, gpus, timeout_s)
    if returncode != 0:
        return {"ok": False, "why": f"the float32 reference failed ({returncode})", "log_tail": text[-4000:]}
    initial = {k: v.float() for k, v in load_file(policy / "model.safetensors").items()}
    found = {"policy": (run_dir / "final" / "model.safetensors", reference_dir / "final" / "model.safetensors")}
    teacher = Path("final") / "reward_sources" / "co_rewarding_2" / "teacher.safetensors"
    if (run_dir / teacher).is_file():
        found["teacher"] = (run_dir / teacher, reference_dir / teacher)
    check: dict = {"lr": LEARNING_LR, "reference_command": shlex.join(command)}
    for name, (ours, theirs) in found.items():
        norm, ref = moved(initial, ours), moved(initial, theirs)
        check[name] = {"update_norm": norm, "fp32_update_norm": ref, "ratio": norm / ref if ref else float("nan")}
    check["ok"] = all(LEARNING_BAND[0] <= check[name]["ratio"] <= LEARNING_BAND[1] for name in found)
    return check


def rm_child(rm: Path, device: str, steps: int, dtype: str, pairs: int, text_chars: int, out: Path,
             learning: bool = False, rm_settings: dict | None = None, policy: Path | None = None) -> None:
    """`steps` RM updates on `pairs` synthetic pairs (one AdamW step each); median seconds after the first.
    `rm_settings`: RM_SETTINGS, the VerifyRM's and the learner's. `policy`: the RM's backbone, for its memory plan
    (`rm_update_plan`), given beside the peak this process measured over those updates."""
    import random

    import torch

    from coreward.rewards.cooper.learner import Pair, RMLearner
    from coreward.rm.model import VerifyRM

    rng = random.Random(0)

    def text() -> str:
        return "".join(rng.choice("0123456789+-=;#") for _ in range(text_chars))

    batches = [[Pair(question=text()[:40], reference=text()[:8], positive=text(), negative=text()) for _ in range(pairs)]
               for _ in range(steps)]
    # learning: 4 sequences per forward pass, so a float32 1.5B RM's activations fit beside its AdamW state; the
    # learner's batch_size is what its update runs (the VerifyRM's is for scoring)
    batch_size = 4 if learning else 2 * pairs
    rm_settings = rm_settings or {}
    rm_options = {k: v for k, v in rm_settings.items() if k in RM_OPTIONS}
    learner_settings = {k: v for k, v in rm_settings.items() if k not in RM_OPTIONS}

    def load(load_dtype: str, **settings) -> RMLearner:
        return RMLearner(VerifyRM.from_pretrained(str(rm), device=device, dtype=load_dtype, batch_size=batch_size,
                                                  **rm_options), lr=1e-5, batch_size=batch_size,
                         **learner_settings, **settings)

    learner = load(dtype)
    before = rm_updated_weights(learner)
    times = []
    for batch in batches:
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        metrics = learner.update(batch)
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
        assert metrics and learner.updates > 0, "the RM made no optimizer step"
    timed = times[1:] or times
    report = {"rm_update": statistics.median(timed), "steps_timed": len(timed), "rm_optimizer_steps": learner.updates,
              "sequences_per_pass": learner.batch_size, "rm_settings": rm_settings}
    if policy is not None:  # measured now: the learning check's other learners below are no part of this plan
        from coreward.grpo.measured_memory import measured_peak

        planned = rm_update_plan(policy, rm, device, dtype, batch_size, rm_settings)
        measured = measured_peak(device)
        report["memory"] = {"planned": planned, "measured": measured,
                            "ratio": measured["peak_bytes"] / planned["peak_bytes"]}
    if learning:  # the same pairs: float32 RM (the reference) and the authors' pure bf16 RM, against this run's
        import gc

        from coreward.runtime.precision import update_norm

        norms = {dtype: update_norm(before, rm_updated_weights(learner))}
        del learner, before
        for name, load_dtype, settings in (("float32", "float32", {}), ("bfloat16, master_weights none", "bfloat16",
                                                                       {"master_weights": "none"})):
            gc.collect()
            if device.startswith("cuda"):
                torch.cuda.empty_cache()  # the previous learner's weights and moments go before the next loads
            other = load(load_dtype, **settings)
            start = rm_updated_weights(other)
            for batch in batches:
                other.update(batch)
            norms[name] = update_norm(start, rm_updated_weights(other))
            del other, start
        ref = norms["float32"]
        ratios = {name: norm / ref for name, norm in norms.items() if name != "float32"}
        report["learning"] = {"lr": 1e-5, "update_norms": norms, "ratios": ratios,
                              "ok": LEARNING_BAND[0] <= ratios[dtype] <= LEARNING_BAND[1]}
    out.write_text(json.dumps(report))


def rm_update_plan(policy: Path, rm: Path, device: str, dtype: str, batch_size: int, rm_settings: dict) -> dict:
    """What the memory plan (grpo/plan.py) gives the RM learner alone: the RM's items of a Cooper plan with this
    part's settings (the demo Cooper config, this RM, its dtype, `batch_size` sequences a pass, `rm_settings`) on
    this device (one GPU's memory, or the CPU's RAM with the process baseline), at the larger of its RM update and
    RM step phases."""
    from coreward.grpo.config import as_train_config
    from coreward.grpo.plan import Hardware, machine_ram_bytes, plan_run

    overrides = [f"model.name_or_path={policy}", f"rewards.0.params.rm={rm}", f"rewards.0.params.rm_dtype={dtype}",
                 f"rewards.0.params.batch_size={batch_size}",
                 *(f"rewards.0.params.{key}={json.dumps(value)}" for key, value in rm_settings.items())]
    config = as_train_config(REPO / "configs" / "demo" / "cooper.yaml", overrides)
    if device.startswith("cuda"):
        import torch

        hardware = Hardware(gpus=1, device_bytes=torch.cuda.mem_get_info(device)[1], engine="one", device="cuda")
    else:
        hardware = Hardware(gpus=1, device_bytes=machine_ram_bytes(), engine="one", device="cpu")
    plan = plan_run(config, hardware)
    held = [item for item in plan.items if item.name.startswith(("rewards.0 Cooper RM", "process baseline"))]
    phases = {phase: sum(item.bytes for item in held if phase in item.phases) for phase in ("RM update", "RM step")}
    peak_phase = max(phases, key=phases.get)
    return {"peak_bytes": phases[peak_phase], "peak_phase": peak_phase, "phases": phases,
            "device_bytes": plan.device_bytes, "items": [item.name for item in held]}


def part_memory(part: str, run_dir: Path, phases: dict | None) -> dict:
    """The plan's peak per device beside what the part measured (its main process's: memory.json of its
    `coreward train` run; rm_update's own record), as {planned_bytes, peak_phase, measured_bytes, measure,
    ratio}; {"why": ...} where there is none."""
    if part == "eval_vllm":
        return {"why": "not planned (coreward eval: the plan covers training steps)"}
    if part == "rm_update":
        record = (phases or {}).get("memory")
        if not record:
            return {"why": "no record"}
        planned, measured = record["planned"], record["measured"]
    else:
        from coreward.grpo.measured_memory import MEMORY_FILE

        if not (run_dir / MEMORY_FILE).is_file():
            return {"why": f"no {MEMORY_FILE}"}
        record = json.loads((run_dir / MEMORY_FILE).read_text())
        planned, measured = record.get("planned"), record["measured"]
        if planned is None:
            return {"why": "not planned", "measured_bytes": measured["peak_bytes"], "measure": measured["measure"]}
    return {"planned_bytes": planned["peak_bytes"], "peak_phase": planned["peak_phase"],
            "measured_bytes": measured["peak_bytes"], "measure": measured["measure"],
            "max_memory_reserved": measured.get("max_memory_reserved"), "ratio": record["ratio"]}


def rm_updated_weights(learner) -> dict:
    """The weights the RM's AdamW updates (its float32 masters where it keeps some), on the CPU."""
    return {i: t.detach().float().cpu().clone() for i, t in enumerate(learner.optimized)}


# --------------------------------------------------------------------------- report
def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gpus = []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout
        gpus = [line.strip() for line in out.splitlines() if line.strip()]
    except (OSError, subprocess.TimeoutExpired):
        pass
    return {"cpu": f"{os.cpu_count()}-core {cpu}", "gpus": gpus, "python": platform.python_version()}


def commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, cwd=REPO).stdout.strip()
        return head + ("+uncommitted changes" if dirty else "") if head else "unknown"
    except OSError:
        return "unknown"


def table(report: dict) -> str:
    m = report["machine"]
    lines = [f"# GPU check, {report['date']}", "",
             f"- machine: {', '.join(m['gpus']) or 'no GPU'}; {m['cpu']}",
             f"- commit: {report['commit']}", f"- command: `{report['command']}`",
             f"- models: {report['models']}; steps per part: {report['steps']}; {report['batch']}",
             f"- RM settings: {json.dumps(report.get('rm_settings') or {})}", "",
             "| part | status | generation | step s | generation s | reward s | (teacher s) | (RM update s) | update s "
             "| peak memory GiB | planned peak GiB | measured GiB | measured / planned |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]

    def cell(phases: dict, key: str) -> str:
        return f"{phases[key]:.2f}" if key in phases else "–"

    def planned_cells(r: dict) -> str:
        """The plan's peak per device, what the part's main process measured (GPU: max_memory_allocated; CPU: peak
        RSS), and their ratio."""
        plan = r.get("memory_plan") or {}
        if "planned_bytes" not in plan:
            return f"{plan.get('why', '–')} | – | –"
        what = "allocated" if plan["measure"] == "max_memory_allocated" else "RSS"
        return (f"{plan['planned_bytes'] / 2**30:.2f} ({plan['peak_phase']}) | {plan['measured_bytes'] / 2**30:.2f} "
                f"({what}) | {plan['ratio']:.2f}")

    for r in report["parts"]:
        memory = ", ".join(f"{d} {g:.1f}" for d, g in r.get("peak_memory_gib", {}).items()) or "–"
        phases = r.get("phases_s", {})
        if r["part"] == "eval_vllm" and r.get("eval", {}).get("timing"):
            timing = r["eval"]["timing"]  # the evaluation's sampling, then its answer checking, in the reward column
            lines.append(f"| {r['part']} | {r['status']} | vllm | – | {timing.get('generation_time_s', 0):.2f} | "
                         f"{timing.get('scoring_time_s', 0):.2f} | – | – | – | {memory} | {planned_cells(r)} |")
            continue
        lines.append(f"| {r['part']} | {r['status']} | {r.get('generation', '–')} | {cell(phases, 'step')} | "
                     f"{cell(phases, 'generation')} | {cell(phases, 'reward')} | {cell(phases, 'teacher_generation')} | "
                     f"{cell(phases, 'rm_update')} | {cell(phases, 'update')} | {memory} | {planned_cells(r)} |")
    learned = [r for r in report["parts"] if r.get("learning")]
    if learned:
        lines += ["", f"Learning check: update norm ‖θ_final − θ_init‖ in bf16 over the float32 reference's, lr "
                  f"{LEARNING_LR:g} (Cooper's RM: 1e-5); a row fails outside {LEARNING_BAND[0]}–{LEARNING_BAND[1]}x.", "",
                  "| part | model | bf16 update norm | fp32 update norm | ratio |", "| --- | --- | --- | --- | --- |"]
        for r in learned:
            check = r["learning"]
            if r["part"] == "rm_update":
                norms = check["update_norms"]
                for name, ratio in check["ratios"].items():
                    lines.append(f"| rm_update | Cooper's RM, {name} | {norms[name]:.3e} | {norms['float32']:.3e} | "
                                 f"{ratio:.2f} |")
                continue
            if "why" in check:
                lines.append(f"| {r['part']} | – | – | – | {check['why']} |")
            for name in ("policy", "teacher"):
                if name in check:
                    c = check[name]
                    lines.append(f"| {r['part']} | {name} | {c['update_norm']:.3e} | {c['fp32_update_norm']:.3e} | "
                                 f"{c['ratio']:.2f} |")
    for r in report["parts"]:
        if r.get("precision"):
            lines.append(f"\n{r['part']}: {r['precision']}")
        if r.get("engine"):
            lines.append(f"\n{r['part']}: {r['engine']}")
        if r["status"] == "skipped":
            lines.append(f"\n{r['part']}: skipped, {r['why']}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    if "--rm-child" in (sys.argv if argv is None else argv):
        child = argparse.ArgumentParser()
        for name in ("--rm-child", "--device", "--dtype", "--out"):
            child.add_argument(name)
        for name in ("--steps", "--pairs", "--text-chars"):
            child.add_argument(name, type=int)
        child.add_argument("--learning", action="store_true")
        child.add_argument("--rm-settings", type=json.loads, default={})
        child.add_argument("--policy", type=Path, default=None)
        a = child.parse_args(argv)
        rm_child(Path(a.rm_child), a.device, a.steps, a.dtype, a.pairs, a.text_chars, Path(a.out), a.learning,
                 a.rm_settings, a.policy)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="tiny shapes (the default without CUDA)")
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps per training part (default: 3 on GPU, 1 tiny)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {','.join(PARTS)}")
    parser.add_argument("--no-vllm", action="store_true", help="generate with transformers even where vLLM is installed")
    parser.add_argument("--completion-tokens", type=int, default=None,
                        help="completion length per rollout (default: 512 on GPU, 16 tiny)")
    parser.add_argument("--learning", action=argparse.BooleanOptionalAction, default=None,
                        help="the learning check (bf16 against a float32 reference at lr 1e-6); default: on a GPU only")
    parser.add_argument("--rm-settings", type=parse_rm_settings, default={},
                        help="the RM's memory settings for rm_update and the Cooper parts, e.g. "
                             "gradient_checkpointing=true,max_tokens_per_pass=4096,param_offload=true,optimizer_offload=true")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per part before it is stopped")
    parser.add_argument("--budget", type=float, default=1440, help="seconds in all: parts not started by then are skipped")
    args = parser.parse_args(argv)
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    tiny = args.tiny or not gpus
    steps = args.steps or (1 if tiny else 3)
    learning = not tiny if args.learning is None else args.learning
    use_vllm = has_vllm() and not args.no_vllm
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"--parts: unknown {', '.join(unknown)} (known: {', '.join(PARTS)})")
    batch = TINY_BATCH if tiny else GPU_BATCH
    if args.completion_tokens:
        batch["completion_tokens"] = args.completion_tokens
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine(), "commit": commit(),
              "command": shlex.join(["python", "-m", "benchmarks.gpu.gpu_check", *(sys.argv[1:] if argv is None else argv)]),
              "models": ("tiny Qwen2 (hidden 128, 2 layers), fp32" if tiny else
                         "random Qwen2.5-1.5B shape, bf16 (policy and RM)"),
              "batch": f"{batch['prompts']} prompts x {batch['generations']} completions of "
                       f"{batch['completion_tokens']} tokens per step", "steps": steps, "learning": learning,
              "rm_settings": args.rm_settings,
              "parts": []}
    print(f"gpu_check: {report['models']}; {gpus} GPU(s); generation with {'vllm' if use_vllm else 'transformers'}",
          flush=True)
    started = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"gpu_check-{time.strftime('%Y%m%d-%H%M', time.gmtime())}-{'gpu' if gpus else 'cpu'}{'-tiny' if tiny and gpus else ''}"

    def write() -> str:
        # after every part: a device lease that ends mid-check keeps the parts already measured
        report["total_s"] = round(time.perf_counter() - started, 1)
        text = table(report) + f"\ntotal: {report['total_s']} s\n"
        (args.out / f"{stem}.json").write_text(json.dumps(report, indent=1) + "\n")
        (args.out / f"{stem}.md").write_text(text)
        return text

    with tempfile.TemporaryDirectory() as tmp:
        policy, rm = build_models(Path(tmp), tiny)
        print(f"models built ({time.perf_counter() - started:.0f} s)", flush=True)
        for part in parts:
            if time.perf_counter() - started > args.budget:
                report["parts"].append({"part": part, "status": "skipped", "why": f"the --budget of {args.budget:.0f} s was spent"})
                continue
            result = run_part(part, policy, rm, Path(tmp), steps, tiny, gpus, use_vllm, args.timeout, learning,
                              args.rm_settings)
            report["parts"].append(result)
            print(f"  {part}: {result['status']} ({result.get('seconds', 0)} s)", flush=True)
            write()
    print("\n" + write())
    print(f"written: {args.out / stem}.json, .md")
    return 0 if all(r["status"] in ("ok", "skipped") for r in report["parts"]) else 1


if __name__ == "__main__":
    sys.exit(main())
