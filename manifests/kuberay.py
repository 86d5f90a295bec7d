"""The KubeRay operator from its Helm chart (seed), never the GKE Ray add-on (they conflict)."""

from __future__ import annotations

from typing import Any

from config.settings import StackSettings

RELEASE_NAME = "kuberay-operator"
CHART = "kuberay-operator"
CHART_REPO = "https://ray-project.github.io/kuberay-helm/"


def operator_values(settings: StackSettings) -> dict[str, Any]:
    # Namespaced RBAC, watching only the workload namespace (seed:
    # `--set singleNamespaceInstall=true --set "watchNamespace={${NAMESPACE}}"`).
    return {"singleNamespaceInstall": True, "watchNamespace": [settings.namespace]}
