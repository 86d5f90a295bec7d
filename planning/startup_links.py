"""Modelled time to the first GRPO step: the duration of every link, with its source. The
schedule of those links over the program's recorded resource graph is planning/startup_schedule.py.

Pure and light: no Pulumi, no Ray. It reads a recorded graph handed to it (anything shaped like
planning/offline_engine.PlanResult: `resources` with urn/type/name/custom/parent/inputs,
`edges(resource)`, `one(type)`) for what the program creates, and the run's own facts (the
model, the KL terms, validation before training) from the settings and the GRPO spec
(`job_facts`), so the offline plan can show the modelled minutes of the run it just recorded:

    from planning.startup_schedule import schedule
    facts = job_facts(settings, spec, model)
    minutes = schedule(result, facts, levers_in_graph(result, arch)).overlapped

bench/critical_path.py records the graphs itself and prints the tables (`modelled_minutes`).

Every link is a `Link`: minutes, a source (URL or repository path of the figure it rests on) and
`estimate` (True where the figure is derived, scaled or guessed rather than published for a
comparable operation). A lever replaces the links it changes; the schedule still overlaps what the
graph lets overlap, so a lever's saving is what it takes off the longest path, not off a sum.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from config.recovery import NODE_CREATION_MINUTES
from training.memory_fit import BF16

if TYPE_CHECKING:
    from config.settings import StackSettings
    from training.grpo_spec import GrpoSpec
    from training.model_facts import ModelFacts


class Lever(StrEnum):
    """Ways to shorten the start-up. Each is an overlay on the recorded graph."""

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

    def under(
        self,
        lever: Lever,
        minutes: float,
        source: str,
        *,
        estimate: bool = True,
        title: str | None = None,
    ) -> Link:
        """This step as `lever` makes it: the same key, and the same title unless given."""
        return Link(self.key, title or self.title, minutes, source, estimate, lever)


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
# The rehearsal's Job (components/rehearsal.py): a Job like data prep's, with its own link.
REHEARSAL_JOB_NAME = "rehearsal-job"
# Data prep's weights Job (components/model_weights.py), with its own link.
WEIGHTS_JOB_NAME = "model-weights-job"
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


def model_weights(model: ModelFacts) -> ModelWeights:
    """The checkpoint size of verl-gke:model: its parameters (from its config.json facts,
    training/model_facts.py) x 2 bytes (bf16), to the whole GB. Qwen2.5-32B-Instruct: 32.76 B
    parameters = 66 GB, the download size the seed (gke-verl-grpo-tutorial) gives."""
    billions = model.arch.num_params / 1e9
    return ModelWeights(
        model.hub_id,
        float(round(billions * BF16)),
        f"{billions:.2f} B parameters ({model.source}) x 2 bytes (bf16)",
        estimate=True,
    )


@dataclass(frozen=True)
class JobFacts:
    """What the durations depend on that the settings and the GRPO spec state."""

    arch: str  # the profile's: "amd64" | "arm64"
    weights: ModelWeights
    # verl builds the reference policy when the KL term needs it (loss or reward).
    reference_model: bool
    # verl's trainer config: val_before_train defaults to True.
    val_before_train: bool


def job_facts(settings: StackSettings, spec: GrpoSpec, model: ModelFacts) -> JobFacts:
    """The run's facts from the values that build its command (not from the command); `model`
    is the job's verl-gke:model (training/assembly.TrainingJob.model)."""
    return JobFacts(
        arch=settings.profile.arch,
        weights=model_weights(model),
        reference_model=bool(spec.use_kl_loss) or bool(spec.use_kl_in_reward),
        val_before_train=spec.val_before_train is not False,
    )


@dataclass(frozen=True)
class GraphFacts:
    """What the durations depend on, as the recorded program says it."""

    mode: str  # "standard" | "autopilot"
    arch: str  # "amd64" | "arm64"
    removes_default_pool: bool
    worker_image: str
    worker_init_containers: tuple[str, ...]
    worker_post_start: bool
    # Multi-node NVLink: the workers claim an IMEX channel of a ComputeDomain.
    imex_channel: bool
    python_path: str
    fuse_mount_paths: tuple[str, ...]


