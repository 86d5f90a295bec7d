"""Which spec changes continue a run and which start a new one, and every logger's output kept.

verl resumes from its checkpoint folder's latest_checkpointed_iteration.txt
(`trainer.resume_mode: auto`) and each rank loads `model_world_size_<W>_rank_<r>.pt`, a
SHARDED_STATE_DICT of the actor's FSDP wrapping of that model
(verl/utils/checkpoint/fsdp_checkpoint_manager.py load_checkpoint, v0.6.1 and ddbcdb7). So a
change of world size, model, actor FSDP version, HSDP size or LoRA rank must land in another
folder; any other change must keep the folder (the run continues).
"""

from __future__ import annotations

import shlex
from typing import Any

import pytest
from pydantic import SecretStr

from config.bucket_layout import CHECKPOINT_ROOT, is_shared
from config.profiles import PROFILES, Mode
from config.settings import load_settings
from tests.program import REAL
from training.assembly import training_job
from training.grpo_spec import (
    LOGGER_BACKENDS,
    apply_overrides,
    default_grpo_spec,
    hydra_overrides,
    render_runtime_env,
)
from training.model_facts import table_facts
from training.trackers import UNSUPPORTED_LOGGERS, tracker_problems

A4 = PROFILES["a4"]


def _folder(gpu_nodes: int = 2, **job: Any) -> str:
    spec = default_grpo_spec(A4, Mode.STANDARD, gpu_nodes)
    return apply_overrides(spec, job).default_local_dir


def test_the_default_folder_names_the_world_size() -> None:
    assert _folder(2).startswith(f"{CHECKPOINT_ROOT}/grpo-qwen2.5-32b-instruct-a4/w16-")
    assert _folder(4).startswith(f"{CHECKPOINT_ROOT}/grpo-qwen2.5-32b-instruct-a4/w32-")


def test_another_model_starts_a_new_folder_even_with_the_same_experiment() -> None:
    # verl's checkpoint shards hold one model's FSDP state; a second model cannot resume it.
    other = table_facts("Qwen/Qwen2.5-7B-Instruct")
    spec = default_grpo_spec(A4, Mode.STANDARD, 2, other, experiment="same")
    tutorial = default_grpo_spec(A4, Mode.STANDARD, 2, experiment="same")
    assert spec.default_local_dir != tutorial.default_local_dir


@pytest.mark.parametrize(
    "change",
    [
        {"actorStrategy": "other"},  # the FSDP version the default does not use
        {"extraOverrides": ["actor_rollout_ref.actor.fsdp_config.fsdp_size=8"]},
        {"extraOverrides": ["actor_rollout_ref.model.lora_rank=32"]},
        {"extraOverrides": ["actor_rollout_ref.model.lora_adapter_path=/data/adapter"]},
        {"experimentName": "another"},
    ],
)
def test_a_change_verl_cannot_resume_across_starts_a_new_folder(change: dict[str, Any]) -> None:
    if change.get("actorStrategy") == "other":
        default = default_grpo_spec(A4, Mode.STANDARD, 2).actor_strategy
        change = {"actorStrategy": "fsdp" if default == "fsdp2" else "fsdp2"}
    assert _folder(**change) != _folder()


_LORA = "actor_rollout_ref.model.lora_rank=32"


@pytest.mark.parametrize(
    "key",
    [
        "actor_rollout_ref.model.target_modules=[q_proj,v_proj]",
        "actor_rollout_ref.model.exclude_modules=.*mlp.*",
    ],
)
def test_with_lora_on_the_adapted_modules_decide_the_folder(key: str) -> None:
    # PEFT's LoraConfig(target_modules, exclude_modules) decides which adapter tensors the actor's
    # sharded state holds (verl/workers/fsdp_workers.py v0.6.1, engine/fsdp/transformer_impl.py
    # ddbcdb7); verl loads it with FSDP's load_state_dict, which wants the same keys.
    assert _folder(extraOverrides=[_LORA, key]) != _folder(extraOverrides=[_LORA])


@pytest.mark.parametrize(
    "overrides",
    [
        # verl's own defaults (ppo_trainer.yaml at v0.6.1 and ddbcdb7).
        ["actor_rollout_ref.actor.fsdp_config.fsdp_size=-1"],
        ["actor_rollout_ref.model.lora_rank=0"],
        # create_device_mesh shards over the whole world when fsdp_size >= the world size (16).
        ["actor_rollout_ref.actor.fsdp_config.fsdp_size=16"],
        # Without LoRA verl never reads these (it builds no PEFT model).
        ["actor_rollout_ref.model.target_modules=[q_proj]", "actor_rollout_ref.model.lora_alpha=8"],
        # lora_alpha scales the adapters; their tensors are the same.
        [_LORA, "actor_rollout_ref.model.lora_alpha=64"],
    ],
)
def test_a_setting_verl_builds_the_same_actor_with_keeps_the_folder(overrides: list[str]) -> None:
    base = [_LORA] if _LORA in overrides else []
    assert _folder(extraOverrides=overrides) == _folder(extraOverrides=base)


