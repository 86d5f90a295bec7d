"""The GRPO run as a typed spec: verl `main_ppo` overrides, the tutorial defaults of a profile
(config/profiles.py), rendering to a Ray job (entrypoint + runtime env), and the preflight rules
checked before any resource exists.

Users override fields from stack config as one JSON object under `verl-gke:job`, with camelCase
keys, e.g. `pulumi config set --path verl-gke:job.ppoMicroBatchSizePerGpu 4`. Fields left at None
are not passed to verl, so verl's own default for the pinned ref applies.

Deliberate departures from the tutorial commands (everything else is reproduced verbatim):
- `trainer.default_local_dir` is one folder per run on the checkpoint GCS FUSE mount
  (/checkpoints/<experiment>/w<world size>-<hash>, `default_run_dir`): verl resumes from
  `latest_checkpointed_iteration.txt` in that folder, so two experiments never share one, and a
  change verl cannot resume across (RESUME_IDENTITY_FIELDS) starts a new run in a new folder.
- `trainer.logger` always includes `console`: verl prints the `step:N` lines the job provider and
  tools/run.py read only for that backend.
- `trainer.experiment_name` is passed, so logs carry the same name as the checkpoint folder.
- A4 / A3 Ultra also pass `actor_rollout_ref.actor.use_kl_loss=True`, as the seed's A4X command
  does. The x86 scripts set `algorithm.kl_ctrl.kl_coef` but neither KL switch, so their KL
  coefficient and reference log-prob settings had no effect; verl's GRPO docs ask for KL loss on.
"""

from __future__ import annotations

import difflib
import json
import re
import shlex
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Annotated, Any, Literal

import pulumi
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel

from config.bucket_layout import (
    CHECKPOINT_ROOT,
    DATA_MOUNT,
    GRPO_HF_HOME,
    METRICS_FILE,
    TENSORBOARD_SUBDIR,
    VERL_NODE_LOCAL,
    checkpoint_dir,
    is_shared,
    model_folder_name,
    model_path,
    run_checkpoint_dir,
)
from config.input_rules import nearest_choice, number_candidates, whole_number
from config.profiles import AcceleratorProfile, Mode
from config.stack_values import DEFAULT_MODEL
from jobs.secret_scan import redact
from training.model_config import best_rollout_tp, rollout_tp_fits
from training.model_facts import ModelFacts, table_facts

CONFIG_KEY = "verl-gke:job"
GPU_NODES_KEY = "verl-gke:gpuNodes"
MODEL_KEY = "verl-gke:model"
ENTRYPOINT_MODULE = "verl.trainer.main_ppo"

# Characters Hydra's override grammar accepts in an unquoted value. Anything else (spaces, quotes,
# commas, brackets, `$`, `:`, `=`) would be read as syntax, so string fields are limited to these.
_HYDRA_UNQUOTED = r"A-Za-z0-9_./+@-"
_HYDRA_SAFE = re.compile(f"[{_HYDRA_UNQUOTED}]+")
_EXPERIMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
# `key=value`, or `+key=value` / `++key=value` to add a key that verl's config lacks.
_OVERRIDE = re.compile(
    r"(?P<plus>\+{0,2})(?P<key>[A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)*)=(?P<value>.*)"
)
# verl resumes from the experiment folder's latest checkpoint when this is `auto`, its default
# (verl/trainer/config/ppo_trainer.yaml, v0.6.1 and ddbcdb7; RayPPOTrainer._load_checkpoint).
# With `resume_path` every attempt resumes from trainer.resume_from_path (the same
# _load_checkpoint at 0.6.1 and 0.9.0, and 0.9.0's PPOTrainer._load_checkpoint): the actor from
# <path>/actor, the dataloader from <path>/data.pt; the rehearsal runs that method on the path.
_RESUME_MODE = "trainer.resume_mode"
_RESUME_PATH = "trainer.resume_from_path"
_RESUME_MODES = ("auto", "resume_path")
# Backends verl's Tracking accepts (verl/utils/tracking.py); `file` exists from v0.6.1.
LOGGER_BACKENDS = (
    "console",
    "file",
    "wandb",
    "mlflow",
    "swanlab",
    "vemlp_wandb",
    "tensorboard",
    "clearml",
    "trackio",
)


def _setting(alias: str) -> str:
    return f"{CONFIG_KEY}.{alias}"


def set_command(alias: str, value: object) -> str:
    """The command that sets job field `alias` to `value`: `pulumi config set --path`, whose value
    is a boolean for true/false, a number for an integer, else a string (Pulumi CLI docs,
    `pulumi config set`); the offline plan prints it as `--set KEY=VALUE` (tools/plan.py)."""
    shown = ("true" if value else "false") if isinstance(value, bool) else _hydra_value(value)
    if not _HYDRA_SAFE.fullmatch(shown):
        shown = shlex.quote(shown)  # one shell word: `'["wandb"]'`
    return f"pulumi config set --path {_setting(alias)} {shown}"


def setting_of(alias: str) -> str:
    """The config key a user sets for a job field: `verl-gke:job.<alias>`, or for a field the
    stack derives (DERIVED_JOB_KEYS) the stack setting that decides it."""
    derived = DERIVED_JOB_KEYS.get(alias)
    return derived.split(" ", 1)[0] if derived else _setting(alias)


def _sanitize(value: str, allowed: str) -> str:
    return re.sub(f"[^{allowed}]+", "-", value).strip("-") or "x"


