"""The refusal of data.filter_overlong_prompts=False says what verl does with a prompt longer than
data.max_prompt_length: verl 0.6.1's own postprocess_data (RLHFDataset.__getitem__) decides, per
data.truncation, whether the run stops or the prompt is cut."""

from __future__ import annotations

import subprocess

import pytest

from config.profiles import PROFILES, Mode
from tests.support.require import verl_python
from training.grpo_spec import GrpoPreflightError, apply_overrides, default_grpo_spec

# A 10-token prompt against max_length 4, through verl's own function: prints "raises" or "cuts".
_VERL_POSTPROCESS = """
import sys, torch
from verl.utils.torch_functional import postprocess_data
ids = torch.ones(1, 10, dtype=torch.long)
try:
    out, _ = postprocess_data(ids, torch.ones_like(ids), max_length=4, pad_token_id=0,
                              left_pad=True, truncation=sys.argv[1])
except Exception:
    print("raises")
else:
    print("cuts" if out.shape[-1] == 4 else "kept")
"""


def _verl_061(truncation: str) -> str:
    done = subprocess.run(
        [str(verl_python("0.6.1")), "-c", _VERL_POSTPROCESS, truncation],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout.split()[-1]


def _refusal(extra: list[str]) -> str:
    p = PROFILES["a3u"]
    with pytest.raises(GrpoPreflightError) as caught:
        apply_overrides(
            default_grpo_spec(p, Mode.STANDARD, p.default_gpu_nodes), {"extraOverrides": extra}
        )
    return str(caught.value)


@pytest.mark.parametrize("truncation", ["left", "error"])
def test_refusal_says_what_verl_does_with_a_long_prompt(truncation: str) -> None:
    verl_does = _verl_061(truncation)
    message = _refusal([f"data.truncation={truncation}", "data.filter_overlong_prompts=False"])
    assert "Fix: remove it" in message
    if verl_does == "raises":
        assert "stops the run on the GPUs at verl 0.6.1" in message
    else:
        assert verl_does == "cuts"
        assert "stops the run" not in message and "raises" not in message
        assert f"cuts it to that length (data.truncation={truncation}" in message
