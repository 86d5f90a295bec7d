"""The NCCL gIB (RDMA) plugin installer DaemonSet (container-engine-accelerators/gpudirect-rdma).

GKE Standard only. Two upstream variants: x86 (`nccl-rdma-installer.yaml`)
and A4X arm64 (`nccl-rdma-installer-a4x.yaml`). The tutorial applies them from the moving
`master` branch; here the installer image is pinned (profile default,
`verl-gke:ncclInstallerImage` to override) and the pod spec is built in code.

Autopilot gets no installer: the tutorial's Autopilot flow (ComputeClass + DRANET) has
none, and its Ray workers install the gIB plugin into their own pod (an init container
and an emptyDir, manifests/ray_cluster.py), so nothing would read what a node-level installer
writes. GKE documents `nccl-rdma-installer-autopilot.yaml` only for the older multi-networking
Autopilot flow, and Autopilot rejects privileged pods that no installed allowlist matches
(docs/real-systems.md, "Autopilot and the NCCL installer").
"""

from __future__ import annotations

from config.profiles import Mode
from config.settings import StackSettings
from manifests.common import ACCELERATOR_LABEL, Manifest, accepted_findings, labels

INSTALLER_NAME = "nccl-rdma-installer"
INSTALLER_NAMESPACE = "kube-system"
PAUSE_IMAGE = (
    "gke.gcr.io/pause:3.8@sha256:880e63f94b145e46f1b1082bb71b85e21f16b99b180b9996407d61240ceb9830"
)
# Host directories the installer writes and the Ray workers read (hostPath on Standard).
HOST_GIB_DIR = "/home/kubernetes/bin/gib"
HOST_NVIDIA_DIR = "/home/kubernetes/bin/nvidia"
_CONTAINER_ROOT = "/usr/local/home/kubernetes/bin"


# pulumi-kubernetes awaits a DaemonSet's rollout on every node it selects, 10 minutes by default
# (provider/pkg/await/daemonset.go _defaultDaemonSetTimeout), unless the object carries this
# annotation. Up to 64 GPU nodes each pulling the installer can exceed that, and an awaited rollout
# orders nothing: GPU nodes that join later (flex-start, scale from zero) are not awaited either.
# Each Ray worker instead waits on its own node for the plugin (manifests/ray_cluster.py).
SKIP_AWAIT = {"pulumi.com/skipAwait": "true"}

_AS_PUBLISHED = "Google's installer as published (container-engine-accelerators)"
_AS_ROOT = "privileged root init container that writes into host directories"
# checkov findings of the installer, and why (docs/architecture.md, "checkov findings").
FINDINGS = {
    "CKV_K8S_8": "one-shot install in an init container; the pause container has no endpoint",
    "CKV_K8S_9": "one-shot install in an init container; the pause container has no endpoint",
    "CKV_K8S_10": _AS_PUBLISHED,
    "CKV_K8S_11": _AS_PUBLISHED,
    "CKV_K8S_12": _AS_PUBLISHED,
    "CKV_K8S_13": _AS_PUBLISHED,
    "CKV_K8S_15": "pinned tag (installer) and digest (pause); pulled once per node",
    "CKV_K8S_16": "writes the gIB plugin into the node's /home/kubernetes/bin",
    "CKV_K8S_17": _AS_PUBLISHED,
    "CKV_K8S_19": _AS_PUBLISHED,
    "CKV_K8S_20": _AS_ROOT,
    "CKV_K8S_22": _AS_ROOT,
    "CKV_K8S_23": _AS_ROOT,
    "CKV_K8S_28": _AS_ROOT,
    "CKV_K8S_29": _AS_ROOT,
    "CKV_K8S_30": _AS_ROOT,
    "CKV_K8S_31": _AS_ROOT,
    "CKV_K8S_37": _AS_ROOT,
    "CKV_K8S_38": _AS_PUBLISHED,
    "CKV_K8S_40": _AS_ROOT,
    "CKV_K8S_43": "installer pinned by tag (verl-gke:ncclInstallerImage takes a digest)",
}


