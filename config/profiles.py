"""The accelerator profiles: every per-architecture fact lives in this one table.

Components read a profile; they never branch on its name. Sources: the seed (gke-verl-grpo-tutorial,
A4X) and the GKE tutorial "Fine-tune and scale reinforcement learning with verl on GKE" with its
AIHypercomputerSamples scripts (A4 / A3 Ultra), cited per field below.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from config.bucket_layout import GSM8K_TEST, GSM8K_TRAIN


class Mode(StrEnum):
    STANDARD = "standard"
    AUTOPILOT = "autopilot"


class Capacity(StrEnum):
    """How the GPU nodes are obtained (`verl-gke:capacity`)."""

    RESERVATION = "reservation"
    # GKE's Dynamic Workload Scheduler flex-start (Preview for A4 / A3 Ultra).
    FLEX_START = "flexStart"
    SPOT = "spot"
    # Compute Engine's default provisioning model. No profile here offers it (AI Hypercomputer lists
    # no on-demand option for A4X, A4 or A3 Ultra); kept so that `onDemand` is refused with that
    # reason and a fix, not as an unknown value.
    ON_DEMAND = "onDemand"


@dataclass(frozen=True)
class CapacitySupport:
    """Which capacity modes GKE supports for a profile in one GKE mode, and why not the rest."""

    supported: tuple[Capacity, ...]
    # Why the other modes are refused, with the source (shown by the preflight).
    refused_reason: str = ""


class GpuNetworking(StrEnum):
    """How the GPU nodes get their RDMA NICs."""

    # Standard A4/A3U: a gVNIC VPC and a RoCE VPC created by us, attached as 1 + 8 additional
    # node networks, mapped into pods with GKENetworkParamSet/Network objects (tutorial, Standard).
    MULTI_NIC = "multi-nic"
    # A4X Standard: node pool `accelerator_network_profile="auto"`; GKE creates the networks and
    # the managed DRANET driver exposes the NICs as DRA devices (seed, Cluster Toolkit gke-a4x).
    DRANET_NODE_POOL = "dranet-node-pool"
    # Autopilot A4/A3U: a ComputeClass with `acceleratorNetworkProfile: auto` and DRA networking
    # (the tutorial's Autopilot DRANET flow); GKE creates the node pools and the networks.
    DRANET_COMPUTE_CLASS = "dranet-compute-class"


@dataclass(frozen=True)
class Toleration:
    key: str
    operator: str = "Exists"
    effect: str = "NoSchedule"

    def manifest(self) -> dict[str, str]:
        return {"key": self.key, "operator": self.operator, "effect": self.effect}


@dataclass(frozen=True)
class WorkloadPlacement:
    """A GCE workload policy used as the GPU pool's compact placement policy."""

    type: str
    accelerator_topology: str


@dataclass(frozen=True)
class MachineFacts:
    """What one GPU node is before GKE reserves anything (Compute Engine machine type).

    GKE's own autoscaler table (k8s.io/gke-autoscaling cluster-autoscaler,
    pkg/cloudprovider/gke/machinetypes: `NewMachineTypeInfo(name, vcpus, memory_gib)
    .withAutomaticEphemeralLocalSsdCount(n)`) lists every number here; a machine with an
    "automatic" count has exactly that many local SSDs and no other count is allowed.
    """

    vcpus: int
    memory_gib: int
    # Bundled local SSDs, fixed by the machine type. GKE puts ephemeral storage (emptyDir,
    # container writable layers, logs) on them only when the node pool says so
    # (node_config.ephemeral_storage_local_ssd_config); otherwise it is the boot disk.
    local_ssd_count: int
    # Size of one local SSD. A local SSD is 375 or 3000 GB (pulumi-gcp 10.2,
    # NodePoolNodeConfigEphemeralStorageLocalSsdConfig.local_ssd_count); 375 is a lower bound
    # where the machine's disks may be the larger kind (a public A4X deployment reports its four
    # as 3 TB each).
    local_ssd_gib: int


