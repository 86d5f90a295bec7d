"""The tutorial's data-preparation Job and the ConfigMap that carries its payload.

Two Jobs run payloads/data_prep/prepare_data.py on the CPU nodes, skipping every step that is
already complete. The inputs Job (`--part inputs`) clones verl at the stack's ref into
/data/verl-src/<stack> (not with verl-gke:verlSource=image), writes GSM8K to
/data/gsm8k/{train,test}.parquet (or converts / checks verl-gke:dataset), copies
verl-gke:reward's file next to it and downloads the model's files but its weights to
/data/model-files/<model dir>: all the rehearsal reads. The weights Job (`--part weights`,
components/model_weights.py) downloads the weights to /data/<model dir> after the rehearsal's
verdict, while the GPU nodes come up; the GRPO job waits for both.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from config import run_inputs
from config.bucket_layout import (
    DATA_MOUNT,
    DATA_PREP_HF_HOME,
    model_folder_name,
    verl_checkout_folder,
)
from config.image_streaming import through_registry
from config.profiles import Mode
from config.settings import StackSettings
from config.verl_source import VERL_REPO
from manifests.common import (
    GCSFUSE_VOLUMES,
    HF_SECRET,
    HF_SECRET_KEY,
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

JOB_NAME = "data-prep-job"
WEIGHTS_JOB_NAME = "model-download-job"
# prepare_data.py --part of each Job (its PARTS).
INPUTS, WEIGHTS = "inputs", "weights"
JOB_NAMES = {INPUTS: JOB_NAME, WEIGHTS: WEIGHTS_JOB_NAME}
# The payload's folder: every module in it is one key of the ConfigMap, mounted flat at
# SCRIPT_DIR, where the entry SCRIPT_KEY imports the others by plain name.
PAYLOAD_DIR = Path(__file__).resolve().parent.parent / "payloads" / "data_prep"
SCRIPT_KEY = "prepare_data.py"
SCRIPT_FILE = PAYLOAD_DIR / SCRIPT_KEY
# The package marker of payloads.data_prep; the flat folder in the pod needs none.
PACKAGE_MARKER = "__init__.py"
SCRIPT_DIR = "/scripts"
# The ConfigMap key of verl-gke:reward's file, next to the script.
REWARD_KEY = "reward.py"
# A failure must reach `pulumi up` quickly; the script resumes where a retry left off.
BACKOFF_LIMIT = 2

# Pod and GCS FUSE sidecar sizes per mode (the tutorial's data-prep scripts, latest).
_RESOURCES = {
    Mode.STANDARD: {"cpu": "4", "memory": "8Gi", "ephemeral-storage": "10Gi"},
    Mode.AUTOPILOT: {"cpu": "8", "memory": "16Gi", "ephemeral-storage": "50Gi"},
}
_SIDECAR_LIMITS = {
    Mode.STANDARD: {"cpu": "2", "memory": "4Gi", "ephemeral-storage": "20Gi"},
    Mode.AUTOPILOT: {"cpu": "4", "memory": "8Gi", "ephemeral-storage": "50Gi"},
}


# checkov findings the Job keeps, and why (docs/architecture.md, "checkov findings").
JOB_FINDINGS = {
    "CKV_K8S_15": "tag-pinned image; IfNotPresent avoids re-pulling a 10+ GB image per retry",
    "CKV_K8S_22": "tools in the verl image write caches under the home directory",
    "CKV_K8S_23": "the verl image runs as root and the GCS FUSE volume is mounted for root",
    "CKV_K8S_35": "huggingface_hub reads the token from the HF_TOKEN variable",
    "CKV_K8S_40": "the verl image runs as root and the GCS FUSE volume is mounted for root",
    "CKV_K8S_43": "pinned by tag (verl-gke:dataPrepImage accepts a @sha256 digest)",
}


class MissingScriptError(FileNotFoundError):
    pass


def read_scripts(folder: Path = PAYLOAD_DIR) -> dict[str, str]:
    """The ConfigMap's files: every module of the payload's folder, by file name."""
    if not (folder / SCRIPT_KEY).is_file():
        raise MissingScriptError(
            f"{folder / SCRIPT_KEY} is missing: the data-prep Job ships {folder}'s modules to the "
            f"cluster as a ConfigMap. Restore them from git (git checkout -- "
            f"{PAYLOAD_DIR.relative_to(PAYLOAD_DIR.parent.parent)})."
        )
    return {
        path.name: path.read_text()
        for path in sorted(folder.glob("*.py"))
        if path.name != PACKAGE_MARKER
    }


def script_configmap_name(scripts: dict[str, str], reward: str | None = None) -> str:
    # The name follows the content (every file's name and text), so a changed module or reward
    # file gives the Job a new spec and Pulumi replaces (re-runs) it; the script skips what is
    # already done.
    files = scripts if reward is None else {**scripts, REWARD_KEY: reward}
    content = "\0".join(f"{key}\0{files[key]}" for key in sorted(files))
    digest = hashlib.sha256(content.encode()).hexdigest()[:10]
    return f"data-prep-script-{digest}"


def _reward_source(settings: StackSettings) -> str | None:
    reward = run_inputs.reward_of(settings)
    return reward.source() if reward is not None else None


def _configmap_data(settings: StackSettings, scripts: dict[str, str]) -> dict[str, str]:
    reward = _reward_source(settings)
    return dict(scripts) if reward is None else {**scripts, REWARD_KEY: reward}


def script_configmap(settings: StackSettings, scripts: dict[str, str]) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(
            script_configmap_name(scripts, _reward_source(settings)),
            "data-prep",
            settings.namespace,
            annotations=accepted_findings(default_namespace_findings(settings)),
        ),
        "data": _configmap_data(settings, scripts),
    }


def command(settings: StackSettings, limits: DatasetLimits, part: str = INPUTS) -> list[str]:
    verl = ["--verl-repo", VERL_REPO, "--verl-ref", settings.verl_ref]
    verl += ["--verl-dir", verl_checkout_folder(settings.stack)]
    if settings.verl_source == "image":
        verl = ["--verl-from-image"]  # the image's own verl runs: no checkout
    return [
        "python3",
        f"{SCRIPT_DIR}/{SCRIPT_KEY}",
        "--data-root",
        DATA_MOUNT,
        "--part",
        part,
        *verl,
        "--model",
        settings.model,
        # The script cannot import the program: the bucket layout's owner names the folder.
        "--model-folder",
        model_folder_name(settings.model, settings.model_revision),
        *(["--model-revision", settings.model_revision] if settings.model_revision else []),
        *run_input_args(settings),
        *length_args(limits),
    ]


@dataclass(frozen=True)
class DatasetLimits:
    """The job's prompt limit and train batch that the script checks the dataset against
    (training/grpo_preflight.py dataset_limits takes them from the spec): it counts the prompts
    verl's filter will drop (data.filter_overlong_prompts, training/grpo_spec.FIXED_OVERRIDES) and
    refuses a dataset left smaller than one batch; a smaller batch it offers is a multiple of
    train_batch_step and at least min_train_batch, so it passes the batch rules."""

    max_prompt_length: int
    train_batch_size: int
    train_batch_step: int
    min_train_batch: int


def length_args(limits: DatasetLimits) -> list[str]:
    return [
        "--max-prompt-length",
        str(limits.max_prompt_length),
        "--train-batch-size",
        str(limits.train_batch_size),
        "--train-batch-step",
        str(limits.train_batch_step),
        "--min-train-batch",
        str(limits.min_train_batch),
    ]


def run_input_args(settings: StackSettings) -> list[str]:
    """The dataset and reward arguments of prepare_data.py; none for the tutorial's run."""
    dataset = run_inputs.dataset_of(settings)
    args: list[str] = []
    if dataset.kind == "hub":
        assert dataset.columns is not None
        args += ["--dataset", dataset.dataset, "--dataset-columns", dataset.columns.as_json()]
        args += ["--dataset-dir", dataset.folder]
    reward = run_inputs.reward_of(settings)
    if dataset.kind == "bucket":
        args += ["--check-dataset", dataset.folder]
        if reward is None:  # verl's built-in score must know every row's data_source
            args += ["--scored-sources", ",".join(run_inputs.VERL_SCORED_SOURCES)]
            args += ["--scored-prefixes", ",".join(run_inputs.VERL_SCORED_PREFIXES)]
    if reward is not None:
        args += ["--reward-file", f"{SCRIPT_DIR}/{REWARD_KEY}"]
        # The rehearsal loads it in the training image (manifests/rehearsal.py).
        args += ["--reward-dest", reward.mounted_path]
    return args


