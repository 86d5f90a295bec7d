"""bench/gpu_run.py's job and stand-in rollout, against verl 0.6.1's own code (CPU).

- The job the bench submits (training.assembly for 1 node x 1 GPU, the tiny model's
  modelConfig, sdpa through extraOverrides) composes and validates in verl 0.6.1's config
  (verl_scripts/verl_compose_check.py), rollout.name vllm included.
- verl_scripts/gpu_standin meets verl 0.6.1's rollout contract (verl/workers/rollout/base.py:
  `get_rollout_class` reads `_ROLLOUT_REGISTRY`; fsdp_workers.py `_build_rollout` calls the class
  with config=, model_config=, device_mesh=; `BaseRollout` is abstract in resume,
  update_weights, release): registered only when switched on, no abstract method left, the
  constructor's parameters, and update_weights copying the actor's tensors by name.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from bench import gpu_run_support as support
from tests.support.require import verl_python
from tests.support.verl_check import start_check

# Starts verl's interpreter.
pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[1]
STANDIN = REPO / "verl_scripts" / "gpu_standin"
CONTRACT_CHECK = REPO / "verl_scripts" / "standin_contract_check.py"
COMPOSE_CHECK = REPO / "verl_scripts" / "verl_compose_check.py"
RELEASE = "0.6.1"


def _python() -> Path:
    return verl_python(RELEASE)


def _contract_process(switched_on: bool) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(STANDIN)}
    if switched_on:
        env.update(VERL_GKE_STANDIN_ROLLOUT="1", VERL_GKE_GPU_RUN_MEMORY="1")
    return subprocess.Popen(
        [str(_python()), str(CONTRACT_CHECK)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )


def _compose_overrides() -> list[str]:
    _, job = support.plan({**support.JOB, "extraOverrides": [support.SDPA]})
    argv = shlex.split(job.entrypoint)
    return argv[argv.index("--") + 4 :]  # after `-- python3 -m verl.trainer.main_ppo`


@cache
def _reports() -> dict[str, tuple[int, str, str]]:
    """The three checks, started at once (each imports verl: seconds), as (exit, out, err)."""
    running = {
        "compose": start_check(
            _python(), COMPOSE_CHECK, {"cases": {"gpu-run": _compose_overrides()}}
        ),
        "on": _contract_process(switched_on=True),
        "off": _contract_process(switched_on=False),
    }
    reports = {}
    for name, process in running.items():
        out, err = process.communicate()
        reports[name] = (process.returncode, out, err)
    return reports


def _contract(switched_on: bool) -> dict[str, Any]:
    code, out, err = _reports()["on" if switched_on else "off"]
    assert code == 0, err[-4000:]
    return json.loads(out.strip().splitlines()[-1])


def test_the_one_gpu_job_composes_in_verl_061() -> None:
    overrides = _compose_overrides()
    assert "actor_rollout_ref.rollout.name=vllm" in overrides and support.SDPA in overrides
    code, out, err = _reports()["compose"]
    assert code == 0, err[-4000:]
    verdict = json.loads(out)["results"]["gpu-run"]
    assert verdict["ok"], verdict


def test_the_stand_in_meets_verl_061s_rollout_contract() -> None:
    report = _contract(switched_on=True)
    assert report["class"] == "standin_rollout.HfStandInRollout"
    assert report["is_base_rollout"] and report["abstract_left"] == []
    assert report["init_params"] == report["base_init_params"]
    assert report["measured_phases"] == ["_optimizer_step", "compute_log_prob", "update_policy"]
    weights = report["update_weights"]
    assert weights["all_copied"] and weights["tensors"] > 0
    assert weights["unknown_name"].startswith("KeyError")


def test_without_the_switch_verl_keeps_its_own_rollout() -> None:
    assert _contract(switched_on=False) == {
        "registry": "verl.workers.rollout.vllm_rollout.vLLMRollout"
    }
