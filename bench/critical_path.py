"""Modelled time to the first GRPO step, from the recorded resource graph of each stack and mode.

    .venv/bin/python bench/critical_path.py

The program runs under the offline engine (tools/offline_engine.py); its recorded dependency
graph (dependencies, property dependencies, provider) is scheduled with the typical duration of
each resource type (DURATIONS below, with where each figure comes from). Two waits that Pulumi's
graph does not show are modelled explicitly, because they are physical:

- the RayCluster becomes ready only once GPU nodes exist: on Standard after the GPU node pool;
  on Autopilot GKE starts creating GPU nodes only when the worker pods are pending, i.e. after
  the RayCluster exists;
- Autopilot creates a node for the data-prep pod when the pod is pending.

Figures printed per stack/mode:
  overlapped   the modelled time of this program (longest path through the graph)
  sequential   (a) every step one after another, as the tutorial runs them
  chain        (b) the unavoidable chain: cluster -> GPU nodes -> RayCluster ready -> first step
and the ratios overlapped/(a) and overlapped/(b). Target (issue 3): overlapped <= 1.05 x (b).
Prints figures; asserts nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from config.profiles import PROFILES
from tools.offline_engine import PlanResult, RecordedResource, run_stack

# Every stack/mode combination the profile table supports.
COMBINATIONS = tuple(
    (profile.name, mode.value) for profile in PROFILES.values() for mode in profile.modes
)
CONFIG = {
    "gcp:project": "acme-ml-prod",
    "gcp:region": "us-central1",
    "verl-gke:zone": "us-central1-b",
    "verl-gke:reservation": "gpu-res",
    "verl-gke:hfToken": "hf_bench",
}


@dataclass(frozen=True)
class Duration:
    minutes: float
    source: str


# Typical durations in minutes. Few are published; each says where it comes from.
_GCE_OP = Duration(0.5, "estimate: one GCE global/regional operation (tens of seconds)")
_K8S_OBJECT = Duration(0.1, "estimate: one API-server write; no await beyond existence")
DURATIONS: Mapping[str, Duration] = {
    "gcp:compute/network:Network": _GCE_OP,
    "gcp:compute/subnetwork:Subnetwork": _GCE_OP,
    "gcp:compute/firewall:Firewall": _GCE_OP,
    "gcp:compute/router:Router": _GCE_OP,
    "gcp:compute/routerNat:RouterNat": _GCE_OP,
    "gcp:compute/resourcePolicy:ResourcePolicy": _GCE_OP,
    "gcp:container/cluster:Cluster": Duration(
        10,
        "Cluster Toolkit gcluster_job_guide.md: a GKE deployment 'can take 10-20 minutes'; "
        "pubsec-declarative-toolkit#464: Autopilot past 83% in under 15 min",
    ),
    "cpu-pool": Duration(5, "estimate: an n4-highmem-16 node pool, one node"),
    "gpu-pool": Duration(
        35,
        "NVIDIA/aicr#2065: a reserved GPU node pool took ~35 min to reach RUNNING "
        "(no published A3U/A4/A4X figure; anchors-and-pain-points.md §4)",
    ),
    "autopilot-gpu-nodes": Duration(
        35, "as gpu-pool: GKE creates the node pool from the ComputeClass for the pending pods"
    ),
    "autopilot-cpu-node": Duration(
        4, "estimate: Autopilot node provisioning for a pending pod (Performance class)"
    ),
    "pulumi:providers:kubernetes": Duration(0, "no cloud operation"),
    "kuberay-release": Duration(1.5, "estimate: helm install + operator image pull, one pod"),
    "dra-release": Duration(2.5, "estimate: helm install, controller + plugin image pulls"),
    "kubernetes:apps/v1:DaemonSet": Duration(
        0.2, "no GPU node exists yet when it is created: 0 pods to await"
    ),
    "gcp:storage/bucket:Bucket": Duration(0.1, "estimate: one GCS API call"),
    "gcp:storage/bucketIAMMember:BucketIAMMember": Duration(
        0.3, "estimate: read-modify-write of the bucket IAM policy"
    ),
    "data-prep": Duration(
        12,
        "estimate: verl image pull ~3 min, clone + GSM8K ~1.5 min, 66 GB model (seed: 'about "
        "66 GB') at ~150 MB/s through GCS FUSE ~7.5 min; the tutorial scripts allow 60 min",
    ),
    "ray-workers-start": Duration(
        6,
        "estimate: verl image pull and Ray start on fresh GPU nodes; the tutorial scripts wait "
        "up to 20-22 min (WORKER_TIMEOUT 1200/1320 s)",
    ),
    "grpo-job": Duration(
        0.5, "estimate: Ray Jobs API submission through the API server proxy until RUNNING"
    ),
    "first-step": Duration(
        12,
        "estimate: job submission, 32B weights read from /data by 16 GPUs, vLLM start-up and the "
        "first rollout + update",
    ),
}


def duration_key(resource: RecordedResource) -> str:
    if resource.type == "gcp:container/nodePool:NodePool":
        return "gpu-pool" if resource.name == "gpu-pool" else "cpu-pool"
    if resource.type == "kubernetes:helm.sh/v3:Release":
        return resource.name
    if resource.type == "kubernetes:batch/v1:Job":
        return "data-prep"
    if resource.type.startswith("pulumi-python:dynamic"):
        return "grpo-job"
    return resource.type


def duration(resource: RecordedResource) -> float:
    key = duration_key(resource)
    if key in DURATIONS:
        return DURATIONS[key].minutes
    if resource.type.startswith("kubernetes:"):
        return _K8S_OBJECT.minutes
    raise KeyError(f"no duration for {resource.type} ({resource.name}); add it to DURATIONS")


@dataclass
class Schedule:
    stack: str
    mode: str
    overlapped: float
    sequential: float
    chain: float
    path: list[tuple[str, float]]


def custom_dependencies(result: PlanResult) -> dict[str, set[str]]:
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


def schedule(stack: str, mode: str) -> Schedule:
    result = run_stack(stack, {**CONFIG, "verl-gke:mode": mode}, strict=True)
    autopilot = mode == "autopilot"
    deps = custom_dependencies(result)
    by_urn = {r.urn: r for r in result.resources}
    finish: dict[str, float] = {}
    came_from: dict[str, str | None] = {}

    ray = result.one("kubernetes:ray.io/v1:RayCluster")
    gpu_pool = next((r for r in result.resources if r.name == "gpu-pool"), None)

    def visit(urn: str) -> float:
        if urn in finish:
            return finish[urn]
        resource = by_urn[urn]
        start, before = 0.0, None
        for dep in deps[urn]:
            if visit(dep) > start:
                start, before = finish[dep], dep
        end = start + duration(resource)
        if resource.type == "kubernetes:batch/v1:Job" and autopilot:
            end += DURATIONS["autopilot-cpu-node"].minutes
        if urn == ray.urn:
            # Ready once workers run on GPU nodes that exist.
            if autopilot:
                gpu_ready = end + DURATIONS["autopilot-gpu-nodes"].minutes
            else:
                assert gpu_pool is not None
                gpu_ready = visit(gpu_pool.urn)
                if gpu_ready > end:
                    before = gpu_pool.urn
            end = max(end, gpu_ready) + DURATIONS["ray-workers-start"].minutes
        finish[urn] = end
        came_from[urn] = before
        return end

    for urn in deps:
        visit(urn)

    # The GRPO job resource; without one (older program), a job waiting for its real
    # dependencies: the RayCluster ready and the data prepared.
    jobs = [r for r in result.resources if r.type.startswith("pulumi-python:dynamic")]
    submission = DURATIONS["grpo-job"].minutes
    if jobs:
        last_urn = jobs[0].urn
        overlapped = visit(last_urn) + DURATIONS["first-step"].minutes
    else:
        data_prep = result.one("kubernetes:batch/v1:Job")
        last_urn = max((ray.urn, data_prep.urn), key=visit)
        overlapped = visit(last_urn) + submission + DURATIONS["first-step"].minutes

    path: list[tuple[str, float]] = [("first GRPO step", overlapped)]
    urn: str | None = last_urn
    while urn is not None:
        path.append((by_urn[urn].name, finish[urn]))
        urn = came_from[urn]
    path.reverse()

    gpu_wait = DURATIONS["autopilot-gpu-nodes" if autopilot else "gpu-pool"].minutes
    # (a) Every registered step one after another (the GPU pool is one of them on Standard),
    # plus the physical waits: GPU nodes on Autopilot, worker start, the first step.
    sequential = sum(duration(by_urn[u]) for u in deps)
    sequential += DURATIONS["ray-workers-start"].minutes + DURATIONS["first-step"].minutes
    if autopilot:
        sequential += gpu_wait + DURATIONS["autopilot-cpu-node"].minutes
    if not jobs:
        sequential += submission
    # (b) The cluster (with the network it needs), then GPU nodes, workers, submission, step.
    cluster = result.one("gcp:container/cluster:Cluster")
    chain = (
        visit(cluster.urn)
        + gpu_wait
        + DURATIONS["ray-workers-start"].minutes
        + submission
        + DURATIONS["first-step"].minutes
    )
    return Schedule(stack, mode, overlapped, sequential, chain, path)


def main() -> int:
    print("Modelled minutes to the first GRPO step (durations: bench/critical_path.py DURATIONS)")
    header = (
        f"{'stack':<6}{'mode':<11}{'overlapped':>11}{'(a) seq':>9}{'(b) chain':>10}"
        f"{'ovl/(a)':>9}{'ovl/(b)':>9}"
    )
    print(header)
    schedules = [schedule(stack, mode) for stack, mode in COMBINATIONS]
    for s in schedules:
        print(
            f"{s.stack:<6}{s.mode:<11}{s.overlapped:>11.1f}{s.sequential:>9.1f}{s.chain:>10.1f}"
            f"{s.overlapped / s.sequential:>9.2f}{s.overlapped / s.chain:>9.3f}"
        )
    print("\nCritical path (resource, finished at minute):")
    for s in schedules:
        steps = " -> ".join(f"{name} {minute:.1f}" for name, minute in s.path)
        print(f"  {s.stack}/{s.mode}: {steps}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
