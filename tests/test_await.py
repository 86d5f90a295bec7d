"""No `pulumi up` waits on a rollout over every GPU node.

pulumi-kubernetes awaits a DaemonSet until every selected node runs its pod, 10 minutes by default
(provider/pkg/await/daemonset.go `_defaultDaemonSetTimeout = 10 * time.Minute`), unless the object
carries `pulumi.com/skipAwait: "true"`; a Helm Release waits for its resources unless
`skipAwait`, and `atomic` turns the wait back on (provider/pkg/provider/helm_release.go, Release
`Atomic`: "The wait flag will be set automatically if atomic is used"). Up to 64 GPU nodes each
pulling an image can exceed that, so every DaemonSet that can run on GPU nodes, and every Release
that installs one, skips the await; what needs their work waits for it on its own node.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from manifests.common import ACCELERATOR_LABEL
from tests.program import COMBINATIONS, plan

DAEMON_SET = "kubernetes:apps/v1:DaemonSet"
RELEASE = "kubernetes:helm.sh/v3:Release"
SKIP_AWAIT = "pulumi.com/skipAwait"
# Charts whose DaemonSets run on the GPU nodes (nvidia-dra-driver-gpu: the kubelet plugin, its
# affinity is the GPU type, manifests/dra_driver.py).
GPU_NODE_CHARTS = {"nvidia-dra-driver-gpu"}


def _expressions(pod: dict[str, Any]) -> list[dict[str, Any]]:
    terms = (
        pod.get("affinity", {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", {})
        .get("nodeSelectorTerms", [])
    )
    return [e for term in terms for e in term.get("matchExpressions", [])]


def can_run_on_gpu_nodes(pod: dict[str, Any]) -> bool:
    """True unless the pod's placement keeps it off GPU nodes (selects no GPU type)."""
    selector = pod.get("nodeSelector", {})
    if ACCELERATOR_LABEL in selector:
        return True
    expressions = [e for e in _expressions(pod) if e["key"] == ACCELERATOR_LABEL]
    if any(e["operator"] in ("In", "Exists") for e in expressions):
        return True
    # Nothing about GPUs in its placement: it lands on every node that fits, GPU nodes included.
    return not selector and not expressions


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_gpu_node_daemon_sets_are_not_awaited(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    checked = 0
    for resource in result.of_type(DAEMON_SET):
        pod = resource.inputs["spec"]["template"]["spec"]
        if not can_run_on_gpu_nodes(pod):
            continue
        annotations = resource.inputs["metadata"].get("annotations", {})
        assert annotations.get(SKIP_AWAIT) == "true", resource.name
        checked += 1
    if mode == "standard":
        # The NCCL installer runs on every Standard GPU node.
        assert checked >= 1
    for release in result.of_type(RELEASE):
        if release.inputs["chart"] in GPU_NODE_CHARTS:
            assert release.inputs.get("skipAwait") is True, release.name
            assert not release.inputs.get("atomic"), release.name


@pytest.mark.parametrize("stack", ["a4", "a3u", "a4x"])
def test_standard_workers_wait_for_the_installer_on_their_node(stack: str) -> None:
    """With the installer not awaited, a worker starting before it finished on its node would run
    NCCL without the gIB plugin: the worker's first init container waits for the installer's
    marker, through the same host folder the installer writes."""
    result = plan(stack, "standard")
    installer = result.one(DAEMON_SET, "gpu-networking-nccl-installer").inputs["spec"]["template"][
        "spec"
    ]
    script = installer["initContainers"][0]["args"][0]
    (ray,) = result.of_type("kubernetes:ray.io/v1:RayCluster")
    worker = ray.inputs["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    wait = worker["initContainers"][0]
    assert wait["name"] == "wait-for-nccl-installer"
    volumes = {v["name"]: v for v in worker["volumes"]}
    (mount,) = wait["volumeMounts"]
    host_dir = volumes[mount["name"]]["hostPath"]["path"]
    installer_volumes = {v["name"]: v for v in installer["volumes"]}
    (written,) = [
        m
        for m in installer["initContainers"][0]["volumeMounts"]
        if installer_volumes[m["name"]]["hostPath"]["path"] == host_dir
    ]
    marker = wait["args"][0].split("[ -f ", 1)[1].split(" ]", 1)[0]
    name = marker.removeprefix(mount["mountPath"] + "/")
    # The installer touches the marker last, in the folder the worker mounts.
    assert script.rstrip().splitlines()[-2] == f"touch {written['mountPath']}/{name}"


def test_a_daemon_set_with_no_gpu_placement_counts_as_on_gpu_nodes() -> None:
    assert can_run_on_gpu_nodes({"containers": []})
    assert not can_run_on_gpu_nodes({"nodeSelector": {"cloud.google.com/gke-nodepool": "cpu"}})
    assert can_run_on_gpu_nodes({"nodeSelector": {ACCELERATOR_LABEL: "nvidia-b200"}})


def _host_files(pod: dict[str, Any], container: dict[str, Any], paths: list[str]) -> set[str]:
    """The node's files behind `paths` in `container`. A file in an emptyDir is named by the
    volume: it starts empty with the pod, and init containers run one after another (Kubernetes
    "Init Containers"), so no other pod can write it. Other volumes (the bucket) are skipped."""
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    found = set()
    for path in paths:
        for mount in container.get("volumeMounts", []):
            volume = volumes[mount["name"]]
            if not path.startswith(mount["mountPath"] + "/"):
                continue
            rest = path.removeprefix(mount["mountPath"])
            if "hostPath" in volume:
                found.add(volume["hostPath"]["path"] + rest)
            elif "emptyDir" in volume:
                found.add(f"emptyDir {mount['name']} of the pod: {rest}")
    return found


def waited_node_files(pod: dict[str, Any]) -> set[str]:
    """Node files the pod's init containers loop on (`until [ -f FILE ]`) before it starts."""
    found: set[str] = set()
    for c in pod.get("initContainers", []):
        script = " ".join(c.get("args", []))
        found |= _host_files(pod, c, re.findall(r"until \[ -f (\S+) \]", script))
    return found


def written_node_files(pod: dict[str, Any]) -> set[str]:
    """Node files a DaemonSet's init containers create (`touch FILE`)."""
    found: set[str] = set()
    for c in pod.get("initContainers", []):
        script = " ".join(c.get("args", []))
        found |= _host_files(pod, c, re.findall(r"^touch (\S+)$", script, re.MULTILINE))
    return found


def _worker(result: Any) -> dict[str, Any]:
    (ray,) = result.of_type("kubernetes:ray.io/v1:RayCluster")
    return ray.inputs["spec"]["workerGroupSpecs"][0]["template"]["spec"]


def unwritten_waits(result: Any) -> set[str]:
    """Node files a GPU worker waits for that no DaemonSet placed on its GPU type writes."""
    worker = _worker(result)
    gpu_type = worker["nodeSelector"].get(ACCELERATOR_LABEL)
    written: set[str] = set()
    for daemon_set in result.of_type(DAEMON_SET):
        pod = daemon_set.inputs["spec"]["template"]["spec"]
        values = [e.get("values", []) for e in _expressions(pod) if e["key"] == ACCELERATOR_LABEL]
        if any(gpu_type in v for v in values):
            written |= written_node_files(pod)
    return waited_node_files(worker) - written


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_workers_wait_only_for_node_files_a_daemon_set_writes(stack: str, mode: str) -> None:
    """An init container that loops until a file exists on the node never ends where nothing
    writes that file: the installer DaemonSet runs on Standard only (manifests/nccl_installer.py
    needs_installer; the Autopilot workers install the gIB plugin into their own pod), so a
    worker waits for the installer's marker exactly where that DaemonSet selects its node."""
    result = plan(stack, mode)
    assert unwritten_waits(result) == set()
    if mode == "standard":
        assert waited_node_files(_worker(result)), "workers would not wait for the installer"


def test_a_wait_for_a_file_nothing_writes_is_caught() -> None:
    """The rule above fails for an Autopilot worker given the Standard worker's wait."""
    standard = _worker(plan("a4", "standard"))
    autopilot = plan("a4", "autopilot")
    worker = _worker(autopilot)
    worker["initContainers"].insert(0, standard["initContainers"][0])
    # On its own gib emptyDir, and on the Standard worker's node folder.
    assert unwritten_waits(autopilot)
    host = [v for v in standard["volumes"] if "hostPath" in v]
    names = {v["name"] for v in host}
    worker["volumes"] = [v for v in worker["volumes"] if v["name"] not in names] + host
    assert unwritten_waits(autopilot)
