"""The GRPO run a stack submits, built from its settings and checked before any resource exists."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from config import rehearsal_scripts, run_inputs
from config.bucket_layout import (
    CHECKPOINT_ROOT,
    DATA_MOUNT,
    bucket_url,
    rehearsal_record_path,
)
from config.profiles import AcceleratorProfile
from config.settings import StackSettings, config_key
from config.verl_source import VERL_SOURCE_ENV, verl_source_label
from manifests.capacity import runner_capacity
from manifests.ray_cluster import WORKER_GROUP
from payloads.fabric import fabric_check
from training.grpo_preflight import grpo_notes, preflight, train_batch_step
from training.grpo_spec import (
    CONFIG_KEY,
    ENTRYPOINT_MODULE,
    OFFLOAD_POLICY_KEY,
    GrpoPreflightError,
    GrpoSpec,
    apply_overrides,
    default_grpo_spec,
    extra_override_flag,
    hydra_overrides,
    in_config_terms,
    render_runtime_env,
    resume_identity,
)
from training.job_secrets import job_settings_secret_problems, rendered_secret_problems
from training.memory_fit import (
    NODES_FIX,
    VLLM_MAX_NUM_SEQS_DEFAULT,
    FixAcceptor,
    GrpoMemoryInputs,
    MemoryBreakdown,
    MemoryFitError,
    MemoryFix,
    ModelArch,
    check_fit,
    estimate,
    lora_params,
)
from training.model_evaluation import EvaluationPlan, evaluation_plan
from training.model_export import SaveWatch, export_url, runner_job
from training.model_facts import ModelFacts, ModelFactsError, model_facts
from training.run_life import (
    checkpoint_keep_problems,
    checkpoints_to_keep,
    known_total_steps,
    lora_alpha,
    lora_alpha_problems,
    lora_shape,
    run_length,
    save_allowance_s,
    uses_lora,
)
from training.sequence_limits import (
    batched_tokens_overrides,
    rollout_batched_tokens,
    sequence_problems,
)
from training.trackers import tracker_problems
from training.verl_keys import extra_override_problems


@dataclass(frozen=True)
class TrainingJob:
    spec: GrpoSpec
    # verl-gke:model: its Hub id, architecture and where the facts were read.
    model: ModelFacts
    entrypoint: str
    runtime_env: dict[str, Any]
    # Where verl writes checkpoints, as seen from outside the cluster.
    checkpoint_url: str
    # Estimated per-GPU memory of each GRPO phase, and a warning when it is within 10 % of it.
    memory: MemoryBreakdown
    memory_warning: str | None
    # The Hydra overrides of `python3 -m verl.trainer.main_ppo` exactly as the job submits them;
    # the rehearsal runs verl's own code on the same list (components/rehearsal.py).
    hydra_overrides: tuple[str, ...]
    # Where the rehearsal writes its record of this command (config/bucket_layout.py).
    rehearsal_record: str
    # gs:// folder of the merged Hugging Face model (None: verl-gke:exportModel is false).
    model_export_url: str | None = None
    # What verl does with settings it runs but that change what GRPO learns (grpo_notes).
    notes: tuple[str, ...] = ()
    # The export's evaluation against the base model (None: no export, or turned off).
    evaluation: EvaluationPlan | None = None


def training_job(settings: StackSettings, *, hub: bool = False) -> TrainingJob:
    """The tutorial's job for the stack with `verl-gke:job` overrides; raises GrpoPreflightError
    (naming each setting and a value that works) when verl would reject it or it cannot fit.
    hub: read verl-gke:model's config.json from the Hub (a real `pulumi up`), else offline facts
    (training/model_facts.py)."""
    try:
        model = model_facts(settings, hub=hub)
    except ModelFactsError as error:
        raise GrpoPreflightError([str(error)]) from None
    return _job_for_model(settings, model, judge_fixes=True)


def _job_for_model(settings: StackSettings, model: ModelFacts, *, judge_fixes: bool) -> TrainingJob:
    """training_job with the model's facts read; judge_fixes: offer only the memory fixes that the
    whole preflight takes once applied (off while judging one, so a fix never recurses)."""
    spec = default_grpo_spec(
        settings.profile, settings.mode, settings.gpu_nodes, model, stack=settings.stack
    )
    spec = apply_overrides(with_run_inputs(spec, settings), settings.job)
    stack_problems = [
        *job_settings_secret_problems(spec, settings),
        *_data_layout_problems(spec),
        *_run_input_problems(spec, settings),
        *tracker_problems(spec, settings),
        *extra_override_problems(spec, settings.verl_ref),
        *sequence_problems(spec, model, _length_acceptor(settings, model) if judge_fixes else None),
        *_dataset_size_problems(spec, settings),
        *checkpoint_keep_problems(spec, settings.verl_ref),
        *lora_alpha_problems(spec),
    ]
    if stack_problems:
        raise GrpoPreflightError(stack_problems)
    preflight(
        spec,
        gpus_per_node_provisioned=settings.profile.gpus_per_node,
        gpu_nodes_provisioned=settings.gpu_nodes,
        model=model.arch,
    )
    memory_inputs = memory_fit_inputs(spec, settings.profile, model.arch)
    accept = _fix_acceptor(settings, spec, model) if judge_fixes else None
    try:
        warning = check_fit(memory_inputs, settings.profile.name, accept)
    except MemoryFitError as error:
        # A 32B job that runs out of memory after an hour of provisioning is the costliest
        # mistake there is: refuse it here, with the knob that fixes it.
        message = in_config_terms(str(error))
        message = message.replace(NODES_FIX, f"more GPU nodes: {config_key('gpu_nodes')}=")
        raise GrpoPreflightError([message]) from None
    overrides = job_overrides(spec, settings)
    record = rehearsal_record(settings, spec, overrides)
    entrypoint, runtime_env = _runner(spec, settings, model, overrides, record)
    export_path = (
        export_url(settings.bucket_name, spec.experiment_name) if settings.export_model else None
    )
    leaked = rendered_secret_problems(entrypoint, runtime_env, settings)
    if leaked:
        raise GrpoPreflightError(leaked)
    return TrainingJob(
        spec=spec,
        model=model,
        entrypoint=entrypoint,
        runtime_env=runtime_env,
        hydra_overrides=tuple(overrides),
        rehearsal_record=record,
        model_export_url=export_path,
        checkpoint_url=bucket_url(settings.bucket_name, spec.default_local_dir),
        memory=estimate(memory_inputs),
        memory_warning=warning,
        notes=tuple(grpo_notes(spec)),
        evaluation=evaluation_plan(spec, settings),
    )


# The GrpoSpec fields (verl-gke:job keys) behind each GrpoMemoryInputs field a memory fix changes
# (memory_fit_inputs reads them the other way).
_FIX_JOB_FIELDS: dict[str, tuple[str, ...]] = {
    "micro_batch_size_per_gpu": ("ppo_micro_batch_size_per_gpu",),
    "log_prob_micro_batch_size_per_gpu": (
        "rollout_log_prob_micro_batch_size_per_gpu",
        "ref_log_prob_micro_batch_size_per_gpu",
    ),
    "gpu_memory_utilization": ("gpu_memory_utilization",),
    "rollout_tp": ("rollout_tensor_parallel_size",),
    "max_response_length": ("max_response_length",),
    "gradient_checkpointing": ("enable_gradient_checkpointing",),
    "ref_param_offload": ("ref_param_offload",),
    "param_offload": ("actor_param_offload",),
    "optimizer_offload": ("actor_optimizer_offload",),
}


def _job_key(field_name: str) -> str:
    return GrpoSpec.model_fields[field_name].alias or field_name


def _settings_with_fix(settings: StackSettings, spec: GrpoSpec, fix: MemoryFix) -> StackSettings:
    """The stack as the user would set it to apply `fix`, validated by every stack rule
    (pydantic's ValidationError, a ValueError, when one refuses it)."""
    job = dict(settings.job)
    gpu_nodes = settings.gpu_nodes
    for field_name, value in fix.change.items():
        if field_name == "nodes":
            gpu_nodes = int(str(value))
        elif field_name == "offload_policy":
            job[_job_key("actor_strategy")] = "fsdp2"
            job[_job_key("extra_overrides")] = [
                *spec.extra_overrides,
                f"{OFFLOAD_POLICY_KEY}=True",
            ]
        elif field_name in _FIX_JOB_FIELDS:
            job.update({_job_key(name): value for name in _FIX_JOB_FIELDS[field_name]})
        else:
            raise ValueError(f"no stack setting applies the memory fix {fix.text!r}")
    raw = {**settings.model_dump(by_alias=True), "gpuNodes": gpu_nodes, "job": job}
    return StackSettings.model_validate(raw)


def _length_acceptor(settings: StackSettings, model: ModelFacts) -> Callable[[int], bool]:
    """Whether the job passes every rule, its memory fit included, with that maxResponseLength
    (the context-length fix offers only such a length)."""

    def accept(length: int) -> bool:
        job = {**settings.job, _job_key("max_response_length"): length}
        try:
            changed = StackSettings.model_validate(
                {**settings.model_dump(by_alias=True), "job": job}
            )
            _job_for_model(changed, model, judge_fixes=False)
        except ValueError:
            return False
        return True

    return accept


def _fix_acceptor(settings: StackSettings, spec: GrpoSpec, model: ModelFacts) -> FixAcceptor:
    """Whether the stack with a memory fix applied passes every rule: the stack rules (as the
    gpuNodes fixes are judged, config/settings.py _gpu_nodes_acceptor) and this job's."""

    def accept(fix: MemoryFix) -> bool:
        try:
            _job_for_model(_settings_with_fix(settings, spec, fix), model, judge_fixes=False)
        except ValueError:
            return False
        return True

    return accept


def job_overrides(spec: GrpoSpec, settings: StackSettings) -> list[str]:
    """The `key=value` arguments of verl's main_ppo as the GRPO job passes them: the spec's
    (training/grpo_spec.hydra_overrides), vLLM's batched-token limit and the reward function."""
    return [*hydra_overrides(spec), *batched_tokens_overrides(spec), *reward_overrides(settings)]


# The runner's environment variable naming the rehearsal's record (payloads/export/run_grpo.py
# reads the run's length from it).
REHEARSAL_RECORD_ENV = "VERL_GKE_REHEARSAL_RECORD"


def rehearsal_record(settings: StackSettings, spec: GrpoSpec, overrides: list[str]) -> str:
    """The record's path for this stack, experiment and command: the overrides, what runs verl,
    the image and the rehearsal's own scripts (another ref, image or rehearsal may answer
    otherwise, and the Ray head's data mount caches a file's metadata for good: a new answer gets
    a new path)."""
    command = {
        "overrides": overrides,
        "verl": verl_source_label(settings),
        "image": settings.verl_image,
        "scripts": rehearsal_scripts.scripts_digest(rehearsal_scripts.read_scripts()),
    }
    digest = hashlib.sha256(json.dumps(command, sort_keys=True).encode()).hexdigest()
    return rehearsal_record_path(settings.stack, spec.experiment_name, digest)


def _runner(
    spec: GrpoSpec,
    settings: StackSettings,
    model: ModelFacts,
    overrides: list[str],
    record: str,
) -> tuple[str, dict[str, Any]]:
    """The entrypoint and runtime env: verl's trainer under the runner (model_export.py), with
    the rehearsal's record named in the environment."""
    env = job_runtime_env(spec, settings)
    env = {"env_vars": {**env["env_vars"], REHEARSAL_RECORD_ENV: record}}
    return runner_job(
        ["python3", "-m", ENTRYPOINT_MODULE, *overrides],
        env,
        run_dir=spec.default_local_dir,
        identity=resume_identity(spec),
        export_experiment=spec.experiment_name if settings.export_model else None,
        recovery=settings.recovery_plan,
        saves=SaveWatch(
            save_freq=spec.save_freq,
            total_steps=known_total_steps(spec),
            allowance_s=save_allowance_s(model.arch.num_params, spec.nnodes),
        ),
        length=run_length(spec),
        keep_checkpoints=checkpoints_to_keep(spec),
        lora_alpha=lora_alpha(spec),
        capacity=runner_capacity(settings, WORKER_GROUP)
        if settings.capacity_plan.queued_provisioning
        else None,
        evaluation=evaluation.arguments
        if (evaluation := evaluation_plan(spec, settings)) is not None
        else None,
    )


def with_run_inputs(spec: GrpoSpec, settings: StackSettings) -> GrpoSpec:
    """The spec reading verl-gke:dataset's parquet."""
    dataset = run_inputs.dataset_of(settings)
    return spec.model_copy(
        update={"train_files": dataset.train_files, "val_files": dataset.val_files}
    )


def reward_overrides(settings: StackSettings) -> list[str]:
    """custom_reward_function path and name for verl-gke:reward, under the key verl reads at the
    stack's ref (config/run_inputs.py REWARD_CONFIG_KEY); none for verl's built-in score."""
    reward = run_inputs.reward_of(settings)
    if reward is None:
        return []
    key = run_inputs.reward_config_key(settings.verl_ref, settings.profile.verl_ref)
    return [f"{key}.path={reward.mounted_path}", f"{key}.name={reward.function}"]


def _run_input_problems(spec: GrpoSpec, settings: StackSettings) -> list[str]:
    """The job reads the parquet and the reward file the data-prep Job writes, nothing else."""
    wanted = with_run_inputs(spec, settings)
    problems = []
    for field in ("train_files", "val_files"):
        value, expected = getattr(spec, field), getattr(wanted, field)
        if value != expected:
            alias = GrpoSpec.model_fields[field].alias or field
            problems.append(
                f"{CONFIG_KEY}.{alias} = {value!r}: the data-prep Job writes "
                f"{run_inputs.DATASET_KEY}'s parquet to {expected!r}, so the job would not find "
                f"it. Fix: pulumi config rm --path {CONFIG_KEY}.{alias} (the job then reads "
                f"{run_inputs.DATASET_KEY}'s parquet; set that to the dataset you want)"
            )
    for override in spec.extra_overrides:
        key = override.lstrip("+").partition("=")[0]
        if "custom_reward_function" in key.split("."):
            problems.append(
                f"{CONFIG_KEY}.extraOverrides: {override!r}: the reward function is "
                f"{run_inputs.REWARD_KEY}, which ships the file with the run. Fix: remove it and "
                f"pulumi config set {run_inputs.REWARD_KEY} FILE.py:FUNCTION -s {settings.stack}"
            )
    return problems


def _dataset_size_problems(spec: GrpoSpec, settings: StackSettings) -> list[str]:
    """A train batch larger than a dataset of known size: verl's train dataloader drops the last
    partial batch (drop_last=True, verl/trainer/ppo/ray_trainer.py v0.6.1 and 0.9.0) and its
    trainer asserts the loader is not empty. Own datasets: the data-prep Job checks, once it
    knows their size (payloads/data_prep/prep_checks.py check_prompt_lengths)."""
    if run_inputs.dataset_of(settings).kind != "gsm8k":
        return []
    rows, batch = run_inputs.GSM8K_ROWS["train"], spec.train_batch_size
    if batch <= rows:
        return []
    step = train_batch_step(spec, spec.nnodes * spec.n_gpus_per_node)
    fit = rows // step * step
    fix = (
        f"set it to {fit} (at most the rows, a multiple of {step})"
        if fit >= spec.ppo_mini_batch_size
        else f"set it and {CONFIG_KEY}.ppoMiniBatchSize to {fit}"
    )
    return [
        f"{CONFIG_KEY}.trainBatchSize = {batch}: openai/gsm8k has {rows:,} training rows, fewer "
        f"than one batch; verl drops the last partial batch, so not one step would run. "
        f"Fix: {fix}"
    ]


def job_runtime_env(spec: GrpoSpec, settings: StackSettings) -> dict[str, dict[str, str]]:
    """render_runtime_env; with verl-gke:verlSource=image without PYTHONPATH, so the image's
    own installed verl is imported instead of the node-local checkout."""
    env = render_runtime_env(spec, settings.profile, settings.mode, settings.verl_ref)
    # What runs verl is part of the job: a new ref or image is a new submission, which the
    # pods KubeRay recreated for it (manifests/ray_cluster.py upgradeStrategy) then run.
    source = {VERL_SOURCE_ENV: verl_source_label(settings)}
    if settings.verl_source != "image":
        return {"env_vars": {**env["env_vars"], **source}}
    kept = {k: v for k, v in env["env_vars"].items() if k != "PYTHONPATH"}
    return {"env_vars": {**kept, **source}}


def _data_layout_problems(spec: GrpoSpec) -> list[str]:
    """The job must not write where the data-prep Job rewrites."""
    problems = []
    checkpoints = spec.default_local_dir.rstrip("/")
    # Only the checkpoint mount reads metadata fresh (ttl 0): on DATA_MOUNT (cached for good) a
    # resume on another node could read a stale latest_checkpointed_iteration.txt. The bucket
    # folder behind it is the one data prep (prep_verl.py) keeps when it replaces the verl checkout.
    if not checkpoints.startswith(f"{CHECKPOINT_ROOT}/"):
        problems.append(
            f"{CONFIG_KEY}.defaultLocalDir = {spec.default_local_dir!r}: checkpoints must be in "
            f"a folder under {CHECKPOINT_ROOT}/, the Ray pods' checkpoint mount, whose metadata "
            f"is never cached (resume reads verl's marker fresh on every node; {DATA_MOUNT} "
            f"caches metadata and the data-prep Job rewrites parts of it). Fix: "
            f"pulumi config rm --path {CONFIG_KEY}.defaultLocalDir (the default is "
            f"{CHECKPOINT_ROOT}/<experiment>)"
        )
    return problems


def memory_fit_inputs(
    spec: GrpoSpec, profile: AcceleratorProfile, model: ModelArch
) -> GrpoMemoryInputs:
    """What the memory estimator needs, read off the job spec (None = verl's default)."""
    return GrpoMemoryInputs(
        model=model,
        gpu_memory_gib=profile.gpu_memory_gib,
        gpus_per_node=spec.n_gpus_per_node,
        nodes=spec.nnodes,
        micro_batch_size_per_gpu=spec.ppo_micro_batch_size_per_gpu,
        max_prompt_length=spec.max_prompt_length,
        max_response_length=spec.max_response_length,
        log_prob_micro_batch_size_per_gpu=max(
            spec.rollout_log_prob_micro_batch_size_per_gpu,
            spec.ref_log_prob_micro_batch_size_per_gpu,
        ),
        rollout_tp=spec.rollout_tensor_parallel_size,
        gpu_memory_utilization=spec.gpu_memory_utilization,
        # verl enables gradient checkpointing unless told otherwise.
        gradient_checkpointing=spec.enable_gradient_checkpointing is not False,
        param_offload=bool(spec.actor_param_offload),
        optimizer_offload=bool(spec.actor_optimizer_offload),
        offload_policy=spec.actor_strategy == "fsdp2"
        and extra_override_flag(spec, OFFLOAD_POLICY_KEY),
        # With LoRA verl's reference is the actor with its adapter disabled (run_life.uses_lora).
        use_reference=bool(spec.use_kl_loss or spec.use_kl_in_reward) and not uses_lora(spec),
        lora_adapter_params=lora_params(model, *lora_shape(spec)) if uses_lora(spec) else 0,
        ref_param_offload=bool(spec.ref_param_offload),
        rollout_max_num_seqs=_max_num_seqs(spec, profile),
        rollout_max_num_batched_tokens=rollout_batched_tokens(spec),
    )


_MAX_NUM_SEQS_KEY = "actor_rollout_ref.rollout.max_num_seqs"


def _max_num_seqs(spec: GrpoSpec, profile: AcceleratorProfile) -> int:
    """vLLM's max_num_seqs: an integer extraOverrides value, else verl's default at the ref."""
    for override in spec.extra_overrides:
        key, _, value = override.lstrip("+").partition("=")
        if key == _MAX_NUM_SEQS_KEY and value.isdigit():
            return int(value)
    return VLLM_MAX_NUM_SEQS_DEFAULT[profile.verl_ref]


# The fabric check's code reaches the head as the Ray job's working_dir; the path is relative to
# the program's directory (the dynamic provider's cwd), so the job spec is the same on every
# machine that runs `pulumi up`.
FABRIC_CHECK_DIR = "payloads/fabric"
FABRIC_RESULT_TAG = fabric_check.RESULT_KIND


@dataclass(frozen=True)
class FabricCheckRun:
    entrypoint: str
    runtime_env: dict[str, Any]
    min_busbw_gbps: float


def fabric_check_run(settings: StackSettings) -> FabricCheckRun:
    """The NCCL all-reduce check on every GPU of the RayCluster, with the NCCL environment the
    GRPO job gets, so it measures the path training will use."""
    profile = settings.profile
    threshold = settings.fabric_min_busbw_gbps or profile.fabric_min_busbw_gbps
    script = Path(fabric_check.__file__).read_bytes()
    return FabricCheckRun(
        entrypoint=(f"python fabric_check.py --min-busbw-gbps {threshold:g}"),
        runtime_env={
            "working_dir": FABRIC_CHECK_DIR,
            "excludes": ["__pycache__"],
            "env_vars": {
                **profile.nccl_env[settings.mode],
                # The transport is read from NCCL's INFO lines.
                "NCCL_DEBUG": "INFO",
                # A changed script is a different job (the id hashes the runtime env).
                "VERL_GKE_FABRIC_CHECK_SHA256": hashlib.sha256(script).hexdigest(),
            },
        },
        min_busbw_gbps=threshold,
    )
