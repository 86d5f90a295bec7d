"""Installs the stand-in rollout (standin_rollout.py) in every Python process started with this
folder on PYTHONPATH and VERL_GKE_STANDIN_ROLLOUT=1: the Ray driver and each Ray worker, where
verl reads its rollout registry (verl/workers/fsdp_workers.py -> get_rollout_class, v0.6.1).

Nothing is imported until verl itself imports the module concerned: an import hook patches
verl.workers.rollout.base (the registry) and, with VERL_GKE_GPU_RUN_MEMORY=1,
verl.workers.actor.dp_actor (peak memory per phase) right after they load, so the other
processes of the Ray node (dashboard, agents) are unaffected.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType
from typing import Any

# get_rollout_class imports the class by this name when a worker builds its rollout.
REGISTRY_KEY = ("vllm", "sync")
STANDIN_CLASS = "standin_rollout.HfStandInRollout"


def _patch_registry(module: ModuleType) -> None:
    module._ROLLOUT_REGISTRY[REGISTRY_KEY] = STANDIN_CLASS


def _patch_actor(module: ModuleType) -> None:
    import standin_memory

    standin_memory.measure_actor(module.DataParallelPPOActor)


class _AfterLoad(importlib.abc.MetaPathFinder):
    def __init__(self, patches: dict[str, Any]) -> None:
        self.patches = patches

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        patch = self.patches.get(name)
        if patch is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        load = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            load(module)
            patch(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if os.environ.get("VERL_GKE_STANDIN_ROLLOUT") == "1":
    _patches: dict[str, Any] = {"verl.workers.rollout.base": _patch_registry}
    if os.environ.get("VERL_GKE_GPU_RUN_MEMORY") == "1":
        _patches["verl.workers.actor.dp_actor"] = _patch_actor
    sys.meta_path.insert(0, _AfterLoad(_patches))
