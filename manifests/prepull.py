"""The worker-image pre-puller: a DaemonSet on the GPU nodes of a Standard stack without image
streaming (config/image_streaming.py; A4X by default; components/image_prepull.py creates it).

Pattern: ai-on-gke best-practices/startup-latency.md "Use a preloader DaemonSet": it starts on a
new node before the GPU driver is installed, so the worker image's layers are on the node by the
time the Ray worker lands there. Here the image runs only as an init container with a no-op
command (`true`), and a pause container keeps the pod alive, so the big image holds no CPU or
memory after the pull.
"""

from __future__ import annotations

from config.settings import StackSettings
from manifests.capacity import queued_toleration
from manifests.common import ACCELERATOR_LABEL, Manifest, accepted_findings, labels
from manifests.nccl_installer import PAUSE_IMAGE

PREPULL_NAME = "verl-image-prepull"
PREPULL_NAMESPACE = "kube-system"
# Enough for `true` and for the pause container; requests equal limits.
_RESOURCES = {"cpu": "10m", "memory": "16Mi", "ephemeral-storage": "16Mi"}

_NO_ENDPOINT = "the pause container serves nothing and `true` exits at once: nothing to probe"
# checkov findings of the pre-puller, and why (docs/architecture.md, "checkov findings").
FINDINGS = {
    "CKV_K8S_8": _NO_ENDPOINT,
    "CKV_K8S_9": _NO_ENDPOINT,
    "CKV_K8S_15": "the worker image is pulled once per node by design (pinned tag, or digest "
    "via verl-gke:verlImage); pause is pinned by digest",
    "CKV_K8S_43": "the worker image is the training image as configured (verl-gke:verlImage "
    "takes a digest); pause is pinned by digest",
}
# Pulumi's await logic would wait for a pod on every GPU node, i.e. for each node's whole pull,
# on every later `pulumi up`: the pre-puller only saves time, nothing waits for its pods.
SKIP_AWAIT = {"pulumi.com/skipAwait": "true"}


def _container(name: str, image: str, command: list[str] | None) -> dict:
    container: dict = {
        "name": name,
        "image": image,
        "resources": {"requests": dict(_RESOURCES), "limits": dict(_RESOURCES)},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            # Above the host's user range (checkov CKV_K8S_40); `true` and pause need no user.
            "runAsUser": 65534,
            "runAsGroup": 65534,
        },
    }
    if command is not None:
        container["command"] = command
    return container


def _tolerations(settings: StackSettings) -> list[dict[str, str]]:
    tolerations = [t.manifest() for t in settings.profile.gpu_tolerations]
    if settings.capacity_plan.queued_provisioning:
        # Nodes of a ProvisioningRequest carry the queued-provisioning taint (manifests/
        # capacity.py); without this the pre-puller would never run on them.
        tolerations.append(queued_toleration())
    return tolerations


def prepull_daemon_set(settings: StackSettings) -> Manifest:
    """The pre-puller of a Standard stack whose GPU nodes do not stream the worker image."""
    # The image-pull plan pre-pulls on Standard only (config/image_streaming.pull_plan).
    if not settings.image_pull.prepull:
        raise ValueError(
            "the pre-puller is for Standard stacks without image streaming "
            f"({settings.profile.name} {settings.mode.value}, imageStreaming "
            f"{settings.image_pull.streaming})"
        )
    profile = settings.profile
    pod_labels = {"k8s-app": PREPULL_NAME}
    pod_spec = {
        "nodeSelector": {ACCELERATOR_LABEL: profile.gpu_type, "kubernetes.io/arch": profile.arch},
        # The taints of the GPU nodes (nvidia.com/gpu; kubernetes.io/arch on arm64), as the Ray
        # workers tolerate them; no node-critical priority: it may wait, it only saves time.
        "tolerations": _tolerations(settings),
        "automountServiceAccountToken": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        # Streaming off, so the image as configured (Docker Hub), not the repository's path.
        "initContainers": [_container("pull-worker-image", settings.verl_image, ["true"])],
        "containers": [_container("pause", PAUSE_IMAGE, None)],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": PREPULL_NAME,
            "namespace": PREPULL_NAMESPACE,
            "labels": {**pod_labels, **labels("image-prepull")},
            "annotations": {**accepted_findings(FINDINGS), **SKIP_AWAIT},
        },
        "spec": {
            "selector": {"matchLabels": pod_labels},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {"metadata": {"labels": pod_labels}, "spec": pod_spec},
        },
    }
