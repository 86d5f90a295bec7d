"""Step 2 of the rehearsal: the tokenizer and model config as TaskRunner loads them (and the
stand-in model of the offline plan).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from rehearsal_common import MODEL_PATH, ProblemFoundError, verl_function, verl_has

STAND_IN_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def write_stand_in_model(spec: dict[str, Any]) -> Path:
    """A word-level tokenizer (every word one token, as [UNK]) and a one-layer Mistral config with
    the real model's context and vocabulary size: no download. Mistral because AutoTokenizer keeps
    the saved tokenizer.json for it: transformers 5 (tokenization_auto.py,
    MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS) loads a qwen2 folder with Qwen2Tokenizer, a BPE
    without this vocabulary's words, which makes every prompt 0 tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import MistralConfig, PreTrainedTokenizerFast

    folder = Path(spec["dir"])
    specials = ["[UNK]", "[PAD]", "[EOS]", "<|user|>", "<|assistant|>", "<|system|>"]
    model = Tokenizer(models.WordLevel({t: i for i, t in enumerate(specials)}, "[UNK]"))
    model.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=model, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]"
    )
    if spec.get("chat_template", True):
        tokenizer.chat_template = STAND_IN_TEMPLATE
    tokenizer.save_pretrained(str(folder))
    MistralConfig(
        vocab_size=int(spec.get("vocab_size", 32000)),
        max_position_embeddings=int(spec.get("max_position_embeddings", 32768)),
        hidden_size=8,
        intermediate_size=8,
        num_hidden_layers=1,
        num_attention_heads=1,
        num_key_value_heads=1,
    ).save_pretrained(str(folder))
    return folder


def max_position_embeddings(hf_config: Any) -> int | None:
    # verl 0.9.0: verl/workers/rollout/utils.py get_max_position_embeddings (what the vLLM server
    # checks max_model_len against); 0.6.1 reads the attribute (vllm_rollout_spmd.py __init__).
    if verl_has("verl.workers.rollout.utils"):
        with contextlib.suppress(KeyError, StopIteration):
            function = verl_function("verl.workers.rollout.utils", "get_max_position_embeddings")
            return int(function(hf_config))
    for owner in (hf_config, getattr(hf_config, "text_config", None)):
        if owner is not None and getattr(owner, "max_position_embeddings", None) is not None:
            return int(owner.max_position_embeddings)
    return None


def load_model(config: Any, record: dict[str, Any]) -> tuple[Any, Any]:
    """TaskRunner.run (main_ppo.py): copy_to_local(model.path), hf_tokenizer(local_path,
    trust_remote_code=data.trust_remote_code); the workers' AutoConfig.from_pretrained."""
    from transformers import AutoConfig
    from verl.utils import hf_tokenizer
    from verl.utils.fs import copy_to_local

    path = config.actor_rollout_ref.model.path
    local = copy_to_local(path, use_shm=config.actor_rollout_ref.model.get("use_shm", False))
    trust = config.data.get("trust_remote_code", False)
    try:
        tokenizer = hf_tokenizer(local, trust_remote_code=trust)
        hf_config = AutoConfig.from_pretrained(local, trust_remote_code=trust)
    except Exception as error:
        raise ProblemFoundError(
            MODEL_PATH,
            path,
            f"{type(error).__name__}: {error}",
            "a model folder data prep downloaded: pulumi up prepares it before the rehearsal",
        ) from error
    record["model"] = {
        "chat_template": bool(getattr(tokenizer, "chat_template", None)),
        "max_position_embeddings": max_position_embeddings(hf_config),
        "vocab_size": getattr(hf_config, "vocab_size", None),
        "tokenizer_vocab": len(tokenizer),
    }
    return tokenizer, hf_config


def check_chat_template(config: Any, tokenizer: Any, context: dict[str, Any]) -> None:
    """RLHFDataset applies the tokenizer's chat template to every prompt that is a list of
    messages (rl_dataset.py _build_messages, maybe_filter_out_long_prompts, __getitem__)."""
    import pyarrow.parquet as pq

    files = config.data.train_files
    first = str(files if isinstance(files, str) else next(iter(files)))
    if config.data.prompt_key not in pq.read_schema(first).names:
        return  # verl's own dataset code says so next
    table = pq.read_table(first, columns=[config.data.prompt_key]).slice(0, 1).to_pylist()
    prompt = table[0][config.data.prompt_key] if table else None
    if not isinstance(prompt, list):
        return
    try:
        tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
    except Exception as error:
        model = context.get("model")
        chat_model = context.get("chat_model")
        fix = f"pulumi config set verl-gke:model {chat_model or '<a model with a chat template>'}"
        raise ProblemFoundError(
            "verl-gke:model",
            model or config.actor_rollout_ref.model.path,
            f"the prompts are chat messages and the tokenizer has no chat template: "
            f"{type(error).__name__}: {error}",
            fix,
        ) from error
