"""Every paper config learns in its own precision: a paper config that cannot learn fails CI.

Each `configs/paper/*.yaml` is run on CPU for 2 steps as it is written — its model dtype (bf16: float32 weights,
bf16 autocast), its grpo.bf16, its learning rate and schedule, loss, KL, reward settings, Cooper's bf16 RM, the
EMA teacher — at a reduced shape: a small Qwen3 policy (see `family` for the Qwen2.5 rows) that knows four demo
problems by heart, so rewards vary within a group and GRPO has a
signal (and the entropy reward at weight 0.01, which always varies); the demo task's data in its plain format; 4 completions of at most 24 tokens; transformers generation
instead of vLLM; one process (the Co-rewarding configs' ZeRO-2 launch is tests/grpo/test_precision.py's).
Files and services a paper run needs are swapped for local ones (the VerifyRM → a small random RM of the same
family, the assistant endpoint → the perturbing assistant, rephrasing files → the demo's rephrasings), and the
answer readers for the demo's answers (verl's `#### n` and `\\boxed{}` strings: the demo policy writes `#n`).

Then the same run in float32 (weights and compute: `model.dtype=float32`, `grpo.bf16=false`, Cooper's
`rm_dtype=float32`) is the reference, and the policy's update norm ‖θ_final − θ_init‖, Cooper's RM's (its
float32 masters, the weights its AdamW updates) and Co-rewarding-II's teacher's must each be 0.5–2× the
reference's. On the code before float32 weights the policy's ratio was ~0.1 (runtime/precision.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from coreward.runtime.config import read_yaml_with_base
from coreward.runtime.precision import update_norm
from tests.helpers.runs import coreward_here


REPO = Path(__file__).resolve().parents[1]
PAPER = sorted((REPO / "configs" / "paper").glob("*.yaml"))
BAND = (0.5, 2.0)
STEPS = 2

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def family(config: dict) -> str:
    """The stand-in's architecture: Qwen3 for every row. The Qwen2.5 rows would take Qwen2, but transformers 5
    loads any `qwen2` checkpoint's tokenizer as Qwen2Tokenizer, whose byte-level pre-tokenizer cannot read the demo's
    character vocabulary ("Ann has 17" becomes 2 ids), so a small Qwen2 stand-in never answers a demo problem and
    its rule reward gives GRPO no signal. The modules whose dtype matters (Linear, RMSNorm, tied embeddings) are
    the same in both; the real Qwen2.5-1.5B shape is benchmarks/gpu/gpu_check.py's learning check, on a GPU."""
    name = config["model"]["name_or_path"].lower()
    assert "qwen2.5" in name or "qwen3" in name, f"no test family for {name}: add one"
    return "qwen3"


def build_memorized(directory: Path) -> Path:
    """A small Qwen3 trained on the first four demo problems and their demo rephrasings (Co-rewarding-I rolls out
    both; each view's label is the other's vote)."""
    from coreward.data.synthetic import load_demo, rephrase_demo
    from tests.helpers.tiny_models import train_small_policy

    problems = load_demo("train", 4)
    return train_small_policy(directory, lambda tokenizer: [q + r.solution + tokenizer.eos_token for r in problems
                                                            for q in (r.question, rephrase_demo(r.question))], 80)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """Per family: (the memorized policy, a random VerifyRM on a backbone of that family)."""
    from coreward.rm.model import VerifyRM

    built = {}
    for arch in ("qwen3",):
        root = tmp_path_factory.mktemp(arch)
        policy = build_memorized(root / "policy")
        torch.manual_seed(0)
        VerifyRM.from_backbone(policy, device="cpu", add_template_tokens=True, max_length=128).save_pretrained(root / "rm")
        built[arch] = (policy, root / "rm")
    return built


