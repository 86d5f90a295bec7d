"""The cluster's security and observability baseline against the real systems' rules.

Sources (config/cluster_security.py has the quotes):
- terraform-provider-google-beta v7.45.0 (bridged by pulumi-gcp 10.2.0),
  resource_container_cluster.go: an absent `master_authorized_networks_config` is sent as
  `enabled: false` (any address reaches the public endpoint); a present block admits its
  `cidr_blocks`, each checked by `validation.IsCIDRNetwork(0, 32)`, and every Google Cloud
  public IP unless `gcp_public_cidrs_access_enabled` is sent false (expandMasterAuthorizedNetworks
  Config sends it only when set); resource_google_service_account.go: account_id is
  `verify.ValidateRFC1035Name(6, 30)`.
- GKE "Configure GKE node service accounts": nodes need roles/container.defaultNodeServiceAccount;
  GKE uses the Compute Engine default service account when none is set.
- GKE "Access scopes in GKE": a custom service account gets the cloud-platform scope.
- Artifact Registry "Integrate with GKE": nodes pull as the node service account.
- GKE "Collect and view DCGM metrics" and "Configure metrics collection": DCGM metrics go through
  Managed Service for Prometheus, need system metrics, and GKE installs Google-managed drivers.
"""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path
from typing import Any

import pytest

from config import cluster_security
from config.cluster_security import (
    ACCOUNT_ID,
    ACCOUNT_ID_LENGTH,
    COMPONENT_MIN_VERSION,
    DCGM,
    SYSTEM_COMPONENTS,
    node_account_id,
)
from config.profiles import PROFILES, Mode
from config.settings import SettingsError, StackSettings, load_settings
from config.stack_rules import MAX_CLUSTER_NAME
from config.stack_values import version_tuple
from planning import pulumi_config
from planning.offline_engine import REPO_ROOT, PlanResult, _declarations
from planning.pulumi_config import ConfigSet
from tests.program import COMBINATIONS, REAL, plan
from tools.plan import plan_report

CLUSTER = "gcp:container/cluster:Cluster"
NODE_POOL = "gcp:container/nodePool:NodePool"
ACCOUNT = "gcp:serviceaccount/account:Account"
PROJECT_IAM = "gcp:projects/iAMMember:IAMMember"
REPO_IAM = "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember"
KEY = "verl-gke:authorizedNetworks"
_COMMAND = re.compile(
    r"pulumi config (?:set (?:--path '(?P<path>[^']+)'|(?P<key>\S+)) (?P<value>\S+)"
    r"|rm (?:--path '(?P<rm_item>[^']+)\[(?P<index>\d+)\]'|(?P<rm>\S+)))"
    r" -s "
)
# Pulumi.yaml's declaration of the key.
DECLARED = _declarations(REPO_ROOT)[KEY]
# GKE "Configure GKE node service accounts" (minimum), "Use Image streaming" (Service Usage
# Consumer for a custom node account) and Artifact Registry (image pulls).
NODE_ROLES_ALLOWED = {
    "roles/container.defaultNodeServiceAccount",
    "roles/serviceusage.serviceUsageConsumer",
    "roles/artifactregistry.reader",
}


def provider_accepts(cidr: str) -> bool:
    """terraform-plugin-sdk validation.IsCIDRNetwork(0, 32): net.ParseCIDR succeeds, the value
    is the network's canonical form, and the prefix has 0..32 bits (of either family)."""
    if "/" not in cidr:
        return False
    try:
        network = ipaddress.ip_network(cidr, strict=True)
    except ValueError:
        return False
    return str(network) == cidr and 0 <= network.prefixlen <= 32


def reaches_ipv4_endpoint(cidr: str) -> bool:
    """The cluster is IPv4 single-stack: its endpoint is an IPv4 address, so only an IPv4
    source range can match a client that reaches it."""
    return ipaddress.ip_network(cidr, strict=False).version == 4


def settings_with(stack: str, value: str) -> StackSettings:
    return load_settings(stack, {**REAL, KEY: value}, offline=False).settings


