"""Every pod that must run on a GPU node fits that node's allocatable, in every stack and mode.

The requests come from the RayCluster the real program registers (offline run); the node's
allocatable comes from the machine facts in the profile table and GKE's reservation formulas
(config/node_capacity.py). A worker that does not fit stays Pending after the GPU nodes exist.
"""

from __future__ import annotations

from typing import Any

import pytest

from config.node_capacity import (
    GIB,
    SYSTEM_OVERHEAD,
    NodeResources,
    boot_disk_ephemeral_allocatable_bytes,
    gcsfuse_sidecar_requests,
    local_ssd_ephemeral_allocatable_bytes,
    node_allocatable,
    quantity,
    reserved_cpu_millicores,
    reserved_memory_bytes,
)
from config.profiles import PROFILES, Mode
from planning.offline_engine import PlanResult
from tests.program import COMBINATIONS, plan

RAY_CLUSTER = "kubernetes:ray.io/v1:RayCluster"
NODE_POOL = "gcp:container/nodePool:NodePool"



def container_requests(container: dict[str, Any]) -> NodeResources:
    requests = container.get("resources", {}).get("requests", {})
    return NodeResources(
        cpu_millicores=round(quantity(requests.get("cpu", "0")) * 1000),
        memory_bytes=round(quantity(requests.get("memory", "0"))),
        ephemeral_storage_bytes=round(quantity(requests.get("ephemeral-storage", "0"))),
    )


def pod_requests(pod_spec: dict[str, Any]) -> NodeResources:
    """What the scheduler reserves for a pod: the sum over its containers, or the largest init
    container where that is larger (Kubernetes "effective requests")."""
    total = NodeResources(0, 0, 0)
    for container in pod_spec["containers"]:
        total = total + container_requests(container)
    for init in pod_spec.get("initContainers", []):
        one = container_requests(init)
        total = NodeResources(
            max(total.cpu_millicores, one.cpu_millicores),
            max(total.memory_bytes, one.memory_bytes),
            max(total.ephemeral_storage_bytes, one.ephemeral_storage_bytes),
        )
    return total


def template_requests(template: dict[str, Any]) -> NodeResources:
    """A pod template's requests once admitted: its own, plus the GCS FUSE sidecar the webhook
    derives from its annotations (config/node_capacity.py gcsfuse_sidecar_requests)."""
    annotations = template.get("metadata", {}).get("annotations", {})
    return pod_requests(template["spec"]) + gcsfuse_sidecar_requests(annotations)


def ray_cluster(result: PlanResult) -> dict[str, Any]:
    return dict(result.one(RAY_CLUSTER).inputs)


def gpu_node_requests(result: PlanResult, stack: str) -> NodeResources:
    """The most that lands on one GPU node: one worker (anti-affinity keeps workers apart) and,
    where the head runs on the GPU nodes (A4X), the head beside it."""
    spec = ray_cluster(result)["spec"]
    (group,) = spec["workerGroupSpecs"]
    total = template_requests(group["template"])
    if PROFILES[stack].ray_head_on_gpu_nodes:
        total = total + template_requests(spec["headGroupSpec"]["template"])
    return total


def gpu_node_allocatable(result: PlanResult, stack: str, mode: str) -> NodeResources:
    profile = PROFILES[stack]
    if mode == Mode.STANDARD.value:
        # Our node pool decides where ephemeral storage lives: read what the program asked for.
        config = result.one(NODE_POOL, "gpu-pool").inputs["nodeConfig"]
        on_ssd = config.get("ephemeralStorageLocalSsdConfig", {}).get("localSsdCount") == (
            profile.machine.local_ssd_count
        )
    else:
        # Autopilot creates the nodes; for these machines GKE attaches the bundled local SSDs
        # as ephemeral storage by itself (the "automatic" count of its autoscaler table).
        on_ssd = True
    return node_allocatable(
        profile.machine, ephemeral_on_local_ssd=on_ssd, boot_disk_gb=profile.boot_disk_size_gb
    )


