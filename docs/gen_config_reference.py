"""The config reference (docs/reference/config.md), generated from the config dataclasses so it cannot go stale.

Every key of `coreward train`'s config (grpo/config.py), of every registered reward's `Params`
(rewards/*.py), of `coreward rm train` (rm/train.py) and of `coreward sft` (demo/sft.py): its type, its
default and its help. The help of a field is, in this order: `metadata={"help": ...}`, the comment on its
line, the comment block right above it (a block that heads a group of fields, `# -- ...` or one word such as
`# model (...)`, belongs to none), or the line written for it in WRITTEN_HERE below.

Two ways to run it:
    python docs/gen_config_reference.py [OUTPUT.md]     # prints (or writes) the page
    mkdocs build                                         # mkdocs.yml names this file as a hook: `on_files`
                                                         # adds the page to the site at build time
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
import types
import typing
from collections.abc import Iterator
from typing import Any


PAGE = "reference/config.md"

# (key prefix, dataclass) of each configuration file, filled lazily (importing them loads torch)
FieldRow = tuple[str, str, str, str]  # key, type, default, help


def config_classes() -> list[tuple[str, str, type, str]]:
    """(title, command, dataclass, intro) of each config file coreward reads."""
    from coreward.demo.sft import DemoSFTConfig
    from coreward.evaluation.evaluate import EvalSettings
    from coreward.grpo.config import TrainConfig
    from coreward.rm.train import RMTrainConfig

    return [
        ("Training: `coreward train --config F`", "train", TrainConfig,
         "`configs/demo/*.yaml` and `configs/paper/*.yaml` are examples. Every key below can also be set with "
         "`--set KEY=VALUE` (list items by index: `--set rewards.0.weight=2`)."),
        ("Reward-model training: `coreward rm train --config F`", "rm", RMTrainConfig,
         "`configs/rm/*.yaml` are examples."),
        ("Demo SFT: `coreward sft --config F`", "sft", DemoSFTConfig,
         "`configs/demo/sft.yaml` mirrors these defaults."),
        ("Evaluation: `coreward eval` and `coreward.evaluate`", "eval", EvalSettings,
         "Not read from a file: each key is an option of `coreward eval` (`top_p` is `--top-p`, `output_dir` is "
         "`--output`), a keyword of `coreward.evaluate(model, ...)`, and a field of "
         "`coreward.evaluation.EvalSettings` for `coreward.evaluate(model, settings)`."),
    ]


# --------------------------------------------------------------------------- help text from the source

# Help for fields whose declaration has no comment yet, by "Class.field". The comment in the source wins: move
# a line from here to a comment beside its field (tests/test_docs.py checks that each entry names a real field).
WRITTEN_HERE = {
    "ModelSettings.dtype": "the policy's weights' dtype (`auto`: the checkpoint's own)",
    "ModelSettings.attn_implementation": "transformers' `attn_implementation` (`sdpa`, `flash_attention_2`, ...); "
                                         "null: transformers' choice",
    "ModelSettings.trust_remote_code": "allow the model's own code from its repository (transformers' option)",
    "LoraSettings.enabled": "train a peft LoRA adapter on the policy instead of all its weights",
    "LoraSettings.r": "LoRA rank",
    "LoraSettings.alpha": "LoRA scaling alpha",
    "LoraSettings.dropout": "dropout on the LoRA branch, in [0, 1)",
    "LoraSettings.target_modules": "modules that get an adapter: a name list, or peft's `all-linear`",
    "DataSettings.split": "split of `train` to read",
    "DataSettings.limit": "use the first `limit` problems (null: all)",
    "DataSettings.data_dir": "where registered benchmarks are read (null: `$COREWARD_DATA`, else `../shared/data` "
                             "beside the repository)",
    "DataSettings.prompt_format": "`chat`: the tokenizer's chat template over a user message (question + "
                                  "instruction); `plain`: the question and instruction as bare text",
    "DataSettings.instruction": "appended to every question (both papers' `\\boxed{}` request); null: none",
    "DataSettings.system_prompt": "a system message before the question (chat format); null: none",
    "DataSettings.reference_column": "the column holding the reference answer the rule verifier compares with",
    "DataSettings.eval_split": "split of `eval` to read",
    "DataSettings.eval_limit": "evaluate on the first `eval_limit` problems (null: all)",
    "DataSettings.eval_every": "evaluate on `eval` every K steps (0: never)",
    "DataSettings.eval_n": "samples per problem in the periodic evaluation",
    "DataSettings.eval_temperature": "sampling temperature of the periodic evaluation",
    "RewardSpec.name": "a registered method (the table below), or `module.path:Name` (a RewardSource subclass or "
                       "a TRL reward function)",
    "RewardSpec.weight": "this source's weight in the summed reward",
    "RewardSpec.params": "the method's parameters (its table below)",
    "VerifierSettings.timeout_s": "hard deadline of one answer comparison (a timeout counts as incorrect)",
    "VerifierSettings.num_workers": "verifier worker processes (null: one per core)",
    "TrainConfig.rewards": "the reward sources; their rewards are summed with their weights",
    "TrainConfig.grpo": "any `trl.GRPOConfig` option (next section)",
    "TrainConfig.seed": "seed of the run (policy sampling, data order, reward sources)",
    "TrainConfig.output_dir": "the run directory (`--output-dir` overrides it)",
    "RMModelSettings.dtype": "what the RM computes in: bfloat16/float16 through the trainer's autocast over float32 weights (unless `master_weights: none`)",
    "RMDataSettings.eval_fraction": "share of train's questions held out when `eval` is unset",
    "RMTrainConfig.seed": "seed of the split and of training",
    "RMTrainConfig.output_dir": "where the RM is written (`--output-dir` overrides it)",
    "DemoSFTConfig.output_dir": "where the policy is written (`--output-dir` overrides it)",
    "DemoSFTConfig.seed": "seed of the model's initialization and of the data order",
    "DemoSFTConfig.hidden": "hidden size of the demo model (`demo/model.py`'s build_demo_model)",
    "DemoSFTConfig.layers": "decoder layers",
    "DemoSFTConfig.heads": "attention heads",
    "DemoSFTConfig.kv_heads": "key/value heads (grouped-query attention)",
    "DemoSFTConfig.intermediate": "MLP width",
    "DemoSFTConfig.answer_formats": "share of each final-answer format in the training solutions "
                                    "(`hash`: `#### r`, `boxed`: `\\boxed{r}`, `ans`: `ans r`)",
    "DemoSFTConfig.batch_size": "problems per optimizer step",
    "DemoSFTConfig.learning_rate": "AdamW learning rate",
    "DemoSFTConfig.adam_beta2": "AdamW beta2",
    "DemoSFTConfig.lr_scheduler": "transformers' learning-rate schedule name",
    "DemoSFTConfig.warmup_steps": "linear warmup steps",
    "DemoSFTConfig.weight_decay": "AdamW weight decay",
    "DemoSFTConfig.max_grad_norm": "gradient-norm clip",
    "DemoSFTConfig.logging_steps": "log every K steps",
    "DemoSFTConfig.report_to": "transformers' `report_to` (`none`, `tensorboard`, ...)",
    "DemoSFTConfig.eval_samples": "sampled solutions per held-out problem",
    "DemoSFTConfig.eval_temperature": "temperature of those samples",
    "DemoSFTConfig.max_new_tokens": "generation length limit in evaluation",
}


def field_help(cls: type) -> dict[str, str]:
    """Each field's help: its metadata, else the comment beside it, else the comment block right above it (in the
    class that declares the field: a dataclass may extend another, as Cooper's Params extend
    rewards/cooper/learner.py's LearnerSettings)."""
    comments: dict[str, str] = {}
    for declaring in reversed(cls.__mro__):
        if dataclasses.is_dataclass(declaring):
            comments.update(_source_comments(declaring))
    return {f.name: f.metadata.get("help") or comments.get(f.name) or WRITTEN_HERE.get(f"{cls.__name__}.{f.name}", "")
            for f in dataclasses.fields(cls)}


