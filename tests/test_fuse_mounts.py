"""Two GCS FUSE mounts of the bucket, and checkpoints that still resume.

The read-mostly data mount caches metadata for good; the checkpoint mount never does, and the
job's checkpoints (with verl's resume marker) are on it. The provider's checkpoint discovery
(GCS API, not gcsfuse) is checked against a real GCS emulator (fake-gcs-server) for a marker
another writer rewrote. Freshness through gcsfuse itself is not tested: no gcsfuse binary is
installable here (Debian, PyPI).
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
from payloads.data_prep import prep_verl
from tests.job_fixtures.fake_trainer import write_checkpoint
from tests.program import COMBINATIONS, plan
from tests.support.gcs_emulator import GcsEmulator
from tests.test_node_fit import pod_requests, quantity

PV = "kubernetes:core/v1:PersistentVolume"
PVC = "kubernetes:core/v1:PersistentVolumeClaim"
RAY_CLUSTER = "kubernetes:ray.io/v1:RayCluster"
# verl v0.6.1 ray_trainer.py: the tracker file verl rewrites in place after every save and reads
# on resume.
VERL_MARKER = "latest_checkpointed_iteration.txt"


def _pv(result: Any, name: str) -> dict[str, Any]:
    (pv,) = [r for r in result.of_type(PV) if r.inputs["metadata"]["name"] == name]
    return dict(pv.inputs["spec"])


def pod_specs(value: Any, where: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every pod spec (a dict with `containers`) anywhere in a resource's inputs."""
    if isinstance(value, dict):
        if "containers" in value:
            yield where, value
        for key, item in value.items():
            yield from pod_specs(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from pod_specs(item, f"{where}[{index}]")


def parse_volume_id(handle: str) -> str:
    """The bucket the GCS FUSE driver mounts for a handle: everything before the first ':'
    (gcs-fuse-csi-driver pkg/util/util.go ParseVolumeID, regexp `:.*$` removed)."""
    return handle.split(":", 1)[0]


def _csi_volume_names(result: Any, pod: dict[str, Any]) -> list[str]:
    """kubelet's unique name of each CSI persistent volume the pod mounts: `driver^volumeHandle`
    (kubernetes pkg/volume/csi/csi_plugin.go GetVolumeName), through PVC -> PV."""
    claims = {r.inputs["metadata"]["name"]: r.inputs["spec"] for r in result.of_type(PVC)}
    volumes = {r.inputs["metadata"]["name"]: r.inputs["spec"] for r in result.of_type(PV)}
    names = []
    for volume in pod.get("volumes", []):
        if "persistentVolumeClaim" not in volume:
            continue
        claim = claims[volume["persistentVolumeClaim"]["claimName"]]
        csi = volumes[claim["volumeName"]].get("csi")
        if csi:
            names.append(f"{csi['driver']}^{csi['volumeHandle']}")
    return names


def _overrides(entrypoint: str) -> dict[str, str]:
    return dict(a.split("=", 1) for a in shlex.split(entrypoint) if "=" in a)


def _grpo(result: Any) -> dict[str, Any]:
    return dict(result.one("pulumi-python:dynamic/jobs:RayJob", "grpo-job").inputs)


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_checkpoint_mount_never_caches_metadata(stack: str, mode: str) -> None:
    spec = _pv(plan(stack, mode), "training-checkpoints-pv")
    options = spec["mountOptions"]
    # Explicit, as flags: GKE's performance defaults would otherwise set ttl -1 on A3 Ultra/A4/A4X
    # (the form rule is tests/test_gcsfuse_options.py).
    assert "metadata-cache-ttl-secs=0" in options
    assert "metadata-cache-negative-ttl-secs=0" in options
    assert not any(o.startswith("file-cache:") for o in options)
    assert "only-dir=verl/checkpoints" in options
    assert spec["accessModes"] == ["ReadWriteMany"]
    assert spec["claimRef"]["name"] == "training-checkpoints-pvc"
    # Its own handle of the bucket (the rule is test_no_pod_mounts_one_csi_volume_twice).
    assert spec["csi"]["volumeHandle"] == f"acme-ml-prod-verl-{stack}:checkpoints"
    assert "gcsfuseMetadataPrefetchOnMount" not in spec["csi"]["volumeAttributes"]


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_data_mount_is_read_mostly_and_cached(stack: str, mode: str) -> None:
    options = _pv(plan(stack, mode), "training-bucket-pv")["mountOptions"]
    assert "metadata-cache-ttl-secs=-1" in options
    # What data prep writes after a pod mounted is still found.
    assert "metadata-cache-negative-ttl-secs=0" in options
    assert "file-cache:enable-parallel-downloads:true" in options


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_uncached_data_mount_differs_only_by_the_file_cache(stack: str, mode: str) -> None:
    """/data behaves alike in every pod (same metadata caching), with the file cache off on the
    uncached PV (sidecar_mounter_config.go: no max-size-mb, no cache-dir)."""
    result = plan(stack, mode)
    cached = _pv(result, "training-bucket-pv")["mountOptions"]
    uncached = _pv(result, "training-bucket-uncached-pv")["mountOptions"]
    assert file_cache_cap_mib(cached) is not None
    assert file_cache_cap_mib(uncached) is None
    assert not any(o.startswith("file-cache:") for o in uncached)
    assert uncached == [o for o in cached if not o.startswith("file-cache:")]


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_data_prep_mounts_data_writable(stack: str, mode: str) -> None:
    """Data prep writes the model and data into /data: neither its volumeMount nor the PV's mount
    options make it read-only (Kubernetes `readOnly`; gcsfuse `ro`), and files it has not written
    yet are looked up again (negative-ttl 0) rather than cached as absent."""
    result = plan(stack, mode)
    job = result.one("kubernetes:batch/v1:Job", "data-prep-job")
    pod = job.inputs["spec"]["template"]["spec"]
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == "/data"]
    assert not mount.get("readOnly")
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    claim = volume["persistentVolumeClaim"]
    assert not claim.get("readOnly")
    claims = {r.inputs["metadata"]["name"]: r.inputs["spec"] for r in result.of_type(PVC)}
    options = _pv(result, claims[claim["claimName"]]["volumeName"])["mountOptions"]
    assert "ro" not in options and "metadata-cache-negative-ttl-secs=0" in options


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
    # The marker data prep writes for the repo and ref the data-prep Job is given.
    job = result.one("kubernetes:batch/v1:Job", "data-prep-job")
    argv = job.inputs["spec"]["template"]["spec"]["containers"][0]["command"]
    repo, ref = argv[argv.index("--verl-repo") + 1], argv[argv.index("--verl-ref") + 1]
    folder = argv[argv.index("--verl-dir") + 1]
    assert folder == f"verl-src/{stack}"
    marker = f"/data/.prep/{prep_verl.verl_marker_name(repo, ref, folder)}.done"
    for pod in (spec["headGroupSpec"]["template"], spec["workerGroupSpecs"][0]["template"]):
        copy = pod["spec"]["initContainers"][-1]
        assert copy["name"] == "verl-node-local-copy"
        script = copy["args"][0]
        # After data prep's verl marker, without the checkpoints or git history.
        assert script.index(marker) < script.index(f"tar -C /data/{folder} ")
        assert "--exclude=./checkpoints" in script and "--exclude=./.git" in script
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert volumes["verl-node-local"] == {"name": "verl-node-local", "emptyDir": {}}


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_workers_size_the_sidecar_and_give_it_a_file_cache(stack: str, mode: str) -> None:
    template = plan(stack, mode).one(RAY_CLUSTER).inputs["spec"]["workerGroupSpecs"][0]
    annotations = template["template"]["metadata"]["annotations"]
    volumes = {v["name"]: v for v in template["template"]["spec"]["volumes"]}
    assert "gke-gcsfuse-cache" in volumes
    if mode == "autopilot":
        # Autopilot: explicit values within the GPU-node cap (2 vCPU, 14 GiB).
        assert annotations["gke-gcsfuse/cpu-limit"] == "2"
        assert annotations["gke-gcsfuse/memory-limit"] == "14Gi"
    else:
        assert annotations["gke-gcsfuse/cpu-limit"] == "0"
        assert annotations["gke-gcsfuse/memory-limit"] == "0"


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_no_pod_mounts_one_csi_volume_twice(stack: str, mode: str) -> None:
    """kubelet mounts a CSI persistent volume once per pod under `driver^volumeHandle`
    (pkg/volume/csi GetVolumeName): two PVs with one handle in a pod are one mount, with one PV's
    options behind both paths, or a pod stuck in ContainerCreating (gcs-fuse-csi-driver
    2ed24c70)."""
    result = plan(stack, mode)
    checked = 0
    for resource in result.resources:
        for where, pod in pod_specs(dict(resource.inputs)):
            names = _csi_volume_names(result, pod)
            assert len(names) == len(set(names)), f"{resource.name}{where}: {sorted(names)}"
            checked += len(names)
    # The Ray head, the workers and the data-prep Job mount the bucket.
    assert checked >= 5


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_every_fuse_handle_names_the_training_bucket(stack: str, mode: str) -> None:
    """What the driver mounts is ParseVolumeID(handle) (gcs-fuse-csi-driver pkg/util/util.go)."""
    result = plan(stack, mode)
    fuse = [r.inputs["spec"]["csi"] for r in result.of_type(PV)]
    assert len(fuse) == 3
    for csi in fuse:
        assert csi["driver"] == "gcsfuse.csi.storage.gke.io"
        assert parse_volume_id(csi["volumeHandle"]) == result.outputs["bucketName"]


