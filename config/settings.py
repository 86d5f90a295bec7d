"""Typed stack settings, read from Pulumi config and validated before any resource exists.

Every message names the config key, the value it had and the command that fixes it, because the
reader is about to pay for GPUs by the hour and should not have to read this file to fix a typo.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi.runtime import config as runtime_config
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from config import cluster_security, input_rules, known_values, placement
from config import job_wait as job_wait_setting
from config.capacity import DEFAULT_WAIT_MINUTES, MAX_WAIT_MINUTES, CapacityPlan, capacity_plan
from config.image_streaming import ImagePullPlan, pull_plan, streaming_refusal
from config.job_wait import JobWait
from config.networking import NetworkingPlan, networking_plan
from config.profiles import (
    AUTOPILOT_DRANET_REFUSED_CHANNELS,
    PROFILES,
    AcceleratorProfile,
    Capacity,
    GpuNetworking,
    Mode,
)

NAMESPACE = "verl-gke"
# The tutorial's model (verl-gke:model).
DEFAULT_MODEL = "Qwen/Qwen2.5-32B-Instruct"
# Config keys outside our namespace that the program reads.
GCP_KEYS = {"project": "gcp:project", "region": "gcp:region"}
# Keys whose committed value in Pulumi.<stack>.yaml is a placeholder the user must replace.
PLACEHOLDER_RE = re.compile(r"^<.+>$")

_GCE_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_PROJECT_ID = re.compile(r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$")
_REGION = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")
# REGION-LETTER, or an AI zone REGION-aiN-LETTER (config/known_values.py).
_ZONE = re.compile(r"^(?P<region>[a-z]+-[a-z]+[0-9]+)-(?:ai[0-9]+)?[a-z]$")
# [projects/P/reservations/]NAME[/reservationBlocks/B[/reservationSubBlocks/S]]: the forms GKE's
# `--reservation` takes as the reservation affinity's value (AI Hypercomputer "Create a custom
# AI-optimized GKE cluster which uses A4X": a sub-block places the nodes in one NVL72 domain).
_RESERVATION_PART = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
_RESERVATION = re.compile(
    r"^(projects/[a-z][-a-z0-9]{4,28}[a-z0-9]/reservations/)?[a-z]([-a-z0-9]{0,61}[a-z0-9])?"
    rf"(/reservationBlocks/{_RESERVATION_PART}(/reservationSubBlocks/{_RESERVATION_PART})?)?$"
)
_RESERVATION_FORM = "RESERVATION_NAME[/reservationBlocks/BLOCK[/reservationSubBlocks/SUB_BLOCK]]"
_BUCKET = re.compile(r"^[a-z0-9][-a-z0-9_]{1,61}[a-z0-9]$")
_CHART_VERSION = re.compile(r"^v?[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$")
# The first nvidia-dra-driver-gpu chart whose DeviceClasses use resource.k8s.io/v1 when the
# cluster serves it (NVIDIA/k8s-dra-driver-gpu 960b0e10, issue #533); older charts need the
# v1beta1 DRA APIs, which this program does not enable on the cluster.
DRA_DRIVER_MIN_CHART = "25.3.2"
# The DRA driver chart's namespace (manifests/dra_driver.py NAMESPACE; config may not import it).
DRA_DRIVER_NAMESPACE = "nvidia-dra-driver-gpu"
_K8S_VERSION = re.compile(r"^1\.(?P<minor>[0-9]+)(\.[0-9]+(-gke\.[0-9]+)?)?$")
# Longest cluster name the tutorial allows; derived names (e.g. "<cluster>-rdma-sub-7") must
# stay within GCE's 63-character limit.
MAX_CLUSTER_NAME = 40
RELEASE_CHANNELS = ("RAPID", "REGULAR", "STABLE", "EXTENDED")
# Machine families that can only boot from Hyperdisk.
_HYPERDISK_ONLY_FAMILIES = ("n4", "n4d", "c4", "c4a", "c4d", "a4", "a4x", "a3u")


# Settings whose value is never shown in a message.
SECRET_FIELDS = frozenset({"hf_token", "wandb_api_key"})

# Set by the offline plan (tools/offline_engine.py): placeholders are planned with example values.
OFFLINE_PLAN_ENV = "VERL_GKE_OFFLINE_PLAN"


class SettingsError(pulumi.RunError, ValueError):
    """Bad stack configuration; the message lists every problem and its fix.

    A RunError, so `pulumi up` prints the message alone, without a Python traceback.
    """


def is_placeholder(value: object) -> bool:
    return isinstance(value, str) and bool(PLACEHOLDER_RE.match(value))


def config_key(field_name: str) -> str:
    """The Pulumi config key a settings field is read from."""
    if field_name in GCP_KEYS:
        return GCP_KEYS[field_name]
    field = StackSettings.model_fields.get(field_name)
    return f"{NAMESPACE}:{field.alias if field and field.alias else to_camel(field_name)}"


class StackSettings(BaseModel):
    """Everything a stack is built from. Field aliases are the `verl-gke:` config keys."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True
    )

    stack: str
    project: str = Field(description="GCP project id (gcp:project)")
    region: str = Field(description="Region of the control plane, subnets and bucket")
    profile_name: str = Field(alias="profile", description="Accelerator profile: a4x, a4, a3u")
    zone: str = Field(description="Zone of the GPU reservation (RoCE profiles are zonal)")
    mode: Mode = Field(description="GKE mode: standard or autopilot (default: the profile's)")
    reservation: str | None = Field(
        default=None,
        description="GPU reservation: NAME[/reservationBlocks/B[/reservationSubBlocks/S]]",
    )
    # An existing workload policy for the GPU pool's placement (A4X), by name or self-link; unset,
    # the stack creates its own 1x72 policy (components/gpu_node_pool.py).
    placement_policy: str | None = Field(
        default=None, description="Existing workload policy of the GPU pool (unset: one is made)"
    )
    # How the GPU nodes are obtained (config/capacity.py); default: `reservation` when
    # verl-gke:reservation is set, else `flexStart` where the profile offers it (_default_capacity).
    capacity: Capacity = Field(
        description="How GPU nodes are obtained: reservation, flexStart, spot, onDemand"
        " (default: reservation when one is set, else flexStart where offered)"
    )
    # How long `pulumi up` waits for the GPU nodes outside a reservation (the RayCluster's
    # readiness timeout is this plus the start-up margin, config/capacity.py).
    capacity_wait_minutes: int = Field(
        default=DEFAULT_WAIT_MINUTES,
        ge=10,
        le=MAX_WAIT_MINUTES,
        description="Minutes pulumi up waits for GPU nodes outside a reservation",
    )
    gpu_nodes: int = Field(description="Number of GPU nodes (default: the profile's)")
    hf_token: SecretStr = Field(description="Hugging Face token the model is downloaded with")
    cluster_name: str = Field(description="GKE cluster name (default: verl-<stack>)")
    namespace: str = Field(default="default", description="Kubernetes namespace of the workload")
    bucket_name: str = Field(description="Checkpoint bucket (default: <project>-<clusterName>)")
    delete_bucket_on_destroy: bool = Field(
        default=False, description="pulumi destroy also deletes the bucket and its objects"
    )
    ksa_name: str = Field(default="verl-ray", description="Kubernetes service account of the pods")
    cpu_machine_type: str = Field(
        default="n4-highmem-16", description="Machine type of the CPU pool (Standard)"
    )
    cpu_nodes: int = Field(default=1, ge=1, le=20, description="Fewest CPU pool nodes (Standard)")
    cpu_max_nodes: int = Field(
        default=5, ge=1, le=100, description="Most CPU pool nodes (Standard)"
    )
    release_channel: str = Field(
        description="GKE release channel (default: RAPID on Autopilot, else REGULAR)"
    )
    # The lowest GKE version the stack accepts (default: the profile's minimum). A floor, not a
    # pin: the release channel picks the version.
    kubernetes_version: str = Field(description="Lowest GKE version (default: the profile's)")
    verl_image: str = Field(description="verl worker image (default: the profile's)")
    verl_ref: str = Field(description="verl release tag or commit the job runs")
    ray_version: str = Field(description="Ray version of the images (default: the profile's)")
    model: str = Field(default=DEFAULT_MODEL, description="Hugging Face model trained")
    # A config.json of the model in the user's repository (relative to Pulumi.yaml's folder): the
    # offline plan's architecture facts for a model not in training/model_table.py.
    model_config_file: str | None = Field(
        default=None,
        alias="modelConfig",
        description="config.json of verl-gke:model for the offline plan (path in your repo)",
    )
    data_prep_image: str = Field(description="Image of the data-prep Job (default: the profile's)")
    nccl_installer_image: str = Field(
        description="Image of the NCCL installer DaemonSet (default: the profile's)"
    )
    # The version of ../shared/crds/ray.io_rayclusters.yaml the RayCluster is validated against.
    kuberay_chart_version: str = Field(default="1.7.0", description="KubeRay operator chart")
    # NVIDIA DRA driver chart (A4X only). Not the seed's 25.3.1: it hard-codes
    # resource.k8s.io/v1beta1 DeviceClasses, which GKE 1.34 does not serve unless enabled;
    # 25.3.2 picks resource.k8s.io/v1 from the cluster (README, "NVIDIA DRA driver chart").
    # Default 25.12.0: docs/real-systems.md, "NVIDIA DRA driver version".
    dra_driver_chart_version: str = Field(
        default="25.12.0", description="NVIDIA DRA driver chart version (A4X)"
    )
    # Overrides of the GRPO job spec (training/grpo_spec.py), e.g.
    # `pulumi config set --path verl-gke:job.ppoMicroBatchSizePerGpu 4`; validated by the spec.
    job: dict[str, Any] = Field(
        default_factory=dict, description="Overrides of the GRPO job spec (set with --path)"
    )
    # When `pulumi up` returns for the GRPO job (config/job_wait.py); the old booleans still read.
    job_wait: JobWait = Field(
        default=job_wait_setting.DEFAULT,
        description="When pulumi up returns for the GRPO job: running, firstStep, finished",
    )
    # Merge the run's final checkpoint into a Hugging Face model folder in the bucket.
    export_model: bool = Field(
        default=True, description="Export the final checkpoint as a Hugging Face model folder"
    )
    # Weights & Biases key: reaches the Ray pods only through a Kubernetes Secret.
    wandb_api_key: SecretStr | None = Field(
        default=None, description="Weights & Biases API key (optional)"
    )
    # Run the NCCL all-reduce fabric check (payloads/fabric/) before GRPO, and its pass mark in GB/s
    # of bus bandwidth (default: the profile's, see payloads/fabric/fabric_check.py).
    fabric_check: bool = Field(
        default=True, description="Run the NCCL all-reduce fabric check before GRPO"
    )
    fabric_min_busbw_gbps: float | None = Field(
        default=None, gt=0, description="Fabric check pass mark, GB/s bus bandwidth"
    )
    # GKE Image streaming of the worker image through an Artifact Registry remote repository
    # (config/image_streaming.py); default: on where GKE documents it for the profile's nodes.
    image_streaming: bool | None = Field(
        default=None, description="GKE Image streaming of the worker image"
    )
    host_subnet_cidr: str = Field(default="10.128.0.0/20", description="Node subnet range")
    pods_cidr: str = Field(default="10.4.0.0/14", description="Pod range")
    services_cidr: str = Field(default="10.0.32.0/20", description="Service range")
    # IPv4 ranges allowed to reach the public control-plane endpoint (config/cluster_security.py);
    # empty: any address can (the plan says so). The deploying machine must be in the list.
    authorized_networks: list[str] = Field(
        default_factory=list,
        description="IPv4 CIDRs allowed to reach the control-plane endpoint (empty: any)",
    )

    @model_validator(mode="before")
    @classmethod
    def _profile_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        stack = str(data.get("stack", ""))
        profile = PROFILES.get(str(data.get("profile", "")))
        if profile is None:
            raise ValueError(
                f"{config_key('profile_name')} = {data.get('profile')!r}: unknown accelerator "
                f"profile. Fix: pulumi config set {config_key('profile_name')} "
                f"<{'|'.join(PROFILES)}> -s {stack}"
            )
        mode = data.get("mode") or profile.default_mode.value
        defaults: dict[str, Any] = {
            "mode": mode,
            "capacity": _default_capacity(profile, mode, data.get("reservation")),
            "gpuNodes": profile.default_gpu_nodes,
            "clusterName": f"verl-{stack}",
            # Autopilot DRANET needs the rapid channel (tutorial §3.B).
            "releaseChannel": "RAPID" if mode == Mode.AUTOPILOT.value else "REGULAR",
            "kubernetesVersion": _kubernetes_floor(profile, mode),
            "verlImage": profile.verl_image,
            "verlRef": profile.verl_ref,
            "rayVersion": profile.ray_version,
            "dataPrepImage": profile.data_prep_image,
            "ncclInstallerImage": profile.nccl_installer_image,
        }
        merged = {**defaults, **{k: v for k, v in data.items() if v is not None}}
        if "bucketName" not in merged and "project" in merged:
            merged["bucketName"] = f"{merged['project']}-{merged['clusterName']}"
        return merged

    @field_validator("job", mode="before")
    @classmethod
    def _job_object(cls, value: Any) -> Any:
        # Structured config reaches the program as JSON text.
        if isinstance(value, str):
            try:
                return json.loads(value)
            except json.JSONDecodeError as error:
                raise ValueError(f"not a JSON object ({error.msg})") from None
        return value

    @field_validator("authorized_networks", mode="before")
    @classmethod
    def _cidr_list(cls, value: Any) -> Any:
        return cluster_security.parse_cidr_list(value)

    @field_validator(
        "gpu_nodes", "cpu_nodes", "cpu_max_nodes", "capacity_wait_minutes", mode="before"
    )
    @classmethod
    def _whole_number(cls, value: Any) -> Any:
        return input_rules.whole_number(value)

    @field_validator("job_wait", mode="before")
    @classmethod
    def _job_wait_legacy(cls, value: Any) -> Any:
        return job_wait_setting.coerce(value)

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> StackSettings:
        accept = (info.context or {}).get(ACCEPT_GPU_NODES)
        problems = [p for p in _problems(self, accept) if p]
        if problems:
            raise ValueError("\n".join(problems))
        return self

    @property
    def profile(self) -> AcceleratorProfile:
        return PROFILES[self.profile_name]

    @property
    def gpu_networking(self) -> GpuNetworking:
        return self.profile.networking_for(self.mode)

    @property
    def networking(self) -> NetworkingPlan:
        """What the GPU-networking variant needs (config/networking.py, the one dispatch)."""
        return networking_plan(self.gpu_networking)

    @property
    def capacity_plan(self) -> CapacityPlan:
        """What the capacity mode means for the nodes and workers (config/capacity.py)."""
        return capacity_plan(self.capacity, self.mode)

    @property
    def image_pull(self) -> ImagePullPlan:
        """Streaming, pre-pull and the remote repository (config/image_streaming.py)."""
        return pull_plan(
            self.profile,
            self.mode,
            self.image_streaming,
            worker_image=self.verl_image,
            region=self.region,
            project=self.project,
            cluster_name=self.cluster_name,
        )

    @property
    def placement_policy_name(self) -> str | None:
        """verl-gke:placementPolicy as GKE takes it: the policy's name."""
        if self.placement_policy is None:
            return None
        return placement.policy_name(self.placement_policy)

    @property
    def total_gpus(self) -> int:
        return self.gpu_nodes * self.profile.gpus_per_node

    @property
    def cpu_boot_disk_type(self) -> str:
        family = self.cpu_machine_type.split("-", 1)[0]
        return "hyperdisk-balanced" if family in _HYPERDISK_ONLY_FAMILIES else "pd-balanced"

    def fix(self, field_name: str, value: object) -> str:
        return f"pulumi config set {config_key(field_name)} {value} -s {self.stack}"


