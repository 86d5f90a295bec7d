"""The committed table of popular Hugging Face causal LMs: the config.json facts the preflight needs
when it cannot read the model's own config.json (the offline plan, CI, tests).

Each entry copies the keys of the model's public config.json at
https://huggingface.co/<id>/blob/main/config.json that the memory fit, the tensor-parallel rules
and the context rule (max_position_embeddings, training/sequence_limits.py) read, and the
parameter count its model card publishes (tests/test_model_facts.py checks that the architecture
arithmetic reproduces it). The values were not re-read from the Hub at a pinned revision when
this table was written (no network): `pulumi up` reads the live config.json with
the stack's token, so a drift here changes only the offline plan. The one model table of the
program: everything that needs a model's architecture imports it from here.

max_position_embeddings, checked on 2026-12-04 against config.json texts on huggingface.co (the
model's own page where one was found, else copies naming the model in _name_or_path or "Copy
config.json from <id>"): Qwen2.5-*-Instruct 32768 (the 7B+ base models say 131072; they are not
in the table), Qwen3 dense 40960 with rope_scaling null, Llama 3.1 and 3.2 131072 with rope_type
llama3 factor 8 and 32, Mistral-7B-Instruct-v0.3 32768 (its own page, revision c170c708),
gemma-2 8192, gemma-3-1b-it 32768. Not every size was seen; none seen differed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True)
class TableEntry:
    # The subset of config.json the preflight reads, with its own key names.
    config: Mapping[str, Any]
    # Parameters the model card states, in billions (a cross-check of the arithmetic).
    card_params_b: float

    @property
    def source(self) -> str:
        return "committed table (config.json of the Hub repository, revision main, not pinned)"


def _qwen2(
    hidden: int, inter: int, layers: int, heads: int, kv: int, vocab: int, tie: bool
) -> dict:
    return {
        "model_type": "qwen2",
        "architectures": ["Qwen2ForCausalLM"],
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "vocab_size": vocab,
        "tie_word_embeddings": tie,
        "max_position_embeddings": 32768,
    }


def _qwen3(hidden: int, inter: int, layers: int, heads: int, tie: bool) -> dict:
    return {
        "model_type": "qwen3",
        "architectures": ["Qwen3ForCausalLM"],
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "tie_word_embeddings": tie,
        "attention_bias": False,
        "max_position_embeddings": 40960,
    }


def _llama(hidden: int, inter: int, layers: int, heads: int, head_dim: int, tie: bool) -> dict:
    return {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": 8,
        "head_dim": head_dim,
        "vocab_size": 128256,
        "tie_word_embeddings": tie,
        "attention_bias": False,
        # With rope_scaling rope_type llama3, factor 8 (3.1) or 32 (3.2), not credited.
        "max_position_embeddings": 131072,
    }


def _gemma(kind: str, hidden: int, inter: int, layers: int, heads: int, kv: int, **extra) -> dict:
    arch = "Gemma2ForCausalLM" if kind == "gemma2" else "Gemma3ForCausalLM"
    return {
        "model_type": kind,
        "architectures": [arch],
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "tie_word_embeddings": True,
        "attention_bias": False,
        **extra,
    }


_GEMMA2 = {
    "head_dim": 256,
    "vocab_size": 256000,
    "final_logit_softcapping": 30.0,
    "max_position_embeddings": 8192,
}
_MISTRAL_7B_V03 = {
    "model_type": "mistral",
    "architectures": ["MistralForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 32768,
    "tie_word_embeddings": False,
    "max_position_embeddings": 32768,
}

_ENTRIES: dict[str, TableEntry] = {
    # Qwen2.5 (Qwen/Qwen2.5-<size>-Instruct; the base models share the architecture).
    "Qwen/Qwen2.5-0.5B-Instruct": TableEntry(_qwen2(896, 4864, 24, 14, 2, 151936, True), 0.49),
    "Qwen/Qwen2.5-1.5B-Instruct": TableEntry(_qwen2(1536, 8960, 28, 12, 2, 151936, True), 1.54),
    "Qwen/Qwen2.5-3B-Instruct": TableEntry(_qwen2(2048, 11008, 36, 16, 2, 151936, True), 3.09),
    "Qwen/Qwen2.5-7B-Instruct": TableEntry(_qwen2(3584, 18944, 28, 28, 4, 152064, False), 7.61),
    "Qwen/Qwen2.5-14B-Instruct": TableEntry(_qwen2(5120, 13824, 48, 40, 8, 152064, False), 14.7),
    "Qwen/Qwen2.5-32B-Instruct": TableEntry(_qwen2(5120, 27648, 64, 40, 8, 152064, False), 32.5),
    "Qwen/Qwen2.5-72B-Instruct": TableEntry(_qwen2(8192, 29568, 80, 64, 8, 152064, False), 72.7),
    # Qwen3 dense (hybrid thinking models; the -Base models share the architecture).
    "Qwen/Qwen3-0.6B": TableEntry(_qwen3(1024, 3072, 28, 16, True), 0.6),
    "Qwen/Qwen3-1.7B": TableEntry(_qwen3(2048, 6144, 28, 16, True), 1.7),
    "Qwen/Qwen3-4B": TableEntry(_qwen3(2560, 9728, 36, 32, True), 4.0),
    "Qwen/Qwen3-8B": TableEntry(_qwen3(4096, 12288, 36, 32, False), 8.2),
    "Qwen/Qwen3-14B": TableEntry(_qwen3(5120, 17408, 40, 40, False), 14.8),
    "Qwen/Qwen3-32B": TableEntry(_qwen3(5120, 25600, 64, 64, False), 32.8),
    # Llama 3.x (gated: the licence is accepted on the model's Hub page).
    "meta-llama/Llama-3.1-8B-Instruct": TableEntry(_llama(4096, 14336, 32, 32, 128, False), 8.03),
    "meta-llama/Llama-3.1-8B": TableEntry(_llama(4096, 14336, 32, 32, 128, False), 8.03),
    "meta-llama/Llama-3.1-70B-Instruct": TableEntry(
        {**_llama(8192, 28672, 80, 64, 128, False)}, 70.6
    ),
    "meta-llama/Llama-3.2-1B-Instruct": TableEntry(_llama(2048, 8192, 16, 32, 64, True), 1.24),
    "meta-llama/Llama-3.2-3B-Instruct": TableEntry(_llama(3072, 8192, 28, 24, 128, True), 3.21),
    # Mistral (gated).
    "mistralai/Mistral-7B-Instruct-v0.3": TableEntry(_MISTRAL_7B_V03, 7.25),
    # Gemma 2 / 3 text models (gated). head_dim is not hidden/heads, the vocabulary is 256k+.
    "google/gemma-2-2b-it": TableEntry(_gemma("gemma2", 2304, 9216, 26, 8, 4, **_GEMMA2), 2.61),
    "google/gemma-2-9b-it": TableEntry(_gemma("gemma2", 3584, 14336, 42, 16, 8, **_GEMMA2), 9.24),
    "google/gemma-2-27b-it": TableEntry(
        _gemma("gemma2", 4608, 36864, 46, 32, 16, **{**_GEMMA2, "head_dim": 128}), 27.2
    ),
    "google/gemma-3-1b-it": TableEntry(
        _gemma(
            "gemma3_text",
            1152,
            6912,
            26,
            4,
            1,
            head_dim=256,
            vocab_size=262144,
            max_position_embeddings=32768,
        ), 1.0
    ),
}

MODEL_TABLE: Mapping[str, TableEntry] = MappingProxyType(_ENTRIES)


def table_entry(hub_id: str) -> TableEntry | None:
    """The entry of a Hub id, in any case (the Hub's ids are case-insensitive)."""
    if hub_id in MODEL_TABLE:
        return MODEL_TABLE[hub_id]
    for known, entry in MODEL_TABLE.items():
        if known.lower() == hub_id.lower():
            return entry
    return None
