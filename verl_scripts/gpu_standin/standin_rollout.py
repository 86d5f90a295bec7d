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

Also, switched on by VERL_GKE_GPU_RUN_MEMORY=1: torch's peak allocated GPU memory of the actor's
log-prob pass, its update and its optimizer step (verl/workers/actor/dp_actor.py
DataParallelPPOActor.compute_log_prob, update_policy, _optimizer_step), one line per call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import torch
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.hf_rollout import HFRollout

REGISTRY_KEY = ("vllm", "sync")
MEMORY_TAG = "verl-gke-gpu-run memory"
ROLLOUT_TAG = "verl-gke-gpu-run rollout"


class HfStandInRollout(HFRollout):
    """HFRollout built the way the registry builds a rollout; weights come from the actor."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any) -> None:
        BaseRollout.__init__(self, config, model_config, device_mesh)
        from transformers import AutoModelForCausalLM

        self.module = AutoModelForCausalLM.from_pretrained(
            self.model_config.local_path, torch_dtype=torch.bfloat16, attn_implementation="sdpa"
        ).to(torch.cuda.current_device())
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


def register(registry: dict[tuple[str, str], str]) -> None:
    registry[REGISTRY_KEY] = f"{__name__}.{HfStandInRollout.__name__}"


class _Peaks:
    """Nested phases (the optimizer step runs inside the update): each reports its own peak, and
    an enclosing phase's peak includes what the inner one saw before resetting the counter."""

    open: list[int] = []

    @classmethod
    def measure(cls, phase: str, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def measured(*args: Any, **kwargs: Any) -> Any:
            if cls.open:
                cls.open[-1] = max(cls.open[-1], torch.cuda.max_memory_allocated())
            torch.cuda.reset_peak_memory_stats()
            cls.open.append(0)
            try:
                return method(*args, **kwargs)
            finally:
                peak = max(cls.open.pop(), torch.cuda.max_memory_allocated())
                if cls.open:
                    cls.open[-1] = max(cls.open[-1], peak)
                print(f"{MEMORY_TAG} phase={phase} peak_bytes={peak}", flush=True)

        return measured


def measure_actor(actor_class: type) -> None:
    for attribute, phase in (
        ("compute_log_prob", "log_prob"),
        ("update_policy", "actor_update"),
        ("_optimizer_step", "optimizer_step"),
    ):
        setattr(actor_class, attribute, _Peaks.measure(phase, getattr(actor_class, attribute)))