# Validation context key: a callable (gpu_nodes -> bool) that says whether the whole stack,
# the GRPO job included, accepts that node count (load_settings builds it from `job_check`).
ACCEPT_GPU_NODES = "accept_gpu_nodes"


def _problems(
    s: StackSettings, accept_gpu_nodes: Callable[[int], bool] | None = None
) -> list[str | None]:
    """Each rule returns None or one message: key = value, why, and the fix."""
    profile = s.profile
    return [
        _check_project(s),
        _check_region(s),
        _check_zone(s),
        _check_mode(s, profile),
        _check_reservation(s, profile),
        _check_placement_policy(s, profile),
        _check_capacity(s, profile),
        _check_gpu_nodes(s, profile, accept_gpu_nodes),
        _check_cluster_name(s),
        _check_namespace(s, profile),
        _check_ksa(s),
        _check_bucket(s),
        _check_cpu_machine(s),
        _check_cpu_nodes(s),
        _check_release_channel(s),
        _check_kubernetes_version(s, profile),
        _check_cidrs(s),
        _check_authorized_networks(s),
        *_input_class_problems(s, profile),
        _check_chart_version(s, "kuberay_chart_version", known_values.KUBERAY_CHART_VERSIONS),
        _check_chart_version(
            s,
            "dra_driver_chart_version",
            known_values.DRA_DRIVER_CHART_VERSIONS,
            _dra_charts(profile),
        ),
        _check_dra_driver_chart(s, profile),
    ]


