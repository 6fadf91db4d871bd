"""Build a text generator from a config value: a URL, a model name or path, or a dict naming the backend.

"http://localhost:8000/v1#Qwen2.5-7B-Instruct"  -> OpenAIEndpointGenerator(base_url, model)
"http://localhost:8000/v1"                      -> OpenAIEndpointGenerator(base_url)  (server's model)
"Qwen/Qwen2.5-0.5B-Instruct" or "runs/x/final"  -> HFLocalGenerator(name_or_path)
{"backend": "openai", "base_url": ..., "max_concurrency": 8, ...}
{"backend": "hf", "model_name_or_path": ..., "batch_size": 16, ...}
"""

from __future__ import annotations

import inspect

from coreward.llm.base import TextGenerator
from coreward.llm.hf_local import HFLocalGenerator
from coreward.llm.openai_endpoint import OpenAIEndpointGenerator
from coreward.runtime.errors import CorewardError


BACKENDS: dict[str, type[TextGenerator]] = {"openai": OpenAIEndpointGenerator, "hf": HFLocalGenerator}


def is_endpoint(spec: str | dict) -> bool:
    """Whether a config value describes an OpenAI-compatible endpoint (a URL, or a dict of backend "openai")."""
    if isinstance(spec, dict):
        return spec.get("backend") == "openai"
    return isinstance(spec, str) and spec.startswith(("http://", "https://"))


def build_generator(spec: str | dict) -> TextGenerator:
    """The generator a config value describes; a bad dict (unknown backend or option) is a CorewardError."""
    if isinstance(spec, dict):
        return _from_dict(spec)
    if is_endpoint(spec):
        base_url, _, model = spec.partition("#")
        return OpenAIEndpointGenerator(base_url, model or None)
    return HFLocalGenerator(spec)


def check_endpoint(spec: str | dict, cannot: str) -> None:
    """Fail fast on an endpoint that is down, refuses the key or lacks the model: its health check, the error
    prefixed with `cannot` (who cannot do what, e.g. "cooper: its assistant cannot write negatives")."""
    generator = build_generator(spec)
    try:
        generator.health_check()
    except CorewardError as err:
        raise CorewardError(f"{cannot}: {err}") from None
    finally:
        generator.close()


def _from_dict(spec: dict) -> TextGenerator:
    options = dict(spec)
    backend = options.pop("backend", None)
    if backend not in BACKENDS:
        raise CorewardError(f"generator 'backend' must be one of {sorted(BACKENDS)}, got {backend!r}")
    cls = BACKENDS[backend]
    parameters = dict(inspect.signature(cls.__init__).parameters)
    del parameters["self"]
    unknown = sorted(set(options) - set(parameters))
    if unknown:
        raise CorewardError(
            f"unknown generator option(s) {unknown} for backend {backend!r}; known: {sorted(parameters)}"
        )
    missing = [name for name, p in parameters.items() if p.default is p.empty and name not in options]
    if missing:
        raise CorewardError(f"generator backend {backend!r} needs option(s) {missing}")
    return cls(**options)