def describe(resources: NodeResources) -> str:
    return (
        f"cpu {resources.cpu_millicores / 1000:.2f}, memory "
        f"{resources.memory_bytes / GIB:.1f} GiB, ephemeral-storage "
        f"{resources.ephemeral_storage_bytes / GIB:.1f} GiB"
    )


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_gpu_node_pods_fit_the_node_with_room_for_the_system(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    requests = gpu_node_requests(result, stack)
    allocatable = gpu_node_allocatable(result, stack, mode)
    needed = requests + SYSTEM_OVERHEAD
    assert needed.fits_in(allocatable), (
        f"{stack}/{mode}: pods ({describe(requests)}) plus the system budget "
        f"({describe(SYSTEM_OVERHEAD)}) exceed the node's allocatable ({describe(allocatable)})"
    )


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_every_fuse_pod_gets_its_sidecar_counted(stack: str, mode: str) -> None:
    """The workers mount the bucket, so the webhook adds a sidecar: on Standard (limits "0") the
    webhook's default requests, on Autopilot the limits we set, copied into the requests."""
    (group,) = ray_cluster(plan(stack, mode))["spec"]["workerGroupSpecs"]
    sidecar = gcsfuse_sidecar_requests(group["template"]["metadata"]["annotations"])
    expected = {
        "standard": NodeResources(250, 256 * 1024**2, 5 * GIB),
        "autopilot": NodeResources(2000, 14 * GIB, 10 * GIB),
    }[mode]
    assert sidecar == expected


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_a_bigger_sidecar_request_makes_the_worker_not_fit(stack: str, mode: str) -> None:
    """Mutation: the sidecar's requests are part of what must fit. A sidecar memory request of
    what the node has left after the worker and the system budget, plus 1 GiB, does not fit."""
    result = plan(stack, mode)
    spec = ray_cluster(result)["spec"]
    (group,) = spec["workerGroupSpecs"]
    allocatable = gpu_node_allocatable(result, stack, mode)
    used = gpu_node_requests(result, stack) + SYSTEM_OVERHEAD
    spare = allocatable.memory_bytes - used.memory_bytes
    assert spare >= 0
    annotations = group["template"]["metadata"]["annotations"]
    current = gcsfuse_sidecar_requests(annotations).memory_bytes
    annotations["gke-gcsfuse/memory-request"] = f"{(current + spare) // 1024**2 + 1024}Mi"
    needed = gpu_node_requests(result, stack) + SYSTEM_OVERHEAD
    assert not needed.fits_in(allocatable)


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        # gcs-fuse-csi-driver pkg/webhook/config.go populateResource at 5fcdc04a.
        ({}, NodeResources(0, 0, 0)),  # no injection without gke-gcsfuse/volumes
        ({"gke-gcsfuse/volumes": "true"}, NodeResources(250, 256 * 1024**2, 5 * GIB)),
        (
            {
                "gke-gcsfuse/volumes": "true",
                "gke-gcsfuse/cpu-limit": "3",
                "gke-gcsfuse/memory-limit": "0",
            },
            NodeResources(3000, 256 * 1024**2, 5 * GIB),
        ),
        (
            {
                "gke-gcsfuse/volumes": "true",
                "gke-gcsfuse/cpu-limit": "4",
                "gke-gcsfuse/cpu-request": "500m",
                "gke-gcsfuse/memory-request": "1Gi",
                "gke-gcsfuse/ephemeral-storage-limit": "20Gi",
            },
            NodeResources(500, GIB, 20 * GIB),
        ),
    ],
)
def test_sidecar_requests_follow_the_webhooks_rules(
    annotations: dict[str, str], expected: NodeResources
) -> None:
    assert gcsfuse_sidecar_requests(annotations) == expected


EXPECTED_WORKER_REQUESTS = {
    # The tutorial's values, which fit once ephemeral storage is on the local SSDs.
    ("a4x", "standard"): ("120", "600Gi", "500Gi"),
    ("a4", "autopilot"): ("180", "2000Gi", "1000Gi"),
    ("a4", "standard"): ("220", "2800Gi", "1000Gi"),
    ("a3u", "autopilot"): ("180", "2000Gi", "1000Gi"),
    ("a3u", "standard"): ("220", "2800Gi", "1000Gi"),
}


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_worker_requests_are_the_tutorials(stack: str, mode: str) -> None:
    (group,) = ray_cluster(plan(stack, mode))["spec"]["workerGroupSpecs"]
    (worker,) = group["template"]["spec"]["containers"]
    cpu, memory, ephemeral = EXPECTED_WORKER_REQUESTS[(stack, mode)]
    assert worker["resources"]["requests"]["cpu"] == cpu
    assert worker["resources"]["requests"]["memory"] == memory
    assert worker["resources"]["requests"]["ephemeral-storage"] == ephemeral