@pytest.mark.parametrize(
    "change",
    [
        {"lr": 2e-6},
        {"totalEpochs": 5},
        {"trainBatchSize": 512},
        {"rolloutN": 4},
        {"logger": ["console", "file"]},
        {"actorParamOffload": True},
        {"saveFreq": 5},
        {"extraOverrides": ["actor_rollout_ref.rollout.max_num_seqs=512"]},
    ],
)
def test_other_changes_continue_the_run(change: dict[str, Any]) -> None:
    assert _folder(**change) == _folder()


def test_an_explicit_folder_is_kept() -> None:
    assert _folder(4, defaultLocalDir="/checkpoints/mine") == "/checkpoints/mine"


@pytest.mark.parametrize("loggers", [["file"], ["wandb"], ["tensorboard", "file"]])
def test_console_is_always_rendered(loggers: list[str]) -> None:
    spec = apply_overrides(default_grpo_spec(A4, Mode.STANDARD, 2), {"logger": loggers})
    rendered = next(o for o in hydra_overrides(spec) if o.startswith("trainer.logger="))
    assert rendered == f"trainer.logger=[{','.join(['console', *loggers])}]"


def _settings() -> Any:
    config = {
        "gcp:project": "my-project-123",
        "gcp:region": "us-central1",
        "verl-gke:zone": "us-central1-b",
        "verl-gke:reservation": "my-reservation",
        "verl-gke:hfToken": "hf_abc",
    }
    return load_settings("a4", config, offline=False).settings


@pytest.mark.parametrize("name", LOGGER_BACKENDS)
def test_every_logger_is_kept_on_the_bucket_or_refused_with_a_fix(name: str) -> None:
    settings = _settings()
    spec = apply_overrides(default_grpo_spec(A4, Mode.STANDARD, 2), {"logger": [name]})
    problems = tracker_problems(spec, settings)
    if name in UNSUPPORTED_LOGGERS or name == "wandb":
        assert len(problems) == 1 and "Fix: " in problems[0]
        command = problems[0].rsplit("pulumi config set --path verl-gke:job.logger ", 1)[1]
        fixed = shlex.split(command.split(" -s ")[0])[0]  # the shell word as printed: '["console"]'
        fixed_spec = apply_overrides(spec, {"logger": fixed})  # stored as text, as --path does
        assert tracker_problems(fixed_spec, settings) == []
        return
    assert problems == []
    env = render_runtime_env(spec, A4, Mode.STANDARD)["env_vars"]
    where = {"file": "VERL_FILE_LOGGER_PATH", "tensorboard": "TENSORBOARD_DIR"}.get(name)
    if where is not None:
        assert is_shared(env[where]) and env[where].startswith(spec.default_local_dir)


def test_wandb_with_a_key_is_kept() -> None:
    settings = _settings()
    settings = settings.model_copy(update={"wandb_api_key": SecretStr("k" * 40)})
    spec = apply_overrides(default_grpo_spec(A4, Mode.STANDARD, 2), {"logger": ["wandb"]})
    assert tracker_problems(spec, settings) == []


def _stack_job(stack: str, **config: str) -> Any:
    values = {**REAL, "verl-gke:mode": "standard", "verl-gke:bucketName": "acme-shared", **config}
    return training_job(load_settings(stack, values, offline=False).settings)


def test_two_stacks_of_one_profile_sharing_a_bucket_share_no_run_folder() -> None:
    own = _stack_job("a3u", **{"verl-gke:exportModel": "true"})
    other = _stack_job("a3u-b", **{"verl-gke:profile": "a3u", "verl-gke:exportModel": "true"})
    # The stack named after its profile keeps the folder it always had.
    assert own.spec.experiment_name == "grpo-qwen2.5-32b-instruct-a3u"
    assert other.spec.experiment_name == "grpo-qwen2.5-32b-instruct-a3u-b"
    assert own.checkpoint_url.startswith("gs://acme-shared/verl/checkpoints/")
    assert own.checkpoint_url != other.checkpoint_url
    assert own.model_export_url != other.model_export_url
    # An experiment name the user sets is kept as set, in every stack.
    named = {"verl-gke:job": '{"experimentName": "grpo-qwen2.5-32b-instruct-a3u"}'}
    kept = _stack_job("a3u-b", **{"verl-gke:profile": "a3u", **named})
    assert kept.spec.experiment_name == own.spec.experiment_name
