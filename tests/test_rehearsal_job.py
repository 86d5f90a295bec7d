"""The rehearsal step of the program (components/rehearsal.py, manifests/rehearsal.py): verl's own
code on the GRPO job's exact command, in the training image, after data prep; and where GPU nodes
bill from their creation (flex-start, Spot) the GPU pool and the RayCluster wait for it.

The Job's objects are validated with the others (tests/test_k8s_schemas.py, test_k8s_objects.py);
here: what it runs, where, with which verl, and what waits for it."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from typing import Any

import pytest

from config import bucket_layout, rehearsal_scripts, run_inputs
from config.image_streaming import registry_image
from config.profiles import PROFILES
from config.settings import load_settings
from manifests import data_prep
from manifests import rehearsal as manifests
from planning.offline_engine import PlanResult, RecordedResource
from tests.program import COMBINATIONS, REAL, plan
from training.assembly import REHEARSAL_RECORD_ENV, training_job
from training.grpo_preflight import dataset_limits

JOB = "kubernetes:batch/v1:Job"
RAY_CLUSTER = "kubernetes:ray.io/v1:RayCluster"
GPU_POOL = "gcp:container/nodePool:NodePool"
VERDICT = "pulumi-python:dynamic/jobs:RehearsalVerdict"
NO_RESERVATION = ("verl-gke:reservation",)


def rehearsal(result: PlanResult) -> RecordedResource:
    return result.one(JOB, manifests.JOB_NAME)


def pod(job: RecordedResource) -> dict[str, Any]:
    return job.inputs["spec"]["template"]["spec"]


def grpo_job(result: PlanResult) -> RecordedResource:
    (job,) = [
        r
        for r in result.of_type("pulumi-python:dynamic/jobs:RayJob")
        if "verl.trainer.main_ppo" in r.inputs["entrypoint"]
    ]
    return job


def trainer_overrides(entrypoint: str) -> list[str]:
    """The key=value arguments after `python3 -m verl.trainer.main_ppo` in the runner's command."""
    words = shlex.split(entrypoint)
    start = words.index("verl.trainer.main_ppo")
    assert words[start - 2 : start] == ["python3", "-m"]
    return words[start + 1 :]


