"""The plan's "What you pay for" block: the GPU capacity a stack bills, on every stack and mode
(on Autopilot the machine type hides inside the ComputeClass, so it is spelled out here), how the
worker image reaches the GPU nodes and what its pull still costs, and the modelled minutes to the
first training step (bench/startup_links.py's model, scheduled over the plan's own recorded graph:
no second run of the program).
"""

from __future__ import annotations

from bench.startup_links import Schedule, levers_in_graph, schedule
from config.capacity import IDLE_TIMEOUT_SECONDS, ready_timeout_minutes
from config.image_streaming import docker_hub_path, streaming_refusal
from config.profiles import Capacity, Mode
from config.settings import StackSettings
from manifests.prepull import PREPULL_NAME
from tools.offline_engine import PlanResult


def modelled_schedule(result: PlanResult, settings: StackSettings) -> Schedule:
    """The start-up schedule with the levers the program implements."""
    arch = settings.profile.arch
    return schedule(result, arch, levers_in_graph(result, arch))


def _image_line(timed: Schedule, settings: StackSettings) -> str:
    """How the worker image reaches the GPU nodes, and the modelled minutes of its pull there."""
    plan = settings.image_pull
    cold = timed.links.cold_pull
    pull = next(link for link in timed.worker_start if link.key == cold.key)
    if plan.streaming:
        first = timed.first_pull
        source = plan.registry if docker_hub_path(settings.verl_image) else "its repository"
        head = f"streamed through {source} (GKE Image streaming, {config('imageStreaming')})"
        if first is not None and first.warm:
            return (
                f"{head}: ~{pull.minutes:g} min per GPU node from a warm cache; the repository "
                f"is new, so the first pull through it is cold (~{cold.minutes:g} min): "
                f"{first.by} makes it ~{first.gpu_pull_starts - first.finished:.0f} min before "
                f"the GPU nodes pull (modelled)"
            )
        return (
            f"{head}: the repository is new and nothing pulls the image through it before the "
            f"GPU nodes, so their first pull is cold: ~{pull.minutes:g} min per node (modelled)"
        )
    why = streaming_refusal(settings.profile, settings.verl_image) or (
        f"{config('imageStreaming')} is false"
    )
    if plan.prepull:
        return (
            f"pulled from {_registry_name(settings.verl_image)} by the DaemonSet {PREPULL_NAME} as "
            f"each GPU node registers: "
            f"~{pull.minutes:g} min per node after the driver install (modelled); not streamed: "
            f"{why}"
        )
    return (
        f"pulled from {_registry_name(settings.verl_image)} when each Ray worker lands: "
        f"~{pull.minutes:g} min per node "
        f"(modelled); not streamed: {why}"
    )


def _registry_name(image: str) -> str:
    return "Docker Hub" if docker_hub_path(image) is not None else image.partition("/")[0]


def _capacity_line(settings: StackSettings) -> str:
    plan = settings.capacity_plan
    if plan.capacity is Capacity.RESERVATION:
        return (
            f"reservation {settings.reservation} ({plan.how}); reserved capacity is billed "
            f"whether used or not"
        )
    return f"{plan.capacity.value}, no reservation ({plan.how})"


def _wait_line(settings: StackSettings) -> str:
    wait = settings.capacity_wait_minutes
    ready = ready_timeout_minutes(wait)
    if settings.capacity_plan.uses_reservation:
        return (
            f"the reservation's nodes are created with the pool; pulumi up waits up to {ready} "
            f"min for the Ray workers"
        )
    return (
        f"up to {wait} min for the GPU nodes ({config('capacityWaitMinutes')}); pulumi up "
        f"then fails, the request stays and the next pulumi up waits again; no GPU node is "
        f"billed while it waits"
    )


def _release_line(settings: StackSettings) -> str:
    if not settings.capacity_plan.scale_to_zero:
        return "no: a fixed number of nodes until `pulumi destroy` (the reservation is yours)"
    nodes = "GKE removes the nodes" if settings.mode is Mode.STANDARD else "Autopilot removes them"
    return (
        f"yes: {IDLE_TIMEOUT_SECONDS // 60} min after the run ends (succeeded, failed or stopped) "
        f"the Ray GPU workers scale to 0 and {nodes}; a later run brings them back"
    )


def config(key: str) -> str:
    return f"verl-gke:{key}"


def what_you_pay_for(result: PlanResult, settings: StackSettings) -> list[str]:
    profile = settings.profile
    timed = modelled_schedule(result, settings)
    minutes = timed.overlapped
    return [
        "What you pay for:",
        f"  GPU machine: {profile.machine_type} ({profile.gpus_per_node} x {profile.gpu_type})"
        + (" in ComputeClass " + _compute_class(result) if settings.mode is Mode.AUTOPILOT else ""),
        f"  GPU nodes: {settings.gpu_nodes}, GPUs: {settings.total_gpus}",
        f"  capacity: {_capacity_line(settings)}",
        f"  waiting for capacity: {_wait_line(settings)}",
        f"  GPUs released when the run ends: {_release_line(settings)}",
        f"  worker image: {_image_line(timed, settings)}",
        f"  modelled time to the first training step: {minutes:.0f} min once capacity is there "
        f"(bench/critical_path.py's model)",
    ]


def _compute_class(result: PlanResult) -> str:
    classes = [
        r.inputs.get("metadata", {}).get("name", r.name)
        for r in result.resources
        if r.type == "kubernetes:cloud.google.com/v1:ComputeClass"
    ]
    return ", ".join(classes) or "(none)"
