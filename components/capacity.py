"""The request for all GPU nodes at once (GKE Standard, `verl-gke:capacity flexStart`): a
PodTemplate and the ProvisioningRequest that counts gpuNodes of it (manifests/capacity.py).

The Ray workers consume the request by name (their annotations), so no node is billed while
the others are still waited for, and none is created before Dynamic Workload Scheduler can give
all of them. A request is provisioned once; after a node loss or scale-to-zero the job's runner
asks for the nodes again with a request of its own (payloads/export/provreq.py), for which the
pods' service account gets a Role here.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.gke_cluster import GkeCluster
from components.gpu_node_pool import GpuNodePool
from components.workload_namespace import WorkloadNamespace
from config.settings import StackSettings
from manifests import capacity as manifests


@dataclass(frozen=True)
class GpuCapacityRequestArgs:
    settings: StackSettings
    cluster: GkeCluster
    namespace: WorkloadNamespace
    # The queued-provisioning node pool the request is answered from.
    gpu_pool: GpuNodePool


class GpuCapacityRequest(pulumi.ComponentResource):
    pod_template: k8s.core.v1.PodTemplate
    request: k8s.apiextensions.CustomResource
    runner_role: k8s.rbac.v1.Role
    runner_role_binding: k8s.rbac.v1.RoleBinding
    name: str

    def __init__(
        self, name: str, args: GpuCapacityRequestArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("verl-gke:capacity:GpuCapacityRequest", name, None, opts)
        s = args.settings
        template = manifests.pod_template(s)
        self.pod_template = k8s.core.v1.PodTemplate(
            f"{name}-pod-template",
            metadata=template["metadata"],
            template=template["template"],
            opts=pulumi.ResourceOptions(
                parent=self, provider=args.cluster.provider, depends_on=[args.namespace]
            ),
        )
        body = manifests.provisioning_request(s)
        self.request = k8s.apiextensions.CustomResource(
            f"{name}-request",
            api_version=body["apiVersion"],
            kind=body["kind"],
            metadata=body["metadata"],
            spec=body["spec"],
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=args.cluster.provider,
                # The request is matched against the queued-provisioning pool, which must exist.
                depends_on=[self.pod_template, args.gpu_pool.node_pool],
                # A ProvisioningRequest's spec is immutable; a new one is a new request.
                replace_on_changes=["spec"],
                delete_before_replace=True,
            ),
        )
        self.name = body["metadata"]["name"]
        self._runner_access(name, args)
        self.register_outputs({"name": self.name})

    def _runner_access(self, name: str, args: GpuCapacityRequestArgs) -> None:
        opts = pulumi.ResourceOptions(
            parent=self, provider=args.cluster.provider, depends_on=[args.namespace]
        )
        role = manifests.runner_role(args.settings)
        self.runner_role = k8s.rbac.v1.Role(
            f"{name}-runner-role", metadata=role["metadata"], rules=role["rules"], opts=opts
        )
        binding = manifests.runner_role_binding(args.settings)
        self.runner_role_binding = k8s.rbac.v1.RoleBinding(
            f"{name}-runner-role-binding",
            metadata=binding["metadata"],
            role_ref=binding["roleRef"],
            subjects=binding["subjects"],
            opts=opts,
        )
