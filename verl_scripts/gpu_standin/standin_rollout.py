"""A rollout for verl 0.6.1 that generates with the Hugging Face model, for a machine without vLLM.

Runs inside verl's Ray workers (bench/gpu_run.py puts this folder on the PYTHONPATH of `ray start`
and sets VERL_GKE_STANDIN_ROLLOUT=1; sitecustomize.py here installs it). Why it is needed and what
it must implement (verl 0.6.1, read at the tag):
- verl/workers/rollout/base.py: `get_rollout_class(name, mode)` reads `_ROLLOUT_REGISTRY`, which
  lists only vLLM and SGLang; fsdp_workers.py `_build_rollout` calls the class with
  `(config=, model_config=, device_mesh=)`.
- `BaseRollout` is abstract in `resume(tags)`, `update_weights(weights, **kwargs)` and
  `release()`, the coroutines fsdp_workers.py `rollout_mode` / `trainer_mode` await around each
  generation; `update_weights` receives the actor's (Hugging Face name, tensor) pairs.
- verl/workers/rollout/hf_rollout.py `HFRollout.generate_sequences` generates with `self.module`
  and `self.config`; its own `__init__(module, config)` does not match the registry's call.
- `HFRollout._generate_minibatch` passes the prompts' `position_ids` to `generate()`; transformers
  4.57.1 uses a given `position_ids` as it is at every decoding step (it derives them from the
  attention mask only when none is given), so every new token gets the last prompt position and
  the answers are garbage. The stand-in's `generate` leaves them out.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import torch
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.hf_rollout import HFRollout

ROLLOUT_TAG = "verl-gke-gpu-run rollout"


def without_position_ids(generate: Callable[..., Any]) -> Callable[..., Any]:
    """`generate` with any `position_ids` argument dropped: transformers then computes each
    step's positions from the left-padded attention mask (see the module's docstring)."""

    @functools.wraps(generate)
    def generate_from_the_mask(*args: Any, position_ids: Any = None, **kwargs: Any) -> Any:
        return generate(*args, **kwargs)

    return generate_from_the_mask


class HfStandInRollout(HFRollout):
    """HFRollout built the way the registry builds a rollout; weights come from the actor."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any) -> None:
        BaseRollout.__init__(self, config, model_config, device_mesh)
        from transformers import AutoModelForCausalLM

        self.module = AutoModelForCausalLM.from_pretrained(
            self.model_config.local_path, torch_dtype=torch.bfloat16, attn_implementation="sdpa"
        ).to(torch.cuda.current_device())
        self.module.generate = without_position_ids(self.module.generate)
        self.updates = 0

    async def resume(self, tags: list[str]) -> None:
        """Nothing is offloaded between steps: the model stays on the GPU."""

    async def release(self) -> None:
        """Nothing to free: no KV cache outlives a generate() call."""

    async def update_weights(
        self, weights: Iterable[tuple[str, torch.Tensor]], **kwargs: Any
    ) -> None:
        """Copy each actor tensor into the parameter of the same Hugging Face name."""
        state = self.module.state_dict()
        taken = 0
        with torch.no_grad():
            for name, tensor in weights:
                if name not in state:
                    raise KeyError(f"the actor sent {name!r}, which the rollout model lacks")
                state[name].copy_(tensor.to(state[name].dtype))
                taken += 1
        self.updates += 1
        if self.updates == 1:
            print(f"{ROLLOUT_TAG}: took {taken} tensors from the actor", flush=True)
