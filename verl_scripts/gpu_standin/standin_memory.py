"""Peak GPU memory of the actor's log-prob pass, its update and its optimizer step
(verl/workers/actor/dp_actor.py DataParallelPPOActor.compute_log_prob, update_policy,
_optimizer_step, v0.6.1), one line per call in the worker's output, which Ray forwards to the
driver log. Installed by sitecustomize.py with VERL_GKE_GPU_RUN_MEMORY=1; imports only torch.

Each line has torch's allocator peak (max_memory_allocated, what the allocator handed out), its
reserved peak (max_memory_reserved, what it holds from CUDA) and the device's used memory at the
phase's end as the driver reports it (cudaMemGetInfo: total - free), from which the process's
peak is process_peak_bytes = reserved peak + (device used - reserved now): CUDA context, NCCL and
library workspaces live outside the allocator. The worker is the device's only CUDA process while
these phases run (one GPU, colocated actor, reference and rollout).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

MEMORY_TAG = "verl-gke-gpu-run memory"


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
                reserved_peak = torch.cuda.max_memory_reserved()
                free, total = torch.cuda.mem_get_info()
                outside = (total - free) - torch.cuda.memory_reserved()
                print(
                    f"{MEMORY_TAG} phase={phase} peak_bytes={peak} "
                    f"reserved_peak_bytes={reserved_peak} device_used_bytes={total - free} "
                    f"process_peak_bytes={reserved_peak + outside}",
                    flush=True,
                )

        return measured


def measure_actor(actor_class: type) -> None:
    for attribute, phase in (
        ("compute_log_prob", "log_prob"),
        ("update_policy", "actor_update"),
        ("_optimizer_step", "optimizer_step"),
    ):
        setattr(actor_class, attribute, _Peaks.measure(phase, getattr(actor_class, attribute)))
