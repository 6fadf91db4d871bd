"""Where a run trains, for its plan: from the command line (`--gpus`, `--gpu-memory`, `--engine`), from a config
file's `# gpus: N x SIZE` and `# engine: E` comments, or, at train time, from the process's own GPU and accelerate's
environment."""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coreward.runtime.errors import CorewardError
from coreward.runtime.memory import GIB, format_bytes, parse_bytes


ENGINES = ("one", "ddp", "fsdp2", "zero2", "zero3")
# the accelerate configs shipped in configs/accelerate/, by the engine they launch
ENGINE_OF_ACCELERATE_CONFIG = {"zero2": "zero2", "zero3": "zero3", "fsdp2": "fsdp2", "multi_gpu": "ddp"}


@dataclass(frozen=True)
class Hardware:
    """Where a run trains: `gpus` processes of `device_bytes` each under `engine`, or the CPU (one process)."""

    gpus: int = 1
    device_bytes: int = 80 * GIB
    engine: str = "one"
    device: str = "cuda"  # "cuda" or "cpu"

    def describe(self) -> str:
        if self.device == "cpu":
            if self.processes > 1:
                return f"the CPU's RAM, {format_bytes(self.device_bytes)} for each of {self.gpus} processes, engine {self.engine}"
            return f"the CPU's {format_bytes(self.device_bytes)} of RAM, one process"
        return f"{self.gpus} x {format_bytes(self.device_bytes)} GPU(s), engine {self.engine}"

    @property
    def on_gpu(self) -> bool:
        return self.device != "cpu"

    @property
    def processes(self) -> int:
        """The processes an engine divides the model states over (1: one process). On the CPU, `gpus` counts the
        launch's processes (gloo)."""
        return 1 if self.engine == "one" else self.gpus

    @property
    def effective_engine(self) -> str:
        """The engine as the plan counts it: DDP on one process is one process."""
        return "one" if self.processes == 1 and self.engine == "ddp" else self.engine


def declared_hardware(config_file: str | Path) -> dict[str, Any]:
    """The `# gpus: N x SIZE` and `# engine: E` comments of a config file (or of the files its `base:` chain names),
    as {gpus, device_bytes, engine}; the engine also from a comment launching configs/accelerate/<name>.yaml."""
    import yaml

    found: dict[str, Any] = {}
    path = Path(config_file)
    seen: set[Path] = set()
    while path.is_file() and path.resolve() not in seen:
        seen.add(path.resolve())
        text = path.read_text()
        for line in text.splitlines():
            if not line.lstrip().startswith("#"):
                continue
            gpus = re.search(r"#\s*gpus:\s*(\d+)\s*x\s*([\d.]+\s*[A-Za-z]+)", line)
            if gpus and "gpus" not in found:
                try:
                    found["gpus"], found["device_bytes"] = int(gpus.group(1)), parse_bytes(gpus.group(2))
                except ValueError as err:
                    raise CorewardError(f"{path}: the `# gpus: N x SIZE` comment: {err}") from None
            engine = re.search(r"#\s*engine:\s*(\w+)", line)
            if engine and "engine" not in found:
                found["engine"] = engine.group(1)
            launch = re.search(r"configs/accelerate/(\w+)\.yaml", line)
            if launch and "engine" not in found and launch.group(1) in ENGINE_OF_ACCELERATE_CONFIG:
                found.setdefault("launch_engine", ENGINE_OF_ACCELERATE_CONFIG[launch.group(1)])
        try:
            base = (yaml.safe_load(text) or {}).get("base")
        except yaml.YAMLError:
            base = None
        if not isinstance(base, str):
            break
        path = path.parent / base
    if "engine" not in found and "launch_engine" in found:
        found["engine"] = found["launch_engine"]
    found.pop("launch_engine", None)
    return found


def machine_ram_bytes() -> int:
    """This machine's RAM."""
    from coreward.runtime.host_memory import total_memory

    return total_memory()


