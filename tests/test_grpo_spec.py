"""The GRPO job spec: tutorial-exact rendering, runtime envs, overrides and every preflight rule.

The expected commands and environments below are copied from the sources (the seed's A4X
`ray job submit`, the tutorial's runtime envs and job commands for A4 / A3 Ultra), not from
training/grpo_spec.py, so a drift in the defaults module shows up here.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import replace
from typing import Any

import pytest
from pydantic import ValidationError

from config.profiles import PROFILES, Mode
from training import grpo_spec
from training.grpo_preflight import preflight
from training.grpo_spec import (
    GrpoPreflightError,
    GrpoSpec,
    apply_overrides,
    default_grpo_spec,
    render_entrypoint,
    render_runtime_env,
)
from training.memory_fit import ModelArch
from training.model_facts import table_facts

TUTORIAL_MODEL = table_facts("Qwen/Qwen2.5-32B-Instruct")

# --- what the sources say ----------------------------------------------------------------------

# The seed's A4X command, verbatim (gke-verl-grpo-tutorial.zh.txt, "A4X" job submission).
SEED_A4X_COMMAND = r"""
python3 -m verl.trainer.main_ppo \ algorithm.adv_estimator=grpo \
data.train_files=/data/gsm8k/train.parquet \ data.val_files=/data/gsm8k/test.parquet \
data.train_batch_size=256 \ data.max_prompt_length=512 \ data.max_response_length=512 \
actor_rollout_ref.model.path=/data/Qwen2.5-32B-Instruct \ actor_rollout_ref.actor.optim.lr=1e-5 \
actor_rollout_ref.actor.ppo_mini_batch_size=64 \
actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8 \
actor_rollout_ref.actor.use_kl_loss=True \ actor_rollout_ref.actor.strategy=fsdp2 \
actor_rollout_ref.rollout.name=vllm \ actor_rollout_ref.rollout.tensor_model_parallel_size=4 \
actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \ actor_rollout_ref.rollout.n=8 \
actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16 \
actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16 \ algorithm.kl_ctrl.kl_coef=0.001 \
trainer.logger=console \ trainer.n_gpus_per_node=4 \ trainer.nnodes=4 \ trainer.save_freq=10 \
trainer.test_freq=10 \ trainer.total_epochs=2 \ trainer.default_local_dir=/data/verl/checkpoints
"""

# The overrides shared by every x86 script version (`ray job submit`).
X86_SHARED = {
    "data.train_files": "/data/gsm8k/train.parquet",
    "data.val_files": "/data/gsm8k/test.parquet",
    "data.train_batch_size": "256",
    "data.max_prompt_length": "512",
    "data.max_response_length": "512",
    "actor_rollout_ref.actor.optim.lr": "1e-5",
    "actor_rollout_ref.actor.ppo_mini_batch_size": "256",
    "actor_rollout_ref.rollout.name": "vllm",
    "actor_rollout_ref.rollout.tensor_model_parallel_size": "8",
    "actor_rollout_ref.actor.strategy": "fsdp2",
    "algorithm.kl_ctrl.kl_coef": "0.001",
    "trainer.logger": "console",
    "trainer.val_before_train": "False",
    "trainer.n_gpus_per_node": "8",
    "trainer.nnodes": "2",
    "trainer.save_freq": "10",
    "trainer.test_freq": "10",
    "algorithm.adv_estimator": "grpo",
    "actor_rollout_ref.rollout.n": "8",
    "trainer.total_epochs": "2",
}
# The latest Standard (7_run_job.sh) and Autopilot (6_run_job.sh) columns.
X86_STANDARD = {
    **X86_SHARED,
    "actor_rollout_ref.model.path": "/data/Qwen2.5-32B-Instruct",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "8",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": "2",
    "actor_rollout_ref.rollout.gpu_memory_utilization": "0.5",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": "2",
    "trainer.default_local_dir": "/data/verl/checkpoints",
}
X86_AUTOPILOT = {
    **X86_STANDARD,
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": "8",
    "actor_rollout_ref.actor.use_torch_compile": "False",
    "actor_rollout_ref.actor.fsdp_config.use_torch_compile": "False",
    "actor_rollout_ref.ref.use_torch_compile": "False",
    "actor_rollout_ref.ref.fsdp_config.use_torch_compile": "False",
}


def _pairs(args: list[str]) -> dict[str, str]:
    pairs = dict(arg.split("=", 1) for arg in args)
    assert len(pairs) == len(args), f"a key is passed twice: {args}"
    return pairs


def _seed_a4x() -> dict[str, str]:
    # The seed flattened its line continuations into backslash-space; undo that, then split.
    args = shlex.split(SEED_A4X_COMMAND.replace(" \\ ", " ").replace("\\\n", " "))
    assert args[:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    pairs = _pairs(args[3:])
    assert len(pairs) == 26
    return pairs


def _with_departures(tutorial: dict[str, str], experiment: str, *, add_kl: bool) -> dict[str, str]:
    """The documented departures: one checkpoint folder per run of the experiment (a pattern:
    w<world size>-<hash of the resume identity>), the experiment name, and (x86 only) KL loss on
    as in the A4X command."""
    world = int(tutorial["trainer.nnodes"]) * int(tutorial["trainer.n_gpus_per_node"])
    expected = {
        **tutorial,
        "trainer.default_local_dir": (
            rf"/checkpoints/{re.escape(experiment)}/w{world}-[0-9a-f]{{8}}"
        ),
        "trainer.experiment_name": experiment,
    }
    if add_kl:
        expected["actor_rollout_ref.actor.use_kl_loss"] = "True"
    return expected


EXPECTED_OVERRIDES = {
    ("a4x", Mode.STANDARD): _with_departures(
        _seed_a4x(), "grpo-qwen2.5-32b-instruct-a4x", add_kl=False
    ),
    ("a4", Mode.STANDARD): _with_departures(
        X86_STANDARD, "grpo-qwen2.5-32b-instruct-a4", add_kl=True
    ),
    ("a4", Mode.AUTOPILOT): _with_departures(
        X86_AUTOPILOT, "grpo-qwen2.5-32b-instruct-a4", add_kl=True
    ),
    ("a3u", Mode.STANDARD): _with_departures(
        X86_STANDARD, "grpo-qwen2.5-32b-instruct-a3u", add_kl=True
    ),
    ("a3u", Mode.AUTOPILOT): _with_departures(
        X86_AUTOPILOT, "grpo-qwen2.5-32b-instruct-a3u", add_kl=True
    ),
}

# Runtime envs: the seed's A4X file; AIHypercomputerSamples' Standard and Autopilot DRANET
# runtime-env.yaml, without NUM_WORKERS / CPUS_PER_WORKER / GPUS_PER_WORKER, which nothing reads.
SEED_A4X_ENV = {
    "PYTHONPATH": "/data/verl",
    "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64:/usr/local/gib/lib64",
    "NCCL_DEBUG": "INFO",
    "NCCL_ENV_PLUGIN": "gcp",
    "HF_HOME": "/data/huggingface_cache",
    "GLOO_SOCKET_IFNAME": "eth0",
}
X86_STANDARD_ENV = {
    "PYTHONPATH": "/data/verl",
    "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64",
    "NCCL_DEBUG": "INFO",
    "NCCL_NET_PLUGIN": "/usr/local/gib/lib64/libnccl-net_internal.so",
    "NCCL_CROSS_NIC": "0",
    "NCCL_NET_GDR_LEVEL": "PIX",
    "NCCL_P2P_NET_CHUNKSIZE": "131072",
    "NCCL_NVLS_CHUNKSIZE": "524288",
    "NCCL_IB_ADAPTIVE_ROUTING": "1",
    "NCCL_IB_QPS_PER_CONNECTION": "4",
    "NCCL_IB_TC": "52",
    "NCCL_IB_FIFO_TC": "84",
    "NCCL_TUNER_CONFIG_PATH": "/usr/local/gib/configs/tuner_config_a4.txtpb",
    "HF_HOME": "/data/huggingface_cache",
    "GLOO_SOCKET_IFNAME": "eth0",
}
X86_AUTOPILOT_ENV = {
    "PYTHONPATH": "/data/verl",
    "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64:/usr/local/gib/lib64",
    "NCCL_DEBUG": "INFO",
    "NCCL_ENV_PLUGIN": "gcp",
    "NCCL_CONF_FILE": "/usr/local/gib/configs/nccl.a4.conf",
    "NCCL_IB_GID_INDEX": "3",
    "NCCL_NVLS_ENABLE": "0",
    "NCCL_TUNER_CONFIG_PATH": "/usr/local/gib/configs",
    "HF_HOME": "/data/huggingface_cache",
    "GLOO_SOCKET_IFNAME": "eth0",
}
# verl's own env (constants_ppo.py, runtime_env.yaml), which a Ray job does not get from the
# driver's ray.init, plus PYTHONUNBUFFERED from the x86 scripts' command line.
VERL_ENV = {
    "TOKENIZERS_PARALLELISM": "true",
    "VLLM_LOGGING_LEVEL": "WARN",
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "true",
    "VLLM_DISABLE_COMPILE_CACHE": "1",
    "TORCH_NCCL_AVOID_RECORD_STREAMS": "1",
    "PYTHONUNBUFFERED": "1",
}
EXPECTED_ENV = {
    ("a4x", Mode.STANDARD): SEED_A4X_ENV,
    ("a4", Mode.STANDARD): X86_STANDARD_ENV,
    ("a4", Mode.AUTOPILOT): X86_AUTOPILOT_ENV,
    # "If you use H200 GPUs, change NCCL_TUNER_CONFIG_PATH to .../tuner_config_a3u.txtpb".
    ("a3u", Mode.STANDARD): {
        **X86_STANDARD_ENV,
        "NCCL_TUNER_CONFIG_PATH": "/usr/local/gib/configs/tuner_config_a3u.txtpb",
    },
    ("a3u", Mode.AUTOPILOT): {
        **X86_AUTOPILOT_ENV,
        "NCCL_CONF_FILE": "/usr/local/gib/configs/nccl.a3u.conf",
    },
}
STACKS = sorted(EXPECTED_OVERRIDES, key=str)


def _default(profile: str = "a4", mode: Mode = Mode.STANDARD, **kwargs: Any) -> GrpoSpec:
    p = PROFILES[profile]
    return default_grpo_spec(p, mode, kwargs.pop("gpu_nodes", p.default_gpu_nodes), **kwargs)


def _preflight(spec: GrpoSpec, profile: str = "a4", **kwargs: Any) -> None:
    p = PROFILES[profile]
    preflight(
        spec,
        gpus_per_node_provisioned=kwargs.pop("gpus_per_node", p.gpus_per_node),
        gpu_nodes_provisioned=kwargs.pop("gpu_nodes", p.default_gpu_nodes),
        model=kwargs.pop("model", TUTORIAL_MODEL.arch),
    )


def _heads(heads: int, kv_heads: int) -> ModelArch:
    """The tutorial model with other head counts (what the TP rule reads)."""
    return replace(TUTORIAL_MODEL.arch, num_attention_heads=heads, num_key_value_heads=kv_heads)


def _problems(spec: GrpoSpec, profile: str = "a4", **kwargs: Any) -> tuple[str, ...]:
    with pytest.raises(GrpoPreflightError) as caught:
        _preflight(spec, profile, **kwargs)
    assert isinstance(caught.value, ValueError)
    for problem in caught.value.problems:
        assert problem in str(caught.value)
    return caught.value.problems


# --- rendering ---------------------------------------------------------------------------------


def test_every_profile_mode_has_a_tutorial_table() -> None:
    assert {(p.name, m) for p in PROFILES.values() for m in p.modes} == set(EXPECTED_OVERRIDES)


@pytest.mark.parametrize(("profile", "mode"), STACKS)
def test_entrypoint_reproduces_the_tutorial(profile: str, mode: Mode) -> None:
    args = shlex.split(render_entrypoint(_default(profile, mode)))
    assert args[:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    pairs, expected = _pairs(args[3:]), dict(EXPECTED_OVERRIDES[(profile, mode)])
    folder_pattern = expected.pop("trainer.default_local_dir")
    assert re.fullmatch(folder_pattern, pairs.pop("trainer.default_local_dir"))
    # Departure: verl drops prompts over data.max_prompt_length instead of raising on the GPUs
    # (grpo_spec.FIXED_OVERRIDES; verl's own filter runs in tests/test_prompt_lengths_verl.py).
    assert pairs.pop("data.filter_overlong_prompts") == "True"
    assert pairs == expected


@pytest.mark.parametrize(("profile", "mode"), STACKS)
def test_runtime_env_reproduces_the_tutorial(profile: str, mode: Mode) -> None:
    env = render_runtime_env(_default(profile, mode), PROFILES[profile], mode)
    # Departure: verl is imported from the Ray pods' node-local copy.
    node_local = {"PYTHONPATH": "/opt/verl-node-local", "PYTHONDONTWRITEBYTECODE": "1"}
    assert env == {"env_vars": {**EXPECTED_ENV[(profile, mode)], **VERL_ENV, **node_local}}
    assert not any("HF_TOKEN" in k or "HUGGING_FACE" in k for k in env["env_vars"])
    assert all(isinstance(v, str) for v in env["env_vars"].values())


def test_nnodes_follows_the_provisioned_node_count() -> None:
    args = _pairs(shlex.split(render_entrypoint(_default("a4x", gpu_nodes=8)))[3:])
    assert (args["trainer.nnodes"], args["trainer.n_gpus_per_node"]) == ("8", "4")
    _preflight(_default("a4x", gpu_nodes=8), "a4x", gpu_nodes=8)


def test_runtime_env_rejects_a_mode_the_profile_lacks() -> None:
    with pytest.raises(ValueError, match="autopilot"):
        render_runtime_env(_default("a4x"), PROFILES["a4x"], Mode.AUTOPILOT)
    with pytest.raises(ValueError, match="autopilot"):
        default_grpo_spec(PROFILES["a4x"], Mode.AUTOPILOT, 4)


def test_file_logger_writes_into_the_experiment_folder() -> None:
    spec = apply_overrides(_default(), {"logger": ["console", "file"]})
    env = render_runtime_env(spec, PROFILES["a4"], Mode.STANDARD)["env_vars"]
    assert env["VERL_FILE_LOGGER_PATH"] == f"{spec.default_local_dir}/metrics.jsonl"
    args = _pairs(shlex.split(render_entrypoint(spec))[3:])
    assert args["trainer.logger"] == "[console,file]"


def test_optional_knobs_render_their_verl_keys() -> None:
    spec = apply_overrides(
        _default(),
        {
            "actorParamOffload": True,
            "actorOptimizerOffload": True,
            "refParamOffload": True,
            "enableGradientCheckpointing": True,
            "useRemovePadding": False,
            "klLossCoef": 0.01,
            "lr": 3e-6,
        },
    )
    args = _pairs(shlex.split(render_entrypoint(spec))[3:])
    assert args["actor_rollout_ref.actor.fsdp_config.param_offload"] == "True"
    assert args["actor_rollout_ref.actor.fsdp_config.optimizer_offload"] == "True"
    assert args["actor_rollout_ref.ref.fsdp_config.param_offload"] == "True"
    assert args["actor_rollout_ref.model.enable_gradient_checkpointing"] == "True"
    assert args["actor_rollout_ref.model.use_remove_padding"] == "False"
    assert args["actor_rollout_ref.actor.kl_loss_coef"] == "0.01"
    assert args["actor_rollout_ref.actor.optim.lr"] == "3e-6"


def test_every_field_renders_to_a_verl_key() -> None:
    assert set(grpo_spec._HYDRA_KEYS) == set(GrpoSpec.model_fields) - {"extra_overrides"}


def test_quoting_survives_spaces_quotes_and_shell_syntax() -> None:
    tricky = [
        "trainer.project_name='my \"quoted\" project, it''s v2'",
        "+trainer.note=$(touch /tmp/pwned); echo `id` && exit 1",
        "actor_rollout_ref.rollout.max_num_seqs=512",
    ]
    spec = apply_overrides(_default(), {"extraOverrides": tricky})
    args = shlex.split(render_entrypoint(spec))
    assert args[-3:] == tricky


def test_string_fields_refuse_characters_hydra_would_parse() -> None:
    with pytest.raises(GrpoPreflightError) as caught:
        apply_overrides(_default(), {"trainFiles": "/data/my train.parquet"})
    assert "verl-gke:job.trainFiles = '/data/my train.parquet'" in str(caught.value)
    assert "'/data/my-train.parquet'" in str(caught.value)


@pytest.mark.parametrize(
    ("key", "setting"),
    [
        ("modelPath", "verl-gke:model"),
        ("nnodes", "verl-gke:gpuNodes"),
        ("nGpusPerNode", "verl-gke:gpuNodes"),
    ],
)
def test_derived_job_keys_are_refused_naming_the_setting_that_decides_them(
    key: str, setting: str
) -> None:
    # The model folder is where the data-prep Job downloads verl-gke:model, and verl waits for
    # nnodes x n_gpus_per_node GPUs (verl ResourcePoolManager): set anywhere but from the stack,
    # either would contradict what exists.
    with pytest.raises(GrpoPreflightError) as caught:
        apply_overrides(_default(), {key: 3})
    (problem,) = caught.value.problems
    assert problem.startswith(f"verl-gke:job.{key} is not a setting: ")
    assert f"pulumi config rm --path verl-gke:job.{key}, and set {setting} instead" in problem


# --- overrides -----------------------------------------------------------------------------------


def test_override_by_alias() -> None:
    spec = apply_overrides(_default(), {"ppoMicroBatchSizePerGpu": 4})
    assert spec.ppo_micro_batch_size_per_gpu == 4
    args = _pairs(shlex.split(render_entrypoint(spec))[3:])
    assert args["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == "4"
    _preflight(spec)


def test_override_values_arrive_as_strings_from_pulumi_config() -> None:
    spec = apply_overrides(
        _default(), {"ppoMicroBatchSizePerGpu": "4", "valBeforeTrain": "true", "lr": "2e-6"}
    )
    assert (spec.ppo_micro_batch_size_per_gpu, spec.val_before_train, spec.lr) == (4, True, 2e-6)


@pytest.mark.parametrize(
    ("typed", "suggested"),
    [
        ("ppoMiniBatchSzie", "verl-gke:job.ppoMiniBatchSize"),
        ("ppomicrobatchsizepergpu", "verl-gke:job.ppoMicroBatchSizePerGpu"),
        ("ppo_mini_batch_size", "verl-gke:job.ppoMiniBatchSize"),
        (
            "actor_rollout_ref.rollout.tensor_model_parallel_size",
            "verl-gke:job.rolloutTensorParallelSize",
        ),
        ("gpuMemoryUtilisation", "verl-gke:job.gpuMemoryUtilization"),
    ],
)
def test_unknown_key_is_rejected_with_the_closest_setting(typed: str, suggested: str) -> None:
    with pytest.raises(GrpoPreflightError) as caught:
        apply_overrides(_default(), {typed: 4})
    message = str(caught.value)
    assert f"verl-gke:job.{typed} is not a GRPO job setting" in message
    assert f"did you mean {suggested}" in message


def test_bad_value_type_names_the_setting() -> None:
    with pytest.raises(GrpoPreflightError) as caught:
        apply_overrides(_default(), {"saveFreq": "ten", "rolloutN": 0, "logger": ["consol"]})
    message = str(caught.value)
    assert "verl-gke:job.saveFreq = 'ten'" in message
    assert "verl-gke:job.rolloutN = 0: Input should be greater than 0" in message
    assert "did you mean 'console'" in message


def test_new_experiment_gets_its_own_checkpoint_folder() -> None:
    spec = apply_overrides(_default(), {"experimentName": "lr-sweep-2"})
    assert re.fullmatch(r"/checkpoints/lr-sweep-2/w\d+-[0-9a-f]{8}", spec.default_local_dir)
    explicit = apply_overrides(
        _default(), {"experimentName": "b", "defaultLocalDir": "/data/ckpt/shared"}
    )
    assert explicit.default_local_dir == "/data/ckpt/shared"
    with pytest.raises(GrpoPreflightError, match="use 'my-run'"):
        apply_overrides(_default(), {"experimentName": "my run"})


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["trainer.nnodes 3"], "not a Hydra override"),
        (["=3"], "not a Hydra override"),
        (["trainer.nnodes=3"], "set verl-gke:gpuNodes instead"),
        (
            ["actor_rollout_ref.ref.use_torch_compile=True"],
            "then pulumi config set --path verl-gke:job.useTorchCompile true",
        ),
        (["a.b=1", "a.b=2"], "overridden twice"),
        (["a.b=1\nc.d=2"], "not a Hydra override"),
        (["data.filter_overlong_prompts=False"], "raise verl-gke:job.maxPromptLength"),
        (["+data.filter_overlong_prompts=False"], "is set for every run"),
    ],
)
def test_extra_overrides_are_validated(extra: list[str], expected: str) -> None:
    with pytest.raises(GrpoPreflightError) as caught:
        apply_overrides(_default(), {"extraOverrides": extra})
    assert "verl-gke:job.extraOverrides[" in str(caught.value)
    assert expected in str(caught.value)


def test_spec_is_frozen_and_forbids_unknown_fields() -> None:
    spec = _default()
    with pytest.raises(ValidationError):
        spec.nnodes = 3  # type: ignore[misc]
    with pytest.raises(ValidationError, match="bogus"):
        GrpoSpec.model_validate({**spec.model_dump(by_alias=True), "bogus": 1})


# --- models --------------------------------------------------------------------------------------


def test_model_table_lookup() -> None:
    arch = table_facts("Qwen/Qwen2.5-32B-Instruct").arch
    assert (
        arch.num_attention_heads,
        arch.num_key_value_heads,
        arch.hidden_size,
        arch.num_hidden_layers,
        arch.intermediate_size,
        arch.vocab_size,
    ) == (40, 8, 5120, 64, 27648, 152064)
    # Any case, as a user might type the id (the Hub's ids are case-insensitive).
    assert replace(table_facts("qwen/qwen2.5-32b-instruct").arch, name=arch.name) == arch
    with pytest.raises(KeyError):
        table_facts("my-org/my-finetune")


def test_default_tp_follows_the_model_heads() -> None:
    # Qwen2.5-7B has 28 heads and 4 KV heads: vLLM cannot shard them over the tutorial's 8.
    spec = _default("a4", model=table_facts("Qwen/Qwen2.5-7B-Instruct"))
    assert spec.rollout_tensor_parallel_size == 4
    assert spec.model_path == "/data/Qwen2.5-7B-Instruct"


# --- preflight -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("profile", "mode"), STACKS)
def test_tutorial_defaults_pass_preflight(profile: str, mode: Mode) -> None:
    _preflight(_default(profile, mode), profile)


A4_16 = "16 GPUs (2 nodes x 8)"


# The command form of a job-field fix (training/grpo_spec.py set_command).
SET = "pulumi config set --path verl-gke:job."


@pytest.mark.parametrize(
    ("profile", "overrides", "setting", "fix"),
    [
        # train_batch_size x n must split over the GPUs (verl validate_config).
        ("a4x", {"trainBatchSize": 255}, "trainBatchSize = 255", SET + "trainBatchSize 254"),
        # train_batch_size >= ppo_mini_batch_size (ActorConfig.validate).
        ("a4", {"trainBatchSize": 128}, "ppoMiniBatchSize = 256", SET + "ppoMiniBatchSize 128"),
        # ppo_mini_batch_size x n must split over the GPUs (FSDP worker normalisation).
        ("a4x", {"ppoMiniBatchSize": 63}, "ppoMiniBatchSize = 63", SET + "ppoMiniBatchSize 64"),
        # The per-GPU share of a mini-batch must be whole micro-batches.
        (
            "a4x",
            {"ppoMicroBatchSizePerGpu": 12},
            "ppoMicroBatchSizePerGpu = 12",
            f"{SET}ppoMicroBatchSizePerGpu 8 (a divisor of 32), or {SET}ppoMiniBatchSize 72",
        ),
        # Rollout TP divides the GPUs per node and the GPU count.
        (
            "a4",
            {"rolloutTensorParallelSize": 3},
            "rolloutTensorParallelSize = 3",
            SET + "rolloutTensorParallelSize 4",
        ),
        (
            "a4",
            {"rolloutTensorParallelSize": 16},
            "rolloutTensorParallelSize = 16",
            SET + "rolloutTensorParallelSize 8",
        ),
        # Single values.
        ("a4", {"gpuMemoryUtilization": 0}, "gpuMemoryUtilization = 0.0", "Utilization 0.5"),
        ("a4", {"gpuMemoryUtilization": 1}, "gpuMemoryUtilization = 1.0", "Utilization 0.5"),
        ("a4", {"saveFreq": 0}, "saveFreq = 0", SET + "saveFreq 10"),
        ("a4", {"saveFreq": -1}, "saveFreq = -1", SET + "saveFreq 10"),
        (
            "a4",
            {"defaultLocalDir": "checkpoints"},
            "defaultLocalDir = checkpoints",
            SET + "defaultLocalDir /checkpoints/grpo-qwen2.5-32b-instruct-a4",
        ),
        (
            "a4",
            {"defaultLocalDir": "/tmp/ckpt"},
            "defaultLocalDir = /tmp/ckpt",
            SET + "defaultLocalDir /checkpoints/grpo-qwen2.5-32b-instruct-a4",
        ),
        (
            "a4",
            {"defaultLocalDir": "/data/../tmp/ckpt"},
            "defaultLocalDir = /data/../tmp/ckpt",
            SET + "defaultLocalDir /checkpoints/",
        ),
        (
            "a4",
            {"trainFiles": "/tmp/train.parquet"},
            "trainFiles = /tmp/train.parquet",
            SET + "trainFiles /data/gsm8k/train.parquet",
        ),
    ],
)
def test_each_rule_rejects_a_bad_value_with_its_fix(
    profile: str, overrides: dict[str, Any], setting: str, fix: str
) -> None:
    problems = _problems(apply_overrides(_default(profile), overrides), profile)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"verl-gke:job.{setting}: ")
    assert fix in problems[0].split(". Fix: ", 1)[1]


def test_model_heads_must_split_over_the_rollout_tp() -> None:
    # Qwen2.5-7B: 28 heads, 4 KV heads; vLLM shards query heads over TP ranks.
    qwen_7b = table_facts("Qwen/Qwen2.5-7B-Instruct").arch
    spec = apply_overrides(_default(), {"rolloutTensorParallelSize": 8})
    (problem,) = _problems(spec, model=qwen_7b)
    assert problem.startswith("verl-gke:job.rolloutTensorParallelSize = 8: ")
    assert "verl-gke:model's (Qwen/Qwen2.5-7B-Instruct) 28 attention heads" in problem
    assert problem.endswith(f"Fix: {SET}rolloutTensorParallelSize 4")


def test_kv_heads_must_divide_or_be_divided_by_tp() -> None:
    # 48 query heads split over 8, but 6 KV heads neither split over 8 nor replicate evenly.
    (problem,) = _problems(_default(), model=_heads(48, 6))
    assert problem.startswith("verl-gke:job.rolloutTensorParallelSize = 8: ")
    assert "6 KV heads" in problem
    assert problem.endswith(f"Fix: {SET}rolloutTensorParallelSize 2")
    _preflight(_default(), model=_heads(48, 8))


def test_kl_in_reward_also_satisfies_grpo() -> None:
    _preflight(apply_overrides(_default(), {"useKlLoss": False, "useKlInReward": True}))


def test_no_valid_mini_batch_below_train_batch_suggests_raising_both() -> None:
    # 16 GPUs, n=2, micro 32: a valid mini-batch is a multiple of 256, above trainBatchSize 128.
    overrides = {"trainBatchSize": 128, "rolloutN": 2, "ppoMicroBatchSizePerGpu": 32}
    (problem,) = _problems(apply_overrides(_default(), {**overrides, "ppoMiniBatchSize": 127}))
    assert problem.startswith("verl-gke:job.ppoMiniBatchSize = 127: ")
    assert problem.endswith(
        f"Fix: no mini-batch <= trainBatchSize works with ppoMicroBatchSizePerGpu = 32: "
        f"{SET}trainBatchSize 256, then {SET}ppoMiniBatchSize 256"
    )
    # With a mini-batch that splits over the GPUs, only the micro-batch is wrong: 128 x 2 / 16.
    (problem,) = _problems(apply_overrides(_default(), {**overrides, "ppoMiniBatchSize": 128}))
    assert problem.startswith("verl-gke:job.ppoMicroBatchSizePerGpu = 32: ")
    assert problem.endswith(
        "Fix: pulumi config set --path verl-gke:job.ppoMicroBatchSizePerGpu 16 (a divisor of 16)"
    )


def test_every_failed_rule_is_listed_in_one_error() -> None:
    spec = apply_overrides(
        _default(),
        {
            "trainBatchSize": 99,
            "ppoMiniBatchSize": 99,
            "rolloutTensorParallelSize": 3,
            "gpuMemoryUtilization": 1.5,
            "saveFreq": -1,
            "defaultLocalDir": "/tmp/x",
        },
    )
    problems = _problems(spec)
    settings = [p.split(" = ", 1)[0].removeprefix("verl-gke:job.") for p in problems]
    assert settings == [
        "trainBatchSize",
        "ppoMiniBatchSize",
        "rolloutTensorParallelSize",
        "gpuMemoryUtilization",
        "saveFreq",
        "defaultLocalDir",
    ]
    assert all(". Fix: " in p for p in problems)