@dataclass(frozen=True)
class RayHeadShape:
    """Requests (= limits) of the Ray head container."""

    cpu: str
    memory: str
    ephemeral_storage: str


@dataclass(frozen=True)
class RayWorkerShape:
    """Requests (= limits) of one GPU worker pod, which fills one GPU node."""

    cpu: str
    memory: str
    ephemeral_storage: str
    # Size of the in-memory /dev/shm (NCCL and vLLM use shared memory between local ranks).
    shared_memory: str
    # `ray start --num-cpus` of the worker.
    ray_num_cpus: str


@dataclass(frozen=True)
class AcceleratorProfile:
    name: str
    description: str
    gpu_type: str
    machine_type: str
    machine: MachineFacts
    gpus_per_node: int
    # What CUDA reports as the device's total memory (torch.cuda.mem_get_info()[1]), in GiB: the
    # ceiling every process on the GPU shares, below the marketed size (_CUDA_TOTAL_GIB).
    gpu_memory_gib: float
    arch: str
    # Tolerations every pod on the GPU nodes needs (GKE taints GPU nodes with nvidia.com/gpu and
    # arm64 nodes with kubernetes.io/arch).
    gpu_tolerations: tuple[Toleration, ...]
    modes: tuple[Mode, ...]
    networking: Mapping[Mode, GpuNetworking]
    # Capacity modes per GKE mode (sources at _X86_CAPACITY / the A4X entry).
    capacity: Mapping[Mode, CapacitySupport]
    rdma_nics_per_node: int
    reservation_required: bool
    default_gpu_nodes: int
    max_gpu_nodes: int
    max_gpu_nodes_reason: str
    boot_disk_type: str
    boot_disk_size_gb: int
    gpu_driver_version: str
    placement: WorkloadPlacement | None
    # Lowest GKE minor version the profile works on: the default and the floor of
    # `verl-gke:kubernetesVersion`, checked before anything is created and against the version
    # GKE actually gives the cluster. The release channel picks the version itself (a pinned
    # version breaks cluster creation once it leaves the channel). Manifests are schema-validated
    # at this version.
    min_kubernetes_version: str
    verl_image: str
    verl_ref: str
    ray_version: str
    # Extra pip packages installed in every Ray container at start (seed: A4X TransferQueue).
    ray_container_pip_packages: tuple[str, ...]
    nccl_installer_image: str
    nccl_env: Mapping[Mode, Mapping[str, str]]
    # Image of the data-prep Job. It runs on the x86 CPU pool, so it is an x86 image even where
    # the training image is arm64-only (A4X).
    data_prep_image: str
    # Multi-Node NVLink across nodes (GB200 NVL72): pods need an IMEX channel from an NVIDIA
    # ComputeDomain, which needs the NVIDIA DRA driver.
    multi_node_nvlink: bool
    ray_cluster_name: str
    # True where the verl image cannot run on the (x86) CPU pool: the head then runs on a GPU
    # node without GPUs and with `num-cpus: 0` (seed, A4X).
    ray_head_on_gpu_nodes: bool
    ray_head: RayHeadShape
    ray_workers: Mapping[Mode, RayWorkerShape]
    # The tutorial's GRPO job per mode, as `verl-gke:job` keys (sources at the tables above).
    grpo_job_defaults: Mapping[Mode, Mapping[str, Any]]
    # The fabric check fails under this all-reduce bus bandwidth (GB/s) at its largest size;
    # `verl-gke:fabricMinBusbwGbps` overrides it.
    fabric_min_busbw_gbps: float

    @property
    def default_mode(self) -> Mode:
        return self.modes[0]

    def kubernetes_floor(self, mode: Mode) -> str:
        """The lowest GKE version the profile works on in `mode`: the DRANET floor where GKE's
        managed DRANET carries the NICs, else min_kubernetes_version."""
        networking = self.networking.get(mode)  # None: a mode the profile lacks (reported)
        return (
            DRANET_MIN_VERSION.get(networking, self.min_kubernetes_version)
            if networking
            else (self.min_kubernetes_version)
        )

    def networking_for(self, mode: Mode) -> GpuNetworking:
        return self.networking[mode]