def _check_name(
    s: StackSettings,
    field_name: str,
    value: str,
    pattern: re.Pattern[str],
    rule: str,
    max_len: int | None = None,
) -> str | None:
    if pattern.match(value) and (max_len is None or len(value) <= max_len):
        return None
    limit = f", at most {max_len} characters" if max_len else ""
    return f"{config_key(field_name)} = {value!r}: must be {rule}{limit}."


def _check_region(s: StackSettings) -> str | None:
    # Only a malformed name is refused: the public region table is not every region a project
    # can use (load_settings warns about a region missing from it).
    if _REGION.match(s.region):
        return None
    region = known_values.region_for_fix(s.region, s.zone)
    fix = f"Fix: pulumi config set gcp:region {region} -s {s.stack}"
    if _ZONE.match(s.region):
        return f"gcp:region = {s.region!r}: a zone, not a region. {fix}"
    return f"gcp:region = {s.region!r}: not a region name (e.g. us-central1). {fix}"


def _check_zone(s: StackSettings) -> str | None:
    match = _ZONE.match(s.zone)
    region = known_values.region_for_fix(s.region, s.zone)
    if not match:
        return (
            f"{config_key('zone')} = {s.zone!r}: not a zone name (e.g. "
            f"{known_values.zone_in(region)}). Fix: {s.fix('zone', known_values.zone_in(region))} "
            f"(the zone of your GPU reservation)"
        )
    if not _REGION.match(s.region):
        return None  # _check_region names the region to set
    if match["region"] != s.region:
        return (
            f"{config_key('zone')} = {s.zone!r} is not in gcp:region {s.region!r}: the GPU nodes, "
            f"the RoCE network profile and the subnets must share one region. Fix: "
            f"pulumi config set gcp:region {match['region']} -s {s.stack}, or "
            f"{s.fix('zone', known_values.zone_in(s.region, s.zone[-1]))} (the zone of your "
            f"reservation)"
        )
    return None


def _check_mode(s: StackSettings, profile: AcceleratorProfile) -> str | None:
    if s.mode in profile.modes:
        return None
    allowed = ", ".join(m.value for m in profile.modes)
    return (
        f"{config_key('mode')} = {s.mode.value!r}: profile {profile.name} supports only {allowed} "
        f"({profile.description}). Fix: {s.fix('mode', profile.default_mode.value)}"
    )


def _check_reservation(s: StackSettings, profile: AcceleratorProfile) -> str | None:
    if s.reservation is None:
        if profile.reservation_required:
            return (
                f"{config_key('reservation')} is not set: {profile.name} machines "
                f"({profile.machine_type}) are only available through a reservation. Fix: "
                f"{s.fix('reservation', _RESERVATION_FORM)}"
            )
        return None
    if _RESERVATION.match(s.reservation):
        return None
    return (
        f"{config_key('reservation')} = {s.reservation!r}: expected NAME, "
        f"NAME/reservationBlocks/BLOCK[/reservationSubBlocks/SUB_BLOCK] or "
        f"projects/PROJECT/reservations/NAME[/...] (lowercase "
        f"letters, digits, hyphens). Fix: {s.fix('reservation', 'my-reservation')}"
    )


