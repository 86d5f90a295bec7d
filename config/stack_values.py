"""The stack's settings as typed fields: each field's config key, default and type, the profile's
defaults filled in, and what follows from them. The stack's rules (config/stack_rules.py) read
these values; config/settings.py checks them with those rules and reads them from Pulumi config.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from config import (
    cluster_security,
    input_rules,
    placement,
    recovery,
    run_inputs,
)
from config import evaluation as evaluation_setting
from config import job_wait as job_wait_setting
from config.capacity import DEFAULT_WAIT_MINUTES, MAX_WAIT_MINUTES, CapacityPlan, capacity_plan
from config.image_streaming import ImagePullPlan, pull_plan
from config.job_wait import JobWait
from config.networking import NetworkingPlan, networking_plan
from config.profiles import (
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

# Machine families that can only boot from Hyperdisk.
_HYPERDISK_ONLY_FAMILIES = ("n4", "n4d", "c4", "c4a", "c4d", "a4", "a4x", "a3u")


def config_key(field_name: str) -> str:
    """The Pulumi config key a settings field is read from."""
    if field_name in GCP_KEYS:
        return GCP_KEYS[field_name]
    field = StackValues.model_fields.get(field_name)
    return f"{NAMESPACE}:{field.alias if field and field.alias else to_camel(field_name)}"


class StackValues(BaseModel):
    """Everything a stack is built from, before the stack's rules (config/settings.py StackSettings
    adds them). Field aliases are the `verl-gke:` config keys."""

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
    # verl-gke:reservation is set, else `flexStart` where the profile offers it (default_capacity).
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
    # A Hub commit of verl-gke:model (40 hex digits): the data-prep Job downloads that commit
    # (snapshot_download(revision=...)) into a folder that names it; unset, the branch main.
    model_revision: str | None = Field(
        default=None, description="Hub commit (40 hex) of verl-gke:model to train (unset: main)"
    )
    # A config.json of the model in the user's repository (relative to Pulumi.yaml's folder): the
    # offline plan's architecture facts for a model not in training/model_table.py.
    model_config_file: str | None = Field(
        default=None,
        alias="modelConfig",
        description="config.json of verl-gke:model for the offline plan (path in your repo)",
    )
    # The run's dataset, reward and verl (config/run_inputs.py).
    dataset: str = Field(
        default=run_inputs.DEFAULT_DATASET,
        description="Hub dataset id (openai/gsm8k) or gs://<bucket>/FOLDER of verl parquet",
    )
    # A JSON object, as JSON text or set field by field with --path (left undeclared in
    # Pulumi.yaml, config/declared_defaults.py holds_object).
    dataset_columns: str | None = Field(
        default=None,
        description='Hub dataset columns: {"prompt": COL, "answer": COL, ...}',
        json_schema_extra={"object": True},
    )
    reward: str | None = Field(
        default=None, description="FILE.py:FUNCTION reward of this project (default: verl's)"
    )
    verl_source: str = Field(
        default="checkout", description="checkout (verlRef from GitHub) or image (its own verl)"
    )
    data_prep_image: str = Field(description="Image of the data-prep Job (default: the profile's)")
    nccl_installer_image: str = Field(
        description="Image of the NCCL installer DaemonSet (default: the profile's)"
    )
    # The version of ../shared/crds/ray.io_rayclusters.yaml the RayCluster is validated against.
    kuberay_chart_version: str = Field(default="1.7.0", description="KubeRay operator chart")
    # NVIDIA DRA driver chart (A4X only). Not the seed's 25.3.1: it hard-codes
    # resource.k8s.io/v1beta1 DeviceClasses, which GKE 1.34 does not serve unless enabled;
    # 25.3.2 picks resource.k8s.io/v1 from the cluster (docs/real-systems.md, "NVIDIA DRA
    # driver chart (A4X)").
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
    # The runner's recovery (config/recovery.py, payloads/export/supervise.py): restarts of a run
    # whose node was lost or that hung, and the hang watchdog's bounds.
    max_restarts: int | None = Field(
        default=None,
        ge=0,
        le=50,
        description="Restarts after a lost node or a hang (default: spot 10, otherwise 3)",
    )
    hang_minutes: int = Field(
        default=recovery.DEFAULT_HANG_MINUTES,
        ge=5,
        le=1440,
        description="Least minutes without a new training step before a run is hung",
    )
    first_step_minutes: int = Field(
        default=recovery.DEFAULT_FIRST_STEP_MINUTES,
        ge=10,
        le=1440,
        description="Minutes to the first training step before a run is hung",
    )
    # Merge the run's final checkpoint into a Hugging Face model folder in the bucket.
    export_model: bool = Field(
        default=True, description="Export the final checkpoint as a Hugging Face model folder"
    )
    # The evaluation of the export against the base model (config/evaluation.py): an object,
    # set field by field with --path; validated by config/stack_rules.py.
    evaluation: dict[str, Any] = Field(
        default_factory=dict,
        description="Evaluation of the export: {enabled, prompts, samples, temperature}",
        json_schema_extra={"object": True},
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
    # The user's own price of one GPU node-hour in USD (a committed-use or negotiated discount, a
    # reservation's price): wins over Google's catalog and the price table (pricing/billing.py).
    gpu_node_hourly_usd: float | None = Field(
        default=None,
        gt=0,
        le=10000,
        description="Your price of one GPU node-hour in USD (committed, negotiated or reserved)",
    )
    # A cap on the whole stack's $/h while it trains: a plan above it is refused before anything
    # is created (pricing/guard.py), like SkyPilot's and dstack's price caps.
    max_hourly_usd: float | None = Field(
        default=None,
        gt=0,
        le=100000,
        description="Refuse a plan whose stack costs more than this many USD per hour",
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
            "capacity": default_capacity(profile, mode, data.get("reservation")),
            "gpuNodes": profile.default_gpu_nodes,
            "clusterName": f"verl-{stack}",
            # Autopilot DRANET needs the rapid channel (the tutorial's Autopilot DRANET flow).
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

    @field_validator("evaluation", mode="before")
    @classmethod
    def _evaluation_object(cls, value: Any) -> Any:
        return evaluation_setting.parse(value)

    @field_validator("image_streaming", mode="before")
    @classmethod
    def _pulumi_boolean(cls, value: Any) -> Any:
        return input_rules.pulumi_boolean(value)

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
    def recovery_plan(self) -> recovery.RecoveryPlan:
        """Restart budget and hang bounds of the job's runner (config/recovery.py)."""
        return recovery.recovery_plan(
            self.capacity, self.max_restarts, self.hang_minutes, self.first_step_minutes,
            queued_provisioning=self.capacity_plan.queued_provisioning,
            capacity_wait_minutes=self.capacity_wait_minutes,
        )  # fmt: skip

    @property
    def evaluation_settings(self) -> evaluation_setting.EvaluationSettings:
        """verl-gke:evaluation, validated (config/stack_rules.py refuses a bad one first)."""
        return evaluation_setting.evaluation_settings(self.evaluation)

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