def test_shared_handle_is_caught() -> None:
    """The rule above fails on the shape GKE documents as one mount: two PVs, one handle."""
    result = plan("a4", "standard")
    for pv in result.of_type(PV):
        pv.inputs["spec"]["csi"]["volumeHandle"] = result.outputs["bucketName"]
    (ray,) = result.of_type(RAY_CLUSTER)
    head = ray.inputs["spec"]["headGroupSpec"]["template"]["spec"]
    names = _csi_volume_names(result, head)
    assert len(set(names)) < len(names)


def file_cache_cap_mib(options: list[str]) -> int | None:
    """file-cache:max-size-mb of a mount that turns gcsfuse's file cache on, else None. The driver
    hands the sidecar the PV's options deduplicated and sorted as strings (gcs-fuse-csi-driver
    pkg/util/util.go prepareMountOptions, sets.String.List); the sidecar gives gcsfuse a
    cache-dir only when some max-size-mb value is not 0, otherwise "", and the last value in that
    order is the size (pkg/sidecar_mounter/sidecar_mounter_config.go prepareMountArgs). gcsfuse
    caches only with a cache-dir and a size other than 0 (cfg/config_util.go
    IsFileCacheEnabled)."""
    prefix = "file-cache:max-size-mb:"
    values = sorted({o.removeprefix(prefix) for o in options if o.startswith(prefix)})
    if all(v == "0" for v in values):
        return None
    size = int(values[-1])
    return None if size == 0 else size