@dataclass(frozen=True)
class StartupFacts(GraphFacts):
    """The recorded program's facts and the run's own (JobFacts)."""

    weights: ModelWeights
    reference_model: bool
    val_before_train: bool


RAY_JOB = "pulumi-python:dynamic/jobs:RayJob"
# The rehearsal's record, read from the bucket and judged (jobs/rehearsal_verdict.py).
REHEARSAL_VERDICT = "pulumi-python:dynamic/jobs:RehearsalVerdict"


def ray_jobs(result: Graph) -> list[Any]:
    return [r for r in result.resources if r.type == RAY_JOB]


def is_grpo(resource: Any) -> bool:
    return GRPO_ENTRYPOINT in str(resource.inputs.get("entrypoint", ""))


def _worker_pod(result: Graph) -> Mapping[str, Any]:
    spec = result.one(RAY_CLUSTER).inputs["spec"]
    return spec["workerGroupSpecs"][0]["template"]


def graph_facts(result: Graph, arch: str) -> GraphFacts:
    """The facts of one recorded stack/mode. `arch` is the profile's (amd64/arm64)."""
    if arch not in ARCHES:
        raise ValueError(f"arch {arch!r}: one of {', '.join(ARCHES)} (the profile's arch)")
    cluster = result.one(CLUSTER).inputs
    mode = "autopilot" if cluster.get("enableAutopilot") else "standard"
    pod = _worker_pod(result)
    pod_spec = pod["spec"]
    worker = pod_spec["containers"][0]
    claims = [c.get("name", "") for c in pod_spec.get("resourceClaims", [])]
    grpo = [r for r in ray_jobs(result) if is_grpo(r)]
    if len(grpo) != 1:
        raise LookupError(f"expected one Ray job running {GRPO_ENTRYPOINT}, found {len(grpo)}")
    env = (grpo[0].inputs.get("runtime_env") or {}).get("env_vars") or {}
    fuse_volumes = {
        v["name"]
        for v in pod_spec.get("volumes", [])
        if "persistentVolumeClaim" in v or (v.get("csi") or {}).get("driver") == GCSFUSE_DRIVER
    }
    fuse_paths = tuple(
        m["mountPath"] for m in worker.get("volumeMounts", []) if m.get("name") in fuse_volumes
    )
    return GraphFacts(
        mode=mode,
        arch=arch,
        removes_default_pool=mode == "standard" and bool(cluster.get("removeDefaultNodePool")),
        worker_image=str(worker["image"]),
        worker_init_containers=tuple(c["name"] for c in pod_spec.get("initContainers", [])),
        worker_post_start="postStart" in (worker.get("lifecycle") or {}),
        imex_channel=any("compute-domain" in c for c in claims),
        python_path=str(env.get("PYTHONPATH", "")),
        fuse_mount_paths=fuse_paths,
    )


def startup_facts(result: Graph, job: JobFacts) -> StartupFacts:
    """The recorded program's facts (graph_facts) with the run's own (job_facts)."""
    graph = graph_facts(result, job.arch)
    return StartupFacts(
        **{f.name: getattr(graph, f.name) for f in fields(GraphFacts)},
        weights=job.weights,
        reference_model=job.reference_model,
        val_before_train=job.val_before_train,
    )


# ---------------------------------------------------------------------------------------------
# Which levers a recorded program already has
# ---------------------------------------------------------------------------------------------


def pod_images(pod_spec: Mapping[str, Any]) -> set[str]:
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


