"""A tiny Qwen2 model and a word-level tokenizer with a chat template, built offline (no
download), for tests that load a model folder with transformers: random weights, a few kB."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
WORDS = [str(n) for n in range(10)] + ["the", "answer", "is", "####", "what", "plus", "?"]
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>"]


def build_tokenizer(folder: Path) -> Any:
    """Write the tokenizer (with its chat template) to `folder` and return it."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(SPECIAL + WORDS + ["user", "assistant"])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Digits(individual_digits=True)]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token="<unk>",
        additional_special_tokens=["<|im_start|>"],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(folder)
    return tokenizer


def build(folder: Path, seed: int = 0) -> Path:
    """Write the model and tokenizer to `folder` (run in a venv with torch and transformers)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = build_tokenizer(folder)
    vocab = tokenizer.get_vocab()
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(vocab),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        eos_token_id=vocab["<|im_end|>"],
        pad_token_id=vocab["<|endoftext|>"],
    )
    Qwen2ForCausalLM(config).save_pretrained(folder)
    return folder


if __name__ == "__main__":
    # tiny_model.py FOLDER [SEED | tokenizer]
    if sys.argv[2:] == ["tokenizer"]:
        build_tokenizer(Path(sys.argv[1]))
    else:
        build(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 0)
