"""The pod side of GPU networking: the NCCL gIB installer (Standard) and the objects that give
Ray workers their RDMA NICs (multi-NIC mapping, DRANET ComputeClass or NIC claim templates)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import assert_never

import pulumi
import pulumi_kubernetes as k8s

from components.gke_cluster import GkeCluster
from components.rdma_networks import RdmaNetworks
from components.workload_namespace import WorkloadNamespace
from config.networking import PodNics
from config.settings import StackSettings
from manifests import dranet, nccl_installer, network_mapping
from manifests.common import Manifest


@dataclass(frozen=True)
class GpuNetworkingArgs:
    settings: StackSettings
    cluster: GkeCluster
    namespace: WorkloadNamespace
    # A4/A3 Ultra Standard only: the VPCs the network mapping refers to.
    rdma_networks: RdmaNetworks | None


class GpuNetworking(pulumi.ComponentResource):
    installer: k8s.apps.v1.DaemonSet | None

    def __init__(
        self, name: str, args: GpuNetworkingArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("verl-gke:gpu_networking:GpuNetworking", name, None, opts)
        s = args.settings
        self._provider = args.cluster.provider

        # Standard only: on Autopilot the Ray workers install the gIB plugin themselves
        # (manifests/nccl_installer.py says why).
        self.installer = None
        if nccl_installer.needs_installer(s):
            body = nccl_installer.nccl_installer(s)
            self.installer = k8s.apps.v1.DaemonSet(
                f"{name}-nccl-installer",
                metadata=body["metadata"],
                spec=body["spec"],
                opts=self._child(),
            )

        match s.networking.pod_nics:
            case PodNics.NETWORK_MAPPING:
                if args.rdma_networks is None:
                    raise ValueError("multi-NIC GPU networking needs the RDMA networks component")
                self._network_mapping(name, args.rdma_networks)
            case PodNics.ALL_NICS_CLAIM:
                self._custom(f"{name}-compute-class", dranet.compute_class(s))
                self._claim_template(
                    f"{name}-all-mrdma", dranet.all_mrdma_claim_template(s), args.namespace
                )
            case PodNics.PER_NIC_CLAIMS:
                self._claim_template(
                    f"{name}-rdma-nic", dranet.rdma_nic_claim_template(s), args.namespace
                )
            case unknown:
                assert_never(unknown)
        self.register_outputs({})

    def _child(self, depends_on: list[pulumi.Resource] | None = None) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self, provider=self._provider, depends_on=depends_on)

    def _custom(
        self, name: str, body: Manifest, depends_on: list[pulumi.Resource] | None = None
    ) -> k8s.apiextensions.CustomResource:
        return k8s.apiextensions.CustomResource(
            name,
            api_version=body["apiVersion"],
            kind=body["kind"],
            metadata=body["metadata"],
            spec=body["spec"],
            opts=self._child(depends_on),
        )

    def _claim_template(
        self, name: str, body: Manifest, namespace: WorkloadNamespace
    ) -> k8s.resource.v1.ResourceClaimTemplate:
        return k8s.resource.v1.ResourceClaimTemplate(
            name, metadata=body["metadata"], spec=body["spec"], opts=self._child([namespace])
        )

    def _network_mapping(self, name: str, rdma_networks: RdmaNetworks) -> None:
        # GKE checks that the VPC and subnet of a GKENetworkParamSet exist.
        param_sets: dict[str, pulumi.Resource] = {}
        for body in network_mapping.network_mapping(rdma_networks.layout):
            object_name = body["metadata"]["name"]
            if body["kind"] == "GKENetworkParamSet":
                param_sets[object_name] = self._custom(
                    f"{name}-params-{object_name}", body, depends_on=[rdma_networks]
                )
            else:
                self._custom(
                    f"{name}-network-{object_name}", body, depends_on=[param_sets[object_name]]
                )
