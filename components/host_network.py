"""The cluster's own VPC: subnet with pod/service ranges, Cloud NAT for private nodes, firewall."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from config.settings import StackSettings

POD_RANGE = "pods"
SERVICE_RANGE = "services"


def internal_traffic() -> list[gcp.compute.FirewallAllowArgs]:
    """All TCP, UDP and ICMP: what nodes of one cluster send each other."""
    return [
        gcp.compute.FirewallAllowArgs(protocol="tcp", ports=["0-65535"]),
        gcp.compute.FirewallAllowArgs(protocol="udp", ports=["0-65535"]),
        gcp.compute.FirewallAllowArgs(protocol="icmp"),
    ]


@dataclass(frozen=True)
class HostNetworkArgs:
    settings: StackSettings


class HostNetwork(pulumi.ComponentResource):
    network: gcp.compute.Network
    subnet: gcp.compute.Subnetwork

    def __init__(
        self, name: str, args: HostNetworkArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        """Long because it declares the VPC, subnet, router, NAT and firewall with their reasons;
        splitting them would only scatter one network's settings."""
        super().__init__("verl-gke:host_network:HostNetwork", name, None, opts)
        s = args.settings
        child = pulumi.ResourceOptions(parent=self)
        base = s.cluster_name

        self.network = gcp.compute.Network(
            f"{name}-vpc",
            name=f"{base}-net",
            project=s.project,
            auto_create_subnetworks=False,
            # Jumbo frames like the Cluster Toolkit's VPC module; GCE's default is 1460.
            mtu=8896,
            opts=child,
        )
        self.subnet = gcp.compute.Subnetwork(
            f"{name}-subnet",
            name=f"{base}-sub",
            project=s.project,
            region=s.region,
            network=self.network.id,
            ip_cidr_range=s.host_subnet_cidr,
            private_ip_google_access=True,
            secondary_ip_ranges=[
                gcp.compute.SubnetworkSecondaryIpRangeArgs(
                    range_name=POD_RANGE, ip_cidr_range=s.pods_cidr
                ),
                gcp.compute.SubnetworkSecondaryIpRangeArgs(
                    range_name=SERVICE_RANGE, ip_cidr_range=s.services_cidr
                ),
            ],
            opts=child,
        )
        router = gcp.compute.Router(
            f"{name}-router",
            name=f"{base}-router",
            project=s.project,
            region=s.region,
            network=self.network.id,
            opts=child,
        )
        # Nodes are private; NAT lets them pull the verl image from Docker Hub and clone verl.
        gcp.compute.RouterNat(
            f"{name}-nat",
            name=f"{base}-nat",
            project=s.project,
            region=s.region,
            router=router.name,
            nat_ip_allocate_option="AUTO_ONLY",
            source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES",
            opts=child,
        )
        gcp.compute.Firewall(
            f"{name}-internal",
            name=f"{base}-internal",
            project=s.project,
            network=self.network.id,
            allows=internal_traffic(),
            source_ranges=[s.host_subnet_cidr, s.pods_cidr],
            opts=child,
        )
        self.register_outputs({"network": self.network.id, "subnet": self.subnet.id})