def _frozen(mapping: dict) -> Mapping:
    return MappingProxyType(mapping)


# GKE managed DRANET's version requirement (GKE "Allocate network resources by using GKE managed
# DRANET", docs.cloud.google.com/kubernetes-engine/docs/how-to/allocate-network-resources-dra):
# "Standard: 1.34.1-gke.1829001 or later. Autopilot: 1.35.2-gke.1842000 or later". The A4X
# node pool (Standard) and the Autopilot ComputeClass both get their RDMA NICs from it.
DRANET_MIN_VERSION: Mapping[GpuNetworking, str] = MappingProxyType(
    {
        GpuNetworking.DRANET_NODE_POOL: "1.34.1-gke.1829001",
        GpuNetworking.DRANET_COMPUTE_CLASS: "1.35.2-gke.1842000",
    }
)
# Release channels that create Autopilot clusters below that floor. GKE release notes, "Current
# versions" table (docs.cloud.google.com/kubernetes-engine/docs/release-notes, 2026 snapshots):
# new minor versions reach Rapid first, then Regular, then Stable; when Regular's default for
# cluster creation was already 1.35.5-gke.1163012, Stable's was still 1.34.8-gke.1000000, below
# the Autopilot DRANET floor. Rapid (the tutorial's choice for DRANET) and Regular are accepted; the
# version GKE actually gives the cluster is checked against the floor before any GPU is asked for
# (components/gke_cluster.py).
AUTOPILOT_DRANET_REFUSED_CHANNELS: Mapping[str, str] = MappingProxyType(
    {
        "STABLE": "Stable gets a minor version last; its default for new clusters was still "
        "1.34 when Regular's was 1.35 (GKE release notes)",
    }
)


# GKE Image streaming per node architecture (verl-gke:imageStreaming). GKE "Use Image streaming
# to pull container images" (docs.cloud.google.com/kubernetes-engine/docs/how-to/image-streaming):
# requirements are the Container File System API, COS with containerd, and an image in an
# Artifact Registry standard or remote repository; "Autopilot clusters automatically use Image
# streaming to pull eligible images"; Standard pools turn it on with gcfsConfig. Neither the
# requirements nor the limitations name an architecture, and no GKE page found documents it on
# Arm nodes, so arm64 (A4X) is refused and pre-pulls instead.
IMAGE_STREAMING_UNSUPPORTED_ARCHES: Mapping[str, str] = MappingProxyType(
    {
        "arm64": "GKE does not document Image streaming on Arm nodes (the 'Use Image streaming' "
        "page names no architecture)",
    }
)

_GPU_TAINT = Toleration(key="nvidia.com/gpu")
_ARM64_TAINT = Toleration(key="kubernetes.io/arch")

# Shared x86 values (the tutorial's RayClusters, runtime envs and images): A4 and A3 Ultra
# differ only in GPU, machine and the NCCL tuning file names.
_X86_VERL_IMAGE = "verlai/verl:vllm011.latest"
_X86_VERL_REF = "v0.6.1"
_X86_RAY_VERSION = "2.47.0"
_X86_GIB_IMAGE = "us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib:v1.1.1"


