"""The RayCluster per profile and mode: the seed's ray-cluster-a4x.yaml (A4X), the tutorial's
ray-cluster-auto-dranet.yaml (A4/A3 Ultra Autopilot) and ray-cluster-standard.yaml (Standard).

Fixes of the tutorial's manifests: nodeSelector values are strings, unused hostPath volumes
(`/lib64`, `/sys`, `/proc/sys`) are gone, the x86 Standard init container that `pip install -e`d
verl into its own (discarded) filesystem is gone (jobs import verl from a node-local copy of the
checkout, manifests/fuse_mounts.py), and
the Autopilot head is not a Spot VM (a preempted head ends the training run).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any, assert_never

from config.image_streaming import through_registry
from config.networking import PodNics
from config.profiles import Mode
from config.settings import StackSettings
from manifests import (
    capacity,
    dra_driver,
    dranet,
    fuse_mounts,
    log_forwarding,
    network_mapping,
    trackers,
)
from manifests.common import (
    ACCELERATOR_LABEL,
    Manifest,
    cpu_node_selector,
    equal_requests_and_limits,
    metadata,
)
from manifests.nccl_installer import HOST_GIB_DIR, HOST_NVIDIA_DIR, wait_for_plugin_script
from manifests.rdma_layout import RdmaLayout

API_VERSION = "ray.io/v1"
WORKER_GROUP = "gpu-group"
HEAD_CONTAINER = "ray-head"
WORKER_CONTAINER = "ray-worker"
DASHBOARD_PORT = 8265
# KubeRay 1.7 sets status.state to "ready" once the head and every worker pod are ready
# (crds/ray.io_rayclusters.yaml); Pulumi waits for it.
WAIT_FOR_READY = "jsonpath={.status.state}=ready"
WAIT_FOR_ANNOTATION = "pulumi.com/waitFor"
NVIDIA_LIB_DIR = "/usr/local/nvidia/lib64"
GIB_DIR = "/usr/local/gib"
IMEX_CLAIM = "compute-domain-channel"
# ray-cluster-auto-dranet.yaml: the Autopilot workers install the gIB plugin and NCCL configs from
# Google's apt repository into a volume the worker container reads.
GIB_APT_INSTALL = (
    "set -euo pipefail\n"
    'echo "Installing gIB plugins..."\n'
    "curl -fsSL https://packages.cloud.google.com/apt/doc/apt-key.gpg"
    " | gpg --dearmor -o /etc/apt/trusted.gpg.d/cloud.google.gpg\n"
    "echo 'deb https://packages.cloud.google.com/apt gpudirect-gib-apt main'"
    " > /etc/apt/sources.list.d/nccl-gib.list\n"
    "apt-get update && apt-get install -y nccl-gib-plugins\n"
)


def head_service_name(settings: StackSettings) -> str:
    """The Service KubeRay creates for the head: `<cluster>-head-svc`."""
    return f"{settings.profile.ray_cluster_name}-head-svc"


def dashboard_port_forward_command(settings: StackSettings) -> str:
    return (
        f"kubectl port-forward -n {settings.namespace} svc/{head_service_name(settings)} "
        f"{DASHBOARD_PORT}:{DASHBOARD_PORT}"
    )


@dataclass
class WorkerNetworking:
    """What a GPU worker pod needs to reach its RDMA NICs and the gIB NCCL plugin."""

    node_selector: dict[str, str]
    ld_library_path: str
    annotations: dict[str, str] = field(default_factory=dict)
    volumes: list[dict[str, Any]] = field(default_factory=list)
    mounts: list[dict[str, Any]] = field(default_factory=list)
    init_containers: list[dict[str, Any]] = field(default_factory=list)
    resource_claims: list[dict[str, str]] = field(default_factory=list)


def _host_gib_and_nvidia() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    # The NCCL installer DaemonSet put the gIB plugin here; the GPU driver lives beside it.
    volumes = [
        {"name": "gib", "hostPath": {"path": HOST_GIB_DIR}},
        {"name": "nvidia", "hostPath": {"path": HOST_NVIDIA_DIR}},
    ]
    mounts = [
        {"name": "nvidia", "mountPath": "/usr/local/nvidia", "readOnly": True},
        {"name": "gib", "mountPath": GIB_DIR, "readOnly": True},
    ]
    return volumes, mounts


def _wait_for_gib(settings: StackSettings) -> dict[str, Any]:
    # Nobody awaits the installer DaemonSet (manifests/nccl_installer.py SKIP_AWAIT): each worker
    # waits for it on its own node.
    return {
        "name": "wait-for-nccl-installer",
        "image": settings.verl_image,
        "command": ["/bin/bash", "-c"],
        "args": [wait_for_plugin_script(GIB_DIR)],
        "volumeMounts": [{"name": "gib", "mountPath": GIB_DIR, "readOnly": True}],
    }


def _multi_nic(settings: StackSettings, layout: RdmaLayout | None) -> WorkerNetworking:
    if layout is None:
        raise ValueError("multi-NIC GPU networking needs the RDMA network layout")
    volumes, mounts = _host_gib_and_nvidia()
    return WorkerNetworking(
        node_selector={ACCELERATOR_LABEL: settings.profile.gpu_type},
        ld_library_path=NVIDIA_LIB_DIR,
        annotations=network_mapping.pod_interface_annotations(layout),
        volumes=volumes,
        mounts=mounts,
        init_containers=[_wait_for_gib(settings)],
    )


def _dranet_compute_class(settings: StackSettings) -> WorkerNetworking:
    return WorkerNetworking(
        node_selector={"cloud.google.com/compute-class": dranet.compute_class_name(settings)},
        ld_library_path=f"{NVIDIA_LIB_DIR}:{GIB_DIR}/lib64",
        volumes=[{"name": "gib", "emptyDir": {}}],
        mounts=[{"name": "gib", "mountPath": GIB_DIR, "readOnly": True}],
        init_containers=[
            {
                "name": "gib-setup",
                "image": settings.verl_image,
                "command": ["/bin/bash", "-c"],
                "args": [GIB_APT_INSTALL],
                "volumeMounts": [{"name": "gib", "mountPath": GIB_DIR}],
            }
        ],
        resource_claims=[
            {"name": "rdma-claim", "resourceClaimTemplateName": dranet.ALL_MRDMA_CLAIM_TEMPLATE}
        ],
    )


def _dranet_node_pool(settings: StackSettings) -> WorkerNetworking:
    volumes, mounts = _host_gib_and_nvidia()
    # One claim per NIC of the node (seed: rdma-nic-0..3 for the four A4X NICs).
    claims = [
        {"name": f"rdma-nic-{index}", "resourceClaimTemplateName": dranet.RDMA_NIC_CLAIM_TEMPLATE}
        for index in range(settings.profile.rdma_nics_per_node)
    ]
    return WorkerNetworking(
        node_selector={ACCELERATOR_LABEL: settings.profile.gpu_type},
        ld_library_path=NVIDIA_LIB_DIR,
        volumes=volumes,
        mounts=mounts,
        init_containers=[_wait_for_gib(settings)],
        resource_claims=claims,
    )


def worker_networking(settings: StackSettings, layout: RdmaLayout | None) -> WorkerNetworking:
    match settings.networking.pod_nics:
        case PodNics.NETWORK_MAPPING:
            networking = _multi_nic(settings, layout)
        case PodNics.ALL_NICS_CLAIM:
            networking = _dranet_compute_class(settings)
        case PodNics.PER_NIC_CLAIMS:
            networking = _dranet_node_pool(settings)
        case unknown:
            assert_never(unknown)
    if settings.profile.multi_node_nvlink:
        # The IMEX channel of the ComputeDomain: NVLink between nodes.
        networking.resource_claims.append(
            {"name": IMEX_CLAIM, "resourceClaimTemplateName": dra_driver.COMPUTE_DOMAIN_CHANNEL}
        )
    return networking


def _post_start(settings: StackSettings) -> dict[str, Any]:
    packages = settings.profile.ray_container_pip_packages
    if not packages:
        return {}
    install = f"pip3 install --quiet {shlex.join(packages)}"
    return {"lifecycle": {"postStart": {"exec": {"command": ["/bin/bash", "-c", install]}}}}


def _head_node_selector(settings: StackSettings, cpu_pool_name: str | None) -> dict[str, str]:
    selector = cpu_node_selector(settings, cpu_pool_name)
    if settings.mode is Mode.AUTOPILOT:
        # The tutorial's machine series for the Autopilot head.
        selector["cloud.google.com/machine-family"] = "c2"
    return selector


def _upgrade_strategy(settings: StackSettings) -> dict[str, Any]:
    """A change of the spec from `pulumi up` (verlRef in the verl copy's script, the image, any
    pod setting) replaces the whole RayCluster, and the job with it (components/ray_cluster.py
    replace_on_changes, components/grpo_training.py replace_with). Recreate covers a spec changed
    in the cluster by other means: KubeRay deletes every pod when the spec's hash changes
    (raycluster_controller.go shouldRecreatePodsForUpgrade, KubeRay v1.7.0; the hash leaves out
    replicas, tolerations and scheduling gates, so the autoscaler's scaling recreates nothing);
    config/verl_source.py refuses an operator older than 1.6.0, which lacks the field.
    Not on Standard flex-start: there the runner itself points the worker template's
    consume-provisioning-request annotation at a new request to get nodes again
    (payloads/export/provreq.py), and the hash covers the templates' metadata
    (utils/util.go GenerateHashWithoutReplicasAndWorkersToDelete), so Recreate would delete every
    pod, the head and the running job with it."""
    if settings.capacity_plan.queued_provisioning:
        return {}
    return {"upgradeStrategy": {"type": "Recreate"}}


def _head_group(settings: StackSettings, cpu_pool_name: str | None) -> dict[str, Any]:
    profile = settings.profile
    start_params = {"dashboard-host": "0.0.0.0"}
    pod_spec: dict[str, Any] = {"serviceAccountName": settings.ksa_name}
    if profile.ray_head_on_gpu_nodes:
        # The image does not run on the CPU pool: the head shares a GPU node with a worker,
        # asks for no GPU and takes no Ray tasks.
        start_params["num-cpus"] = "0"
        pod_spec["nodeSelector"] = {ACCELERATOR_LABEL: profile.gpu_type}
        pod_spec["tolerations"] = [t.manifest() for t in profile.gpu_tolerations]
    else:
        pod_spec["nodeSelector"] = _head_node_selector(settings, cpu_pool_name)
    head = profile.ray_head
    pod_spec["containers"] = [
        {
            "name": HEAD_CONTAINER,
            "image": settings.verl_image,
            **_post_start(settings),
            "ports": [
                {"containerPort": 6379, "name": "gcs-server"},
                {"containerPort": DASHBOARD_PORT, "name": "dashboard"},
                {"containerPort": 10001, "name": "client"},
            ],
            "resources": equal_requests_and_limits(
                {
                    "cpu": head.cpu,
                    "memory": head.memory,
                    "ephemeral-storage": head.ephemeral_storage,
                }
            ),
            "volumeMounts": [
                {"mountPath": "/tmp/ray", "name": "ray-logs"},
                *fuse_mounts.ray_pod_mounts(),
            ],
        }
    ]
    # The driver imports verl too: the head gets its node-local copy (it loads no model, so no
    # file cache and the sidecar's default resources).
    pod_spec["initContainers"] = fuse_mounts.verl_copy_containers(settings)
    pod_spec["volumes"] = [
        {"name": "ray-logs", "emptyDir": {}},
        *fuse_mounts.ray_pod_volumes(file_cache=False),
    ]
    # Ray's logs outlive the pod (manifests/log_forwarding.py); the W&B key from its Secret.
    pod_spec["containers"].append(log_forwarding.sidecar())
    pod_spec["volumes"].extend(log_forwarding.volumes())
    trackers.add_tracker_env(settings, pod_spec["containers"][0])
    return {
        "rayStartParams": start_params,
        "template": {
            "metadata": {
                "annotations": fuse_mounts.ray_pod_annotations(settings, sized_sidecar=False)
            },
            "spec": pod_spec,
        },
    }


def _worker_group(settings: StackSettings, networking: WorkerNetworking) -> dict[str, Any]:
    """The GPU worker group of the RayCluster.

    Long because it is one declarative pod template; the per-variant parts come from
    worker_networking."""
    profile = settings.profile
    shape = profile.ray_workers[settings.mode]
    resources = equal_requests_and_limits(
        {
            "cpu": shape.cpu,
            "memory": shape.memory,
            "nvidia.com/gpu": str(profile.gpus_per_node),
            "ephemeral-storage": shape.ephemeral_storage,
        }
    )
    if networking.resource_claims:
        resources["claims"] = [{"name": claim["name"]} for claim in networking.resource_claims]
    container: dict[str, Any] = {
        "name": WORKER_CONTAINER,
        "image": settings.verl_image,
        **_post_start(settings),
        "env": [{"name": "LD_LIBRARY_PATH", "value": networking.ld_library_path}],
        "resources": resources,
        "volumeMounts": [
            *networking.mounts,
            {"name": "shared-memory", "mountPath": "/dev/shm"},
            {"name": "ray-tmp-storage", "mountPath": "/tmp"},
            *fuse_mounts.ray_pod_mounts(),
        ],
    }
    trackers.add_tracker_env(settings, container)
    pod_spec: dict[str, Any] = {
        "serviceAccountName": settings.ksa_name,
        "nodeSelector": networking.node_selector,
        # One worker per GPU node.
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"ray.io/group": WORKER_GROUP}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        },
        "tolerations": [t.manifest() for t in profile.gpu_tolerations],
    }
    pod_spec["initContainers"] = [
        *networking.init_containers,
        *fuse_mounts.verl_copy_containers(settings),
    ]
    pod_spec["containers"] = [container]
    pod_spec["volumes"] = [
        *networking.volumes,
        {
            "name": "shared-memory",
            "emptyDir": {"medium": "Memory", "sizeLimit": shape.shared_memory},
        },
        {"name": "ray-tmp-storage", "emptyDir": {}},
        *fuse_mounts.ray_pod_volumes(file_cache=True),
    ]
    if networking.resource_claims:
        pod_spec["resourceClaims"] = networking.resource_claims
    return {
        "groupName": WORKER_GROUP,
        **capacity.worker_replicas(settings),
        "rayStartParams": {"num-cpus": shape.ray_num_cpus},
        "template": {
            "metadata": {
                "annotations": {
                    **fuse_mounts.ray_pod_annotations(settings, sized_sidecar=True),
                    **networking.annotations,
                }
            },
            "spec": pod_spec,
        },
    }


def ray_cluster(
    settings: StackSettings, cpu_pool_name: str | None, layout: RdmaLayout | None
) -> Manifest:
    networking = worker_networking(settings, layout)
    # Docker Hub images through the stack's Artifact Registry remote repository when streaming.
    return through_registry(
        _ray_cluster_body(settings, cpu_pool_name, networking), settings.image_pull
    )


def _ray_cluster_body(
    settings: StackSettings, cpu_pool_name: str | None, networking: WorkerNetworking
) -> Manifest:
    return {
        "apiVersion": API_VERSION,
        "kind": "RayCluster",
        "metadata": metadata(
            settings.profile.ray_cluster_name,
            "ray-cluster",
            settings.namespace,
            annotations={WAIT_FOR_ANNOTATION: WAIT_FOR_READY},
        ),
        # Outside a reservation: autoscaled workers, all nodes or none (manifests/capacity.py).
        "spec": capacity.with_capacity(
            settings,
            {
                "rayVersion": settings.ray_version,
                **_upgrade_strategy(settings),
                "headGroupSpec": _head_group(settings, cpu_pool_name),
                "workerGroupSpecs": [_worker_group(settings, networking)],
            },
            WORKER_GROUP,
        ),
    }
