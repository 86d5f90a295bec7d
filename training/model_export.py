"""The trained model, usable: the GRPO job's entrypoint ends by merging the final checkpoint into
a Hugging Face model folder in the bucket (payloads/export/export_model.py), in the same Ray job
and without a second GPU job. `verl-gke:exportModel=false` leaves it out.
"""

from __future__ import annotations

import hashlib
import shlex
from pathlib import Path
from typing import Any

from config.bucket_layout import bucket_url, model_export_dir
from payloads.export import export_model

# Shipped as the job's working_dir; relative to the program's directory, like the fabric check's
# (the dynamic provider runs there), so the job spec is the same on every machine.
EXPORT_DIR = "payloads/export"
SCRIPT = Path(export_model.__file__).name
# A changed payload is a different job spec (the submission id hashes the runtime env).
SHA_ENV = "VERL_GKE_EXPORT_SHA256"


def export_url(bucket: str, experiment: str) -> str:
    """gs:// folder of the merged model (`modelExportPath`), known at plan time."""
    return bucket_url(bucket, model_export_dir(experiment))


def with_export(
    entrypoint: str, runtime_env: dict[str, Any], *, checkpoint_dir: str, experiment: str
) -> tuple[str, dict[str, Any]]:
    """The entrypoint that merges after verl's trainer exits 0 (`&&`: a failed run is not
    exported and keeps its own exit code), and the runtime env that ships the payload."""
    command = shlex.join(
        [
            "python3",
            SCRIPT,
            "--checkpoint-dir",
            checkpoint_dir,
            "--target-dir",
            model_export_dir(experiment),
        ]
    )
    script = Path(export_model.__file__).read_bytes()
    env_vars = {**runtime_env.get("env_vars", {}), SHA_ENV: hashlib.sha256(script).hexdigest()}
    shipped = {
        **runtime_env,
        "working_dir": EXPORT_DIR,
        "excludes": ["__pycache__"],
        "env_vars": env_vars,
    }
    return f"{entrypoint} && {command}", shipped
