"""The NVIDIA DRA driver for GPUs and the ComputeDomain of the A4X workers (seed).

Multi-Node NVLink needs an IMEX channel in every worker; the driver's ComputeDomain controller
creates the channel ResourceClaimTemplate named in the ComputeDomain.
"""

from __future__ import annotations

from typing import Any

from config.settings import StackSettings
from config.stack_values import version_tuple
from manifests.common import ACCELERATOR_LABEL, Manifest, metadata

NAMESPACE = "nvidia-dra-driver-gpu"
RELEASE_NAME = "nvidia-dra-driver-gpu"
CHART = "nvidia-dra-driver-gpu"
CHART_REPO = "https://helm.ngc.nvidia.com/nvidia"
QUOTA_NAME = "nvidia-dra-driver-gpu-quota"
COMPUTE_DOMAIN = "verl-compute-domain"
COMPUTE_DOMAIN_CHANNEL = "verl-compute-domain-channel"


def driver_namespace() -> Manifest:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata(NAMESPACE, "dra-driver")}


def driver_quota(settings: StackSettings) -> Manifest:
    """GKE admits system-critical pods outside kube-system only up to a ResourceQuota scoped to
    those priority classes. Of the chart's pods (NVIDIA/k8s-dra-driver-gpu v25.12.0) only the
    kubelet plugin (a DaemonSet, one per GPU node here) and the controller (a Deployment of one)
    carry one (values.yaml: system-node-critical; the webhook, system-cluster-critical, is off by
    default); the IMEX daemons (templates/compute-domain-daemon.tmpl.yaml) carry none and are not
    counted. The controller's Deployment sets no strategy, so Kubernetes' RollingUpdate default
    (maxSurge 25%, rounded up: 1) starts its new pod before stopping the old one on an upgrade:
    N + 1 + 1."""
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": metadata(QUOTA_NAME, "dra-driver", NAMESPACE),
        "spec": {
            "hard": {"pods": str(settings.gpu_nodes + 2)},
            "scopeSelector": {
                "matchExpressions": [
                    {
                        "operator": "In",
                        "scopeName": "PriorityClass",
                        "values": ["system-node-critical", "system-cluster-critical"],
                    }
                ]
            },
        },
    }


def seed_values() -> dict[str, Any]:
    """Exactly the seed's `--set` flags."""
    return {
        "nvidiaDriverRoot": "/home/kubernetes/bin/nvidia",
        "resources": {"gpus": {"enabled": False}},
        "kubeletPlugin": {
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists"},
                {"key": "kubernetes.io/arch", "operator": "Exists"},
            ]
        },
    }


def driver_values(settings: StackSettings) -> dict[str, Any]:
    """The seed's values plus node affinities for GKE (as Cluster Toolkit's A4X blueprint sets
    them): the chart's defaults select NFD labels and control-plane nodes, which GKE nodes do
    not carry, so the pods would never schedule."""
    profile = settings.profile
    values = seed_values()
    values["controller"] = {"affinity": _required_node_terms([("nvidia.com/gpu", "DoesNotExist")])}
    values["kubeletPlugin"]["affinity"] = _required_node_terms(
        [
            (ACCELERATOR_LABEL, "In", profile.gpu_type),
            ("kubernetes.io/arch", "In", profile.arch),
        ]
    )
    return values


def _required_node_terms(expressions: list[tuple[str, ...]]) -> dict[str, Any]:
    match = []
    for key, operator, *values in expressions:
        expression: dict[str, Any] = {"key": key, "operator": operator}
        if values:
            expression["values"] = list(values)
        match.append(expression)
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": match}]
            }
        }
    }


# The driver release whose IMEX daemons find each other by DNS name by default (feature gate
# IMEXDaemonsWithDNSNames, Beta and on from 25.8: pkg/featuregates/featuregates.go at v25.12.0).
DNS_NAMES_FROM = (25, 8, 0)


def compute_domain_num_nodes(settings: StackSettings) -> int:
    """spec.numNodes. With DNS names it is deprecated and only feeds the status (the v25.12.0
    CRD's description: "recommended to be set to zero"; it gates nothing), so 0: a gpuNodes
    change then leaves the ComputeDomain as it is (new nodes' daemons join it) instead of
    replacing it (the spec is immutable) under running workloads. Before 25.8 it holds workload
    pods until that many IMEX daemons joined, so it must be the node count."""
    if version_tuple(settings.dra_driver_chart_version)[:3] >= DNS_NAMES_FROM:
        return 0
    return settings.gpu_nodes


def compute_domain(settings: StackSettings) -> Manifest:
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": metadata(COMPUTE_DOMAIN, "dra-driver", settings.namespace),
        "spec": {
            "numNodes": compute_domain_num_nodes(settings),
            "channel": {"resourceClaimTemplate": {"name": COMPUTE_DOMAIN_CHANNEL}},
        },
    }
