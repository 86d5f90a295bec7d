"""GKE multi-networking objects for A4/A3 Ultra Standard (the tutorial's `network-mapping.yaml`).

One GKENetworkParamSet + Network pair per additional node NIC: `gvnic-1` on the gVNIC VPC and
`rdma-0`..`rdma-7` on the RoCE VPC. Everything is derived from the RdmaLayout that also named the
VPCs and subnets, so the two cannot drift apart.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from manifests.common import Manifest, labels
from manifests.rdma_layout import RdmaLayout

API_VERSION = "networking.gke.io/v1"
GVNIC_NETWORK = "gvnic-1"


@dataclass(frozen=True)
class PodNetwork:
    name: str
    vpc: str
    subnet: str
    device_mode: str


def rdma_network_name(index: int) -> str:
    return f"rdma-{index}"


def pod_networks(layout: RdmaLayout) -> list[PodNetwork]:
    networks = [
        PodNetwork(GVNIC_NETWORK, layout.gvnic_network, layout.gvnic_subnet.name, "NetDevice")
    ]
    networks.extend(
        PodNetwork(rdma_network_name(index), layout.rdma_network, subnet.name, "RDMA")
        for index, subnet in enumerate(layout.rdma_subnets)
    )
    return networks


def network_mapping(layout: RdmaLayout) -> list[Manifest]:
    """GKENetworkParamSet then Network for each pod network (cluster-scoped objects)."""
    objects: list[Manifest] = []
    for network in pod_networks(layout):
        objects.append(
            {
                "apiVersion": API_VERSION,
                "kind": "GKENetworkParamSet",
                "metadata": {"name": network.name, "labels": labels("network-mapping")},
                "spec": {
                    "vpc": network.vpc,
                    "vpcSubnet": network.subnet,
                    "deviceMode": network.device_mode,
                },
            }
        )
        objects.append(
            {
                "apiVersion": API_VERSION,
                "kind": "Network",
                "metadata": {"name": network.name, "labels": labels("network-mapping")},
                "spec": {
                    "type": "Device",
                    "parametersRef": {
                        "group": "networking.gke.io",
                        "kind": "GKENetworkParamSet",
                        "name": network.name,
                    },
                },
            }
        )
    return objects


def pod_interface_annotations(layout: RdmaLayout) -> dict[str, str]:
    """Annotations that attach eth1 (gVNIC) and eth2.. (RDMA) to a Ray worker pod."""
    interfaces = [{"interfaceName": "eth0", "network": "default"}]
    interfaces.extend(
        {"interfaceName": f"eth{index + 1}", "network": network.name}
        for index, network in enumerate(pod_networks(layout))
    )
    return {
        "networking.gke.io/default-interface": "eth0",
        "networking.gke.io/interfaces": json.dumps(interfaces),
    }