def _check_placement_policy(s: StackSettings, profile: AcceleratorProfile) -> str | None:
    """An existing workload policy instead of the stack's own (config/placement.py)."""
    if s.placement_policy is None:
        return None
    key = config_key("placement_policy")
    drop = f"pulumi config rm {key} -s {s.stack}"
    if profile.placement is None:
        return (
            f"{key} = {s.placement_policy!r}: {profile.name} GPU pools use no workload policy "
            f"(only A4X's 1x72 NVL72 placement does). Fix: {drop}"
        )
    why = placement.policy_problem(s.placement_policy, s.project, s.region)
    if why is None:
        return None
    return (
        f"{key} = {s.placement_policy!r}: {why}. Fix: {drop} (the stack then creates its own "
        f"policy), or create one in {s.region}: gcloud beta compute resource-policies create "
        f"workload-policy NAME --type {profile.placement.type} --accelerator-topology "
        f"{profile.placement.accelerator_topology} --project {s.project} --region {s.region}"
    )


def _default_capacity(profile: AcceleratorProfile, mode: str, reservation: object) -> str:
    """`reservation` with a reservation; without one flex-start, where GKE offers it for the
    profile (on-demand is not offered for these machines, config/profiles.py)."""
    if reservation:
        return Capacity.RESERVATION.value
    supported = profile.capacity.get(Mode(mode)) if mode in set(Mode) else None
    if supported is None or Capacity.FLEX_START in supported.supported:
        return Capacity.FLEX_START.value  # (no support entry: _check_mode reports the mode)
    # Reservation-only profiles (A4X): _check_reservation says the reservation is missing.
    return supported.supported[0].value


def _check_capacity(s: StackSettings, profile: AcceleratorProfile) -> str | None:
    """GKE's support matrix (config/profiles.py) and the reservation that goes with it."""
    key = config_key("capacity")
    support = profile.capacity.get(s.mode)
    if support is not None and s.capacity not in support.supported:
        allowed = ", ".join(c.value for c in support.supported)
        other = next((p for p in PROFILES.values() if s.capacity in _supported_anywhere(p)), None)
        elsewhere = (
            f", or a profile that offers it (e.g. {other.name}: verl-gke:profile {other.name})"
            if other
            else ""
        )
        return (
            f"{key} = {s.capacity.value!r}: {profile.name} on GKE {s.mode.value} supports only "
            f"{allowed} ({support.refused_reason}). Fix: "
            f"{s.fix('capacity', _default_capacity(profile, s.mode.value, s.reservation))}"
            f"{elsewhere}"
        )
    if s.capacity is Capacity.RESERVATION and s.reservation is None:
        if profile.reservation_required:
            return None  # _check_reservation already names the missing reservation
        return (
            f"{key} = 'reservation' but {config_key('reservation')} is not set: there is no "
            f"reservation to draw the GPU nodes from. Fix: "
            f"{s.fix('reservation', 'RESERVATION_NAME')}, or {s.fix('capacity', 'flexStart')}"
        )
    if s.capacity is not Capacity.RESERVATION and s.reservation is not None:
        return (
            f"{key} = {s.capacity.value!r} with {config_key('reservation')} = "
            f"{s.reservation!r}: {s.capacity.value} capacity is taken outside any reservation "
            f"(GKE requires NO_RESERVATION for flex-start and Spot node pools), so the "
            f"reservation would be ignored. Fix: pulumi config rm {config_key('reservation')} "
            f"-s {s.stack}, or {s.fix('capacity', Capacity.RESERVATION.value)}"
        )
    return None


def _supported_anywhere(profile: AcceleratorProfile) -> set[Capacity]:
    return {c for support in profile.capacity.values() for c in support.supported}


def _check_gpu_nodes(
    s: StackSettings, profile: AcceleratorProfile, accept: Callable[[int], bool] | None
) -> str | None:
    if 1 <= s.gpu_nodes <= profile.max_gpu_nodes:
        return None
    # The nearest count in range that every other rule (the GRPO job's batch split and memory
    # fit included, through `accept`) takes as well.
    in_range = sorted(range(1, profile.max_gpu_nodes + 1), key=lambda n: abs(n - s.gpu_nodes))
    fix = next((n for n in in_range if accept is None or accept(n)), in_range[0])
    return (
        f"{config_key('gpu_nodes')} = {s.gpu_nodes}: {profile.name} allows 1 to "
        f"{profile.max_gpu_nodes} GPU nodes ({profile.max_gpu_nodes_reason}). Fix: "
        f"{s.fix('gpu_nodes', fix)}"
    )


def _check_cluster_name(s: StackSettings) -> str | None:
    problem = _check_name(
        s,
        "cluster_name",
        s.cluster_name,
        _GCE_NAME,
        "lowercase letters, digits and hyphens, starting with a letter",
        MAX_CLUSTER_NAME,
    )
    return problem and f"{problem} Fix: {s.fix('cluster_name', 'verl-' + s.profile_name)}"


def _check_namespace(s: StackSettings, profile: AcceleratorProfile) -> str | None:
    key, value = config_key("namespace"), s.namespace
    fix = s.fix("namespace", known_values.SUGGESTED_NAMESPACE)
    if not (_DNS_LABEL.match(value) and len(value) <= 63):
        return f"{key} = {value!r}: must be a DNS-1123 label, at most 63 characters. Fix: {fix}"
    # The DRA driver's chart gets its own namespace (manifests/dra_driver.py); KubeRay shares the
    # workload namespace.
    taken = {DRA_DRIVER_NAMESPACE: "the NVIDIA DRA driver"} if profile.multi_node_nvlink else {}
    why = known_values.namespace_problem(value, taken)
    return f"{key} = {value!r}: {why}. Fix: {fix}" if why else None


def _check_ksa(s: StackSettings) -> str | None:
    key, value = config_key("ksa_name"), s.ksa_name
    fix = s.fix("ksa_name", known_values.SUGGESTED_KSA)
    if not (_DNS_LABEL.match(value) and len(value) <= 63):
        return f"{key} = {value!r}: must be a DNS-1123 label, at most 63 characters. Fix: {fix}"
    why = known_values.ksa_problem(value)
    return f"{key} = {value!r}: {why}. Fix: {fix}" if why else None


def _bucket_ok(name: str) -> bool:
    return bool(_BUCKET.match(name)) and not known_values.google_like(name)


def _check_bucket(s: StackSettings) -> str | None:
    name = s.bucket_name
    if _bucket_ok(name):
        return None
    return (
        f"{config_key('bucket_name')} = {name!r}: GCS bucket names are 3-63 lowercase letters, "
        f"digits, hyphens or underscores, start and end with a letter or digit, and must not "
        f"start with 'goog' or contain 'google' or a close misspelling of it (GCS bucket naming "
        f"rules). Fix: "
        f"{s.fix('bucket_name', _bucket_suggestion(s))}"
    )


def _check_cpu_machine(s: StackSettings) -> str | None:
    # A machine type that does not exist fails only when GKE creates the pool.
    problem = input_rules.cpu_machine_problem(s.cpu_machine_type)
    if problem is None:
        return None
    why, suggestion = problem
    return (
        f"{config_key('cpu_machine_type')} = {s.cpu_machine_type!r}: {why}. "
        f"Fix: {s.fix('cpu_machine_type', suggestion)}"
    )


