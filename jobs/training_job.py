"""The GRPO run a stack submits, built from its settings and checked before any resource exists."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from config.settings import StackSettings
from jobs.grpo_spec import (
    DATA_MOUNT,
    GrpoSpec,
    apply_overrides,
    default_grpo_spec,
    preflight,
    render_entrypoint,
    render_runtime_env,
)


@dataclass(frozen=True)
class TrainingJob:
    spec: GrpoSpec
    entrypoint: str
    runtime_env: dict[str, Any]
    # Where verl writes checkpoints, as seen from outside the cluster.
    checkpoint_url: str


def bucket_url(bucket: str, mounted_path: str) -> str:
    """gs:// URL of a path under the GCS FUSE mount (/data is the bucket's root)."""
    if mounted_path != DATA_MOUNT and not mounted_path.startswith(f"{DATA_MOUNT}/"):
        raise ValueError(f"{mounted_path!r} is not under the bucket mount {DATA_MOUNT}")
    return f"gs://{bucket}{mounted_path[len(DATA_MOUNT) :]}"


def training_job(settings: StackSettings) -> TrainingJob:
    """The tutorial's job for the stack with `verl-gke:job` overrides; raises GrpoPreflightError
    (naming each setting and a value that works) when verl would reject it or it cannot fit."""
    spec = default_grpo_spec(
        settings.profile,
        settings.mode,
        settings.gpu_nodes,
        model_dir=f"{DATA_MOUNT}/{settings.model_dir_name}",
    )
    spec = apply_overrides(spec, settings.job)
    preflight(
        spec,
        gpus_per_node_provisioned=settings.profile.gpus_per_node,
        gpu_nodes_provisioned=settings.gpu_nodes,
    )
    return TrainingJob(
        spec=spec,
        entrypoint=render_entrypoint(spec),
        runtime_env=render_runtime_env(spec, settings.profile, settings.mode),
        checkpoint_url=bucket_url(settings.bucket_name, spec.default_local_dir),
    )
