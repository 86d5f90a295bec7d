"""The NCCL gIB (RDMA) plugin installer DaemonSet (container-engine-accelerators/gpudirect-rdma).

Three upstream variants (tutorial-facts §11): x86 Standard (`nccl-rdma-installer.yaml`),
Autopilot (`nccl-rdma-installer-autopilot.yaml`) and A4X arm64 (`nccl-rdma-installer-a4x.yaml`).
The tutorial applies them from the moving `master` branch; here the installer image is pinned
(profile default, `verl-gke:ncclInstallerImage` to override) and the pod spec is built in code.
The container part is kept as upstream writes it, because GKE Autopilot admits this privileged
DaemonSet only in the shape Google publishes.
"""

from __future__ import annotations

from config.profiles import Mode
from config.settings import StackSettings
from manifests.common import ACCELERATOR_LABEL, Manifest, accepted_findings, labels

INSTALLER_NAME = "nccl-rdma-installer"
# Autopilot keeps user workloads out of kube-system, so its variant brings its own namespace.
AUTOPILOT_NAMESPACE = "rdma-system"
STANDARD_NAMESPACE = "kube-system"
PAUSE_IMAGE = (
    "gke.gcr.io/pause:3.8@sha256:880e63f94b145e46f1b1082bb71b85e21f16b99b180b9996407d61240ceb9830"
)
# Host directories the installer writes and the Ray workers read (hostPath on Standard).
HOST_GIB_DIR = "/home/kubernetes/bin/gib"
HOST_NVIDIA_DIR = "/home/kubernetes/bin/nvidia"
_CONTAINER_ROOT = "/usr/local/home/kubernetes/bin"


_AS_PUBLISHED = "Google's installer as published; Autopilot admits it only in that shape"
_AS_ROOT = "privileged root init container that writes into host directories"
# checkov findings of the installer, and why (README, "checkov findings").
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


def installer_namespace(settings: StackSettings) -> str:
    return AUTOPILOT_NAMESPACE if settings.mode is Mode.AUTOPILOT else STANDARD_NAMESPACE


def install_script(settings: StackSettings) -> str:
    # Upstream dropped --install-nccl from the Standard and A4X installers (2026-05-06): the
    # training image brings NCCL. The Autopilot installer still installs it.
    flags = " --install-nccl" if settings.mode is Mode.AUTOPILOT else ""
    return (
        "set -ex\n"
        f"/scripts/container_entry.sh install{flags}\n"
        f"cp -r /var/lib/gib/lib64/. {_CONTAINER_ROOT}/nvidia/lib64\n"
        f"cp -r /var/lib/gib/. {_CONTAINER_ROOT}/gib\n"
        'echo "installation finishes"\n'
    )


def nccl_installer(settings: StackSettings) -> list[Manifest]:
    """The objects to apply, in order: the Autopilot namespace (if any), then the DaemonSet."""
    profile = settings.profile
    namespace = installer_namespace(settings)
    autopilot = settings.mode is Mode.AUTOPILOT
    objects: list[Manifest] = []
    if autopilot:
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": namespace, "labels": {"name": namespace}},
            }
        )

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
                "args": [install_script(settings)],
            }
        ],
        "containers": [{"image": PAUSE_IMAGE, "name": "pause"}],
    }
    if not autopilot:
        # Autopilot reserves system priority classes for GKE's own workloads.
        pod_spec = {"priorityClassName": "system-node-critical", **pod_spec}

    objects.append(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {
                "name": INSTALLER_NAME,
                "namespace": namespace,
                "labels": {"k8s-app": INSTALLER_NAME, **labels("nccl-installer")},
                "annotations": accepted_findings(FINDINGS),
            },
            "spec": {
                "selector": {"matchLabels": {"k8s-app": INSTALLER_NAME}},
                "updateStrategy": {"type": "RollingUpdate"},
                "template": {"metadata": {"labels": pod_labels}, "spec": pod_spec},
            },
        }
    )
    return objects
