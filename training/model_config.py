"""A model's architecture from its config.json, and vLLM's tensor-parallel rule over its heads.

Pure functions over the parsed file (no settings, no network), so the GPU benchmark
(bench/memory_fit_gpu.py) uses them on a machine that has only torch and transformers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from training.memory_fit import ModelArch

# config.json keys that only mixture-of-experts models carry (Qwen2/3-MoE num_experts, Mixtral
# num_local_experts, DeepSeek n_routed_experts; transformers' configuration_*.py of each).
_MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_intermediate_size")
# Four RMSNorms per layer (input, post-attention, pre- and post-feedforward): transformers
# modeling_gemma2.py / modeling_gemma3.py Gemma2DecoderLayer / Gemma3DecoderLayer.
_FOUR_NORM_TYPES = frozenset({"gemma2", "gemma3_text"})
# q_norm / k_norm over head_dim: modeling_qwen3.py Qwen3Attention, modeling_gemma3.py.
_QK_NORM_TYPES = frozenset({"qwen3", "gemma3_text"})
# What transformers (4.57.1, verl 0.6.1's) uses when config.json omits a key read here: the
# __init__ defaults of configuration_<model_type>.py. Gemma 2's published config.json has no
# tie_word_embeddings, and Gemma2Config ties by default. num_key_value_heads defaults to a number
# (32, 8, 4), not to num_attention_heads, except in LlamaConfig (None -> num_attention_heads). A
# model_type not listed reads absent keys as untied, no bias, head_dim = hidden_size / heads, no
# softcap, as many KV heads as heads.
_TRANSFORMERS_DEFAULTS: Mapping[str, Mapping[str, Any]] = {
    "qwen2": {"tie_word_embeddings": False, "num_key_value_heads": 32},
    "qwen3": {
        "tie_word_embeddings": False,
        "attention_bias": False,
        "head_dim": 128,
        "num_key_value_heads": 32,
    },
    "llama": {"tie_word_embeddings": False, "attention_bias": False},
    "mistral": {"tie_word_embeddings": False, "num_key_value_heads": 8},
    "gemma2": {
        "tie_word_embeddings": True,
        "attention_bias": False,
        "head_dim": 256,
        "final_logit_softcapping": 30.0,
        "num_key_value_heads": 4,
    },
    "gemma3_text": {
        "tie_word_embeddings": True,
        "attention_bias": False,
        "head_dim": 256,
        "num_key_value_heads": 4,
    },
}
# Model classes whose q/k/v biases do not follow config.json's attention_bias: nn.Linear(...,
# bias=True) in modeling_qwen2.py Qwen2Attention, bias=False in modeling_mistral.py.
_FIXED_ATTENTION_BIAS: Mapping[str, bool] = {"qwen2": True, "mistral": False}


class ModelFactsError(ValueError):
    """The model cannot be trained as set; the message names the key, the value and a fix."""


def arch_from_config(config: Mapping[str, Any], name: str) -> ModelArch:
    """The architecture facts of a parsed config.json; ModelFactsError (the reason) for a model
    the program cannot train or estimate."""
    _refuse_unsupported(config)
    model_type = str(config.get("model_type", ""))
    config = {**_TRANSFORMERS_DEFAULTS.get(model_type, {}), **config}

    def need_int(key: str) -> int:
        value = config.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ModelFactsError(
                f"its config.json has {key} = {value!r}; a positive integer is required"
            )
        return value

    heads = need_int("num_attention_heads")
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim")
    return ModelArch(
        name=name,
        hidden_size=need_int("hidden_size"),
        intermediate_size=need_int("intermediate_size"),
        num_hidden_layers=need_int("num_hidden_layers"),
        num_attention_heads=heads,
        num_key_value_heads=int(kv_heads),
        vocab_size=need_int("vocab_size"),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        attention_bias=_FIXED_ATTENTION_BIAS.get(
            model_type, bool(config.get("attention_bias", False))
        ),
        head_dim=int(head_dim) if isinstance(head_dim, int) else None,
        norms_per_layer=4 if model_type in _FOUR_NORM_TYPES else 2,
        qk_norm=model_type in _QK_NORM_TYPES,
        final_logit_softcapping=bool(config.get("final_logit_softcapping")),
    )


def _refuse_unsupported(config: Mapping[str, Any]) -> None:
    moe = [key for key in _MOE_KEYS if config.get(key)]
    if moe:
        raise ModelFactsError(
            f"it is a mixture-of-experts model (config.json {moe[0]} = {config[moe[0]]}); the "
            "memory fit models dense decoders only (expert weights, routing and expert "
            "parallelism are not estimated), so it is refused"
        )
    if "text_config" in config:
        raise ModelFactsError(
            "its config.json nests a text_config: it is an image-text model, which verl trains "
            "through its vision-language path, not the causal-LM path this program builds"
        )
    architectures = config.get("architectures") or []
    if architectures and not all(str(a).endswith("ForCausalLM") for a in architectures):
        raise ModelFactsError(
            f"its config.json architectures are {architectures}; verl's actor loads a causal "
            "LM (a class ending in ForCausalLM)"
        )
    if "auto_map" in config:
        raise ModelFactsError(
            "its config.json has an auto_map: it needs the repository's own Python code "
            "(trust_remote_code), which this program does not pass to verl or vLLM"
        )


# --- vLLM's tensor-parallel rule ---------------------------------------------------------------


def rollout_tp_fits(tp: int, arch: ModelArch) -> bool:
    """vLLM shards query heads across TP ranks (num_attention_heads % tp == 0) and either shards
    KV heads (kv % tp == 0) or replicates them (tp % kv == 0): vllm/config ModelConfig.
    verify_with_parallel_config and QKVParallelLinear; it splits the MLP's gate/up outputs and
    down input over the ranks (intermediate_size % tp == 0): MergedColumnParallelLinear and
    RowParallelLinear, vllm/model_executor/layers/linear.py (v0.11.0)."""
    heads, kv_heads = arch.num_attention_heads, arch.num_key_value_heads
    kv_ok = kv_heads % tp == 0 if kv_heads >= tp else tp % kv_heads == 0
    return heads % tp == 0 and kv_ok and arch.intermediate_size % tp == 0


def best_rollout_tp(requested: int, gpus_per_node: int, arch: ModelArch) -> int:
    """The TP nearest `requested` that divides the node's GPUs and fits the model's heads; on a
    tie the larger, which leaves more memory per GPU."""
    candidates = [
        tp
        for tp in range(1, gpus_per_node + 1)
        if gpus_per_node % tp == 0 and rollout_tp_fits(tp, arch)
    ]
    return min(candidates, key=lambda tp: (abs(tp - requested), -tp))
