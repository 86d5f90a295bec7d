"""The GRPO job as the real program registers it, per stack and mode."""

from __future__ import annotations

import importlib.util
import itertools
import re
import shlex
from pathlib import Path

import pytest

from payloads.export import supervise
from planning.offline_engine import FAKE_CA, FAKE_ENDPOINT, UNKNOWN_OUTPUT
from tests.program import COMBINATIONS, plan

RAY_JOB = "pulumi-python:dynamic/jobs:RayJob"

# The tutorial's numbers that decide the run's shape (seed for A4X, tutorial for A4/A3U).
SHAPE = {
    "a4x": {"tp": "4", "gpus": "4", "nodes": "4", "mini": "64"},
    "a4": {"tp": "8", "gpus": "8", "nodes": "2", "mini": "256"},
    "a3u": {"tp": "8", "gpus": "8", "nodes": "2", "mini": "256"},
}


def overrides(entrypoint: str) -> dict[str, str]:
    words = shlex.split(entrypoint)
    # The runner takes the training command after `--` (test_after_up.py).
    assert words[:2] == ["python3", "run_grpo.py"]
    words = words[words.index("--") + 1 :]
    assert words[:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    return dict(word.split("=", 1) for word in words[3:])


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_job_entrypoint_has_the_tutorial_shape(stack: str, mode: str) -> None:
    job = plan(stack, mode).one(RAY_JOB, "grpo-job")
    args = overrides(job.inputs["entrypoint"])
    shape = SHAPE[stack]
    assert args["algorithm.adv_estimator"] == "grpo"
    assert args["actor_rollout_ref.rollout.tensor_model_parallel_size"] == shape["tp"]
    assert args["trainer.n_gpus_per_node"] == shape["gpus"]
    assert args["trainer.nnodes"] == shape["nodes"]
    assert args["actor_rollout_ref.actor.ppo_mini_batch_size"] == shape["mini"]
    assert args["data.train_files"] == "/data/gsm8k/train.parquet"
    assert args["actor_rollout_ref.model.path"] == "/data/Qwen2.5-32B-Instruct"
    # Checkpoints land in the bucket, one folder per run of the experiment (world size in the
    # name), and are actually written.
    world = int(shape["gpus"]) * int(shape["nodes"])
    folder = args["trainer.default_local_dir"]
    assert re.fullmatch(
        rf"/checkpoints/grpo-qwen2.5-32b-instruct-{stack}/w{world}-[0-9a-f]{{8}}", folder
    )
    assert int(args["trainer.save_freq"]) > 0


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_job_runtime_env_per_profile_and_mode(stack: str, mode: str) -> None:
    env = plan(stack, mode).one(RAY_JOB, "grpo-job").inputs["runtime_env"]["env_vars"]
    # verl from the Ray pods' node-local copy, not through GCS FUSE.
    assert env["PYTHONPATH"] == "/opt/verl-node-local"
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["HF_HOME"] == "/data/huggingface_cache"
    assert env["NCCL_DEBUG"] == "INFO"
    expected = {
        ("a4x", "standard"): ("NCCL_ENV_PLUGIN", "gcp"),
        ("a4", "standard"): (
            "NCCL_TUNER_CONFIG_PATH",
            "/usr/local/gib/configs/tuner_config_a4.txtpb",
        ),
        ("a3u", "standard"): (
            "NCCL_TUNER_CONFIG_PATH",
            "/usr/local/gib/configs/tuner_config_a3u.txtpb",
        ),
        ("a4", "autopilot"): ("NCCL_CONF_FILE", "/usr/local/gib/configs/nccl.a4.conf"),
        ("a3u", "autopilot"): ("NCCL_CONF_FILE", "/usr/local/gib/configs/nccl.a3u.conf"),
    }[(stack, mode)]
    assert env[expected[0]] == expected[1]


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_job_reaches_dashboard_through_the_api_server_proxy(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    job = result.one(RAY_JOB, "grpo-job")
    dashboard = job.inputs["dashboard"]
    assert dashboard["kube_api_endpoint"] == FAKE_ENDPOINT
    assert dashboard["cluster_ca_certificate"] == FAKE_CA
    assert dashboard["namespace"] == "default"
    assert dashboard["service"] == result.outputs["rayHeadService"]
    assert job.inputs["checkpoint_root"] == result.outputs["checkpointRoot"]
    assert re.fullmatch(
        rf"gs://acme-ml-prod-verl-{stack}/verl/checkpoints/grpo-qwen2.5-32b-instruct-{stack}"
        r"/w\d+-[0-9a-f]{8}",
        result.outputs["checkpointRoot"],
    )
    assert job.inputs["submission_id_prefix"] == f"{stack}-grpo"
    assert job.inputs["wait_for"] == "first_step"


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_job_waits_for_ray_cluster_and_data_but_hf_token_never_reaches_it(
    stack: str, mode: str
) -> None:
    result = plan(stack, mode)
    job = result.one(RAY_JOB, "grpo-job")
    assert result.depends_on(job, result.one("kubernetes:ray.io/v1:RayCluster"))
    assert result.depends_on(job, result.one("kubernetes:batch/v1:Job", "data-prep-job"))
    assert "hf_test_token_value" not in repr(job.inputs)


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_job_outputs_exported(stack: str, mode: str) -> None:
    outputs = plan(stack, mode).outputs
    for key in (
        "jobSubmissionId",
        "jobStatus",
        "jobMessage",
        "jobDashboardHint",
        "checkpoints",
        "latestCheckpoint",
        "latestCheckpointStep",
        "jobAttempts",
        "jobRestartsUsed",
    ):
        assert outputs[key] == UNKNOWN_OUTPUT, key


def test_job_overrides_from_stack_config_reach_the_entrypoint() -> None:
    result = plan("a3u", "standard", **{"verl-gke__job": '{"ppoMicroBatchSizePerGpu": 4}'})
    args = overrides(result.one(RAY_JOB, "grpo-job").inputs["entrypoint"])
    assert args["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == "4"


def test_job_wait_setting() -> None:
    result = plan("a4x", **{"verl-gke__jobWait": "finished"})
    assert result.one(RAY_JOB, "grpo-job").inputs["wait_for"] == "finished"


def test_more_nodes_scale_the_job() -> None:
    args = overrides(
        plan("a4x", **{"verl-gke__gpuNodes": "8"}).one(RAY_JOB, "grpo-job").inputs["entrypoint"]
    )
    assert args["trainer.nnodes"] == "8"


FABRIC_THRESHOLDS = {"a4x": "320", "a4": "160", "a3u": "160"}


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_fabric_check_runs_first_with_the_training_nccl_env(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    fabric = result.one(RAY_JOB, "grpo-fabric-check")
    grpo = result.one(RAY_JOB, "grpo-job")
    assert shlex.split(fabric.inputs["entrypoint"]) == [
        "python",
        "fabric_check.py",
        "--min-busbw-gbps",
        FABRIC_THRESHOLDS[stack],
    ]
    runtime_env = fabric.inputs["runtime_env"]
    assert runtime_env["working_dir"] == "payloads/fabric"
    env = runtime_env["env_vars"]
    assert env["NCCL_DEBUG"] == "INFO"
    training_env = grpo.inputs["runtime_env"]["env_vars"]
    for key, value in env.items():
        if key.startswith("NCCL_") and key != "NCCL_DEBUG":
            assert training_env[key] == value, key
    assert len(env["VERL_GKE_FABRIC_CHECK_SHA256"]) == 64
    assert fabric.inputs["wait_for"] == "finished"
    assert "wait" not in fabric.inputs  # the deprecated boolean (jobs/job_inputs.py RayJobArgs)
    assert fabric.inputs["result_tag"] == "fabric"
    assert fabric.inputs.get("checkpoint_root") is None
    # GRPO is submitted only after the check passed; the check needs the RayCluster, runs once
    # per RayCluster and is not re-run by later changes while GRPO holds the GPUs.
    ray_cluster = result.one("kubernetes:ray.io/v1:RayCluster")
    assert result.depends_on(grpo, fabric)
    assert result.depends_on(fabric, ray_cluster)
    assert fabric.replace_with == {ray_cluster.urn}
    assert fabric.ignore_changes == {"entrypoint", "runtime_env"}
    assert grpo.ignore_changes == frozenset()
    # A new RayCluster knows nothing of the old job: the job is submitted there again.
    assert grpo.replace_with == {ray_cluster.urn}
    # Destroy stops both jobs before it removes the GPU nodes they run on.
    for gpu_pool in result.of_type("gcp:container/nodePool:NodePool"):
        if gpu_pool.name == "gpu-pool":
            assert result.depends_on(grpo, gpu_pool) and result.depends_on(fabric, gpu_pool)
    assert result.outputs["fabricCheckBusbwGbps"] == UNKNOWN_OUTPUT
    assert result.outputs["fabricCheckTransport"] == UNKNOWN_OUTPUT


def test_fabric_check_working_dir_holds_only_the_check() -> None:
    from planning.offline_engine import REPO_ROOT

    folder = REPO_ROOT / "payloads" / "fabric"
    files = {p.name for p in folder.iterdir() if p.name != "__pycache__"}
    assert files == {"__init__.py", "fabric_check.py"}


def test_fabric_check_can_be_turned_off() -> None:
    result = plan("a3u", **{"verl-gke__fabricCheck": "false"})
    assert [r.name for r in result.of_type(RAY_JOB)] == ["grpo-job"]
    assert result.outputs["fabricCheckBusbwGbps"] is None


def test_fabric_threshold_setting() -> None:
    fabric = plan("a4", **{"verl-gke__fabricMinBusbwGbps": "250"}).one(RAY_JOB, "grpo-fabric-check")
    assert fabric.inputs["entrypoint"].endswith("--min-busbw-gbps 250")


def test_memory_breakdown_is_reported_per_stack() -> None:
    messages = plan("a3u").messages
    breakdown = next(m for m in messages if "GRPO memory per GPU" in m)
    # One run block: the model (size, layers, where its facts came from), then the memory fit.
    assert breakdown.startswith("Model: Qwen/Qwen2.5-32B-Instruct (qwen2), 32.76 B parameters")
    assert "  facts from: committed table" in breakdown
    assert "2 x 8 GPUs of 139.8 GiB" in breakdown
    for phase in ("rollout:", "log_prob:", "actor_update:", "optimizer_step:"):
        assert phase in breakdown


def test_memory_that_cannot_fit_fails_before_any_resource() -> None:
    from training.grpo_spec import GrpoPreflightError

    with pytest.raises(GrpoPreflightError) as caught:
        plan(
            "a3u",
            **{
                "verl-gke__job": (
                    '{"ppoMicroBatchSizePerGpu": 32, "enableGradientCheckpointing": false}'
                )
            },
        )
    message = str(caught.value)
    assert "phase 'actor_update'" in message and "139.8 GiB" in message
    assert "verl-gke:job.enableGradientCheckpointing=True" in message


def test_memory_within_ten_percent_warns() -> None:
    # 0.72 x 139.8 GiB of vLLM reservation plus the trainer state kept during rollout lands the
    # rollout phase between 90 % and 100 % of an H200.
    result = plan("a3u", **{"verl-gke__job": '{"gpuMemoryUtilization": 0.72}'})
    assert any("GiB" in notice and "%" in notice for notice in result.notices), result.notices


def test_model_path_is_derived_from_the_model_setting() -> None:
    from training.grpo_spec import GrpoPreflightError

    with pytest.raises(GrpoPreflightError) as caught:
        plan("a3u", **{"verl-gke__job": '{"modelPath": "/data/Qwen2.5-14B-Instruct"}'})
    message = str(caught.value)
    assert "verl-gke:job.modelPath is not a setting" in message
    assert "set verl-gke:model instead" in message


def test_a_different_model_moves_both_the_download_and_the_job() -> None:
    result = plan("a3u", **{"verl-gke__model": "Qwen/Qwen2.5-14B-Instruct"})
    args = overrides(result.one(RAY_JOB, "grpo-job").inputs["entrypoint"])
    assert args["actor_rollout_ref.model.path"] == "/data/Qwen2.5-14B-Instruct"
    prep = result.one("kubernetes:batch/v1:Job", "data-prep-job").inputs
    container = prep["spec"]["template"]["spec"]["containers"][0]
    command = " ".join([*container.get("command", []), *container.get("args", [])])
    assert "--model Qwen/Qwen2.5-14B-Instruct" in command
    assert "--model-folder Qwen2.5-14B-Instruct" in command


# Not where data prep rewrites, and not on the metadata-cached data mount at all.
@pytest.mark.parametrize(
    "folder", ["/data/verl/run1", "/data/gsm8k/ckpt", "/data/verl", "/data/runs/exp1"]
)
def test_checkpoints_only_on_the_checkpoint_mount(folder: str) -> None:
    from training.grpo_spec import GrpoPreflightError

    with pytest.raises(GrpoPreflightError) as caught:
        plan("a4x", **{"verl-gke__job": f'{{"defaultLocalDir": "{folder}"}}'})
    assert f"verl-gke:job.defaultLocalDir = '{folder}'" in str(caught.value)


def test_checkpoints_in_another_folder_of_the_checkpoint_mount_are_fine() -> None:
    result = plan("a4x", **{"verl-gke__job": '{"defaultLocalDir": "/checkpoints/exp1"}'})
    # The checkpoint mount is the bucket's verl/checkpoints folder.
    assert result.outputs["checkpointRoot"] == "gs://acme-ml-prod-verl-a4x/verl/checkpoints/exp1"


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_ray_waits_for_the_runners_own_stop_before_it_kills(stack: str, mode: str) -> None:
    # Ray's job stop: SIGTERM to the entrypoint and its descendants, SIGKILL after
    # RAY_JOB_STOP_WAIT_TIME_S (default 3 s) read in the JobSupervisor actor, whose environment
    # holds the job's runtime_env env_vars (dashboard/modules/job/job_supervisor.py,
    # job_manager.py _get_supervisor_runtime_env). The runner stops the trainer with its own grace
    # and then records the attempt, so Ray must wait longer than that grace.
    spec = importlib.util.find_spec("ray.dashboard.modules.job.job_supervisor")
    assert spec and spec.origin
    assert '"RAY_JOB_STOP_WAIT_TIME_S"' in Path(spec.origin).read_text()
    env = plan(stack, mode).one(RAY_JOB, "grpo-job").inputs["runtime_env"]["env_vars"]
    grace = supervise.Policy(0, 0.0, 0.0).stop_grace_s
    assert int(env["RAY_JOB_STOP_WAIT_TIME_S"]) > grace


def test_the_hang_watchdog_waits_for_a_saving_step_as_long_as_the_save_takes() -> None:
    job = plan("a3u", "standard").one(RAY_JOB, "grpo-job")
    runner = shlex.split(job.inputs["entrypoint"].split(" -- ", 1)[0])
    option = dict(itertools.pairwise(runner))
    args = dict(a.split("=", 1) for a in shlex.split(job.inputs["entrypoint"]) if "=" in a)
    assert option["--save-freq"] == args["trainer.save_freq"]
    # GSM8K's 7,473 train rows in batches of 256 (drop_last), 2 epochs: verl's step count.
    assert int(option["--total-steps"]) == 7473 // int(args["data.train_batch_size"]) * int(
        args["trainer.total_epochs"]
    )
    # Qwen2.5-32B: 12 B per parameter (fp32 weights + AdamW moments) over 2 nodes, each node's
    # share written at the assumed rate.
    per_node = 12 * 32.76e9 / int(args["trainer.nnodes"])
    assert float(option["--save-allowance-s"]) >= per_node / (100 * 2**20) - 60
