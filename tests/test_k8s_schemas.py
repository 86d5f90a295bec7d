"""Every Kubernetes object the program registers is valid: core kinds against the Kubernetes API
schemas (strict) at the cluster's version, custom resources against their CRDs (strict)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from config.profiles import PROFILES
from tests.program import COMBINATIONS, plan
from tests.support import schemas
from tools.plan import kubernetes_objects

CUSTOM_KINDS = {
    ("ray.io/v1", "RayCluster"),
    ("resource.nvidia.com/v1beta1", "ComputeDomain"),
    ("networking.gke.io/v1", "GKENetworkParamSet"),
    ("networking.gke.io/v1", "Network"),
    ("cloud.google.com/v1", "ComputeClass"),
}
KUBERNETES_VERSION = "1.34"

# The core objects each stack/mode registers, by kind, so that strict validation provably covered
# each of them (a kind kubernetes-validate stopped recognising would silently drop out of a
# "checked >= N" count). Every stack/mode: the Ray ServiceAccount, the HF token Secret, a PV and a
# PVC for each of the three bucket mounts (training data cached for the workers, training data
# uncached for the head and data prep, checkpoints), the data-prep script, the rehearsal's scripts
# and the Ray log forwarder's ConfigMaps, the two data-prep Jobs and the rehearsal Job, their
# deny-ingress NetworkPolicies. Standard
# adds the NCCL RDMA installer DaemonSet (Autopilot installs it itself); Autopilot's DRANET NICs
# come from a ResourceClaimTemplate. A4X adds the verl image pre-puller DaemonSet (no image
# streaming on arm64), the DRA driver's Namespace and ResourceQuota, and its RDMA NIC claim
# template.
_COMMON_CORE = {
    "ServiceAccount": 1, "Secret": 1, "PersistentVolume": 3, "PersistentVolumeClaim": 3,
    "ConfigMap": 3, "Job": 3, "NetworkPolicy": 2,
}  # fmt: skip
CORE_KINDS: dict[tuple[str, str], dict[str, int]] = {
    ("a4x", "standard"): {
        **_COMMON_CORE, "DaemonSet": 2, "Namespace": 1, "ResourceQuota": 1,
        "ResourceClaimTemplate": 1,
    },
    ("a4", "standard"): {**_COMMON_CORE, "DaemonSet": 1},
    ("a3u", "standard"): {**_COMMON_CORE, "DaemonSet": 1},
    ("a4", "autopilot"): {**_COMMON_CORE, "ResourceClaimTemplate": 1},
    ("a3u", "autopilot"): {**_COMMON_CORE, "ResourceClaimTemplate": 1},
}  # fmt: skip


@pytest.fixture
def crds_dir() -> Path:
    """The CRD folder (skipped locally without it, a failure in CI: tests/support/require.py)."""
    return schemas.required_crds_dir()


def objects(stack: str, mode: str, **extra: str) -> list[dict]:
    return [body for _, body in kubernetes_objects(plan(stack, mode, **extra))]


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_every_object_is_a_core_kind_or_a_known_custom_resource(stack: str, mode: str) -> None:
    for body in objects(stack, mode):
        key = (body["apiVersion"], body["kind"])
        assert schemas.is_core_kind(body, KUBERNETES_VERSION) or key in CUSTOM_KINDS, key


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_core_objects_pass_strict_validation_at_the_cluster_version(stack: str, mode: str) -> None:
    # The lowest version the cluster may run: the floor verl-gke:kubernetesVersion (no version is
    # pinned; components/gke_cluster.py checks GKE's version against the floor).
    version = PROFILES[stack].min_kubernetes_version
    assert "minMasterVersion" not in plan(stack, mode).one("gcp:container/cluster:Cluster").inputs
    checked: Counter[str] = Counter()
    for body in objects(stack, mode):
        if schemas.is_core_kind(body, version):
            schemas.validate_core(body, version)
            checked[body["kind"]] += 1
    # ServiceAccount, Secret, PV, PVC, ConfigMap, Job, NCCL installer at least.
    assert sum(checked.values()) >= 7
    assert dict(checked) == CORE_KINDS[(stack, mode)]


def test_resource_claim_templates_need_kubernetes_1_34() -> None:
    # resource.k8s.io/v1 exists from 1.34: the minimum version the settings enforce.
    template = next(b for b in objects("a4x", "standard") if b["kind"] == "ResourceClaimTemplate")
    schemas.validate_core(template, "1.34")
    assert not schemas.is_core_kind(template, "1.33")


def test_strict_core_validation_rejects_a_misspelt_field() -> None:
    job = next(b for b in objects("a4", "standard") if b["kind"] == "Job")
    job["spec"]["template"]["spec"]["containers"][0]["commnd"] = ["true"]
    with pytest.raises(schemas.kubernetes_validate.ValidationError):
        schemas.validate_core(job, KUBERNETES_VERSION)


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_custom_resources_match_their_crds(stack: str, mode: str, crds_dir: Path) -> None:
    customs = [b for b in objects(stack, mode) if (b["apiVersion"], b["kind"]) in CUSTOM_KINDS]
    assert any(b["kind"] == "RayCluster" for b in customs)
    for body in customs:
        errors = schemas.custom_resource_errors(body, crds_dir)
        assert errors == [], f"{body['kind']} {body['metadata']['name']}: {errors}"


def test_crd_validation_is_strict(crds_dir: Path) -> None:
    ray = next(b for b in objects("a4x", "standard") if b["kind"] == "RayCluster")
    ray["spec"]["workerGroupSpecs"][0]["minReplica"] = 4
    ray["spec"]["workerGroupSpecs"][0]["replicas"] = "four"
    errors = schemas.custom_resource_errors(ray, crds_dir)
    assert any("'minReplica' was unexpected" in e for e in errors)
    assert any("'four' is not of type 'integer'" in e for e in errors)


def test_every_crd_the_program_uses_is_present(crds_dir: Path) -> None:
    known = schemas.known_custom_kinds(crds_dir)
    assert CUSTOM_KINDS - {("cloud.google.com/v1", "ComputeClass")} <= known


def test_compute_class_shape_is_checked() -> None:
    compute_class = next(b for b in objects("a4", "autopilot") if b["kind"] == "ComputeClass")
    assert schemas.custom_resource_errors(compute_class, schemas.crds_dir()) == []
    compute_class["spec"]["priorities"][0]["acceleratorNetworkProfiles"] = "auto"
    compute_class["spec"]["priorities"][0]["gpu"]["count"] = "8"
    errors = schemas.custom_resource_errors(compute_class, schemas.crds_dir())
    assert any("'acceleratorNetworkProfiles' was unexpected" in e for e in errors)
    assert any("'8' is not of type 'integer'" in e for e in errors)


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_node_selector_values_are_strings(stack: str, mode: str) -> None:
    # The tutorial's `gke-accelerator-count: 8` (an int) is rejected by the API server.
    for body in objects(stack, mode):
        for path, value in schemas.walk(body):
            if path.endswith("nodeSelector"):
                assert all(isinstance(v, str) for v in value.values()), (body["kind"], path)
