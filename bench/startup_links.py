"""Modelled time to the first GRPO step: the duration of every link, with its source, and the
schedule of those links over the program's recorded resource graph.

Pure and light: standard library only, no Pulumi, no Ray. It reads a recorded graph handed to it
(anything shaped like tools/offline_engine.PlanResult: `resources` with urn/type/name/custom/
parent/inputs, `edges(resource)`, `one(type)`), so the offline plan can show the modelled minutes
of the run it just recorded:

    from bench.startup_links import levers_in_graph, schedule
    minutes = schedule(result, arch=profile.arch, levers=levers_in_graph(result)).overlapped

bench/critical_path.py records the graphs itself and prints the tables (`modelled_minutes`).

Every link is a `Link`: minutes, a source (URL or repository path of the figure it rests on) and
`estimate` (True where the figure is derived, scaled or guessed rather than published for a
comparable operation). A lever replaces the links it changes; the schedule still overlaps what the
graph lets overlap, so a lever's saving is what it takes off the longest path, not off a sum.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache
from types import MappingProxyType
from typing import Any, Protocol


class Lever(StrEnum):
    """Ways to shorten the start-up (issue 13). Each is an overlay on the recorded graph."""

    # Read-mostly GCS FUSE mount (metadata TTL unlimited, sized file cache in RAM/local SSD,
    # parallel downloads), explicit sidecar resources, and verl imported from a node-local copy.
    FUSE_TUNED = "fuse_tuned"
    # The worker image through an Artifact Registry remote repository, streamed by GKE.
    IMAGE_STREAMING = "image_streaming"
    # Standard: a DaemonSet pulls the worker image as soon as a GPU node registers.
    PREPULL = "prepull"
    # Standard: the cluster is created with its CPU pool, not with a default pool to delete.
    NO_DEFAULT_POOL = "no_default_pool"


ALL_LEVERS: frozenset[Lever] = frozenset(Lever)
NO_LEVERS: frozenset[Lever] = frozenset()

# What each lever rests on (the per-link sources below say how it is applied).
LEVER_SOURCES: Mapping[Lever, str] = MappingProxyType(
    {
        Lever.FUSE_TUNED: (
            "GoogleCloudPlatform/accelerated-platforms use-cases/inferencing/cost-optimization/"
            "storage-benchmarking/gcsfuse/README.md @edf5fc0: a ~141 GB model loads in ~40 s "
            "tuned vs ~1,200 s untuned (pod start ~3 min vs ~20 min)"
        ),
        Lever.IMAGE_STREAMING: (
            "wdenniss.com/using-image-streaming-with-dockerhub: container created in ~20 s "
            "instead of 3m50s; ai-on-gke best-practices/startup-latency.md: Triton 191 s -> 30 s"
        ),
        Lever.PREPULL: (
            "ai-on-gke best-practices/startup-latency.md 'Use a preloader DaemonSet': it starts "
            "before the GPU driver is installed (~30 s), the worker then finds the layers"
        ),
        Lever.NO_DEFAULT_POOL: (
            "terraform-provider-google resource_container_cluster.go deletes default-pool inside "
            "the cluster's create; terraform-google-kubernetes-engine#1227: a cluster is 'a bit "
            "under 6 min' without that removal"
        ),
    }
)


@dataclass(frozen=True)
class Link:
    """One step on the way to the first training step."""

    key: str
    title: str
    minutes: float
    source: str
    estimate: bool
    # The lever that set this value; None where it is today's value.
    lever: Lever | None = None

    def __post_init__(self) -> None:
        if not self.source.strip():
            raise ValueError(f"link {self.key!r} has no source")
        if self.minutes < 0:
            raise ValueError(f"link {self.key!r} has negative minutes {self.minutes}")


def _link(key: str, title: str, minutes: float, source: str, *, estimate: bool) -> Link:
    return Link(key, title, minutes, source, estimate)


# ---------------------------------------------------------------------------------------------
# Facts the durations depend on, read from the recorded graph
# ---------------------------------------------------------------------------------------------

CLUSTER = "gcp:container/cluster:Cluster"
NODE_POOL = "gcp:container/nodePool:NodePool"
RAY_CLUSTER = "kubernetes:ray.io/v1:RayCluster"
DATA_PREP_JOB = "kubernetes:batch/v1:Job"
DAEMON_SET = "kubernetes:apps/v1:DaemonSet"
PERSISTENT_VOLUME = "kubernetes:core/v1:PersistentVolume"
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
GCSFUSE_DRIVER = "gcsfuse.csi.storage.gke.io"
# The verl entry point of the GRPO job; other Ray jobs (the fabric check) run before it.
GRPO_ENTRYPOINT = "verl.trainer.main_ppo"
ARCHES = ("amd64", "arm64")


class Resource(Protocol):
    urn: str
    type: str
    name: str
    custom: bool
    parent: str
    inputs: Mapping[str, Any]


class Graph(Protocol):
    resources: list[Any]

    def edges(self, resource: Any) -> set[str]: ...

    def one(self, type_: str, name: str | None = None) -> Any: ...


@dataclass(frozen=True)
class ModelWeights:
    name: str
    gigabytes: float
    source: str
    estimate: bool


# Checkpoint sizes the durations scale with. Others: 2 bytes (bf16) per parameter of the size in
# the model's name, flagged as an estimate.
KNOWN_WEIGHTS: Mapping[str, ModelWeights] = MappingProxyType(
    {
        "qwen2.5-32b-instruct": ModelWeights(
            "Qwen2.5-32B-Instruct",
            66.0,
            "seed (gke-verl-grpo-tutorial): the Qwen2.5-32B-Instruct download 'needs about 66 GB'",
            estimate=False,
        )
    }
)
_PARAMS_IN_NAME = re.compile(r"(?<![0-9.])([0-9]+(?:\.[0-9]+)?)[bB](?![a-zA-Z])")


def model_weights(model_path: str) -> ModelWeights:
    name = model_path.rstrip("/").rsplit("/", 1)[-1]
    known = KNOWN_WEIGHTS.get(name.lower())
    if known is not None:
        return known
    match = _PARAMS_IN_NAME.search(name)
    if match is None:
        raise ValueError(
            f"model {model_path!r}: its size is not known and its name carries no parameter count "
            f"(e.g. 'Qwen2.5-32B-Instruct'); add it to bench/startup_links.py KNOWN_WEIGHTS"
        )
    billions = float(match.group(1))
    return ModelWeights(
        name,
        round(billions * 2, 1),
        f"est.: {billions:g} B parameters (from the name) x 2 bytes (bf16)",
        estimate=True,
    )


@dataclass(frozen=True)
class StartupFacts:
    """What the durations depend on, as the recorded program says it."""

    mode: str  # "standard" | "autopilot"
    arch: str  # "amd64" | "arm64"
    removes_default_pool: bool
    worker_image: str
    worker_init_containers: tuple[str, ...]
    worker_post_start: bool
    # Multi-node NVLink: the workers claim an IMEX channel of a ComputeDomain.
    imex_channel: bool
    weights: ModelWeights
    reference_model: bool
    val_before_train: bool
    python_path: str = ""
    fuse_mount_paths: tuple[str, ...] = field(default=())


def _hydra_overrides(entrypoint: str) -> dict[str, str]:
    return dict(
        arg.split("=", 1)
        for arg in shlex.split(entrypoint)
        if "=" in arg and not arg.startswith("-")
    )


def _true(value: str | None, default: bool) -> bool:
    if value is None:
        return default
    return value.strip().lower() in ("true", "1", "yes")


def _ray_jobs(result: Graph) -> list[Any]:
    return [r for r in result.resources if r.type.startswith("pulumi-python:dynamic")]


def _is_grpo(resource: Any) -> bool:
    return GRPO_ENTRYPOINT in str(resource.inputs.get("entrypoint", ""))


def _worker_pod(result: Graph) -> Mapping[str, Any]:
    spec = result.one(RAY_CLUSTER).inputs["spec"]
    return spec["workerGroupSpecs"][0]["template"]


def startup_facts(result: Graph, arch: str) -> StartupFacts:
    """The facts of one recorded stack/mode. `arch` is the profile's (amd64/arm64)."""
    if arch not in ARCHES:
        raise ValueError(f"arch {arch!r}: one of {', '.join(ARCHES)} (the profile's arch)")
    cluster = result.one(CLUSTER).inputs
    mode = "autopilot" if cluster.get("enableAutopilot") else "standard"
    pod = _worker_pod(result)
    pod_spec = pod["spec"]
    worker = pod_spec["containers"][0]
    claims = [c.get("name", "") for c in pod_spec.get("resourceClaims", [])]
    grpo = [r for r in _ray_jobs(result) if _is_grpo(r)]
    if len(grpo) != 1:
        raise LookupError(f"expected one Ray job running {GRPO_ENTRYPOINT}, found {len(grpo)}")
    job = grpo[0].inputs
    overrides = _hydra_overrides(str(job["entrypoint"]))
    model_path = overrides.get("actor_rollout_ref.model.path")
    if not model_path:
        raise LookupError("the GRPO entrypoint sets no actor_rollout_ref.model.path")
    env = (job.get("runtime_env") or {}).get("env_vars") or {}
    fuse_volumes = {
        v["name"]
        for v in pod_spec.get("volumes", [])
        if "persistentVolumeClaim" in v or (v.get("csi") or {}).get("driver") == GCSFUSE_DRIVER
    }
    fuse_paths = tuple(
        m["mountPath"] for m in worker.get("volumeMounts", []) if m.get("name") in fuse_volumes
    )
    return StartupFacts(
        mode=mode,
        arch=arch,
        removes_default_pool=mode == "standard" and bool(cluster.get("removeDefaultNodePool")),
        worker_image=str(worker["image"]),
        worker_init_containers=tuple(c["name"] for c in pod_spec.get("initContainers", [])),
        worker_post_start="postStart" in (worker.get("lifecycle") or {}),
        imex_channel=any("compute-domain" in c for c in claims),
        weights=model_weights(model_path),
        # verl builds the reference policy when the KL term needs it (loss or reward).
        reference_model=_true(overrides.get("actor_rollout_ref.actor.use_kl_loss"), False)
        or _true(overrides.get("algorithm.use_kl_in_reward"), False),
        # verl's trainer config: val_before_train defaults to True.
        val_before_train=_true(overrides.get("trainer.val_before_train"), True),
        python_path=str(env.get("PYTHONPATH", "")),
        fuse_mount_paths=fuse_paths,
    )