def _hydra_safe(value: str) -> str:
    if not _HYDRA_SAFE.fullmatch(value):
        raise ValueError(
            f"{value!r} contains characters Hydra reads as syntax (allowed: letters, digits and "
            f"_ . / + @ -); use {_sanitize(value, _HYDRA_UNQUOTED)!r}"
        )
    return value


def _experiment_name(value: str) -> str:
    if not _EXPERIMENT.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a folder-safe name (1-100 letters, digits, . _ -, starting with a "
            f"letter or digit); use {_sanitize(value, 'A-Za-z0-9._-')[:100]!r}"
        )
    return value


def _loggers(value: tuple[str, ...]) -> tuple[str, ...]:
    if not value:
        raise ValueError("needs at least one backend; use ['console']")
    for name in value:
        if name not in LOGGER_BACKENDS:
            close = difflib.get_close_matches(name, LOGGER_BACKENDS, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ValueError(f"{name!r} is not a verl logger; {hint}valid: {list(LOGGER_BACKENDS)}")
    if len(set(value)) != len(value):
        raise ValueError(f"lists a backend twice; use {list(dict.fromkeys(value))}")
    return value


def _text_list(value: object) -> object:
    """A list field given as JSON text, `["a", "b"]`: what `pulumi config set --path
    verl-gke:job.FIELD '["a"]'` stores (a string: pulumi/pulumi sdk/go/common/resource/config
    map.go adjustObjectValue), read as the list it spells. Any other text stays text, refused."""
    if isinstance(value, str) and value.lstrip().startswith("["):
        try:
            items = json.loads(value)
        except json.JSONDecodeError:
            return value
        if isinstance(items, list) and all(isinstance(item, str) for item in items):
            return tuple(items)
    return value


TextList = Annotated[tuple[str, ...], BeforeValidator(_text_list)]
# `true` is not 1 and `010` is not ten (config/input_rules.whole_number): refused, not coerced.
WholeNumber = Annotated[int, BeforeValidator(whole_number)]
PositiveWhole = Annotated[PositiveInt, BeforeValidator(whole_number)]
HydraString = Annotated[str, AfterValidator(_hydra_safe)]
ExperimentName = Annotated[str, AfterValidator(_experiment_name)]
Loggers = Annotated[TextList, AfterValidator(_loggers)]


class GrpoSpec(BaseModel):
    """One verl GRPO run. Aliases (camelCase) are the keys under `verl-gke:job`."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
    )

    adv_estimator: Literal["grpo"]
    train_files: HydraString
    val_files: HydraString
    train_batch_size: PositiveWhole
    max_prompt_length: PositiveWhole
    max_response_length: PositiveWhole
    model_path: HydraString
    lr: PositiveFloat
    ppo_mini_batch_size: PositiveWhole
    # The deprecated global `ppo_micro_batch_size` variants are not modelled: verl wants exactly
    # one of each pair, and the per-GPU one is always set here.
    ppo_micro_batch_size_per_gpu: PositiveWhole
    use_kl_loss: bool | None = None
    kl_loss_coef: NonNegativeFloat | None = None
    use_kl_in_reward: bool | None = None
    actor_strategy: Literal["fsdp", "fsdp2"]
    rollout_name: Literal["vllm"]
    rollout_tensor_parallel_size: PositiveWhole
    gpu_memory_utilization: float
    rollout_n: PositiveWhole
    rollout_log_prob_micro_batch_size_per_gpu: PositiveWhole
    ref_log_prob_micro_batch_size_per_gpu: PositiveWhole
    kl_coef: NonNegativeFloat | None = None
    logger: Loggers
    n_gpus_per_node: PositiveWhole
    nnodes: PositiveWhole
    save_freq: WholeNumber
    test_freq: WholeNumber
    total_epochs: PositiveWhole
    val_before_train: bool | None = None
    experiment_name: ExperimentName
    default_local_dir: HydraString
    # One switch for the four torch.compile keys the Autopilot script turns off together.
    use_torch_compile: bool | None = None
    actor_param_offload: bool | None = None
    actor_optimizer_offload: bool | None = None
    ref_param_offload: bool | None = None
    enable_gradient_checkpointing: bool | None = None
    use_remove_padding: bool | None = None
    # Escape hatch for verl keys not modelled above; rendered last, shell-quoted as given.
    extra_overrides: TextList = ()

    @model_validator(mode="after")
    def _check_extra_overrides(self) -> GrpoSpec:
        modelled = _modelled_keys()
        seen: set[str] = set()
        for index, override in enumerate(self.extra_overrides):
            where = f"{_setting('extraOverrides')}[{index}] = {override!r}"
            match = _OVERRIDE.fullmatch(override)
            if match is None:
                raise ValueError(
                    f"{where}: not a Hydra override; use 'key=value' (e.g. "
                    f"'actor_rollout_ref.rollout.max_num_seqs=512'), or '+key=value' for a key "
                    f"verl's config lacks"
                )
            key = match["key"]
            if key in FIXED_OVERRIDES:
                raise ValueError(
                    f"{where}: {key}={FIXED_OVERRIDES[key]} is set for every run: "
                    f"{_unfiltered_prompt(self.extra_overrides)}. Fix: remove it; to keep "
                    f"longer prompts raise {_setting('maxPromptLength')}"
                )
            owned = _owned_keys_under(key, modelled)
            if owned:
                raise ValueError(
                    f"{where}: {_owned_override_problem(key, match['value'], owned, modelled)}"
                )
            if key == _RESUME_MODE and match["value"].strip() not in _RESUME_MODES:
                raise ValueError(
                    f"{where}: {_RESUME_MODE} must stay auto (verl's default) or be "
                    f"resume_path with {_RESUME_PATH}: every run (experiment and resume "
                    f"identity) has its own checkpoint folder and a resubmitted job continues "
                    f"from its last checkpoint there. Fix: remove it; to start afresh set "
                    f"{_setting('experimentName')} to a new name"
                )
            if key == _RESUME_PATH:
                _check_resume_path(where, match["value"].strip())
            if key in seen:
                raise ValueError(f"{where}: {key} is overridden twice; keep one")
            seen.add(key)
        return self


def _check_resume_path(where: str, path: str) -> None:
    """The Ray workers load <path>/actor (verl's _load_checkpoint) and see the bucket only at
    its mounts (config/bucket_layout.py is_shared); verl's own asserts on the path (a str naming
    global_step_<N>) are the rehearsal's (verl_scripts/rehearsal_length.py start_step)."""
    if not is_shared(path):
        raise ValueError(
            f"{where}: the Ray workers load {path}/actor and see the bucket only under "
            f"{DATA_MOUNT}/ and {CHECKPOINT_ROOT}/. Fix: the checkpoint folder verl saved there, "
            f"e.g. {_RESUME_PATH}={CHECKPOINT_ROOT}/<experiment>/<run>/global_step_<N>"
        )


# Field -> the Hydra keys it renders to, in the order of the seed's command. Tested to cover every
# field but extra_overrides.
_HYDRA_KEYS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "adv_estimator": ("algorithm.adv_estimator",),
        "train_files": ("data.train_files",),
        "val_files": ("data.val_files",),
        "train_batch_size": ("data.train_batch_size",),
        "max_prompt_length": ("data.max_prompt_length",),
        "max_response_length": ("data.max_response_length",),
        "model_path": ("actor_rollout_ref.model.path",),
        "lr": ("actor_rollout_ref.actor.optim.lr",),
        "ppo_mini_batch_size": ("actor_rollout_ref.actor.ppo_mini_batch_size",),
        "ppo_micro_batch_size_per_gpu": ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",),
        "use_kl_loss": ("actor_rollout_ref.actor.use_kl_loss",),
        "kl_loss_coef": ("actor_rollout_ref.actor.kl_loss_coef",),
        "use_kl_in_reward": ("algorithm.use_kl_in_reward",),
        "actor_strategy": ("actor_rollout_ref.actor.strategy",),
        "rollout_name": ("actor_rollout_ref.rollout.name",),
        "rollout_tensor_parallel_size": ("actor_rollout_ref.rollout.tensor_model_parallel_size",),
        "gpu_memory_utilization": ("actor_rollout_ref.rollout.gpu_memory_utilization",),
        "rollout_n": ("actor_rollout_ref.rollout.n",),
        "rollout_log_prob_micro_batch_size_per_gpu": (
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
        ),
        "ref_log_prob_micro_batch_size_per_gpu": (
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
        ),
        "kl_coef": ("algorithm.kl_ctrl.kl_coef",),
        "logger": ("trainer.logger",),
        "val_before_train": ("trainer.val_before_train",),
        "n_gpus_per_node": ("trainer.n_gpus_per_node",),
        "nnodes": ("trainer.nnodes",),
        "save_freq": ("trainer.save_freq",),
        "test_freq": ("trainer.test_freq",),
        "total_epochs": ("trainer.total_epochs",),
        "experiment_name": ("trainer.experiment_name",),
        "default_local_dir": ("trainer.default_local_dir",),
        "use_torch_compile": (
            "actor_rollout_ref.actor.use_torch_compile",
            "actor_rollout_ref.actor.fsdp_config.use_torch_compile",
            "actor_rollout_ref.ref.use_torch_compile",
            "actor_rollout_ref.ref.fsdp_config.use_torch_compile",
        ),
        "actor_param_offload": ("actor_rollout_ref.actor.fsdp_config.param_offload",),
        "actor_optimizer_offload": ("actor_rollout_ref.actor.fsdp_config.optimizer_offload",),
        "ref_param_offload": ("actor_rollout_ref.ref.fsdp_config.param_offload",),
        "enable_gradient_checkpointing": ("actor_rollout_ref.model.enable_gradient_checkpointing",),
        "use_remove_padding": ("actor_rollout_ref.model.use_remove_padding",),
    }
)


