"""The rehearsal Job: verl's own code, in the training image, on the job's exact Hydra overrides,
after data prep's inputs Job (not its weights Job) and before any GPU trains. The ConfigMap
carries verl_scripts/rehearsal.py, the modules of its steps (verl_scripts/rehearsal_*.py) and its
wrapper payloads/rehearse.py, mounted flat at /scripts.

The pod runs where the Ray head runs: the CPU pool (Autopilot: the Performance class), or on A4X,
whose arm64-only image the x86 CPU pool cannot run, a GPU node without GPUs (as the head,
manifests/ray_cluster.py; A4X is reservation-bound only, so that node is billed anyway). It gets
verl as the Ray pods get it (manifests/fuse_mounts.py): with verl-gke:verlSource=checkout the
same init container copies data prep's checkout of verlRef to a node-local folder on
PYTHONPATH; with verlSource=image the image's installed verl runs.
"""

from __future__ import annotations

import json
from typing import Any

from config.bucket_layout import VERL_NODE_LOCAL, model_files_path
from config.image_streaming import through_registry
from config.rehearsal_scripts import (  # the files it ships and their digest
    SCRIPT_KEY,
    WRAPPER_KEY,
    scripts_digest,
)
from config.settings import StackSettings
from manifests import fuse_mounts
from manifests.common import (
    ACCELERATOR_LABEL,
    GCSFUSE_VOLUMES,
    Manifest,
    accepted_findings,
    bucket_mount,
    bucket_volume,
    cpu_node_selector,
    default_namespace_findings,
    equal_requests_and_limits,
    labels,
    metadata,
    no_privileges,
)

JOB_NAME = "rehearsal-job"
COMPONENT = "rehearsal"
SCRIPT_DIR = "/scripts"
# The wrapper exits 0 once the record is written (ok or not; jobs/rehearsal_verdict.py judges
# it), so a failed pod is a rehearsal that wrote none (a pod killed, the mount not ready): retried.
BACKOFF_LIMIT = 2
# How long the Job may be active, from its start (its pods' image pulls, the verl copy's wait for
# data prep's marker and the rehearsal included): `pulumi up` waits this long for it
# (components/rehearsal.py), and past it Kubernetes terminates its pods and fails the Job
# (batch/v1 JobSpec.activeDeadlineSeconds, reason DeadlineExceeded), so a pod stuck waiting
# holds no CPU node after `pulumi up` has given up on it.
ACTIVE_DEADLINE_S = 45 * 60
# Hugging Face caches of the pod: it reads the model from the bucket and downloads nothing.
HF_HOME = "/tmp/huggingface"

# The tokenizer over every row (RLHFDataset's overlong-prompt filter) and verl's imports: a few
# GiB (est.), with room for larger datasets; one size on Standard and Autopilot.
_RESOURCES = {"cpu": "4", "memory": "16Gi", "ephemeral-storage": "10Gi"}
# The verl copy: a `cp -a` of a checkout of some tens of MB into an emptyDir.
_COPY_RESOURCES = {"cpu": "1", "memory": "1Gi"}
# The GCS FUSE sidecar reads the parquet and the tokenizer files only (the weights are not read).
_SIDECAR_LIMITS = {"cpu": "2", "memory": "4Gi", "ephemeral-storage": "5Gi"}

# checkov findings the Job keeps, and why (docs/architecture.md, "checkov findings").
JOB_FINDINGS = {
    "CKV_K8S_15": "tag-pinned image; IfNotPresent uses the training image already on the node",
    "CKV_K8S_22": "verl, vLLM and transformers write caches under the home directory",
    "CKV_K8S_23": "the verl image runs as root and the GCS FUSE volume is mounted for root",
    "CKV_K8S_40": "the verl image runs as root and the GCS FUSE volume is mounted for root",
    "CKV_K8S_43": "pinned by tag (verl-gke:verlImage accepts a @sha256 digest)",
}


def configmap_name(files: dict[str, str]) -> str:
    """Named after its content: a changed script is a new Job spec, so Pulumi re-runs it."""
    return f"rehearsal-script-{scripts_digest(files)}"


def script_configmap(settings: StackSettings, files: dict[str, str]) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(
            configmap_name(files),
            COMPONENT,
            settings.namespace,
            annotations=accepted_findings(default_namespace_findings(settings)),
        ),
        "data": dict(files),
    }


def command(
    record: str, overrides: tuple[str, ...], context: dict[str, Any], model_files: str
) -> list[str]:
    """`python3 rehearse.py --script rehearsal.py --out <record> --context <JSON> --model-files
    <folder> -- <overrides>`: the context (training/rehearsal_context.py) makes a problem name
    the stack setting and a `pulumi config` fix instead of the Hydra key; the model's files but
    its weights (data prep's inputs Job) stand in for the model folder, whose weights are still
    downloading."""
    return [
        "python3",
        f"{SCRIPT_DIR}/{WRAPPER_KEY}",
        "--script",
        f"{SCRIPT_DIR}/{SCRIPT_KEY}",
        "--out",
        record,
        "--context",
        json.dumps(context, sort_keys=True),
        "--model-files",
        model_files,
        "--",
        *overrides,
    ]