# ---------------------------------------------------------------------------------------------
# Which levers a recorded program already has
# ---------------------------------------------------------------------------------------------


def _pod_images(pod_spec: Mapping[str, Any]) -> set[str]:
    containers = [*pod_spec.get("containers", []), *pod_spec.get("initContainers", [])]
    return {str(c.get("image", "")) for c in containers}


def _streaming_enabled(result: Graph, mode: str) -> bool:
    if mode == "autopilot":
        return True  # GKE: "Autopilot clusters automatically use Image streaming"
    pools = [r for r in result.resources if r.type == NODE_POOL and r.name == "gpu-pool"]
    if any(
        ((p.inputs.get("nodeConfig") or {}).get("gcfsConfig") or {}).get("enabled") for p in pools
    ):
        return True
    defaults = (result.one(CLUSTER).inputs.get("nodePoolDefaults") or {}).get(
        "nodeConfigDefaults"
    ) or {}
    return bool((defaults.get("gcfsConfig") or {}).get("enabled"))


def _fuse_tuned(result: Graph, facts: StartupFacts) -> bool:
    entries = [entry for entry in facts.python_path.split(":") if entry]
    node_local_verl = bool(entries) and not any(
        entry.startswith(path) for entry in entries for path in facts.fuse_mount_paths
    )
    annotations = (_worker_pod(result).get("metadata") or {}).get("annotations") or {}
    sidecar_sized = any(
        key.startswith("gke-gcsfuse/") and key.endswith(("-limit", "-request"))
        for key in annotations
    )
    read_mostly_cached = False
    for pv in (r for r in result.resources if r.type == PERSISTENT_VOLUME):
        spec = pv.inputs.get("spec") or {}
        if (spec.get("csi") or {}).get("driver") != GCSFUSE_DRIVER:
            continue
        options = set(spec.get("mountOptions") or [])
        attributes = (spec.get("csi") or {}).get("volumeAttributes") or {}
        ttl_unlimited = (
            "metadata-cache-ttl-secs=-1" in options
            or attributes.get("metadataCacheTTLSeconds") == "-1"
        )
        cache_on = (
            any(o.startswith("file-cache:max-size-mb:") and not o.endswith(":0") for o in options)
            or attributes.get("fileCacheCapacity", "0") != "0"
        )
        read_mostly_cached = read_mostly_cached or (ttl_unlimited and cache_on)
    return node_local_verl and sidecar_sized and read_mostly_cached


