"""Names and small building blocks shared by several manifests."""

from __future__ import annotations

from typing import Any

from config.bucket_layout import DATA_MOUNT
from config.profiles import Mode
from config.settings import StackSettings

Manifest = dict[str, Any]

# The bucket is mounted at DATA_MOUNT (config/bucket_layout.py) in every pod that reads or writes
# training data: through the file-cached PV in the pods with a sized cache volume (the GPU
# workers), through the uncached one elsewhere (manifests/storage.py).
BUCKET_PV = "training-bucket-pv"
BUCKET_PVC = "training-bucket-pvc"
BUCKET_UNCACHED_PV = "training-bucket-uncached-pv"
BUCKET_UNCACHED_PVC = "training-bucket-uncached-pvc"
BUCKET_VOLUME = "training-bucket-vol"
# The Ray pods' checkpoint mount (CHECKPOINT_MOUNT, manifests/fuse_mounts.py).
CHECKPOINT_PV = "training-checkpoints-pv"
CHECKPOINT_PVC = "training-checkpoints-pvc"
HF_SECRET = "hf-secret"
# The key the data-prep Job reads (the April page's `hf_api_token` was a defect).
HF_SECRET_KEY = "hf_token"

# Pod annotation that makes GKE inject the Cloud Storage FUSE sidecar.
GCSFUSE_VOLUMES = "gke-gcsfuse/volumes"

PART_OF = "verl-gke"

NODE_POOL_LABEL = "cloud.google.com/gke-nodepool"
COMPUTE_CLASS_LABEL = "cloud.google.com/compute-class"
ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
# Autopilot's built-in class for CPU pods that need a chosen machine series (tutorial, data prep).
AUTOPILOT_CPU_CLASS = "Performance"


# checkov findings accepted for an object, as checkov's own skip annotations so the reason sits
# next to the object (docs/architecture.md, "checkov findings", lists them all).
def accepted_findings(findings: dict[str, str]) -> dict[str, str]:
    return {
        f"checkov.io/skip{index}": f"{check}={reason}"
        for index, (check, reason) in enumerate(sorted(findings.items()), start=1)
    }


DEFAULT_NAMESPACE_FINDING = {
    "CKV_K8S_21": "the tutorial's namespace; verl-gke:namespace moves the workload elsewhere"
}


def default_namespace_findings(settings: StackSettings) -> dict[str, str]:
    return DEFAULT_NAMESPACE_FINDING if settings.namespace == "default" else {}


def labels(component: str) -> dict[str, str]:
    return {"app.kubernetes.io/part-of": PART_OF, "app.kubernetes.io/component": component}


def metadata(
    name: str,
    component: str,
    namespace: str | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = labels(component)
    if annotations:
        meta["annotations"] = annotations
    return meta


def bucket_volume(*, file_cache: bool) -> dict[str, Any]:
    """The DATA_MOUNT volume: the file-cached claim only for a pod that declares a sized
    `gke-gcsfuse-cache` volume (manifests/fuse_mounts.py)."""
    claim = BUCKET_PVC if file_cache else BUCKET_UNCACHED_PVC
    return {"name": BUCKET_VOLUME, "persistentVolumeClaim": {"claimName": claim}}


def bucket_mount() -> dict[str, Any]:
    return {"name": BUCKET_VOLUME, "mountPath": DATA_MOUNT}


def cpu_node_selector(settings: StackSettings, cpu_pool_name: str | None) -> dict[str, str]:
    """Where CPU-only pods (data prep, x86 Ray head) run: the CPU pool, or on Autopilot the
    Performance class. Never the GPU nodes."""
    if settings.mode is Mode.AUTOPILOT:
        return {COMPUTE_CLASS_LABEL: AUTOPILOT_CPU_CLASS}
    if cpu_pool_name is None:
        raise ValueError("a GKE Standard cluster needs its CPU pool name to place CPU pods")
    return {NODE_POOL_LABEL: cpu_pool_name}


def no_privileges() -> dict[str, Any]:
    """A container security context for the images that run as root (verl's, data prep's): no
    privilege escalation and no capabilities (checkov CKV_K8S_20, 28, 37)."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def equal_requests_and_limits(resources: dict[str, str]) -> dict[str, dict[str, str]]:
    # Requests = limits: Guaranteed QoS, and Autopilot bills and sizes by requests.
    return {"requests": dict(resources), "limits": dict(resources)}
