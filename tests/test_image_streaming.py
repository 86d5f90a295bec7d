"""How the worker image reaches the GPU nodes, on all five stack/mode runs.

x86 stacks stream it through an Artifact Registry remote repository in front of Docker Hub (the
APIs enabled by the program, the reader role for the nodes' service account, gcfsConfig on the
Standard pools; Autopilot streams by itself); A4X (arm64, streaming undocumented) and Standard
stacks with `verl-gke:imageStreaming false` pre-pull it with a DaemonSet. Every Docker Hub image of
every pod is rewritten to the repository, nothing else is. The start-up model uses the warm
streamed pull only after an earlier CPU-side streamed pull, and the plan says what the pull costs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pulumi
import pytest

from config.image_streaming import (
    ImagePullPlan,
    docker_hub_path,
    registry_image,
    through_registry,
)
from config.profiles import PROFILES
from config.settings import SettingsError, StackSettings, load_settings
from manifests import prepull
from planning import offline_engine
from planning.cost_facts import what_you_pay_for
from planning.offline_engine import PlanResult, RecordedResource, run_stack
from planning.startup_links import Lever, levers_in_graph
from planning.startup_schedule import schedule
from tests.program import COMBINATIONS, REAL, plan, run_facts
from tests.support import schemas

REPOSITORY = "gcp:artifactregistry/repository:Repository"
READER = "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember"
SERVICE = "gcp:projects/service:Service"
CLUSTER = "gcp:container/cluster:Cluster"
NODE_POOL = "gcp:container/nodePool:NodePool"
DAEMON_SET = "kubernetes:apps/v1:DaemonSet"
DATA_PREP_JOB = "kubernetes:batch/v1:Job"
RAY_CLUSTER = "kubernetes:ray.io/v1:RayCluster"
X86_STANDARD = [("a4", "standard"), ("a3u", "standard")]
AUTOPILOT = [c for c in COMBINATIONS if c[1] == "autopilot"]
X86 = [c for c in COMBINATIONS if c[0] != "a4x"]
OFF = {"verl-gke__imageStreaming": "false"}


def registry(stack: str) -> str:
    """The repository's image prefix in the test project and region (tests/program.py REAL)."""
    return f"us-central1-docker.pkg.dev/acme-ml-prod/verl-{stack}-dockerhub"


def settings_of(stack: str, mode: str, **extra: str) -> StackSettings:
    config = {**REAL, "verl-gke:mode": mode}
    config.update({key.replace("__", ":"): value for key, value in extra.items()})
    return load_settings(stack, config, offline=False).settings


def containers(node: Any) -> Iterator[dict[str, Any]]:
    """Every container and init container of a manifest, pod templates at any depth."""
    if isinstance(node, list):
        for item in node:
            yield from containers(item)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                yield from (c for c in value if isinstance(c, dict) and "image" in c)
            yield from containers(value)


def images_by_object(result: PlanResult) -> dict[str, list[str]]:
    return {
        r.name: [c["image"] for c in containers(dict(r.inputs))]
        for r in result.resources
        if r.type.startswith("kubernetes:") and "apiVersion" in r.inputs
    }


def prepullers(result: PlanResult) -> list[RecordedResource]:
    return [
        r
        for r in result.of_type(DAEMON_SET)
        if r.inputs["metadata"]["name"] == prepull.PREPULL_NAME
    ]


def gcfs(node_config: Any) -> bool | None:
    return ((node_config or {}).get("gcfsConfig") or {}).get("enabled")


def cpu_pool_gcfs(result: PlanResult) -> bool | None:
    (cpu_pool,) = result.one(CLUSTER).inputs["nodePools"]
    return gcfs(cpu_pool.get("nodeConfig"))


# --- the plan per stack and mode ----------------------------------------------------------------