def levers_in_graph(result: Graph, arch: str) -> frozenset[Lever]:
    """The levers the recorded program implements, by what they look like in its resources:

    - no_default_pool: a Standard cluster that does not remove a default pool;
    - image_streaming: the worker image in Artifact Registry (`*-docker.pkg.dev`) and streaming
      on (Autopilot always; Standard: the GPU pool's or the cluster default `gcfsConfig`);
    - prepull: a DaemonSet whose pods use the worker image;
    - fuse_tuned: verl on PYTHONPATH outside the FUSE mount, sized sidecar annotations and a
      gcsfuse PV with metadata TTL -1 and a file cache.
    """
    facts = startup_facts(result, arch)
    found: set[Lever] = set()
    if facts.mode == "standard" and not facts.removes_default_pool:
        found.add(Lever.NO_DEFAULT_POOL)
    registry = facts.worker_image.split("/", 1)[0]
    if registry.endswith("-docker.pkg.dev") and _streaming_enabled(result, facts.mode):
        found.add(Lever.IMAGE_STREAMING)
    for ds in (r for r in result.resources if r.type == DAEMON_SET):
        template = ((ds.inputs.get("spec") or {}).get("template") or {}).get("spec") or {}
        if facts.worker_image in _pod_images(template):
            found.add(Lever.PREPULL)
    if _fuse_tuned(result, facts):
        found.add(Lever.FUSE_TUNED)
    return frozenset(found)


# ---------------------------------------------------------------------------------------------
# Durations
# ---------------------------------------------------------------------------------------------

