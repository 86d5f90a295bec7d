"""What a GKE node leaves for pods (its allocatable), from the machine facts in the profile table.

A pod whose requests exceed the allocatable of every node it may land on stays Pending forever,
after the GPU nodes are paid for. The formulas below are GKE's published reservations; where a
number is a measurement or an estimate, the model rounds towards reserving more, so a request
that fits here fits on the real node.

Sources:
- CPU and memory reservations, the 100 MiB memory eviction threshold and the ephemeral-storage
  reservations: GKE "Plan node sizes" (docs.cloud.google.com/kubernetes-engine/docs/concepts/
  plan-node-sizes, sections "Memory and CPU reservations" and "Local ephemeral storage
  reservation"). The same CPU/memory brackets are coded in kubernetes/autoscaler
  cluster-autoscaler/cloudprovider/gce/reserved.go (cpuReservedMillicores, memoryReservedMiB).
- Memory the kernel keeps before kubelet counts capacity (physical/64 + 16 MiB + 64 MiB swiotlb
  + min(0.175 %, 248 MiB)): kubernetes/autoscaler cluster-autoscaler/cloudprovider/gce/
  reserved.go (CalculateKernelReserved), fitted there to measured GKE nodes.
- Filesystem overhead of local-SSD ephemeral storage, measured on GKE COS nodes: at most 1.85 %
  of the raw size (one disk; 24 disks: 0.83 %), same file
  (ephemeralStorageOnLocalSSDFilesystemOverheadInKiBByOSAndDiskCount). We take 2 %.
- Boot-disk OS partitions on COS (1.5635 % + 4.148 GiB): same file
  (CalculateOSReservedEphemeralStorage).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from config.profiles import MachineFacts

MIB = 1024**2
GIB = 1024**3

# kubelet evictionHard memory.available on GKE.
MEMORY_EVICTION_BYTES = 100 * MIB
# kubelet evictionHard nodefs.available on GKE: 10 % of the ephemeral-storage filesystem.
EPHEMERAL_EVICTION_RATIO = 0.10
# Upper bound of the measured filesystem overhead of local-SSD ephemeral storage (see above).
LOCAL_SSD_FILESYSTEM_OVERHEAD_RATIO = 0.02

# GKE's marginal reservation rates: (start of the bracket, rate for what lies above it).
_CPU_BRACKETS_CORES = ((0, 0.06), (1, 0.01), (2, 0.005), (4, 0.0025))
_MEMORY_BRACKETS_GIB = ((0, 0.25), (4, 0.20), (8, 0.10), (16, 0.06), (128, 0.02))


@dataclass(frozen=True)
class NodeResources:
    """Requests-side view of one node (or of what pods ask of one node)."""

    cpu_millicores: int
    memory_bytes: int
    ephemeral_storage_bytes: int

    def __add__(self, other: NodeResources) -> NodeResources:
        return NodeResources(
            self.cpu_millicores + other.cpu_millicores,
            self.memory_bytes + other.memory_bytes,
            self.ephemeral_storage_bytes + other.ephemeral_storage_bytes,
        )

    def fits_in(self, allocatable: NodeResources) -> bool:
        return (
            self.cpu_millicores <= allocatable.cpu_millicores
            and self.memory_bytes <= allocatable.memory_bytes
            and self.ephemeral_storage_bytes <= allocatable.ephemeral_storage_bytes
        )


def _bracketed(amount: float, brackets: tuple[tuple[float, float], ...]) -> float:
    reserved = 0.0
    for index, (start, rate) in enumerate(brackets):
        end = brackets[index + 1][0] if index + 1 < len(brackets) else math.inf
        reserved += max(0.0, min(amount, end) - start) * rate
    return reserved


def reserved_cpu_millicores(vcpus: int) -> int:
    """6 % of the first core, 1 % of the second, 0.5 % of cores 3-4, 0.25 % above 4."""
    # Rounded first: 0.0025 * 136 is not exact in binary floating point.
    return math.ceil(round(_bracketed(vcpus, _CPU_BRACKETS_CORES) * 1000, 6))


def reserved_memory_bytes(memory_gib: int) -> int:
    """GKE's kube-reserved (25 % of the first 4 GiB, 20 % of the next 4, 10 % of the next 8,
    6 % of the next 112, 2 % above 128 GiB), plus the eviction threshold and the kernel's own
    share, all taken from the machine's memory."""
    physical = memory_gib * GIB
    kube_reserved = _bracketed(memory_gib, _MEMORY_BRACKETS_GIB) * GIB
    kernel = physical / 64 + 16 * MIB + 64 * MIB + min(0.00175 * physical, 248 * MIB)
    return math.ceil(kube_reserved + kernel) + MEMORY_EVICTION_BYTES


def local_ssd_ephemeral_allocatable_bytes(disks: int, gib_per_disk: int) -> int:
    """Ephemeral storage on local SSDs: GKE reserves 50, 75 or 100 GiB for 1, 2 or 3+ disks,
    and kubelet evicts below 10 % free."""
    if disks <= 0:
        raise ValueError("local-SSD ephemeral storage needs at least one disk")
    capacity = disks * gib_per_disk * GIB * (1 - LOCAL_SSD_FILESYSTEM_OVERHEAD_RATIO)
    system_reservation = {1: 50, 2: 75}.get(disks, 100) * GIB
    return math.floor(capacity * (1 - EPHEMERAL_EVICTION_RATIO) - system_reservation)


