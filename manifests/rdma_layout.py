"""Names and CIDRs of the gVNIC and RoCE networks of A4/A3 Ultra GKE Standard (tutorial).

A pure function of the settings, beside the manifests that use it: the VPCs and subnets
(components/rdma_networks.py), the node pool's additional networks and the Kubernetes network
mapping (manifests/network_mapping.py) all take their names from one RdmaLayout, so they cannot
drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass

from config.settings import StackSettings

GVNIC_CIDR = "192.168.0.0/24"
# The gVNIC and RoCE subnets live in 192.168.0.0/16; this is the firewall's source range.
RDMA_SUPERNET = "192.168.0.0/16"


@dataclass(frozen=True)
class SubnetSpec:
    name: str
    cidr: str


@dataclass(frozen=True)
class RdmaLayout:
    gvnic_network: str
    gvnic_subnet: SubnetSpec
    rdma_network: str
    rdma_subnets: tuple[SubnetSpec, ...]
    network_profile: str


def rdma_layout(settings: StackSettings) -> RdmaLayout:
    base = settings.cluster_name
    return RdmaLayout(
        gvnic_network=f"{base}-gvnic-net",
        gvnic_subnet=SubnetSpec(f"{base}-gvnic-sub", GVNIC_CIDR),
        rdma_network=f"{base}-rdma-net",
        rdma_subnets=tuple(
            SubnetSpec(f"{base}-rdma-sub-{i}", f"192.168.{i + 1}.0/24")
            for i in range(settings.profile.rdma_nics_per_node)
        ),
        # RoCE network profiles are zonal: `{zone}-vpc-roce`, never `{region}-vpc-roce`.
        network_profile=(
            f"projects/{settings.project}/global/networkProfiles/{settings.zone}-vpc-roce"
        ),
    )