def _check_cpu_nodes(s: StackSettings) -> str | None:
    if s.cpu_nodes <= s.cpu_max_nodes:
        return None
    return (
        f"{config_key('cpu_nodes')} = {s.cpu_nodes} is above {config_key('cpu_max_nodes')} = "
        f"{s.cpu_max_nodes}. Fix: {s.fix('cpu_max_nodes', s.cpu_nodes)}"
    )


def _check_release_channel(s: StackSettings) -> str | None:
    if s.release_channel in RELEASE_CHANNELS:
        return None
    return (
        f"{config_key('release_channel')} = {s.release_channel!r}: must be one of "
        f"{', '.join(RELEASE_CHANNELS)}. Fix: {s.fix('release_channel', 'REGULAR')}"
    )


def version_tuple(version: str) -> tuple[int, ...]:
    """`1.34`, `1.34.1` or `1.34.1-gke.1829001` as comparable numbers."""
    return tuple(int(part) for part in re.findall(r"[0-9]+", version))


def _check_kubernetes_version(s: StackSettings, profile: AcceleratorProfile) -> str | None:
    # A floor, not a pin: the release channel picks the cluster's version (a pinned version
    # breaks cluster creation once it leaves the channel); components/gke_cluster.py checks the
    # version GKE returns against this floor before the GPU pool exists.
    floor = profile.kubernetes_floor(s.mode)
    match = _K8S_VERSION.match(s.kubernetes_version)
    too_new = match and known_values.kubernetes_minor_problem(int(match["minor"]))
    if too_new:
        return (
            f"{config_key('kubernetes_version')} = {s.kubernetes_version!r}: {too_new}, so the "
            f"cluster could never meet this floor. Fix: {s.fix('kubernetes_version', floor)}"
        )
    if match and version_tuple(s.kubernetes_version) >= version_tuple(floor):
        return None
    return (
        f"{config_key('kubernetes_version')} = {s.kubernetes_version!r}: the lowest GKE version "
        f"the stack accepts must be {floor} or later for {profile.name} on {s.mode.value} "
        f"(DRA resource.k8s.io/v1 and GKE managed DRANET), written as "
        f"1.MINOR[.PATCH[-gke.N]]; the release channel picks the actual version. "
        f"Fix: {s.fix('kubernetes_version', floor)}"
    )


_CIDR_FIELDS = ("host_subnet_cidr", "pods_cidr", "services_cidr")
# 192.168.0.0/16 is taken by the gVNIC and RoCE subnets (tutorial §2.1).
_RDMA_RANGE = ipaddress.IPv4Network("192.168.0.0/16")


def _check_cidrs(s: StackSettings) -> str | None:
    networks: dict[str, ipaddress.IPv4Network] = {}
    for name in _CIDR_FIELDS:
        parsed = input_rules.ipv4_network(getattr(s, name))
        if isinstance(parsed, str):
            default = StackSettings.model_fields[name].default
            value = getattr(s, name)
            return f"{config_key(name)} = {value!r}: {parsed}. Fix: {s.fix(name, default)}"
        networks[name] = parsed
    return _cidr_size_problem(s, networks) or _cidr_overlap_problem(s, networks)


def _check_authorized_networks(s: StackSettings) -> str | None:
    key = config_key("authorized_networks")
    for cidr in s.authorized_networks:
        problem = cluster_security.cidr_problem(cidr)
        if problem is None:
            continue
        shown = ",".join(s.authorized_networks)
        fixed = ",".join(cluster_security.corrected_cidrs(s.authorized_networks))
        fix = (
            s.fix("authorized_networks", fixed)
            if fixed
            else f"pulumi config rm {key} -s {s.stack} (the endpoint is then open to the "
            f"internet), or set your machine's IPv4 address as A.B.C.D/32"
        )
        return f"{key} = {shown!r}: {cidr!r} is {problem[0]}. Fix: {fix}"
    return None


def _cidr_size_problem(s: StackSettings, networks: dict[str, ipaddress.IPv4Network]) -> str | None:
    nodes = s.cpu_max_nodes + s.gpu_nodes
    needs = {
        "pods_cidr": input_rules.pods_prefix_needed(nodes),
        "host_subnet_cidr": input_rules.host_prefix_needed(nodes),
    }
    for name, prefix in needs.items():
        if networks[name].prefixlen <= prefix:
            continue
        others = [n for key, n in networks.items() if key != name] + [_RDMA_RANGE]
        fix = input_rules.free_range(prefix, others)
        return (
            f"{config_key(name)} = {networks[name]}: too small for {nodes} nodes "
            f"({config_key('cpu_max_nodes')} + {config_key('gpu_nodes')}); it needs a /{prefix} "
            f"or larger (GKE: one /24 of pod addresses per node; 4 addresses per subnet are "
            f"reserved). Fix: {s.fix(name, fix)}"
        )
    return None


def _cidr_overlap_problem(
    s: StackSettings, networks: dict[str, ipaddress.IPv4Network]
) -> str | None:
    named = [*((config_key(k), n) for k, n in networks.items()), ("the RDMA subnets", _RDMA_RANGE)]
    for i, (first_key, first) in enumerate(named):
        for second_key, second in named[i + 1 :]:
            if not first.overlaps(second):
                continue
            # Blame a range the user set (not at its default), so the fix names the changed key.
            changed = [
                k
                for k in _CIDR_FIELDS
                if config_key(k) in (first_key, second_key)
                and getattr(s, k) != StackSettings.model_fields[k].default
            ]
            name = (
                changed[0]
                if changed
                else next(k for k in _CIDR_FIELDS if config_key(k) in (first_key, second_key))
            )
            value = networks[name]
            other_key, other = (
                (second_key, second) if config_key(name) == first_key else (first_key, first)
            )
            taken = [n for k, n in networks.items() if k != name] + [_RDMA_RANGE]
            fix = input_rules.free_range(value.prefixlen, taken)
            return (
                f"{config_key(name)} = {value} overlaps {other_key} = {other}: the host, pod, "
                f"service and RDMA ranges must be disjoint. Fix: {s.fix(name, fix)}"
            )
    return None


def _check_image(s: StackSettings, field_name: str, example: str) -> str | None:
    # A tag or digest pins what the nodes pull; an untagged name silently means `:latest`.
    value = getattr(s, field_name)
    why = input_rules.image_problem(value)
    if why is None:
        return None
    return f"{config_key(field_name)} = {value!r}: {why}. Fix: {s.fix(field_name, example)}"


def _check_dra_driver_chart(s: StackSettings, profile: AcceleratorProfile) -> str | None:
    # Caught here, not as a failed `helm install` (rolled back) after four GPU nodes exist.
    value = s.dra_driver_chart_version
    if not profile.multi_node_nvlink or not _CHART_VERSION.match(value):
        return None
    release = tuple(int(part) for part in value.lstrip("v").split("-")[0].split("."))
    minimum = tuple(int(part) for part in DRA_DRIVER_MIN_CHART.split("."))
    if release >= minimum:
        return None
    return (
        f"{config_key('dra_driver_chart_version')} = {value!r}: charts before "
        f"{DRA_DRIVER_MIN_CHART} install their DeviceClasses as resource.k8s.io/v1beta1, which "
        f"GKE {profile.min_kubernetes_version} does not serve unless enabled. "
        f"Fix: {s.fix('dra_driver_chart_version', DRA_DRIVER_MIN_CHART)}"
    )


