"""The GRPO job's entrypoint: payloads/export/run_grpo.py runs verl's trainer, records that
training finished (`training.done` in the run folder), then merges the final checkpoint into a
Hugging Face model folder in the bucket (payloads/export/export_model.py), in the same Ray job and
without a second GPU job. A resubmission after a failed export runs only the export.
`verl-gke:exportModel=false` leaves the export out.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from config.bucket_layout import bucket_url, model_export_dir
from config.recovery import RecoveryPlan
from payloads.export import export_model, provreq, run_grpo, supervise

# Shipped as the job's working_dir; relative to the program's directory, like the fabric check's
# (the dynamic provider runs there), so the job spec is the same on every machine.
EXPORT_DIR = "payloads/export"
RUNNER = Path(run_grpo.__file__).name
# A changed payload is a different job spec (the submission id hashes the runtime env).
SHA_ENV = "VERL_GKE_EXPORT_SHA256"


def export_url(bucket: str, experiment: str) -> str:
    """gs:// folder of the merged model (`modelExportPath`), known at plan time."""
    return bucket_url(bucket, model_export_dir(experiment))


def _payload_sha256() -> str:
    digest = hashlib.sha256()
    for module in (run_grpo, supervise, provreq, export_model):
        digest.update(Path(module.__file__).read_bytes())
    return digest.hexdigest()


def runner_job(
    training_argv: list[str],
    runtime_env: dict[str, Any],
    *,
    run_dir: str,
    identity: Mapping[str, Any],
    export_experiment: str | None,
    recovery: RecoveryPlan | None = None,
    capacity: Mapping[str, Any] | None = None,
) -> tuple[str, dict[str, Any]]:
    """The entrypoint that runs `training_argv` through the runner (export after it when
    export_experiment is given; restarts and hang watchdog per `recovery`, none without it), and
    the runtime env that ships the runner. `capacity` (Standard flex-start:
    manifests/capacity.runner_capacity) lets the runner ask for GPU nodes again."""
    command = [
        "python3",
        RUNNER,
        "--run-dir",
        run_dir,
        "--identity",
        json.dumps(dict(identity), sort_keys=True, separators=(",", ":")),
    ]
    if export_experiment is not None:
        command += ["--export-target", model_export_dir(export_experiment)]
    if recovery is not None:
        command += recovery.runner_arguments(gpus_needed=int(identity["world_size"]))
    if capacity is not None:
        command += ["--capacity-request", json.dumps(dict(capacity), separators=(",", ":"))]
    env_vars = {**runtime_env.get("env_vars", {}), SHA_ENV: _payload_sha256()}
    shipped = {
        **runtime_env,
        "working_dir": EXPORT_DIR,
        "excludes": ["__pycache__"],
        "env_vars": env_vars,
    }
    return shlex.join([*command, "--", *training_argv]), shipped