# Resource types whose duration does not depend on the stack or a lever.
_GCE_OP = _link(
    "gce-op",
    "GCE network operation",
    0.5,
    "est.: one GCE global/regional operation (tens of seconds)",
    estimate=True,
)
_K8S_OBJECT = _link(
    "k8s-object",
    "Kubernetes object",
    0.1,
    "est.: one API-server write; no await beyond existence",
    estimate=True,
)
RESOURCE_LINKS: Mapping[str, Link] = MappingProxyType(
    {
        "gcp:compute/network:Network": _GCE_OP,
        "gcp:compute/subnetwork:Subnetwork": _GCE_OP,
        "gcp:compute/firewall:Firewall": _GCE_OP,
        "gcp:compute/router:Router": _GCE_OP,
        "gcp:compute/routerNat:RouterNat": _GCE_OP,
        "gcp:compute/resourcePolicy:ResourcePolicy": _GCE_OP,
        "pulumi:providers:kubernetes": _link(
            "k8s-provider", "Kubernetes provider", 0.0, "no cloud operation", estimate=False
        ),
        "gcp:storage/bucket:Bucket": _link(
            "bucket", "GCS bucket", 0.1, "est.: one GCS API call", estimate=True
        ),
        "gcp:storage/bucketIAMMember:BucketIAMMember": _link(
            "bucket-iam",
            "bucket IAM member",
            0.3,
            "est.: read-modify-write of the bucket IAM policy",
            estimate=True,
        ),
        "gcp:projects/service:Service": _link(
            "api-enable",
            "Google API enabled (Service Usage)",
            0.5,
            "est.: one Service Usage enable operation; seconds where the API is already on",
            estimate=True,
        ),
        "gcp:artifactregistry/repository:Repository": _link(
            "ar-repository",
            "Artifact Registry remote repository",
            0.2,
            "est.: one Artifact Registry create operation (no image is fetched until a pull)",
            estimate=True,
        ),
        "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember": _link(
            "ar-repository-iam",
            "repository IAM member",
            0.3,
            "est.: read-modify-write of the repository IAM policy",
            estimate=True,
        ),
        "gcp:serviceaccount/account:Account": _link(
            "service-account",
            "node service account",
            0.1,
            "est.: one IAM create call",
            estimate=True,
        ),
        "gcp:projects/iAMMember:IAMMember": _link(
            "project-iam",
            "project IAM member",
            0.3,
            "est.: read-modify-write of the project IAM policy",
            estimate=True,
        ),
        DAEMON_SET: _link(
            "daemonset",
            "DaemonSet",
            0.2,
            "no GPU node exists yet when it is created: 0 pods to await",
            estimate=True,
        ),
        "kuberay-release": _link(
            "kuberay-release",
            "KubeRay operator (Helm)",
            1.5,
            "est.: helm install + operator image pull, one pod",
            estimate=True,
        ),
        "dra-release": _link(
            "dra-release",
            "NVIDIA DRA driver (Helm)",
            2.5,
            "est.: helm install, controller + plugin image pulls",
            estimate=True,
        ),
        "data-prep": _link(
            "data-prep",
            "data preparation Job",
            12.0,
            "est.: verl image pull ~3 min, clone + GSM8K ~1.5 min, the ~66 GB model (seed) at "
            "~150 MB/s through GCS FUSE ~7.5 min; the tutorial scripts allow 60 min",
            estimate=True,
        ),
    }
)

# Google's published GCS FUSE model-load figures (LEVER_SOURCES[FUSE_TUNED]): ~141 GB model.
_GOOGLE_MODEL_GB = 141.0
_UNTUNED_LOAD_S = 1200.0
_TUNED_LOAD_S = 40.0
_FSDP_INIT_MIN = 0.5
_DRIVER_MIN = 0.5
# Why a streamed pull needs an earlier one (the sources of the cold and warm pull links).
STREAMING_FIRST_PULL = (
    "GKE 'Use Image streaming' limitations: 'During the first pull of an eligible image you "
    "might not notice the benefit'; Artifact Registry 'Reduce latency with image prewarming': "
    "the Image streaming cache 'typically populates on the first pull from a client that has "
    "image streaming enabled'"
)


@dataclass(frozen=True)
class StartupLinks:
    """Every link of one stack/mode under one set of levers, grouped by where it sits."""

    facts: StartupFacts
    levers: frozenset[Lever]
    # Applied to resources of the graph.
    cluster: tuple[Link, ...]
    cpu_pool: Link
    gpu_nodes: Link
    autopilot_cpu_node: Link
    # After the GPU nodes exist, until every Ray worker is ready (the RayCluster's wait).
    worker_start: tuple[Link, ...]
    # The worker image's pull when no earlier pull warmed the streaming cache (the same link as
    # in worker_start without image streaming).
    cold_pull: Link
    # The Ray jobs: the fabric check, then GRPO until verl logs its first training step.
    job_submit: Link
    fabric_check: Link
    grpo: tuple[Link, ...]
    # Levers asked for that do not apply here, with the reason.
    not_applied: Mapping[Lever, str]

    def cold_worker_start(self) -> tuple[Link, ...]:
        """worker_start with the pull from a cold streaming cache."""
        return tuple(
            self.cold_pull if link.key == self.cold_pull.key else link for link in self.worker_start
        )

    def all(self) -> tuple[Link, ...]:
        return (
            *self.cluster,
            self.cpu_pool,
            self.gpu_nodes,
            *((self.autopilot_cpu_node,) if self.facts.mode == "autopilot" else ()),
            *self.worker_start,
            self.job_submit,
            self.fabric_check,
            *self.grpo,
        )


def _applicable(facts: StartupFacts, lever: Lever) -> str | None:
    """None where the lever applies to this stack/mode, else why not."""
    if lever is Lever.NO_DEFAULT_POOL and facts.mode == "autopilot":
        return "Autopilot clusters have no default node pool"
    if lever is Lever.PREPULL and facts.mode == "autopilot":
        return (
            "Autopilot creates the node for the pending worker pod, which is bound and pulls at "
            "once: a pre-puller gains nothing (est., r2-ttfs-facts §4)"
        )
    if lever is Lever.IMAGE_STREAMING and facts.arch == "arm64":
        return (
            "arm64 support of GKE Image streaming is not documented (the 'Use Image streaming' "
            "requirements and limitations name no architecture): no saving modelled; pre-pull "
            "instead"
        )
    return None