def _x86_standard_nccl_env(tuner_file: str) -> Mapping[str, str]:
    # AIHypercomputerSamples verl_rl_standard runtime-env.yaml (gIB from the hostPath installer).
    return _frozen(
        {
            "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64",
            "NCCL_NET_PLUGIN": "/usr/local/gib/lib64/libnccl-net_internal.so",
            "NCCL_CROSS_NIC": "0",
            "NCCL_NET_GDR_LEVEL": "PIX",
            "NCCL_P2P_NET_CHUNKSIZE": "131072",
            "NCCL_NVLS_CHUNKSIZE": "524288",
            "NCCL_IB_ADAPTIVE_ROUTING": "1",
            "NCCL_IB_QPS_PER_CONNECTION": "4",
            "NCCL_IB_TC": "52",
            "NCCL_IB_FIFO_TC": "84",
            "NCCL_TUNER_CONFIG_PATH": f"/usr/local/gib/configs/{tuner_file}",
            "GLOO_SOCKET_IFNAME": "eth0",
        }
    )


def _x86_autopilot_nccl_env(conf_file: str) -> Mapping[str, str]:
    # AIHypercomputerSamples Autopilot DRANET runtime-env.yaml. The H200 conf file name follows the
    # tutorial prose ("change NCCL_CONF_FILE to /usr/local/gib/configs/nccl.a3u.conf").
    return _frozen(
        {
            "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64:/usr/local/gib/lib64",
            "NCCL_ENV_PLUGIN": "gcp",
            "NCCL_CONF_FILE": f"/usr/local/gib/configs/{conf_file}",
            "NCCL_IB_GID_INDEX": "3",
            "NCCL_NVLS_ENABLE": "0",
            "NCCL_TUNER_CONFIG_PATH": "/usr/local/gib/configs",
            "GLOO_SOCKET_IFNAME": "eth0",
        }
    )


# The verl image the data-prep Job runs on the x86 CPU pool (the tutorial's data preparation).
_X86_DATA_PREP_IMAGE = "verlai/verl:vllm011.latest"
# The head of all the tutorial's x86 RayClusters.
_X86_RAY_HEAD = RayHeadShape(cpu="12", memory="32G", ephemeral_storage="9Gi")
_X86_RAY_WORKERS = _frozen(
    {
        # ray-cluster-standard.yaml: the whole a3-ultragpu-8g / a4-highgpu-8g node. The 1000Gi of
        # ephemeral storage fits only because the GPU pool puts ephemeral storage on the 32
        # local SSDs (the 200 GB boot disk leaves about 97 GiB allocatable); tests/test_node_fit
        # checks every request against the node's allocatable.
        Mode.STANDARD: RayWorkerShape(
            cpu="220",
            memory="2800Gi",
            ephemeral_storage="1000Gi",
            shared_memory="250Gi",
            ray_num_cpus="220",
        ),
        # ray-cluster-auto-dranet.yaml: smaller, Autopilot keeps part of the node for itself. GKE
        # creates these nodes with their 32 local SSDs as ephemeral storage (the "automatic"
        # count of GKE's autoscaler table; "-nolssd" shapes only on explicit request). The
        # tutorial's `num-cpus: "220"` would advertise CPUs the container may not use.
        Mode.AUTOPILOT: RayWorkerShape(
            cpu="180",
            memory="2000Gi",
            ephemeral_storage="1000Gi",
            shared_memory="250Gi",
            ray_num_cpus="180",
        ),
    }
)