# Overrides every run passes, on every stack and verl ref; no setting changes them.
# verl's defaults are data.filter_overlong_prompts False and data.truncation error
# (verl/trainer/config/data/legacy_data.yaml at v0.6.1, v0.7.0 and v0.9.0): a prompt longer than
# data.max_prompt_length then raises in RLHFDataset.__getitem__ (verl/utils/dataset/rl_dataset.py,
# v0.6.1) after the GPUs are up, or is left-truncated by the agent loop (0.9.0,
# verl/experimental/agent_loop/agent_loop.py). True makes RLHFDataset drop such rows when it
# builds the datasets, measuring them as __getitem__ and the agent loop do; the data-prep Job
# counts them first and refuses a dataset left smaller than one batch (payloads/data_prep/).
FIXED_OVERRIDES: Mapping[str, str] = MappingProxyType({"data.filter_overlong_prompts": "True"})

# verl 0.6.1's postprocess_data (verl/utils/torch_functional.py, called by RLHFDataset.__getitem__)
# cuts a prompt longer than max_length with data.truncation left, right or middle and raises
# NotImplementedError with error; 0.9.0's agent loop left-truncates it whatever data.truncation
# says (AgentLoopBase._cap_text_prompt_length, verl/experimental/agent_loop/agent_loop.py).
_CUTTING_TRUNCATIONS = ("left", "right", "middle")


