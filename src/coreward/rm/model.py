"""VerifyRM: a reference-based reward model that judges whether a completion's final answer is correct.

    x = <question>{q}</question>\\n<reference_answer>{ref}</reference_answer>\\n<completion>{c}</completion>
    s(q, ref, c) = σ(f_θ(x))          f_θ = AutoModelForSequenceClassification(num_labels=1)

Cutting, two ways (`cut`):
  * "coreward" (default): any of q, ref, c longer than 1,500 characters is cut to its first 500 + last 1,000,
    and past `max_length` tokens the *start* is dropped, so the completion's final answer always stays in;
  * "cooper" (the authors', recipe/cooper/fsdp_workers.py `cooper_format_prompt` and `_switch_chat_template`):
    only ref and c are cut to 500 + 1,000 characters, the question never, and tokens past `max_length` (their
    1,024 = prompt + response length) are dropped from the *right*, so a long question can push the
    completion's answer out of what the RM sees;
  * "none" (the authors' VerifyRM training, train_VerifyRM/train.py): no field is cut, tokens past
    `max_length` (their 8,192) dropped from the right; they drop rows over 8,000 characters beforehand
    (`rm train`'s `data.max_chars`). Any Hugging Face backbone works: a decoder (Qwen2.5-Math-1.5B-Instruct in the paper; the
score is read at the last non-pad token, so the config needs a pad_token_id) or an encoder (BERT/MiniLM).
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from coreward.runtime.assets import resolve_model
from coreward.runtime.devices import prepare_tokenizer, resolve_device
from coreward.runtime.errors import CorewardError
from coreward.runtime.files import atomic_directory
from coreward.verify.extract import encodable


logger = logging.getLogger(__name__)

TEMPLATE = (
    "<question>{question}</question>\n<reference_answer>{reference}</reference_answer>\n"
    "<completion>{completion}</completion>"
)
MAX_CHARS, HEAD_CHARS, TAIL_CHARS = 1500, 500, 1000
TAGS = ("<question>", "</question>", "<reference_answer>", "</reference_answer>", "<completion>", "</completion>")


def truncate(text: str) -> str:
    """Cooper's cut: a text over 1,500 characters becomes its first 500 + last 1,000."""
    return text if len(text) <= MAX_CHARS else text[:HEAD_CHARS] + text[-TAIL_CHARS:]


CUTS = ("coreward", "cooper", "none")

#: config.json entry that `save_pretrained` writes: the input format the RM was saved with (`input_format`), so that
#: RMs scored together (an ensemble, rewards/model.py) can be checked to read one format
INPUT_FORMAT_KEY = "coreward_rm_input"
TEMPLATE_NAME = "verifyrm-tags"  # TEMPLATE above, by name: a changed template gets a new name


def input_format(cut: str) -> dict[str, str]:
    """The input an RM with this `cut` reads: the template, the cut, and which end of a too-long input is dropped
    ("start" for coreward's cut, which keeps the final answer; "end" for the authors' "cooper" and "none")."""
    return {"template": TEMPLATE_NAME, "cut": cut, "drops": "start" if cut == "coreward" else "end"}


def format_input(question: str, reference: str, completion: str, cut: str = "coreward") -> str:
    """The RM's input text for one (question, reference answer, completion) triple (untrusted text is cut
    first, then made encodable, so the cost is bounded whatever its length; "cooper" leaves the question,
    which comes from the data, whole)."""
    keep = (lambda text: text) if cut == "none" else truncate
    return TEMPLATE.format(
        question=encodable(truncate(str(question)) if cut == "coreward" else str(question)),
        reference=encodable(keep(str(reference))),
        completion=encodable(keep(str(completion))),
    )


def items_per_pass(max_rows: int, rows_per_item: int = 1) -> int:
    """How many items of `rows_per_item` rows a pass of at most `max_rows` rows takes (at least one)."""
    return max(1, max_rows // rows_per_item)


def plan_passes(lengths: Sequence[int], max_rows: int, max_tokens: int | None = None,
                rows_per_item: int = 1) -> list[list[int]]:
    """The items of each forward pass, by index, taken shortest first: a pass is padded to its longest row, so
    passes of rows of like lengths waste little padding (the caller puts results back in input order; items of
    equal length keep their input order). At most `max_rows` rows per pass; with `max_tokens`, also at most that
    many padded tokens (rows × the pass's longest row). An item is `rows_per_item` rows of `lengths[i]` tokens (a
    Cooper pair: its two sequences, at the longer one's length). An item longer than the budget alone still runs,
    in a pass of its own."""
    per_pass = items_per_pass(max_rows, rows_per_item)
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])  # stable; ascending: the last taken is the longest
    if max_tokens is None:
        return [order[start : start + per_pass] for start in range(0, len(order), per_pass)]
    passes: list[list[int]] = []
    current: list[int] = []
    for i in order:
        if current and (len(current) == per_pass or (len(current) + 1) * rows_per_item * lengths[i] > max_tokens):
            passes.append(current)
            current = []
        current.append(i)
    return passes + [current] if current else passes