# Capacity for A4 / A3 Ultra. Sources:
# - Standard: the AI Hypercomputer guide "Create a custom AI-optimized GKE cluster which uses A4 or
#   A3 Ultra" (docs.cloud.google.com/ai-hypercomputer/docs/create/gke-ai-hypercompute-custom,
#   updated 2026-04-06) creates the node pool as "Reservation-bound", "Flex-start" (Preview; with
#   or without --enable-queued-provisioning) or "Spot"; its RDMA (multi-network) section shows only
#   the reservation and flex-start tabs, while Google's verl tutorial itself runs Spot A3 Ultra
#   nodes with the 8 RDMA networks (`--spot --num-nodes=0 --additional-node-network ...`), so Spot
#   is kept. Flex-start needs GKE >= 1.32.2-gke.1652000 (the profiles' floor is 1.34).
# - No on-demand: AI Hypercomputer "Choose a consumption option"
#   (docs.cloud.google.com/ai-hypercomputer/docs/consumption-models, comparison table) offers A4 and
#   A3 Ultra as future reservations (also in calendar mode), flex-start and Spot only; its "Capacity
#   overview" (.../obtain-capacity) lists the same options. A node pool asking for on-demand
#   machines would wait for nodes that are not sold that way.
# - Queued provisioning (all nodes at once): GKE "Run a large-scale workload with flex-start with
#   queued provisioning" (docs.cloud.google.com/kubernetes-engine/docs/how-to/provisioningrequest):
#   recommended when "workloads are required to run across multiple nodes simultaneously".
# - Autopilot: custom ComputeClasses work on Autopilot and Standard from 1.30.3-gke.1451000
#   (GKE "About custom compute classes"); a priority rule takes `reservations`, `spot: true` and
#   `maxRunDurationSeconds` (GKE ComputeClass CRD reference,
#   docs.cloud.google.com/kubernetes-engine/docs/reference/crds/computeclass) and a flex-start rule
#   (`flexStart.enabled`, seen in public ComputeClasses; secondary). Autopilot consumes
#   reservations only as specific reservations (GKE "Consuming reserved zonal resources").
#   ProvisioningRequests are not used with a ComputeClass here: flex-start's own single-unit
#   scale-up gives all-or-nothing per scale-up (GKE "About GPU obtainability with flex-start").
_X86_CAPACITY = _frozen(
    {
        mode: CapacitySupport(
            supported=(Capacity.RESERVATION, Capacity.FLEX_START, Capacity.SPOT),
            refused_reason="AI Hypercomputer offers A4 and A3 Ultra as reservations, flex-start "
            "and Spot only, not on-demand: docs.cloud.google.com/ai-hypercomputer/docs/"
            "consumption-models",
        )
        for mode in (Mode.STANDARD, Mode.AUTOPILOT)
    }
)

_X86_NETWORKING = _frozen(
    {Mode.STANDARD: GpuNetworking.MULTI_NIC, Mode.AUTOPILOT: GpuNetworking.DRANET_COMPUTE_CLASS}
)


# --- the tutorial's GRPO job (training/grpo_spec.py turns these into a typed spec) ----------
# Keys are `verl-gke:job` settings (camelCase); the program adds the model path, the GPU and node
# counts and the experiment's name and checkpoint folder.

# Shared by the seed's A4X command and the x86 scripts' `ray job submit`.
_GRPO_COMMON: Mapping[str, Any] = _frozen(
    {
        "advEstimator": "grpo",
        "trainFiles": GSM8K_TRAIN,
        "valFiles": GSM8K_TEST,
        "trainBatchSize": 256,
        "maxPromptLength": 512,
        "maxResponseLength": 512,
        "lr": 1e-5,
        "ppoMicroBatchSizePerGpu": 8,
        "useKlLoss": True,
        "actorStrategy": "fsdp2",
        "rolloutName": "vllm",
        "rolloutN": 8,
        "klCoef": 0.001,
        "logger": ("console",),
        "saveFreq": 10,
        "testFreq": 10,
        "totalEpochs": 2,
    }
)
# The seed's A4X `ray job submit` (4 GPUs per node, rollout TP 4).
_A4X_GRPO: Mapping[str, Any] = _frozen(
    {
        **_GRPO_COMMON,
        "ppoMiniBatchSize": 64,
        "rolloutTensorParallelSize": 4,
        "gpuMemoryUtilization": 0.6,
        "rolloutLogProbMicroBatchSizePerGpu": 16,
        "refLogProbMicroBatchSizePerGpu": 16,
    }
)
# AIHypercomputerSamples verl_rl_standard/7_run_job.sh, latest seen.
_X86_STANDARD_GRPO: Mapping[str, Any] = _frozen(
    {
        **_GRPO_COMMON,
        "ppoMiniBatchSize": 256,
        "rolloutTensorParallelSize": 8,
        "gpuMemoryUtilization": 0.5,
        "rolloutLogProbMicroBatchSizePerGpu": 2,
        "refLogProbMicroBatchSizePerGpu": 2,
        "valBeforeTrain": False,
    }
)
# verl_rl_autopilot/6_run_job.sh, latest seen: rollout log-prob micro-batch 8, torch.compile off.
_X86_AUTOPILOT_GRPO: Mapping[str, Any] = _frozen(
    {**_X86_STANDARD_GRPO, "rolloutLogProbMicroBatchSizePerGpu": 8, "useTorchCompile": False}
)


