"""The cluster's security and observability baseline: who may reach the control plane, what the
nodes run as, and which GKE metrics are collected. Pure: no Pulumi.

Sources:
- Authorized networks: terraform-provider-google-beta v7.45.0 (bridged by pulumi-gcp 10.2.0)
  resource_container_cluster.go: `master_authorized_networks_config` absent sends
  `enabled: false` (the public endpoint takes any address); present, only `cidr_blocks` (and the
  nodes) reach it, plus every Google Cloud public IP unless `gcp_public_cidrs_access_enabled`
  is false (sent only when set; Cluster Toolkit gke-cluster sets it false by default); each
  `cidr_block` passes `validation.IsCIDRNetwork(0, 32)` (a network in canonical CIDR form with
  a prefix of at most 32 bits; an IPv6 range up to /32 passes it too). The program takes IPv4
  ranges only: this IPv4 single-stack cluster's endpoint is an IPv4 address, which no IPv6
  source reaches. Cluster Toolkit's A4X, A4 and A3 Ultra blueprints set
  `master_authorized_networks` from an `authorized_cidr`.
- Node service account: GKE "Configure GKE node service accounts": nodes need at least
  Kubernetes Engine Default Node Service Account (roles/container.defaultNodeServiceAccount) on
  the project; GKE "Use Image streaming": with a custom node service account, also
  roles/serviceusage.serviceUsageConsumer. GKE "Access scopes in GKE": a custom service account
  gets the cloud-platform scope when no scope is given; access is to be limited with IAM roles,
  not scopes.
- Metrics: GKE "Collect and view DCGM metrics": with DCGM metrics GKE installs DCGM-Exporter
  and Google-managed GPU drivers and sends the metrics to Managed Service for Prometheus; new
  clusters from 1.32.1-gke.1357000 get the package by default. GKE "Configure metrics
  collection": sending any metrics package requires the system metrics (SYSTEM_COMPONENTS).
  pulumi-gcp 10.2.0 ClusterMonitoringConfig.enable_components: KUBELET and CADVISOR need
  1.29.3-gke.1093000, JOBSET 1.32.1-gke.1357001. The component list is Cluster Toolkit
  gke-cluster's default `monitoring_components` plus DCGM (its `enable_dcgm_monitoring`).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from typing import Any

# --- control plane access ---------------------------------------------------------------------
# The provider bounds a cidr_block's prefix to 0..32 bits (IsCIDRNetwork(0, 32)); IPv4 only here.
MAX_PREFIX_BITS = 32


def parse_cidr_list(value: Any) -> list[str]:
    """`verl-gke:authorizedNetworks` as a list: a YAML/JSON list (structured config reaches the
    program as JSON text) or one string of comma- or space-separated ranges."""
    if value is None:
        return []
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except json.JSONDecodeError as error:
                raise ValueError(f"not a JSON list ({error.msg})") from None
        else:
            return [part for part in re.split(r"[,\s]+", text) if part]
    if isinstance(value, list | tuple):
        return [str(item).strip() for item in value if str(item).strip()]
    raise ValueError("expected CIDR ranges, e.g. 203.0.113.7/32,198.51.100.0/24")


def cidr_problem(value: str) -> tuple[str, str | None] | None:
    """Why the provider would refuse `value` as a cidr_block, and the range it would accept
    instead (None where there is none), or None when it is accepted."""
    if "/" not in value:
        try:
            address = ipaddress.ip_address(value)
        except ValueError:
            return "not an IPv4 range in CIDR notation (A.B.C.D/N)", None
        if address.version == 4:
            return "an address without a prefix length", f"{address}/32"
        return _IPV6, None
    try:
        network = ipaddress.ip_network(value, strict=False)
    except ValueError:
        return "not an IPv4 range in CIDR notation (A.B.C.D/N)", None
    if network.version == 6 or network.prefixlen > MAX_PREFIX_BITS:
        return _IPV6, None
    if str(network) != value:
        return f"not a network address (host bits set; the range is {network})", str(network)
    return None


_IPV6 = (
    "an IPv6 range; the cluster's endpoint is an IPv4 address, so only IPv4 ranges can match "
    "a client that reaches it"
)


def corrected_cidrs(values: list[str]) -> list[str]:
    """`values` with every refused range replaced by its accepted form, or dropped."""
    result: list[str] = []
    for value in values:
        problem = cidr_problem(value)
        fixed = value if problem is None else problem[1]
        if fixed is not None and fixed not in result:
            result.append(fixed)
    return result


def is_open_to_internet(cidrs: list[str]) -> bool:
    """No list (no authorized networks) or a list that contains 0.0.0.0/0."""
    return not cidrs or any(ipaddress.ip_network(c, strict=False).prefixlen == 0 for c in cidrs)


def open_endpoint_warning(key: str, cidrs: list[str]) -> str | None:
    """What the plan and `pulumi up` say when any address can reach the control plane."""
    if not is_open_to_internet(cidrs):
        return None
    why = "is not set" if not cidrs else "contains 0.0.0.0/0"
    return (
        f"WARNING: {key} {why}: the cluster's control-plane endpoint accepts connections from "
        f"any address on the internet (Kubernetes authentication still applies). Set it to the "
        f"IPv4 ranges of the machines that run `pulumi up` and tools.run, e.g. "
        f"pulumi config set --path '{key}[0]' 203.0.113.7/32 (your address; Pulumi.yaml declares "
        f"the key an array, so each range is one item: [1] for a second)"
    )


# --- node identity ----------------------------------------------------------------------------
NODE_ROLE = "roles/container.defaultNodeServiceAccount"
# GKE "Use Image streaming": nodes that run as a custom service account need Service Usage
# Consumer to stream (the Compute Engine default account holds it through Editor).
STREAMING_NODE_ROLE = "roles/serviceusage.serviceUsageConsumer"


def node_roles(image_streaming: bool) -> tuple[str, ...]:
    """The project roles of the nodes' service account."""
    return (NODE_ROLE, STREAMING_NODE_ROLE) if image_streaming else (NODE_ROLE,)

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
# IAM service account ids: RFC 1035, 6-30 characters (terraform-provider-google-beta
# resource_google_service_account.go: verify.ValidateRFC1035Name(6, 30)).
ACCOUNT_ID = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
ACCOUNT_ID_LENGTH = (6, 30)
_NODE_SUFFIX = "-nodes"


