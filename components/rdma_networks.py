"""The gVNIC VPC and the RoCE VPC for A4/A3 Ultra GKE Standard (tutorial §2.1).

The layout is a pure function so the Kubernetes network mapping (GKENetworkParamSet/Network)
is derived from the very same names and cannot drift from the VPCs.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from components.host_network import internal_traffic
from config.settings import StackSettings

GVNIC_CIDR = "192.168.0.0/24"
# The gVNIC and RoCE subnets live in 192.168.0.0/16; this is the firewall's source range.
RDMA_SUPERNET = "192.168.0.0/16"
# RoCE VPCs use a 8896-byte MTU (VPC docs, RDMA network profiles).
RDMA_MTU = 8896


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


@dataclass(frozen=True)
class RdmaNetworksArgs:
    settings: StackSettings


class RdmaNetworks(pulumi.ComponentResource):
    layout: RdmaLayout
    gvnic_network: gcp.compute.Network
    gvnic_subnet: gcp.compute.Subnetwork
    rdma_network: gcp.compute.Network
    rdma_subnets: list[gcp.compute.Subnetwork]

    def __init__(
        self, name: str, args: RdmaNetworksArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("verl-gke:network:RdmaNetworks", name, None, opts)
        s = args.settings
        child = pulumi.ResourceOptions(parent=self)
        self.layout = layout = rdma_layout(s)

        self.gvnic_network = gcp.compute.Network(
            f"{name}-gvnic-vpc",
            name=layout.gvnic_network,
            project=s.project,
            auto_create_subnetworks=False,
            mtu=RDMA_MTU,
            opts=child,
        )
        self.gvnic_subnet = gcp.compute.Subnetwork(
            f"{name}-gvnic-subnet",
            name=layout.gvnic_subnet.name,
            project=s.project,
            region=s.region,
            network=self.gvnic_network.id,
            ip_cidr_range=layout.gvnic_subnet.cidr,
            opts=child,
        )
        gcp.compute.Firewall(
            f"{name}-gvnic-internal",
            name=f"{layout.gvnic_network}-internal",
            project=s.project,
            network=self.gvnic_network.id,
            allows=internal_traffic(),
            source_ranges=[RDMA_SUPERNET],
            opts=child,
        )
        self.rdma_network = gcp.compute.Network(
            f"{name}-rdma-vpc",
            name=layout.rdma_network,
            project=s.project,
            auto_create_subnetworks=False,
            mtu=RDMA_MTU,
            network_profile=layout.network_profile,
            opts=child,
        )
        self.rdma_subnets = [
            gcp.compute.Subnetwork(
                f"{name}-rdma-subnet-{index}",
                name=subnet.name,
                project=s.project,
                region=s.region,
                network=self.rdma_network.id,
                ip_cidr_range=subnet.cidr,
                opts=child,
            )
            for index, subnet in enumerate(layout.rdma_subnets)
        ]
        self.register_outputs(
            {"gvnicNetwork": self.gvnic_network.name, "rdmaNetwork": self.rdma_network.name}
        )
