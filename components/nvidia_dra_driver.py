"""The NVIDIA DRA driver (Helm) and the ComputeDomain that gives A4X workers their IMEX channel."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.gke_cluster import GkeCluster
from components.workload_namespace import WorkloadNamespace
from config.settings import StackSettings
from manifests import dra_driver as manifests

# Helm's limit for each Kubernetes operation of the install (not a readiness wait: see below).
HELM_TIMEOUT_S = 900


@dataclass(frozen=True)
class NvidiaDraDriverArgs:
    settings: StackSettings
    cluster: GkeCluster
    namespace: WorkloadNamespace


class NvidiaDraDriver(pulumi.ComponentResource):
    release: k8s.helm.v3.Release
    compute_domain: k8s.apiextensions.CustomResource

    def __init__(
        self, name: str, args: NvidiaDraDriverArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("verl-gke:nvidia_dra_driver:NvidiaDraDriver", name, None, opts)
        s = args.settings
        provider = args.cluster.provider

        def child(depends_on: list[pulumi.Resource] | None = None) -> pulumi.ResourceOptions:
            return pulumi.ResourceOptions(parent=self, provider=provider, depends_on=depends_on)

        namespace = k8s.core.v1.Namespace(
            f"{name}-namespace", metadata=manifests.driver_namespace()["metadata"], opts=child()
        )
        quota_body = manifests.driver_quota(s)
        quota = k8s.core.v1.ResourceQuota(
            f"{name}-quota",
            metadata=quota_body["metadata"],
            spec=quota_body["spec"],
            opts=child([namespace]),
        )
        # The quota must exist first: without it GKE rejects the driver's system-critical pods.
        self.release = k8s.helm.v3.Release(
            f"{name}-release",
            name=manifests.RELEASE_NAME,
            chart=manifests.CHART,
            version=s.dra_driver_chart_version,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=manifests.CHART_REPO),
            namespace=manifests.NAMESPACE,
            values=manifests.driver_values(s),
            # No readiness wait: the kubelet-plugin DaemonSet rolls out over every A4X node, and
            # nothing here needs it ready. The ComputeDomain needs only the CRD (installed first
            # from the chart's crds/), and the workers' claims wait in the scheduler until the
            # plugin on their node publishes its devices. `atomic` would force the wait
            # (pulumi-kubernetes helm_release.go: "The wait flag will be set automatically if
            # atomic is used") and roll the release back on its timeout.
            skip_await=True,
            cleanup_on_fail=True,
            timeout=HELM_TIMEOUT_S,
            opts=child([quota]),
        )
        # The ComputeDomain CRD comes with the chart.
        domain = manifests.compute_domain(s)
        self.compute_domain = k8s.apiextensions.CustomResource(
            f"{name}-compute-domain",
            api_version=domain["apiVersion"],
            kind=domain["kind"],
            metadata=domain["metadata"],
            spec=domain["spec"],
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=provider,
                depends_on=[self.release, args.namespace],
                # The CRD declares the whole spec immutable (x-kubernetes-validations
                # `self == oldSelf`) and pulumi-kubernetes updates a custom resource in place, so
                # a new numNodes is a new ComputeDomain; its name is fixed, so delete first.
                replace_on_changes=["spec"],
                delete_before_replace=True,
            ),
        )
        self.register_outputs({"release": self.release.name})
