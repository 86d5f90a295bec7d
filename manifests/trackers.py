"""Experiment trackers: the Weights & Biases key, from `verl-gke:wandbApiKey` to the Ray pods.

verl calls wandb.init in its TaskRunner actor, which Ray may place on any node, so the key must be
in the environment of every Ray container (head and workers; Ray's worker processes inherit it).
It goes there only through a Kubernetes Secret and `secretKeyRef`: never as a plain pod value and
never in the job's runtime_env, which the Jobs API returns to anyone who can read the dashboard.

Pure: no Pulumi, no I/O.
"""

from __future__ import annotations

from typing import Any

from config.settings import StackSettings
from manifests.common import (
    Manifest,
    accepted_findings,
    default_namespace_findings,
    metadata,
)

WANDB_SECRET = "wandb-secret"
WANDB_SECRET_KEY = "api_key"
WANDB_ENV = "WANDB_API_KEY"


def wandb_enabled(settings: StackSettings) -> bool:
    key = settings.wandb_api_key
    return key is not None and key.get_secret_value() != ""


def wandb_secret(settings: StackSettings) -> Manifest:
    """The Secret without its value; the component adds `stringData` as a Pulumi secret."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(
            WANDB_SECRET,
            "trackers",
            settings.namespace,
            annotations=accepted_findings(default_namespace_findings(settings)),
        ),
        "type": "Opaque",
    }


def wandb_env() -> dict[str, Any]:
    return {
        "name": WANDB_ENV,
        "valueFrom": {"secretKeyRef": {"name": WANDB_SECRET, "key": WANDB_SECRET_KEY}},
    }


def add_tracker_env(settings: StackSettings, container: dict[str, Any]) -> None:
    """Give a Ray container the W&B key when the stack has one (nothing otherwise)."""
    if wandb_enabled(settings):
        container.setdefault("env", []).append(wandb_env())
