"""The preflight rules of a GRPO job spec: what verl, vLLM and the cluster would reject, each
reported with the setting that fixes it, before any resource exists."""

from __future__ import annotations

import math
import posixpath

from config.bucket_layout import DATA_MOUNT, GSM8K_TEST, GSM8K_TRAIN, checkpoint_dir, is_shared
from manifests.data_prep import DatasetLimits
from training.grpo_spec import (
    MODEL_KEY,
    GrpoPreflightError,
    GrpoSpec,
    _alias,
    _hydra_value,
    _setting,
    set_command,
)
from training.memory_fit import ModelArch
from training.model_config import best_rollout_tp, rollout_tp_fits


def _problem(field_name: str, value: object, why: str, fix: str) -> str:
    shown = "(not set)" if value is None else _hydra_value(value)
    return f"{_setting(_alias(field_name))} = {shown}: {why}. Fix: {fix}"


def _set(field_name: str, value: object) -> str:
    return set_command(_alias(field_name), value)


def _nearest_multiple(value: int, step: int, minimum: int = 1) -> int:
    """The multiple of `step` closest to `value` (the lower one on a tie), at least `minimum`."""
    lower = max(step, value // step * step)
    upper = lower + step if lower <= value else lower
    best = lower if value - lower <= upper - value else upper
    return max(best, math.ceil(minimum / step) * step)


def _largest_divisor_at_most(number: int, limit: int) -> int:
    return max(d for d in range(1, min(number, limit) + 1) if number % d == 0)


def _path_problem(field_name: str, path: str, fix: str, why_shared: str) -> str | None:
    # Rules read the path as written; verl and the OS resolve `..`: only the normal form may pass
    # (`/data/verl/checkpoints/../../gsm8k` would put checkpoints into the dataset's folder).
    normal = posixpath.normpath(path)
    if not posixpath.isabs(path):
        why = "a relative path resolves against each Ray process' own working directory"
    elif normal != path.rstrip("/") and path != "/":
        why = (
            f"it has '.', '..' or empty segments (it resolves to {normal}); the path rules and "
            "verl must see the same folder, so it must be written in normal form"
        )
        return _problem(field_name, path, why, _set(field_name, fix))
    elif not is_shared(path):
        why = f"only {DATA_MOUNT} (the GCS FUSE mount of the bucket) is shared by all pods"
    else:
        return None
    return _problem(field_name, path, f"{why}; {why_shared}", _set(field_name, fix))


def preflight(
    spec: GrpoSpec,
    *,
    gpus_per_node_provisioned: int,
    gpu_nodes_provisioned: int,
    model: ModelArch,
) -> None:
    """Raise GrpoPreflightError listing every rule `spec` breaks on the provisioned cluster for
    `model` (verl-gke:model's architecture). Batch rules use the provisioned GPU count, which the
    spec's nnodes x nGpusPerNode always equals (default_grpo_spec derives both)."""
    if gpus_per_node_provisioned < 1 or gpu_nodes_provisioned < 1:
        raise ValueError("gpus_per_node_provisioned and gpu_nodes_provisioned must be >= 1")
    problems: list[str | None] = []
    gpn, nodes = gpus_per_node_provisioned, gpu_nodes_provisioned
    n_gpus = gpn * nodes
    problems += _batch_rules(spec, n_gpus, f"{n_gpus} GPUs ({nodes} nodes x {gpn})")
    problems += _tp_rules(spec, gpn, n_gpus, model)
    problems += _single_value_rules(spec)
    failed = [p for p in problems if p]
    if failed:
        raise GrpoPreflightError(failed)


def grpo_notes(spec: GrpoSpec) -> list[str]:
    """What verl does with GRPO settings it runs but that change what GRPO learns from.

    Neither KL switch on (useKlLoss and useKlInReward false) is no note: verl then builds no
    reference model (main_ppo.py TaskRunner.add_ref_policy_worker v0.6.1, need_reference_policy
    verl/trainer/ppo/utils.py 0.9.0) and trains on the policy loss alone, as Dr.GRPO does."""
    if spec.rollout_n > 1:
        return []
    return [
        f"{_setting(_alias('rollout_n'))} = {spec.rollout_n}: verl runs it, but each prompt's "
        "group holds one response, and verl's GRPO advantage of a group of one is the "
        "response's own reward (mean 0, std 1: compute_grpo_outcome_advantage, "
        "verl/trainer/ppo/core_algos.py v0.6.1 and 0.9.0), so responses are scored against 0, "
        "not against the other responses to their prompt. For GRPO's group comparison: "
        f"{_set('rollout_n', 8)} (the tutorial's value)"
    ]


def _batch_rules(spec: GrpoSpec, n_gpus: int, gpus: str) -> list[str | None]:
    good_mini, mini_fix = _mini_batch_fix(spec, n_gpus)
    return [
        _train_batch_rule(spec, n_gpus, gpus),
        *_mini_batch_rules(spec, n_gpus, gpus, good_mini, mini_fix),
    ]


def train_batch_step(spec: GrpoSpec, n_gpus: int) -> int:
    """trainBatchSize must be a multiple of this for trainBatchSize x rolloutN to split evenly."""
    return n_gpus // math.gcd(spec.rollout_n, n_gpus)


def dataset_limits(spec: GrpoSpec) -> DatasetLimits:
    """What the data-prep Job checks the dataset against: the prompt limit, the train batch, and
    the step and minimum a smaller batch it offers must keep to pass the batch rules above."""
    return DatasetLimits(
        max_prompt_length=spec.max_prompt_length,
        train_batch_size=spec.train_batch_size,
        train_batch_step=train_batch_step(spec, spec.nnodes * spec.n_gpus_per_node),
        min_train_batch=spec.ppo_mini_batch_size,
    )


def _train_batch_rule(spec: GrpoSpec, n_gpus: int, gpus: str) -> str | None:
    # verl validate_config: train_batch_size x n must split evenly over the GPUs.
    n, train = spec.rollout_n, spec.train_batch_size
    if not train * n % n_gpus:
        return None
    step = train_batch_step(spec, n_gpus)
    return _problem(
        "train_batch_size",
        train,
        f"trainBatchSize x rolloutN = {train * n} does not split evenly over {gpus}",
        f"{_set('train_batch_size', _nearest_multiple(train, step, spec.ppo_mini_batch_size))} "
        f"(a multiple of {step})",
    )


def _mini_batch_fix(spec: GrpoSpec, n_gpus: int) -> tuple[int | None, str]:
    """The valid mini-batch nearest the requested one (None if there is none) and the fix text."""
    n, train, mini, micro = (
        spec.rollout_n,
        spec.train_batch_size,
        spec.ppo_mini_batch_size,
        spec.ppo_micro_batch_size_per_gpu,
    )
    # A mini-batch that splits evenly over the GPUs and then into whole micro-batches.
    mini_step = n_gpus * micro // math.gcd(n_gpus * micro, n)
    largest_valid_mini = train // mini_step * mini_step
    if largest_valid_mini >= mini_step:
        good_mini = min(_nearest_multiple(mini, mini_step), largest_valid_mini)
        return good_mini, _set("ppo_mini_batch_size", good_mini)
    train_step = train_batch_step(spec, n_gpus)
    return None, (
        f"no mini-batch <= trainBatchSize works with ppoMicroBatchSizePerGpu = {micro}: "
        f"{_set('train_batch_size', math.lcm(train_step, mini_step))}, then "
        f"{_set('ppo_mini_batch_size', mini_step)}"
    )


def _mini_batch_rules(
    spec: GrpoSpec, n_gpus: int, gpus: str, good_mini: int | None, mini_fix: str
) -> list[str | None]:
    n, train, mini, micro = (
        spec.rollout_n,
        spec.train_batch_size,
        spec.ppo_mini_batch_size,
        spec.ppo_micro_batch_size_per_gpu,
    )
    problems: list[str | None] = []
    if train < mini:
        problems.append(
            _problem(
                "ppo_mini_batch_size",
                mini,
                f"verl requires trainBatchSize ({train}) >= ppoMiniBatchSize",
                mini_fix,
            )
        )
    if mini * n % n_gpus:
        problems.append(
            _problem(
                "ppo_mini_batch_size",
                mini,
                f"ppoMiniBatchSize x rolloutN = {mini * n} does not split evenly over {gpus}",
                mini_fix,
            )
        )
    elif (mini * n // n_gpus) % micro:
        per_gpu = mini * n // n_gpus
        alternative = f", or {_set('ppo_mini_batch_size', good_mini)}" if good_mini else ""
        problems.append(
            _problem(
                "ppo_micro_batch_size_per_gpu",
                micro,
                f"each GPU's share of a mini-batch, ppoMiniBatchSize x rolloutN / GPUs = "
                f"{mini} x {n} / {n_gpus} = {per_gpu}, is not a whole number of micro-batches",
                f"{_set('ppo_micro_batch_size_per_gpu', _largest_divisor_at_most(per_gpu, micro))} "
                f"(a divisor of {per_gpu})"
                f"{alternative}",
            )
        )
    return problems


def _tp_rules(spec: GrpoSpec, gpn: int, n_gpus: int, model: ModelArch) -> list[str | None]:
    tp = spec.rollout_tensor_parallel_size
    reasons = []
    if n_gpus % tp or gpn % tp:
        reasons.append(f"it must divide the GPUs per node ({gpn}) and the GPU count ({n_gpus})")
    if not rollout_tp_fits(tp, model):
        reasons.append(
            f"vLLM needs {MODEL_KEY}'s ({model.name}) {model.num_attention_heads} attention heads "
            f"and MLP size {model.intermediate_size} divisible by it, and its "
            f"{model.num_key_value_heads} KV heads divisible by it (or it by them)"
        )
    if not reasons:
        return []
    best = best_rollout_tp(tp, gpn, model)
    fix = _set("rollout_tensor_parallel_size", best)
    return [_problem("rollout_tensor_parallel_size", tp, "; ".join(reasons), fix)]


def _single_value_rules(spec: GrpoSpec) -> list[str | None]:
    experiment_dir = checkpoint_dir(spec.experiment_name)
    return [
        _problem(
            "gpu_memory_utilization",
            spec.gpu_memory_utilization,
            "vLLM reserves this fraction of each GPU for weights and KV cache; it must lie "
            "strictly between 0 and 1 and leave room for the trainer",
            f"{_set('gpu_memory_utilization', 0.5)} (the x86 tutorial; the A4X command uses 0.6)",
        )
        if not 0 < spec.gpu_memory_utilization < 1
        else None,
        _problem(
            "save_freq",
            spec.save_freq,
            "verl writes no checkpoint unless saveFreq > 0 (-1 is its default): nothing would "
            "reach the bucket and the run could not resume",
            f"{_set('save_freq', 10)} (a positive number of steps, as in the tutorial; the last "
            "step is always saved too)",
        )
        if spec.save_freq <= 0
        else None,
        _path_problem(
            "default_local_dir",
            spec.default_local_dir,
            experiment_dir,
            "checkpoints elsewhere never reach the bucket and are lost with the pods",
        ),
        _path_problem(
            "train_files",
            spec.train_files,
            GSM8K_TRAIN,
            "the data-prep Job writes the dataset there",
        ),
        _path_problem(
            "val_files",
            spec.val_files,
            GSM8K_TEST,
            "the data-prep Job writes the dataset there",
        ),
    ]
