"""Issue 13 lever 1: two GCS FUSE mounts of the bucket, and checkpoints that still resume.

The read-mostly data mount caches metadata for good; the checkpoint mount never does, and the
job's checkpoints (with verl's resume marker) are on it. The marker's freshness across writers and
readers is checked against a real GCS emulator (fake-gcs-server) through the provider's discovery.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Iterator
from typing import Any

import pytest
from google.cloud import storage

from config import bucket_layout
from jobs.checkpoints import discover_checkpoints
from tests.job_fixtures.fake_trainer import write_checkpoint
from tests.program import COMBINATIONS, plan
from tests.support.gcs_emulator import GcsEmulator, start_gcs_emulator

PV = "kubernetes:core/v1:PersistentVolume"
RAY_CLUSTER = "kubernetes:ray.io/v1:RayCluster"
# verl v0.6.1 ray_trainer.py: the tracker file verl rewrites in place after every save and reads
# on resume.
VERL_MARKER = "latest_checkpointed_iteration.txt"


def _pv(result: Any, name: str) -> dict[str, Any]:
    (pv,) = [r for r in result.of_type(PV) if r.inputs["metadata"]["name"] == name]
    return dict(pv.inputs["spec"])


def _overrides(entrypoint: str) -> dict[str, str]:
    return dict(a.split("=", 1) for a in shlex.split(entrypoint) if "=" in a)


def _grpo(result: Any) -> dict[str, Any]:
    return dict(result.one("pulumi-python:dynamic/jobs:RayJob", "grpo-job").inputs)


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_checkpoint_mount_never_caches_metadata(stack: str, mode: str) -> None:
    spec = _pv(plan(stack, mode), "training-checkpoints-pv")
    options = spec["mountOptions"]
    # Explicit: GKE's performance defaults would otherwise set ttl -1 on A3 Ultra/A4/A4X.
    assert "metadata-cache:ttl-secs:0" in options
    assert "metadata-cache:negative-ttl-secs:0" in options
    assert not any(o.startswith(("file-cache:", "metadata-cache:ttl-secs:-")) for o in options)
    assert "only-dir=verl/checkpoints" in options
    assert spec["accessModes"] == ["ReadWriteMany"]
    assert spec["claimRef"]["name"] == "training-checkpoints-pvc"
    assert spec["csi"]["volumeHandle"] == f"acme-ml-prod-verl-{stack}"
    assert "gcsfuseMetadataPrefetchOnMount" not in spec["csi"]["volumeAttributes"]


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_data_mount_is_read_mostly_and_cached(stack: str, mode: str) -> None:
    options = _pv(plan(stack, mode), "training-bucket-pv")["mountOptions"]
    assert "metadata-cache:ttl-secs:-1" in options
    # What data prep writes after a pod mounted is still found.
    assert "metadata-cache:negative-ttl-secs:0" in options
    assert "file-cache:max-size-mb:-1" in options
    assert "file-cache:enable-parallel-downloads:true" in options


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_job_checkpoints_and_resume_marker_are_on_the_checkpoint_mount(
    stack: str, mode: str
) -> None:
    result = plan(stack, mode)
    job = _grpo(result)
    checkpoints = _overrides(job["entrypoint"])["trainer.default_local_dir"]
    marker = posixpath.join(checkpoints, VERL_MARKER)
    assert marker.startswith(f"{bucket_layout.CHECKPOINT_MOUNT}/")
    # The provider reads the marker through the same bucket folder the pods write.
    run_folder = checkpoints.removeprefix(f"{bucket_layout.CHECKPOINT_MOUNT}/")
    assert run_folder.startswith(f"grpo-qwen2.5-32b-instruct-{stack}/w")
    assert job["checkpoint_root"] == f"gs://acme-ml-prod-verl-{stack}/verl/checkpoints/{run_folder}"
    spec = result.one(RAY_CLUSTER).inputs["spec"]
    pods = [spec["headGroupSpec"]["template"], spec["workerGroupSpecs"][0]["template"]]
    for pod in pods:
        claims = {
            v["name"]: v["persistentVolumeClaim"]["claimName"]
            for v in pod["spec"]["volumes"]
            if "persistentVolumeClaim" in v
        }
        container = pod["spec"]["containers"][0]
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/checkpoints"]
        assert claims[mount["name"]] == "training-checkpoints-pvc"
        assert not mount.get("readOnly")


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_verl_is_imported_from_a_node_local_copy(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    env = _grpo(result)["runtime_env"]["env_vars"]
    assert env["PYTHONPATH"] == "/opt/verl-node-local"
    spec = result.one(RAY_CLUSTER).inputs["spec"]
    for pod in (spec["headGroupSpec"]["template"], spec["workerGroupSpecs"][0]["template"]):
        copy = pod["spec"]["initContainers"][-1]
        assert copy["name"] == "verl-node-local-copy"
        script = copy["args"][0]
        # After data prep's verl marker, without the checkpoints or git history.
        assert script.index("/data/.prep/verl.done") < script.index("tar -C /data/verl")
        assert "--exclude=./checkpoints" in script and "--exclude=./.git" in script
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert volumes["verl-node-local"] == {"name": "verl-node-local", "emptyDir": {}}


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_workers_size_the_sidecar_and_give_it_a_file_cache(stack: str, mode: str) -> None:
    template = plan(stack, mode).one(RAY_CLUSTER).inputs["spec"]["workerGroupSpecs"][0]
    annotations = template["template"]["metadata"]["annotations"]
    volumes = {v["name"]: v for v in template["template"]["spec"]["volumes"]}
    assert volumes["gke-gcsfuse-cache"]["emptyDir"] == {"sizeLimit": "200Gi"}
    if mode == "autopilot":
        # Autopilot: explicit values within the GPU-node cap (2 vCPU, 14 GiB).
        assert annotations["gke-gcsfuse/cpu-limit"] == "2"
        assert annotations["gke-gcsfuse/memory-limit"] == "14Gi"
    else:
        assert annotations["gke-gcsfuse/cpu-limit"] == "0"
        assert annotations["gke-gcsfuse/memory-limit"] == "0"


def test_bucket_urls_of_both_mounts() -> None:
    url = bucket_layout.bucket_url
    assert url("b", "/checkpoints/exp") == "gs://b/verl/checkpoints/exp"
    assert url("b", "/data/gsm8k") == "gs://b/gsm8k"
    with pytest.raises(ValueError, match="/checkpoints"):
        url("b", "/tmp/x")


# --- the resume marker, read fresh (real GCS emulator) ------------------------------------------

BUCKET = "resume-bucket"


@pytest.fixture(scope="module")
def gcs() -> Iterator[GcsEmulator]:
    with start_gcs_emulator() as emulator:
        emulator.client().create_bucket(BUCKET)
        yield emulator


def test_marker_rewritten_by_one_writer_is_read_fresh_by_another_client(gcs: GcsEmulator) -> None:
    folder = "verl/checkpoints/exp"
    root = bucket_layout.bucket_url(BUCKET, "/checkpoints/exp")
    assert root == f"gs://{BUCKET}/{folder}"
    writer_a = gcs.client().bucket(BUCKET)
    writer_b = gcs.client().bucket(BUCKET)
    reader: storage.Client = gcs.client()
    write_checkpoint(writer_a, folder, 10, world_size=2)
    assert discover_checkpoints(root, reader).latest_step == 10
    # Another node (a resumed run) saves step 20 and rewrites the marker in place: the same
    # reader, asked again, sees 20, not its first answer.
    write_checkpoint(writer_b, folder, 20, world_size=2)
    listing = discover_checkpoints(root, reader)
    assert listing.latest_step == 20
    assert listing.latest_checkpoint == f"{root}/global_step_20"
    assert writer_a.blob(f"{folder}/{VERL_MARKER}").download_as_text() == "20"