# --- control-plane access ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    ["203.0.113.7", "203.0.113.7/24", "2001:db8::/64", "::/0", "10.0.0.0/33", "junk", "1.2.3/8"],
)
def test_ranges_that_cannot_admit_a_client_are_refused_before_anything_with_an_accepted_fix(
    value: str,
) -> None:
    # Refused by the provider, or accepted by it (::/0) yet matching no client of an IPv4
    # endpoint.
    assert not provider_accepts(value) or not reaches_ipv4_endpoint(value)
    # The list as Pulumi.yaml's array<string> holds it (the program reads it as JSON text).
    values: dict[str, Any] = {KEY: ["198.51.100.0/24", value]}
    config = {**REAL, KEY: json.dumps(values[KEY])}
    with pytest.raises(SettingsError) as caught:
        load_settings("a4", config, offline=False)
    message = str(caught.value)
    assert f"{KEY} = " in message and repr(value) in message
    # The fix's first alternative, each command applied as the CLI writes it.
    commands = list(_COMMAND.finditer(message.split("Fix: ", 1)[1].split(", or ")[0]))
    assert commands, message
    for command in commands:
        if command["rm"]:
            values.pop(command["rm"])
        elif command["rm_item"]:
            # `config rm --path 'KEY[i]'` removes the item, the later ones move up (pulumi/pulumi
            # sdk/go/common/resource/config/object.go, object.Delete).
            values[command["rm_item"]].pop(int(command["index"]))
        else:
            item = command["path"] or command["key"]
            change = ConfigSet(item, command["value"], path=bool(command["path"]))
            pulumi_config.apply(values, change)
    assert pulumi_config.type_problems("a4", {KEY: DECLARED}, values) == []
    config = {**REAL, **{key: json.dumps(v) for key, v in values.items()}}
    if KEY not in values:
        config.pop(KEY)
    accepted = load_settings("a4", config, offline=False).settings.authorized_networks
    assert all(provider_accepts(cidr) and reaches_ipv4_endpoint(cidr) for cidr in accepted)


@pytest.mark.parametrize(
    "value", ["203.0.113.7/32", "198.51.100.0/24,203.0.113.7/32", '["10.0.0.0/8"]', "0.0.0.0/0"]
)
def test_what_the_settings_accept_the_provider_accepts(value: str) -> None:
    cidrs = settings_with("a4", value).authorized_networks
    assert cidrs and all(provider_accepts(cidr) and reaches_ipv4_endpoint(cidr) for cidr in cidrs)


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_authorized_ranges_reach_the_cluster_in_both_modes(stack: str, mode: str) -> None:
    result = plan(stack, mode, **{"verl-gke__authorizedNetworks": "203.0.113.7/32,198.51.100.0/24"})
    config = result.one(CLUSTER).inputs["masterAuthorizedNetworksConfig"]
    assert [block["cidrBlock"] for block in config["cidrBlocks"]] == [
        "203.0.113.7/32",
        "198.51.100.0/24",
    ]
    # Only the list: unsent, GKE's default decides whether every Google Cloud public IP (any
    # customer's VM) also reaches the endpoint.
    assert config["gcpPublicCidrsAccessEnabled"] is False


def report(stack: str, mode: str, **config: str) -> tuple[PlanResult, str]:
    """The plan's printed report for a stack planned like a real deploy."""
    result = plan(stack, mode, **{key.replace(":", "__"): value for key, value in config.items()})
    overrides = {**REAL, "verl-gke:mode": mode, **config}
    return result, "\n".join(plan_report(result, overrides, strict=True))


def test_without_a_list_the_endpoint_stays_reachable_and_the_plan_says_it_is_open() -> None:
    # An empty block would admit only the nodes and shut out the deploying machine itself
    # (provider: a present block with no cidr_blocks disallows external access).
    result, text = report("a4", "standard")
    assert "masterAuthorizedNetworksConfig" not in result.one(CLUSTER).inputs
    assert f"WARNING: {KEY} is not set" in text


