"""The gVNIC VPC and the RoCE VPC for A4/A3 Ultra GKE Standard (the tutorial's Standard networks).

Their names and CIDRs come from manifests/rdma_layout.py, the pure layout the Kubernetes network
mapping (GKENetworkParamSet/Network) is derived from too, so the two cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from components.host_network import internal_traffic
from config.settings import StackSettings
from manifests.rdma_layout import RDMA_SUPERNET, RdmaLayout, rdma_layout

# RoCE VPCs use a 8896-byte MTU (VPC docs, RDMA network profiles).
RDMA_MTU = 8896


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
        super().__init__("verl-gke:rdma_networks:RdmaNetworks", name, None, opts)
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
