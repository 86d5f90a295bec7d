"""The KubeRay operator from its Helm chart, watching only the workload namespace."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.gke_cluster import GkeCluster
from components.workload_namespace import WorkloadNamespace
from config.settings import StackSettings
from manifests import kuberay as manifests

HELM_TIMEOUT_S = 600


@dataclass(frozen=True)
class KubeRayOperatorArgs:
    settings: StackSettings
    cluster: GkeCluster
    namespace: WorkloadNamespace


class KubeRayOperator(pulumi.ComponentResource):
    release: k8s.helm.v3.Release

    def __init__(
        self, name: str, args: KubeRayOperatorArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("verl-gke:kuberay_operator:KubeRayOperator", name, None, opts)
        s = args.settings
        # Helm installs the chart's CRDs (RayCluster, RayJob, RayService) with the operator.
        self.release = k8s.helm.v3.Release(
            f"{name}-release",
            name=manifests.RELEASE_NAME,
            chart=manifests.CHART,
            version=s.kuberay_chart_version,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=manifests.CHART_REPO),
            namespace=s.namespace,
            values=manifests.operator_values(s),
            atomic=True,
            cleanup_on_fail=True,
            timeout=HELM_TIMEOUT_S,
            opts=pulumi.ResourceOptions(
                parent=self, provider=args.cluster.provider, depends_on=[args.namespace]
            ),
        )
        self.register_outputs({"release": self.release.name})
