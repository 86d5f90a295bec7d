"""RDMA NICs as DRA devices (GKE-managed DRANET, device class `mrdma.google.com`).

Autopilot A4/A3 Ultra (the tutorial's DRANET flow): a ComputeClass that makes GKE create the GPU
node pool with `acceleratorNetworkProfile: auto`, and the ResourceClaimTemplate `all-mrdma` that
hands a worker every RDMA NIC of its node. A4X Standard (seed `compute-domain-a4x.yaml`): the node
pool already has the profile; the template `verl-rdma-nic` claims one NIC, and each worker claims it
once per NIC of the node.
"""

from __future__ import annotations

import re

from config.settings import StackSettings
from manifests.capacity import compute_class_capacity
from manifests.common import Manifest, metadata

COMPUTE_CLASS_API = "cloud.google.com/v1"
MRDMA_DEVICE_CLASS = "mrdma.google.com"
ALL_MRDMA_CLAIM_TEMPLATE = "all-mrdma"
RDMA_NIC_CLAIM_TEMPLATE = "verl-rdma-nic"

_RESERVATION = re.compile(
    r"^(projects/(?P<project>[^/]+)/reservations/)?(?P<name>[^/]+)"
    r"(/reservationBlocks/(?P<block>[^/]+)(/reservationSubBlocks/(?P<sub_block>[^/]+))?)?$"
)


def compute_class_name(settings: StackSettings) -> str:
    # The tutorial names it `dranet-a4-computeclass-v3` for B200 and H200 alike.
    return f"dranet-{settings.profile.name}-computeclass"


def reservation_reference(settings: StackSettings) -> dict[str, object] | None:
    """The ComputeClass form of `verl-gke:reservation` (NAME, NAME/reservationBlocks/B,
    NAME/reservationBlocks/B/reservationSubBlocks/S or projects/P/reservations/NAME...): GKE
    ComputeClass CRD reference, `reservations.specific[].reservationBlock.reservationSubBlock`."""
    if settings.reservation is None:
        return None
    match = _RESERVATION.match(settings.reservation)
    if match is None:  # settings validation already rejects this; keep the error explicit
        raise ValueError(f"unparseable reservation {settings.reservation!r}")
    reference: dict[str, object] = {
        "name": match["name"],
        "project": match["project"] or settings.project,
    }
    if match["block"]:
        block: dict[str, object] = {"name": match["block"]}
        if match["sub_block"]:
            block["reservationSubBlock"] = {"name": match["sub_block"]}
        reference["reservationBlock"] = block
    return reference


def compute_class(settings: StackSettings) -> Manifest:
    profile = settings.profile
    priority: dict[str, object] = {
        "machineType": profile.machine_type,
        "gpu": {"count": profile.gpus_per_node, "type": profile.gpu_type},
        "acceleratorNetworkProfile": "auto",
        # flexStart / spot rung of verl-gke:capacity (manifests/capacity.py).
        **compute_class_capacity(settings),
    }
    reservation = reservation_reference(settings)
    if reservation is not None:
        priority["reservations"] = {"affinity": "Specific", "specific": [reservation]}
    return {
        "apiVersion": COMPUTE_CLASS_API,
        "kind": "ComputeClass",
        "metadata": metadata(compute_class_name(settings), "dranet"),
        "spec": {
            "nodePoolAutoCreation": {"enabled": True},
            "nodePoolConfig": {"dra": {"networking": {"enabled": True}}},
            "priorities": [priority],
        },
    }


def _claim_template(
    settings: StackSettings, name: str, request: str, exactly: dict[str, object]
) -> Manifest:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": metadata(name, "dranet", settings.namespace),
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": request,
                            "exactly": {"deviceClassName": MRDMA_DEVICE_CLASS, **exactly},
                        }
                    ]
                }
            }
        },
    }


def all_mrdma_claim_template(settings: StackSettings) -> Manifest:
    return _claim_template(
        settings, ALL_MRDMA_CLAIM_TEMPLATE, "req-mrdma", {"allocationMode": "All"}
    )


def rdma_nic_claim_template(settings: StackSettings) -> Manifest:
    return _claim_template(
        settings, RDMA_NIC_CLAIM_TEMPLATE, "nic", {"allocationMode": "ExactCount", "count": 1}
    )