def reduced(config: dict, policy: Path, rm: Path) -> list[str]:
    """The reduced shape, and the local stand-ins for the files and services a paper run needs. The entropy reward
    (weight 0.01) joins the config's rewards: with 4 completions a group can be all right or all wrong in one run
    and not in the other, and a step without reward variance teaches nothing; the entropy term varies as long as
    the completions differ. They are sampled at temperature 1.5: at the papers' 1.0 the memorized policy can write
    one completion four times over (every group's rewards equal, no update at all), and whether it does depends on
    the CPU's floating-point path (it did on a 2-core AMD EPYC, not on an Intel Xeon)."""
    import json

    rewards = config["rewards"] + [{"name": "entropy", "weight": 0.01}]
    items = [f"rewards={json.dumps(rewards)}", f"model.name_or_path={policy}", "data.train=demo", "data.split=train", "data.limit=4",
             "data.prompt_format=plain", "data.instruction=null", "data.system_prompt=null",
             "data.max_prompt_tokens=null", "data.eval_every=0", "data.eval=null", "grpo.use_vllm=false",
             "grpo.num_generations=4", "grpo.per_device_train_batch_size=8", "grpo.gradient_accumulation_steps=1",
             "grpo.max_completion_length=24", "grpo.save_steps=1000", "grpo.gradient_checkpointing=false",
             "grpo.temperature=1.5", "torch_threads=1"]
    for i, reward in enumerate(config["rewards"]):
        params, key = reward.get("params") or {}, f"rewards.{i}.params"
        if params.get("match") == "gsm8k_strict" or params.get("match") == "exact":
            items.append(f"{key}.match=verified")
        if params.get("extract") == "boxed_raw":
            items.append(f"{key}.extract=default")
        if reward["name"] == "cooper":
            items += [f"{key}.rm={rm}", f"{key}.assistant=perturb", f"{key}.positive_match=verified",
                      f"{key}.batch_size=16"]
        if reward["name"] == "model":
            items.append(f"{key}.path={rm}")
        for name in ("rephrasings", "teacher_rephrasings"):
            if params.get(name):
                items.append(f"{key}.{name}=demo")
    return items


def float32_reference(config: dict) -> list[str]:
    items = ["model.dtype=float32", "grpo.bf16=false", "grpo.fp16=false"]
    return items + [f"rewards.{i}.params.rm_dtype=float32" for i, r in enumerate(config["rewards"])
                    if r["name"] == "cooper"]


def train(config_path: Path, run_dir: Path, items: list[str]) -> str:
    args = ["train", "--config", config_path, "--output-dir", run_dir, "--max-steps", STEPS]
    for item in items:
        args += ["--set", item]
    result = coreward_here(*args)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout + result.stderr


def moved(run_dir: Path, relative: str, initial: dict[str, torch.Tensor]) -> float:
    return update_norm(initial, {k: v.float() for k, v in load_file(run_dir / relative).items()})


def rm_masters_moved(run_dir: Path, rm: Path, dtype: str) -> float:
    """Cooper's RM: the float32 masters its AdamW updated (a bf16 RM: they start from the RM as loaded in bf16) or
    its float32 weights, from `final/`."""
    from coreward.rm.model import VerifyRM

    saved = run_dir / "final" / "reward_sources" / "cooper"
    initial = [p.detach().float() for p in VerifyRM.from_pretrained(rm, device="cpu", dtype=dtype).model.parameters()
               if p.requires_grad]
    if (saved / "master_weights.pt").is_file():
        after = torch.load(saved / "master_weights.pt")
    else:
        after = [p.detach().float() for p in VerifyRM.from_pretrained(saved / "rm", device="cpu").model.parameters()
                 if p.requires_grad]
    return update_norm(dict(enumerate(initial)), dict(enumerate(after)))


@pytest.mark.slow
@pytest.mark.parametrize("config_path", PAPER, ids=[p.stem for p in PAPER])
def test_paper_config_learns_in_its_own_precision(config_path, models, tmp_path):
    config = read_yaml_with_base(config_path)
    policy, rm = models[family(config)]
    items = reduced(config, policy, rm)
    log = train(config_path, tmp_path / "own", items)
    train(config_path, tmp_path / "fp32", items + float32_reference(config))
    assert config["model"]["dtype"] == "bfloat16" and "compute bfloat16" in log  # the papers' precision ran

    initial = {k: v.float() for k, v in load_file(policy / "model.safetensors").items()}
    ratios = {}
    reference = moved(tmp_path / "fp32", "final/model.safetensors", initial)
    assert reference > 0, "the float32 reference did not move: no learning signal at this shape"
    ratios["policy"] = moved(tmp_path / "own", "final/model.safetensors", initial) / reference
    names = [r["name"] for r in config["rewards"]]
    if "cooper" in names:
        [cooper] = [r.get("params", {}) for r in config["rewards"] if r["name"] == "cooper"]
        ratios["rm"] = (rm_masters_moved(tmp_path / "own", rm, cooper.get("rm_dtype", "float32"))
                        / rm_masters_moved(tmp_path / "fp32", rm, "float32"))
    if "co_rewarding_2" in names:
        teacher = "final/reward_sources/co_rewarding_2/teacher.safetensors"
        ratios["teacher"] = moved(tmp_path / "own", teacher, initial) / moved(tmp_path / "fp32", teacher, initial)
    print(f"{config_path.stem}: " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()))
    assert all(BAND[0] <= r <= BAND[1] for r in ratios.values()), ratios