def _dra_charts(profile: AcceleratorProfile) -> tuple[str, ...]:
    """Published DRA driver charts this profile can install (_check_dra_driver_chart)."""
    if not profile.multi_node_nvlink:
        return known_values.DRA_DRIVER_CHART_VERSIONS
    floor = version_tuple(DRA_DRIVER_MIN_CHART)
    return tuple(v for v in known_values.DRA_DRIVER_CHART_VERSIONS if version_tuple(v) >= floor)


def _check_chart_version(
    s: StackSettings,
    field_name: str,
    published: tuple[str, ...],
    usable: tuple[str, ...] | None = None,
) -> str | None:
    # A bad chart version would only fail in `helm install`, after the cluster exists.
    value = getattr(s, field_name)
    problem = known_values.chart_version_problem(value, published, usable or published)
    if problem is None:
        return None
    return (
        f"{config_key(field_name)} = {value!r}: {problem[0]}. Fix: {s.fix(field_name, problem[1])}"
    )


# --- classes of bad input (config/input_rules.py): one rule for every member of a class ------


def _kubernetes_floor(profile: AcceleratorProfile, mode: object) -> str:
    try:
        return profile.kubernetes_floor(Mode(str(mode)))
    except (ValueError, KeyError):
        return profile.min_kubernetes_version  # _check_mode reports the bad mode


def image_fields() -> list[str]:
    """Every image setting (verlImage, dataPrepImage, ncclInstallerImage, ...)."""
    return [name for name in StackSettings.model_fields if name.endswith("_image")]


def _check_project(s: StackSettings) -> str | None:
    if _PROJECT_ID.match(s.project):
        return None
    key = config_key("project")
    if s.project.isdigit():
        return (
            f"{key} = {s.project!r}: this is a project number; {key} is the project ID. Fix: "
            f"gcloud projects describe {s.project} --format='value(projectId)', then "
            f"pulumi config set {key} PROJECT_ID -s {s.stack}"
        )
    return (
        f"{key} = {s.project!r}: a project ID is 6-30 characters: lowercase letters, digits and "
        f"hyphens, starting with a letter and not ending with a hyphen. Fix: "
        f"pulumi config set {key} PROJECT_ID -s {s.stack} (gcloud projects list shows yours)"
    )


def _bucket_suggestion(s: StackSettings) -> str:
    """A bucket name that passes _check_bucket, even where gcp:project is itself invalid."""
    base = re.sub(r"[^a-z0-9_-]+", "-", f"{s.project}-verl".lower()).strip("-_")
    base = base.replace("google", "g").removeprefix("goog")
    candidate = base[:63].strip("-_")
    if _bucket_ok(candidate) and candidate[0].isalnum():
        return candidate
    return f"verl-{s.profile_name}-checkpoints"


def _input_class_problems(s: StackSettings, profile: AcceleratorProfile) -> list[str | None]:
    problems: list[str | None] = [
        _check_image(s, name, getattr(profile, name)) for name in image_fields()
    ]
    problems.append(_reason(s, "ray_version", input_rules.ray_version_problem, profile.ray_version))
    problems.append(_reason(s, "verl_ref", input_rules.git_ref_problem, profile.verl_ref))
    model = input_rules.model_problem(s.model, DEFAULT_MODEL)
    if model is not None:
        problems.append(
            f"{config_key('model')} = {s.model!r}: {model[0]}. Fix: {s.fix('model', model[1])}"
        )
    token = input_rules.hf_token_problem(s.hf_token.get_secret_value())
    if token is not None:
        key = config_key("hf_token")
        problems.append(
            f"{key} = <secret>: {token}. Fix: pulumi config set --secret {key} hf_... -s "
            f"{s.stack} (the token from huggingface.co/settings/tokens, pasted without spaces)"
        )
    if s.fabric_min_busbw_gbps is not None:
        problems.append(
            _reason(
                s,
                "fabric_min_busbw_gbps",
                input_rules.busbw_problem,
                profile.fabric_min_busbw_gbps,
                s.fabric_min_busbw_gbps,
            )
        )
    problems.append(_check_dranet_channel(s))
    problems.append(_check_image_streaming(s))
    problems.append(_check_installer_arch(s, profile))
    return problems


def _check_installer_arch(s: StackSettings, profile: AcceleratorProfile) -> str | None:
    why = known_values.image_arch_problem(s.nccl_installer_image, profile.arch)
    if why is None:
        return None
    return (
        f"{config_key('nccl_installer_image')} = {s.nccl_installer_image!r}: {why}. "
        f"Fix: {s.fix('nccl_installer_image', profile.nccl_installer_image)}"
    )


def _reason(
    s: StackSettings, field_name: str, rule: Any, fix_value: object, value: object = None
) -> str | None:
    value = getattr(s, field_name) if value is None else value
    why = rule(value)
    if why is None:
        return None
    return f"{config_key(field_name)} = {value!r}: {why}. Fix: {s.fix(field_name, fix_value)}"


def _check_image_streaming(s: StackSettings) -> str | None:
    why = streaming_refusal(s.profile, s.verl_image)
    if not s.image_streaming or why is None:
        return None
    return (
        f"{config_key('image_streaming')} = true: {why}, so this stack cannot stream the "
        f"worker image; with streaming off a DaemonSet pre-pulls it on every GPU node of a "
        f"Standard cluster as soon as the node registers. Fix: "
        f"{s.fix('image_streaming', 'false')} (or remove the key)"
    )


def _check_dranet_channel(s: StackSettings) -> str | None:
    if s.profile.networking.get(s.mode) is not GpuNetworking.DRANET_COMPUTE_CLASS:
        return None
    why = AUTOPILOT_DRANET_REFUSED_CHANNELS.get(s.release_channel)
    if why is None:
        return None
    floor = s.profile.kubernetes_floor(s.mode)
    return (
        f"{config_key('release_channel')} = {s.release_channel!r}: Autopilot DRANET needs GKE "
        f"{floor} or later, which this channel does not give a new cluster ({why}). "
        f"Fix: {s.fix('release_channel', 'RAPID')}"
    )


# --- reading Pulumi config -------------------------------------------------------------------


@dataclass(frozen=True)
class LoadedSettings:
    settings: StackSettings
    # Placeholders replaced by example values (offline plan only), for the plan to print.
    notices: tuple[str, ...]


# Example values the offline plan uses where the committed stack file still has a placeholder.
_OFFLINE_EXAMPLES = {
    "gcp:project": lambda cfg: "example-project",
    f"{NAMESPACE}:zone": lambda cfg: f"{cfg.get('gcp:region', 'us-central1')}-b",
    f"{NAMESPACE}:reservation": lambda cfg: "example-reservation",
    f"{NAMESPACE}:hfToken": lambda cfg: "hf_offline_plan_placeholder",
}