def links(facts: StartupFacts, levers: Iterable[Lever] = NO_LEVERS) -> StartupLinks:
    """The duration of every link for these facts with these levers on."""
    asked = frozenset(levers)
    not_applied = {lv: why for lv in asked if (why := _applicable(facts, lv)) is not None}
    on = asked - not_applied.keys()
    autopilot = facts.mode == "autopilot"

    # --- cluster and node pools --------------------------------------------------------------
    if autopilot:
        cluster: tuple[Link, ...] = (
            _link(
                "cluster",
                "GKE Autopilot cluster create",
                10.0,
                "Cluster Toolkit gcluster_job_guide.md: a GKE deployment 'can take 10-20 "
                "minutes'; pubsec-declarative-toolkit#464: Autopilot past 83% in under 15 min",
                estimate=True,
            ),
        )
    else:
        cluster = (
            _link(
                "cluster",
                "GKE Standard cluster create",
                6.0,
                "terraform-google-kubernetes-engine#1227: a Standard cluster takes 'a bit under "
                "6 min' to create without default-pool removal",
                estimate=False,
            ),
        )
        # Durations follow the levers, not the recording, so that "no levers" stays the baseline
        # of issue 13 whichever levers the program implements by now (levers_in_graph).
        delete = _link(
            "default-pool-delete",
            "default-pool delete (inside the cluster create)",
            3.0,
            "terraform-provider-google resource_container_cluster.go: remove_default_node_pool "
            "deletes default-pool before the create returns; no published duration: est. "
            "2-4 min for one node-pool delete",
            estimate=True,
        )
        if Lever.NO_DEFAULT_POOL in on:
            delete = Link(
                delete.key,
                delete.title,
                0.0,
                "cluster created with its CPU pool (GKE API Cluster.nodePools: a cluster "
                "with node pools and no initial_node_count has no default pool)",
                estimate=False,
                lever=Lever.NO_DEFAULT_POOL,
            )
        cluster = (*cluster, delete)
    cpu_pool = _link(
        "cpu-pool",
        "CPU node pool (separate resource)",
        5.0,
        "est.: an n4-highmem-16 node pool, one node; GKE runs one operation per node pool at a "
        "time, so it does not hold up the GPU pool (GKE 'Troubleshoot concurrent operations')",
        estimate=True,
    )
    if Lever.NO_DEFAULT_POOL in on:
        cpu_pool = Link(
            cpu_pool.key,
            cpu_pool.title,
            0.0,
            "est.: created inside the cluster operation in place of the default pool it replaces",
            estimate=True,
            lever=Lever.NO_DEFAULT_POOL,
        )
    gpu_nodes = _link(
        "gpu-nodes",
        "GPU nodes (Autopilot, for the pending workers)" if autopilot else "GPU node pool",
        35.0,
        "no published A3 Ultra/A4/A4X figure; NVIDIA/aicr#2065 reports ~35 min for a node pool "
        "to reach RUNNING (a CPU worker pool, r2-ttfs-facts §6): conservative est., range 10-35",
        estimate=True,
    )
    autopilot_cpu_node = _link(
        "autopilot-cpu-node",
        "Autopilot node for the data-prep pod",
        4.0,
        "est.: Autopilot node provisioning for a pending pod (Performance class)",
        estimate=True,
    )

    # --- Ray workers on the new GPU nodes ----------------------------------------------------
    driver = _link(
        "gpu-driver",
        "GPU driver + device plugin on the new node",
        _DRIVER_MIN,
        "ai-on-gke best-practices/startup-latency.md: 'driver installation takes ~30 seconds'",
        estimate=False,
    )
    pull = _link(
        "image-pull",
        "worker image pull (fresh node)",
        6.0,
        "est.: verl image 12-15 GB compressed (vllm/vllm-openai ~12 GB: vllm#27154, #22377); "
        "10 GB pulls in 4-5 min on a fresh node (Union.ai blog) => 5-8 min; Anyscale KB: >= 10 GB "
        "images can exceed 10 min",
        estimate=True,
    )
    # Image streaming is fast only from a warm cache: the repository is new per stack, and GKE
    # says the first pull of an eligible image may show no benefit. schedule() uses the warm link
    # only where an earlier streamed pull of the same image (the data-prep Job, the x86 head on
    # the CPU side) has finished before the GPU nodes start pulling, else the cold one.
    cold_pull = pull
    if Lever.IMAGE_STREAMING in on:
        cold_pull = Link(
            pull.key,
            "worker image (streamed, cold cache)",
            pull.minutes,
            f"the pull above ({pull.minutes:g} min): {STREAMING_FIRST_PULL}; no earlier pull of "
            "the image through the stack's new repository finished before the GPU nodes pulled",
            estimate=True,
            lever=Lever.IMAGE_STREAMING,
        )
        pull = Link(
            pull.key,
            "worker image (streamed, warm cache)",
            1.0,
            "ai-on-gke startup-latency.md Triton 191 s -> 30 s; wdenniss.com 3m50s -> ~20 s; "
            "+0.5 min est. for files read lazily at start (GKE 'Use Image streaming' "
            f"limitations); warm cache: {STREAMING_FIRST_PULL}, and here that first pull is the "
            "CPU side's (data-prep Job, x86 head), which schedule() checks ends before the GPU "
            "nodes pull",
            estimate=True,
            lever=Lever.IMAGE_STREAMING,
        )
    if Lever.PREPULL in on:
        # The pull starts when the node registers, so the driver install overlaps it.
        pull = Link(
            pull.key,
            pull.title + ", pre-pulled",
            max(0.0, pull.minutes - driver.minutes),
            f"the pull above ({pull.minutes:g} min) minus the driver install it overlaps: a "
            "DaemonSet pulls from node registration (ai-on-gke best-practices/startup-latency.md "
            "'Use a preloader DaemonSet': runs before the ~30 s GPU driver install)",
            estimate=True,
            lever=Lever.PREPULL,
        )
    worker_start: list[Link] = [driver, pull]
    for name in facts.worker_init_containers:
        worker_start.append(
            _link(
                f"init-{name}",
                f"worker init container {name}",
                0.75,
                "est. 0.5-1 min: apt-get update + install nccl-gib-plugins from "
                "packages.cloud.google.com (manifests/ray_cluster.py GIB_APT_INSTALL, tutorial "
                "§5.1)"
                if name == "gib-setup"
                else "est.: one init container of the worker image",
                estimate=True,
            )
        )
    if facts.imex_channel:
        worker_start.append(
            _link(
                "imex",
                "IMEX daemons for the ComputeDomain channel",
                0.5,
                "est.: the NVIDIA DRA driver starts an IMEX daemon per node before the channel "
                "claim is prepared; no published figure",
                estimate=True,
            )
        )
    worker_start.append(
        _link(
            "ray-start",
            "FUSE mount, ray start, worker joins",
            0.3,
            "est.: seconds for the GCS FUSE sidecar mount and `ray start` joining the head",
            estimate=True,
        )
    )
    if facts.worker_post_start:
        worker_start.append(
            _link(
                "post-start-pip",
                "worker postStart pip install",
                0.3,
                "est.: one small pip install from PyPI (TransferQueue, seed A4X)",
                estimate=True,
            )
        )

    # --- the Ray jobs --------------------------------------------------------------------------
    job_submit = _link(
        "job-submit",
        "Ray job submission until RUNNING",
        0.5,
        "est.: Ray Jobs API through the API-server service proxy",
        estimate=True,
    )
    fabric_check = _link(
        "fabric-check",
        "fabric check (NCCL all-reduce sweep)",
        1.0,
        "est.: NCCL init and all-reduce 1 MiB-1 GiB on every GPU (payloads/fabric/"
        "fabric_check.py), torch from the image",
        estimate=True,
    )
    verl_import = _link(
        "verl-import",
        "verl import through GCS FUSE",
        1.0,
        "est. 0.5-2 min: PYTHONPATH=/data/verl on a metadata-cache-ttl-secs=0 mount, every stat "
        "goes to GCS through a 250m-CPU default sidecar (gcs-fuse-csi-driver cmd/webhook/main.go); "
        "verl v0.6.1 = 346 files (r2-ttfs-facts §2)",
        estimate=True,
    )
    weights = facts.weights
    scale = weights.gigabytes / _GOOGLE_MODEL_GB
    actor = _link(
        "actor-load",
        f"actor model load ({weights.gigabytes:g} GB, rank 0 reads)",
        scale * _UNTUNED_LOAD_S / 60 + _FSDP_INIT_MIN,
        f"est.: ~1,200 s for ~141 GB untuned ({LEVER_SOURCES[Lever.FUSE_TUNED]}) scaled to "
        f"{weights.gigabytes:g} GB ({weights.source}) + {_FSDP_INIT_MIN} min FSDP shard/broadcast "
        "(verl fsdp_utils.get_init_weight_context_manager: rank 0 materialises, others meta)",
        estimate=True,
    )
    if Lever.FUSE_TUNED in on:
        verl_import = Link(
            verl_import.key,
            verl_import.title,
            0.1,
            "est.: local files, seconds (r2-ttfs-facts §2: tarball untarred by an initContainer)",
            estimate=True,
            lever=Lever.FUSE_TUNED,
        )
        actor = Link(
            actor.key,
            actor.title,
            scale * _TUNED_LOAD_S / 60 + _FSDP_INIT_MIN,
            f"est.: ~40 s for ~141 GB tuned ({LEVER_SOURCES[Lever.FUSE_TUNED]}) scaled to "
            f"{weights.gigabytes:g} GB + {_FSDP_INIT_MIN} min FSDP; on Autopilot the sidecar is "
            "capped at 2 vCPU / 14 GiB on GPU nodes (gcs-fuse-csi-driver docs/troubleshooting.md)",
            estimate=True,
            lever=Lever.FUSE_TUNED,
        )
    grpo: list[Link] = [verl_import, actor]
    if facts.reference_model:
        grpo.append(
            _link(
                "ref-load",
                "reference model load (same files)",
                0.2 + _FSDP_INIT_MIN,
                "est.: rank 0 re-reads the files it just read; gcsfuse keeps the kernel page "
                "cache across opens of an unchanged object (GoogleCloudPlatform/gcsfuse@7b39292 "
                "internal/fs/fs.go OpenFile: KeepPageCache = true) => RAM-speed read + "
                f"{_FSDP_INIT_MIN} min FSDP, with or without a tuned mount",
                estimate=True,
            )
        )
    grpo.append(
        _link(
            "vllm-start",
            "vLLM engine start (compile + CUDA graphs)",
            1.5,
            "est. 1-2 min: torch.compile ~8-50 s + CUDA-graph capture 10-65 s (vllm-project/vllm "
            "#20264, #16716, PR #11005); verl's rollout starts from dummy weights",
            estimate=True,
        )
    )
    if facts.val_before_train:
        grpo.append(
            _link(
                "validation",
                "validation before the first step",
                1.5,
                "est. 1-2 min: one generation pass over the GSM8K test split (1,319 prompts); "
                "verl's trainer.val_before_train defaults to true and this job leaves it on",
                estimate=True,
            )
        )
    grpo.append(
        _link(
            "first-step",
            "first GRPO step (rollout, log-probs, update)",
            3.0,
            "est. 2-4 min: no published 32B step time on these GPUs; volcengine/verl PR #7833: "
            "Qwen3.5-9B GRPO GSM8K on 8xB200 83-88 s/step, here 32B on 16 GPUs, 256 prompts x 8",
            estimate=True,
        )
    )
    return StartupLinks(
        facts=facts,
        levers=frozenset(on),
        cluster=cluster,
        cpu_pool=cpu_pool,
        gpu_nodes=gpu_nodes,
        autopilot_cpu_node=autopilot_cpu_node,
        worker_start=tuple(worker_start),
        cold_pull=cold_pull,
        job_submit=job_submit,
        fabric_check=fabric_check,
        grpo=tuple(grpo),
        not_applied=MappingProxyType(not_applied),
    )


