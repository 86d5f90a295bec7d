"""The estimator's per-layer activation bytes against what autograd really saves in the
transformers release each verl virtualenv pins (4.57.1 with verl 0.6.1, 5.10.4 with 0.9.0).

verl_scripts/saved_activations.py builds the model classes of transformers on CPU and counts
the storages torch.autograd.graph.saved_tensors_hooks sees, per token and per layer. Attention
differs between CPU SDPA and the GPU's flash kernels, so the q/k norms are checked as the
difference between model pairs that share the attention (Qwen3 vs Llama, Gemma 3 vs Gemma 2
without attention softcapping); with transformers 5.x the whole layer is checked too.
"""

from __future__ import annotations

import functools
import json
import subprocess
from pathlib import Path

import pytest

from tests.support.require import verl_python
from training.memory_fit import ModelArch, layer_activation_bytes_per_token

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "verl_scripts" / "saved_activations.py"
# One small geometry for every family: hidden 256, MLP 512, 4 query heads and 2 KV heads of 64.
GEOMETRY = {
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": 1000,
}
# Gemma 2's attn_logit_softcapping (tanh over the attention scores) exists only on the eager
# path and Gemma 3 has none; a window past the sequence keeps SDPA free of a mask tensor.
MODELS = {
    "llama": {"model_type": "llama", "config": {}},
    "qwen3": {"model_type": "qwen3", "config": {}},
    "gemma2": {
        "model_type": "gemma2",
        "config": {"attn_logit_softcapping": None, "sliding_window": 4096},
    },
    "gemma3": {"model_type": "gemma3_text", "config": {"sliding_window": 4096}},
}


def _arch(norms: int, qk_norm: bool) -> ModelArch:
    return ModelArch(
        "geometry", 256, 512, 2, 4, 2, 1000, False,
        attention_bias=False, head_dim=64, norms_per_layer=norms, qk_norm=qk_norm,
    )  # fmt: skip


ESTIMATED = {
    "llama": layer_activation_bytes_per_token(_arch(2, False)),
    "qwen3": layer_activation_bytes_per_token(_arch(2, True)),
    "gemma2": layer_activation_bytes_per_token(_arch(4, False)),
    "gemma3": layer_activation_bytes_per_token(_arch(4, True)),
}


@functools.cache
def _counted(release: str) -> tuple[str, dict[str, float]]:
    python = verl_python(release)
    done = subprocess.run(
        [str(python), str(SCRIPT)],
        input=json.dumps({"geometry": GEOMETRY, "models": MODELS}),
        capture_output=True, text=True, check=False, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    return result["transformers_version"], result["bytes_per_token_per_layer"]


@pytest.fixture(scope="module", params=["0.6.1", "0.9.0"])
def counted(request: pytest.FixtureRequest) -> tuple[str, dict[str, float]]:
    return _counted(request.param)


def test_qk_norms_save_what_the_estimator_counts(counted: tuple[str, dict[str, float]]) -> None:
    version, saved = counted
    for model, base in (("qwen3", "llama"), ("gemma3", "gemma2")):
        assert saved[model] - saved[base] == ESTIMATED[model] - ESTIMATED[base], (
            f"transformers {version}: {model}'s q/k norms save "
            f"{saved[model] - saved[base]:.0f} bytes per token per layer, the estimator counts "
            f"{ESTIMATED[model] - ESTIMATED[base]}"
        )


def test_whole_layer_matches_with_transformers_5() -> None:
    """transformers 5's CPU SDPA saves what the GPU's flash kernels do (q, k, v, output,
    logsumexp); 4.57.1's keeps extra attention tensors there (GQA repeat), so its layers are
    checked through the q/k-norm differences above."""
    version, saved = _counted("0.9.0")
    assert version.startswith("5."), version
    assert saved == {model: float(n) for model, n in ESTIMATED.items()}
