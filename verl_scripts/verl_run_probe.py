"""Run the parts of verl's own code that decide what a GRPO job's run leaves behind, inside an
isolated verl virtualenv (like verl_scripts/verl_compose_check.py: it imports nothing from this
project).

Input: {"requests": [request, ...]} as JSON, on stdin or in the file named by the one argument.
Output: {"verl_version": "...", "results": [result, ...]} as the last line of stdout. Each request
runs with the environment the probe started with plus its "env" (a mapping, optional):
  {"probe": "tracking", "overrides": ["key=value", ...], "steps": [{"step": 1, "data": {...}}]}
      compose `overrides` against verl's ppo_trainer config as main_ppo does, build verl's
      Tracking (verl/utils/tracking.py) with the composed trainer.logger, log `steps`, finish.
      -> {"logger": [...], "stdout": "...", "supported": [...]}
  {"probe": "driver_env", "job_runtime_env": {...}}
      call verl's get_ppo_ray_runtime_env (verl/trainer/constants_ppo.py) as the job's driver:
      with the job's env_vars as "env" and the job config that Ray's job supervisor sets
      (RAY_JOB_CONFIG_JSON_ENV_VAR) -> {"driver_runtime_env": {...}}
  {"probe": "rollout_defaults"}
      -> {"max_num_seqs": <verl's rollout config default>}
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import sys
from pathlib import Path
from typing import Any


def _config_dir() -> Path:
    spec = importlib.util.find_spec("verl.trainer.main_ppo")
    if spec is None or spec.origin is None:
        raise RuntimeError("verl.trainer.main_ppo is not importable in this interpreter")
    return Path(spec.origin).parent / "config"


def _compose(overrides: list[str]) -> Any:
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(_config_dir()), version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


def tracking(request: dict[str, Any]) -> dict[str, Any]:
    from omegaconf import OmegaConf
    from verl.utils.tracking import Tracking

    logger = OmegaConf.to_container(_compose(request["overrides"]).trainer, resolve=True)["logger"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        # As verl's RayPPOTrainer.fit builds it (project and experiment names, the backends).
        tracker = Tracking(project_name="p", experiment_name="e", default_backend=logger)
        for item in request["steps"]:
            tracker.log(data=item["data"], step=item["step"])
        if "file" in tracker.logger:
            tracker.logger["file"].finish()
    return {"logger": logger, "stdout": out.getvalue(), "supported": Tracking.supported_backend}


def driver_env(request: dict[str, Any]) -> dict[str, Any]:
    from ray._private.runtime_env.constants import RAY_JOB_CONFIG_JSON_ENV_VAR

    os.environ[RAY_JOB_CONFIG_JSON_ENV_VAR] = json.dumps(
        {"runtime_env": request["job_runtime_env"]}
    )
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    return {"driver_runtime_env": get_ppo_ray_runtime_env()}


def rollout_defaults(_request: dict[str, Any]) -> dict[str, Any]:
    from omegaconf import OmegaConf

    rollout = OmegaConf.to_container(_compose([]).actor_rollout_ref.rollout, resolve=False)
    return {"max_num_seqs": rollout["max_num_seqs"]}


PROBES = {"tracking": tracking, "driver_env": driver_env, "rollout_defaults": rollout_defaults}


def main() -> int:
    source = open(sys.argv[1]) if len(sys.argv) > 1 else sys.stdin
    requests = json.load(source)["requests"]
    started_with = dict(os.environ)
    results = []
    for request in requests:
        os.environ.clear()
        os.environ.update({**started_with, **request.get("env", {})})
        results.append(PROBES[request["probe"]](request))
    import verl

    print(json.dumps({"verl_version": verl.__version__, "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