# ---------------------------------------------------------------------------------------------
# The schedule over the recorded graph
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One resource (or physical wait) on the critical path and the links it took."""

    name: str
    finished: float
    links: tuple[Link, ...]


@dataclass(frozen=True)
class FirstPull:
    """The first streamed pull of the worker image through the stack's new repository, which
    fills the streaming cache (STREAMING_FIRST_PULL), against the GPU nodes' own pull."""

    # The CPU-side pod that makes it: "the data-prep Job" or "the Ray head".
    by: str
    finished: float
    gpu_pull_starts: float

    @property
    def warm(self) -> bool:
        """Do the GPU nodes find the cache filled?"""
        return self.finished <= self.gpu_pull_starts


@dataclass(frozen=True)
class Schedule:
    mode: str
    arch: str
    levers: frozenset[Lever]
    # Longest path through the graph (this program), minutes.
    overlapped: float
    # (a) every step one after another; (b) the unavoidable chain.
    sequential: float
    chain: float
    path: tuple[Step, ...]
    links: StartupLinks
    # The links the workers took after their GPU nodes existed (links.worker_start, or its cold
    # variant when no earlier streamed pull warmed the cache).
    worker_start: tuple[Link, ...]
    # With image streaming: the earliest CPU-side streamed pull of the worker image (None: no
    # streaming, or none before the GPU nodes).
    first_pull: FirstPull | None

    @property
    def estimated_minutes(self) -> float:
        """Minutes of the critical path that rest on estimates."""
        return sum(link.minutes for step in self.path for link in step.links if link.estimate)