def data_prep_job(
    settings: StackSettings,
    limits: DatasetLimits,
    scripts: dict[str, str],
    cpu_pool_name: str | None,
    part: str = INPUTS,
) -> Manifest:
    """The body of the data-prep Job of `part` (INPUTS or WEIGHTS).

    Long because it is one declarative Kubernetes object; its parts are named constants above."""
    sidecar = _SIDECAR_LIMITS[settings.mode]
    pod_annotations = {
        GCSFUSE_VOLUMES: "true",
        "gke-gcsfuse/cpu-limit": sidecar["cpu"],
        "gke-gcsfuse/memory-limit": sidecar["memory"],
        "gke-gcsfuse/ephemeral-storage-limit": sidecar["ephemeral-storage"],
    }
    container = {
        "name": "prep-data",
        "image": settings.data_prep_image,
        "command": command(settings, limits, part),
        "env": [
            {
                "name": "HF_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": HF_SECRET, "key": HF_SECRET_KEY}},
            },
            {"name": "HF_HOME", "value": DATA_PREP_HF_HOME},
            # The tutorial's setting: plain HTTP downloads instead of the hf-xet client.
            {"name": "HF_HUB_DISABLE_XET", "value": "1"},
        ],
        "resources": equal_requests_and_limits(_RESOURCES[settings.mode]),
        # The script writes its failure reason there; the Job's status (and so `pulumi up`)
        # shows it, or the last log lines if the process died before writing it.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": no_privileges(),
        "volumeMounts": [
            bucket_mount(),
            {"name": "script", "mountPath": SCRIPT_DIR, "readOnly": True},
        ],
    }
    # Docker Hub images through the stack's Artifact Registry remote repository when streaming.
    job = _job(JOB_NAMES[part], settings, container, pod_annotations, scripts, cpu_pool_name)
    return through_registry(job, settings.image_pull)