# What the offline plan reads for a value the stack file holds encrypted (`secure: v1:...`, written
# by `pulumi config set --secret`; tools/offline_engine.py): only the Pulumi engine can decrypt it,
# with the stack's secrets provider. The value is set, so it is planned with a stand-in.
ENCRYPTED_VALUE = "[encrypted in the stack file]"
OFFLINE_SECRET_STAND_IN = "offline-plan-secret"


def _plan_encrypted_values(values: dict[str, str], notices: list[str], where: str) -> None:
    """Every encrypted value (hfToken, wandbApiKey, any key set with --secret) counts as set; the
    plan uses a stand-in that passes the key's checks and says so."""
    for key in sorted(k for k, v in values.items() if v == ENCRYPTED_VALUE):
        example = _OFFLINE_EXAMPLES.get(key)
        values[key] = example(values) if example else OFFLINE_SECRET_STAND_IN
        notices.append(
            f"{key} is encrypted in {where} (set with --secret): the offline plan cannot decrypt "
            f"it and plans with a stand-in; pulumi up uses the real value"
        )


def _drop_unused_reservation_placeholder(values: dict[str, str], notices: list[str]) -> None:
    """The committed stack files carry a reservation placeholder; a stack that asks for capacity
    outside a reservation (verl-gke:capacity flexStart, spot) has no use for it."""
    key = f"{NAMESPACE}:reservation"
    capacity = values.get(f"{NAMESPACE}:capacity")
    if capacity in (None, "", Capacity.RESERVATION.value) or not is_placeholder(values.get(key)):
        return
    notices.append(
        f"{key} is still the placeholder {values.pop(key)!r}; ignored, since "
        f"{NAMESPACE}:capacity = {capacity!r} uses no reservation"
    )


def valid_keys() -> list[str]:
    """Every `verl-gke:` key a user may set."""
    return sorted(
        f"{NAMESPACE}:{field.alias}"
        for name, field in StackSettings.model_fields.items()
        if name not in {"stack", *GCP_KEYS} and field.alias
    )


# Rules from layers config may not import, handed in by the composition root: `job_check` raises
# ValueError when the GRPO job cannot run on the settings (training/assembly.training_job), and
# `redact(text, known)` hides every secret-looking value in an error (jobs/secret_scan.redact).
JobCheck = Callable[[StackSettings], object]
Redact = Callable[[str, Mapping[str, str]], str]


def load_settings(
    stack: str,
    config: Mapping[str, str],
    *,
    offline: bool,
    stack_file: str | None = None,
    job_check: JobCheck | None = None,
    redact: Redact | None = None,
    secret_keys: Collection[str] = (),
) -> LoadedSettings:
    """Validate raw Pulumi config (`{"namespace:key": value}`) into StackSettings.

    offline=True (the offline plan) plans placeholders and a missing hfToken with example values
    and reports them as notices; a real deployment rejects them.
    """
    try:
        return _load_settings(stack, config, offline, stack_file, job_check)
    except SettingsError as error:
        if redact is None:
            raise
        known = {
            str(value): f"<redacted: {key}>"
            for key, value in config.items()
            if (_SECRET_KEY_NAME.search(key) or key in secret_keys) and value
        }
        raise SettingsError(redact(str(error), known)) from None


def _load_settings(
    stack: str,
    config: Mapping[str, str],
    offline: bool,
    stack_file: str | None,
    job_check: JobCheck | None,
) -> LoadedSettings:
    where = stack_file or f"Pulumi.{stack}.yaml"
    problems = _unknown_keys(config, stack)
    values = dict(config)
    notices: list[str] = []
    _plan_encrypted_values(values, notices, where)
    _drop_unused_reservation_placeholder(values, notices)
    for key, example in _OFFLINE_EXAMPLES.items():
        value = values.get(key)
        missing_token = key.endswith(":hfToken") and value in (None, "")
        if not (is_placeholder(value) or missing_token):
            continue
        if offline:
            values[key] = example(values)
            state = "not set" if missing_token else f"still the placeholder {value!r}"
            notices.append(f"{key} is {state}; planning with {values[key]!r}")
        elif missing_token:
            problems.append(
                f"{key} is not set: the data-prep Job downloads the model with it. Fix: "
                f"pulumi config set --secret {key} hf_... -s {stack}"
            )
        else:
            # A secret kept inside the template's brackets is still a secret: never echo it.
            shown = "<secret>" if _SECRET_KEY_NAME.search(key) else repr(value)
            flag = "--secret " if _SECRET_KEY_NAME.search(key) else ""
            problems.append(
                f"{key} = {shown} is still the placeholder from {where}. Fix: "
                f"pulumi config set {flag}{key} YOUR_VALUE -s {stack} (or edit {where})"
            )
    for key in GCP_KEYS.values():
        if values.get(key) in (None, ""):
            problems.append(f"{key} is not set. Fix: pulumi config set {key} VALUE -s {stack}")
    if problems:
        raise SettingsError(_format(stack, problems))

    raw: dict[str, Any] = {"stack": stack, "profile": stack}
    for field_name, key in GCP_KEYS.items():
        raw[field_name] = values[key]
    prefix = f"{NAMESPACE}:"
    for key, value in values.items():
        if key.startswith(prefix):
            raw[key[len(prefix) :]] = value
    try:
        settings = StackSettings.model_validate(
            raw, context={ACCEPT_GPU_NODES: _gpu_nodes_acceptor(raw, job_check)}
        )
    except ValidationError as error:
        raise SettingsError(_format(stack, _describe(error, raw, job_check))) from None
    notices.extend(_image_notices(settings))
    notices.extend(_table_notices(settings))
    notices.extend(job_wait_setting.legacy_notices(raw.get("jobWait"), stack))
    return LoadedSettings(settings, tuple(notices))


def _gpu_nodes_acceptor(raw: dict[str, Any], job_check: JobCheck | None) -> Callable[[int], bool]:
    def accept(nodes: int) -> bool:
        try:
            settings = StackSettings.model_validate({**raw, "gpuNodes": nodes})
            if job_check is not None:
                job_check(settings)
        except (ValidationError, ValueError):
            return False
        return True

    return accept


def _table_notices(settings: StackSettings) -> list[str]:
    """Values the program's tables do not list but that may exist (a region or zone missing
    from the public table, a chart released after the table was read): warned, not refused."""
    found = [
        known_values.location_notice(settings.region, settings.zone),
        known_values.chart_version_notice(
            config_key("kuberay_chart_version"),
            settings.kuberay_chart_version,
            known_values.KUBERAY_CHART_VERSIONS,
        ),
        known_values.chart_version_notice(
            config_key("dra_driver_chart_version"),
            settings.dra_driver_chart_version,
            known_values.DRA_DRIVER_CHART_VERSIONS,
        ),
    ]
    return [notice for notice in found if notice]