def needs_installer(settings: StackSettings) -> bool:
    """Only Standard nodes get the node-level installer (see the module docstring)."""
    return settings.mode is Mode.STANDARD


# The last thing install_script writes, in the node's HOST_GIB_DIR, once both copies are done.
GIB_READY_FILE = ".installed"


def wait_for_plugin_script(gib_dir: str) -> str:
    """A worker's init container: wait until the installer has finished on this node."""
    marker = f"{gib_dir}/{GIB_READY_FILE}"
    return (
        f"until [ -f {marker} ]; do\n"
        f"  echo 'waiting for the NCCL installer: {marker}'; sleep 10\n"
        "done\n"
    )


def install_script() -> str:
    # Upstream dropped --install-nccl from the Standard and A4X installers (2026-05-06): the
    # training image brings NCCL.
    return (
        "set -ex\n"
        "/scripts/container_entry.sh install\n"
        f"cp -r /var/lib/gib/lib64/. {_CONTAINER_ROOT}/nvidia/lib64\n"
        f"cp -r /var/lib/gib/. {_CONTAINER_ROOT}/gib\n"
        f"touch {_CONTAINER_ROOT}/gib/{GIB_READY_FILE}\n"
        'echo "installation finishes"\n'
    )


def nccl_installer(settings: StackSettings) -> Manifest:
    """The installer DaemonSet of a Standard stack, in kube-system.

    Long because it is one declarative Kubernetes object."""
    if not needs_installer(settings):
        raise ValueError(
            f"{settings.mode.value} stacks get no NCCL installer DaemonSet: the Ray workers "
            "install the gIB plugin themselves"
        )
    profile = settings.profile
    pod_labels = {"name": INSTALLER_NAME, "k8s-app": INSTALLER_NAME}
    volumes = [
        {
            "name": "library-dir-host",
            "hostPath": {"path": f"{HOST_NVIDIA_DIR}/lib64", "type": "DirectoryOrCreate"},
        },
        {"name": "gib", "hostPath": {"path": HOST_GIB_DIR}},
    ]
    if profile.arch == "arm64":
        # As upstream's A4X variant: a `Directory` hostPath keeps the pod from starting before
        # GKE has installed the GPU driver on the node.
        volumes.append(
            {"name": "nvidia-dir", "hostPath": {"path": HOST_NVIDIA_DIR, "type": "Directory"}}
        )
    node_terms = [
        {"key": ACCELERATOR_LABEL, "operator": "In", "values": [profile.gpu_type]},
        {"key": "kubernetes.io/arch", "operator": "In", "values": [profile.arch]},
    ]
    pod_spec: dict = {
        # As upstream: the plugin must be on the node before any training pod starts there.
        "priorityClassName": "system-node-critical",
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": node_terms}]
                }
            }
        },
        # It must run on every GPU node whatever its taints.
        "tolerations": [{"operator": "Exists"}],
        "hostNetwork": True,
        "hostPID": True,
        "volumes": volumes,
        "initContainers": [
            {
                "image": settings.nccl_installer_image,
                "name": INSTALLER_NAME,
                "resources": {"requests": {"cpu": "150m"}},
                # It writes the plugin into host directories of the node.
                "securityContext": {"privileged": True},
                "volumeMounts": [
                    {"name": "library-dir-host", "mountPath": f"{_CONTAINER_ROOT}/nvidia/lib64"},
                    {"name": "gib", "mountPath": f"{_CONTAINER_ROOT}/gib"},
                ],
                "command": ["/bin/sh", "-c"],
                "args": [install_script()],
            }
        ],
        "containers": [{"image": PAUSE_IMAGE, "name": "pause"}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": INSTALLER_NAME,
            "namespace": INSTALLER_NAMESPACE,
            "labels": {"k8s-app": INSTALLER_NAME, **labels("nccl-installer")},
            "annotations": {**accepted_findings(FINDINGS), **SKIP_AWAIT},
        },
        "spec": {
            "selector": {"matchLabels": {"k8s-app": INSTALLER_NAME}},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {"metadata": {"labels": pod_labels}, "spec": pod_spec},
        },
    }