def _custom_dependencies(result: Graph) -> dict[str, set[str]]:
    """For each custom resource, the custom resources it waits for (components expanded)."""
    by_urn = {r.urn: r for r in result.resources}
    children: dict[str, list[str]] = {}
    for r in result.resources:
        children.setdefault(r.parent, []).append(r.urn)

    @cache
    def custom_leaves(urn: str) -> frozenset[str]:
        resource = by_urn.get(urn)
        if resource is None:
            return frozenset()
        if resource.custom:
            return frozenset({urn})
        return frozenset().union(*(custom_leaves(c) for c in children.get(urn, [])))

    return {
        r.urn: set().union(*(custom_leaves(e) for e in result.edges(r)))
        for r in result.resources
        if r.custom
    }


def _is_gpu_pool(resource: Any) -> bool:
    return resource.type == NODE_POOL and resource.name == "gpu-pool"


def resource_links(resource: Any, table: StartupLinks) -> tuple[Link, ...]:
    """The links one recorded resource stands for (its own operation, not the waits around it)."""
    autopilot = table.facts.mode == "autopilot"
    if resource.type == CLUSTER:
        return table.cluster
    if resource.type == NODE_POOL:
        return (table.gpu_nodes,) if _is_gpu_pool(resource) else (table.cpu_pool,)
    if resource.type == HELM_RELEASE and resource.name in RESOURCE_LINKS:
        return (RESOURCE_LINKS[resource.name],)
    if resource.type == DATA_PREP_JOB:
        data_prep = RESOURCE_LINKS["data-prep"]
        return (table.autopilot_cpu_node, data_prep) if autopilot else (data_prep,)
    if resource.type.startswith("pulumi-python:dynamic"):
        if _is_grpo(resource):
            return (table.job_submit, *table.grpo)
        return (table.job_submit, table.fabric_check)
    if resource.type in RESOURCE_LINKS:
        return (RESOURCE_LINKS[resource.type],)
    if resource.type.startswith("kubernetes:"):
        return (_K8S_OBJECT,)
    raise KeyError(
        f"no duration for {resource.type} ({resource.name}); add it to bench/startup_links.py "
        "RESOURCE_LINKS"
    )


def _minutes(found: Iterable[Link]) -> float:
    return sum(link.minutes for link in found)


def _cpu_side_streams(result: Graph, mode: str) -> bool:
    """Do the CPU-side pods (data prep, the x86 head) pull as streaming clients? Autopilot
    always; Standard where a CPU pool (the cluster's inline pool or another pool than the GPU
    pool) has gcfsConfig on."""
    if mode == "autopilot":
        return True
    inline = result.one(CLUSTER).inputs.get("nodePools") or []
    separate = [r.inputs for r in result.resources if r.type == NODE_POOL and not _is_gpu_pool(r)]
    return any(
        ((pool.get("nodeConfig") or {}).get("gcfsConfig") or {}).get("enabled")
        for pool in (*inline, *separate)
    )


