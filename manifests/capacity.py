"""Capacity outside a reservation, in the Kubernetes layer (config/capacity.py decides).

- All nodes or none (Standard flex-start): a ProvisioningRequest of class
  `queued-provisioning.gke.io` for the N GPU workers, with the PodTemplate it counts in; the
  workers consume it through two annotations and tolerate the `cloud.google.com/gke-queued` taint
  GKE puts on queued-provisioning nodes. Shape from GKE "Run a large-scale workload with
  flex-start with queued provisioning" (the PodTemplate's own metadata label
  `cloud.google.com/apply-warden-policies: "true"`, which GKE needs to compute the nodes'
  resources from the template; nodeSelector `cloud.google.com/gke-flex-start`,
  `spec.provisioningClassName`, `spec.parameters.maxRunDurationSeconds` as a string,
  `spec.podSets[].{count, podTemplateRef}`); the pod annotations are the ones that page and the
  cluster autoscaler name (k8s.io/autoscaler cluster-autoscaler/apis/provisioningrequest/
  autoscaling.x-k8s.io/v1/types.go ProvisioningRequestPodAnnotationKey,
  ProvisioningClassPodAnnotationKey: `autoscaling.x-k8s.io/consume-provisioning-request`,
  `autoscaling.x-k8s.io/provisioning-class-name`; the `cluster-autoscaler.kubernetes.io/` keys
  are the deprecated ones);
  the toleration as in Google's kubernetes-engine-samples ai-ml/gke-ray/tpu/dws and Cluster
  Toolkit's queued-provisioning example.
- GPUs released when the run ends: KubeRay's in-tree autoscaler (`enableInTreeAutoscaling`,
  `autoscalerOptions.idleTimeoutSeconds`) with the worker group at `minReplicas: 0`; the group
  starts at N replicas so the workers (and the N-node request) exist before the job does.
"""

from __future__ import annotations

import copy
from typing import Any

from config.capacity import IDLE_TIMEOUT_SECONDS, MAX_RUN_DURATION_SECONDS
from config.image_streaming import registry_image
from config.settings import StackSettings
from manifests.common import ACCELERATOR_LABEL, Manifest, equal_requests_and_limits, metadata

PROVISIONING_REQUEST_API = "autoscaling.x-k8s.io/v1"
QUEUED_PROVISIONING_CLASS = "queued-provisioning.gke.io"
CONSUME_ANNOTATION = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS_ANNOTATION = "autoscaling.x-k8s.io/provisioning-class-name"
QUEUED_TAINT = "cloud.google.com/gke-queued"
FLEX_START_LABEL = "cloud.google.com/gke-flex-start"
WARDEN_LABEL = "cloud.google.com/apply-warden-policies"


def request_name(settings: StackSettings) -> str:
    return f"{settings.profile.ray_cluster_name}-gpu-capacity"


def _worker_node_selector(settings: StackSettings) -> dict[str, str]:
    # The cluster has one GPU pool, so its accelerator label names it.
    return {ACCELERATOR_LABEL: settings.profile.gpu_type, FLEX_START_LABEL: "true"}


def queued_toleration() -> dict[str, str]:
    """Tolerates the taint GKE puts on nodes of a ProvisioningRequest."""
    return {"key": QUEUED_TAINT, "operator": "Exists", "effect": "NoSchedule"}


def pod_template(settings: StackSettings) -> Manifest:
    """What one GPU worker asks for, as the ProvisioningRequest counts it."""
    profile = settings.profile
    shape = profile.ray_workers[settings.mode]
    meta = metadata(request_name(settings), "gpu-capacity", settings.namespace)
    meta["labels"] = {**meta.get("labels", {}), WARDEN_LABEL: "true"}
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": meta,
        "template": {
            "spec": {
                "nodeSelector": _worker_node_selector(settings),
                "tolerations": [
                    *(t.manifest() for t in profile.gpu_tolerations),
                    queued_toleration(),
                ],
                "containers": [
                    {
                        "name": "gpu-worker",
                        # The worker image as the workers pull it (streamed: the repository).
                        "image": registry_image(settings.verl_image, settings.image_pull),
                        "resources": equal_requests_and_limits(
                            {
                                "cpu": shape.cpu,
                                "memory": shape.memory,
                                "nvidia.com/gpu": str(profile.gpus_per_node),
                                "ephemeral-storage": shape.ephemeral_storage,
                            }
                        ),
                    }
                ],
            },
        },
    }


def request_body(namespace: str, name: str, template: str, count: int) -> Manifest:
    """A ProvisioningRequest for `count` pods of the PodTemplate `template`. The stack's request
    (below) and the runner's requests after a node loss or scale-to-zero (runner_capacity) are
    both this body: same class, parameters and PodTemplate."""
    return {
        "apiVersion": PROVISIONING_REQUEST_API,
        "kind": "ProvisioningRequest",
        "metadata": metadata(name, "gpu-capacity", namespace),
        "spec": {
            "provisioningClassName": QUEUED_PROVISIONING_CLASS,
            "parameters": {"maxRunDurationSeconds": str(MAX_RUN_DURATION_SECONDS)},
            "podSets": [{"count": count, "podTemplateRef": {"name": template}}],
        },
    }