def _unfiltered_prompt(extra_overrides: Sequence[str]) -> str:
    """What verl does with a prompt longer than data.max_prompt_length when nothing drops it."""
    truncation = "error"
    for override in extra_overrides:
        key, _, value = override.lstrip("+").partition("=")
        if key.strip() == "data.truncation":
            truncation = value.strip().strip("'\"")
    longer = f"a prompt longer than {_setting('maxPromptLength')}"
    if truncation in _CUTTING_TRUNCATIONS:
        return (
            f"without it verl keeps {longer} and cuts it to that length (data.truncation="
            f"{truncation} at verl 0.6.1, left-truncated by 0.9.0's agent loop): the model "
            "trains on cut prompts, and the data-prep Job's prompt counts and the memory fit "
            "assume every prompt fits"
        )
    return (
        f"without it {longer} stops the run on the GPUs at verl 0.6.1 (data.truncation="
        f"{truncation} raises on it) and is left-truncated by 0.9.0's agent loop"
    )


def _alias(field_name: str) -> str:
    alias = GrpoSpec.model_fields[field_name].alias
    assert alias is not None  # set by the alias generator
    return alias


def _modelled_keys() -> dict[str, str]:
    """Hydra key -> alias of the field that owns it."""
    return {key: _alias(name) for name, keys in _HYDRA_KEYS.items() for key in keys}


# verl keys the memory model reads from extraOverrides (training/assembly.memory_fit_inputs).
# verl 0.6.1 fsdp_workers.py applies the actor's offload_policy only with strategy fsdp2.
OFFLOAD_POLICY_KEY = "actor_rollout_ref.actor.fsdp_config.offload_policy"


def modelled_keys() -> dict[str, str]:
    """Hydra key -> the `verl-gke:job` alias that sets it."""
    return _modelled_keys()


def _owned_keys_under(key: str, modelled: Mapping[str, str]) -> list[str]:
    """The modelled Hydra keys an override of `key` would set: the key itself, every key below
    it (Hydra merges a value given for a group, `trainer={nnodes:4}`, into the whole group), and
    the modelled key it lies inside (`trainer.logger.x`)."""
    return sorted(
        owned
        for owned in modelled
        if owned == key or owned.startswith(f"{key}.") or key.startswith(f"{owned}.")
    )


# A flat Hydra dict value, `{a:1,b:x}`: no nesting, lists or quotes.
_FLAT_DICT = re.compile(r"\{(?P<items>[^{}\[\]'\"]*)\}")


def _owned_override_problem(
    key: str, value: str, owned: list[str], modelled: Mapping[str, str]
) -> str:
    settings = list(dict.fromkeys(setting_of(modelled[o]) for o in owned))
    if owned == [key]:
        alias = modelled[key]
        then = f"set {settings[0]} instead"
        typed = value.strip()
        if settings[0] == _setting(alias) and typed:
            # The value typed, under its setting; Hydra reads True/False as booleans.
            meant: object = typed.lower() == "true" if typed.lower() in ("true", "false") else typed
            then = set_command(alias, meant)
        return (
            f"{key} is a modelled setting. Fix: remove it from {_setting('extraOverrides')}, "
            f"then {then}"
        )
    if not owned[0].startswith(f"{key}."):
        return (
            f"{key} lies inside {owned[0]}, which {settings[0]} sets. Fix: remove it and set "
            f"{settings[0]} instead"
        )
    why = (
        f"{key} is a group holding keys this program sets (e.g. {owned[0]}); Hydra merges a "
        f"value given for the group into them, past their {CONFIG_KEY} settings"
    )
    flat = _FLAT_DICT.fullmatch(value.strip())
    items = [i.split(":", 1) for i in flat["items"].split(",") if i.strip()] if flat else []
    if not items or any(len(i) != 2 for i in items):
        return (
            f"{why}. Fix: give each key on its own, as '{key}.<name>=<value>', and set a key this "
            f"program sets through its {CONFIG_KEY} setting (e.g. {settings[0]})"
        )
    fixes = []
    for name, item in ((n.strip(), v.strip()) for n, v in items):
        full = f"{key}.{name}"
        owner = modelled.get(full)
        fixes.append(f"set {setting_of(owner)} to {item}" if owner else f"'{full}={item}'")
    return f"{why}. Fix: instead, {' and '.join(fixes)}"


def in_config_terms(text: str) -> str:
    """`text` with verl's Hydra keys replaced by the `verl-gke:job.<key>` settings that set them."""
    text = text.replace(
        f"{OFFLOAD_POLICY_KEY}=True",
        f"{_setting('actorStrategy')}=fsdp2 with '{OFFLOAD_POLICY_KEY}=True' in "
        f"{_setting('extraOverrides')}",
    )
    for hydra_key, alias in sorted(_modelled_keys().items(), key=lambda kv: -len(kv[0])):
        text = text.replace(hydra_key, f"{CONFIG_KEY}.{alias}")
    return text