def default_capacity(profile: AcceleratorProfile, mode: str, reservation: object) -> str:
    """`reservation` with a reservation; without one flex-start, where GKE offers it for the
    profile (on-demand is not offered for these machines, config/profiles.py)."""
    if reservation:
        return Capacity.RESERVATION.value
    supported = profile.capacity.get(Mode(mode)) if mode in set(Mode) else None
    if supported is None or Capacity.FLEX_START in supported.supported:
        return Capacity.FLEX_START.value  # (no support entry: _check_mode reports the mode)
    # Reservation-only profiles (A4X): _check_reservation says the reservation is missing.
    return supported.supported[0].value


def version_tuple(version: str) -> tuple[int, ...]:
    """`1.34`, `1.34.1` or `1.34.1-gke.1829001` as comparable numbers."""
    return tuple(int(part) for part in re.findall(r"[0-9]+", version))


def _kubernetes_floor(profile: AcceleratorProfile, mode: object) -> str:
    try:
        return profile.kubernetes_floor(Mode(str(mode)))
    except (ValueError, KeyError):
        return profile.min_kubernetes_version  # _check_mode reports the bad mode


def image_fields() -> list[str]:
    """Every image setting (verlImage, dataPrepImage, ncclInstallerImage, ...)."""
    return [name for name in StackValues.model_fields if name.endswith("_image")]