@pytest.mark.parametrize(
    ("sizes", "cap"),
    [
        ([], None),
        (["0"], None),
        (["100"], 100),
        (["-1"], -1),
        (["100", "0"], 100),
        (["5", "10"], 5),
        (["-1", "0"], None),
    ],
)
def test_file_cache_cap_follows_the_driver(sizes: list[str], cap: int | None) -> None:
    """Repeated max-size-mb values: sorted as strings, the last is the size ("5" after "10"); a
    cache-dir from "-1" with a final "0" is still no cache (sources above)."""
    options = ["implicit-dirs", *(f"file-cache:max-size-mb:{s}" for s in sizes)]
    assert file_cache_cap_mib(options) == cap


def _pod_file_caches(result: Any, pod: dict[str, Any]) -> tuple[int, list[int]]:
    """How many GCS FUSE PVs the pod mounts, and the file-cache cap of each that caches."""
    claims = {r.inputs["metadata"]["name"]: r.inputs["spec"] for r in result.of_type(PVC)}
    fuse, caps = 0, []
    for volume in pod.get("volumes", []):
        if "persistentVolumeClaim" not in volume:
            continue
        pv = _pv(result, claims[volume["persistentVolumeClaim"]["claimName"]]["volumeName"])
        fuse += 1
        if (cap := file_cache_cap_mib(pv["mountOptions"])) is not None:
            caps.append(cap)
    return fuse, caps


def _cache_volume_problems(where: str, pod: dict[str, Any], caps: list[int]) -> list[str]:
    cache = {v["name"]: v for v in pod.get("volumes", [])}.get("gke-gcsfuse-cache")
    if cache is None:
        if not caps:
            return []
        # The webhook then adds its own emptyDir without a sizeLimit (sidecar_spec.go
        # GetSidecarContainerVolumeSpec), held only by the pod's ephemeral-storage limit.
        return [f"{where}: file cache {caps} MiB with no sized gke-gcsfuse-cache volume"]
    limit_text = cache.get("emptyDir", {}).get("sizeLimit")
    if limit_text is None:
        return [f"{where}: gke-gcsfuse-cache volume without a sizeLimit"]
    limit = quantity(limit_text)
    problems = [] if caps else [f"{where}: a cache volume but no file cache"]
    for mib in caps:
        # -1 is unlimited; the cap must be finite and below the volume.
        if not 0 < mib * 1024**2 < limit:
            problems.append(f"{where}: max-size-mb {mib} in {limit} B")
    on_disk = cache["emptyDir"].get("medium") != "Memory"
    if on_disk and limit > pod_requests(pod).ephemeral_storage_bytes:
        problems.append(f"{where}: cache volume over the pod's request")
    return problems


