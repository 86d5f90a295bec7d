"""The GPU node pool of a GKE Standard cluster, bound to the reservation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import assert_never

import pulumi
import pulumi_gcp as gcp

from components.gke_cluster import GkeCluster
from components.rdma_networks import RdmaNetworks
from config.capacity import CapacityPlan
from config.cluster_security import CLOUD_PLATFORM_SCOPE
from config.networking import NetworkingPlan, NodeNics
from config.settings import StackSettings

GPU_POOL_NAME = "gpu-pool"
# Turns on GKE's managed DRANET driver, which publishes the RDMA NICs as mrdma.google.com DRA
# devices; an "auto" accelerator network profile alone does not (GKE DRANET docs; Cluster
# Toolkit's enable_dranet sets the same label).
DRANET_DRIVER_LABEL = {"cloud.google.com/gke-networking-dra-driver": "true"}
# The provider's own default for every node-pool operation: 2 h (terraform-provider-google-beta
# resource_container_node_pool.go Timeouts, v7.45.0 through 8.0.0). A custom timeout replaces
# that default, so a shorter one would end `pulumi up` while GKE goes on creating the GPU nodes of
# a pool that is then outside the state; stated here so the plan shows how long `pulumi up` waits
# for the pool.
GPU_POOL_TIMEOUTS = pulumi.CustomTimeouts(create="120m", update="120m", delete="120m")
# GKE reports the local-SSD config of machines whose SSD count is fixed by the machine type in its
# own terms; Cluster Toolkit's gke-node-pool ignores changes to it for that reason. Any change
# to node_config replaces the pool, so a spurious diff here would recreate the GPU nodes.
IGNORED_POOL_CHANGES = ["nodeConfig.ephemeralStorageLocalSsdConfig"]


def upgrade_settings(
    reservation: str | None, flex_start: bool
) -> gcp.container.NodePoolUpgradeSettingsArgs | None:
    """How GKE replaces nodes when it does upgrade them (the cluster's maintenance exclusion
    stops automatic upgrades; manual ones and end-of-support ones still happen).

    None for flex-start pools: for nodes that use flex-start VMs GKE uses short-lived upgrades
    (GKE "Node pool upgrade strategies"; the API's NodePoolUpdateStrategy SHORT_LIVED, "the
    dedicated upgrade strategy for QueuedProvisioning and flex start node pools"), so surge
    settings would not apply; GKE chooses the strategy itself.

    The default surge upgrade first creates one extra node; a specific reservation has no spare
    machine, so the upgrade would stall. Reservation-bound pools replace one node at a time
    instead (Cluster Toolkit gke-node-pool's default: SURGE, max_surge 0, max_unavailable 1).
    """
    if flex_start:
        return None
    if reservation is None:
        return gcp.container.NodePoolUpgradeSettingsArgs(
            strategy="SURGE", max_surge=1, max_unavailable=0
        )
    return gcp.container.NodePoolUpgradeSettingsArgs(
        strategy="SURGE", max_surge=0, max_unavailable=1
    )


def reservation_affinity(
    reservation: str | None,
) -> gcp.container.NodePoolNodeConfigReservationAffinityArgs:
    if reservation is None:
        return gcp.container.NodePoolNodeConfigReservationAffinityArgs(
            consume_reservation_type="NO_RESERVATION"
        )
    return gcp.container.NodePoolNodeConfigReservationAffinityArgs(
        consume_reservation_type="SPECIFIC_RESERVATION",
        key="compute.googleapis.com/reservation-name",
        values=[reservation],
    )


@dataclass(frozen=True)
class PoolSize:
    """The pool's size arguments for a capacity mode (config/capacity.py)."""

    node_count: int | None
    initial_node_count: int | None
    autoscaling: gcp.container.NodePoolAutoscalingArgs | None
    queued_provisioning: gcp.container.NodePoolQueuedProvisioningArgs | None
    # Auto-repair recreates a broken node; flex-start pools must have it off (AI Hypercomputer
    # A4/A3U guide: --no-enable-autorepair; Cluster Toolkit gke-node-pool precondition).
    auto_repair: bool


def pool_size(plan: CapacityPlan, gpu_nodes: int) -> PoolSize:
    """Inside a reservation: exactly gpuNodes nodes, as the RayCluster asks for them. Outside
    one: autoscaled from 0 to gpuNodes, so no node is billed before the Ray workers need it and
    the nodes go when KubeRay's autoscaler removes the idle workers. `ANY` location policy: GKE's
    choice for flex-start and Spot (AI Hypercomputer A4/A3U guide: --location-policy=ANY), and
    "initial node count 0" is what scale-from-zero needs."""
    if plan.fixed_size:
        return PoolSize(gpu_nodes, None, None, None, auto_repair=True)
    autoscaling = gcp.container.NodePoolAutoscalingArgs(
        total_min_node_count=0, total_max_node_count=gpu_nodes, location_policy="ANY"
    )
    queued = (
        gcp.container.NodePoolQueuedProvisioningArgs(enabled=True)
        if plan.queued_provisioning
        else None
    )
    return PoolSize(None, 0, autoscaling, queued, auto_repair=not plan.flex_start)


@dataclass(frozen=True)
class GpuNodePoolArgs:
    settings: StackSettings
    cluster: GkeCluster
    rdma_networks: RdmaNetworks | None
    # What must succeed before the pool is created (the rehearsal, where GPU nodes bill from
    # their creation: config/capacity.py gpus_after_rehearsal).
    after: tuple[pulumi.Resource, ...] = ()


class GpuNodePool(pulumi.ComponentResource):
    node_pool: gcp.container.NodePool
    placement_policy: gcp.compute.ResourcePolicy | None

    def __init__(
        self, name: str, args: GpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        """Long because it is one NodePool's declarative argument list, each argument with the
        reason it has that value."""
        super().__init__("verl-gke:gpu_node_pool:GpuNodePool", name, None, opts)
        s = args.settings
        profile = s.profile
        size = pool_size(s.capacity_plan, s.gpu_nodes)

        self.placement_policy = None
        placement = None
        if profile.placement is not None and s.placement_policy_name is not None:
            # An existing workload policy (verl-gke:placementPolicy), e.g. the one the
            # reservation's sub-blocks are already bound to; GKE takes it by name.
            placement = gcp.container.NodePoolPlacementPolicyArgs(
                type="COMPACT", policy_name=s.placement_policy_name
            )
        elif profile.placement is not None:
            self.placement_policy = gcp.compute.ResourcePolicy(
                f"{name}-workload-policy",
                name=f"{s.cluster_name}-workload-policy",
                project=s.project,
                region=s.region,
                workload_policy=gcp.compute.ResourcePolicyWorkloadPolicyArgs(
                    type=profile.placement.type,
                    accelerator_topology=profile.placement.accelerator_topology,
                ),
                opts=pulumi.ResourceOptions(parent=self),
            )
            placement = gcp.container.NodePoolPlacementPolicyArgs(
                type="COMPACT", policy_name=self.placement_policy.name
            )

        self.node_pool = gcp.container.NodePool(
            f"{name}-pool",
            name=GPU_POOL_NAME,
            project=s.project,
            location=s.region,
            # Resolves only once GKE's version for the cluster is known to meet the floor.
            cluster=args.cluster.checked_name,
            node_locations=[s.zone],
            # Fixed inside a reservation, 0..gpuNodes outside one (pool_size).
            node_count=size.node_count,
            initial_node_count=size.initial_node_count,
            autoscaling=size.autoscaling,
            queued_provisioning=size.queued_provisioning,
            node_config=gcp.container.NodePoolNodeConfigArgs(
                machine_type=profile.machine_type,
                guest_accelerators=[
                    gcp.container.NodePoolNodeConfigGuestAcceleratorArgs(
                        type=profile.gpu_type,
                        count=profile.gpus_per_node,
                        gpu_driver_installation_config=gcp.container.NodePoolNodeConfigGuestAcceleratorGpuDriverInstallationConfigArgs(
                            gpu_driver_version=profile.gpu_driver_version
                        ),
                    )
                ],
                gvnic=gcp.container.NodePoolNodeConfigGvnicArgs(enabled=True),
                reservation_affinity=reservation_affinity(s.reservation),
                flex_start=True if s.capacity_plan.flex_start else None,
                spot=True if s.capacity_plan.spot else None,
                disk_type=profile.boot_disk_type,
                disk_size_gb=profile.boot_disk_size_gb,
                # Ephemeral storage (emptyDir, image layers, logs) on the machine's bundled local
                # SSDs: the workers ask for 500Gi (A4X) / 1000Gi (A4, A3 Ultra), which the 100 /
                # 200 GB boot disk can never hold (config/node_capacity.py).
                ephemeral_storage_local_ssd_config=gcp.container.NodePoolNodeConfigEphemeralStorageLocalSsdConfigArgs(
                    local_ssd_count=profile.machine.local_ssd_count
                ),
                # GPUDirect RDMA needs Container-Optimized OS.
                image_type="COS_CONTAINERD",
                # GKE Image streaming of the worker image (verl-gke:imageStreaming,
                # config/image_streaming.py); needs COS with containerd, as above. Explicit
                # when off too, so that turning the setting off turns streaming off.
                gcfs_config=gcp.container.NodePoolNodeConfigGcfsConfigArgs(
                    enabled=s.image_pull.pool_streaming
                ),
                workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(
                    mode="GKE_METADATA"
                ),
                # The nodes' own account and the scope GKE gives one (components/node_identity.py).
                service_account=args.cluster.node_service_account,
                oauth_scopes=[CLOUD_PLATFORM_SCOPE],
                labels=(
                    DRANET_DRIVER_LABEL
                    if s.networking.node_nics is NodeNics.ACCELERATOR_PROFILE
                    else None
                ),
            ),
            network_config=_network_config(s.networking, args.rdma_networks),
            placement_policy=placement,
            # In a release channel node auto-upgrade cannot be turned off per pool (GKE release
            # channels: only a "No minor or node upgrades" exclusion stops it); the cluster's
            # exclusion is what keeps GKE from upgrading these nodes under a running job.
            management=gcp.container.NodePoolManagementArgs(
                auto_repair=size.auto_repair, auto_upgrade=True
            ),
            upgrade_settings=upgrade_settings(s.reservation, s.capacity_plan.flex_start),
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=list(args.after),
                custom_timeouts=GPU_POOL_TIMEOUTS,
                ignore_changes=IGNORED_POOL_CHANGES,
            ),
        )
        self.register_outputs({"name": self.node_pool.name})


def _network_config(
    networking: NetworkingPlan, rdma: RdmaNetworks | None
) -> gcp.container.NodePoolNetworkConfigArgs:
    match networking.node_nics:
        case NodeNics.ACCELERATOR_PROFILE:
            # GKE creates the RDMA networks; the managed DRANET driver exposes the NICs as DRA
            # devices (mrdma.google.com).
            return gcp.container.NodePoolNetworkConfigArgs(accelerator_network_profile="auto")
        case NodeNics.ADDITIONAL_NETWORKS:
            return _additional_networks(networking, rdma)
        case NodeNics.GKE_MANAGED:
            raise ValueError(
                f"{networking.variant.value} GPU networking has no GPU node pool of ours: "
                "GKE Autopilot creates the GPU nodes"
            )
        case unknown:
            assert_never(unknown)


def _additional_networks(
    networking: NetworkingPlan, rdma: RdmaNetworks | None
) -> gcp.container.NodePoolNetworkConfigArgs:
    if rdma is None:
        raise ValueError(
            f"{networking.variant.value} GPU networking needs the RDMA networks component"
        )
    additional = [
        gcp.container.NodePoolNetworkConfigAdditionalNodeNetworkConfigArgs(
            network=rdma.gvnic_network.name, subnetwork=rdma.gvnic_subnet.name
        ),
        *(
            gcp.container.NodePoolNetworkConfigAdditionalNodeNetworkConfigArgs(
                network=rdma.rdma_network.name, subnetwork=subnet.name
            )
            for subnet in rdma.rdma_subnets
        ),
    ]
    return gcp.container.NodePoolNetworkConfigArgs(additional_node_network_configs=additional)