_FIELD_LINE = re.compile(r"^\s+(\w+)\s*:\s*[^#]+?(?:#\s*(.*))?$")
_COMMENT_LINE = re.compile(r"^\s+#\s?(.*)$")


def _source_comments(cls: type) -> dict[str, str]:
    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return {}
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("class "))
    found: dict[str, str] = {}
    block: list[str] = []
    body_indent = None
    for line in lines[start + 1:]:
        indent = len(line) - len(line.lstrip())
        if not line.strip():
            block = []
            continue
        body_indent = body_indent if body_indent is not None else indent
        if indent != body_indent:  # a method body or a nested class: not a field
            continue
        comment = _COMMENT_LINE.match(line)
        if comment:
            block.append(comment.group(1).strip())
            continue
        match = _FIELD_LINE.match(line)
        if match and not line.lstrip().startswith(("def ", "class ", "@")):
            above = " ".join(block) if block and not _is_heading(block) else ""
            beside = (match.group(2) or "").strip()
            found[match.group(1)] = " ".join(t for t in (above, beside) if t)
        block = []
    return found


def _is_heading(block: list[str]) -> bool:
    """A comment that heads a group of fields (`# -- the RM's update schedule`, `# model (see build_demo_model)`)."""
    return block[0].startswith("--") or (len(block) == 1 and re.fullmatch(r"\w+( \(.*\))?", block[0]) is not None)


# --------------------------------------------------------------------------- types and defaults as YAML spells them


