"""The schedule of the start-up links (planning/startup_links.py) over the program's recorded
resource graph: the longest path to verl's first training step, against every step one after
another and the unavoidable chain, with the physical waits the graph does not show.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

from planning.startup_links import (
    CLUSTER,
    DATA_PREP_JOB,
    DRIVER_MIN,
    NO_LEVERS,
    NODE_POOL,
    RAY_CLUSTER,
    Graph,
    JobFacts,
    Lever,
    Link,
    StartupFacts,
    StartupLinks,
    is_gpu_pool,
    is_grpo,
    links,
    pod_images,
    ray_jobs,
    resource_links,
    runs_on_gpu_nodes,
    startup_facts,
)


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
    # The minute the first GPU node is created: Standard, when the GPU pool's creation starts;
    # Autopilot, when the RayCluster's workers are pending and GKE creates nodes for them. The
    # GPU nodes bill from then (Compute Engine bills an instance from its start), not minute 0.
    gpu_nodes_from: float = 0.0

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


def _minutes(found: Iterable[Link]) -> float:
    return sum(link.minutes for link in found)


def _cpu_side_streams(result: Graph, mode: str) -> bool:
    """Do the CPU-side pods (data prep, the x86 head) pull as streaming clients? Autopilot
    always; Standard where a CPU pool (the cluster's inline pool or another pool than the GPU
    pool) has gcfsConfig on."""
    if mode == "autopilot":
        return True
    inline = result.one(CLUSTER).inputs.get("nodePools") or []
    separate = [r.inputs for r in result.resources if r.type == NODE_POOL and not is_gpu_pool(r)]
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
        in pod_images(((r.inputs.get("spec") or {}).get("template") or {}).get("spec") or {})
    ]
    head = result.one(RAY_CLUSTER).inputs["spec"]["headGroupSpec"]["template"]["spec"]
    return jobs, facts.worker_image in pod_images(head)


class _Walk:
    """The finish time of every custom resource along its longest path of dependencies.

    Two waits that Pulumi's graph does not show are modelled, because they are physical: the
    RayCluster is ready only once its workers run on GPU nodes (Standard: after the GPU pool;
    Autopilot: GKE creates GPU nodes only for the pending workers, i.e. after the RayCluster),
    and Autopilot creates a node for the data-prep pod when the pod is pending.
    """

    def __init__(self, result: Graph, table: StartupLinks) -> None:
        facts = table.facts
        self.table = table
        self.autopilot = facts.mode == "autopilot"
        self.deps = _custom_dependencies(result)
        self.by_urn = {r.urn: r for r in result.resources}
        self.ray = result.one(RAY_CLUSTER)
        self.gpu_pool = next((r for r in result.resources if is_gpu_pool(r)), None)
        if not self.autopilot and self.gpu_pool is None:
            raise LookupError("a Standard program without a node pool named 'gpu-pool'")
        self.finish: dict[str, float] = {}
        self.came_from: dict[str, str | None] = {}
        self.took: dict[str, tuple[Link, ...]] = {}
        self.streamed = Lever.IMAGE_STREAMING in table.levers
        self.job_pullers, self.head_pulls = (
            _cpu_side_pullers(result, facts) if self.streamed else ([], False)
        )
        # Autopilot: each CPU-side pod waits for a node of its own (already in the Job's links).
        self.cpu_node = table.autopilot_cpu_node.minutes if self.autopilot else 0.0
        self.first_pull: FirstPull | None = None
        self.worker_start: tuple[Link, ...] = table.worker_start
        self.gpu_nodes_from = 0.0

    def _first_pull(self, head_created: float, gpu_pull_starts: float) -> FirstPull | None:
        table = self.table
        pulls = [
            (
                "the data-prep Job",
                self.visit(job.urn) - _minutes(resource_links(job, table)) + self.cpu_node,
            )
            for job in self.job_pullers
        ]
        if self.head_pulls:
            pulls.append(("the Ray head", head_created + self.cpu_node))
        if not pulls:
            return None
        by, pull_starts = min(pulls, key=lambda pull: pull[1])
        return FirstPull(by, pull_starts + table.cold_pull.minutes, gpu_pull_starts)

    def _ray_cluster_ready(
        self, end: float, own: tuple[Link, ...], before: str | None
    ) -> tuple[float, tuple[Link, ...], str | None]:
        """Ready once the workers run on GPU nodes that exist."""
        table = self.table
        if self.autopilot:
            own = (*own, table.gpu_nodes)
            gpu_ready = end + table.gpu_nodes.minutes
            self.gpu_nodes_from = end
        else:
            assert self.gpu_pool is not None
            gpu_ready = self.visit(self.gpu_pool.urn)
            pool_links = resource_links(self.by_urn[self.gpu_pool.urn], table)
            self.gpu_nodes_from = gpu_ready - _minutes(pool_links)
            if gpu_ready > end:
                before = self.gpu_pool.urn
                own = ()
        gpu_pull_starts = max(end, gpu_ready) + DRIVER_MIN
        warmed = self._first_pull(end, gpu_pull_starts) if self.streamed else None
        workers = (
            table.worker_start
            if not self.streamed or (warmed is not None and warmed.warm)
            else table.cold_worker_start()
        )
        self.first_pull, self.worker_start = warmed, workers
        return max(end, gpu_ready) + _minutes(workers), (*own, *workers), before

    def _on_gpu_node(self, start: float, before: str | None) -> tuple[float, str | None]:
        """A CPU-only pod placed on a GPU node starts once a GPU node exists and has pulled the
        training image (the same pull the workers wait for, a cold one: no earlier pull)."""
        table = self.table
        if self.gpu_pool is None:  # Autopilot: GPU nodes come only for the Ray workers
            raise LookupError("a Job on GPU nodes needs the Standard GPU pool in the graph")
        ready = self.visit(self.gpu_pool.urn) + DRIVER_MIN + table.cold_pull.minutes
        if ready > start:
            return ready, self.gpu_pool.urn
        return start, before

    def visit(self, urn: str) -> float:
        if urn in self.finish:
            return self.finish[urn]
        start, before = 0.0, None
        for dep in self.deps[urn]:
            if self.visit(dep) > start:
                start, before = self.finish[dep], dep
        resource = self.by_urn[urn]
        if resource.type == DATA_PREP_JOB and runs_on_gpu_nodes(resource):
            start, before = self._on_gpu_node(start, before)
        own = resource_links(resource, self.table)
        end = start + _minutes(own)
        if urn == self.ray.urn:
            end, own, before = self._ray_cluster_ready(end, own, before)
        self.finish[urn], self.came_from[urn], self.took[urn] = end, before, own
        return end

    def path(self, last: str) -> tuple[Step, ...]:
        steps: list[Step] = []
        cursor: str | None = last
        while cursor is not None:
            steps.append(Step(self.by_urn[cursor].name, self.finish[cursor], self.took[cursor]))
            cursor = self.came_from[cursor]
        return tuple(reversed(steps))


def schedule(result: Graph, job: JobFacts, levers: Iterable[Lever] = NO_LEVERS) -> Schedule:
    """Modelled minutes to the first GRPO step of a recorded program, with `levers` on; `job`
    holds the run's own facts (planning/startup_links.job_facts)."""
    facts: StartupFacts = startup_facts(result, job)
    table = links(facts, levers)
    walk = _Walk(result, table)
    for urn in walk.deps:
        walk.visit(urn)
    last = next(r for r in ray_jobs(result) if is_grpo(r)).urn
    overlapped = walk.visit(last)
    # (a) Every registered step one after another, plus the physical waits.
    autopilot = walk.autopilot
    sequential = sum(_minutes(resource_links(walk.by_urn[u], table)) for u in walk.deps)
    workers = walk.worker_start
    sequential += _minutes(workers) + (table.gpu_nodes.minutes if autopilot else 0.0)
    # (b) The cluster (with the network it needs), GPU nodes, workers, then the Ray jobs.
    cluster = result.one(CLUSTER)
    jobs = sum(_minutes(resource_links(r, table)) for r in ray_jobs(result))
    chain = walk.visit(cluster.urn) + table.gpu_nodes.minutes + _minutes(workers) + jobs
    return Schedule(
        mode=facts.mode,
        arch=facts.arch,
        levers=table.levers,
        overlapped=overlapped,
        sequential=sequential,
        chain=chain,
        path=walk.path(last),
        links=table,
        worker_start=workers,
        first_pull=walk.first_pull,
        gpu_nodes_from=walk.gpu_nodes_from,
    )