def _cpu_side_pullers(result: Graph, facts: StartupFacts) -> tuple[list[Any], bool]:
    """The data-prep Jobs whose pod uses the worker image, and whether the RayCluster's head
    does: the pulls that can fill the streaming cache before the GPU nodes pull."""
    if not _cpu_side_streams(result, facts.mode):
        return [], False
    jobs = [
        r
        for r in result.resources
        if r.type == DATA_PREP_JOB
        and facts.worker_image
        in _pod_images(((r.inputs.get("spec") or {}).get("template") or {}).get("spec") or {})
    ]
    head = result.one(RAY_CLUSTER).inputs["spec"]["headGroupSpec"]["template"]["spec"]
    return jobs, facts.worker_image in _pod_images(head)


def schedule(result: Graph, arch: str, levers: Iterable[Lever] = NO_LEVERS) -> Schedule:
    """Modelled minutes to the first GRPO step of a recorded program, with `levers` on.

    Two waits that Pulumi's graph does not show are modelled, because they are physical: the
    RayCluster is ready only once its workers run on GPU nodes (Standard: after the GPU pool;
    Autopilot: GKE creates GPU nodes only for the pending workers, i.e. after the RayCluster),
    and Autopilot creates a node for the data-prep pod when the pod is pending.
    """
    facts = startup_facts(result, arch)
    table = links(facts, levers)
    autopilot = facts.mode == "autopilot"
    deps = _custom_dependencies(result)
    by_urn = {r.urn: r for r in result.resources}
    ray = result.one(RAY_CLUSTER)
    gpu_pool = next((r for r in result.resources if _is_gpu_pool(r)), None)
    if not autopilot and gpu_pool is None:
        raise LookupError("a Standard program without a node pool named 'gpu-pool'")
    finish: dict[str, float] = {}
    began: dict[str, float] = {}
    came_from: dict[str, str | None] = {}
    took: dict[str, tuple[Link, ...]] = {}
    streamed = Lever.IMAGE_STREAMING in table.levers
    job_pullers, head_pulls = _cpu_side_pullers(result, facts) if streamed else ([], False)
    # Autopilot: each CPU-side pod waits for a node of its own (already in the Job's links).
    cpu_node = table.autopilot_cpu_node.minutes if autopilot else 0.0
    found: dict[str, Any] = {"first_pull": None, "worker_start": table.worker_start}

    def first_pull(head_created: float, gpu_pull_starts: float) -> FirstPull | None:
        pulls = [
            ("the data-prep Job", visit(job.urn) - _minutes(resource_links(job, table)) + cpu_node)
            for job in job_pullers
        ]
        if head_pulls:
            pulls.append(("the Ray head", head_created + cpu_node))
        if not pulls:
            return None
        by, pull_starts = min(pulls, key=lambda pull: pull[1])
        return FirstPull(by, pull_starts + table.cold_pull.minutes, gpu_pull_starts)

    def visit(urn: str) -> float:
        if urn in finish:
            return finish[urn]
        resource = by_urn[urn]
        start, before = 0.0, None
        for dep in deps[urn]:
            if visit(dep) > start:
                start, before = finish[dep], dep
        began[urn] = start
        own = resource_links(resource, table)
        end = start + _minutes(own)
        if urn == ray.urn:
            # Ready once the workers run on GPU nodes that exist.
            if autopilot:
                own = (*own, table.gpu_nodes)
                gpu_ready = end + table.gpu_nodes.minutes
            else:
                assert gpu_pool is not None
                gpu_ready = visit(gpu_pool.urn)
                if gpu_ready > end:
                    before = gpu_pool.urn
                    own = ()
            gpu_pull_starts = max(end, gpu_ready) + _DRIVER_MIN
            warmed = first_pull(end, gpu_pull_starts) if streamed else None
            workers = (
                table.worker_start
                if not streamed or (warmed is not None and warmed.warm)
                else table.cold_worker_start()
            )
            found.update(first_pull=warmed, worker_start=workers)
            own = (*own, *workers)
            end = max(end, gpu_ready) + _minutes(workers)
        finish[urn], came_from[urn], took[urn] = end, before, own
        return end

    for urn in deps:
        visit(urn)

    grpo = [r for r in _ray_jobs(result) if _is_grpo(r)]
    last = grpo[0].urn
    overlapped = visit(last)
    steps: list[Step] = []
    cursor: str | None = last
    while cursor is not None:
        steps.append(Step(by_urn[cursor].name, finish[cursor], took[cursor]))
        cursor = came_from[cursor]
    steps.reverse()

    # (a) Every registered step one after another, plus the physical waits.
    sequential = sum(_minutes(resource_links(by_urn[u], table)) for u in deps)
    workers = found["worker_start"]
    sequential += _minutes(workers) + (table.gpu_nodes.minutes if autopilot else 0.0)
    # (b) The cluster (with the network it needs), GPU nodes, workers, then the Ray jobs.
    cluster = result.one(CLUSTER)
    jobs = sum(_minutes(resource_links(r, table)) for r in _ray_jobs(result))
    chain = visit(cluster.urn) + table.gpu_nodes.minutes + _minutes(workers) + jobs
    return Schedule(
        mode=facts.mode,
        arch=arch,
        levers=table.levers,
        overlapped=overlapped,
        sequential=sequential,
        chain=chain,
        path=tuple(steps),
        links=table,
        worker_start=workers,
        first_pull=found["first_pull"],
    )
