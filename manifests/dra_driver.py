"""The NVIDIA DRA driver for GPUs and the ComputeDomain of the A4X workers (seed).

Multi-Node NVLink needs an IMEX channel in every worker; the driver's ComputeDomain controller
creates the channel ResourceClaimTemplate named in the ComputeDomain.
"""

from __future__ import annotations

from typing import Any

from config.settings import StackSettings
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
    """GKE admits system-critical pods outside kube-system only up to a ResourceQuota; the driver
    runs one kubelet plugin and one IMEX daemon per node plus a controller: 2N+1 (seed)."""
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": metadata(QUOTA_NAME, "dra-driver", NAMESPACE),
        "spec": {
            "hard": {"pods": str(2 * settings.gpu_nodes + 1)},
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


def compute_domain(settings: StackSettings) -> Manifest:
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": metadata(COMPUTE_DOMAIN, "dra-driver", settings.namespace),
        "spec": {
            "numNodes": settings.gpu_nodes,
            "channel": {"resourceClaimTemplate": {"name": COMPUTE_DOMAIN_CHANNEL}},
        },
    }