def _fuse_tuned(result: Graph, facts: GraphFacts) -> bool:
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
    facts = graph_facts(result, arch)
    found: set[Lever] = set()
    if facts.mode == "standard" and not facts.removes_default_pool:
        found.add(Lever.NO_DEFAULT_POOL)
    registry = facts.worker_image.split("/", 1)[0]
    if registry.endswith("-docker.pkg.dev") and _streaming_enabled(result, facts.mode):
        found.add(Lever.IMAGE_STREAMING)
    for ds in (r for r in result.resources if r.type == DAEMON_SET):
        template = ((ds.inputs.get("spec") or {}).get("template") or {}).get("spec") or {}
        if facts.worker_image in pod_images(template):
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
            "data preparation Job (verl, dataset, model files)",
            4.5,
            "est.: verl image pull ~3 min, clone + GSM8K ~1.5 min, the model's files but its "
            "weights (config, tokenizer: a few MB) seconds",
            estimate=True,
        ),
        "model-weights": _link(
            "model-weights",
            "model weights Job (download)",
            8.0,
            "est.: the ~66 GB model (seed) at ~150 MB/s through GCS FUSE ~7.5 min, pod start on "
            "a node with the image ~0.5 min; the tutorial scripts allow 60 min",
            estimate=True,
        ),
        REHEARSAL_VERDICT: _link(
            "rehearsal-verdict",
            "rehearsal record read and judged",
            0.1,
            "est.: one GCS object read from the machine running pulumi up",
            estimate=True,
        ),
        "rehearsal": _link(
            "rehearsal",
            "rehearsal Job (verl's config, dataset, reward, length)",
            1.5,
            "est.: the training image is on the node already (the data-prep Job or the x86 head "
            "pulled it; on A4X the GPU node's pull, modelled in the schedule); verl + vLLM "
            "imports ~0.5 min, RLHFDataset's tokenizer over the 7,473 GSM8K rows (overlong "
            "filter) ~0.5 min, Hydra compose, model config and reward samples seconds, pod start "
            "and FUSE mount ~0.3 min; on Autopilot the pod takes the Performance-class node the "
            "data-prep pod just left",
            estimate=True,
        ),
    }
)

# Google's published GCS FUSE model-load figures (LEVER_SOURCES[FUSE_TUNED]): ~141 GB model.
_GOOGLE_MODEL_GB = 141.0
_UNTUNED_LOAD_S = 1200.0
_TUNED_LOAD_S = 40.0
_FSDP_INIT_MIN = 0.5
DRIVER_MIN = 0.5
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
            "once: a pre-puller gains nothing (est.)"
        )
    if lever is Lever.IMAGE_STREAMING and facts.arch == "arm64":
        return (
            "arm64 support of GKE Image streaming is not documented (the 'Use Image streaming' "
            "requirements and limitations name no architecture): no saving modelled; pre-pull "
            "instead"
        )
    return None


def _cluster_links(autopilot: bool, on: frozenset[Lever]) -> tuple[Link, ...]:
    """The cluster create (and, on Standard, the default-pool delete inside it)."""
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
        # whichever levers the program implements by now (levers_in_graph).
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
            delete = delete.under(
                Lever.NO_DEFAULT_POOL,
                0.0,
                "cluster created with its CPU pool (GKE API Cluster.nodePools: a cluster "
                "with node pools and no initial_node_count has no default pool)",
                estimate=False,
            )
        cluster = (*cluster, delete)
    return cluster


def _cpu_pool_link(on: frozenset[Lever]) -> Link:
    cpu_pool = _link(
        "cpu-pool",
        "CPU node pool (separate resource)",
        5.0,
        "est.: an n4-highmem-16 node pool, one node; GKE runs one operation per node pool at a "
        "time, so it does not hold up the GPU pool (GKE 'Troubleshoot concurrent operations')",
        estimate=True,
    )
    if Lever.NO_DEFAULT_POOL in on:
        cpu_pool = cpu_pool.under(
            Lever.NO_DEFAULT_POOL,
            0.0,
            "est.: created inside the cluster operation in place of the default pool it replaces",
        )
    return cpu_pool


