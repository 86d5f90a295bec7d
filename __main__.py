"""verl-gke: GRPO training with verl on Ray on GKE. The composition root: settings -> components
-> exports. Nothing here creates a resource directly."""

import pulumi

from components.gke_cluster import GkeCluster, GkeClusterArgs, get_credentials_command
from components.gpu_node_pool import GpuNodePool, GpuNodePoolArgs
from components.host_network import HostNetwork, HostNetworkArgs
from components.rdma_networks import RdmaNetworks, RdmaNetworksArgs
from config.profiles import GpuNetworking, Mode
from config.settings import settings_from_pulumi
from jobs.training_job import training_job

# Validate everything before the first resource is registered.
loaded = settings_from_pulumi()
for notice in loaded.notices:
    pulumi.log.warn(notice)
settings = loaded.settings
grpo = training_job(settings)  # verl's rules, checked before any GPU is paid for

host_network = HostNetwork("host", HostNetworkArgs(settings))
rdma_networks = (
    RdmaNetworks("gpu-net", RdmaNetworksArgs(settings))
    if settings.gpu_networking is GpuNetworking.MULTI_NIC
    else None
)
gke = GkeCluster("gke", GkeClusterArgs(settings, host_network))
gpu_pool = (
    GpuNodePool("gpu", GpuNodePoolArgs(settings, gke, rdma_networks))
    if settings.mode is Mode.STANDARD
    else None
)

pulumi.export("profile", settings.profile_name)
pulumi.export("mode", settings.mode.value)
pulumi.export("clusterName", gke.cluster.name)
pulumi.export("clusterLocation", gke.cluster.location)
pulumi.export("getCredentialsCommand", get_credentials_command(settings))
pulumi.export("kubeconfig", gke.kubeconfig)