# --- the fabric check's pass marks --------------------------------------------------------------
# Floors for the all-reduce busbw at the largest size, in GB/s (1e9 bytes/s). They are set to
# catch a broken fabric, not to grade a healthy one: a TCP fallback gives about a tenth of RDMA
# (GCP 2 x H100 without GPUDirect: ~19 GB/s busbw, skypilot-org/skypilot#3592).
# - a3u: 2 A3 Ultra nodes (16 H200) over gIB/RoCE measured ~329-336 GB/s all_gather busbw at
#   1-8 GiB (GoogleCloudPlatform/cluster-toolkit examples/gke-consumption-options/dws-flex-start
#   README); the floor is about half of that.
# - a4: the same 8 x 400 Gb/s RoCE NICs per node as A3 Ultra, so the same inter-node floor.
# - a4x: GB200 NVL72 over Multi-Node NVLink reached 835-847 GB/s all_reduce busbw at 4-8 GiB on a
#   full rack (coreweave/nccl-tests PR #43); the floor is about 40 % of that.
_RDMA_FABRIC_MIN_BUSBW_GBPS = 160.0
_MNNVL_FABRIC_MIN_BUSBW_GBPS = 320.0


def _x86_profile(
    *,
    name: str,
    description: str,
    gpu_type: str,
    machine_type: str,
    machine: MachineFacts,
    gpu_memory_gib: float,
    modes: tuple[Mode, ...],
    ray_cluster_name: str,
) -> AcceleratorProfile:
    """A4 and A3 Ultra: 8 GPUs and 8 RoCE NICs per x86 node, the same tutorial path; they differ
    in GPU, machine and the names of the NCCL tuning files (the tutorial's runtime-env.yaml).

    Long because it is one declarative profile (every field with its source)."""
    return AcceleratorProfile(
        name=name,
        description=description,
        gpu_type=gpu_type,
        machine_type=machine_type,
        machine=machine,
        gpus_per_node=8,
        gpu_memory_gib=gpu_memory_gib,
        arch="amd64",
        gpu_tolerations=(_GPU_TAINT,),
        modes=modes,
        networking=_X86_NETWORKING,
        capacity=_X86_CAPACITY,
        rdma_nics_per_node=8,
        reservation_required=False,
        default_gpu_nodes=2,
        max_gpu_nodes=64,
        max_gpu_nodes_reason="a guard against typos; raise it in config/profiles.py if your "
        "reservation is larger",
        # A4 boots only from Hyperdisk; "for A3 Ultra node pools, you must set the disk type to
        # hyperdisk-balanced".
        boot_disk_type="hyperdisk-balanced",
        boot_disk_size_gb=200,
        # DEFAULT installs R570 on GKE >= 1.32.1-gke.1729000, which A4 needs.
        gpu_driver_version="DEFAULT",
        placement=None,
        min_kubernetes_version="1.34",
        verl_image=_X86_VERL_IMAGE,
        verl_ref=_X86_VERL_REF,
        ray_version=_X86_RAY_VERSION,
        ray_container_pip_packages=(),
        nccl_installer_image=_X86_GIB_IMAGE,
        nccl_env=_frozen(
            {
                Mode.STANDARD: _x86_standard_nccl_env(f"tuner_config_{name}.txtpb"),
                Mode.AUTOPILOT: _x86_autopilot_nccl_env(f"nccl.{name}.conf"),
            }
        ),
        data_prep_image=_X86_DATA_PREP_IMAGE,
        multi_node_nvlink=False,
        ray_cluster_name=ray_cluster_name,
        ray_head_on_gpu_nodes=False,
        ray_head=_X86_RAY_HEAD,
        ray_workers=_X86_RAY_WORKERS,
        grpo_job_defaults=_frozen(
            {Mode.STANDARD: _X86_STANDARD_GRPO, Mode.AUTOPILOT: _X86_AUTOPILOT_GRPO}
        ),
        fabric_min_busbw_gbps=_RDMA_FABRIC_MIN_BUSBW_GBPS,
    )