def _job(
    name: str,
    settings: StackSettings,
    container: dict[str, Any],
    pod_annotations: dict[str, str],
    scripts: dict[str, str],
    cpu_pool_name: str | None,
) -> Manifest:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(
            name,
            "data-prep",
            settings.namespace,
            annotations=accepted_findings({**JOB_FINDINGS, **default_namespace_findings(settings)}),
        ),
        "spec": {
            "backoffLimit": BACKOFF_LIMIT,
            "template": {
                "metadata": {"labels": labels("data-prep"), "annotations": pod_annotations},
                "spec": {
                    "serviceAccountName": settings.ksa_name,
                    # Workload Identity and the GCS FUSE driver do not use the mounted token,
                    # and the script never calls the Kubernetes API.
                    "automountServiceAccountToken": False,
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    # A failed attempt's pod (and its log) stays for `kubectl logs`.
                    "restartPolicy": "Never",
                    "nodeSelector": cpu_node_selector(settings, cpu_pool_name),
                    "containers": [container],
                    # No cache volume, so the uncached PV: the data mount's file cache would
                    # sit in the webhook's unsized emptyDir (manifests/storage.py).
                    "volumes": [
                        bucket_volume(file_cache=False),
                        {
                            "name": "script",
                            "configMap": {
                                "name": script_configmap_name(scripts, _reward_source(settings))
                            },
                        },
                    ],
                },
            },
        },
    }


def ingress_policy(settings: StackSettings) -> Manifest:
    """Nothing connects to the data-prep pods (both Jobs'): deny all ingress (they only
    download)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(
            "data-prep-deny-ingress",
            "data-prep",
            settings.namespace,
            annotations=accepted_findings(default_namespace_findings(settings)),
        ),
        "spec": {"podSelector": {"matchLabels": labels("data-prep")}, "policyTypes": ["Ingress"]},
    }