def extra_override_flag(spec: GrpoSpec, key: str) -> bool:
    """Whether extraOverrides turns the boolean verl key `key` on."""
    values = [
        o.split("=", 1)[1] for o in spec.extra_overrides if o.lstrip("+").split("=")[0] == key
    ]
    return bool(values) and values[-1].strip().lower() == "true"


# --- tutorial defaults (the per-profile values live in config/profiles.py) ------------------


class GrpoPreflightError(pulumi.RunError, ValueError):
    """The GRPO job settings cannot work; `problems` lists every rule that failed with its fix.

    A RunError, so `pulumi up` prints the message without a Python traceback.
    """

    def __init__(self, problems: list[str]) -> None:
        # No message echoes a secret-looking value, whatever setting it was typed into.
        self.problems = tuple(redact(p) for p in problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        count = len(self.problems)
        super().__init__(
            f"GRPO job settings ({CONFIG_KEY}): {count} problem{'s' if count > 1 else ''}, "
            f"nothing was created:\n{lines}"
        )


def default_experiment_name(profile: AcceleratorProfile, hub_id: str, stack: str = "") -> str:
    """grpo-<model>-<stack> (the profile's name where no stack is given): the experiment names
    the checkpoint and export folders, so two stacks that share a bucket, of one profile or not,
    never share them. A stack named after its profile (the committed Pulumi.<profile>.yaml
    stacks) has the name it had when the default was grpo-<model>-<profile>."""
    model = _sanitize(model_folder_name(hub_id).lower(), "a-z0-9._-")
    suffix = "-" + _sanitize(stack or profile.name, "A-Za-z0-9._-")[:60]
    return f"grpo-{model[: 100 - len('grpo-') - len(suffix)]}{suffix}"


def default_grpo_spec(
    profile: AcceleratorProfile,
    mode: Mode,
    gpu_nodes: int,
    model: ModelFacts | None = None,
    experiment: str | None = None,
    stack: str = "",
) -> GrpoSpec:
    """The tutorial's job for this profile and mode, on `gpu_nodes` nodes of the profile, training
    `model` (default: the tutorial's, verl-gke:model's default). The model's folder, the world
    size and the rollout TP are derived here, never set by the user."""
    per_mode = profile.grpo_job_defaults
    if mode not in per_mode:
        raise ValueError(
            f"mode {str(mode)!r}: profile {profile.name} has GRPO job defaults only for "
            f"{[str(m) for m in per_mode]}"
        )
    model = model if model is not None else table_facts(DEFAULT_MODEL)
    folder = model_path(model.hub_id, model.revision)
    name = experiment or default_experiment_name(profile, model.hub_id, stack)
    values = {
        **per_mode[mode],
        "rolloutTensorParallelSize": _default_tp(per_mode[mode], profile, model),
        "modelPath": folder,
        "nGpusPerNode": profile.gpus_per_node,
        "nnodes": gpu_nodes,
        "experimentName": name,
        "defaultLocalDir": checkpoint_dir(name),
    }
    spec = _validate(values)
    return spec.model_copy(update={"default_local_dir": default_run_dir(spec)})


def _default_tp(defaults: Mapping[str, Any], profile: AcceleratorProfile, model: ModelFacts) -> int:
    """The tutorial's rollout TP, or for a model whose heads it does not divide the nearest TP
    that vLLM can shard them over (so choosing verl-gke:model alone gives a job that runs)."""
    tp = int(defaults["rolloutTensorParallelSize"])
    if rollout_tp_fits(tp, model.arch):
        return tp
    return best_rollout_tp(tp, profile.gpus_per_node, model.arch)


# Job keys the stack derives: set anywhere else they would contradict the cluster or the model
# the data-prep Job downloads. Alias -> the setting that decides it.
DERIVED_JOB_KEYS: Mapping[str, str] = MappingProxyType(
    {
        "modelPath": f"{MODEL_KEY} (the data-prep Job downloads that model and the job reads it)",
        "nnodes": f"{GPU_NODES_KEY} (the job runs on every GPU node of the stack)",
        "nGpusPerNode": (
            f"{GPU_NODES_KEY} (each node's GPUs come with the profile's machine type; the job "
            "uses all of them)"
        ),
    }
)


def _derived_key_problem(alias: str) -> str:
    return (
        f"{_setting(alias)} is not a setting: the stack derives it from "
        f"{DERIVED_JOB_KEYS[alias]}. Fix: pulumi config rm --path {_setting(alias)}, and set "
        f"{setting_of(alias)} instead"
    )


def apply_overrides(spec: GrpoSpec, overrides: Mapping[str, Any]) -> GrpoSpec:
    """A copy of `spec` with the camelCase `verl-gke:job` keys in `overrides` replaced.

    While defaultLocalDir is the run's default folder (default_run_dir) and not overridden, it
    follows the result: a new experiment or a change of RESUME_IDENTITY_FIELDS gets its own
    folder, so no run resumes another one's checkpoints. extraOverrides is replaced as a whole,
    not appended to.
    """
    problems = [
        _derived_key_problem(key) if key in DERIVED_JOB_KEYS else _unknown_key(key)
        for key in overrides
        if key not in _ALIASES or key in DERIVED_JOB_KEYS
    ]
    if problems:
        raise GrpoPreflightError(problems)
    values = spec.model_dump(by_alias=True)
    values.update(overrides)
    result = _validate(values)
    if "defaultLocalDir" not in overrides and spec.default_local_dir == default_run_dir(spec):
        result = result.model_copy(update={"default_local_dir": default_run_dir(result)})
    return result


# What verl can and cannot resume a run across. A verl FSDP checkpoint is one model / optimizer /
# extra-state shard per rank, `model_world_size_<W>_rank_<r>.pt`, saved and loaded as the
# SHARDED_STATE_DICT of the actor's FSDP wrapping of the model, each rank opening the file of its
# own world size and rank (verl/utils/checkpoint/fsdp_checkpoint_manager.py load_checkpoint,
# v0.6.1 and ddbcdb7). So the world size (nnodes x nGpusPerNode), the model, the actor's FSDP
# version (fsdp / fsdp2) and what reshapes the sharded state (HSDP fsdp_size, LoRA) decide the run
# folder; every other setting (batch sizes, lr, epochs, rollout, loggers, ...) continues the run
# from its latest checkpoint.
RESUME_IDENTITY_FIELDS = ("nnodes", "n_gpus_per_node", "model_path", "actor_strategy")
# HSDP: verl shards over the whole world (one mesh dimension) when fsdp_size < 0 or >= the world
# size, else over groups of fsdp_size (create_device_mesh: verl/workers/fsdp_workers.py v0.6.1,
# verl/workers/engine/fsdp/utils.py ddbcdb7), so only a smaller positive value is recorded.
FSDP_SIZE_KEY = "actor_rollout_ref.actor.fsdp_config.fsdp_size"
# LoRA: the actor is a PEFT model whose parameters are the adapters of target_modules (less
# exclude_modules; ddbcdb7 adds target_parameters) at rank lora_rank, or those of the adapter
# loaded from lora_adapter_path (verl/workers/fsdp_workers.py _build_model_optimizer v0.6.1,
# verl/workers/engine/fsdp/transformer_impl.py _build_lora_module ddbcdb7); lora_alpha only
# scales them. Recorded only while LoRA is on: without it verl ignores them.
LORA_RANK_KEY = "actor_rollout_ref.model.lora_rank"
LORA_ADAPTER_KEY = "actor_rollout_ref.model.lora_adapter_path"
LORA_IDENTITY_KEYS = (
    LORA_RANK_KEY,
    LORA_ADAPTER_KEY,
    "actor_rollout_ref.model.target_modules",
    "actor_rollout_ref.model.exclude_modules",
    "actor_rollout_ref.model.target_parameters",
)
RESUME_IDENTITY_EXTRA_KEYS = (FSDP_SIZE_KEY, *LORA_IDENTITY_KEYS)


# What `pulumi up` does to a run, for the plan and the docs.
RUN_CONTINUITY = (
    "a change of world size (gpuNodes), model, actorStrategy, "
    "extraOverrides fsdp_size or LoRA (lora_rank, lora_adapter_path, target_modules, "
    "exclude_modules), or experimentName starts a new run at step 0 in another folder; any "
    "other change continues from the latest checkpoint in this one"
)


def _as_int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def resume_identity(spec: GrpoSpec) -> dict[str, Any]:
    """The settings a checkpoint can only be resumed with (RESUME_IDENTITY_FIELDS and the
    extraOverrides of RESUME_IDENTITY_EXTRA_KEYS that change what verl builds)."""
    world_size = spec.nnodes * spec.n_gpus_per_node
    identity: dict[str, Any] = {
        "world_size": world_size,
        "model_path": spec.model_path.rstrip("/"),
        "actor_strategy": spec.actor_strategy,
    }
    given: dict[str, str] = {}
    for override in spec.extra_overrides:
        match = _OVERRIDE.fullmatch(override)
        if match is not None and match["key"] in RESUME_IDENTITY_EXTRA_KEYS:
            given[match["key"]] = override.split("=", 1)[1]
    fsdp_size = given.get(FSDP_SIZE_KEY)
    if fsdp_size is not None:
        size = _as_int(fsdp_size)
        if size is None or 0 <= size < world_size:
            identity[FSDP_SIZE_KEY] = fsdp_size
    rank = _as_int(given.get(LORA_RANK_KEY, "0"))
    adapter = given.get(LORA_ADAPTER_KEY, "null")
    # A rank that is not a plain integer counts as on: never drop a value verl may use.
    if rank is None or rank > 0 or adapter.lower() != "null":
        identity.update({k: v for k, v in given.items() if k in LORA_IDENTITY_KEYS})
    return identity


def default_run_dir(spec: GrpoSpec) -> str:
    """trainer.default_local_dir unless set: the experiment's folder for this resume identity."""
    identity = resume_identity(spec)
    key = json.dumps(identity, sort_keys=True)
    return run_checkpoint_dir(spec.experiment_name, int(identity["world_size"]), key)


_ALIASES = frozenset(_alias(name) for name in GrpoSpec.model_fields)


def _suggestion_index() -> dict[str, str]:
    """Lower-cased names a user might type (alias, snake_case, verl key, unambiguous verl leaf)
    -> the alias to suggest."""
    index: dict[str, str] = {}
    leaves: dict[str, set[str]] = {}
    for name in GrpoSpec.model_fields:
        alias = _alias(name)
        index[alias.lower()] = alias
        index[name.lower()] = alias
    for key, alias in _modelled_keys().items():
        index[key.lower()] = alias
        leaves.setdefault(key.rsplit(".", 1)[-1].lower(), set()).add(alias)
    for leaf, owners in leaves.items():
        if len(owners) == 1:
            index.setdefault(leaf, next(iter(owners)))
    return index


def _unknown_key(key: str) -> str:
    index = _suggestion_index()
    typed = str(key).lower()
    if typed in index:
        close = [index[typed]]
    else:
        matches = difflib.get_close_matches(typed, list(index), n=3, cutoff=0.6)
        close = list(dict.fromkeys(index[m] for m in matches))
    if close:
        hint = "did you mean " + " or ".join(setting_of(c) for c in close) + "?"
    else:
        hint = f"valid keys: {', '.join(sorted(_ALIASES))}"
    return (
        f"{_setting(str(key))} is not a GRPO job setting; {hint} (a verl key this program does "
        f"not model goes in {_setting('extraOverrides')} as 'key=value')"
    )


def _validate(values: Mapping[str, Any]) -> GrpoSpec:
    try:
        return GrpoSpec.model_validate(dict(values))
    except ValidationError as error:
        raise GrpoPreflightError(_describe(error, values)) from None


def _value_fix(item: Any, values: Mapping[str, Any]) -> str:
    """A value the field takes with the rest of `values`: the number meant (`true` -> 1,
    `010` -> 10), the violated bound or the nearest choice; else removing the key."""
    alias, ctx = str(item["loc"][0]), item.get("ctx") or {}
    candidates: list[object] = []
    if not isinstance(item["input"], bool | dict | list):
        candidates += [int(n) for n in number_candidates(item["input"])]
    candidates += [ctx[b] for b in ("ge", "gt", "le", "lt") if b in ctx]
    if "expected" in ctx:
        nearest = nearest_choice(item["input"], re.findall(r"'([^']*)'", str(ctx["expected"])))
        candidates += [nearest] if nearest else []
    if isinstance(item["input"], bool):
        candidates.insert(0, int(item["input"]))
    if item["type"] == "tuple_type" and isinstance(item["input"], str):
        # One item given where a list belongs: the list of that item, as JSON text.
        text = item["input"].strip()
        # `[a,b]` as a shell leaves '["a","b"]' typed without quotes: the items it names.
        bare = text[1:-1].split(",") if text.startswith("[") and text.endswith("]") else [text]
        candidates.insert(0, json.dumps([part.strip().strip("'\"") for part in bare]))
        if "=" not in text and "," in text and not text.startswith("["):
            # `console,wandb`: a comma-separated list of plain names (an override, `k=v`, can
            # hold commas of its own and stays one item).
            names = [part.strip() for part in text.split(",") if part.strip()]
            candidates.insert(0, json.dumps(names))
    for candidate in candidates:
        try:
            GrpoSpec.model_validate({**values, alias: candidate})
        except ValidationError as error:
            if any(e["loc"][:1] == (alias,) for e in error.errors()):
                continue
        return set_command(alias, candidate)
    return f"pulumi config rm --path {_setting(alias)} (the stack's default applies)"


def _describe(error: ValidationError, values: Mapping[str, Any] | None = None) -> list[str]:
    problems = []
    for item in error.errors():
        message = str(item["msg"]).removeprefix("Value error, ")
        if not item["loc"]:
            problems.append(message)  # model-level rules already name setting and fix
            continue
        where = _setting(".".join(str(part) for part in item["loc"]))
        if item["type"] == "missing":
            problems.append(f"{where} is required")
        elif values is not None and len(item["loc"]) == 1:
            fix = _value_fix(item, values)
            problems.append(f"{where} = {item['input']!r}: {message}. Fix: {fix}")
        else:
            problems.append(f"{where} = {item['input']!r}: {message}")
    return problems


# --- rendering -------------------------------------------------------------------------------


def _hydra_value(value: object) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, float):
        # Shortest round-tripping form, with the exponent as the tutorial writes it (1e-5, not
        # 1e-05); Hydra's grammar reads both as floats.
        text = repr(value)
        if "e" in text:
            mantissa, exponent = text.split("e")
            text = f"{mantissa}e{int(exponent)}"
        return text
    if isinstance(value, tuple):
        # A single logger renders bare, as the seed does (`trainer.logger=console`; verl's Tracking
        # wraps a string into a list). Several render as a Hydra list, `[console,file]`, which
        # Hydra parses into a list of strings; shell quoting happens later.
        return value[0] if len(value) == 1 else "[" + ",".join(value) + "]"
    return str(value)


