"""After `pulumi up` as the real program registers it: the GRPO job's wait mode, the
outputs every stack exports, the head's log forwarder and its Logs Explorer link, the model
export step, and the W&B key's path to the Ray pods."""

from __future__ import annotations

import json
import shlex
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

from config.settings import SettingsError
from manifests import log_forwarding
from planning import offline_engine
from planning.offline_engine import UNKNOWN_OUTPUT, run_stack
from tests.program import COMBINATIONS, plan
from training.grpo_spec import GrpoPreflightError

RAY_JOB = "pulumi-python:dynamic/jobs:RayJob"
RAY_CLUSTER = "kubernetes:ray.io/v1:RayCluster"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
SECRET = "kubernetes:core/v1:Secret"
WANDB_KEY = "wandb_test_key_0123456789"


def head_pod(result: Any) -> dict[str, Any]:
    return result.one(RAY_CLUSTER).inputs["spec"]["headGroupSpec"]["template"]["spec"]


def worker_pod(result: Any) -> dict[str, Any]:
    (group,) = result.one(RAY_CLUSTER).inputs["spec"]["workerGroupSpecs"]
    return group["template"]["spec"]


# -- wait modes -------------------------------------------------------------------------------


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_default_grpo_job_waits_for_the_first_step_and_fabric_check_for_its_verdict(
    stack: str, mode: str
) -> None:
    result = plan(stack, mode)
    job = result.one(RAY_JOB, "grpo-job")
    assert job.inputs["wait_for"] == "first_step"
    assert "wait" not in job.inputs
    assert job.inputs["gke_cluster"] == {
        "project": "acme-ml-prod",
        "location": result.outputs["clusterLocation"],
        "name": result.outputs["clusterName"],
    }
    fabric = result.one(RAY_JOB, "grpo-fabric-check")
    assert fabric.inputs["wait_for"] == "finished"


@pytest.mark.parametrize(
    ("value", "wait_for", "legacy"),
    [
        ("running", "running", False),
        ("firstStep", "first_step", False),
        ("finished", "finished", False),
        ("true", "finished", True),
        ("false", "running", True),
    ],
)
def test_job_wait_modes_and_legacy_booleans(value: str, wait_for: str, legacy: bool) -> None:
    result = plan("a4", "standard", **{"verl-gke__jobWait": value})
    assert result.one(RAY_JOB, "grpo-job").inputs["wait_for"] == wait_for
    notices = [n for n in result.notices if "verl-gke:jobWait" in n]
    if legacy:
        mode = {"running": "running", "first_step": "firstStep", "finished": "finished"}[wait_for]
        assert notices == [
            f"verl-gke:jobWait = {value} is the old boolean form; it now reads as {mode!r}. "
            f"Modes: running, firstStep (default), finished. Fix: pulumi config set "
            f"verl-gke:jobWait {mode} -s a4"
        ]
    else:
        assert notices == []


def test_unknown_job_wait_is_refused_naming_key_and_modes() -> None:
    with pytest.raises(SettingsError) as error:
        run_stack("a4", {"verl-gke:jobWait": "firststep"}, strict=False)
    message = str(error.value)
    assert "verl-gke:jobWait = 'firststep'" in message
    assert "'running', 'firstStep' or 'finished'" in message


# -- outputs ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_after_up_outputs_on_every_stack(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    outputs = result.outputs
    # Known once the job exists (the offline engine plans a preview).
    assert outputs["jobLogTail"] == UNKNOWN_OUTPUT
    assert outputs["jobLogsUrl"] == UNKNOWN_OUTPUT
    # Known at plan time.
    assert outputs["modelExportPath"] == (
        f"gs://acme-ml-prod-verl-{stack}/models/grpo-qwen2.5-32b-instruct-{stack}"
    )
    assert outputs["clusterEndpoint"] == offline_engine.FAKE_ENDPOINT
    assert outputs["clusterCaCertificate"] == offline_engine.FAKE_CA
    assert not {"clusterEndpoint", "clusterCaCertificate", "jobLogsUrl"} & result.secret_outputs