# CUDA's total per GPU, GiB. H200: torch.cuda.mem_get_info() total on an H200 of the project's GPU
# machine, 139.80 GiB (nvidia-smi: 143,771 MiB; issue 25, docs/memory-and-fabric.md). B200:
# cudaGetDeviceProperties totalGlobalMem 178.35 GiB (pytorch/ao pull request 4002, 2026-03-05;
# torch.cuda.mem_get_info() 178.4 GiB on SM100 in sgl-project/sglang issue 25225; nvidia-smi
# 183,359 MiB in NVIDIA/TensorRT-LLM issue 10278). GB200: no published CUDA figure was found;
# derived from its marketed 186 GB per GPU (Google's A4X machine type) with the smaller of the
# two measured CUDA/marketed ratios, B200 178.35 / 180 and H200 139.80 / 141, so 186 x 0.9908.
_CUDA_TOTAL_GIB: Mapping[str, float] = MappingProxyType(
    {
        "nvidia-h200-141gb": 139.80,
        "nvidia-b200": 178.35,
        "nvidia-gb200": round(186 * min(178.35 / 180, 139.80 / 141), 2),
    }
)

PROFILES: Mapping[str, AcceleratorProfile] = _frozen(
    {
        "a4x": AcceleratorProfile(
            name="a4x",
            description="A4X: NVIDIA GB200 Grace Blackwell, arm64, Multi-Node NVLink (IMEX)",
            gpu_type="nvidia-gb200",
            machine_type="a4x-highgpu-4g",
            # GKE autoscaler table: a4x-highgpu-4g 140 vCPU, 884 GiB, automatic local SSD
            # count 4. Cluster Toolkit's gke-node-pool has no A4X entry (it leaves the count to
            # GKE); we set it explicitly so ephemeral storage is on the SSDs, not the 100 GB
            # boot disk.
            machine=MachineFacts(vcpus=140, memory_gib=884, local_ssd_count=4, local_ssd_gib=375),
            gpus_per_node=4,
            gpu_memory_gib=_CUDA_TOTAL_GIB["nvidia-gb200"],
            arch="arm64",
            gpu_tolerations=(_GPU_TAINT, _ARM64_TAINT),
            modes=(Mode.STANDARD,),
            networking=_frozen({Mode.STANDARD: GpuNetworking.DRANET_NODE_POOL}),
            # AI Hypercomputer "Create a custom AI-optimized GKE cluster which uses A4X"
            # (docs.cloud.google.com/ai-hypercomputer/docs/create/gke-ai-hypercompute-custom-a4x,
            # updated 2026-04-06): "You must use the reservation-bound provisioning model to
            # create clusters with A4X. Other provisioning models are not supported." The guide
            # covers GKE Standard only.
            capacity=_frozen(
                {
                    Mode.STANDARD: CapacitySupport(
                        supported=(Capacity.RESERVATION,),
                        refused_reason="A4X is reservation-bound only: GKE's A4X guide says "
                        "other provisioning models are not supported",
                    )
                }
            ),
            rdma_nics_per_node=4,
            reservation_required=True,
            default_gpu_nodes=4,
            max_gpu_nodes=18,
            max_gpu_nodes_reason="one NVL72 domain holds 18 A4X nodes (1x72 placement policy)",
            boot_disk_type="hyperdisk-balanced",
            boot_disk_size_gb=100,
            # A4X needs the R580 driver; GKE's LATEST driver on 1.34 is R580.
            gpu_driver_version="LATEST",
            placement=WorkloadPlacement(type="HIGH_THROUGHPUT", accelerator_topology="1x72"),
            # DRANET node pools need GKE >= 1.34.1-gke.1829001 (Cluster Toolkit gke-node-pool).
            min_kubernetes_version="1.34",
            verl_image="verlai/verl:vllm023.aarch64.dev1",
            verl_ref="ddbcdb7",
            ray_version="2.49.0",
            ray_container_pip_packages=("TransferQueue==0.1.8",),
            nccl_installer_image=(
                "us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib-arm64:v1.1.0"
            ),
            # The seed's A4X runtime env.
            nccl_env=_frozen(
                {
                    Mode.STANDARD: _frozen(
                        {
                            "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64:/usr/local/gib/lib64",
                            "NCCL_ENV_PLUGIN": "gcp",
                            "GLOO_SOCKET_IFNAME": "eth0",
                        }
                    )
                }
            ),
            # verlai/verl:vllm023.aarch64.dev1 is arm64-only and the CPU pool is x86.
            data_prep_image=_X86_DATA_PREP_IMAGE,
            multi_node_nvlink=True,
            # The seed's ray-cluster-a4x.yaml.
            ray_cluster_name="gb200-ray-cluster",
            ray_head_on_gpu_nodes=True,
            ray_head=RayHeadShape(cpu="12", memory="32Gi", ephemeral_storage="20Gi"),
            ray_workers=_frozen(
                {
                    Mode.STANDARD: RayWorkerShape(
                        cpu="120",
                        memory="600Gi",
                        ephemeral_storage="500Gi",
                        shared_memory="200Gi",
                        ray_num_cpus="120",
                    )
                }
            ),
            grpo_job_defaults=_frozen({Mode.STANDARD: _A4X_GRPO}),
            fabric_min_busbw_gbps=_MNNVL_FABRIC_MIN_BUSBW_GBPS,
        ),
        "a4": _x86_profile(
            name="a4",
            description="A4: NVIDIA B200, x86",
            gpu_type="nvidia-b200",
            machine_type="a4-highgpu-8g",
            # GKE autoscaler table: 224 vCPU, 3968 GiB, automatic local SSD count 32; Cluster
            # Toolkit gke-node-pool disk_definitions.tf: 32 local SSDs as ephemeral storage.
            machine=MachineFacts(vcpus=224, memory_gib=3968, local_ssd_count=32, local_ssd_gib=375),
            gpu_memory_gib=_CUDA_TOTAL_GIB["nvidia-b200"],
            modes=(Mode.AUTOPILOT, Mode.STANDARD),
            ray_cluster_name="b200-ray-cluster",
        ),
        "a3u": _x86_profile(
            name="a3u",
            description="A3 Ultra: NVIDIA H200 141GB, x86",
            gpu_type="nvidia-h200-141gb",
            machine_type="a3-ultragpu-8g",
            # GKE autoscaler table: 224 vCPU, 2952 GiB, automatic local SSD count 32; Cluster
            # Toolkit gke-node-pool disk_definitions.tf: 32 local SSDs as ephemeral storage.
            machine=MachineFacts(vcpus=224, memory_gib=2952, local_ssd_count=32, local_ssd_gib=375),
            gpu_memory_gib=_CUDA_TOTAL_GIB["nvidia-h200-141gb"],
            modes=(Mode.STANDARD, Mode.AUTOPILOT),
            # The tutorial names the H200 cluster "b200-ray-cluster" too; named for its GPU here.
            ray_cluster_name="h200-ray-cluster",
        ),
    }
)


def profile_names() -> list[str]:
    return sorted(PROFILES)