def test_the_plan_calls_0_0_0_0_slash_0_open_and_a_narrow_list_not() -> None:
    assert "contains 0.0.0.0/0" in report("a4", "standard", **{KEY: "0.0.0.0/0"})[1]
    assert f"WARNING: {KEY}" not in report("a4", "standard", **{KEY: "203.0.113.7/32"})[1]


# --- node identity ----------------------------------------------------------------------------


def node_configs(result: PlanResult) -> list[dict]:
    """Every place a node's service account is decided: the Standard pools (the CPU pool
    inside the cluster, the GPU pool) or Autopilot's auto-provisioning defaults."""
    cluster = result.one(CLUSTER).inputs
    if cluster.get("enableAutopilot"):
        return [cluster["clusterAutoscaling"]["autoProvisioningDefaults"]]
    pools = [pool["nodeConfig"] for pool in cluster["nodePools"]]
    return pools + [pool.inputs["nodeConfig"] for pool in result.of_type(NODE_POOL)]


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_every_node_runs_as_the_stacks_own_account(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    account = result.one(ACCOUNT)
    email = f"{account.inputs['accountId']}@acme-ml-prod.iam.gserviceaccount.com"
    configs = node_configs(result)
    assert len(configs) == (1 if mode == "autopilot" else 2)
    for config in configs:
        # Unset, GKE would use the Compute Engine default service account.
        assert config["serviceAccount"] == email
        assert not config["serviceAccount"].endswith("-compute@developer.gserviceaccount.com")
        assert config["oauthScopes"] == ["https://www.googleapis.com/auth/cloud-platform"]


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_the_node_account_holds_the_documented_minimum_and_nothing_broader(
    stack: str, mode: str
) -> None:
    result = plan(stack, mode)
    email = node_configs(result)[0]["serviceAccount"]
    member = f"serviceAccount:{email}"
    granted = {
        r.inputs["role"] for r in result.of_type(PROJECT_IAM) if r.inputs["member"] == member
    }
    assert "roles/container.defaultNodeServiceAccount" in granted
    streams = any(r.name == "images-streaming-api" for r in result.resources)
    assert ("roles/serviceusage.serviceUsageConsumer" in granted) == streams
    repo_roles = {
        r.inputs["role"] for r in result.of_type(REPO_IAM) if r.inputs["member"] == member
    }
    assert granted | repo_roles <= NODE_ROLES_ALLOWED
    # The cluster (and so every node) waits for the account's roles.
    grants = {r.urn for r in result.of_type(PROJECT_IAM) if r.inputs["member"] == member}
    assert grants <= result.one(CLUSTER).dependencies
    # Pods reach the bucket through Workload Identity, never as the node account.
    bucket_members = {
        r.inputs["member"] for r in result.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")
    }
    assert member not in bucket_members


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_every_artifact_registry_repository_the_nodes_pull_from_grants_them_reading(
    stack: str, mode: str
) -> None:
    result = plan(stack, mode)
    member = f"serviceAccount:{node_configs(result)[0]['serviceAccount']}"
    readable = {
        (r.inputs["location"], r.inputs["project"], r.inputs["repository"])
        for r in result.of_type(REPO_IAM)
        if r.inputs["member"] == member and r.inputs["role"] == "roles/artifactregistry.reader"
    }
    for image in pod_images(result):
        host, _, path = image.partition("/")
        if not host.endswith("-docker.pkg.dev") or not path.startswith("acme-ml-prod/"):
            continue  # Docker Hub, or another project's (public) repository
        location = host.removesuffix("-docker.pkg.dev")
        project, repository = path.split("/")[:2]
        assert (location, project, repository) in readable, image


def pod_images(result: PlanResult) -> set[str]:
    images: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("containers", "initContainers") and isinstance(value, list):
                    images.update(c["image"] for c in value if isinstance(c.get("image"), str))
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    for resource in result.resources:
        if resource.type.startswith("kubernetes:"):
            walk(resource.inputs)
    return images


def test_a_users_own_artifact_registry_image_is_readable_by_the_nodes() -> None:
    image = "us-central1-docker.pkg.dev/acme-ml-prod/team-images/verl:v0.6.1"
    result = plan("a4", "standard", **{"verl-gke__verlImage": image})
    member = f"serviceAccount:{node_configs(result)[0]['serviceAccount']}"
    assert any(
        r.inputs["repository"] == "team-images" and r.inputs["member"] == member
        for r in result.of_type(REPO_IAM)
    )


@pytest.mark.parametrize(
    "cluster_name",
    ["a", "verl-a4x", "x" * MAX_CLUSTER_NAME, "a-" * 20, "verl-a4x-long-cluster-name-1"],
)
def test_node_account_ids_are_valid_iam_ids(cluster_name: str) -> None:
    account_id = node_account_id(cluster_name)
    low, high = ACCOUNT_ID_LENGTH
    assert low <= len(account_id) <= high and ACCOUNT_ID.match(account_id), account_id


def test_long_cluster_names_keep_distinct_node_accounts() -> None:
    first, second = "verl-a4x-experiment-number-0001", "verl-a4x-experiment-number-0002"
    assert node_account_id(first) != node_account_id(second)


# --- GPU metrics ------------------------------------------------------------------------------


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_dcgm_metrics_have_what_gke_requires(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    monitoring = result.one(CLUSTER).inputs["monitoringConfig"]
    components = monitoring["enableComponents"]
    assert DCGM in components
    # A metrics package needs the system metrics; DCGM metrics go through managed Prometheus.
    assert SYSTEM_COMPONENTS in components
    assert monitoring["managedPrometheus"]["enabled"] is True
    # With DCGM metrics GKE installs Google-managed drivers: a pool must not opt out of them.
    for pool in result.of_type(NODE_POOL):
        for accelerator in pool.inputs["nodeConfig"]["guestAccelerators"]:
            version = accelerator["gpuDriverInstallationConfig"]["gpuDriverVersion"]
            assert version != "INSTALLATION_DISABLED"


@pytest.mark.parametrize("component", sorted(COMPONENT_MIN_VERSION))
@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_every_metrics_component_is_served_at_the_stacks_version_floor(
    stack: str, mode: str, component: str
) -> None:
    floor = PROFILES[stack].kubernetes_floor(Mode(mode))
    assert component in cluster_security.MONITORING_COMPONENTS
    assert version_tuple(COMPONENT_MIN_VERSION[component]) <= version_tuple(floor)


# --- what destroy leaves behind ---------------------------------------------------------------

README = Path(__file__).resolve().parent.parent / "README.md"


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_the_plan_names_the_networks_gke_creates_and_destroy_leaves(stack: str, mode: str) -> None:
    # GKE creates the RDMA networks wherever the stack does not (accelerator network profile
    # "auto": the A4X pool, Autopilot's DRANET ComputeClass) and keeps them after the cluster.
    result, text = report(stack, mode)
    ours = any(r.name == "gpu-net-rdma-vpc" for r in result.resources)
    assert ("gke-anp-" in text) is not ours
    if not ours:
        assert "--format='value(id)' | cut -c1-8" in text


def test_the_teardown_recipe_does_not_key_on_a_pod_range_name_without_a_hash() -> None:
    # The tutorial's recipe takes the hash from a GKE-managed pod range (gke-<cluster>-pods-<hash>);
    # this program names its range itself, so that suffix is no hash.
    policy = plan("a4x", "standard").one(CLUSTER).inputs["ipAllocationPolicy"]
    assert not re.search(r"-[0-9a-f]{8}$", policy["clusterSecondaryRangeName"])
    teardown = README.read_text().split("## Tear-down and re-deploys", 1)[1].split("\n## ", 1)[0]
    assert "clusterSecondaryRangeName" not in teardown
    assert "--format='value(id)' | cut -c1-8" in teardown and "^gke-anp-$HASH" in teardown