def _gpu_node_links(autopilot: bool) -> tuple[Link, Link]:
    """The GPU nodes, and the Autopilot node the data-prep pod waits for."""
    gpu_nodes = _link(
        "gpu-nodes",
        "GPU nodes (Autopilot, for the pending workers)" if autopilot else "GPU node pool",
        NODE_CREATION_MINUTES,
        "no published A3 Ultra/A4/A4X figure; NVIDIA/aicr#2065 reports ~35 min for a node pool "
        "to reach RUNNING (a CPU worker pool): conservative est., range 10-35",
        estimate=True,
    )
    autopilot_cpu_node = _link(
        "autopilot-cpu-node",
        "Autopilot node for the data-prep pod",
        4.0,
        "est.: Autopilot node provisioning for a pending pod (Performance class)",
        estimate=True,
    )
    return gpu_nodes, autopilot_cpu_node


def _pull_links(on: frozenset[Lever], driver: Link) -> tuple[Link, Link]:
    """The worker image's pull on a fresh GPU node, and its pull from a cold streaming cache."""
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
        cold_pull = pull.under(
            Lever.IMAGE_STREAMING,
            pull.minutes,
            f"the pull above ({pull.minutes:g} min): {STREAMING_FIRST_PULL}; no earlier pull of "
            "the image through the stack's new repository finished before the GPU nodes pulled",
            title="worker image (streamed, cold cache)",
        )
        pull = pull.under(
            Lever.IMAGE_STREAMING,
            1.0,
            "ai-on-gke startup-latency.md Triton 191 s -> 30 s; wdenniss.com 3m50s -> ~20 s; "
            "+0.5 min est. for files read lazily at start (GKE 'Use Image streaming' "
            f"limitations); warm cache: {STREAMING_FIRST_PULL}, and here that first pull is the "
            "CPU side's (data-prep Job, x86 head), which schedule() checks ends before the GPU "
            "nodes pull",
            title="worker image (streamed, warm cache)",
        )
    if Lever.PREPULL in on:
        # The pull starts when the node registers, so the driver install overlaps it.
        pull = pull.under(
            Lever.PREPULL,
            max(0.0, pull.minutes - driver.minutes),
            f"the pull above ({pull.minutes:g} min) minus the driver install it overlaps: a "
            "DaemonSet pulls from node registration (ai-on-gke best-practices/startup-latency.md "
            "'Use a preloader DaemonSet': runs before the ~30 s GPU driver install)",
            title=pull.title + ", pre-pulled",
        )
    return pull, cold_pull


