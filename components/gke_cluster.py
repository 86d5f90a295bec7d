"""The GKE cluster (Standard or Autopilot), its CPU system pool and a Kubernetes provider."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from components.host_network import POD_RANGE, SERVICE_RANGE, HostNetwork
from components.image_registry import ImageRegistry
from components.node_identity import NodeIdentity
from config.billing_labels import billing_labels
from config.cluster_security import (
    CLOUD_PLATFORM_SCOPE,
    MONITORING_COMPONENTS,
    open_endpoint_warning,
)
from config.profiles import Mode
from config.settings import StackSettings, config_key
from config.stack_values import version_tuple

CPU_POOL_NAME = "cpu-pool"
CPU_POOL_DISK_GB = 200
# Standard: the inline CPU pool is the cluster's only pool at create time; GKE then lists the
# separately managed GPU pool in nodePools too, which would otherwise read as a change that
# replaces the cluster (terraform-provider-google#408). The CPU pool is therefore create-only.
CLUSTER_IGNORED_CHANGES = ["nodePools"]
# The provider's own default for every cluster operation: 90 min (resource_container_cluster.go
# Timeouts in terraform-provider-google-beta, the same at v7.45.0 and after the 8.0.0 merge,
# 93c65b2d; pulumi-gcp 10.2.0 bridges an 8.x release). A custom
# timeout replaces that default rather than adding to it, so a shorter one would end `pulumi up`
# while GKE goes on creating a cluster that is then outside the state; stated here so the plan
# shows how long `pulumi up` waits for the cluster.
CLUSTER_TIMEOUTS = pulumi.CustomTimeouts(create="90m", update="90m", delete="90m")

# No automatic minor upgrades and no node upgrades until the cluster's minor version reaches end
# of support (GKE's scope for AI workloads; Cluster Toolkit's A4X, A4 and A3 Ultra blueprints set
# the same exclusion). A node upgrade evicts the Ray workers and ends the training run; control
# plane patches still happen.
UPGRADE_EXCLUSION_NAME = "no-minor-or-node-upgrades"
UPGRADE_EXCLUSION_SCOPE = "NO_MINOR_OR_NODE_UPGRADES"
UPGRADE_EXCLUSION_END = "UNTIL_END_OF_SUPPORT"
# A fixed start: the provider requires one, GKE accepts one in the past ("can occur in the past",
# gcloud --add-maintenance-exclusion-start), and a start computed at run time would change the
# cluster's maintenance policy on every `pulumi up`.
UPGRADE_EXCLUSION_START = "2026-01-01T00:00:00Z"
# A maintenance policy needs exactly one window (terraform-provider-google: ExactlyOneOf
# daily / recurring windows). Outside the exclusion only control-plane patches remain, so the
# hour only decides when those happen.
MAINTENANCE_WINDOW_START = "03:00"


def maintenance_policy() -> gcp.container.ClusterMaintenancePolicyArgs:
    return gcp.container.ClusterMaintenancePolicyArgs(
        daily_maintenance_window=gcp.container.ClusterMaintenancePolicyDailyMaintenanceWindowArgs(
            start_time=MAINTENANCE_WINDOW_START
        ),
        maintenance_exclusions=[
            gcp.container.ClusterMaintenancePolicyMaintenanceExclusionArgs(
                exclusion_name=UPGRADE_EXCLUSION_NAME,
                start_time=UPGRADE_EXCLUSION_START,
                exclusion_options=gcp.container.ClusterMaintenancePolicyMaintenanceExclusionExclusionOptionsArgs(
                    scope=UPGRADE_EXCLUSION_SCOPE, end_time_behavior=UPGRADE_EXCLUSION_END
                ),
            )
        ],
    )


def authorized_networks(
    s: StackSettings,
) -> gcp.container.ClusterMasterAuthorizedNetworksConfigArgs | None:
    """Only `verl-gke:authorizedNetworks` reach the public endpoint; None (no list) leaves it
    open to any address, since an empty block would shut out the deploying machine too
    (config/cluster_security.py). An open endpoint is reported as a warning."""
    cidrs = s.authorized_networks
    exposure = open_endpoint_warning(config_key("authorized_networks"), cidrs)
    if exposure:
        pulumi.log.warn(exposure)
    if not cidrs:
        return None
    return gcp.container.ClusterMasterAuthorizedNetworksConfigArgs(
        cidr_blocks=[
            gcp.container.ClusterMasterAuthorizedNetworksConfigCidrBlockArgs(
                cidr_block=cidr, display_name="verl-gke:authorizedNetworks"
            )
            for cidr in cidrs
        ],
        # Only the list: off, GKE's switch that also admits every Google Cloud public IP (any
        # customer's VM). The provider sends it only when set, leaving GKE's default otherwise;
        # Cluster Toolkit gke-cluster sets it false by default.
        gcp_public_cidrs_access_enabled=False,
    )


def monitoring_config() -> gcp.container.ClusterMonitoringConfigArgs:
    """System metrics, the observability packages and DCGM GPU metrics, through Managed Service
    for Prometheus (config/cluster_security.py)."""
    return gcp.container.ClusterMonitoringConfigArgs(
        enable_components=list(MONITORING_COMPONENTS),
        managed_prometheus=gcp.container.ClusterMonitoringConfigManagedPrometheusArgs(
            enabled=True
        ),
    )


def cpu_pool_args(
    s: StackSettings, service_account: pulumi.Input[str]
) -> gcp.container.ClusterNodePoolArgs:
    """The Standard cluster's CPU pool, created inside the cluster operation (no default pool).

    Create-only (CLUSTER_IGNORED_CHANGES): GKE's autoscaler sizes it between cpuNodes and
    cpuMaxNodes; another machine type or disk needs a new pool (gcloud container node-pools
    create) or a new cluster."""
    return gcp.container.ClusterNodePoolArgs(
        name=CPU_POOL_NAME,
        node_locations=[s.zone],
        initial_node_count=s.cpu_nodes,
        autoscaling=gcp.container.ClusterNodePoolAutoscalingArgs(
            total_min_node_count=s.cpu_nodes, total_max_node_count=s.cpu_max_nodes
        ),
        node_config=gcp.container.ClusterNodePoolNodeConfigArgs(
            machine_type=s.cpu_machine_type,
            disk_type=s.cpu_boot_disk_type,
            disk_size_gb=CPU_POOL_DISK_GB,
            image_type="COS_CONTAINERD",
            # Streams the data-prep (and x86 head) image through the stack's Artifact Registry
            # remote repository (config/image_streaming.py); that first pull also fills the
            # repository's streaming cache before the GPU nodes pull (planning/startup_links.py).
            # Create-only like the whole pool: a cluster created before imageStreaming keeps
            # its CPU pool as it was.
            gcfs_config=gcp.container.ClusterNodePoolNodeConfigGcfsConfigArgs(
                enabled=s.image_pull.pool_streaming
            ),
            workload_metadata_config=gcp.container.ClusterNodePoolNodeConfigWorkloadMetadataConfigArgs(
                mode="GKE_METADATA"
            ),
            # The nodes' own account (components/node_identity.py); cloud-platform is the
            # scope GKE gives a custom account, access being limited by its IAM roles.
            service_account=service_account,
            oauth_scopes=[CLOUD_PLATFORM_SCOPE],
        ),
    )


def check_cluster_version(
    cluster_name: str, master_version: str | None, settings: StackSettings
) -> str:
    """The cluster's name, once the version GKE gave it meets `verl-gke:kubernetesVersion`.

    No version is pinned: the release channel picks it (a pinned version fails cluster creation
    once it leaves the channel). The floor is therefore checked against what GKE returned,
    before the GPU pool or any Kubernetes object exists. An empty version (not reported yet)
    passes.
    """
    if not master_version or version_tuple(master_version) >= version_tuple(
        settings.kubernetes_version
    ):
        return cluster_name
    raise pulumi.RunError(
        f"GKE created cluster {cluster_name} at version {master_version}, below "
        f"{config_key('kubernetes_version')} = {settings.kubernetes_version!r} "
        f"(release channel {settings.release_channel}); the GPU node pool and the Kubernetes "
        f"objects were not created. Fix: upgrade the control plane (gcloud container clusters "
        f"upgrade {cluster_name} --master --cluster-version={settings.kubernetes_version} "
        f"--location={settings.region} --project={settings.project}), then run `pulumi up` "
        f"again. A new cluster gets a newer default from a faster channel "
        f"({settings.fix('release_channel', 'RAPID')})."
    )


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
    # The service account every node runs as.
    node_identity: NodeIdentity
    # With image streaming: the cluster waits for the Container File System API, which a pool
    # with gcfsConfig needs when it is created (the CPU pool is created inside the cluster).
    image_registry: ImageRegistry | None = None


class GkeCluster(pulumi.ComponentResource):
    cluster: gcp.container.Cluster
    # The cluster's name, resolved only once its GKE version meets the floor.
    checked_name: pulumi.Output[str]
    # Standard only: the name of the CPU pool (created inside the cluster, cpu_pool_args) where
    # the data-prep Job, operators and (x86) Ray head run.
    cpu_pool_name: str | None
    provider: k8s.Provider
    kubeconfig: pulumi.Output[str]
    # The email of the service account the nodes run as (the GPU pool sets it too).
    node_service_account: pulumi.Output[str]

    def __init__(
        self, name: str, args: GkeClusterArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        """Long because it is one Cluster's declarative argument list, each argument with the
        reason it has that value, then what is built on the cluster."""
        super().__init__("verl-gke:gke_cluster:GkeCluster", name, None, opts)
        s = args.settings
        autopilot = s.mode is Mode.AUTOPILOT
        self.node_service_account = args.node_identity.email

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
            # The channel picks the version; verl-gke:kubernetesVersion is a floor, checked in
            # the settings and against the version GKE returns (check_cluster_version).
            release_channel=gcp.container.ClusterReleaseChannelArgs(channel=s.release_channel),
            maintenance_policy=maintenance_policy(),
            master_authorized_networks_config=authorized_networks(s),
            monitoring_config=monitoring_config(),
            # `pulumi destroy` must be able to delete the cluster.
            deletion_protection=False,
            # GCP labels of the cluster (GKE "cluster labels"), for splitting the bill by stack.
            resource_labels=billing_labels(pulumi.get_project(), s.stack),
            **self._mode_args(s, self.node_service_account),
            opts=pulumi.ResourceOptions(
                parent=self,
                custom_timeouts=CLUSTER_TIMEOUTS,
                ignore_changes=[] if autopilot else CLUSTER_IGNORED_CHANGES,
                depends_on=self._prerequisites(args),
            ),
        )

        # Everything built on the cluster (GPU pool, Kubernetes provider) takes its name from
        # here, so a cluster below the version floor stops them before they exist.
        self.checked_name = pulumi.Output.all(self.cluster.name, self.cluster.master_version).apply(
            lambda values: check_cluster_version(values[0], values[1], s)
        )
        self.cpu_pool_name = None if autopilot else CPU_POOL_NAME

        self.kubeconfig = pulumi.Output.secret(
            pulumi.Output.all(
                self.checked_name,
                self.cluster.endpoint,
                self.cluster.master_auth.cluster_ca_certificate,
            ).apply(lambda values: kubeconfig(values[0], values[1], values[2] or ""))
        )
        # Kubernetes objects wait for the cluster, whose create includes the CPU pool (somewhere
        # to run), never for the GPU pool.
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=self.kubeconfig,
            # On destroy, objects of a cluster that is already gone are dropped from state.
            delete_unreachable=True,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"name": self.cluster.name, "endpoint": self.cluster.endpoint})

    @classmethod
    def _mode_args(cls, s: StackSettings, service_account: pulumi.Input[str]) -> dict[str, object]:
        if s.mode is Mode.AUTOPILOT:
            return cls._autopilot_args(service_account)
        return cls._standard_args(s, service_account)

    @staticmethod
    def _prerequisites(args: GkeClusterArgs) -> list[pulumi.Resource]:
        """The node account and its roles (nodes log and pull from their first boot) and, with
        image streaming, the Container File System API."""
        streaming = [args.image_registry.streaming_api] if args.image_registry else []
        return [*args.node_identity.ready, *streaming]

    @staticmethod
    def _autopilot_args(service_account: pulumi.Input[str]) -> dict[str, object]:
        # Autopilot brings Workload Identity, GCS FUSE CSI and Dataplane V2 by itself. Its nodes
        # run as the account of the auto-provisioning defaults (gcloud container clusters
        # create-auto --service-account).
        return {
            "enable_autopilot": True,
            "cluster_autoscaling": gcp.container.ClusterClusterAutoscalingArgs(
                auto_provisioning_defaults=gcp.container.ClusterClusterAutoscalingAutoProvisioningDefaultsArgs(
                    service_account=service_account, oauth_scopes=[CLOUD_PLATFORM_SCOPE]
                )
            ),
        }

    @staticmethod
    def _standard_args(s: StackSettings, service_account: pulumi.Input[str]) -> dict[str, object]:
        return {
            # The cluster is created with its CPU pool and no default pool: with
            # remove_default_node_pool the provider deletes default-pool inside the cluster's
            # create, minutes before the GPU pool may start (terraform-provider-google
            # resource_container_cluster.go). GKE API Cluster.nodePools: set instead of
            # initial_node_count / node_config.
            "node_pools": [cpu_pool_args(s, service_account)],
            "node_locations": [s.zone],
            "datapath_provider": "ADVANCED_DATAPATH",
            # Pods attach the gVNIC/RDMA NICs through GKENetworkParamSet/Network objects.
            "enable_multi_networking": s.networking.rdma_vpcs,
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
