"""The GCP layer of the real program, per stack and mode, against the tutorial's values."""

from __future__ import annotations

import pulumi
import pytest

from planning.offline_engine import run_stack
from tests.program import COMBINATIONS, REAL, plan

CLUSTER = "gcp:container/cluster:Cluster"
NODE_POOL = "gcp:container/nodePool:NodePool"
NETWORK = "gcp:compute/network:Network"
SUBNET = "gcp:compute/subnetwork:Subnetwork"
K8S_PROVIDER = "pulumi:providers:kubernetes"


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_host_network(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    vpc = result.one(NETWORK, "host-vpc")
    assert vpc.inputs["autoCreateSubnetworks"] is False
    subnet = result.one(SUBNET, "host-subnet")
    assert subnet.inputs["region"] == "us-central1"
    assert subnet.inputs["ipCidrRange"] == "10.128.0.0/20"
    ranges = {r["rangeName"]: r["ipCidrRange"] for r in subnet.inputs["secondaryIpRanges"]}
    assert ranges == {"pods": "10.4.0.0/14", "services": "10.0.32.0/20"}
    nat = result.one("gcp:compute/routerNat:RouterNat")
    assert nat.inputs["sourceSubnetworkIpRangesToNat"] == "ALL_SUBNETWORKS_ALL_IP_RANGES"
    firewall = result.one("gcp:compute/firewall:Firewall", "host-internal")
    protocols = {a["protocol"] for a in firewall.inputs["allows"]}
    assert protocols == {"tcp", "udp", "icmp"}


@pytest.mark.parametrize(("stack", "mode"), [("a4", "standard"), ("a3u", "standard")])
def test_rdma_networks_x86_standard(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    gvnic = result.one(NETWORK, "gpu-net-gvnic-vpc")
    assert gvnic.inputs["name"] == f"verl-{stack}-gvnic-net"
    gvnic_sub = result.one(SUBNET, "gpu-net-gvnic-subnet")
    assert gvnic_sub.inputs["ipCidrRange"] == "192.168.0.0/24"
    rdma = result.one(NETWORK, "gpu-net-rdma-vpc")
    # The RoCE profile is zonal (the tutorial's region-based profile was a defect).
    assert rdma.inputs["networkProfile"] == (
        "projects/acme-ml-prod/global/networkProfiles/us-central1-b-vpc-roce"
    )
    assert rdma.inputs["mtu"] == 8896
    subnets = sorted(
        (r.inputs["name"], r.inputs["ipCidrRange"])
        for r in result.of_type(SUBNET)
        if r.name.startswith("gpu-net-rdma-subnet-")
    )
    assert subnets == [(f"verl-{stack}-rdma-sub-{i}", f"192.168.{i + 1}.0/24") for i in range(8)]
    fw = result.one("gcp:compute/firewall:Firewall", "gpu-net-gvnic-internal")
    assert fw.inputs["sourceRanges"] == ["192.168.0.0/16"]


@pytest.mark.parametrize(
    ("stack", "mode"),
    [c for c in COMBINATIONS if c not in {("a4", "standard"), ("a3u", "standard")}],
)
def test_no_rdma_vpcs_where_gke_creates_them(stack: str, mode: str) -> None:
    names = {r.name for r in plan(stack, mode).of_type(NETWORK)}
    assert names == {"host-vpc"}


@pytest.mark.parametrize(("stack", "mode"), [c for c in COMBINATIONS if c[1] == "standard"])
def test_standard_cluster(stack: str, mode: str) -> None:
    cluster = plan(stack, mode).one(CLUSTER).inputs
    assert cluster["name"] == f"verl-{stack}"
    assert cluster["location"] == "us-central1"  # regional
    assert cluster["nodeLocations"] == ["us-central1-b"]
    assert cluster["datapathProvider"] == "ADVANCED_DATAPATH"
    assert cluster["workloadIdentityConfig"] == {"workloadPool": "acme-ml-prod.svc.id.goog"}
    assert cluster["addonsConfig"]["gcsFuseCsiDriverConfig"] == {"enabled": True}
    # Never the GKE Ray add-on: KubeRay comes from Helm.
    assert "rayOperatorConfigs" not in cluster["addonsConfig"]
    assert cluster["deletionProtection"] is False
    # No default pool to delete inside the create: the CPU pool is inline.
    assert "removeDefaultNodePool" not in cluster
    assert "initialNodeCount" not in cluster
    assert [pool["name"] for pool in cluster["nodePools"]] == ["cpu-pool"]
    assert cluster["enableMultiNetworking"] is (stack != "a4x")
    # The channel picks the version; a pinned one fails once it leaves the channel.
    assert "minMasterVersion" not in cluster
    assert cluster["releaseChannel"] == {"channel": "REGULAR"}
    assert cluster["privateClusterConfig"]["enablePrivateNodes"] is True
    assert "enableAutopilot" not in cluster


@pytest.mark.parametrize(("stack", "mode"), [c for c in COMBINATIONS if c[1] == "autopilot"])
def test_autopilot_cluster(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    cluster = result.one(CLUSTER).inputs
    assert cluster["enableAutopilot"] is True
    assert cluster["releaseChannel"] == {"channel": "RAPID"}
    assert "minMasterVersion" not in cluster
    assert cluster["deletionProtection"] is False
    assert "rayOperatorConfigs" not in cluster.get("addonsConfig", {})
    assert result.of_type(NODE_POOL) == []


EXPECTED_MAINTENANCE_POLICY = {
    # The provider needs exactly one window; outside the exclusion only control-plane patches
    # are left for it.
    "dailyMaintenanceWindow": {"startTime": "03:00"},
    "maintenanceExclusions": [
        {
            "exclusionName": "no-minor-or-node-upgrades",
            # Fixed, so the policy does not change on every `pulumi up`.
            "startTime": "2026-01-01T00:00:00Z",
            "exclusionOptions": {
                "scope": "NO_MINOR_OR_NODE_UPGRADES",
                "endTimeBehavior": "UNTIL_END_OF_SUPPORT",
            },
        }
    ],
}


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_no_node_upgrades_until_end_of_support(stack: str, mode: str) -> None:
    # Standard and Autopilot alike: on Autopilot the cluster-level exclusion is the only
    # control over node upgrades.
    cluster = plan(stack, mode).one(CLUSTER).inputs
    assert cluster["maintenancePolicy"] == EXPECTED_MAINTENANCE_POLICY
    # exactly one of endTime / endTimeBehavior
    assert "endTime" not in cluster["maintenancePolicy"]["maintenanceExclusions"][0]


def test_maintenance_policy_is_the_same_on_every_run() -> None:
    first = plan("a4x").one(CLUSTER).inputs["maintenancePolicy"]
    again = run_stack("a4x", dict(REAL), strict=True).one(CLUSTER).inputs["maintenancePolicy"]
    assert first == again


def _failed_run(stack: str, overrides: dict[str, str]) -> str:
    """Run a program that must fail; return the error. The next run_stack starts clean."""
    with pytest.raises(pulumi.RunError) as caught:
        run_stack(stack, overrides)
    return str(caught.value)


def test_a_failed_run_does_not_break_the_next_run_in_the_process() -> None:
    _failed_run("a4x", {**REAL, "verl-gke:kubernetesVersion": "1.36"})
    after = run_stack("a4x", dict(REAL), strict=True)
    assert after.one(CLUSTER).inputs["name"] == "verl-a4x"
    assert after.outputs["clusterName"] == "verl-a4x"


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_cluster_below_the_version_floor_stops_before_gpu_pool_and_kubernetes(
    stack: str, mode: str
) -> None:
    # The offline cloud reports 1.35.2-gke.1842000; a floor above it is a cluster GKE gave an
    # older version than the stack needs.
    message = _failed_run(
        stack, {**REAL, "verl-gke:mode": mode, "verl-gke:kubernetesVersion": "1.36"}
    )
    assert f"GKE created cluster verl-{stack} at version 1.35.2-gke.1842000" in message
    assert "below verl-gke:kubernetesVersion = '1.36'" in message
    assert (
        f"gcloud container clusters upgrade verl-{stack} --master --cluster-version=1.36 "
        "--location=us-central1 --project=acme-ml-prod"
    ) in message


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_gpu_pool_and_kubernetes_take_the_version_checked_cluster_name(
    stack: str, mode: str
) -> None:
    result = plan(stack, mode)
    cluster = result.one(CLUSTER)
    provider = result.one(K8S_PROVIDER)
    assert '"name": "gke_verl-' + stack + '"' in provider.inputs["kubeconfig"]
    assert result.depends_on(provider, cluster)
    for pool in result.of_type(NODE_POOL):
        if pool.name == "gpu-pool":
            assert pool.inputs["cluster"] == f"verl-{stack}"
            assert result.depends_on(pool, cluster)


@pytest.mark.parametrize(("stack", "mode"), [c for c in COMBINATIONS if c[1] == "standard"])
def test_cpu_system_pool(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    cluster = result.one(CLUSTER)
    # Created with the cluster, not as a separate NodePool after a default pool's delete.
    assert [pool.name for pool in result.of_type(NODE_POOL)] == ["gpu-pool"]
    (pool,) = cluster.inputs["nodePools"]
    config = pool["nodeConfig"]
    assert config["machineType"] == "n4-highmem-16"
    # N4 boots only from Hyperdisk.
    assert config["diskType"] == "hyperdisk-balanced"
    assert config["diskSizeGb"] == 200
    assert config["imageType"] == "COS_CONTAINERD"
    assert config["workloadMetadataConfig"] == {"mode": "GKE_METADATA"}
    assert pool["nodeLocations"] == ["us-central1-b"]
    assert pool["initialNodeCount"] == 1
    assert pool["autoscaling"] == {"totalMinNodeCount": 1, "totalMaxNodeCount": 5}
    # GKE lists the separate GPU pool in nodePools too; without this the next preview would
    # replace the cluster (terraform-provider-google#408).
    assert cluster.ignore_changes == frozenset({"nodePools"})


@pytest.mark.parametrize(("stack", "mode"), [c for c in COMBINATIONS if c[1] == "autopilot"])
def test_autopilot_cluster_ignores_nothing(stack: str, mode: str) -> None:
    assert plan(stack, mode).one(CLUSTER).ignore_changes == frozenset()


# GKE autoscaler machine table / Cluster Toolkit gke-node-pool disk_definitions.tf.
LOCAL_SSDS = {"a4x": 4, "a4": 32, "a3u": 32}
EXPECTED_GPU_POOL = {
    "a4x": ("a4x-highgpu-4g", "nvidia-gb200", 4, 4, "LATEST"),
    "a4": ("a4-highgpu-8g", "nvidia-b200", 8, 2, "DEFAULT"),
    "a3u": ("a3-ultragpu-8g", "nvidia-h200-141gb", 8, 2, "DEFAULT"),
}


@pytest.mark.parametrize(("stack", "mode"), [c for c in COMBINATIONS if c[1] == "standard"])
def test_gpu_node_pool(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    pool = result.one(NODE_POOL, "gpu-pool")
    machine, gpu, per_node, nodes, driver = EXPECTED_GPU_POOL[stack]
    config = pool.inputs["nodeConfig"]
    assert config["machineType"] == machine
    assert config["guestAccelerators"] == [
        {
            "type": gpu,
            "count": per_node,
            "gpuDriverInstallationConfig": {"gpuDriverVersion": driver},
        }
    ]
    assert pool.inputs["nodeCount"] == nodes
    assert pool.inputs["nodeLocations"] == ["us-central1-b"]
    assert config["reservationAffinity"] == {
        "consumeReservationType": "SPECIFIC_RESERVATION",
        "key": "compute.googleapis.com/reservation-name",
        "values": ["gpu-res"],
    }
    assert config["gvnic"] == {"enabled": True}
    assert config["diskType"] == "hyperdisk-balanced"
    assert config["imageType"] == "COS_CONTAINERD"
    # Ephemeral storage on the machine's bundled local SSDs (count fixed by the machine type),
    # not on the boot disk.
    assert config["ephemeralStorageLocalSsdConfig"] == {"localSsdCount": LOCAL_SSDS[stack]}
    assert pool.ignore_changes == {"nodeConfig.ephemeralStorageLocalSsdConfig"}
    # Auto-upgrade stays on (release channel); the cluster's exclusion holds upgrades off, and
    # an upgrade of a reservation-bound pool replaces one node at a time with no surge node.
    assert pool.inputs["management"] == {"autoRepair": True, "autoUpgrade": True}
    assert pool.inputs["upgradeSettings"] == {
        "strategy": "SURGE",
        "maxSurge": 0,
        "maxUnavailable": 1,
    }


def test_a4x_gpu_pool_dranet_and_1x72_placement() -> None:
    result = plan("a4x")
    pool = result.one(NODE_POOL, "gpu-pool")
    assert pool.inputs["networkConfig"] == {"acceleratorNetworkProfile": "auto"}
    # Without this label GKE's DRANET driver publishes no mrdma.google.com devices and the
    # workers' NIC claims never bind.
    assert pool.inputs["nodeConfig"]["labels"] == {
        "cloud.google.com/gke-networking-dra-driver": "true"
    }
    policy = result.one("gcp:compute/resourcePolicy:ResourcePolicy")
    assert policy.inputs["workloadPolicy"] == {
        "type": "HIGH_THROUGHPUT",
        "acceleratorTopology": "1x72",
    }
    assert pool.inputs["placementPolicy"] == {
        "type": "COMPACT",
        "policyName": "verl-a4x-workload-policy",
    }


@pytest.mark.parametrize("stack", ["a4", "a3u"])
def test_x86_gpu_pool_one_gvnic_and_eight_rdma_networks(stack: str) -> None:
    pool = plan(stack, "standard").one(NODE_POOL, "gpu-pool")
    assert "labels" not in pool.inputs["nodeConfig"]
    networks = pool.inputs["networkConfig"]["additionalNodeNetworkConfigs"]
    assert networks[0] == {
        "network": f"verl-{stack}-gvnic-net",
        "subnetwork": f"verl-{stack}-gvnic-sub",
    }
    assert networks[1:] == [
        {"network": f"verl-{stack}-rdma-net", "subnetwork": f"verl-{stack}-rdma-sub-{i}"}
        for i in range(8)
    ]
    assert "placementPolicy" not in pool.inputs


def test_no_reservation_means_no_reservation_affinity() -> None:
    result = plan("a3u", "standard", unset=("verl-gke:reservation",))
    pool = result.one(NODE_POOL, "gpu-pool").inputs
    assert pool["nodeConfig"]["reservationAffinity"] == {"consumeReservationType": "NO_RESERVATION"}
    # Without a reservation the a3u default is flex-start, whose nodes GKE upgrades with its
    # short-lived strategy (GKE "Node pool upgrade strategies"): no surge settings are sent.
    assert "upgradeSettings" not in pool
    # Spot: a spare machine can be had, GKE's default surge upgrade.
    unset = ("verl-gke:reservation",)
    spot = plan("a3u", "standard", unset=unset, **{"verl-gke__capacity": "spot"})
    assert spot.one(NODE_POOL, "gpu-pool").inputs["upgradeSettings"] == {
        "strategy": "SURGE",
        "maxSurge": 1,
        "maxUnavailable": 0,
    }


def test_gpu_pool_needs_cluster_and_k8s_provider_does_not_need_gpu_pool() -> None:
    result = plan("a3u", "standard")
    gpu_pool = result.one(NODE_POOL, "gpu-pool")
    cluster = result.one(CLUSTER)
    provider = result.one(K8S_PROVIDER)
    assert result.depends_on(gpu_pool, cluster)
    # The cluster's create includes the CPU pool.
    assert result.depends_on(provider, cluster)
    assert not result.depends_on(provider, gpu_pool)


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_kubernetes_provider_from_cluster_with_auth_plugin(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    provider = result.one(K8S_PROVIDER)
    assert "kubeconfig" in provider.secret_inputs
    kubeconfig = provider.inputs["kubeconfig"]
    assert '"server": "https://203.0.113.10"' in kubeconfig
    assert '"command": "gke-gcloud-auth-plugin"' in kubeconfig
    assert provider.parent == result.one("verl-gke:gke_cluster:GkeCluster").urn


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_stack_outputs(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    assert result.outputs["clusterName"] == f"verl-{stack}"
    assert result.outputs["clusterLocation"] == "us-central1"
    assert result.outputs["getCredentialsCommand"] == (
        f"gcloud container clusters get-credentials verl-{stack} --location=us-central1 "
        "--project=acme-ml-prod"
    )
    assert "kubeconfig" in result.secret_outputs
    assert "hf_test_token_value" not in repr(result.outputs)


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_components_own_their_children(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    components = {r.urn: r for r in result.resources if not r.custom}
    for resource in result.resources:
        if resource.custom:
            assert resource.parent in components, f"{resource.name} is not inside a component"
    for component in components.values():
        assert component.type.startswith("verl-gke:")


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_bucket_iam_waits_for_the_workload_identity_pool(stack: str, mode: str) -> None:
    # The member names <project>.svc.id.goog, which exists only once a cluster with Workload
    # Identity does; IAM rejects the binding before that.
    result = plan(stack, mode)
    member = result.one("gcp:storage/bucketIAMMember:BucketIAMMember")
    assert result.depends_on(member, result.one(CLUSTER))
    assert member.inputs["member"].startswith(
        "principal://iam.googleapis.com/projects/123456789012/locations/global/"
        "workloadIdentityPools/acme-ml-prod.svc.id.goog/subject/ns/default/sa/verl-ray"
    )