def rendered_loggers(spec: GrpoSpec) -> tuple[str, ...]:
    """trainer.logger as sent: `console` first when the spec leaves it out. verl prints the
    `step:N` lines only through its console backend (verl/utils/tracking.py Tracking.__init__,
    v0.6.1 and ddbcdb7), and the job provider's first-step wait and tools/run.py read them."""
    return spec.logger if "console" in spec.logger else ("console", *spec.logger)


def hydra_overrides(spec: GrpoSpec) -> list[str]:
    """The `key=value` arguments of main_ppo, unquoted, in the seed's order, then FIXED_OVERRIDES,
    then extraOverrides."""
    overrides = []
    for name, keys in _HYDRA_KEYS.items():
        value = rendered_loggers(spec) if name == "logger" else getattr(spec, name)
        if value is None:
            continue
        overrides.extend(f"{key}={_hydra_value(value)}" for key in keys)
    fixed = [f"{key}={value}" for key, value in FIXED_OVERRIDES.items()]
    return [*overrides, *fixed, *spec.extra_overrides]


def training_argv(spec: GrpoSpec) -> list[str]:
    """`python3 -m verl.trainer.main_ppo key=value ...`. No `cd`: verl is imported from the pods'
    node-local copy via PYTHONPATH."""
    return ["python3", "-m", ENTRYPOINT_MODULE, *hydra_overrides(spec)]


