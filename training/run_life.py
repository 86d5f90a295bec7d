"""What the GRPO runner (payloads/export/run_grpo.py) needs to know about a run beyond its resume
identity: how long it is (a finished run trains again only when that changes) and how many
checkpoints it keeps (the runner prunes what verl's own pruning misses after a resume).
"""

from __future__ import annotations

import math
from typing import Any

from config.bucket_layout import GSM8K_TRAIN
from config.run_inputs import GSM8K_ROWS
from config.verl_source import release_at_least
from training.grpo_spec import (
    LORA_ADAPTER_KEY,
    LORA_RANK_KEY,
    GrpoSpec,
    _as_int,
    setting_of,
)

TOTAL_STEPS_KEY = "trainer.total_training_steps"
LORA_ALPHA_KEY = "actor_rollout_ref.model.lora_alpha"
LORA_TARGETS_KEY = "actor_rollout_ref.model.target_modules"
# verl's default (_generated_ppo_trainer.yaml actor_rollout_ref.model.lora_alpha, v0.6.1 and
# 0.9.0).
LORA_ALPHA_DEFAULT = 16
KEEP_KEY = "trainer.max_actor_ckpt_to_keep"
# Deprecated at v0.6.1: true means max_actor_ckpt_to_keep=1 (ray_trainer.py _save_checkpoint).
REMOVE_PREVIOUS_KEY = "trainer.remove_previous_ckpt_in_save"


def extra_override_value(spec: GrpoSpec, key: str) -> str | None:
    """The value extraOverrides gives verl key `key` (the last one), or None."""
    values = [
        o.split("=", 1)[1].strip()
        for o in spec.extra_overrides
        if o.lstrip("+").split("=")[0] == key
    ]
    return values[-1] if values else None


# The data keys besides train_files and train_batch_size that decide len(train_dataloader)
# (verl/trainer/ppo/ray_trainer.py _create_dataloader, v0.6.1 and 0.9.0): the dataset keeps at
# most data.train_max_samples rows, and the dataloader's batch is data.gen_batch_size when set.
DATALOADER_KEYS = ("data.train_max_samples", "data.gen_batch_size")


def run_length(spec: GrpoSpec) -> dict[str, Any]:
    """What decides the run's step count: verl trains trainer.total_training_steps when set, else
    len(train_dataloader) x total_epochs, the dataloader being train_files in batches of
    train_batch_size (verl/trainer/ppo/ray_trainer.py _create_dataloader, v0.6.1), or of
    DATALOADER_KEYS where set. Every run drops the prompts over max_prompt_length
    (grpo_spec.FIXED_OVERRIDES data.filter_overlong_prompts; rl_dataset.py
    maybe_filter_out_long_prompts), so that length decides how many rows remain."""
    length: dict[str, Any] = {
        "total_training_steps": _as_int(extra_override_value(spec, TOTAL_STEPS_KEY)),
        "total_epochs": spec.total_epochs,
        "train_batch_size": spec.train_batch_size,
        "train_files": spec.train_files,
        "max_prompt_length": spec.max_prompt_length,
    }
    for key in DATALOADER_KEYS:
        value = extra_override_value(spec, key)
        if value is not None:
            length[key] = value
    return length


def checkpoints_to_keep(spec: GrpoSpec) -> int | None:
    """trainer.max_actor_ckpt_to_keep when it limits anything: verl prunes only for a positive
    int (fsdp_checkpoint_manager.py save_checkpoint, v0.6.1), else keeps every checkpoint."""
    keep = _as_int(extra_override_value(spec, KEEP_KEY))
    return keep if keep is not None and keep > 0 else None


# verl keeps the only checkpoint until the new one is saved from volcengine/verl#4873
# (2026-01-11: checkpoint_manager.py ensure_checkpoint_capacity / register_checkpoint), in the
# 0.9.0 wheel; v0.6.1 and v0.7.0 remove first. Refs not known to have it are treated as before.
KEEP_ONE_SAFE_SINCE = (0, 9, 0)


def checkpoint_keep_problems(spec: GrpoSpec, verl_ref: str) -> list[str]:
    """Keeping one checkpoint can lose them all at verl before #4873: before writing step N, verl
    removes the previous saves down to max_ckpt_to_keep - 1 (fsdp_checkpoint_manager.py
    save_checkpoint v0.6.1: the removal precedes the save), so with 1 a preemption during the
    save leaves the tracker naming a deleted step and no checkpoint to resume from."""
    if release_at_least(verl_ref, KEEP_ONE_SAFE_SINCE):
        return []
    where = setting_of("extraOverrides")
    fix = (
        f"keep at least 2 ({where} item '{KEEP_KEY}=2'): the previous checkpoint then survives "
        "until the new one is complete"
    )
    problems = []
    if checkpoints_to_keep(spec) == 1:
        problems.append(
            f"{where} sets {KEEP_KEY}=1: verl {verl_ref} deletes the only checkpoint before it "
            f"writes the next, so a preemption during that save leaves none to resume from (safe "
            f"from verl 0.9.0). Fix: {fix}"
        )
    remove = extra_override_value(spec, REMOVE_PREVIOUS_KEY)
    if remove is not None and remove.lower() == "true":
        problems.append(
            f"{where} sets {REMOVE_PREVIOUS_KEY}=true, which verl treats as {KEEP_KEY}=1 "
            f"(deletes the only checkpoint before writing the next). Fix: remove it and {fix}"
        )
    return problems


