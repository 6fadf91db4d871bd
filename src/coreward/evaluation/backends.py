"""Text generation backends behind one interface: `generate(prompts, n, ...) -> n Generations per prompt`.

* `HFBackend` — batched `model.generate` with left padding, on CPU or GPU. It takes a loaded model, so
  evaluation during training samples from the very policy being trained.
* `VLLMBackend` — `vllm.LLM` for fast GPU evaluation of a saved model; vLLM is imported only when asked for.

Sampling follows the papers' protocol and nothing else: temperature and top-p only (top-k and repetition
penalty off, whatever the model's generation_config says), so both backends sample the same distribution.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from coreward.runtime.devices import prepare_tokenizer, resolve_device, resolve_dtype, torch_threads
from coreward.runtime.errors import CorewardError
from coreward.runtime.generation import generate_from_ids


@dataclass
class Generation:
    text: str
    num_tokens: int
    truncated: bool  # stopped by max_new_tokens rather than by an end-of-sequence token


# prompt indices of a finished batch and their generations: what an evaluation keeps as it goes (evaluation/kept.py)
BatchDone = Callable[[list[int], list[list[Generation]]], None]


class Backend(Protocol):
    def generate(
        self, prompts: list[str], n: int, temperature: float, top_p: float, max_new_tokens: int, seed: int
    ) -> list[list[Generation]]:
        """n generations for each prompt, in prompt order. HFBackend and VLLMBackend also take `kept` (generations
        of a stopped evaluation, by prompt index: not generated again) and `on_batch` (called after each batch)."""
        ...


def derived_seed(seed: int, index: int) -> int:
    """A distinct, reproducible seed per batch (or per prompt) that does not collide across base seeds."""
    return (seed * 1_000_003 + index) % (2**31 - 1)


# --------------------------------------------------------------------------- Hugging Face


def load_model(path: str, device: str = "auto", dtype: str = "auto", trust_remote_code: bool = False):
    from transformers import AutoModelForCausalLM

    device = str(resolve_device(device))
    try:
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype=resolve_dtype(dtype, device), trust_remote_code=trust_remote_code
        )
    except (OSError, ValueError) as err:
        raise CorewardError(f"cannot load model {path!r}: {err}") from None
    return model.to(device).eval()


class HFBackend:
    """Batched sampling with `model.generate`.

    `batch_size` counts sequences per `generate` call (prompts × n). Prompts are sorted by length so that a
    batch holds prompts of similar length (less padding), and each batch is seeded from `seed` and its
    index, so the same inputs and seed give identical samples. `num_threads` caps torch's CPU threads while
    generating (see `torch_threads`).
    """

    def __init__(
        self, model, tokenizer, batch_size: int = 64, show_progress: bool = False, num_threads: int | None = None
    ):
        prepare_tokenizer(tokenizer)
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.show_progress = show_progress
        self.num_threads = num_threads

    def generate(
        self, prompts: list[str], n: int, temperature: float, top_p: float, max_new_tokens: int, seed: int,
        kept: dict[int, list[Generation]] | None = None, on_batch: BatchDone | None = None,
    ) -> list[list[Generation]]:
        import torch

        from coreward.runtime.progress import progress

        kept = kept or {}
        ids = self.tokenizer(prompts, add_special_tokens=False)["input_ids"]
        order = sorted(range(len(prompts)), key=lambda i: -len(ids[i]))
        per_call = max(1, self.batch_size // n)
        batches = [order[start : start + per_call] for start in range(0, len(order), per_call)]
        results: list[list[Generation]] = [kept.get(i, []) for i in range(len(prompts))]
        # the batches and their seeds are the whole list's: a stopped evaluation's batches are skipped, the others
        # sampled exactly as they would have been (the progress bar's time left counts only those)
        todo = [(index, batch) for index, batch in enumerate(batches) if not all(i in kept for i in batch)]
        config = self._generation_config(n, temperature, top_p, max_new_tokens)
        with torch.no_grad(), torch_threads(self.num_threads):
            for index, batch in progress(todo, "generate (batches)", enabled=self.show_progress):
                torch.manual_seed(derived_seed(seed, index))
                generations = self._generate_batch([ids[i] for i in batch], config, n)
                for j, i in enumerate(batch):
                    results[i] = generations[j * n : (j + 1) * n]
                if on_batch is not None:
                    on_batch(batch, [results[i] for i in batch])
        return results

    def _generation_config(self, n: int, temperature: float, top_p: float, max_new_tokens: int):
        from transformers import GenerationConfig

        # Every sampling option is set explicitly: a None would be filled in from the model's own
        # generation_config (Qwen2.5-Instruct ships top_k=20, repetition_penalty=1.05); top_k=0 turns top-k off.
        greedy = temperature == 0
        return GenerationConfig(
            do_sample=not greedy,
            temperature=1.0 if greedy else temperature,
            top_p=1.0 if greedy else top_p,
            top_k=0,
            repetition_penalty=1.0,
            max_new_tokens=max_new_tokens,
            num_return_sequences=1 if greedy else n,
            eos_token_id=self._eos_ids(),
            pad_token_id=self.tokenizer.pad_token_id,
            use_cache=True,
        )

    def _eos_ids(self) -> list[int]:
        """The model's end tokens (instruct models list several) plus the tokenizer's EOS."""
        configured = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        ids = configured if isinstance(configured, list) else [configured]
        ids = [i for i in ids if i is not None]
        if self.tokenizer.eos_token_id is not None and self.tokenizer.eos_token_id not in ids:
            ids.append(self.tokenizer.eos_token_id)
        return ids

    def _generate_batch(self, prompt_ids: list[list[int]], config, n: int) -> list[Generation]:
        """n generations per prompt, prompt-major; greedy decoding is run once and repeated n times."""
        rows = generate_from_ids(self.model, prompt_ids, self.tokenizer.pad_token_id, generation_config=config)
        generations = self._decode(rows, config.max_new_tokens)
        repeat = n // config.num_return_sequences
        return [g for g in generations for _ in range(repeat)]

    def _decode(self, rows: list[list[int]], max_new_tokens: int) -> list[Generation]:
        """Cut each row after its first end token (what follows is padding) and decode it."""
        eos = set(self._eos_ids())
        generations = []
        for row in rows:
            end = next((k + 1 for k, token in enumerate(row) if token in eos), None)
            tokens = row[:end] if end is not None else row
            text = self.tokenizer.decode(tokens, skip_special_tokens=True)
            generations.append(Generation(text, len(tokens), end is None and len(tokens) >= max_new_tokens))
        return generations


# --------------------------------------------------------------------------- vLLM


class VLLMBackend:
    """`vllm.LLM` on a saved model; each prompt gets its own seed so a run is repeatable."""

    def __init__(self, model_path: str, dtype: str = "auto", seed: int = 0, **llm_kwargs: Any):
        try:
            from vllm import LLM
        except ImportError:
            raise CorewardError(
                "--backend vllm needs the vllm package, which is not installed (pip install 'coreward[vllm]' on a "
                "GPU machine), or use --backend hf"
            ) from None
        from vllm.platforms import current_platform

        self.llm = LLM(model=model_path, dtype=dtype, seed=seed, **llm_kwargs)
        # What actually ran, for results.json: vLLM resolves dtype "auto" its own way (a float32 checkpoint
        # runs in bfloat16 on a GPU), so the engine's resolved dtype is read back, not the one asked for.
        self.device = str(current_platform.device_type)
        self.dtype = str(self.llm.llm_engine.model_config.dtype).removeprefix("torch.")

    def generate(
        self, prompts: list[str], n: int, temperature: float, top_p: float, max_new_tokens: int, seed: int,
        kept: dict[int, list[Generation]] | None = None, on_batch: BatchDone | None = None,
    ) -> list[list[Generation]]:
        from vllm import SamplingParams

        kept = kept or {}
        todo = [i for i in range(len(prompts)) if i not in kept]  # each prompt keeps its own seed
        params = [
            SamplingParams(
                n=n, temperature=temperature, top_p=top_p, seed=derived_seed(seed, i), max_tokens=max_new_tokens
            )
            for i in todo
        ]
        outputs = self.llm.generate([prompts[i] for i in todo], params) if todo else []
        results = [kept.get(i, []) for i in range(len(prompts))]
        for i, output in zip(todo, outputs):
            results[i] = [Generation(o.text, len(o.token_ids), o.finish_reason == "length") for o in output.outputs]
        if on_batch is not None and todo:
            on_batch(todo, [results[i] for i in todo])
        return results