def render_entrypoint(spec: GrpoSpec) -> str:
    """training_argv, each argument shell-quoted (Ray runs the entrypoint through a shell)."""
    return shlex.join(training_argv(spec))


# Env vars verl's driver puts in its own ray.init(runtime_env=...) unless the job's environment
# already has them (get_ppo_ray_runtime_env, verl/trainer/constants_ppo.py: it drops every key
# set in os.environ, where Ray puts the job's env_vars). Set here so every Ray worker of the job has
# them from the start. NCCL_DEBUG is left out here: verl says WARN, the tutorial says INFO, and a
# fabric check reads NCCL's INFO lines.
_VERL_ENV: Mapping[str, str] = MappingProxyType(
    {
        "TOKENIZERS_PARALLELISM": "true",
        "VLLM_LOGGING_LEVEL": "WARN",
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "true",
        "VLLM_DISABLE_COMPILE_CACHE": "1",
        "TORCH_NCCL_AVOID_RECORD_STREAMS": "1",
    }
)
# The tutorial's values common to every profile (seed A4X runtime env, runtime-env.yaml).
_CLUSTER_ENV: Mapping[str, str] = MappingProxyType(
    {
        # The Ray pods' node-local copy of the checkout (manifests/fuse_mounts.py): imports
        # never go through GCS FUSE, and no process tries to write .pyc files next to them.
        "PYTHONPATH": VERL_NODE_LOCAL,
        "PYTHONDONTWRITEBYTECODE": "1",
        "HF_HOME": GRPO_HF_HOME,
        "NCCL_DEBUG": "INFO",
        # The x86 scripts prefix the command with it; it keeps the driver log (read back on
        # failure) in step with the run.
        "PYTHONUNBUFFERED": "1",
    }
)


