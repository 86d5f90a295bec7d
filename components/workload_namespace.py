"""The Kubernetes namespace of the workload (KubeRay, storage objects, data prep, RayCluster)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.gke_cluster import GkeCluster
from config.settings import StackSettings
from manifests import storage as manifests

DEFAULT_NAMESPACE = "default"


@dataclass(frozen=True)
class WorkloadNamespaceArgs:
    settings: StackSettings
    cluster: GkeCluster


class WorkloadNamespace(pulumi.ComponentResource):
    """Creates the namespace unless it is `default`, which every cluster already has.

    Objects in the namespace depend on this component, so they wait for it only when it exists.
    """

    name: str
    namespace: k8s.core.v1.Namespace | None

    def __init__(
        self, name: str, args: WorkloadNamespaceArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("verl-gke:workload_namespace:WorkloadNamespace", name, None, opts)
        s = args.settings
        self.name = s.namespace
        self.namespace = None
        if s.namespace != DEFAULT_NAMESPACE:
            body = manifests.workload_namespace(s)
            self.namespace = k8s.core.v1.Namespace(
                f"{name}-namespace",
                metadata=body["metadata"],
                opts=pulumi.ResourceOptions(parent=self, provider=args.cluster.provider),
            )
        self.register_outputs({"name": self.name})