def _image_notices(settings: StackSettings) -> list[str]:
    """An x86-only image on arm64 nodes fails only once the GPU nodes pull it ("exec format
    error"). arm64 builds say so in their tag, so flag an arm64 stack's image whose tag does not."""
    if settings.profile.arch != "arm64":
        return []
    tag = settings.verl_image.rsplit("/", 1)[-1]
    if "arm64" in tag or "aarch64" in tag:
        return []
    return [
        f"{config_key('verl_image')} = {settings.verl_image!r}: {settings.profile.name} nodes "
        f"are arm64 and the tag names neither arm64 nor aarch64; make sure the image is built "
        f"for arm64 (the default is {settings.profile.verl_image})"
    ]


def _unknown_keys(config: Mapping[str, str], stack: str) -> list[str]:
    known = valid_keys()
    problems = []
    for key in sorted(config):
        if input_rules.near_miss_namespace(key, NAMESPACE):
            # Pulumi hands such a key to the program, which would silently ignore it.
            meant = f"{NAMESPACE}:{key.split(':', 1)[1]}"
            secret = bool(_SECRET_KEY_NAME.search(key))
            value = "VALUE" if secret or " " in str(config[key]) else str(config[key])
            problems.append(
                f"{key}: the namespace {key.split(':', 1)[0]!r} is not {NAMESPACE!r}, so this "
                f"setting would be ignored. Fix: pulumi config rm {key} -s {stack}, then "
                f"pulumi config set {'--secret ' if secret else ''}{meant} {value} -s {stack} "
                f"(or rename the key in the stack file)"
            )
            continue
        if not key.startswith(f"{NAMESPACE}:") or key in known:
            continue
        flat = input_rules.flat_object_key(key, str(config[key]), stack, known)
        if flat:
            problems.append(flat)
            continue
        hint = input_rules.unknown_key_hint(key, stack, known)
        problems.append(f"{key} is not a setting of this program: {hint}")
    return problems


def _describe(error: ValidationError, raw: dict[str, Any], job_check: JobCheck | None) -> list[str]:
    problems = []
    for item in error.errors():
        if not item["loc"]:
            # Cross-field rules already phrase key, value and fix.
            problems.extend(str(item["ctx"]["error"]).split("\n"))
            continue
        field_alias = str(item["loc"][0])
        name = next(
            (n for n, f in StackSettings.model_fields.items() if f.alias == field_alias),
            field_alias,
        )
        key = config_key(name)
        if item["type"] == "missing":
            problems.append(f"{key} is required. Fix: pulumi config set {key} VALUE")
            continue
        shown = "<secret>" if name in SECRET_FIELDS else repr(item["input"])
        message = str(item["msg"]).removeprefix("Value error, ")
        fix = _type_error_fix(item, field_alias, key, raw, job_check)
        problems.append(f"{key} = {shown}: {message}.{f' Fix: {fix}' if fix else ''}")
    return problems


def _type_error_fix(
    item: Any, alias: str, key: str, raw: dict[str, Any], job_check: JobCheck | None
) -> str | None:
    """The first value, most likely meant first, that the field accepts with the rest of `raw`:
    the nearest allowed choice, the violated bound, the number meant, then the default."""
    candidates = input_rules.type_error_candidates(item["type"], item["input"], item.get("ctx"))
    # Booleans get their default, never a guess (deleteBucketOnDestroy=2 must not become true).
    candidates += _default_candidates(alias, raw)
    stack = raw.get("stack", "STACK")
    for candidate in candidates:
        if _field_accepts(raw, alias, key, candidate, job_check):
            return f"pulumi config set {key} {candidate} -s {stack}"
    if _field_accepts(raw, alias, key, None, job_check):
        return f"pulumi config rm {key} -s {stack} (the default applies)"
    return None


def _default_candidates(alias: str, raw: dict[str, Any]) -> list[str]:
    rest = {k: v for k, v in raw.items() if k != alias}
    try:
        defaults = StackSettings._profile_defaults(rest)
    except ValueError:
        defaults = {}
    name = next((n for n, f in StackSettings.model_fields.items() if f.alias == alias), "")
    field = StackSettings.model_fields.get(name)
    default = None if field is None or field.is_required() else field.get_default()
    found = [defaults.get(alias), {} if name == "job" else default]
    return [
        json.dumps(v)
        if isinstance(v, dict)
        else str(v).lower()
        if isinstance(v, bool)
        else str(getattr(v, "value", v))
        for v in found
        if v is not None and not isinstance(v, SecretStr)
    ]


def _field_accepts(
    raw: dict[str, Any], alias: str, key: str, value: str | None, job_check: JobCheck | None
) -> bool:
    """No rule refuses `value` (None: the key removed) for `alias`; when the rest of `raw` is
    valid too, the GRPO job accepts the result as well."""
    data = {k: v for k, v in raw.items() if k != alias} if value is None else {**raw, alias: value}
    try:
        settings = StackSettings.model_validate(data)
        if job_check is not None:
            job_check(settings)
    except ValidationError as error:
        for item in error.errors():
            if item["loc"] and item["loc"][0] == alias:
                return False
            lines = str((item.get("ctx") or {}).get("error", "")).split("\n")
            if not item["loc"] and any(line.startswith(f"{key} ") for line in lines):
                return False
    except ValueError:  # the GRPO job refuses the settings
        return False
    return True


def _format(stack: str, problems: list[str]) -> str:
    lines = "\n".join(f"  - {p}" for p in problems)
    return f"stack {stack!r}: invalid configuration, nothing was created:\n{lines}"


def settings_from_pulumi(
    job_check: JobCheck | None = None, redact: Redact | None = None
) -> LoadedSettings:
    """Read this stack's config from the Pulumi runtime (real engine or the offline plan);
    `job_check` and `redact` as in load_settings."""
    raw = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    offline = os.environ.get(OFFLINE_PLAN_ENV) == "1"
    # The engine lists the keys set with --secret (PULUMI_CONFIG_SECRET_KEYS, or in-process).
    secret = set(runtime_config.get_config_secret_keys_env())
    secret |= {key for key in raw if runtime_config.is_config_secret(key)}
    loaded = load_settings(
        pulumi.get_stack(),
        raw,
        offline=offline,
        job_check=job_check,
        redact=redact,
        secret_keys=secret,
    )
    return LoadedSettings(
        loaded.settings, (*plain_secret_notices(raw, secret, pulumi.get_stack()), *loaded.notices)
    )


# Config keys that hold a secret, by name (hfToken, wandbApiKey, ...).
_SECRET_KEY_NAME = re.compile(r"(token|secret|password|apikey|api_key)$", re.IGNORECASE)


def plain_secret_notices(config: Mapping[str, str], secret_keys: set[str], stack: str) -> list[str]:
    """A loud warning per secret-named key that was not set with --secret: its value sits in
    plain text in Pulumi.<stack>.yaml (and in any copy of it)."""
    return [
        f"WARNING: {key} is not a Pulumi secret: its value is stored in plain text in "
        f"Pulumi.{stack}.yaml. Fix: pulumi config set --secret {key} VALUE -s {stack}"
        for key in sorted(config)
        if key.startswith(f"{NAMESPACE}:")
        and _SECRET_KEY_NAME.search(key)
        and key not in secret_keys
        and config[key] not in (None, "")
        and not is_placeholder(config[key])
    ]