def _placement(settings: StackSettings, cpu_pool_name: str | None) -> dict[str, Any]:
    """Where the Ray head runs (manifests/ray_cluster.py _head_group)."""
    profile = settings.profile
    if profile.ray_head_on_gpu_nodes:
        return {
            "nodeSelector": {ACCELERATOR_LABEL: profile.gpu_type},
            "tolerations": [t.manifest() for t in profile.gpu_tolerations],
        }
    return {"nodeSelector": cpu_node_selector(settings, cpu_pool_name)}


def _env(settings: StackSettings) -> list[dict[str, str]]:
    env = [
        {"name": "HF_HOME", "value": HF_HOME},
        # Every file is in the bucket: a Hub lookup would only hide a missing download.
        {"name": "HF_HUB_OFFLINE", "value": "1"},
    ]
    if settings.verl_source != "image":
        # The Ray pods import the same node-local copy (training/grpo_spec.py PYTHONPATH).
        env.append({"name": "PYTHONPATH", "value": VERL_NODE_LOCAL})
    return env


def rehearsal_job(
    settings: StackSettings,
    record: str,
    overrides: tuple[str, ...],
    files: dict[str, str],
    cpu_pool_name: str | None,
    *,
    context: dict[str, Any],
) -> Manifest:
    """The rehearsal Job's body.

    Long because it is one declarative Kubernetes object; its parts are named constants above."""
    sidecar = _SIDECAR_LIMITS
    mounts = [
        bucket_mount(),
        # Read only: a trainer.resume_from_path there is checked before the GPUs load it.
        {**fuse_mounts.checkpoint_mount(), "readOnly": True},
        {"name": "scripts", "mountPath": SCRIPT_DIR, "readOnly": True},
    ]
    volumes: list[dict[str, Any]] = [
        # Uncached, as the data-prep Job's: the pod has no sized file-cache volume.
        bucket_volume(file_cache=False),
        fuse_mounts.checkpoint_volume(),
        {"name": "scripts", "configMap": {"name": configmap_name(files)}},
        {"name": "tmp", "emptyDir": {}},
    ]
    # The copy of verl's checkout, sized and hardened as the Job's own container (checkov reads
    # a Job's init containers: CKV_K8S_10-13, 20, 28, 30, 37).
    init = [
        {
            **copy,
            "resources": equal_requests_and_limits(_COPY_RESOURCES),
            "securityContext": no_privileges(),
        }
        for copy in fuse_mounts.verl_copy_containers(settings)
    ]
    if init:
        mounts.append(
            {"name": fuse_mounts.VERL_LOCAL_VOLUME, "mountPath": VERL_NODE_LOCAL, "readOnly": True}
        )
        volumes.append({"name": fuse_mounts.VERL_LOCAL_VOLUME, "emptyDir": {}})
    container = {
        "name": "rehearsal",
        # The training image: its own verl, vLLM and transformers answer (not the data-prep
        # image's).
        "image": settings.verl_image,
        "command": command(
            record, overrides, context, model_files_path(settings.model, settings.model_revision)
        ),
        "env": _env(settings),
        "resources": equal_requests_and_limits(_RESOURCES),
        # payloads/rehearse.py writes the problems there; `kubectl describe` and the Job show it.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": no_privileges(),
        "volumeMounts": [*mounts, {"name": "tmp", "mountPath": "/tmp"}],
    }
    pod_spec: dict[str, Any] = {
        "serviceAccountName": settings.ksa_name,
        # Workload Identity and the GCS FUSE driver do not use the mounted token, and the
        # rehearsal never calls the Kubernetes API.
        "automountServiceAccountToken": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        # A failed pod (and its log) stays for `kubectl logs`.
        "restartPolicy": "Never",
        **_placement(settings, cpu_pool_name),
        **({"initContainers": init} if init else {}),
        "containers": [container],
        "volumes": volumes,
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(
            JOB_NAME,
            COMPONENT,
            settings.namespace,
            annotations=accepted_findings({**JOB_FINDINGS, **default_namespace_findings(settings)}),
        ),
        "spec": {
            "backoffLimit": BACKOFF_LIMIT,
            "activeDeadlineSeconds": ACTIVE_DEADLINE_S,
            "template": {
                "metadata": {
                    "labels": labels(COMPONENT),
                    "annotations": {
                        GCSFUSE_VOLUMES: "true",
                        "gke-gcsfuse/cpu-limit": sidecar["cpu"],
                        "gke-gcsfuse/memory-limit": sidecar["memory"],
                        "gke-gcsfuse/ephemeral-storage-limit": sidecar["ephemeral-storage"],
                    },
                },
                "spec": pod_spec,
            },
        },
    }
    # Docker Hub images through the stack's Artifact Registry remote repository when streaming.
    return through_registry(job, settings.image_pull)


def ingress_policy(settings: StackSettings) -> Manifest:
    """Nothing connects to the rehearsal pod: deny all ingress."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(
            "rehearsal-deny-ingress",
            COMPONENT,
            settings.namespace,
            annotations=accepted_findings(default_namespace_findings(settings)),
        ),
        "spec": {"podSelector": {"matchLabels": labels(COMPONENT)}, "policyTypes": ["Ingress"]},
    }
