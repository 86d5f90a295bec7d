"""What each GPU-networking variant needs, decided in one exhaustive match.

The variant (config/profiles.py, per profile and mode) decides whether we create RDMA VPCs, how
the GPU nodes get their NICs and how the Ray workers reach them. Components and manifests read
the NetworkingPlan's fields and match on them with `assert_never` in the default arm; none of them
compares variants itself. A new GpuNetworking member therefore fails here, before any resource,
until its plan is written down (the type checker flags the default arm; at run time it raises).

Pure: no Pulumi, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import assert_never

from config.profiles import GpuNetworking


class NodeNics(StrEnum):
    """How the GPU nodes get their RDMA NICs."""

    # A Standard node pool with 1 gVNIC + one RDMA additional node network per NIC, on the VPCs
    # we create (the tutorial's Standard networks).
    ADDITIONAL_NETWORKS = "additional-networks"
    # A Standard node pool with `accelerator_network_profile="auto"` and GKE's managed DRANET
    # driver: GKE creates the networks, the NICs become DRA devices (seed, A4X).
    ACCELERATOR_PROFILE = "accelerator-profile"
    # Autopilot: GKE creates the nodes (and their networks) from our ComputeClass.
    GKE_MANAGED = "gke-managed"


class PodNics(StrEnum):
    """How a Ray worker pod gets its RDMA NICs."""

    # GKENetworkParamSet/Network objects and pod interface annotations (network-mapping.yaml).
    NETWORK_MAPPING = "network-mapping"
    # A ComputeClass plus one claim for all NICs (ResourceClaimTemplate all-mrdma, DRANET).
    ALL_NICS_CLAIM = "all-nics-claim"
    # One claim per NIC from the ResourceClaimTemplate rdma-nic (seed: rdma-nic-0..3).
    PER_NIC_CLAIMS = "per-nic-claims"


@dataclass(frozen=True)
class NetworkingPlan:
    variant: GpuNetworking
    # Our gVNIC + RoCE VPCs (components/rdma_networks.py) and GKE multi-networking on the cluster.
    rdma_vpcs: bool
    node_nics: NodeNics
    pod_nics: PodNics


def networking_plan(variant: GpuNetworking) -> NetworkingPlan:
    """The one dispatch on the GPU-networking variant."""
    match variant:
        case GpuNetworking.MULTI_NIC:
            return NetworkingPlan(
                variant,
                rdma_vpcs=True,
                node_nics=NodeNics.ADDITIONAL_NETWORKS,
                pod_nics=PodNics.NETWORK_MAPPING,
            )
        case GpuNetworking.DRANET_NODE_POOL:
            return NetworkingPlan(
                variant,
                rdma_vpcs=False,
                node_nics=NodeNics.ACCELERATOR_PROFILE,
                pod_nics=PodNics.PER_NIC_CLAIMS,
            )
        case GpuNetworking.DRANET_COMPUTE_CLASS:
            return NetworkingPlan(
                variant,
                rdma_vpcs=False,
                node_nics=NodeNics.GKE_MANAGED,
                pod_nics=PodNics.ALL_NICS_CLAIM,
            )
        case _:
            assert_never(variant)