def node_account_id(cluster_name: str) -> str:
    """`<cluster>-nodes`; a cluster name too long for a service account id is shortened and
    keeps a digest of the full name, so two stacks never share one account."""
    full = f"{cluster_name}{_NODE_SUFFIX}"
    if len(full) <= ACCOUNT_ID_LENGTH[1]:
        return full
    digest = hashlib.sha256(cluster_name.encode()).hexdigest()[:6]
    head = cluster_name[: ACCOUNT_ID_LENGTH[1] - len(_NODE_SUFFIX) - len(digest) - 1].rstrip("-")
    return f"{head}-{digest}{_NODE_SUFFIX}"


# --- metrics ----------------------------------------------------------------------------------
SYSTEM_COMPONENTS = "SYSTEM_COMPONENTS"
DCGM = "DCGM"
MONITORING_COMPONENTS = (
    SYSTEM_COMPONENTS,
    "POD",
    "DAEMONSET",
    "DEPLOYMENT",
    "STATEFULSET",
    "STORAGE",
    "HPA",
    "CADVISOR",
    "KUBELET",
    "JOBSET",
    DCGM,
)
# The lowest GKE version each component needs (sources in the module docstring); DCGM's is the
# version from which GKE turns it on for new clusters, a bound that is certainly sufficient.
COMPONENT_MIN_VERSION = {
    "CADVISOR": "1.29.3-gke.1093000",
    "KUBELET": "1.29.3-gke.1093000",
    "JOBSET": "1.32.1-gke.1357001",
    DCGM: "1.32.1-gke.1357000",
}
