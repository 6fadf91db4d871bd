"""Does a model path load? Checked before training starts, without loading any weights (issue 38, fail fast).

`check_model(name_or_path, kind, key)` reads what `from_pretrained` would read first and is cheap to read:

* the folder exists and holds a `config.json` (a run directory given instead of its `final/` is named as such);
* transformers parses that config, and knows a model class of the kind asked for (a causal LM for a policy or an
  assistant; a sequence classifier with one logit for a VerifyRM);
* a weights file is there (`model.safetensors`, `pytorch_model.bin`, or a sharded index and every shard it names),
  and each safetensors file's header is whole (a file cut short by a failed copy is caught here: the header says
  how many bytes the tensors take, and safetensors compares that with the file's size);
* the tokenizer loads (small: its files, not the model's).

A hub id has its config and tokenizer fetched (or read from the local cache offline); its weights are not.
The error names the setting (`key`), the path and the cause. The weights are loaded once, later, by the trainer.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from coreward.runtime.assets import is_asset, resolve_model
from coreward.runtime.errors import CorewardError


SAFETENSORS, SAFETENSORS_INDEX = "model.safetensors", "model.safetensors.index.json"
TORCH_BIN, TORCH_BIN_INDEX = "pytorch_model.bin", "pytorch_model.bin.index.json"
ROLES = {"policy": "a causal language model", "rm": "a one-logit sequence classifier (a VerifyRM)"}


def check_model(name_or_path: str | os.PathLike, kind: str = "policy", key: str = "model", *,
                trust_remote_code: bool = False, assets: bool = True) -> str:
    """The path or hub id `from_pretrained` will read (as `resolve_model` gives it), once it is known to load.

    `kind`: "policy" (a causal LM: the policy, an assistant) or "rm" (a VerifyRM); `assets`: whether an asset name
    ("demo") means the shipped model of that kind (False for settings that pass the name to transformers as it is).
    """
    name = str(name_or_path)
    if not assets and not Path(name).expanduser().is_dir() and (os.path.isabs(name) or name.startswith((".", "~"))
                                                                or name.count("/") > 1):
        raise CorewardError(f"{key}: no such directory: {name} (give a saved model directory or a hub id)")
    where = resolve_model(name, kind, key=key) if assets or not is_asset(name) else name
    folder = Path(where)
    if folder.is_dir():
        if (folder / "adapter_config.json").is_file() and not (folder / "config.json").is_file():
            return where  # a PEFT adapter: transformers loads its base model first, named in the adapter's config
        _check_folder(folder, key)
    config = _config(where, key, trust_remote_code)
    _check_model_class(config, kind, where, key)
    _check_tokenizer(where, key, trust_remote_code)
    return where


def _check_folder(folder: Path, key: str) -> None:
    """A config and whole weight files in a local model folder."""
    if not (folder / "config.json").is_file():
        inside = sorted(p.name for p in folder.iterdir() if (p / "config.json").is_file())
        hint = f"; it holds the model folder(s) {', '.join(inside[:4])}: did you mean {folder / inside[0]}?" if inside else ""
        raise CorewardError(f"{key}: {folder} is not a saved model (no config.json in it){hint}")
    for index in (SAFETENSORS_INDEX, TORCH_BIN_INDEX):
        if (folder / index).is_file():
            _check_shards(folder, index, key)
            return
    if (folder / SAFETENSORS).is_file():
        _check_safetensors(folder / SAFETENSORS, key)
    elif not (folder / TORCH_BIN).is_file():
        raise CorewardError(f"{key}: {folder} has a config.json but no weights ({SAFETENSORS}, {TORCH_BIN} or a "
                            "sharded index): the model was not saved whole, or this is a folder of another kind")


def _check_shards(folder: Path, index: str, key: str) -> None:
    try:
        shards = sorted(set(json.loads((folder / index).read_text())["weight_map"].values()))
    except (OSError, ValueError, KeyError, AttributeError) as err:
        raise CorewardError(f"{key}: {folder / index} is not a weight index ({type(err).__name__}: {err})") from None
    missing = [shard for shard in shards if not (folder / shard).is_file()]
    if missing:
        raise CorewardError(f"{key}: {folder} lacks {len(missing)} of the {len(shards)} weight shards its {index} "
                            f"names: {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}")
    for shard in shards:
        if shard.endswith(".safetensors"):
            _check_safetensors(folder / shard, key)


def _check_safetensors(path: Path, key: str) -> None:
    """The header is readable and the file holds every byte it announces (nothing is loaded)."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), "pt"):
            pass
    except (SafetensorError, OSError) as err:
        raise CorewardError(f"{key}: the weights file {path} is damaged ({err}): copy or save the model again") from None


def _config(where: str, key: str, trust_remote_code: bool):
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(where, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError) as err:  # unreadable JSON, an unknown model_type, a hub id that isn't one
        raise CorewardError(f"{key}: cannot read the model config of {where}: {err}") from None


def _check_model_class(config, kind: str, where: str, key: str) -> None:
    """transformers knows a class of the kind asked for (a config with `auto_map` brings its own: not checked)."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING,
        MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING,
    )

    mapping = MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING if kind == "rm" else MODEL_FOR_CAUSAL_LM_MAPPING
    if not getattr(config, "auto_map", None) and type(config) not in mapping:
        raise CorewardError(f"{key}: {where} is a {config.model_type!r} model, which transformers cannot load as "
                            f"{ROLES.get(kind, ROLES['policy'])}")
    if kind == "rm" and config.num_labels != 1:
        raise CorewardError(f"{key}: {where} has {config.num_labels} output labels, a VerifyRM has 1: is this a policy "
                            "or a base model? Give an RM that `coreward rm train` wrote (or 'demo')")


def _check_tokenizer(where: str, key: str, trust_remote_code: bool) -> None:
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(where, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CorewardError(f"{key}: cannot load a tokenizer from {where}: {err}") from None
    # without its files transformers builds a tokenizer of the config's class with no vocabulary, silently: every
    # prompt would become zero tokens
    if len(tokenizer) < 2:
        raise CorewardError(f"{key}: cannot load a tokenizer from {where}: it has no vocabulary (no tokenizer files "
                            "in it?): save the tokenizer beside the model")
