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
    """The model to sample from. On a CPU with dtype auto: adapters (a LoRA run's final/) merged and, for a model of
    20M parameters or more on a CPU with native bfloat16, bfloat16 weights (runtime/sampling.py)."""
    from transformers import AutoModelForCausalLM

    from coreward.runtime.sampling import prepared_for_sampling

    device = str(resolve_device(device))
    try:
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype=resolve_dtype(dtype, device), trust_remote_code=trust_remote_code
        )
    except (OSError, ValueError) as err:
        raise CorewardError(f"cannot load model {path!r}: {err}") from None
    model = model.to(device).eval()
    return prepared_for_sampling(model) if dtype == "auto" else model


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

        kept = kept or {}
        ids = self.tokenizer(prompts, add_special_tokens=False)["input_ids"]
        order = sorted(range(len(prompts)), key=lambda i: -len(ids[i]))
        per_call = max(1, self.batch_size // n)
        batches = [order[start : start + per_call] for start in range(0, len(order), per_call)]
        results: list[list[Generation]] = [kept.get(i, []) for i in range(len(prompts))]
        # the batches and their seeds are the whole list's: a stopped evaluation's batches are skipped, the others
        # sampled exactly as they would have been (the time left shown counts only those)
        todo = [(index, batch) for index, batch in enumerate(batches) if not all(i in kept for i in batch)]
        config = self._generation_config(n, temperature, top_p, max_new_tokens)
        steps = DecodingProgress([len(batch) for _, batch in todo], max_new_tokens, self._eos_ids()) \
            if self.show_progress else None
        try:
            with torch.no_grad(), torch_threads(self.num_threads):
                for index, batch in todo:
                    torch.manual_seed(derived_seed(seed, index))
                    generations = self._generate_batch([ids[i] for i in batch], config, n, steps)
                    for j, i in enumerate(batch):
                        results[i] = generations[j * n : (j + 1) * n]
                    if on_batch is not None:
                        on_batch(batch, [results[i] for i in batch])
        finally:  # a bar ends its line, also at a Ctrl-C
            if steps is not None:
                steps.close()
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

    def _generate_batch(self, prompt_ids: list[list[int]], config, n: int, steps: DecodingProgress | None = None
                        ) -> list[Generation]:
        """n generations per prompt, prompt-major; greedy decoding is run once and repeated n times."""
        hooks = {}
        if steps is not None:
            from transformers import StoppingCriteriaList

            steps.start_batch(len(prompt_ids))
            hooks = {"stopping_criteria": StoppingCriteriaList([steps])}
        rows = generate_from_ids(self.model, prompt_ids, self.tokenizer.pad_token_id, generation_config=config, **hooks)
        if steps is not None:
            steps.end_batch()
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


class DecodingProgress:
    """Progress within each batch as well as across them: a batch of 64 completions of 256 tokens takes many minutes
    on a CPU, and a line per batch left `coreward eval` silent that long. `model.generate` calls it after every
    decoding step, as a stopping criterion that never stops (transformers' StoppingCriteriaList calls each of its
    items). A batch is `max_new_tokens` steps of work, the ones it did not need (each of its sequences ended) counted
    done when it ends, so the time left is the time per step so far times the steps the remaining batches may take.
    Its lines say what a user counts: problems done, tokens generated, and where the current batch is."""

    def __init__(self, batch_sizes: list[int], max_new_tokens: int, end_ids: list[int]):
        from coreward.runtime.progress import Progress

        self.max_new_tokens, self.end_ids = max_new_tokens, end_ids
        self.batches, self.problems = len(batch_sizes), sum(batch_sizes)
        self.batch = self.problems_done = self.tokens = 0  # the finished batches'
        self.ended = None  # within a batch: which of its sequences have made an end token (a tensor)
        self.meter = Progress(self.batches * max_new_tokens, "generate", unit="step", describe=self.describe,
                              timing=self.timing)

    def start_batch(self, problems: int) -> None:
        self.batch, self.batch_problems, self.step = self.batch + 1, problems, 0

    def __call__(self, input_ids, scores, **kwargs):
        import torch

        last = input_ids[:, -1]
        if self.ended is None:
            self.ended = torch.zeros_like(last, dtype=torch.bool)
            self.batch_tokens = torch.zeros((), dtype=torch.long, device=last.device)
            self.ends = torch.tensor(self.end_ids, device=last.device)
        # counted on the device, read only when a line is drawn: no extra synchronization on a GPU
        self.batch_tokens += (~self.ended).sum()  # this step's token of each sequence still going (its end included)
        self.ended |= torch.isin(last, self.ends)
        self.step += 1
        if self.step < self.max_new_tokens:  # a batch's last step is counted as it ends, with its problems
            self.meter.advance()
        return torch.zeros_like(self.ended)

    def end_batch(self) -> None:
        self.problems_done += self.batch_problems
        self.tokens += int(self.batch_tokens) if self.ended is not None else 0
        self.ended = None
        self.meter.advance(self.max_new_tokens - min(self.step, self.max_new_tokens - 1))

    def finished(self) -> int:
        """Problems finished: the finished batches' and, in this batch, those whose every sequence has ended."""
        if self.ended is None:
            return self.problems_done
        # a problem's rows are adjacent (prompt-major)
        return self.problems_done + int(self.ended.view(self.batch_problems, -1).all(dim=1).sum())

    def describe(self) -> str:
        if self.ended is None:
            return f"{self.problems_done}/{self.problems} problems, {self.tokens:,} tokens"
        return (f"{self.finished()}/{self.problems} problems, "
                f"{self.tokens + int(self.batch_tokens):,} tokens; batch {self.batch}/{self.batches} at token "
                f"{self.step}/{self.max_new_tokens}")

    def timing(self, elapsed: float) -> str:
        """The rate in problems and the time left at it: none before a problem has finished (a guess from decoding
        steps would take every sequence to its length cap)."""
        from coreward.runtime.progress import duration, rate

        done = self.finished()
        if done == 0:
            return "no problem finished yet"
        left = f", about {duration(elapsed / done * (self.problems - done))} left" if done < self.problems else ""
        return rate(done, elapsed, "problem") + left

    def close(self) -> None:
        self.meter.close()


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

        if current_platform.is_cpu():
            # vLLM's CPU build fails a seeded request whose prefill is split across steps (chunked prefill discards
            # its sampled token and rewinds the request's generator: "CPU Generator does not use offset", measured
            # with vllm 0.31.0 on 1,200 seeded prompts); whole prefills never rewind
            llm_kwargs.setdefault("enable_chunked_prefill", False)
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