def type_name(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is type(None):
        return "null"
    if tp is Any:
        return "any"
    if origin is typing.Literal:
        return " \\| ".join(f'"{a}"' if isinstance(a, str) else str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(type_name(a) for a in args)
    if origin in (list, tuple):
        return f"list[{type_name(args[0])}]" if args else "list"
    if origin is dict or tp is dict:
        return f"mapping[{type_name(args[0])}, {type_name(args[1])}]" if args else "mapping"
    return {bool: "bool", int: "int", float: "float", str: "str"}.get(tp, getattr(tp, "__name__", str(tp)))


def default_text(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "required"
    if dataclasses.is_dataclass(value):
        return "(section)"
    return yaml_scalar(value)


def yaml_scalar(value: Any) -> str:
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        text = value if len(value) <= 60 else value[:57] + "..."
        return f'`"{text}"`'.replace("\n", "\\n")
    if isinstance(value, list) and value and all(dataclasses.is_dataclass(v) for v in value):
        return "`[" + ", ".join("{" + f"name: {v.name}" + "}" for v in value) + "]`"
    if isinstance(value, dict):
        return "`{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}`"
    return f"`{value}`"


# --------------------------------------------------------------------------- rows


def rows(cls: type, prefix: str = "") -> Iterator[FieldRow]:
    """One row per key of `cls`, nested dataclass sections flattened to dotted keys (`data.train`)."""
    hints = typing.get_type_hints(cls)
    helps = field_help(cls)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        key = f"{prefix}{f.name}"
        tp = hints[f.name]
        item = typing.get_args(tp)[0] if typing.get_origin(tp) is list and typing.get_args(tp) else None
        if dataclasses.is_dataclass(tp):
            yield from rows(tp, f"{key}.")
        elif item is not None and dataclasses.is_dataclass(item):
            yield key, "list", default_text(f), helps[f.name]
            yield from rows(item, f"{key}.N.")
        else:
            yield key, type_name(tp), default_text(f), helps[f.name]


def table(found: list[FieldRow]) -> list[str]:
    out = ["| key | type | default | help |", "|---|---|---|---|"]
    for key, tp, default, text in found:
        out.append(f"| `{key}` | {tp} | {default} | {_cell(text)} |")
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ") if text else "—"


def reward_sections() -> Iterator[tuple[str, str, list[FieldRow]]]:
    """(name, first docstring line, rows) of every registered reward method."""
    from coreward.rewards import registered_sources

    for name, cls in sorted(registered_sources().items()):
        doc = inspect.getdoc(inspect.getmodule(cls)) or ""
        yield name, doc.splitlines()[0] if doc else "", list(rows(cls.Params, "params."))


def missing_help() -> list[str]:
    """Keys without help text (tests/test_docs.py requires none)."""
    found = [r for _, _, cls, _ in config_classes() for r in rows(cls)]
    found += [(f"rewards: {name}: {r[0]}", *r[1:]) for name, _, section in reward_sections() for r in section]
    return [key for key, _, _, text in found if not text.strip()]


# --------------------------------------------------------------------------- the page


def render() -> str:
    from coreward.grpo.config import _FIXED, _MANAGED, DEFAULT_SAVE_TOTAL_LIMIT

    out = ["# Config reference", "",
           "Generated from the config dataclasses by `docs/gen_config_reference.py` at every docs build: each key, "
           "its type, its default and the comment written beside it in the source. A key not listed here is an "
           "error that names it (`grpo:` takes TRL's options, checked against `trl.GRPOConfig`).", ""]
    for title, command, cls, intro in config_classes():
        out += [f"## {title}", "", intro, ""]
        out += table(list(rows(cls)))
        out.append("")
        if command == "train":
            out += _grpo_section(_MANAGED, _FIXED, DEFAULT_SAVE_TOTAL_LIMIT)
            out += _rewards_section()
    return "\n".join(out) + "\n"


def _grpo_section(managed: dict, fixed: dict, save_total_limit: int) -> list[str]:
    out = ["### `grpo:` (any `trl.GRPOConfig` option)", "",
           "Keys and scalar types are checked against TRL 1.16's `GRPOConfig` "
           "([TRL's reference](https://huggingface.co/docs/trl/grpo_trainer#trl.GRPOConfig)). coreward sets "
           "these itself and refuses them here:", ""]
    out += [f"- `grpo.{key}`: set {where}" for key, where in managed.items()]
    out += [f"- `grpo.{key}`: must be `{value!r}` ({why})" for key, (value, why) in fixed.items()]
    out += ["", f"`grpo.save_total_limit` is the number of complete checkpoints coreward keeps (default "
                f"{save_total_limit}; `null`: all).", ""]
    return out


def _rewards_section() -> list[str]:
    out = ["### Reward parameters (`rewards.N.params`)", "",
           "Each entry of `rewards:` names a method and its `params`; the rewards of several entries are summed "
           "with their `weight`.", ""]
    for name, summary, section in reward_sections():
        out += [f"#### `{name}`", "", summary, ""]
        out += table(section) if section else ["No parameters."]
        out.append("")
    return out


# --------------------------------------------------------------------------- mkdocs hook


def on_files(files, config):
    """mkdocs hook: add the generated page to the site."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, PAGE, content=render()))
    return files


if __name__ == "__main__":
    page = render()
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as out:
            out.write(page)
    else:
        print(page, end="")
