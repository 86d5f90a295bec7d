"""Typed stack settings, read from Pulumi config and validated before any resource exists.

Every message names the config key, the value it had and the command that fixes it, because the
reader is about to pay for GPUs by the hour and should not have to read this file to fix a typo.
"""

from __future__ import annotations

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

from config import (
    cluster_security,
    declared_defaults,
    input_rules,
    known_values,
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
# Keys whose committed value in Pulumi.<stack>.yaml is a placeholder the user must replace.
PLACEHOLDER_RE = re.compile(r"^<.+>$")

# Machine families that can only boot from Hyperdisk.
_HYPERDISK_ONLY_FAMILIES = ("n4", "n4d", "c4", "c4a", "c4d", "a4", "a4x", "a3u")


# Settings whose value is never shown in a message.
SECRET_FIELDS = frozenset({"hf_token", "wandb_api_key"})

# Set by the offline plan (planning/offline_engine.py): placeholders are planned with example
# values.
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
    # reservation's price): wins over Google's catalog and the price table (training/run_cost.py).
    gpu_node_hourly_usd: float | None = Field(
        default=None,
        gt=0,
        le=10000,
        description="Your price of one GPU node-hour in USD (committed, negotiated or reserved)",
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


def report(
    stack: str, what: str, found: tuple[list[str], list[str]], warn: Callable[[str], None]
) -> None:
    """A remote check's (problems, notes) before any resource exists: each note goes to `warn`,
    the problems are raised as one SettingsError that says `what` refused them."""
    problems, notes = found
    for note in notes:
        warn(note)
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise SettingsError(f"stack {stack!r}: {what}, nothing was created:\n{lines}")


# Validation context key: a callable (gpu_nodes -> bool) that says whether the whole stack,
# the GRPO job included, accepts that node count (load_settings builds it from `job_check`).
ACCEPT_GPU_NODES = "accept_gpu_nodes"


def _problems(
    s: StackSettings, accept_gpu_nodes: Callable[[int], bool] | None = None
) -> list[str | None]:
    """The rules of config/stack_rules.py, which read this module's StackSettings and
    config_key: imported when a stack is validated, after both modules are loaded."""
    from config.stack_rules import problems  # deferred: stack_rules imports this module

    return problems(s, accept_gpu_nodes)


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
    return [name for name in StackSettings.model_fields if name.endswith("_image")]


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
# by `pulumi config set --secret`; planning/offline_engine.py): only the Pulumi engine can decrypt
# it, with the stack's secrets provider. The value is set, so it is planned with a stand-in.
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


def object_keys() -> list[str]:
    """The `verl-gke:` keys whose value is an object, the only ones `--path KEY.FIELD` can set:
    Pulumi refuses an object for a key Pulumi.yaml declares a string, integer or boolean ("must
    be of type 'string'": pulumi/pulumi pkg/workspace/config.go validateStackConfigValue)."""
    return sorted(
        f"{NAMESPACE}:{field.alias}"
        for name, field in StackSettings.model_fields.items()
        if name not in {"stack", *GCP_KEYS}
        and field.alias
        and declared_defaults.holds_object(field)
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
    values = declared_defaults.without_unset(config, NAMESPACE, StackSettings)
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
    notices.extend(n for n in [reservation_owner_notice(settings)] if n)
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


def reservation_owner(settings: StackSettings) -> str | None:
    """The project that owns verl-gke:reservation when it is another project's
    (`projects/P/reservations/NAME`); None for one of the stack's own project."""
    match = re.match(r"projects/([^/]+)/reservations/([^/]+)", settings.reservation or "")
    return match[1] if match and match[1] != settings.project else None


def reservation_owner_notice(settings: StackSettings) -> str | None:
    # Compute Engine "Shared reservations": a project consumes another project's reservation only
    # when the owner shares it with that project (shareSettings: shareType SPECIFIC_PROJECTS and
    # the consumer in projectMap); GKE then fails to create nodes from an unshared one.
    owner = reservation_owner(settings)
    if owner is None:
        return None
    name = (settings.reservation or "").split("/")[3]
    return (
        f"{config_key('reservation')} = {settings.reservation!r} belongs to project {owner!r}: "
        f"the GPU nodes can use it only if {owner} shares it with {settings.project} (a shared "
        f"reservation). Check: gcloud compute reservations describe {name} --project={owner} "
        f"--zone={settings.zone} --format='yaml(shareSettings)' lists {settings.project} under "
        f"projectMap"
    )


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
        flat = input_rules.flat_object_key(key, str(config[key]), stack, object_keys())
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
