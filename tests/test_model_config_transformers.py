"""A config.json that leaves keys out is read as transformers reads it: for each model_type with
defaults in training/model_config.py, transformers' own config class (4.57.1, in the verl 0.6.1
virtualenv that .ci/setup builds) is asked for the values arch_from_config uses."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.support.require import verl_python
from training.model_config import _TRANSFORMERS_DEFAULTS, arch_from_config

# Runs transformers in a subprocess (the verl virtualenv).
pytestmark = pytest.mark.integration

# Only the keys every config.json must carry (arch_from_config refuses it without them).
REQUIRED = {
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 4,
    "num_attention_heads": 16,
    "vocab_size": 32000,
}
# transformers.CONFIG_MAPPING[model_type](**REQUIRED): the values a model built from that file has.
ASK = """
import json, sys
from transformers import CONFIG_MAPPING
required, types = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(json.dumps({
    t: {k: getattr(CONFIG_MAPPING[t](**required), k, None)
        for k in ("num_key_value_heads", "tie_word_embeddings", "head_dim")}
    for t in types
}))
"""


def _transformers_values() -> dict[str, dict[str, object]]:
    python = verl_python("0.6.1")
    done = subprocess.run(
        [str(python), "-c", ASK, json.dumps(REQUIRED), json.dumps(sorted(_TRANSFORMERS_DEFAULTS))],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_keys_left_out_of_config_json_take_transformers_defaults() -> None:
    for model_type, wanted in _transformers_values().items():
        arch = arch_from_config({**REQUIRED, "model_type": model_type}, "x/y")
        assert arch.num_key_value_heads == wanted["num_key_value_heads"], model_type
        assert arch.tie_word_embeddings == wanted["tie_word_embeddings"], model_type
        head_dim = wanted["head_dim"]
        expected = head_dim if head_dim is not None else REQUIRED["hidden_size"] // 16
        assert arch.head_size == expected, model_type
