"""Every Kubernetes apiVersion the program and its Helm charts use is served by GKE by default at
the cluster's minimum version (1.34), enabled on the cluster, or a custom resource whose CRD a
chart or GKE installs.

Why a table and not the Kubernetes OpenAPI: kubernetes-validate's 1.34 schemas also describe
beta versions such as resource.k8s.io/v1beta1, which exist in 1.34 but which GKE serves only when
the cluster enables them. That gap is what broke the NVIDIA DRA driver chart 25.3.1 (issue 8).
The Helm charts are not rendered here (no Helm, no chart download); their templates were read at
the pinned tags and their objects are recorded below, keyed by chart version, so a chart bump
fails this test until the new templates have been read again.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from config.profiles import PROFILES
from config.settings import SettingsError, load_settings, version_tuple
from tests.program import COMBINATIONS, plan
from tests.support import schemas
from tools.offline_engine import PlanResult
from tools.plan import kubernetes_objects

# The Kubernetes version the table describes: the lowest the settings allow for any profile.
TABLE_VERSION = "1.34"

# Group-versions a GKE 1.34 control plane serves by default: the GA versions, which kube-apiserver
# enables unless told otherwise (kubernetes/kubernetes pkg/controlplane/instance.go,
# `stableAPIGroupVersionsEnabledByDefault` and `genericStableAPIGroupVersionsEnabledByDefault`;
# resource.k8s.io/v1 joined them in 1.34, when Dynamic Resource Allocation went GA), plus
# apiextensions.k8s.io/v1 (the CRD API, GA since 1.16). Beta versions introduced after 1.24 are
# off by default: KEP-3136 "Beta APIs Off by Default", and GKE's "Use Kubernetes beta APIs with
# GKE clusters" ("Starting with Kubernetes version 1.24, new beta APIs are, by default, disabled
# in new clusters"). So resource.k8s.io/v1beta1 and v1beta2 are deliberately absent.
SERVED_BY_DEFAULT = frozenset(
    {
        "v1",
        "admissionregistration.k8s.io/v1",
        "apiextensions.k8s.io/v1",
        "apps/v1",
        "authentication.k8s.io/v1",
        "authorization.k8s.io/v1",
        "autoscaling/v1",
        "autoscaling/v2",
        "batch/v1",
        "certificates.k8s.io/v1",
        "coordination.k8s.io/v1",
        "discovery.k8s.io/v1",
        "events.k8s.io/v1",
        "flowcontrol.apiserver.k8s.io/v1",
        "networking.k8s.io/v1",
        "node.k8s.io/v1",
        "policy/v1",
        "rbac.authorization.k8s.io/v1",
        "resource.k8s.io/v1",
        "scheduling.k8s.io/v1",
        "storage.k8s.io/v1",
    }
)
OFF_UNLESS_ENABLED = frozenset({"resource.k8s.io/v1beta1", "resource.k8s.io/v1beta2"})

# Custom resources, and who installs their CRD before the object is created.
CUSTOM_RESOURCES = {
    # KubeRay chart 1.7.0, crds/ray.io_rayclusters.yaml (served: v1).
    ("ray.io/v1", "RayCluster"): "ray.io_rayclusters.yaml",
    # NVIDIA DRA driver chart 25.3.2, crds/resource.nvidia.com_computedomains.yaml (served:
    # v1beta1; byte-identical to 25.3.1's).
    ("resource.nvidia.com/v1beta1", "ComputeDomain"): "resource.nvidia.com_computedomains.yaml",
    # GKE, with multi-networking enabled (gke-networking-api config/crds).
    ("networking.gke.io/v1", "GKENetworkParamSet"): "networking.gke.io_gkenetworkparamsets.yaml",
    ("networking.gke.io/v1", "Network"): "networking.gke.io_networks.yaml",
    # GKE custom compute classes (GKE >= 1.30.3; no public CRD file).
    ("cloud.google.com/v1", "ComputeClass"): "",
    # GKE, for queued provisioning (verl-gke:capacity flexStart on Standard): served as v1 from
    # 1.32.2-gke.1652000 (GKE "Run a large-scale workload with flex-start with queued
    # provisioning": "The version of the API, either v1 or v1beta1"); no public CRD file here.
    ("autoscaling.x-k8s.io/v1", "ProvisioningRequest"): "",
}

# What each pinned chart installs with this program's values, read at the chart's tag. DRA
# driver: NVIDIA/k8s-dra-driver-gpu deployments/helm/nvidia-dra-driver-gpu/; KubeRay:
# ray-project/kuberay helm-chart/kuberay-operator/. Objects behind conditions our values switch
# off are left out (noted per chart in the README).
CHART_OBJECTS: dict[tuple[str, str], frozenset[tuple[str, str]]] = {
    ("nvidia-dra-driver-gpu", "25.3.2"): frozenset(
        {
            ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),  # crds/computedomains
            ("v1", "ServiceAccount"),  # serviceaccount.yaml, compute-domain-daemon-...yaml
            ("rbac.authorization.k8s.io/v1", "ClusterRole"),  # clusterrole.yaml, cd-daemon SA
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
            ("apps/v1", "Deployment"),  # controller.yaml
            ("apps/v1", "DaemonSet"),  # kubeletplugin.yaml
            # deviceclass-compute-domain-{daemon,default-channel}.yaml: the first of
            # resource.k8s.io/v1, v1beta1, v1beta2 the cluster serves (_helpers.tpl
            # "nvidia-dra-driver-gpu.resourceApiVersion", commit 960b0e10).
            ("resource.k8s.io/v1", "DeviceClass"),
            ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"),
            ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"),
        }
    ),
    # The seed's chart, kept to show why it is refused: its two ComputeDomain DeviceClasses are
    # hard-coded resource.k8s.io/v1beta1 (NVIDIA/k8s-dra-driver-gpu issue #533).
    ("nvidia-dra-driver-gpu", "25.3.1"): frozenset(
        {
            ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
            ("v1", "ServiceAccount"),
            ("rbac.authorization.k8s.io/v1", "ClusterRole"),
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
            ("apps/v1", "Deployment"),
            ("apps/v1", "DaemonSet"),
            ("resource.k8s.io/v1beta1", "DeviceClass"),
            ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"),
            ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"),
        }
    ),
    ("kuberay-operator", "1.7.0"): frozenset(
        {
            ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),  # crds/ (4 CRDs)
            ("v1", "ServiceAccount"),  # serviceaccount.yaml
            ("v1", "Service"),  # service.yaml
            ("apps/v1", "Deployment"),  # deployment.yaml
            # leader_election_role(_binding).yaml and, with singleNamespaceInstall,
            # multiple_namespaces_role(binding).yaml instead of the ClusterRoles.
            ("rbac.authorization.k8s.io/v1", "Role"),
            ("rbac.authorization.k8s.io/v1", "RoleBinding"),
        }
    ),
}
RELEASE = "kubernetes:helm.sh/v3:Release"


def enabled_on_cluster(result: PlanResult) -> set[str]:
    """Group-versions the cluster enables beyond the defaults (`enable_k8s_beta_apis`)."""
    cluster = result.one("gcp:container/cluster:Cluster").inputs
    apis = (cluster.get("enableK8sBetaApis") or {}).get("enabledApis") or []
    return {api.rsplit("/", 1)[0] for api in apis}


def served(result: PlanResult, api_version: str, kind: str) -> bool:
    if (api_version, kind) in CUSTOM_RESOURCES:
        return True
    return api_version in SERVED_BY_DEFAULT or api_version in enabled_on_cluster(result)


def registered_api_versions(result: PlanResult) -> set[tuple[str, str]]:
    """(apiVersion, kind) of every Kubernetes object the program registers, checked against the
    type token too (a typed resource's token names its group/version)."""
    found = set()
    for resource, body in kubernetes_objects(result):
        _, group_version, kind = resource.type.split(":")
        group, version = group_version.split("/")
        assert (body["apiVersion"], body["kind"]) == (
            version if group == "core" else group_version,
            kind,
        ), resource.type
        found.add((body["apiVersion"], body["kind"]))
    kubernetes_types = {
        r.type for r in result.resources if r.type.startswith("kubernetes:") and r.type != RELEASE
    }
    # Nothing Kubernetes-typed escapes the enumeration above.
    assert kubernetes_types == {r.type for r, _ in kubernetes_objects(result)}
    return found


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_every_object_the_program_registers_is_served(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    used = registered_api_versions(result)
    assert ("v1", "Secret") in used  # the enumeration found the program's objects
    unserved = sorted(key for key in used if not served(result, *key))
    assert unserved == []


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_every_object_the_charts_install_is_served(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    releases = result.of_type(RELEASE)
    assert releases, "KubeRay comes from Helm in every stack"
    for release in releases:
        key = (release.inputs["chart"], release.inputs["version"])
        # A chart version whose templates nobody has read is not accepted.
        assert key in CHART_OBJECTS, f"{key}: read its templates and record them here"
        unserved = sorted(obj for obj in CHART_OBJECTS[key] if not served(result, *obj))
        assert unserved == [], key


GOOD_CONFIG = {
    "gcp:project": "my-project-123",
    "gcp:region": "us-central1",
    "verl-gke:zone": "us-central1-b",
    "verl-gke:reservation": "my-reservation",
    "verl-gke:hfToken": "hf_abc",
}


def settings_accept(stack: str, **changes: str) -> bool:
    try:
        load_settings(stack, {**GOOD_CONFIG, **changes}, offline=False)
    except SettingsError:
        return False
    return True


@pytest.mark.parametrize("stack", sorted(PROFILES))
def test_the_table_applies_to_every_cluster_the_settings_allow(stack: str) -> None:
    # verl-gke:kubernetesVersion is the cluster's version floor (checked again against the
    # version GKE reports); the table holds from 1.34 on, and nothing older is accepted.
    floor = tuple(int(p) for p in PROFILES[stack].min_kubernetes_version.split("."))
    assert floor >= tuple(int(p) for p in TABLE_VERSION.split("."))
    # The per-mode floor (GKE managed DRANET: 1.34.1-gke.1829001 Standard, 1.35.2-gke.1842000
    # Autopilot) is at or above the table's version in every mode.
    for mode in PROFILES[stack].modes:
        mode_floor = PROFILES[stack].kubernetes_floor(mode)
        assert version_tuple(mode_floor)[:2] >= floor[:2]
        changes = {"verl-gke:mode": mode.value, "verl-gke:kubernetesVersion": mode_floor}
        assert settings_accept(stack, **changes)
    assert not settings_accept(stack, **{"verl-gke:kubernetesVersion": "1.33"})


def test_no_beta_dra_api_is_enabled_and_none_is_assumed() -> None:
    assert not SERVED_BY_DEFAULT & OFF_UNLESS_ENABLED
    for stack, mode in COMBINATIONS:
        assert not enabled_on_cluster(plan(stack, mode)) & OFF_UNLESS_ENABLED


def test_the_seed_chart_is_the_one_with_unserved_objects_and_settings_refuse_it() -> None:
    # The settings floor (config/settings.py DRA_DRIVER_MIN_CHART) and this table agree: the
    # recorded chart that needs a beta API is exactly the one the A4X settings reject.
    result = plan("a4x", "standard")
    for (chart, version), objects in CHART_OBJECTS.items():
        if chart != "nvidia-dra-driver-gpu":
            continue
        all_served = all(served(result, *obj) for obj in objects)
        accepted = settings_accept("a4x", **{"verl-gke:draDriverChartVersion": version})
        assert accepted == all_served, version


def test_recorded_kinds_exist_in_the_kubernetes_api_at_1_34() -> None:
    # Guards the table against typos: every built-in kind it names has a 1.34 OpenAPI schema.
    builtin: set[tuple[str, str]] = set()
    for objects in CHART_OBJECTS.values():
        builtin |= {obj for obj in objects if obj[0] in SERVED_BY_DEFAULT | OFF_UNLESS_ENABLED}
    for api_version, kind in sorted(builtin):
        body: dict[str, Any] = {"apiVersion": api_version, "kind": kind}
        assert schemas.is_core_kind(body, TABLE_VERSION), (api_version, kind)
    assert not schemas.is_core_kind({"apiVersion": "resource.k8s.io/v1", "kind": "X"}, "1.34")


def test_custom_resources_use_a_version_their_crd_serves() -> None:
    crds_dir = schemas.required_crds_dir()
    for (api_version, kind), file_name in CUSTOM_RESOURCES.items():
        if not file_name:
            continue
        crd = yaml.safe_load((crds_dir / file_name).read_text())
        group, version = api_version.split("/")
        assert crd["spec"]["group"] == group and crd["spec"]["names"]["kind"] == kind
        served_versions = {v["name"] for v in crd["spec"]["versions"] if v.get("served")}
        assert version in served_versions, (api_version, kind, served_versions)
