"""The demo policy's tokenizer and model: a word-level tokenizer over the demo task and a ~0.8M Qwen3.

A character vocabulary spends most of a tiny model's compute on spelling; here every template word is one
token (with its leading space), digits and symbols are one token each, and `####` and `\\boxed{` are
single tokens, so a question is ~15 tokens and a solution ~25. Both are ordinary Hugging Face objects:
`save_pretrained` writes them, and `AutoTokenizer` / `AutoModelForCausalLM.from_pretrained` read them
back like any hub model, which is what TRL's trainers (and the reference-model reload) expect.

Why Qwen3 and not Qwen2: transformers 5 lists `qwen2` among the model types whose hub tokenizer class it
overrides, so `AutoTokenizer` would load a Qwen2 checkpoint's tokenizer as a byte-level BPE `Qwen2Tokenizer`
and silently mangle this one. Qwen3 is the same decoder (plus q/k RMSNorm, without q/k/v biases) and keeps
the tokenizer the checkpoint ships.
"""

from __future__ import annotations

import re

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from coreward.data.prompts import PLAIN_CHAT_TEMPLATE
from coreward.data.synthetic import ANSWER_FORMATS, ITEMS, NAMES, TEMPLATES, DemoProblem


PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"

# Pieces the pre-tokenizer cuts text into; each piece is one vocabulary entry (or <unk>).
PIECE_PATTERN = r"####|\\boxed\{| ?[A-Za-z]+| ?[0-9]|[\s\S]"

# Plain-text chat: the prompt is the user's text as is (no role markers: at this scale every token costs);
# an assistant turn ends with EOS, so conversational and plain prompt-completion data tokenize alike.
CHAT_TEMPLATE = PLAIN_CHAT_TEMPLATE


def demo_vocabulary() -> list[str]:
    """Every piece the demo task can produce: special tokens, digits (bare and after a space), symbols, words."""
    texts = [
        DemoProblem(12, (("+", 3), ("-", 4)), template, name, item).question()
        for template in range(len(TEMPLATES))
        for name in NAMES
        for item in ITEMS
    ]
    texts += [fmt.format(0) for fmt in ANSWER_FORMATS.values()]
    pieces = {piece for text in texts for piece in re.findall(PIECE_PATTERN, text)}
    digits = [str(d) for d in range(10)]
    fixed = [PAD, BOS, EOS, UNK, *digits, *(" " + d for d in digits), "+", "-", "=", ";", " ", "\n"]
    return fixed + sorted(pieces - set(fixed))


def build_demo_tokenizer() -> PreTrainedTokenizerFast:
    """A WordLevel tokenizer whose decode(encode(text)) == text for every demo text (Fuse decoder)."""
    vocab = {piece: index for index, piece in enumerate(demo_vocabulary())}
    backend = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(PIECE_PATTERN), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        padding_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=256,
        chat_template=CHAT_TEMPLATE,
    )


def build_demo_model(
    tokenizer: PreTrainedTokenizerFast,
    seed: int = 0,
    hidden: int = 128,
    layers: int = 4,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int = 384,
    max_positions: int = 256,
) -> Qwen3ForCausalLM:
    """A freshly initialised small Qwen3 (tied embeddings) sized to the tokenizer, EOS/PAD set for generation."""
    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=hidden // heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return model