def render_runtime_env(
    spec: GrpoSpec, profile: AcceleratorProfile, mode: Mode, verl_ref: str | None = None
) -> dict[str, dict[str, str]]:
    """The Ray job runtime env. No working_dir (verl is in every Ray pod) and no HF token: the
    model is read from the bucket. verl_ref: the verl the job runs (verl-gke:verlRef; the
    profile's when None), whose driver's own env vars the job must not set."""
    ref = verl_ref or profile.verl_ref
    if mode not in profile.nccl_env:
        raise ValueError(
            f"mode {str(mode)!r}: profile {profile.name} has NCCL settings only for "
            f"{[str(m) for m in profile.nccl_env]}"
        )
    env = {**_VERL_ENV, **_CLUSTER_ENV, **profile.nccl_env[mode], **logger_env(spec)}
    clash = sorted(set(env) & set(DRIVER_SET_ENV.get(ref, ())))
    if clash:
        raise ValueError(
            f"the job's env_vars set {clash}, which verl {ref}'s driver also sets: "
            "Ray would refuse the driver's ray.init (a key set by both); leave them out"
        )
    return {"env_vars": env}


# Env vars verl's driver always sets in its ray.init(runtime_env=...), whatever the job's env
# holds (get_ppo_ray_runtime_env in verl/trainer/constants_ppo.py; none at v0.6.1). Ray merges the
# job's runtime env with the driver's and raises ValueError on an env var key set by both
# (ray/_private/worker.py init, ray/runtime_env/runtime_env.py _merge_runtime_env; Ray 2.47), so
# the job's env_vars never hold one. Keyed by the stack's verl-gke:verlRef. 0.9.0 (wheel,
# constants_ppo.py): three always, five more whenever the driver's environment (the job's env)
# has them.
DRIVER_SET_ENV: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "v0.6.1": (),
        "ddbcdb7": ("PYTHONHASHSEED", "VERL_FULL_DETERMINISM", "VLLM_BATCH_INVARIANT"),
        "v0.9.0": (
            "VERL_FULL_DETERMINISM",
            "VLLM_BATCH_INVARIANT",
            "VERL_RL_INSIGHT_ENABLE",
            "PYTHONHASHSEED",
            "CUBLAS_WORKSPACE_CONFIG",
            "FLASH_ATTENTION_DETERMINISTIC",
            "NCCL_DETERMINISTIC",
            "NCCL_ALGO",
        ),
    }
)


def logger_env(spec: GrpoSpec) -> dict[str, str]:
    """Where verl's loggers write, on the bucket's checkpoint mount (verl/utils/tracking.py):
    without these the file logger writes into the TaskRunner's working directory and tensorboard
    into `tensorboard_log/` there, both lost with the pod. The file logger opens its file with
    "w"; payloads/export/run_grpo.py moves the previous attempt's file aside before training."""
    env = {}
    if "file" in spec.logger:
        env["VERL_FILE_LOGGER_PATH"] = f"{spec.default_local_dir}/{METRICS_FILE}"
    if "tensorboard" in spec.logger:
        env["TENSORBOARD_DIR"] = f"{spec.default_local_dir}/{TENSORBOARD_SUBDIR}"
    return env
