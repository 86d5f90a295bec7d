"""The GKE cluster (Standard or Autopilot), its CPU system pool and a Kubernetes provider."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from components.host_network import POD_RANGE, SERVICE_RANGE, HostNetwork
from config.profiles import GpuNetworking, Mode
from config.settings import StackSettings

CPU_POOL_NAME = "cpu-pool"
# Cluster operations on GKE regularly exceed the provider's 40-minute default.
CLUSTER_TIMEOUTS = pulumi.CustomTimeouts(create="60m", update="60m", delete="60m")


def kubeconfig(cluster_name: str, endpoint: str, ca_certificate: str) -> str:
    """A kubeconfig that authenticates through gke-gcloud-auth-plugin (no static credentials)."""
    context = f"gke_{cluster_name}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": context,
                "cluster": {
                    "server": f"https://{endpoint}",
                    "certificate-authority-data": ca_certificate,
                },
            }
        ],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
        "current-context": context,
        "users": [
            {
                "name": context,
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": "gke-gcloud-auth-plugin",
                        "provideClusterInfo": True,
                        "installHint": "Install gke-gcloud-auth-plugin: gcloud components install "
                        "gke-gcloud-auth-plugin",
                    }
                },
            }
        ],
    }
    return json.dumps(config, indent=2)


def get_credentials_command(settings: StackSettings) -> str:
    return (
        f"gcloud container clusters get-credentials {settings.cluster_name} "
        f"--location={settings.region} --project={settings.project}"
    )


@dataclass(frozen=True)
class GkeClusterArgs:
    settings: StackSettings
    host_network: HostNetwork


class GkeCluster(pulumi.ComponentResource):
    cluster: gcp.container.Cluster
    # Standard only: the CPU pool where the data-prep Job, operators and (x86) Ray head run.
    cpu_pool: gcp.container.NodePool | None
    cpu_pool_name: str | None
    provider: k8s.Provider
    kubeconfig: pulumi.Output[str]

    def __init__(
        self, name: str, args: GkeClusterArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("verl-gke:cluster:GkeCluster", name, None, opts)
        s = args.settings
        child = pulumi.ResourceOptions(parent=self)
        autopilot = s.mode is Mode.AUTOPILOT

        self.cluster = gcp.container.Cluster(
            f"{name}-cluster",
            name=s.cluster_name,
            project=s.project,
            location=s.region,
            network=args.host_network.network.id,
            subnetwork=args.host_network.subnet.id,
            ip_allocation_policy=gcp.container.ClusterIpAllocationPolicyArgs(
                cluster_secondary_range_name=POD_RANGE,
                services_secondary_range_name=SERVICE_RANGE,
            ),
            private_cluster_config=gcp.container.ClusterPrivateClusterConfigArgs(
                enable_private_nodes=True, enable_private_endpoint=False
            ),
            release_channel=gcp.container.ClusterReleaseChannelArgs(channel=s.release_channel),
            min_master_version=s.kubernetes_version,
            # `pulumi destroy` must be able to delete the cluster.
            deletion_protection=False,
            **(self._autopilot_args() if autopilot else self._standard_args(s)),
            opts=pulumi.ResourceOptions(parent=self, custom_timeouts=CLUSTER_TIMEOUTS),
        )

        self.cpu_pool = None if autopilot else self._cpu_pool(name, s, child)
        self.cpu_pool_name = None if autopilot else CPU_POOL_NAME

        self.kubeconfig = pulumi.Output.secret(
            pulumi.Output.all(
                self.cluster.name,
                self.cluster.endpoint,
                self.cluster.master_auth.cluster_ca_certificate,
            ).apply(lambda values: kubeconfig(values[0], values[1], values[2] or ""))
        )
        # Kubernetes objects wait for the CPU pool (somewhere to run), never for the GPU pool.
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=self.kubeconfig,
            # On destroy, objects of a cluster that is already gone are dropped from state.
            delete_unreachable=True,
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[self.cpu_pool] if self.cpu_pool else []
            ),
        )
        self.register_outputs({"name": self.cluster.name, "endpoint": self.cluster.endpoint})

    @staticmethod
    def _autopilot_args() -> dict[str, object]:
        # Autopilot brings Workload Identity, GCS FUSE CSI and Dataplane V2 by itself.
        return {"enable_autopilot": True}

    @staticmethod
    def _standard_args(s: StackSettings) -> dict[str, object]:
        return {
            # The CPU pool is a separate NodePool so it can be changed without replacing the
            # cluster.
            "remove_default_node_pool": True,
            "initial_node_count": 1,
            "node_locations": [s.zone],
            "datapath_provider": "ADVANCED_DATAPATH",
            # Pods attach the gVNIC/RDMA NICs through GKENetworkParamSet/Network objects.
            "enable_multi_networking": s.gpu_networking is GpuNetworking.MULTI_NIC,
            "workload_identity_config": gcp.container.ClusterWorkloadIdentityConfigArgs(
                workload_pool=f"{s.project}.svc.id.goog"
            ),
            # KubeRay comes from Helm; the GKE Ray add-on (ray_operator_configs) stays off
            # because the two operators conflict.
            "addons_config": gcp.container.ClusterAddonsConfigArgs(
                gcs_fuse_csi_driver_config=gcp.container.ClusterAddonsConfigGcsFuseCsiDriverConfigArgs(
                    enabled=True
                ),
            ),
        }

    def _cpu_pool(
        self, name: str, s: StackSettings, child: pulumi.ResourceOptions
    ) -> gcp.container.NodePool:
        return gcp.container.NodePool(
            f"{name}-cpu-pool",
            name=CPU_POOL_NAME,
            project=s.project,
            location=s.region,
            cluster=self.cluster.name,
            node_locations=[s.zone],
            initial_node_count=s.cpu_nodes,
            autoscaling=gcp.container.NodePoolAutoscalingArgs(
                total_min_node_count=s.cpu_nodes, total_max_node_count=s.cpu_max_nodes
            ),
            node_config=gcp.container.NodePoolNodeConfigArgs(
                machine_type=s.cpu_machine_type,
                disk_type=s.cpu_boot_disk_type,
                disk_size_gb=200,
                image_type="COS_CONTAINERD",
                workload_metadata_config=gcp.container.NodePoolNodeConfigWorkloadMetadataConfigArgs(
                    mode="GKE_METADATA"
                ),
                oauth_scopes=["https://www.googleapis.com/auth/cloud-platform"],
            ),
            opts=pulumi.ResourceOptions(parent=self, custom_timeouts=CLUSTER_TIMEOUTS),
        )