def head_pod(result: PlanResult) -> dict[str, Any]:
    return result.one(RAY_CLUSTER).inputs["spec"]["headGroupSpec"]["template"]["spec"]


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_it_rehearses_the_jobs_exact_command_in_the_training_image(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    spec = pod(rehearsal(result))
    (container,) = spec["containers"]
    grpo = grpo_job(result)
    # The image as the Ray head gets it (the same image-streaming rewrite).
    head = head_pod(result)["containers"][0]
    assert container["image"] == head["image"]
    command = container["command"]
    record = command[command.index("--out") + 1]
    assert command[:5] == [
        "python3",
        f"{manifests.SCRIPT_DIR}/{manifests.WRAPPER_KEY}",
        "--script",
        f"{manifests.SCRIPT_DIR}/{manifests.SCRIPT_KEY}",
        "--out",
    ]
    overrides = command[command.index("--") + 1 :]
    assert overrides == trainer_overrides(grpo.inputs["entrypoint"])
    assert any(o.startswith("data.train_files=") for o in overrides)
    # The runner reads the record the rehearsal writes.
    assert grpo.inputs["runtime_env"]["env_vars"][REHEARSAL_RECORD_ENV] == record
    assert record.startswith(f"{bucket_layout.REHEARSALS_ROOT}/{stack}/")
    assert {"name": "training-bucket-vol", "mountPath": bucket_layout.DATA_MOUNT} in container[
        "volumeMounts"
    ]
    # The checkpoints read only: a trainer.resume_from_path there is checked before the GPUs.
    checkpoints = {
        "name": "training-checkpoints-vol",
        "mountPath": bucket_layout.CHECKPOINT_MOUNT,
        "readOnly": True,
    }
    assert checkpoints in container["volumeMounts"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    claim = volumes["training-checkpoints-vol"]["persistentVolumeClaim"]["claimName"]
    assert claim == "training-checkpoints-pvc"


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_it_runs_where_the_ray_head_runs_with_verl_as_the_ray_pods_get_it(
    stack: str, mode: str
) -> None:
    result = plan(stack, mode)
    spec, head = pod(rehearsal(result)), head_pod(result)
    # The CPU nodes data prep runs on; on A4X (an arm64-only image, an x86 CPU pool) a GPU node
    # as the head, tolerating its taints.
    where = head if PROFILES[stack].ray_head_on_gpu_nodes else pod(result.one(JOB, "data-prep-job"))
    assert spec["nodeSelector"] == where["nodeSelector"]
    assert spec.get("tolerations") == where.get("tolerations")
    # verlSource=checkout: the head's copy of data prep's checkout of verlRef, on PYTHONPATH.
    copy = [c for c in head["initContainers"] if c["name"] == "verl-node-local-copy"]
    assert [(c["image"], c["args"]) for c in spec["initContainers"]] == [
        (c["image"], c["args"]) for c in copy
    ]
    env = {e["name"]: e["value"] for e in spec["containers"][0]["env"]}
    python_path = grpo_job(result).inputs["runtime_env"]["env_vars"]["PYTHONPATH"]
    assert env["PYTHONPATH"] == python_path
    assert env["HF_HUB_OFFLINE"] == "1"


def test_the_verl_copy_is_sized_and_hardened_as_the_jobs_own_container() -> None:
    # checkov reads a Job's init containers (CKV_K8S_10-13 requests and limits; 20, 28, 30, 37
    # privilege escalation and capabilities): the copy asks for its own CPU and memory and runs
    # with the main container's security context.
    spec = pod(rehearsal(plan("a3u", "standard")))
    main = spec["containers"][0]
    (copy,) = spec["initContainers"]
    assert copy["securityContext"] == main["securityContext"]
    assert copy["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    resources = copy["resources"]
    assert resources["requests"] == resources["limits"]
    assert {"cpu", "memory"} <= set(resources["requests"])


def test_with_verl_from_the_image_it_imports_the_images_verl() -> None:
    result = plan("a3u", "standard", **{"verl-gke__verlSource": "image"})
    spec = pod(rehearsal(result))
    assert "initContainers" not in spec
    env = {e["name"] for e in spec["containers"][0]["env"]}
    assert "PYTHONPATH" not in env
    assert "PYTHONPATH" not in grpo_job(result).inputs["runtime_env"]["env_vars"]


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_it_runs_after_data_prep_and_training_after_it(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    job = rehearsal(result)
    # Data prep's inputs Job, not its weights Job: the rehearsal reads the model's files but
    # its weights (--model-files). The weights Job starts after the verdict (a failed rehearsal
    # downloads nothing; on Autopilot the rehearsal's pod takes the inputs pod's node), except
    # on A4X, whose rehearsal waits for a GPU node: there after the inputs Job.
    weights = result.one(JOB, "model-weights-job")
    inputs = result.one(JOB, "data-prep-job")
    assert result.depends_on(job, inputs) and not result.depends_on(job, weights)
    assert result.depends_on(weights, inputs)
    verdict = result.one(VERDICT, "rehearsal-verdict")
    assert result.depends_on(weights, verdict) is (stack != "a4x")
    command = pod(job)["containers"][0]["command"]
    settings = load_settings(stack, {**REAL, "verl-gke:mode": mode}, offline=False).settings
    files = bucket_layout.model_files_path(settings.model, settings.model_revision)
    assert command[command.index("--model-files") + 1] == files
    assert result.depends_on(grpo_job(result), job)
    assert result.depends_on(grpo_job(result), weights)
    # On a reservation (billed anyway) the GPU nodes and the RayCluster do not wait for it.
    assert not result.depends_on(result.one(RAY_CLUSTER), job)
    if mode == "standard":
        assert not result.depends_on(result.one(GPU_POOL, "gpu-pool"), job)


@pytest.mark.parametrize(
    ("stack", "mode", "capacity"),
    [
        ("a4", "standard", "flexStart"),
        ("a3u", "standard", "spot"),
        ("a4", "autopilot", "flexStart"),
        ("a3u", "autopilot", "spot"),
    ],
)
def test_outside_a_reservation_no_gpu_node_exists_before_it_succeeded(
    stack: str, mode: str, capacity: str
) -> None:
    result = plan(stack, mode, unset=NO_RESERVATION, **{"verl-gke__capacity": capacity})
    job = rehearsal(result)
    assert result.depends_on(result.one(RAY_CLUSTER), job)
    if mode == "standard":
        assert result.depends_on(result.one(GPU_POOL, "gpu-pool"), job)
    # Nothing that brings GPU nodes is created before it: the ProvisioningRequest (Standard
    # flex-start) follows the pool.
    for request in result.of_type("kubernetes:autoscaling.x-k8s.io/v1:ProvisioningRequest"):
        assert result.depends_on(request, job)


def verdict(result: PlanResult) -> RecordedResource:
    return result.one(VERDICT, "rehearsal-verdict")


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_the_verdict_reads_the_record_of_this_job_and_training_waits_for_it(
    stack: str, mode: str
) -> None:
    result = plan(stack, mode)
    judged = verdict(result)
    assert result.depends_on(judged, rehearsal(result))
    assert result.depends_on(grpo_job(result), judged)
    record = grpo_job(result).inputs["runtime_env"]["env_vars"][REHEARSAL_RECORD_ENV]
    bucket = result.one("gcp:storage/bucket:Bucket").inputs["name"]
    assert judged.inputs["record_url"] == bucket_layout.bucket_url(bucket, record)
    assert "job-name=rehearsal-job" in judged.inputs["logs_hint"]
    assert result.outputs["rehearsalRecord"] == judged.inputs["record_url"]


def test_outside_a_reservation_the_gpu_nodes_wait_for_the_verdict() -> None:
    result = plan("a4", "standard", unset=NO_RESERVATION, **{"verl-gke__capacity": "spot"})
    assert result.depends_on(result.one(GPU_POOL, "gpu-pool"), verdict(result))
    assert result.depends_on(result.one(RAY_CLUSTER), verdict(result))


@pytest.mark.parametrize("stack", ["a3u", "a4x"])
def test_the_reward_is_loaded_by_the_rehearsal_in_the_training_image(stack: str) -> None:
    """Data prep no longer imports the reward (it did only when its image string equalled the
    Ray pods'): the rehearsal gets the reward override and runs verlImage on every stack."""
    settings = load_settings(
        stack, {**REAL, "verl-gke:reward": run_inputs.REWARD_EXAMPLE}, offline=False
    ).settings
    job = training_job(settings)
    files = {manifests.SCRIPT_KEY: "", manifests.WRAPPER_KEY: ""}
    body = manifests.rehearsal_job(
        settings, job.rehearsal_record, job.hydra_overrides, files, "cpu-pool", context={}
    )
    container = body["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == registry_image(settings.verl_image, settings.image_pull)
    reward = run_inputs.reward_of(settings)
    assert reward is not None
    assert any(a.endswith(f".path={reward.mounted_path}") for a in container["command"])
    assert "--reward-import" not in data_prep.command(settings, dataset_limits(job.spec))


def test_in_pulumi_up_the_rehearsals_problems_name_the_stack_settings() -> None:
    """verl_scripts/rehearsal.py names a problem by the Hydra key and offers an extraOverrides
    append unless --context maps the key to its setting: the Job passes the offline plan's map,
    so `trainer.total_training_steps=100` in extraOverrides[0] is fixed there, not appended."""
    job = '{"extraOverrides": ["trainer.total_training_steps=100"]}'
    result = plan("a3u", "standard", **{"verl-gke__job": job})
    command = pod(rehearsal(result))["containers"][0]["command"]
    assert command.index("--context") < command.index("--")
    context = json.loads(command[command.index("--context") + 1])
    settings = context["settings"]
    assert settings["trainer.total_training_steps"] == "verl-gke:job.extraOverrides[0]"
    assert settings["data.max_response_length"] == "verl-gke:job.maxResponseLength"
    assert settings["actor_rollout_ref.model.path"] == "verl-gke:model"
    assert context["append"] == "verl-gke:job.extraOverrides[1]"
    assert context["model"] == load_settings("a3u", dict(REAL), offline=False).settings.model


def test_two_stacks_and_two_commands_get_their_own_records() -> None:
    base = load_settings("a4", {**REAL}, offline=False).settings
    other_stack = load_settings("a3u", {**REAL}, offline=False).settings
    longer = load_settings(
        "a4", {**REAL, "verl-gke:job": '{"totalEpochs": 3}'}, offline=False
    ).settings
    records = {training_job(s).rehearsal_record for s in (base, other_stack, longer)}
    assert len(records) == 3
    assert training_job(base).rehearsal_record == training_job(base).rehearsal_record


def test_a_changed_rehearsal_script_gets_a_new_record(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Ray head's data mount caches a file's metadata: a project upgrade whose rehearsal
    answers otherwise must write a new path, not the same command's old one."""
    settings = load_settings("a4", {**REAL}, offline=False).settings
    same = training_job(settings).rehearsal_record
    files = rehearsal_scripts.read_scripts()
    changed = {**files, manifests.SCRIPT_KEY: files[manifests.SCRIPT_KEY] + "\n# changed\n"}
    monkeypatch.setattr(rehearsal_scripts, "read_scripts", lambda: changed)
    assert training_job(settings).rehearsal_record != same
    monkeypatch.setattr(rehearsal_scripts, "read_scripts", lambda: dict(files))
    assert training_job(settings).rehearsal_record == same


@pytest.mark.parametrize("value", ["", "a/b", ".."])
def test_a_record_path_needs_one_folder_name(value: str) -> None:
    with pytest.raises(ValueError, match="one folder name"):
        bucket_layout.rehearsal_record_path(value, "exp", "0" * 64)


def test_a_missing_script_names_the_file_and_the_fix(tmp_path: Any) -> None:
    with pytest.raises(rehearsal_scripts.MissingScriptError, match="git checkout -- "):
        rehearsal_scripts.read_scripts(script=tmp_path / "rehearsal.py")


def test_the_configmap_carries_every_module_of_the_steps_and_runs_flat(tmp_path: Any) -> None:
    """The pod mounts the ConfigMap's keys flat at /scripts: the entry imports its step modules
    by plain name from there, and a changed step module is a new record path."""
    files = rehearsal_scripts.read_scripts()
    steps = sorted(p.name for p in rehearsal_scripts.SCRIPT_FILE.parent.glob("rehearsal_*.py"))
    assert steps and set(files) == {manifests.SCRIPT_KEY, manifests.WRAPPER_KEY, *steps}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    shown = subprocess.run(
        [sys.executable, str(tmp_path / manifests.SCRIPT_KEY), "--help"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert shown.returncode == 0 and "--model-files" in shown.stdout, shown.stderr
    settings = load_settings("a4", {**REAL}, offline=False).settings
    before = training_job(settings).rehearsal_record
    changed = {**files, steps[0]: files[steps[0]] + "\n# changed\n"}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rehearsal_scripts, "read_scripts", lambda: changed)
        assert training_job(settings).rehearsal_record != before


def test_the_job_is_stopped_when_pulumi_up_stops_waiting_for_it() -> None:
    # A pod stuck (a mount that never comes up, the verl copy's wait for data prep's marker)
    # would hold its CPU node after `pulumi up` gave up: batch/v1 activeDeadlineSeconds ends it
    # at the same time as the Job's Pulumi wait.
    job = rehearsal(plan("a3u", "standard"))
    deadline = job.inputs["spec"]["activeDeadlineSeconds"]
    assert isinstance(deadline, int) and deadline > 0
    waits = {job.custom_timeouts.get(op) for op in ("create", "update")}
    assert waits == {f"{deadline // 60}m"} and deadline % 60 == 0
