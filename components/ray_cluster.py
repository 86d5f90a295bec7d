"""The RayCluster: head and GPU workers, ready when every worker pod is (Pulumi waits)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.gke_cluster import GkeCluster
from components.gpu_networking import GpuNetworking
from components.image_prepull import ImagePrepull
from components.image_registry import ImageRegistry
from components.kuberay_operator import KubeRayOperator
from components.nvidia_dra_driver import NvidiaDraDriver
from components.rdma_networks import RdmaNetworks
from components.run_telemetry import RunTelemetry
from components.storage import TrainingStorage
from components.workload_namespace import WorkloadNamespace
from config.capacity import ready_timeout_minutes
from config.settings import StackSettings
from manifests import ray_cluster as manifests


# The RayCluster is created while the GPU pool is still being built and becomes ready only once
# the GPU nodes exist and the verl image is pulled on them: verl-gke:capacityWaitMinutes (default
# 90, the GPU pool's create timeout) plus the start-up margin (config/capacity.py).
def ready_timeouts(settings: StackSettings) -> pulumi.CustomTimeouts:
    minutes = f"{ready_timeout_minutes(settings.capacity_wait_minutes)}m"
    return pulumi.CustomTimeouts(create=minutes, update=minutes)


# KubeRay's autoscaler (outside a reservation) writes the worker group's replica count and the
# workers it deletes into the spec; they are its to manage, not a change of the cluster.
AUTOSCALER_OWNED = [f"spec.workerGroupSpecs[0].{field}" for field in ("replicas", "scaleStrategy")]


@dataclass(frozen=True)
class RayClusterArgs:
    settings: StackSettings
    cluster: GkeCluster
    namespace: WorkloadNamespace
    operator: KubeRayOperator
    storage: TrainingStorage
    gpu_networking: GpuNetworking
    # A4X only: the ComputeDomain whose IMEX channel the workers claim.
    dra_driver: NvidiaDraDriver | None
    # A4/A3 Ultra Standard only: the networks the workers' interface annotations name.
    rdma_networks: RdmaNetworks | None
    # The head's log-forwarder config and, with a W&B key, the Secret the Ray pods read.
    telemetry: RunTelemetry
    # The image repository and its reader role, where the pods pull through it (image streaming).
    image_registry: ImageRegistry | None = None
    # The worker-image pre-puller (Standard, no image streaming): it must exist before the workers
    # are created, since on an autoscaled pool the workers are what brings the GPU nodes.
    prepull: ImagePrepull | None = None
    # What must succeed before the RayCluster is created (the rehearsal, where GPU nodes bill
    # from their creation: config/capacity.py gpus_after_rehearsal); its workers bring them.
    after: tuple[pulumi.Resource, ...] = ()


class RayCluster(pulumi.ComponentResource):
    cluster: k8s.apiextensions.CustomResource
    name: str
    head_service: str
    port_forward_command: str

    def __init__(
        self, name: str, args: RayClusterArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("verl-gke:ray_cluster:RayCluster", name, None, opts)
        s = args.settings
        layout = args.rdma_networks.layout if args.rdma_networks else None
        body = manifests.ray_cluster(s, args.cluster.cpu_pool_name, layout)
        depends_on: list[pulumi.Resource] = [
            args.namespace,
            args.operator,
            args.storage,
            args.gpu_networking,
            args.telemetry,
        ]
        if args.dra_driver is not None:
            depends_on.append(args.dra_driver)
        if args.image_registry is not None:
            depends_on.extend(args.image_registry.ready)
        if args.prepull is not None:
            depends_on.append(args.prepull)
        depends_on.extend(args.after)
        self.cluster = k8s.apiextensions.CustomResource(
            f"{name}-cluster",
            api_version=body["apiVersion"],
            kind=body["kind"],
            metadata=body["metadata"],
            spec=body["spec"],
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=args.cluster.provider,
                depends_on=depends_on,
                custom_timeouts=ready_timeouts(s),
                ignore_changes=AUTOSCALER_OWNED if s.capacity_plan.scale_to_zero else None,
                # KubeRay does not roll existing pods when the pod template changes: a changed
                # spec replaces the cluster (old one first: the name is fixed, GPUs are scarce).
                replace_on_changes=["spec"],
                delete_before_replace=True,
            ),
        )
        self.name = body["metadata"]["name"]
        self.head_service = manifests.head_service_name(s)
        self.port_forward_command = manifests.dashboard_port_forward_command(s)
        self.register_outputs({"name": self.name, "headService": self.head_service})
