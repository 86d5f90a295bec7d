"""The recorded dependency graph: the slow steps overlap.

Data prep, KubeRay, the DRA driver, the NCCL installer and storage wait for the cluster and its
CPU pool, never for the GPU pool; the RayCluster waits for the operator, storage and the GPU
networking objects (and, being created early, only its readiness waits for GPU nodes).
"""

from __future__ import annotations

import pytest

from planning.offline_engine import PlanResult, RecordedResource
from tests.program import COMBINATIONS, plan

STANDARD = [c for c in COMBINATIONS if c[1] == "standard"]
RAY_CLUSTER = "kubernetes:ray.io/v1:RayCluster"


def kubernetes_resources(result: PlanResult) -> list[RecordedResource]:
    return [r for r in result.resources if r.custom and r.type.startswith("kubernetes:")]


def by_kind(result: PlanResult, kind: str) -> list[RecordedResource]:
    return [r for r in result.resources if r.inputs.get("kind") == kind]


def early_resources(result: PlanResult) -> list[RecordedResource]:
    """Everything of the Kubernetes layer except the RayCluster, plus the bucket and its IAM."""
    layer = [r for r in kubernetes_resources(result) if r.type != RAY_CLUSTER]
    layer += result.of_type("gcp:storage/bucket:Bucket")
    layer += result.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")
    return layer


@pytest.mark.parametrize(("stack", "mode"), STANDARD)
def test_nothing_but_readiness_waits_for_the_gpu_pool(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    gpu_pool = result.one("gcp:container/nodePool:NodePool", "gpu-pool")
    layer = early_resources(result)
    assert len(layer) >= 10
    for resource in layer:
        assert not result.depends_on(resource, gpu_pool), resource.name
    # The RayCluster itself is created before the GPU nodes exist; Pulumi then waits for it to
    # become ready (pulumi.com/waitFor), which happens once the workers run on the GPU nodes.
    assert not result.depends_on(result.one(RAY_CLUSTER), gpu_pool)


@pytest.mark.parametrize(("stack", "mode"), STANDARD)
def test_kubernetes_objects_wait_for_the_cpu_pool(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    # The CPU pool is created inside the cluster operation (components/gke_cluster.py).
    cluster = result.one("gcp:container/cluster:Cluster")
    assert [p["name"] for p in cluster.inputs["nodePools"]] == ["cpu-pool"]
    for resource in kubernetes_resources(result):
        assert result.depends_on(resource, cluster), resource.name


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_every_kubernetes_object_uses_the_clusters_provider(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    provider = result.one("pulumi:providers:kubernetes")
    cluster = result.one("gcp:container/cluster:Cluster")
    for resource in kubernetes_resources(result):
        assert resource.provider_urn == provider.urn, resource.name
        assert result.depends_on(resource, cluster), resource.name


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_ray_cluster_waits_for_operator_storage_and_networking(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    ray = result.one(RAY_CLUSTER)
    needed = [
        result.one("kubernetes:helm.sh/v3:Release", "kuberay-release"),
        result.one("gcp:storage/bucket:Bucket"),
        result.one("gcp:storage/bucketIAMMember:BucketIAMMember"),
        *by_kind(result, "ServiceAccount"),
        *by_kind(result, "Secret"),
        # The head's log forwarder mounts its config (RunTelemetry).
        result.one("kubernetes:core/v1:ConfigMap", "run-telemetry-log-forwarder"),
        *by_kind(result, "PersistentVolume"),
        *by_kind(result, "PersistentVolumeClaim"),
        *by_kind(result, "DaemonSet"),
        *by_kind(result, "GKENetworkParamSet"),
        *by_kind(result, "Network"),
        *by_kind(result, "ComputeClass"),
        *by_kind(result, "ResourceClaimTemplate"),
        *by_kind(result, "ComputeDomain"),
    ]
    if stack == "a4x":
        needed.append(result.one("kubernetes:helm.sh/v3:Release", "dra-release"))
        assert len(by_kind(result, "ComputeDomain")) == 1
    if mode == "standard" and stack != "a4x":
        assert len(by_kind(result, "Network")) == 9
    if mode == "autopilot":
        assert len(by_kind(result, "ComputeClass")) == 1
    for resource in needed:
        assert result.depends_on(ray, resource), resource.name
    # ... but not for the data: the job (not the cluster) needs the prepared data.
    assert not result.depends_on(ray, result.one("kubernetes:batch/v1:Job", "data-prep-job"))


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_data_prep_waits_for_storage_only(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    job = result.one("kubernetes:batch/v1:Job", "data-prep-job")
    for kind in ("ServiceAccount", "Secret"):
        (needed,) = by_kind(result, kind)
        assert result.depends_on(job, needed), kind
    # Its script's ConfigMap (the head's log-forwarder ConfigMap is another one).
    volumes = job.inputs["spec"]["template"]["spec"]["volumes"]
    (script,) = [v["configMap"]["name"] for v in volumes if "configMap" in v]
    (config_map,) = [
        c for c in by_kind(result, "ConfigMap") if c.inputs["metadata"]["name"] == script
    ]
    assert result.depends_on(job, config_map)
    # Data prep mounts the uncached data claim only; the others are the Ray pods'.
    claims = {c.inputs["metadata"]["name"]: c for c in by_kind(result, "PersistentVolumeClaim")}
    assert set(claims) == {
        "training-bucket-pvc",
        "training-bucket-uncached-pvc",
        "training-checkpoints-pvc",
    }
    assert result.depends_on(job, claims["training-bucket-uncached-pvc"])
    # The bucket grant must exist before the pod mounts the bucket as the KSA.
    assert result.depends_on(job, result.one("gcp:storage/bucketIAMMember:BucketIAMMember"))
    for release in result.of_type("kubernetes:helm.sh/v3:Release"):
        assert not result.depends_on(job, release), release.name
    for other in (*by_kind(result, "DaemonSet"), result.one(RAY_CLUSTER)):
        assert not result.depends_on(job, other), other.name


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_operators_and_storage_are_independent_of_each_other(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    kuberay = result.one("kubernetes:helm.sh/v3:Release", "kuberay-release")
    bucket = result.one("gcp:storage/bucket:Bucket")
    for resource in (*by_kind(result, "DaemonSet"), bucket, *by_kind(result, "Job")):
        assert not result.depends_on(resource, kuberay), resource.name
    assert not result.depends_on(kuberay, bucket)
    if stack == "a4x":
        dra = result.one("kubernetes:helm.sh/v3:Release", "dra-release")
        assert not result.depends_on(kuberay, dra) and not result.depends_on(dra, kuberay)


@pytest.mark.parametrize(("stack", "mode"), [("a4", "standard"), ("a3u", "standard")])
def test_network_mapping_waits_for_the_vpcs_it_names(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    rdma_vpc = result.one("gcp:compute/network:Network", "gpu-net-rdma-vpc")
    subnets = [
        r for r in result.of_type("gcp:compute/subnetwork:Subnetwork") if "rdma-subnet" in r.name
    ]
    for param_set in by_kind(result, "GKENetworkParamSet"):
        assert result.depends_on(param_set, rdma_vpc)
        assert all(result.depends_on(param_set, subnet) for subnet in subnets)
    for network in by_kind(result, "Network"):
        name = network.inputs["metadata"]["name"]
        (param_set,) = [
            p for p in by_kind(result, "GKENetworkParamSet") if p.inputs["metadata"]["name"] == name
        ]
        assert result.depends_on(network, param_set)