class VerifyRM:
    """A sequence classifier with one logit plus its tokenizer, on its own device.

    `score` is the frozen reward (no grad, eval mode, batched); `logits` keeps the graph, for training
    and for Cooper's pairwise update −log σ(s_pos − s_neg).

    Memory settings (rm/inputs.py's RMInputSettings): `batch_size` caps the sequences per forward pass (sorted
    by length, so a pass pads little); `max_tokens_per_pass` also caps its padded tokens (rows × longest row);
    `param_offload` keeps the weights on the CPU (pinned with a CUDA device) between uses: `weights_on_device`
    brings them to the device for a pass (or an update) and back.
    """

    def __init__(self, model, tokenizer, device: str | torch.device | None = "auto", max_length: int = 1024,
                 batch_size: int = 32, cut: str = "coreward", max_tokens_per_pass: int | None = None,
                 param_offload: bool = False):
        # Pad on the right, so every row's positions start at 0 whatever its batch (the score is read at the
        # last real token); decoders often ship without a pad token, and batching needs one.
        prepare_tokenizer(tokenizer, padding_side="right")
        if tokenizer.pad_token is None:
            raise CorewardError(f"tokenizer {tokenizer.name_or_path!r} has neither a pad nor an eos token")
        model.config.pad_token_id = tokenizer.pad_token_id
        self.device = resolve_device(device)
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.batch_size = batch_size
        self.max_tokens_per_pass = max_tokens_per_pass
        self._warned_long = False  # a sequence over max_tokens_per_pass: warned once
        self.param_offload = param_offload
        self._uses = 0  # weights_on_device contexts open (nested uses move the weights once)
        if param_offload:
            if self.device.type == "cpu":
                logger.warning("reward model: param_offload on a CPU device saves no memory (the weights are copied "
                               "for each use all the same)")
            self.model = model.to("cpu")
            pin = self.device.type == "cuda"  # page-locked: the copies to and from the GPU can run asynchronously
            self._homes = [(t, t.data.pin_memory() if pin else t.data) for t in self._weights()]
            for t, home in self._homes:
                t.data = home
        else:
            self.model = model.to(self.device)
        # BERT-style encoders take segment ids; decoders would choke on (or silently misuse) them
        self._takes_token_types = "token_type_ids" in inspect.signature(model.forward).parameters
        self.use_cut(cut)

    def _weights(self) -> list[torch.Tensor]:
        return [*self.model.parameters(), *self.model.buffers()]

    @contextmanager
    def weights_on_device(self, changed: bool = False) -> Iterator[None]:
        """With `param_offload`: the weights on the RM's device inside, back on the CPU after (with `changed`, the
        CPU copies take the new values first: an update). Without it, or nested in another use: nothing moves."""
        if not self.param_offload or self._uses:
            self._uses += 1
            try:
                yield
            finally:
                self._uses -= 1
            return
        self._uses += 1
        try:
            for t, home in self._homes:  # a copy even on a CPU device (where offload saves nothing): one code path
                t.data = home.to(self.device, non_blocking=True, copy=True)
            yield
        finally:
            self._uses -= 1
            for t, home in self._homes:
                if changed and t.data.data_ptr() != home.data_ptr():
                    home.copy_(t.data, non_blocking=True)
                t.data = home
            if self.device.type == "cuda":  # the CPU copies are complete before anyone reads them
                torch.cuda.synchronize(self.device)

    def use_cut(self, cut: str) -> None:
        """"coreward" or "cooper" (see the module docstring)."""
        if cut not in CUTS:
            raise ValueError(f"cut must be one of {CUTS}, got {cut!r}")
        self.cut = cut
        # "coreward": past max_length keep the end, where the completion's final answer is
        self.tokenizer.truncation_side = "left" if cut == "coreward" else "right"

    @classmethod
    def from_backbone(cls, name_or_path: str | os.PathLike, device="auto", max_length: int = 1024,
                      dtype: str = "float32", add_template_tokens: bool = False, **kwargs) -> VerifyRM:
        """A new RM: the backbone's weights plus a freshly initialized one-logit head.

        `add_template_tokens` makes each tag of the template one new token: a small word-level vocabulary
        (the demo's) would otherwise read `<question>` as a run of <unk>s, indistinguishable from the others.
        """
        model, tokenizer = _load(name_or_path, dtype, num_labels=1)
        if add_template_tokens and tokenizer.add_tokens(list(TAGS)):
            model.resize_token_embeddings(len(tokenizer))
        return cls(model, tokenizer, device, max_length, **kwargs)

    @classmethod
    def from_pretrained(cls, name_or_path: str | os.PathLike, device="auto", max_length: int = 1024,
                        dtype: str = "float32", **kwargs) -> VerifyRM:
        """The one way to load an RM: a directory `save_pretrained` wrote (or any one-logit sequence classifier
        in HF format), a hub id, or an asset name ("demo": the demo VerifyRM)."""
        from coreward.runtime.devices import whole_model_loading

        path = resolve_model(name_or_path, "rm", key="rm")
        with whole_model_loading():  # an RM is never partitioned by a ZeRO-3 policy's engine
            model, tokenizer = _load(path, dtype)
        if model.config.num_labels != 1:
            raise CorewardError(f"{path} is a classifier with {model.config.num_labels} labels; a VerifyRM has 1")
        return cls(model, tokenizer, device, max_length, **kwargs)

    def save_pretrained(self, directory: str | os.PathLike) -> Path:
        """Write model and tokenizer in HF format, atomically (see `atomic_directory`); config.json records the
        input format (`input_format`)."""
        setattr(self.model.config, INPUT_FORMAT_KEY, input_format(self.cut))
        with atomic_directory(directory) as staging:
            self.model.save_pretrained(staging)
            self.tokenizer.save_pretrained(staging)
        return Path(directory)

    def tokenize(self, questions: Sequence[str], references: Sequence[str], completions: Sequence[str]):
        """Tokenized, padded template texts (on the CPU)."""
        _check_lengths(questions, references, completions)
        texts = [format_input(q, r, c, self.cut) for q, r, c in zip(questions, references, completions)]
        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
        if not self._takes_token_types:
            batch.pop("token_type_ids", None)
        return batch

    def encode(self, questions: Sequence[str], references: Sequence[str], completions: Sequence[str]):
        """`tokenize`, on the RM's device."""
        return self.tokenize(questions, references, completions).to(self.device)

    def token_lengths(self, questions: Sequence[str], references: Sequence[str],
                      completions: Sequence[str]) -> list[int]:
        """Each triple's length in tokens as the RM reads it (cut to `max_length`), unpadded."""
        texts = [format_input(q, r, c, self.cut) for q, r, c in zip(questions, references, completions)]
        return [len(ids) for ids in self.tokenizer(texts, truncation=True, max_length=self.max_length)["input_ids"]]

    def passes(self, count: int, lengths: Callable[[], Sequence[int]], max_rows: int,
               rows_per_item: int = 1) -> list[list[int]]:
        """`plan_passes` over `count` items with this RM's token budget (`lengths()`, their token lengths, read only
        where there are several passes to order), warning once when an item is longer than `max_tokens_per_pass`
        (it runs alone)."""
        if self.max_tokens_per_pass is None:
            if count <= items_per_pass(max_rows, rows_per_item):  # one pass: no order to choose
                return [list(range(count))] if count else []
            return plan_passes(lengths(), max_rows, rows_per_item=rows_per_item)
        known = lengths()
        if not self._warned_long and max(known, default=0) * rows_per_item > self.max_tokens_per_pass:
            self._warned_long = True
            logger.warning("reward model: %s of %d tokens is over max_tokens_per_pass %d: it runs in a pass of its own",
                           "a pair of sequences" if rows_per_item == 2 else "a sequence",
                           max(known) * rows_per_item, self.max_tokens_per_pass)
        return plan_passes(known, max_rows, self.max_tokens_per_pass, rows_per_item)

    def logits(self, questions: Sequence[str], references: Sequence[str], completions: Sequence[str]) -> torch.Tensor:
        """One logit per triple, shape [n], with grad (the caller chooses train/eval mode)."""
        return self.model(**self.encode(questions, references, completions)).logits.squeeze(-1).float()

    @torch.no_grad()
    def score(self, questions: Sequence[str], references: Sequence[str], completions: Sequence[str],
              batch_size: int | None = None) -> list[float]:
        """σ(logit) per triple, in order; eval mode (no dropout) for the call, training mode restored after.
        Passes of at most `batch_size` triples (and `max_tokens_per_pass` padded tokens: `plan_passes`).

        A NaN or infinite logit gives NaN, not σ(±inf) = 1 or 0: the RM failed on that input, and the
        trainer skips a NaN reward (advantage 0) and counts it, rather than trusting a saturated score.
        """
        _check_lengths(questions, references, completions)
        was_training = self.model.training
        self.model.eval()
        scores = [float("nan")] * len(completions)
        try:
            with self.weights_on_device():
                lengths = lambda: self.token_lengths(questions, references, completions)  # noqa: E731
                for rows in self.passes(len(completions), lengths, batch_size or self.batch_size):
                    logits = self.logits([questions[i] for i in rows], [references[i] for i in rows],
                                         [completions[i] for i in rows])
                    sigmoid = torch.where(torch.isfinite(logits), torch.sigmoid(logits), float("nan")).tolist()
                    for i, s in zip(rows, sigmoid):
                        scores[i] = s
        finally:
            self.model.train(was_training)
        return scores


def _check_lengths(questions: Sequence[str], references: Sequence[str], completions: Sequence[str]) -> None:
    if not len(questions) == len(references) == len(completions):
        raise ValueError(
            f"questions, references and completions differ in length: "
            f"{len(questions)}, {len(references)}, {len(completions)}"
        )


def _load(name_or_path: str | os.PathLike, dtype: str, **model_kwargs):
    """Sequence classifier and tokenizer from a directory or hub id; failures name the path."""
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(name_or_path))
        model = AutoModelForSequenceClassification.from_pretrained(str(name_or_path), dtype=dtype, **model_kwargs)
    except (OSError, ValueError) as err:
        raise CorewardError(f"cannot load a reward model from {name_or_path}: {err}") from None
    return model, tokenizer