@pytest.mark.parametrize(("stack", "mode"), [c for c in COMBINATIONS if c[1] == "standard"])
def test_boot_disk_alone_could_never_hold_the_worker(stack: str, mode: str) -> None:
    # The defect the local-SSD config fixes: on the 100 / 200 GB boot disk the worker's
    # ephemeral-storage request exceeds what GKE leaves allocatable.
    result = plan(stack, mode)
    profile = PROFILES[stack]
    on_boot_disk = boot_disk_ephemeral_allocatable_bytes(profile.boot_disk_size_gb)
    assert gpu_node_requests(result, stack).ephemeral_storage_bytes > on_boot_disk
    assert result.one(NODE_POOL, "gpu-pool").inputs["nodeConfig"][
        "ephemeralStorageLocalSsdConfig"
    ] == {"localSsdCount": profile.machine.local_ssd_count}


@pytest.mark.parametrize(
    ("machine_type", "vcpus", "memory_gib", "local_ssds"),
    [
        # GKE's autoscaler machine table (k8s.io/gke-autoscaling machinetypes).
        ("a4x-highgpu-4g", 140, 884, 4),
        ("a4-highgpu-8g", 224, 3968, 32),
        ("a3-ultragpu-8g", 224, 2952, 32),
    ],
)
def test_machine_facts_in_the_profile_table(
    machine_type: str, vcpus: int, memory_gib: int, local_ssds: int
) -> None:
    (profile,) = (p for p in PROFILES.values() if p.machine_type == machine_type)
    assert (profile.machine.vcpus, profile.machine.memory_gib) == (vcpus, memory_gib)
    assert profile.machine.local_ssd_count == local_ssds
    # 375 GiB is the smaller of the two local-SSD sizes, so the model never overstates storage.
    assert profile.machine.local_ssd_gib == 375


@pytest.mark.parametrize(
    ("vcpus", "reserved_millicores"),
    # 6 % of core 1, 1 % of core 2, 0.5 % of cores 3-4, 0.25 % above (GKE "Plan node sizes").
    [(1, 60), (2, 70), (4, 80), (16, 110), (140, 420), (224, 630)],
)
def test_cpu_reservation_brackets(vcpus: int, reserved_millicores: int) -> None:
    assert reserved_cpu_millicores(vcpus) == reserved_millicores


@pytest.mark.parametrize(
    ("memory_gib", "reserved_mib"),
    # Worked by hand, in MiB. kube-reserved: 25 % of the first 4 GiB, 20 % of the next 4, 10 % of
    # the next 8, 6 % of the next 112, 2 % above 128 GiB (GKE "Plan node sizes"); plus the
    # kernel's share (memory/64 + 16 MiB + 64 MiB + min(0.175 % of memory, 248 MiB)) and the
    # 100 MiB eviction threshold.
    #    4 GiB: kube 1024          + kernel   64 + 80 +   7.168 + 100 =   1275.168
    #    8 GiB: kube 1024 + 819.2  + kernel  128 + 80 +  14.336 + 100 =   2165.536
    #   16 GiB: kube 1843.2 + 819.2 + kernel 256 + 80 +  28.672 + 100 =   3127.072
    #  128 GiB: kube 2662.4 + 6881.28 + kernel 2048 + 80 + 229.376 + 100 = 12001.056
    # 2952 GiB: kube 9543.68 + 57835.52 + kernel 47232 + 80 + 248 (cap) + 100 = 115039.2
    [(4, 1275.168), (8, 2165.536), (16, 3127.072), (128, 12001.056), (2952, 115039.2)],
)
def test_memory_reservation_brackets(memory_gib: int, reserved_mib: float) -> None:
    assert reserved_memory_bytes(memory_gib) == pytest.approx(reserved_mib * 1024**2, abs=1)


def test_ephemeral_storage_reservations() -> None:
    # Local SSD: 100 GiB reserved for 3+ disks (50 for one), 10 % eviction threshold, 2 %
    # filesystem. 32 x 375 GiB: 12000 x 0.98 x 0.9 - 100 = 10484 GiB;
    # 1 x 375 GiB: 375 x 0.98 x 0.9 - 50 = 280.75 GiB.
    assert local_ssd_ephemeral_allocatable_bytes(32, 375) == 10484 * GIB
    assert local_ssd_ephemeral_allocatable_bytes(1, 375) == pytest.approx(280.75 * GIB, abs=1)
    # Boot disk, GKE's example: 100 GB reserves min(50, 6 + 35, 100) = 41 GiB; the filesystem
    # keeps 100 - (1.5635 + 4.148) = 94.2885 GiB; x 0.9 - 41 = 43.85965 GiB.
    assert boot_disk_ephemeral_allocatable_bytes(100) == pytest.approx(43.85965 * GIB, abs=1)