def _worker_start(facts: StartupFacts, driver: Link, pull: Link) -> tuple[Link, ...]:
    """After the GPU nodes exist, until every Ray worker is ready."""
    worker_start: list[Link] = [driver, pull]
    for name in facts.worker_init_containers:
        worker_start.append(
            _link(
                f"init-{name}",
                f"worker init container {name}",
                0.75,
                "est. 0.5-1 min: apt-get update + install nccl-gib-plugins from "
                "packages.cloud.google.com (manifests/ray_cluster.py GIB_APT_INSTALL, "
                "ray-cluster-auto-dranet.yaml)"
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

    return tuple(worker_start)


def _model_load_links(facts: StartupFacts, on: frozenset[Lever]) -> tuple[Link, Link]:
    """verl's import and the actor model's load, through GCS FUSE."""
    verl_import = _link(
        "verl-import",
        "verl import through GCS FUSE",
        1.0,
        "est. 0.5-2 min: PYTHONPATH=/data/verl on a metadata-cache-ttl-secs=0 mount, every stat "
        "goes to GCS through a 250m-CPU default sidecar (gcs-fuse-csi-driver cmd/webhook/main.go); "
        "verl v0.6.1 = 346 files",
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
        verl_import = verl_import.under(
            Lever.FUSE_TUNED,
            0.1,
            "est.: local files, seconds (a tarball untarred by an initContainer)",
        )
        actor = actor.under(
            Lever.FUSE_TUNED,
            scale * _TUNED_LOAD_S / 60 + _FSDP_INIT_MIN,
            f"est.: ~40 s for ~141 GB tuned ({LEVER_SOURCES[Lever.FUSE_TUNED]}) scaled to "
            f"{weights.gigabytes:g} GB + {_FSDP_INIT_MIN} min FSDP; on Autopilot the sidecar is "
            "capped at 2 vCPU / 14 GiB on GPU nodes (gcs-fuse-csi-driver docs/troubleshooting.md)",
        )
    return verl_import, actor


def _grpo_links(facts: StartupFacts, on: frozenset[Lever]) -> tuple[Link, ...]:
    """GRPO from its submission until verl logs its first training step."""
    verl_import, actor = _model_load_links(facts, on)
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
    return tuple(grpo)


def links(facts: StartupFacts, levers: Iterable[Lever] = NO_LEVERS) -> StartupLinks:
    """The duration of every link for these facts with these levers on."""
    asked = frozenset(levers)
    not_applied = {lv: why for lv in asked if (why := _applicable(facts, lv)) is not None}
    on = asked - not_applied.keys()
    autopilot = facts.mode == "autopilot"
    gpu_nodes, autopilot_cpu_node = _gpu_node_links(autopilot)
    driver = _link(
        "gpu-driver",
        "GPU driver + device plugin on the new node",
        DRIVER_MIN,
        "ai-on-gke best-practices/startup-latency.md: 'driver installation takes ~30 seconds'",
        estimate=False,
    )
    pull, cold_pull = _pull_links(on, driver)
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
    return StartupLinks(
        facts=facts,
        levers=frozenset(on),
        cluster=_cluster_links(autopilot, on),
        cpu_pool=_cpu_pool_link(on),
        gpu_nodes=gpu_nodes,
        autopilot_cpu_node=autopilot_cpu_node,
        worker_start=_worker_start(facts, driver, pull),
        cold_pull=cold_pull,
        job_submit=job_submit,
        fabric_check=fabric_check,
        grpo=_grpo_links(facts, on),
        not_applied=MappingProxyType(not_applied),
    )


def runs_on_gpu_nodes(resource: Any) -> bool:
    """A Job whose pod runs on a GPU node (the rehearsal on A4X, where the training image does
    not run on the x86 CPU pool): its start waits for the GPU nodes and the image's pull."""
    pod = ((resource.inputs.get("spec") or {}).get("template") or {}).get("spec") or {}
    return any("gke-accelerator" in key for key in pod.get("nodeSelector") or {})


def is_gpu_pool(resource: Any) -> bool:
    return resource.type == NODE_POOL and resource.name == "gpu-pool"


def resource_links(resource: Any, table: StartupLinks) -> tuple[Link, ...]:
    """The links one recorded resource stands for (its own operation, not the waits around it)."""
    autopilot = table.facts.mode == "autopilot"
    if resource.type == CLUSTER:
        return table.cluster
    if resource.type == NODE_POOL:
        return (table.gpu_nodes,) if is_gpu_pool(resource) else (table.cpu_pool,)
    if resource.type == HELM_RELEASE and resource.name in RESOURCE_LINKS:
        return (RESOURCE_LINKS[resource.name],)
    if resource.type == DATA_PREP_JOB and resource.name == REHEARSAL_JOB_NAME:
        return (RESOURCE_LINKS["rehearsal"],)
    if resource.type == DATA_PREP_JOB:
        part = "model-weights" if resource.name == WEIGHTS_JOB_NAME else "data-prep"
        data_prep = RESOURCE_LINKS[part]
        return (table.autopilot_cpu_node, data_prep) if autopilot else (data_prep,)
    if resource.type == REHEARSAL_VERDICT:
        return (RESOURCE_LINKS[REHEARSAL_VERDICT],)
    if resource.type == RAY_JOB:
        if is_grpo(resource):
            return (table.job_submit, *table.grpo)
        return (table.job_submit, table.fabric_check)
    if resource.type in RESOURCE_LINKS:
        return (RESOURCE_LINKS[resource.type],)
    if resource.type.startswith("kubernetes:"):
        return (_K8S_OBJECT,)
    raise KeyError(
        f"no duration for {resource.type} ({resource.name}); add it to planning/startup_links.py "
        "RESOURCE_LINKS"
    )