def boot_disk_ephemeral_allocatable_bytes(disk_gb: int) -> int:
    """Ephemeral storage on the boot disk (no local-SSD config): GKE reserves
    min(50 %, 6 GiB + 35 %, 100 GiB) of the disk, and kubelet evicts below 10 % free."""
    disk = disk_gb * GIB
    capacity = disk - (0.015635 * disk + 4.148 * GIB)
    system_reservation = min(0.5 * disk, 6 * GIB + 0.35 * disk, 100 * GIB)
    return max(0, math.floor(capacity * (1 - EPHEMERAL_EVICTION_RATIO) - system_reservation))


def node_allocatable(
    machine: MachineFacts, *, ephemeral_on_local_ssd: bool, boot_disk_gb: int
) -> NodeResources:
    """The allocatable of one GPU node of this machine type."""
    ephemeral = (
        local_ssd_ephemeral_allocatable_bytes(machine.local_ssd_count, machine.local_ssd_gib)
        if ephemeral_on_local_ssd
        else boot_disk_ephemeral_allocatable_bytes(boot_disk_gb)
    )
    return NodeResources(
        cpu_millicores=machine.vcpus * 1000 - reserved_cpu_millicores(machine.vcpus),
        memory_bytes=machine.memory_gib * GIB - reserved_memory_bytes(machine.memory_gib),
        ephemeral_storage_bytes=ephemeral,
    )


# What else runs on a GPU node besides our pods and their GCS FUSE sidecars (counted per pod by
# gcsfuse_sidecar_requests): GKE's system DaemonSets (networking, logging, metadata server, GPU
# device plugin, DRANET/DRA drivers) and the NCCL installer. This is our budget, not a published
# number; a request set must fit under allocatable minus this budget.
SYSTEM_OVERHEAD = NodeResources(
    cpu_millicores=2000, memory_bytes=8 * GIB, ephemeral_storage_bytes=50 * GIB
)

# The GCS FUSE webhook injects its sidecar into a pod annotated `gke-gcsfuse/volumes: "true"`,
# with resources from the pod's `gke-gcsfuse/<resource>-request` / `-limit` annotations
# (gcs-fuse-csi-driver pkg/webhook/config.go prepareConfig and populateResource, at 5fcdc04a).
# Its defaults are the webhook's flags (cmd/webhook/main.go: sidecar-cpu-request 250m,
# sidecar-memory-request 256Mi, sidecar-ephemeral-storage-request 5Gi).
GCSFUSE_ANNOTATION_PREFIX = "gke-gcsfuse/"
GCSFUSE_INJECT_ANNOTATION = "gke-gcsfuse/volumes"
GCSFUSE_SIDECAR_DEFAULT_REQUESTS = {"cpu": "250m", "memory": "256Mi", "ephemeral-storage": "5Gi"}

_QUANTITY = re.compile(r"^(?P<number>[0-9]+(?:\.[0-9]+)?)(?P<suffix>m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
_QUANTITY_FACTORS = {
    None: 1,
    "m": 0.001,
    "k": 1000,
    "M": 1000**2,
    "G": 1000**3,
    "T": 1000**4,
    "Ki": 1024,
    "Mi": 1024**2,
    "Gi": 1024**3,
    "Ti": 1024**4,
}


def quantity(value: str) -> float:
    """A Kubernetes resource quantity ("250m", "14Gi", "2") as a number of units."""
    match = _QUANTITY.match(value)
    if not match:
        raise ValueError(f"not a Kubernetes quantity: {value!r} (e.g. 250m, 2, 14Gi)")
    return float(match["number"]) * _QUANTITY_FACTORS[match["suffix"]]


def _sidecar_request(annotations: Mapping[str, str], resource: str) -> str:
    """populateResource, request side: no annotation or a zero limit: the default request; only
    a limit: the limit; a request: the request (a zero one is then left out of the spec)."""
    request = annotations.get(f"{GCSFUSE_ANNOTATION_PREFIX}{resource}-request")
    limit = annotations.get(f"{GCSFUSE_ANNOTATION_PREFIX}{resource}-limit")
    if request is not None:
        return request
    if limit is None or quantity(limit) == 0:
        return GCSFUSE_SIDECAR_DEFAULT_REQUESTS[resource]
    return limit


def gcsfuse_sidecar_requests(annotations: Mapping[str, str]) -> NodeResources:
    """What the injected GCS FUSE sidecar requests for a pod with these annotations (nothing
    when the pod asks for no injection). The webhook inserts it as the first init container with
    restartPolicy Always (a native sidecar; pkg/webhook/injection.go), so it adds to the pod's
    requests, beside its containers and every later init container."""
    if annotations.get(GCSFUSE_INJECT_ANNOTATION, "").lower() != "true":
        return NodeResources(0, 0, 0)
    return NodeResources(
        cpu_millicores=round(quantity(_sidecar_request(annotations, "cpu")) * 1000),
        memory_bytes=round(quantity(_sidecar_request(annotations, "memory"))),
        ephemeral_storage_bytes=round(quantity(_sidecar_request(annotations, "ephemeral-storage"))),
    )
