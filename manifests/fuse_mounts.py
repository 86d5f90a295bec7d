"""What a Ray pod needs for its GCS FUSE mounts: the read-mostly data mount
(file-cached on the GPU workers, uncached on the head), the checkpoint mount, the FUSE sidecar's
resources, a file-cache volume and a node-local copy of verl.

Pure: dicts only. manifests/storage.py owns the PersistentVolumes and their mount options.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from config.bucket_layout import (
    CHECKPOINT_MOUNT,
    CHECKPOINT_PREFIX,
    PREP_MARKERS,
    VERL_NODE_LOCAL,
    verl_checkout,
    verl_checkout_folder,
)
from config.profiles import Mode
from config.settings import StackSettings
from config.verl_source import VERL_REPO
from manifests.common import CHECKPOINT_PVC, GCSFUSE_VOLUMES, bucket_mount, bucket_volume
from payloads.data_prep.prep_verl import verl_inputs, verl_marker_name

CHECKPOINT_VOLUME = "training-checkpoints-vol"
VERL_LOCAL_VOLUME = "verl-node-local"
VERL_COPY_CONTAINER = "verl-node-local-copy"
# A pod volume of this name replaces the sidecar's own emptyDir as the file cache
# (gcs-fuse-csi-driver pkg/webhook/sidecar_spec.go SidecarContainerCacheVolumeName).
FILE_CACHE_VOLUME = "gke-gcsfuse-cache"
# On the node's ephemeral storage (local SSD on the Standard GPU pools,
# components/gpu_node_pool.py; tests/test_fuse_mounts.py checks it is inside the worker's own
# ephemeral-storage request). The webhook's default cache is bounded by the sidecar's 5Gi
# ephemeral limit (cmd/webhook/main.go), smaller than the model.
FILE_CACHE_VOLUME_GIB = 200
FILE_CACHE_SIZE = f"{FILE_CACHE_VOLUME_GIB}Gi"
# gcsfuse's file-cache:max-size-mb (MiB). The volume behind the cache must be larger than the cache
# (gcs-fuse-csi-driver docs/troubleshooting.md, "No space left on device for file cache"); an
# emptyDir over its sizeLimit gets the pod evicted. 90 % of the volume leaves room for gcsfuse's
# own files. A model of up to ~190 GB is cached whole (Qwen2.5-32B: 66 GB); beyond that gcsfuse
# evicts least-recently-read files, and a file larger than the cache is read uncached: slower
# loads, no failure. The model's size is not known before data prep downloads it.
FILE_CACHE_MAX_SIZE_MIB = FILE_CACHE_VOLUME_GIB * 1024 * 9 // 10

# The FUSE sidecar's resources on the GPU workers ("In most cases, unsatisfactory performance is
# caused by insufficient CPU or memory allocated to the sidecar": gcs-fuse-csi-driver
# docs/troubleshooting.md). "0" means no limit, allowed on Standard only; on Autopilot GPU nodes
# the sidecar may not exceed 2 vCPU and 14 GiB (same page, known issue). The cache has its own
# volume, so the sidecar's ephemeral storage only holds its logs and buffers.
SIDECAR_RESOURCES: dict[Mode, dict[str, str]] = {
    Mode.STANDARD: {
        "gke-gcsfuse/cpu-limit": "0",
        "gke-gcsfuse/memory-limit": "0",
        "gke-gcsfuse/ephemeral-storage-limit": "0",
    },
    Mode.AUTOPILOT: {
        "gke-gcsfuse/cpu-limit": "2",
        "gke-gcsfuse/memory-limit": "14Gi",
        "gke-gcsfuse/ephemeral-storage-limit": "10Gi",
    },
}


def checkpoint_volume() -> dict[str, Any]:
    return {"name": CHECKPOINT_VOLUME, "persistentVolumeClaim": {"claimName": CHECKPOINT_PVC}}


def checkpoint_mount() -> dict[str, Any]:
    return {"name": CHECKPOINT_VOLUME, "mountPath": CHECKPOINT_MOUNT}


def verl_prep_marker(repo: str, ref: str, stack: str) -> str:
    """Data prep's marker for the stack's verl checkout of `repo` at `ref` (payloads/
    data_prep/prep_common.py marker_path; its name carries the ref and folder, prep_verl.py
    verl_marker_name says why)."""
    return f"{PREP_MARKERS}/{verl_marker_name(repo, ref, verl_checkout_folder(stack))}.done"


# Exits 0 when data prep's verl marker has the inputs given as JSON (written by payloads/
# data_prep/prep_common.py write_marker), 1 otherwise (absent, unreadable, another ref or folder).
_MARKER_MATCHES = (
    "import json, sys\n"
    "try:\n"
    "    inputs = json.load(open(sys.argv[1])).get('inputs', {})\n"
    "except (OSError, ValueError):\n"
    "    sys.exit(1)\n"
    "sys.exit(0 if inputs == json.loads(sys.argv[2]) else 1)\n"
)


def verl_copy_script(repo: str, ref: str, stack: str) -> str:
    """Wait for data prep's verl marker for `repo` at `ref` (a name of that ref only, which the
    data mount looks up afresh until it exists), copy the checkout minus checkpoints and git
    history into the pod's emptyDir (verl v0.6.1: ~1,100 files, 8 MB; one pass through FUSE per
    pod), then read the marker again. Data prep removes it before it replaces the tree, but
    through the data mount the second read still finds a marker the first one found (gcsfuse
    keeps it in its metadata cache, the kernel its pages), so this last check catches a raced
    copy only where the mount shows the removal. Only pods of a RayCluster that a verlRef change
    replaces can race the new checkout, and Pulumi deletes that RayCluster before it creates
    the new one. The ref is in the pod template, so a new verlRef is a new spec.

    The extraction keeps the extracting user as owner (GNU tar --no-same-owner): as root, tar
    otherwise chowns every file to the archived owner, which needs CAP_CHOWN once that owner is
    not the extracting user, and the rehearsal Job's copy drops every capability. The archived
    owner is the mount's: the GCS FUSE sidecar passes gcsfuse uid=0 and gid=0 unless the volume's
    mount options set uid/gid (gcs-fuse-csi-driver pkg/sidecar_mounter/sidecar_mounter_config.go
    prepareMountArgs)."""
    skip = CHECKPOINT_PREFIX.removeprefix("verl/")
    marker = verl_prep_marker(repo, ref, stack)
    inputs = verl_inputs(repo, ref, verl_checkout_folder(stack))
    check = shlex.join(["python3", "-c", _MARKER_MATCHES, marker, json.dumps(inputs)])
    return (
        "set -euo pipefail\n"
        f"until {check}; do\n"
        f"  echo {shlex.quote(f'waiting for data prep: {marker} for {repo} at {ref}')}"
        "; sleep 10\n"
        "done\n"
        f"tar -C {shlex.quote(verl_checkout(stack))} --exclude=./{skip} --exclude=./.git -cf - ."
        f" | tar -C {shlex.quote(VERL_NODE_LOCAL)} --no-same-owner -xf -\n"
        f"if ! {check}; then\n"
        f"  echo {shlex.quote(f'{marker} changed during the copy: retrying')} >&2\n"
        "  exit 1\n"
        "fi\n"
        f"echo {shlex.quote(f'verl copied to {VERL_NODE_LOCAL}: {repo} at {ref}')}\n"
    )


def verl_copy_container(settings: StackSettings) -> dict[str, Any]:
    # The worker image: already on the node for the main container, and it has bash and tar.
    return {
        "name": VERL_COPY_CONTAINER,
        "image": settings.verl_image,
        "command": ["/bin/bash", "-c"],
        "args": [verl_copy_script(VERL_REPO, settings.verl_ref, settings.stack)],
        "volumeMounts": [
            {**bucket_mount(), "readOnly": True},
            {"name": VERL_LOCAL_VOLUME, "mountPath": VERL_NODE_LOCAL},
        ],
    }


def verl_copy_containers(settings: StackSettings) -> list[dict[str, Any]]:
    """The copy of the checkout, or none with verl-gke:verlSource=image: then the job imports the
    image's installed verl (no PYTHONPATH, training/assembly.py) and data prep makes no
    checkout whose marker the copy would wait for."""
    return [] if settings.verl_source == "image" else [verl_copy_container(settings)]


def ray_pod_mounts() -> list[dict[str, Any]]:
    """The main Ray container's mounts: data, checkpoints and verl's node-local copy."""
    return [
        bucket_mount(),
        checkpoint_mount(),
        {"name": VERL_LOCAL_VOLUME, "mountPath": VERL_NODE_LOCAL, "readOnly": True},
    ]


def ray_pod_volumes(*, file_cache: bool) -> list[dict[str, Any]]:
    """The data mount's file-cached PV comes with the sized cache volume, never without it."""
    volumes = [
        bucket_volume(file_cache=file_cache),
        checkpoint_volume(),
        {"name": VERL_LOCAL_VOLUME, "emptyDir": {}},
    ]
    if file_cache:
        volumes.append({"name": FILE_CACHE_VOLUME, "emptyDir": {"sizeLimit": FILE_CACHE_SIZE}})
    return volumes


def ray_pod_annotations(settings: StackSettings, *, sized_sidecar: bool) -> dict[str, str]:
    annotations = {GCSFUSE_VOLUMES: "true"}
    if sized_sidecar:
        annotations.update(SIDECAR_RESOURCES[settings.mode])
    return annotations
