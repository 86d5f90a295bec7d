"""Every Kubernetes apiVersion the program and its Helm charts use is served by GKE by default at
the cluster's minimum version (1.34), enabled on the cluster, or a custom resource whose CRD a
chart or GKE installs.

Why a table and not the Kubernetes OpenAPI: kubernetes-validate's 1.34 schemas also describe
beta versions such as resource.k8s.io/v1beta1, which exist in 1.34 but which GKE serves only when
the cluster enables them. That gap is what broke the NVIDIA DRA driver chart 25.3.1.
The Helm charts are not rendered here (no Helm, no chart download): what each chart version
installs was derived from its templates at its tag into tests/data/charts/ (source and command in
each file) and is evaluated with the program's values (tests/chart_objects.py), so a chart bump
fails this test until the new templates have been derived.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from config import known_values
from config.profiles import PROFILES
from config.settings import SettingsError, load_settings
from config.stack_values import version_tuple
from planning.offline_engine import PlanResult
from tests.chart_objects import chart_facts, installed_objects, read_versions
from tests.program import COMBINATIONS, plan
from tests.support import schemas
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
    # v1beta1; byte-identical to 25.3.1's). 25.12.0's only adds fields (channel.allocationMode,
    # default Single; status.nodes[].index/status): what we set is unchanged, spec still immutable.
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

RELEASE = "kubernetes:helm.sh/v3:Release"
DRA_CHART = "nvidia-dra-driver-gpu"


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


def chart_objects(result: PlanResult, release: Any) -> set[tuple[str, str]]:
    """What this release's chart installs with its values on this cluster; a chart version
    whose templates were not derived into tests/data/charts is not accepted."""
    key = (release.inputs["chart"], release.inputs["version"])
    facts = chart_facts(*key)
    assert facts, f"{key}: derive its objects (tests/data/charts/derive_chart_objects.py)"
    return installed_objects(
        facts,
        release.inputs.get("values") or {},
        lambda api: api in SERVED_BY_DEFAULT or api in enabled_on_cluster(result),
    )


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_every_object_the_charts_install_is_served(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    releases = result.of_type(RELEASE)
    assert releases, "KubeRay comes from Helm in every stack"
    for release in releases:
        objects = chart_objects(result, release)
        assert ("apps/v1", "Deployment") in objects  # the chart's operator/controller
        unserved = sorted(obj for obj in objects if not served(result, *obj))
        assert unserved == [], (release.inputs["chart"], release.inputs["version"])


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


def test_the_settings_accept_exactly_the_dra_charts_read_and_served() -> None:
    """Every DRA chart version the settings know is derived from its templates; the A4X settings
    accept it exactly when everything it installs with our values is served (config/settings.py
    DRA_DRIVER_MIN_CHART): 25.3.0/25.3.1 hard-code resource.k8s.io/v1beta1 DeviceClasses."""
    result = plan("a4x", "standard")
    (release,) = [r for r in result.of_type(RELEASE) if r.inputs["chart"] == DRA_CHART]
    assert set(known_values.DRA_DRIVER_CHART_VERSIONS) <= read_versions(DRA_CHART)
    for version in known_values.DRA_DRIVER_CHART_VERSIONS:
        release.inputs["version"] = version
        all_served = all(served(result, *obj) for obj in chart_objects(result, release))
        accepted = settings_accept("a4x", **{"verl-gke:draDriverChartVersion": version})
        assert accepted == all_served, version
    assert not settings_accept("a4x", **{"verl-gke:draDriverChartVersion": "25.3.1"})


def test_recorded_kinds_exist_in_the_kubernetes_api_at_1_34() -> None:
    # Guards the derived facts: every built-in kind a chart installs here has a 1.34 schema.
    builtin: set[tuple[str, str]] = set()
    for stack, mode in COMBINATIONS:
        result = plan(stack, mode)
        for release in result.of_type(RELEASE):
            objects = chart_objects(result, release)
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