def provisioning_request(settings: StackSettings) -> Manifest:
    """All gpuNodes workers' nodes in one request: granted together or not at all."""
    name = request_name(settings)
    return request_body(settings.namespace, name, name, settings.gpu_nodes)


def runner_capacity(settings: StackSettings, worker_group: str) -> dict[str, Any]:
    """What the job's runner needs to ask for GPU nodes again (payloads/export/provreq.py): the
    request body it copies (it sets only the name, the count and its own label), the
    RayCluster and worker group whose template annotation it points at the new request, and the
    GPUs of one node (to count the nodes missing)."""
    return {
        "request": provisioning_request(settings),
        "ray_cluster": settings.profile.ray_cluster_name,
        "worker_group": worker_group,
        "consume_annotation": CONSUME_ANNOTATION,
        "gpus_per_node": settings.profile.gpus_per_node,
    }


def runner_role_name(settings: StackSettings) -> str:
    return f"{settings.profile.ray_cluster_name}-capacity-runner"


def runner_role(settings: StackSettings) -> Manifest:
    """Exactly what the runner's calls need (payloads/export/provreq.py): create, list and
    delete its ProvisioningRequests, get the one the workers consume; get and patch the
    RayCluster (the worker template's annotation); list the worker pods (which requests they
    consume) and delete an unscheduled one that consumes a spent request."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata(runner_role_name(settings), "gpu-capacity", settings.namespace),
        "rules": [
            {
                "apiGroups": [PROVISIONING_REQUEST_API.split("/")[0]],
                "resources": ["provisioningrequests"],
                "verbs": ["create", "get", "list", "delete"],
            },
            {
                "apiGroups": ["ray.io"],
                "resources": ["rayclusters"],
                "resourceNames": [settings.profile.ray_cluster_name],
                "verbs": ["get", "patch"],
            },
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "delete"]},
        ],
    }


def runner_role_binding(settings: StackSettings) -> Manifest:
    """The Role for the pods' service account (the head's; the workers share it)."""
    name = runner_role_name(settings)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": metadata(name, "gpu-capacity", settings.namespace),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [
            {"kind": "ServiceAccount", "name": settings.ksa_name, "namespace": settings.namespace}
        ],
    }


def worker_replicas(settings: StackSettings) -> dict[str, int]:
    """The GPU worker group's replica counts, decided here only: gpuNodes workers, kept inside a
    reservation (min = max = gpuNodes); outside one the group starts at gpuNodes and KubeRay's
    autoscaler may take it to 0 when idle (minReplicas 0)."""
    floor = 0 if settings.capacity_plan.scale_to_zero else settings.gpu_nodes
    return {
        "replicas": settings.gpu_nodes,
        "minReplicas": floor,
        "maxReplicas": settings.gpu_nodes,
    }


def with_capacity(settings: StackSettings, spec: dict[str, Any], group_name: str) -> dict[str, Any]:
    """The RayCluster spec for the stack's capacity mode (a copy; inside a reservation, as is)."""
    plan = settings.capacity_plan
    if not plan.scale_to_zero:
        return spec
    spec = copy.deepcopy(spec)
    spec["enableInTreeAutoscaling"] = True
    spec["autoscalerOptions"] = {
        "idleTimeoutSeconds": IDLE_TIMEOUT_SECONDS,
        "upscalingMode": "Default",
    }
    for group in spec["workerGroupSpecs"]:
        if group["groupName"] != group_name:
            continue
        if plan.queued_provisioning:
            template = group["template"]
            template["metadata"].setdefault("annotations", {}).update(
                {
                    CONSUME_ANNOTATION: request_name(settings),
                    CLASS_ANNOTATION: QUEUED_PROVISIONING_CLASS,
                }
            )
            template["spec"]["nodeSelector"] = {
                **template["spec"].get("nodeSelector", {}),
                **_worker_node_selector(settings),
            }
            template["spec"].setdefault("tolerations", []).append(queued_toleration())
    return spec


def compute_class_capacity(settings: StackSettings) -> dict[str, object]:
    """The ComputeClass priority fields of the capacity mode (Autopilot, manifests/dranet.py).

    Reservations are added by dranet.compute_class itself (unchanged); spot is a priority field
    of the ComputeClass CRD reference; flex-start is `flexStart.enabled` (seen in public
    ComputeClasses, config/profiles.py)."""
    plan = settings.capacity_plan
    if plan.spot:
        return {"spot": True}
    if plan.flex_start:
        return {"flexStart": {"enabled": True}}
    return {}