def memory_size(text: str, option: str = "--gpu-memory") -> int:
    """A device's memory as the command line gives it, in bytes: a positive number with a unit (80GiB, 24GB,
    81920MiB). A bare number is refused rather than read as bytes (`80` meant 80 GiB, not 80 bytes)."""
    example = "e.g. 80GiB, 24GB, 81920MiB"
    try:
        size = parse_bytes(text)
    except ValueError:
        raise CorewardError(f"{option}: not a memory size: {text!r} ({example})") from None
    if not re.search(r"[A-Za-z]\s*$", str(text)):
        raise CorewardError(f"{option} needs a unit: {text!r} ({example})")
    if size <= 0:
        raise CorewardError(f"{option} must be a positive size, got {text!r} ({example})")
    return size


def resolve_hardware(config_file: str | Path | None, gpus: int | None, gpu_memory: str | None, engine: str | None,
                     device: str = "cuda") -> Hardware:
    """The hardware to plan for: the command line's, else the config file's `# gpus:` / `# engine:` comments,
    else one 80 GiB GPU. `device` "cpu": this machine's RAM, one process. Bad values are one-line CorewardErrors
    naming the option (or the comment they came from)."""
    if device == "cpu":  # `gpus` processes (gloo) under `engine` share the RAM
        ram = memory_size(gpu_memory) if gpu_memory is not None else machine_ram_bytes()
        count = gpus or 1
        if count < 1:
            raise CorewardError(f"--gpus must be >= 1, got {count}")
        engine = engine or "one"
        if engine not in ENGINES:
            raise CorewardError(f"--engine must be one of {', '.join(ENGINES)}, got {engine!r}")
        return Hardware(gpus=count, device_bytes=ram // count, engine=engine if count > 1 else "one", device="cpu")
    declared = declared_hardware(config_file) if config_file else {}
    comment = f"{config_file}'s comment"  # where a value the command line did not give came from
    size = memory_size(gpu_memory) if gpu_memory is not None else declared.get("device_bytes", 80 * GIB)
    if size <= 0:
        raise CorewardError(f"{comment} `# gpus: N x SIZE` must give a positive SIZE")
    where_gpus = "--gpus" if gpus is not None else f"{comment} `# gpus: N x SIZE`"
    gpus = gpus if gpus is not None else declared.get("gpus", 1)
    if gpus < 1:
        raise CorewardError(f"{where_gpus} must be >= 1, got {gpus}")
    where_engine = "--engine" if engine is not None else f"{comment} `# engine:`"
    engine = engine or declared.get("engine") or ("one" if gpus == 1 else "ddp")
    if engine not in ENGINES:
        raise CorewardError(f"{where_engine} must be one of {', '.join(ENGINES)}, got {engine!r}")
    return Hardware(gpus=gpus, device_bytes=size, engine=engine, device="cuda")


def running_hardware() -> Hardware:
    """The hardware this process trains on: its GPU's total memory and the launch's processes and engine (from
    accelerate's environment), or the CPU's RAM."""
    import torch

    processes = int(os.environ.get("WORLD_SIZE", "1"))
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true":
        engine = "zero3" if os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE") == "3" else "zero2"
    elif os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true":
        engine = "fsdp2"
    else:
        engine = "ddp" if processes > 1 else "one"
    if not torch.cuda.is_available():  # gloo processes on this machine's RAM
        return Hardware(gpus=processes, device_bytes=machine_ram_bytes() // processes,
                        engine=engine if processes > 1 else "one", device="cpu")
    # this process's own GPU (a context on any other would cost it memory there)
    _, total = torch.cuda.mem_get_info(int(os.environ.get("LOCAL_RANK", "0")))
    return Hardware(gpus=processes, device_bytes=total, engine=engine, device="cuda")


@contextmanager
def processes(hardware: Hardware):
    """WORLD_SIZE set to the planned processes while a config is built: its batch checks count the global batch."""
    before = os.environ.get("WORLD_SIZE")
    os.environ["WORLD_SIZE"] = str(hardware.gpus)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("WORLD_SIZE", None)
        else:
            os.environ["WORLD_SIZE"] = before