def file_cache_problems(result: Any) -> tuple[list[str], int, int]:
    """Breaches of the file-cache rule (see the test below), how many pods mount a GCS FUSE PV and
    how many of them cache."""
    problems, fuse_pods, caching_pods = [], 0, 0
    for resource in result.resources:
        for where, pod in pod_specs(dict(resource.inputs)):
            fuse, caps = _pod_file_caches(result, pod)
            fuse_pods += fuse > 0
            caching_pods += bool(caps)
            problems += _cache_volume_problems(f"{resource.name}{where}", pod, caps)
    return problems, fuse_pods, caching_pods


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_file_cache_is_bounded_below_its_volume(stack: str, mode: str) -> None:
    """gcs-fuse-csi-driver docs/troubleshooting.md ("No space left on device for file cache"):
    the volume behind the file cache must be larger than the cache. Every pod that mounts a PV
    whose options turn the file cache on declares the cache volume itself (`gke-gcsfuse-cache`,
    sidecar_spec.go SidecarContainerCacheVolumeName; else the webhook's unsized emptyDir is the
    cache), with a sizeLimit above a finite file-cache:max-size-mb (-1 is unlimited); an on-disk
    cache volume lies within the pod's ephemeral-storage request, which fits the GPU node
    (tests/test_node_fit.py), so the cache cannot crowd the node."""
    problems, fuse_pods, caching_pods = file_cache_problems(plan(stack, mode))
    assert problems == []
    # The Ray head, the GPU workers and the data-prep Job mount the bucket; the workers cache.
    assert fuse_pods >= 3
    assert caching_pods >= 1


def test_an_unlimited_file_cache_is_caught() -> None:
    """The rule above fails on gcsfuse's 'unlimited' (-1)."""
    result = plan("a4", "standard")
    (pv,) = [r for r in result.of_type(PV) if r.inputs["metadata"]["name"] == "training-bucket-pv"]
    options = pv.inputs["spec"]["mountOptions"]
    pv.inputs["spec"]["mountOptions"] = [
        "file-cache:max-size-mb:-1" if o.startswith("file-cache:max-") else o for o in options
    ]
    problems, _, _ = file_cache_problems(result)
    assert problems and "max-size-mb -1" in problems[0]


def _head_pod(result: Any) -> dict[str, Any]:
    return dict(result.one(RAY_CLUSTER).inputs["spec"]["headGroupSpec"]["template"]["spec"])


def _data_prep_pod(result: Any) -> dict[str, Any]:
    job = result.one("kubernetes:batch/v1:Job", "data-prep-job")
    return dict(job.inputs["spec"]["template"]["spec"])


@pytest.mark.parametrize("pod_of", [_head_pod, _data_prep_pod])
@pytest.mark.parametrize("mode", ["standard", "autopilot"])
def test_a_cached_mount_without_its_cache_volume_is_caught(pod_of: Any, mode: str) -> None:
    """The rule above fails when the Ray head or the data-prep Job (neither has a
    gke-gcsfuse-cache volume) mounts the file-cached data PV."""
    result = plan("a4", mode)
    for volume in pod_of(result)["volumes"]:
        if volume["name"] == "training-bucket-vol":
            volume["persistentVolumeClaim"]["claimName"] = "training-bucket-pvc"
    problems, _, _ = file_cache_problems(result)
    assert len(problems) == 1 and "no sized gke-gcsfuse-cache volume" in problems[0]


def test_bucket_urls_of_both_mounts() -> None:
    url = bucket_layout.bucket_url
    assert url("b", "/checkpoints/exp") == "gs://b/verl/checkpoints/exp"
    assert url("b", "/data/gsm8k") == "gs://b/gsm8k"
    with pytest.raises(ValueError, match="/checkpoints"):
        url("b", "/tmp/x")


# --- the resume marker through the GCS API (real GCS emulator; no gcsfuse) ------------------------

BUCKET = "resume-bucket"


def test_gcs_api_discovery_sees_a_marker_another_writer_rewrote(gcs: GcsEmulator) -> None:
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