def test_refreshed_failed_state_reaches_job_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the provider's read returns for a run that died after `up` (status, Ray's message,
    the capped log tail) is what the stack exports."""
    tail = "(TaskRunner pid=77) torch.OutOfMemoryError: CUDA out of memory\n[... 3 lines cut]"
    answer = offline_engine.OfflineMocks.new_resource

    def refreshed(self: Any, args: Any) -> tuple[str, dict[str, Any]]:
        resource_id, state = answer(self, args)
        if args.typ == RAY_JOB and args.name == "grpo-job":
            state.update(
                submission_id="a4-grpo-0123456789ab",
                status="FAILED",
                message="Job entrypoint command failed with exit code 1",
                log_tail=tail,
            )
        return resource_id, state

    monkeypatch.setattr(offline_engine.OfflineMocks, "new_resource", refreshed)
    outputs = run_stack("a4", {}, strict=False).outputs
    assert outputs["jobStatus"] == "FAILED"
    assert outputs["jobMessage"] == "Job entrypoint command failed with exit code 1"
    assert outputs["jobLogTail"] == tail
    url = outputs["jobLogsUrl"]
    assert 'jsonPayload.filename:"job-driver-a4-grpo-0123456789ab.log"' in unquote(url)


# -- logs -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_head_runs_the_log_forwarder_on_the_ray_log_volume(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    pod = head_pod(result)
    ray, forwarder = pod["containers"]
    assert ray["name"] == "ray-head"
    assert {"mountPath": "/tmp/ray", "name": "ray-logs"} in ray["volumeMounts"]
    assert forwarder["name"] == "ray-log-forwarder"
    # A Docker Hub image like the worker's: through the stack's Artifact Registry remote
    # repository where image streaming is on (the x86 stacks), as configured on A4X.
    hub = "fluent/fluent-bit:5.1.1"
    repository = f"us-central1-docker.pkg.dev/acme-ml-prod/verl-{stack}-dockerhub/"
    assert forwarder["image"] == (hub if stack == "a4x" else repository + hub)
    assert forwarder["volumeMounts"] == [
        {"name": "ray-logs", "mountPath": "/tmp/ray", "readOnly": True},
        {
            "name": "ray-log-forwarder-config",
            "mountPath": "/fluent-bit/etc/fluent-bit.conf",
            "subPath": "fluent-bit.conf",
            "readOnly": True,
        },
        {"name": "ray-log-forwarder-state", "mountPath": "/fluent-bit/state"},
    ]
    limits = forwarder["resources"]["limits"]
    assert forwarder["resources"]["requests"] == limits
    assert limits == {"cpu": "100m", "memory": "128Mi", "ephemeral-storage": "100Mi"}
    assert forwarder["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"name": "ray-logs", "emptyDir": {}} in pod["volumes"]
    assert {
        "name": "ray-log-forwarder-config",
        "configMap": {"name": "ray-log-forwarder"},
    } in pod["volumes"]
    # Workers keep one container (their logs reach the driver log through Ray).
    assert [c["name"] for c in worker_pod(result)["containers"]] == ["ray-worker"]
    config_map = result.one(CONFIG_MAP, "run-telemetry-log-forwarder")
    assert config_map.inputs["metadata"]["namespace"] == "default"
    assert config_map.inputs["data"] == {"fluent-bit.conf": log_forwarding.fluent_bit_config()}


def _sections(config: str) -> dict[str, dict[str, str]]:
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    for line in config.splitlines():
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
        elif line.strip():
            key, value = line.split(None, 1)
            current[key] = value.strip()
    return sections


def test_fluent_bit_tails_the_ray_session_logs_and_prints_json_lines() -> None:
    sections = _sections(log_forwarding.fluent_bit_config())
    assert sections["INPUT"]["Name"] == "tail"
    assert sections["INPUT"]["Path"] == "/tmp/ray/session_latest/logs/*"
    assert sections["INPUT"]["Path_Key"] == "filename"
    assert sections["OUTPUT"] == {"Name": "stdout", "Match": "*", "Format": "json_lines"}


# fluent-bit v5.1.1 tail input options (plugins/in_tail/tail.c config map) and the generic input
# ones this config uses (src/flb_input.c): a misspelt key is an error at start-up.
TAIL_KEYS = {
    "name", "path", "path_key", "tag", "refresh_interval", "read_from_head", "buffer_max_size",
    "skip_long_lines", "truncate_long_lines", "db", "db.locking", "mem_buf_limit",
}  # fmt: skip


def _on(value: str | None) -> bool:
    # fluent-bit booleans: on/true/yes (src/flb_utils.c flb_utils_bool).
    return (value or "").lower() in ("on", "true", "yes")


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_a_long_line_neither_drops_nor_rereads_a_file(stack: str, mode: str) -> None:
    """fluent-bit v5.1.1 plugins/in_tail/tail_file.c: a line over Buffer_Max_Size with
    Skip_Long_Lines off stops tail following the file ("lines are too long. Skipping file.");
    the rescan re-adds it and, with Read_from_Head and no DB, reads it from the head again.
    So long lines are skipped or truncated, and offsets are kept in a DB on a writable volume of
    the pod (the sidecar's root filesystem is read-only)."""
    inputs = _sections(log_forwarding.fluent_bit_config())["INPUT"]
    assert {key.lower() for key in inputs} <= TAIL_KEYS
    tail = {key.lower(): value for key, value in inputs.items()}
    assert _on(tail.get("skip_long_lines")) or _on(tail.get("truncate_long_lines"))
    if _on(tail.get("read_from_head")):
        assert tail.get("db"), "Read_from_Head without a DB re-reads every re-added file"
    pod = head_pod(plan(stack, mode))
    forwarder = next(c for c in pod["containers"] if c["name"] == "ray-log-forwarder")
    volumes = {v["name"]: v for v in pod["volumes"]}
    db_dir = tail["db"].rsplit("/", 1)[0]
    (mount,) = [m for m in forwarder["volumeMounts"] if m["mountPath"] == db_dir]
    assert not mount.get("readOnly") and "subPath" not in mount
    # An emptyDir outlives a container restart (Kubernetes "Volumes": emptyDir).
    assert "emptyDir" in volumes[mount["name"]]


def test_logs_url_opens_exactly_one_runs_driver_log() -> None:
    query = log_forwarding.driver_log_query(
        "acme-ml-prod", "us-central1", "verl-a4", "default", "a4-grpo-0123456789ab-r1"
    )
    url = log_forwarding.logs_explorer_url("acme-ml-prod", query)
    parts = urlsplit(url)
    assert (parts.scheme, parts.netloc) == ("https", "console.cloud.google.com")
    assert parts.query == "project=acme-ml-prod"
    path, *params = parts.path.split(";")
    assert path == "/logs/query"
    fields = dict(param.split("=", 1) for param in params)
    assert fields["duration"] == "P30D"
    # Every reserved character is encoded: the console would split on a bare ';' or '?'.
    assert not set(fields["query"]) & set(' ";=?\n')
    assert unquote(fields["query"]).splitlines() == [
        'resource.type="k8s_container"',
        'resource.labels.project_id="acme-ml-prod"',
        'resource.labels.location="us-central1"',
        'resource.labels.cluster_name="verl-a4"',
        'resource.labels.namespace_name="default"',
        'resource.labels.container_name="ray-log-forwarder"',
        'jsonPayload.filename:"job-driver-a4-grpo-0123456789ab-r1.log"',
    ]


# -- model export -----------------------------------------------------------------------------


def _runner(entrypoint: str) -> tuple[list[str], list[str]]:
    """(runner options, training command) of the GRPO entrypoint."""
    words = shlex.split(entrypoint)
    assert words[:2] == ["python3", "run_grpo.py"]
    split = words.index("--")
    return words[2:split], words[split + 1 :]


def test_grpo_job_exports_the_model_after_training_succeeds() -> None:
    job = plan("a4", "standard").one(RAY_JOB, "grpo-job")
    options, train = _runner(job.inputs["entrypoint"])
    assert train[:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    checkpoint_dir = next(w.split("=", 1)[1] for w in train if "default_local_dir=" in w)
    assert options[options.index("--run-dir") + 1] == checkpoint_dir
    identity = json.loads(options[options.index("--identity") + 1])
    assert identity["world_size"] == 16
    assert options[options.index("--export-target") + 1] == (
        "/data/models/grpo-qwen2.5-32b-instruct-a4"
    )
    runtime_env = job.inputs["runtime_env"]
    assert runtime_env["working_dir"] == "payloads/export"
    assert len(runtime_env["env_vars"]["VERL_GKE_EXPORT_SHA256"]) == 64


def test_export_model_false_leaves_the_export_out() -> None:
    result = plan("a4", "standard", **{"verl-gke__exportModel": "false"})
    job = result.one(RAY_JOB, "grpo-job")
    options, _ = _runner(job.inputs["entrypoint"])
    assert "--export-target" not in options
    assert result.outputs["modelExportPath"] is None


# -- W&B --------------------------------------------------------------------------------------


def test_without_a_wandb_key_there_is_no_secret_and_no_env() -> None:
    result = plan("a4x")
    assert [s.name for s in result.of_type(SECRET)] == ["storage-hf-secret"]
    for pod in (head_pod(result), worker_pod(result)):
        for container in pod["containers"]:
            assert all(e["name"] != "WANDB_API_KEY" for e in container.get("env", []))


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_wandb_key_reaches_head_and_workers_only_through_its_secret(stack: str, mode: str) -> None:
    result = plan(
        stack,
        mode,
        **{"verl-gke__wandbApiKey": WANDB_KEY, "verl-gke__job": '{"logger": ["console", "wandb"]}'},
    )
    secret = result.one(SECRET, "run-telemetry-wandb-secret")
    assert secret.inputs["metadata"]["name"] == "wandb-secret"
    assert secret.inputs["stringData"] == {"api_key": WANDB_KEY}
    expected = {
        "name": "WANDB_API_KEY",
        "valueFrom": {"secretKeyRef": {"name": "wandb-secret", "key": "api_key"}},
    }
    assert expected in head_pod(result)["containers"][0]["env"]
    assert expected in worker_pod(result)["containers"][0]["env"]
    # The key is nowhere else: not in the RayCluster, the jobs, or any output.
    for resource in result.resources:
        if resource.name != "run-telemetry-wandb-secret":
            assert WANDB_KEY not in repr(resource.inputs), resource.name
    assert WANDB_KEY not in repr(result.outputs)
    entrypoint = shlex.split(result.one(RAY_JOB, "grpo-job").inputs["entrypoint"])
    assert "trainer.logger=[console,wandb]" in entrypoint


def test_wandb_logger_without_a_key_is_refused_before_any_resource() -> None:
    with pytest.raises(GrpoPreflightError) as error:
        run_stack("a4", {"verl-gke:job": '{"logger": ["console", "wandb"]}'}, strict=False)
    message = str(error.value)
    assert "verl-gke:job.logger = ['console', 'wandb']" in message
    assert "pulumi config set --secret verl-gke:wandbApiKey '<your-wandb-api-key>' -s a4" in message
    assert """or pulumi config set --path verl-gke:job.logger '["console"]' -s a4""" in message


# -- tools.run reads the plain outputs --------------------------------------------------------


def test_tools_run_prefers_the_plain_endpoint_outputs_over_the_secret_kubeconfig() -> None:
    # tools.run finds where the run is through tools/run_target.py.
    from tools import run_target as run_tool

    def no_pulumi(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("the secret kubeconfig output must not be read")

    outputs = {
        "kubeconfig": "[secret]",
        run_tool.OUT_CLUSTER_ENDPOINT: offline_engine.FAKE_ENDPOINT,
        run_tool.OUT_CLUSTER_CA: offline_engine.FAKE_CA,
    }
    assert run_tool._endpoint_from_stack("a4", outputs, no_pulumi) == (
        offline_engine.FAKE_ENDPOINT,
        offline_engine.FAKE_CA,
    )
    # The names are the ones the program exports.
    exported = plan("a4", "standard").outputs
    assert exported[run_tool.OUT_CLUSTER_ENDPOINT] == offline_engine.FAKE_ENDPOINT
    assert exported[run_tool.OUT_CLUSTER_CA] == offline_engine.FAKE_CA