def test_a4x_pre_pulls_and_creates_no_repository() -> None:
    result = plan("a4x", "standard")
    assert not result.of_type(REPOSITORY) and not result.of_type(READER)
    assert not result.of_type(SERVICE)
    assert gcfs(result.one(NODE_POOL).inputs["nodeConfig"]) is False
    assert cpu_pool_gcfs(result) is False
    (daemon_set,) = prepullers(result)
    pod = daemon_set.inputs["spec"]["template"]["spec"]
    (pull,) = pod["initContainers"]
    assert pull["image"] == PROFILES["a4x"].verl_image == "verlai/verl:vllm023.aarch64.dev1"
    assert pull["command"] == ["true"]
    # Nothing rewritten: no image in the project's Artifact Registry.
    for images in images_by_object(result).values():
        assert not any(image.startswith(registry("a4x")) for image in images)
    worker = result.one(RAY_CLUSTER).inputs["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert worker["containers"][0]["image"] == PROFILES["a4x"].verl_image


@pytest.mark.parametrize(("stack", "mode"), X86_STANDARD)
def test_x86_standard_streams_through_its_repository(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    repository = result.one(REPOSITORY).inputs
    assert repository["repositoryId"] == f"verl-{stack}-dockerhub"
    assert repository["location"] == "us-central1" and repository["project"] == "acme-ml-prod"
    assert repository["format"] == "DOCKER" and repository["mode"] == "REMOTE_REPOSITORY"
    upstream = repository["remoteRepositoryConfig"]["dockerRepository"]["publicRepository"]
    assert upstream == "DOCKER_HUB"
    reader = result.one(READER).inputs
    assert reader["role"] == "roles/artifactregistry.reader"
    # The nodes pull, as the service account they run as (Artifact Registry "Integrate with GKE").
    node_account = result.one(NODE_POOL).inputs["nodeConfig"]["serviceAccount"]
    assert reader["member"] == f"serviceAccount:{node_account}"
    assert reader["location"] == "us-central1"
    # Image streaming on the CPU pool (created inside the cluster) and on the GPU pool.
    assert cpu_pool_gcfs(result) is True
    assert gcfs(result.one(NODE_POOL).inputs["nodeConfig"]) is True
    assert not prepullers(result)
    worker = result.one(RAY_CLUSTER).inputs["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert worker["containers"][0]["image"] == f"{registry(stack)}/verlai/verl:vllm011.latest"
    assert Lever.IMAGE_STREAMING in levers_in_graph(result, "amd64")


@pytest.mark.parametrize(("stack", "mode"), AUTOPILOT)
def test_autopilot_streams_without_pool_settings_or_pre_pull(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    assert result.one(REPOSITORY).inputs["repositoryId"] == f"verl-{stack}-dockerhub"
    assert result.one(READER).inputs["role"] == "roles/artifactregistry.reader"
    cluster = result.one(CLUSTER).inputs
    # Autopilot streams eligible images by itself: no pools, no gcfsConfig anywhere.
    assert cluster["enableAutopilot"] is True
    assert "nodePools" not in cluster and not result.of_type(NODE_POOL)
    assert "gcfsConfig" not in str(cluster)
    assert not result.of_type(DAEMON_SET)
    job = result.one(DATA_PREP_JOB, "data-prep-job")
    assert [c["image"] for c in containers(dict(job.inputs))] == [
        f"{registry(stack)}/verlai/verl:vllm011.latest"
    ]


@pytest.mark.parametrize(("stack", "mode"), X86)
def test_the_program_enables_the_apis_and_everything_waits_for_what_it_needs(
    stack: str, mode: str
) -> None:
    result = plan(stack, mode)
    services = {r.inputs["service"]: r for r in result.of_type(SERVICE)}
    assert set(services) == {
        "containerfilesystem.googleapis.com",
        "artifactregistry.googleapis.com",
    }
    for service in services.values():
        # Destroying the stack leaves the APIs on: other workloads of the project may use them.
        assert service.inputs["disableOnDestroy"] is False
        assert service.inputs["project"] == "acme-ml-prod"
    streaming_api = services["containerfilesystem.googleapis.com"]
    repository, reader = result.one(REPOSITORY), result.one(READER)
    # The cluster (whose CPU pool streams on Standard) waits for the Container File System API,
    # the repository for the Artifact Registry API, the role for the repository.
    assert result.depends_on(result.one(CLUSTER), streaming_api)
    assert result.depends_on(repository, services["artifactregistry.googleapis.com"])
    assert result.depends_on(reader, repository)
    # Every object whose pods pull through the repository waits for it, the role and the API.
    pulling = [
        r
        for r in result.resources
        if any(
            image.startswith(registry(stack)) for image in images_by_object(result).get(r.name, [])
        )
    ]
    assert {r.type for r in pulling} == {DATA_PREP_JOB, RAY_CLUSTER}
    for resource in pulling:
        for needed in (repository, reader, streaming_api):
            assert result.depends_on(resource, needed), (resource.name, needed.name)


def test_streaming_off_on_a4_standard_pulls_from_docker_hub_and_pre_pulls() -> None:
    result = plan("a4", "standard", **OFF)
    assert not result.of_type(REPOSITORY) and not result.of_type(READER)
    assert not result.of_type(SERVICE)
    assert gcfs(result.one(NODE_POOL).inputs["nodeConfig"]) is False
    assert cpu_pool_gcfs(result) is False
    for images in images_by_object(result).values():
        assert not any(image.startswith(registry("a4")) for image in images)
    worker = result.one(RAY_CLUSTER).inputs["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert worker["containers"][0]["image"] == "verlai/verl:vllm011.latest"
    (daemon_set,) = prepullers(result)
    (pull,) = daemon_set.inputs["spec"]["template"]["spec"]["initContainers"]
    assert pull["image"] == "verlai/verl:vllm011.latest"
    levers = levers_in_graph(result, "amd64")
    assert Lever.PREPULL in levers and Lever.IMAGE_STREAMING not in levers


def test_streaming_off_on_autopilot_is_a_plain_pull() -> None:
    result = plan("a3u", "autopilot", **OFF)
    assert not result.of_type(REPOSITORY) and not result.of_type(SERVICE)
    # No pre-puller either: Autopilot creates the node for the pending worker, which pulls.
    assert not result.of_type(DAEMON_SET)
    worker = result.one(RAY_CLUSTER).inputs["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert worker["containers"][0]["image"] == "verlai/verl:vllm011.latest"


@pytest.mark.parametrize(("stack", "mode"), [("a4", "standard"), ("a3u", "autopilot")])
def test_every_docker_hub_image_of_every_pod_is_rewritten_and_nothing_else(
    stack: str, mode: str
) -> None:
    streamed, hub = images_by_object(plan(stack, mode)), images_by_object(plan(stack, mode, **OFF))
    plan_on = settings_of(stack, mode).image_pull
    # Same objects but the pre-puller (only without streaming); every image the same reference
    # with Docker Hub ones (and only those) moved under the repository.
    assert set(hub) - set(streamed) <= {"image-prepull-daemonset"}
    assert set(streamed) <= set(hub)
    rewritten = 0
    for name, images in streamed.items():
        assert images == [registry_image(image, plan_on) for image in hub[name]], name
        for before, after in zip(hub[name], images, strict=True):
            if docker_hub_path(before) is None:
                assert after == before
            else:
                assert after == f"{registry(stack)}/{docker_hub_path(before)}"
                rewritten += 1
    # The worker/head/data-prep verl images and the head's fluent-bit at least.
    assert rewritten >= 4
    everything = [image for images in streamed.values() for image in images]
    assert f"{registry(stack)}/fluent/fluent-bit:5.1.1" in everything
    assert all(docker_hub_path(image) is None for image in everything)


# --- the setting: refused where GKE does not document streaming ---------------------------------


def test_streaming_true_on_a4x_is_refused_with_a_fix_that_validates() -> None:
    config = {**REAL, "verl-gke:imageStreaming": "true"}
    with pytest.raises(SettingsError) as caught:
        load_settings("a4x", config, offline=False)
    message = str(caught.value)
    assert "verl-gke:imageStreaming = true" in message
    assert "Arm nodes" in message and "pre-pulls" in message
    fix = "pulumi config set verl-gke:imageStreaming false -s a4x"
    assert f"Fix: {fix}" in message
    # The fix, applied, is accepted (and so is removing the key).
    fixed = load_settings("a4x", {**config, "verl-gke:imageStreaming": "false"}, offline=False)
    assert fixed.settings.image_pull.prepull and not fixed.settings.image_pull.streaming
    assert load_settings("a4x", REAL, offline=False).settings.image_pull.prepull


def test_a_worker_image_that_cannot_stream_is_pre_pulled_and_said_so() -> None:
    # GKE streams Artifact Registry images only: a ghcr.io worker image is neither rewritten
    # nor streamed, so a Standard stack pre-pulls it, and the plan does not claim streaming.
    image = "ghcr.io/example/verl:1"
    result = plan("a3u", "standard", **{"verl-gke__verlImage": image})
    settings = settings_of("a3u", "standard", **{"verl-gke__verlImage": image})
    assert (settings.image_pull.streaming, settings.image_pull.prepull) == (False, True)
    worker = result.one(RAY_CLUSTER).inputs["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert worker["containers"][0]["image"] == image
    (daemon_set,) = prepullers(result)
    assert daemon_set.inputs["spec"]["template"]["spec"]["initContainers"][0]["image"] == image
    (line,) = [x for x in what_you_pay_for(result, settings) if "worker image:" in x]
    assert line.startswith("  worker image: pulled from ghcr.io by the DaemonSet verl-image-")
    assert "not streamed: the worker image ghcr.io/example/verl:1 is neither" in line
    # Asking for streaming anyway is refused with a fix that is itself accepted.
    config = {**REAL, "verl-gke:mode": "standard", "verl-gke:verlImage": image}
    with pytest.raises(SettingsError) as caught:
        load_settings("a3u", {**config, "verl-gke:imageStreaming": "true"}, offline=False)
    assert "neither on Docker Hub" in str(caught.value)
    assert "Fix: pulumi config set verl-gke:imageStreaming false -s a3u" in str(caught.value)
    load_settings("a3u", {**config, "verl-gke:imageStreaming": "false"}, offline=False)


def test_an_artifact_registry_worker_image_streams_as_it_is() -> None:
    image = "us-central1-docker.pkg.dev/acme-ml-prod/images/verl:1"
    result = plan("a3u", "standard", **{"verl-gke__verlImage": image})
    worker = result.one(RAY_CLUSTER).inputs["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert worker["containers"][0]["image"] == image
    assert not prepullers(result)
    assert gcfs(result.one(NODE_POOL).inputs["nodeConfig"]) is True


def test_streaming_true_on_a4x_stops_the_program_before_any_resource(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registered: list[str] = []
    original = offline_engine.RecordingMonitor.RegisterResource

    def counting(self: offline_engine.RecordingMonitor, request: Any) -> Any:
        registered.append(request.type)
        return original(self, request)

    monkeypatch.setattr(offline_engine.RecordingMonitor, "RegisterResource", counting)
    with pytest.raises(pulumi.RunError, match="verl-gke:imageStreaming = true"):
        run_stack("a4x", {**REAL, "verl-gke:imageStreaming": "true"}, strict=True)
    assert [t for t in registered if t != "pulumi:pulumi:Stack"] == []
    # The same counting sees the resources of an accepted run (the check above can fail).
    run_stack("a4x", dict(REAL), strict=True)
    assert REPOSITORY not in registered and DAEMON_SET in registered


@pytest.mark.parametrize(("stack", "mode"), X86)
def test_streaming_true_is_the_default_on_x86(stack: str, mode: str) -> None:
    default = settings_of(stack, mode).image_pull
    assert default == settings_of(stack, mode, **{"verl-gke__imageStreaming": "true"}).image_pull
    assert default.streaming and default.registry == registry(stack)
    assert default.pool_streaming == (mode == "standard") and not default.prepull


# --- image references ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("image", "path"),
    [
        ("ubuntu", "library/ubuntu"),
        ("ubuntu:24.04", "library/ubuntu:24.04"),
        ("library/ubuntu", "library/ubuntu"),
        ("verlai/verl:vllm011.latest", "verlai/verl:vllm011.latest"),
        ("docker.io/x/y:t", "x/y:t"),
        ("docker.io/ubuntu", "library/ubuntu"),
        ("index.docker.io/library/ubuntu:22.04", "library/ubuntu:22.04"),
        ("registry-1.docker.io/x/y", "x/y"),
        ("ubuntu@sha256:" + "a" * 64, "library/ubuntu@sha256:" + "a" * 64),
        ("x/y:t@sha256:" + "b" * 64, "x/y:t@sha256:" + "b" * 64),
        ("quay.io/x/y", None),
        ("localhost:5000/x", None),
        ("localhost/x", None),
        ("gke.gcr.io/pause:3.8@sha256:" + "c" * 64, None),
        ("us-central1-docker.pkg.dev/p/r/x/y:t", None),
        ("", None),
    ],
)
def test_docker_hub_path(image: str, path: str | None) -> None:
    assert docker_hub_path(image) == path


def test_through_registry_rewrites_container_images_only_and_is_idempotent() -> None:
    on = ImagePullPlan(True, True, False, "r", "eu-docker.pkg.dev/p/r")
    manifest = {
        "metadata": {"annotations": {"image": "ubuntu"}},
        "spec": {
            "template": {
                "spec": {
                    "initContainers": [{"name": "a", "image": "quay.io/x/y", "args": ["ubuntu"]}],
                    "containers": [
                        {"name": "b", "image": "ubuntu", "env": [{"name": "I", "value": "x/y"}]}
                    ],
                }
            },
            "groups": [{"template": {"spec": {"containers": [{"name": "c", "image": "x/y:1"}]}}}],
        },
    }
    out = through_registry(manifest, on)
    assert out["spec"]["template"]["spec"]["containers"][0] == {
        "name": "b",
        "image": "eu-docker.pkg.dev/p/r/library/ubuntu",
        "env": [{"name": "I", "value": "x/y"}],
    }
    assert out["spec"]["template"]["spec"]["initContainers"][0]["image"] == "quay.io/x/y"
    assert out["spec"]["groups"][0]["template"]["spec"]["containers"][0]["image"] == (
        "eu-docker.pkg.dev/p/r/x/y:1"
    )
    assert out["metadata"] == manifest["metadata"]
    # The input is not changed, and rewriting twice changes nothing more.
    assert manifest["spec"]["template"]["spec"]["containers"][0]["image"] == "ubuntu"
    assert through_registry(out, on) == out
    off = ImagePullPlan(False, False, True, None, None)
    assert through_registry(manifest, off) == manifest


# --- the pre-puller ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stack", "extra"),
    [
        ("a4x", {}),
        ("a4", OFF),
        ("a3u", {**OFF, "verl-gke__capacity": "flexStart"}),
    ],
)
def test_pre_puller_validates_and_lands_on_every_gpu_node(stack: str, extra: dict) -> None:
    unset = ("verl-gke:reservation",) if "verl-gke__capacity" in extra else ()
    result = plan(stack, "standard", unset=unset, **extra)
    (daemon_set,) = prepullers(result)
    body = dict(daemon_set.inputs)
    schemas.validate_core(body, PROFILES[stack].min_kubernetes_version)
    profile = PROFILES[stack]
    assert body["metadata"]["namespace"] == "kube-system"
    # Pulumi does not wait for a pod per node (a whole pull each) on later updates.
    assert body["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"
    pod = body["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-accelerator": profile.gpu_type,
        "kubernetes.io/arch": profile.arch,
    }
    # The GPU nodes' taints, as the Ray workers tolerate them (and the queued-provisioning one
    # where a ProvisioningRequest brings the nodes).
    worker = result.one(RAY_CLUSTER).inputs["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    for toleration in worker.get("tolerations", []):
        assert toleration in pod["tolerations"]
    assert [t.manifest() for t in profile.gpu_tolerations] == [
        t for t in pod["tolerations"] if t["key"] != "cloud.google.com/gke-queued"
    ]
    queued = "verl-gke__capacity" in extra
    assert any(t["key"] == "cloud.google.com/gke-queued" for t in pod["tolerations"]) == queued
    # It exists before the workers: on an autoscaled pool the workers bring the nodes.
    assert result.depends_on(result.one(RAY_CLUSTER), daemon_set)


def test_pre_puller_is_refused_where_the_nodes_stream() -> None:
    with pytest.raises(ValueError, match="without image streaming"):
        prepull.prepull_daemon_set(settings_of("a4", "standard"))
    with pytest.raises(ValueError, match="without image streaming"):
        prepull.prepull_daemon_set(settings_of("a4", "autopilot", **OFF))


# --- the start-up model: the first pull through a new repository is cold ----------------------


def without_cpu_streaming(result: PlanResult) -> PlanResult:
    """The recorded graph with the CPU pool not streaming (a cluster created before the setting:
    the inline pool is create-only)."""
    cluster = result.one(CLUSTER)
    inputs = dict(cluster.inputs)
    inputs["nodePools"] = [
        {**pool, "nodeConfig": {**pool["nodeConfig"], "gcfsConfig": {"enabled": False}}}
        for pool in inputs["nodePools"]
    ]
    resources = [
        dataclasses.replace(r, inputs=inputs) if r.urn == cluster.urn else r
        for r in result.resources
    ]
    return dataclasses.replace(result, resources=resources)


@pytest.mark.parametrize(("stack", "mode"), X86)
def test_the_gpu_nodes_stream_from_a_cache_the_cpu_side_filled(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    timed = schedule(result, run_facts(stack, mode), levers_in_graph(result, "amd64"))
    first = timed.first_pull
    assert first is not None and first.by == "the data-prep Job"
    # The CPU-side pull ends well before the GPU nodes start pulling (tens of minutes).
    assert first.warm and first.gpu_pull_starts - first.finished > 20
    (pull,) = [link for link in timed.worker_start if link.key == "image-pull"]
    assert pull.lever is Lever.IMAGE_STREAMING and "warm cache" in pull.title
    assert pull.minutes < timed.links.cold_pull.minutes
    # The first pull itself is modelled cold, at the plain pull's figure.
    plain = schedule(result, run_facts(stack, mode), set())
    (plain_pull,) = [link for link in plain.worker_start if link.key == "image-pull"]
    assert timed.links.cold_pull.minutes == plain_pull.minutes
    assert "first pull" in pull.source and "prewarming" in pull.source


@pytest.mark.parametrize(("stack", "mode"), X86_STANDARD)
def test_without_a_streamed_cpu_side_pull_the_gpu_nodes_pull_cold(stack: str, mode: str) -> None:
    warm_graph = plan(stack, mode)
    cold_graph = without_cpu_streaming(warm_graph)
    levers = levers_in_graph(warm_graph, "amd64")
    assert levers == levers_in_graph(cold_graph, "amd64")
    job = run_facts(stack, mode)
    warm, cold = schedule(warm_graph, job, levers), schedule(cold_graph, job, levers)
    assert cold.first_pull is None
    (pull,) = [link for link in cold.worker_start if link.key == "image-pull"]
    assert pull == cold.links.cold_pull and "cold cache" in pull.title
    assert cold.overlapped - warm.overlapped == pytest.approx(pull.minutes - 1.0)


# --- the plan says how the image arrives and what the first pull costs ------------------------


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_the_plan_says_how_the_worker_image_reaches_the_gpu_nodes(stack: str, mode: str) -> None:
    result = plan(stack, mode)
    settings = settings_of(stack, mode)
    (line,) = [x for x in what_you_pay_for(result, settings) if "worker image:" in x]
    timed = schedule(result, run_facts(stack, mode), levers_in_graph(result, PROFILES[stack].arch))
    cold = timed.links.cold_pull.minutes
    if stack == "a4x":
        assert f"DaemonSet {prepull.PREPULL_NAME} as each GPU node registers" in line
        assert "Arm nodes" in line
        (pull,) = [link for link in timed.worker_start if link.key == "image-pull"]
        assert f"~{pull.minutes:g} min per node" in line
        return
    assert f"streamed through {registry(stack)}" in line
    assert f"first pull through it is cold (~{cold:g} min)" in line
    first = timed.first_pull
    assert first is not None
    gap = first.gpu_pull_starts - first.finished
    assert f"the data-prep Job makes it ~{gap:.0f} min before the GPU nodes pull" in line


def test_the_plan_line_without_streaming_and_with_a_cold_cache() -> None:
    settings = settings_of("a4", "autopilot", **OFF)
    (line,) = [
        x
        for x in what_you_pay_for(plan("a4", "autopilot", **OFF), settings)
        if "worker image:" in x
    ]
    assert "pulled from Docker Hub when each Ray worker lands: ~6 min per node" in line
    assert "verl-gke:imageStreaming is false" in line
    settings = settings_of("a3u", "standard")
    (line,) = [
        x
        for x in what_you_pay_for(without_cpu_streaming(plan("a3u", "standard")), settings)
        if "worker image:" in x
    ]
    assert "nothing pulls the image through it before the GPU nodes" in line
    assert "their first pull is cold: ~6 min per node" in line
