"""The GRPO job's entrypoint: payloads/export/run_grpo.py runs verl's trainer, records that
training finished (`training.done` in the run folder), then merges the final checkpoint into a
Hugging Face model folder in the bucket (payloads/export/export_model.py), in the same Ray job and
without a second GPU job. A resubmission after a failed export runs only the export.
`verl-gke:exportModel=false` leaves the export out. After the export the runner evaluates it
against the base model (payloads/export/evaluate.py, training/model_evaluation.py).
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from config.bucket_layout import bucket_url, model_export_dir
from config.recovery import RecoveryPlan
from payloads.export import evaluate, export_model, provreq, run_grpo, supervise, trainer_lease

# Shipped as the job's working_dir; relative to the program's directory, like the fabric check's
# (the dynamic provider runs there), so the job spec is the same on every machine.
EXPORT_DIR = "payloads/export"
RUNNER = Path(run_grpo.__file__).name
# A changed payload is a different job spec (the submission id hashes the runtime env).
SHA_ENV = "VERL_GKE_EXPORT_SHA256"
# Ray's job stop sends SIGTERM to the entrypoint and every descendant, then SIGKILL after
# RAY_JOB_STOP_WAIT_TIME_S (default 3 s), read from the JobSupervisor actor's environment, which
# holds the job's runtime_env env_vars (Ray 2.47/2.49 dashboard/modules/job/job_supervisor.py
# DEFAULT_RAY_JOB_STOP_WAIT_TIME_S, job_manager.py _get_supervisor_runtime_env). The runner needs
# the supervisor's own grace (SIGTERM to the trainer, SIGKILL after it) plus time to record the
# attempt: a stop never waits past the provider's and tools.run's stop deadlines (300 s, 120 s).
RAY_STOP_WAIT_ENV = "RAY_JOB_STOP_WAIT_TIME_S"
RAY_STOP_WAIT_S = int(supervise.Policy(0, 0.0, 0.0).stop_grace_s) + 30


@dataclass(frozen=True)
class SaveWatch:
    """Which training steps save a checkpoint, and how much longer the hang watchdog waits for
    them (payloads/export/supervise.py Policy.step_bound)."""

    save_freq: int
    total_steps: int  # 0: not known
    allowance_s: float

    def runner_arguments(self) -> list[str]:
        return [
            "--save-freq", str(self.save_freq),
            "--total-steps", str(self.total_steps),
            "--save-allowance-s", f"{self.allowance_s:.0f}",
        ]  # fmt: skip


def export_url(bucket: str, experiment: str) -> str:
    """gs:// folder of the merged model (`modelExportPath`), known at plan time."""
    return bucket_url(bucket, model_export_dir(experiment))


def _payload_sha256() -> str:
    digest = hashlib.sha256()
    for module in (run_grpo, supervise, provreq, trainer_lease, export_model, evaluate):
        digest.update(Path(module.__file__).read_bytes())
    return digest.hexdigest()


def runner_job(
    training_argv: list[str],
    runtime_env: dict[str, Any],
    *,
    run_dir: str,
    identity: Mapping[str, Any],
    export_experiment: str | None,
    length: Mapping[str, Any],
    keep_checkpoints: int | None,
    lora_alpha: int | None = None,
    recovery: RecoveryPlan | None = None,
    saves: SaveWatch | None = None,
    capacity: Mapping[str, Any] | None = None,
    evaluation: Mapping[str, Any] | None = None,
) -> tuple[str, dict[str, Any]]:
    """The entrypoint that runs `training_argv` through the runner (export after it when
    export_experiment is given; restarts and hang watchdog per `recovery`, none without it), and
    the runtime env that ships the runner. `capacity` (Standard flex-start:
    manifests/capacity.runner_capacity) lets the runner ask for GPU nodes again. `evaluation`
    (training/model_evaluation.py): evaluate.py's flags, run after the export."""
    command = [
        "python3",
        RUNNER,
        "--run-dir",
        run_dir,
        "--identity",
        json.dumps(dict(identity), sort_keys=True, separators=(",", ":")),
        "--length",
        json.dumps(dict(length), sort_keys=True, separators=(",", ":")),
    ]
    if keep_checkpoints is not None:
        command += ["--keep-checkpoints", str(keep_checkpoints)]
    if export_experiment is not None:
        command += ["--export-target", model_export_dir(export_experiment)]
        if lora_alpha is not None:
            command += ["--lora-alpha", str(lora_alpha)]
        if evaluation is not None:
            command += ["--evaluation", json.dumps(dict(evaluation), separators=(",", ":"))]
    if recovery is not None:
        command += recovery.runner_arguments(gpus_needed=int(identity["world_size"]))
        if saves is not None:
            command += saves.runner_arguments()
    if capacity is not None:
        command += ["--capacity-request", json.dumps(dict(capacity), separators=(",", ":"))]
    env_vars = {
        **runtime_env.get("env_vars", {}),
        SHA_ENV: _payload_sha256(),
        RAY_STOP_WAIT_ENV: str(RAY_STOP_WAIT_S),
    }
    shipped = {
        **runtime_env,
        "working_dir": EXPORT_DIR,
        "excludes": ["__pycache__"],
        "env_vars": env_vars,
    }
    return shlex.join([*command, "--", *training_argv]), shipped