def lora_alpha(spec: GrpoSpec) -> int | None:
    """A LoRA run's lora_alpha (verl trains LoRA when lora_rank > 0: fsdp_workers.py v0.6.1), for
    the exported adapter's config; None without LoRA. lora_alpha_problems refuses any value that
    is no integer first."""
    rank = _as_int(extra_override_value(spec, LORA_RANK_KEY))
    if rank is None or rank <= 0:
        return None
    alpha = _alpha_int(extra_override_value(spec, LORA_ALPHA_KEY))
    return LORA_ALPHA_DEFAULT if alpha is None else alpha


def _alpha_int(value: str | None) -> int | None:
    # A quoted '32' is a string to Hydra, which OmegaConf converts to the int field.
    return _as_int(value.strip("'\"") if value is not None else None)


def uses_lora(spec: GrpoSpec) -> bool:
    """verl trains a LoRA adapter, and then computes the reference log-probs with the actor's
    adapter disabled instead of building a reference model (ref_in_actor: lora_rank > 0 or a
    lora_adapter_path; ray_trainer.py RayPPOTrainer.__init__ v0.6.1 and 0.9.0)."""
    rank = _as_int(extra_override_value(spec, LORA_RANK_KEY))
    adapter = extra_override_value(spec, LORA_ADAPTER_KEY)
    return (rank is not None and rank > 0) or (adapter is not None and adapter != "null")


def lora_shape(spec: GrpoSpec) -> tuple[int, tuple[str, ...] | None]:
    """The adapter's rank (0: not known from the settings) and target modules (None: verl's
    default all-linear, or a value that is no plain list of names)."""
    rank = _as_int(extra_override_value(spec, LORA_RANK_KEY)) or 0
    targets = extra_override_value(spec, LORA_TARGETS_KEY)
    if targets is None or not (targets.startswith("[") and targets.endswith("]")):
        return max(rank, 0), None
    names = tuple(n.strip().strip("'\"") for n in targets[1:-1].split(",") if n.strip())
    return max(rank, 0), names or None


def lora_alpha_problems(spec: GrpoSpec) -> list[str]:
    """verl declares `lora_alpha: int` (HFModelConfig, verl/workers/config/model.py v0.6.1 and
    0.9.0) and converts actor_rollout_ref.model to it with OmegaConf's type checks when the
    rollout starts, LoRA or not (omega_conf_to_dataclass(..., dataclass_type=HFModelConfig):
    fsdp_workers.py _build_rollout v0.6.1, vLLMHttpServer._init_model_config 0.9.0), on the
    GPUs: Hydra reads `32.0` as a float and OmegaConf refuses it ("could not be converted to
    Integer"), even though PEFT would scale by a float alpha / r."""
    value = extra_override_value(spec, LORA_ALPHA_KEY)
    if value is None or _alpha_int(value) is not None:
        return []
    try:
        number = float(value.strip("'\""))
    except ValueError:
        number = float(LORA_ALPHA_DEFAULT)
    fix = max(1, round(number)) if math.isfinite(number) else LORA_ALPHA_DEFAULT
    where = setting_of("extraOverrides")
    return [
        f"{where} sets {LORA_ALPHA_KEY}={value}: verl declares lora_alpha an integer and refuses "
        f"any other value when the rollout builds its model config, after the GPU nodes are up "
        f"(OmegaConf: could not be converted to Integer). Fix: item '{LORA_ALPHA_KEY}={fix}' "
        f"(PEFT scales the adapter by lora_alpha / lora_rank)"
    ]


# Bytes per parameter of one verl FSDP actor checkpoint (verl FSDPCheckpointManager with the
# default checkpoint.save_contents [model, optimizer, extra]): model_world_size_*.pt holds the
# actor's sharded weights, fp32 (fsdp_workers: the actor's model_dtype defaults to fp32), 4 B;
# optim_world_size_*.pt holds AdamW's exp_avg and exp_avg_sq in the parameters' dtype, 8 B;
# extra_state_*.pt (LR scheduler, RNG) and the step's data.pt are a few MB. The shards split
# evenly over the ranks, so each node writes its ranks' share.
CHECKPOINT_BYTES_PER_PARAM = 4 + 8
# The hang bound of a step that saves grows by the time one node takes to write its share at this
# rate: an ESTIMATE chosen low (not measured on GCS FUSE), so a slow save is never taken for a
# hang; a real hang at a saving step is found that much later. At least SAVE_ALLOWANCE_FLOOR_S.
CHECKPOINT_WRITE_MIB_PER_S_PER_NODE = 100
SAVE_ALLOWANCE_FLOOR_S = 300.0


def save_allowance_s(num_params: int, nodes: int) -> float:
    """Seconds added to the hang bound of a training step that saves a checkpoint."""
    per_node = CHECKPOINT_BYTES_PER_PARAM * num_params / max(nodes, 1)
    return max(SAVE_ALLOWANCE_FLOOR_S, per_node / (CHECKPOINT_WRITE_MIB_PER_S_PER_NODE * 2**20))


def known_total_steps(spec: GrpoSpec) -> int:
    """verl's step count where the program knows it (0: it depends on the dataset's size):
    trainer.total_training_steps when set, else len(train_dataloader) x total_epochs for GSM8K
    (drop_last=True: ray_trainer.py _create_dataloader, v0.6.1)."""
    explicit = run_length(spec)["total_training_steps"]
    if explicit:
        return int(explicit)
    if spec.train_files == GSM8K_TRAIN:
        return GSM8K_ROWS["train"] // spec.train_batch_size * spec.total_epochs
    return 0
