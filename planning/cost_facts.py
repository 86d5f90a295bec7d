"""The plan's "What you pay for" block: the GPU capacity a stack bills, on every stack and mode
(on Autopilot the machine type hides inside the ComputeClass, so it is spelled out here), how the
worker image reaches the GPU nodes and what its pull still costs, and the modelled minutes to the
first training step (planning/startup_links.py's model, scheduled over the plan's own recorded graph
by planning/startup_schedule.py: no second run of the program).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from config.capacity import IDLE_TIMEOUT_SECONDS, ready_timeout_minutes
from config.image_streaming import docker_hub_path, streaming_refusal
from config.profiles import Capacity, Mode
from config.settings import StackSettings, reservation_owner
from manifests.prepull import PREPULL_NAME
from planning.offline_engine import PlanResult
from planning.startup_links import job_facts, levers_in_graph
from planning.startup_schedule import Schedule, schedule
from pricing.billing import PriceBook, price_book, rate, usd
from pricing.table import (
    CLUSTER_FEE,
    GCS_STANDARD,
    GKE_PRICING,
    LOGGING_FREE_GIB_PER_MONTH,
    LOGGING_INGEST,
    REGION,
)
from pricing.whole_run import (
    ESTIMATED,
    RunFacts,
    cost_lines,
    evaluation_line,
    record_steps,
    tokens_per_step,
    training_steps,
)
from training.assembly import training_job
from training.model_evaluation import EvaluationPlan
from training.model_facts import ModelFactsError, model_facts
from training.run_life import CHECKPOINT_BYTES_PER_PARAM


def modelled_schedule(result: PlanResult, settings: StackSettings) -> Schedule:
    """The start-up schedule with the levers the program implements."""
    grpo = training_job(settings)
    job = job_facts(settings, grpo.spec, grpo.model)
    return schedule(result, job, levers_in_graph(result, job.arch))


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


def wait_line(settings: StackSettings) -> str:
    wait = settings.capacity_wait_minutes
    ready = ready_timeout_minutes(wait)
    if settings.capacity_plan.uses_reservation:
        return (
            f"the reservation's nodes are created with the pool; pulumi up waits up to {ready} "
            f"min for the Ray workers"
        )
    head = (
        f"up to {wait} min for the GPU nodes ({config('capacityWaitMinutes')}); pulumi up "
        f"then fails, the request stays and the next pulumi up waits again"
    )
    if settings.capacity_plan.nodes_all_at_once:
        return f"{head}; no GPU node exists, so none is billed, until all are granted together"
    return (
        f"{head}; the nodes come one by one as the zone has them and each is billed from its "
        f"creation, so the first nodes are billed while the rest are awaited"
    )


def _release_line(settings: StackSettings) -> str:
    if not settings.capacity_plan.scale_to_zero:
        owner = reservation_owner(settings)
        whose = f"{owner}'s, shared with this project" if owner else "yours"
        return f"no: a fixed number of nodes until `pulumi destroy` (the reservation is {whose})"
    nodes = "GKE removes the nodes" if settings.mode is Mode.STANDARD else "Autopilot removes them"
    return (
        f"yes: {IDLE_TIMEOUT_SECONDS // 60} min after the run ends (succeeded, failed or stopped) "
        f"the Ray GPU workers scale to 0 and {nodes}; a later run brings them back"
    )


def config(key: str) -> str:
    return f"verl-gke:{key}"


def what_you_pay_for(
    result: PlanResult, settings: StackSettings, record: Mapping[str, Any] | None = None
) -> list[str]:
    """The block; `record`: a rehearsal's record of this run's command (the offline plan's, where
    one ran), whose length replaces the program's estimated step count."""
    profile = settings.profile
    timed = modelled_schedule(result, settings)
    minutes = timed.overlapped
    return [
        "What you pay for:",
        f"  GPU machine: {profile.machine_type} ({profile.gpus_per_node} x {profile.gpu_type})"
        + (" in ComputeClass " + _compute_class(result) if settings.mode is Mode.AUTOPILOT else ""),
        f"  GPU nodes: {settings.gpu_nodes}, GPUs: {settings.total_gpus}",
        f"  capacity: {_capacity_line(settings)}",
        f"  waiting for capacity: {wait_line(settings)}",
        f"  GPUs released when the run ends: {_release_line(settings)}",
        f"  worker image: {_image_line(timed, settings)}",
        f"  modelled time to the first training step: {minutes:.0f} min once capacity is there "
        f"(bench/critical_path.py's model)",
        f"  a failed rehearsal (verl's checks in the training image, before training) costs: "
        f"{settings.capacity_plan.rehearsal_failure_cost()}",
        *money_lines(
            settings, minutes, job_overrides(result), record=record, gpu_from=timed.gpu_nodes_from
        ),
        f"  the export's evaluation: {_evaluation_line(settings)}",
    ]


def _evaluation_line(settings: StackSettings) -> str:
    grpo = training_job(settings)
    book = price_book(settings)
    return evaluation_line(settings, book, grpo.evaluation, grpo.model.arch.num_params)


def _compute_class(result: PlanResult) -> str:
    classes = [
        r.inputs.get("metadata", {}).get("name", r.name)
        for r in result.resources
        if r.type == "kubernetes:cloud.google.com/v1:ComputeClass"
    ]
    return ", ".join(classes) or "(none)"


# --- money ----------------------------------------------------------------------------------
GIB = 2**30
GRPO_JOB_TYPE = "pulumi-python:dynamic/jobs:RayJob"


def job_overrides(result: PlanResult) -> dict[str, str]:
    """The Hydra overrides (key=value) of the GRPO job's entrypoint as rendered; empty when the
    plan has no GRPO job."""
    for job in result.of_type(GRPO_JOB_TYPE):
        if "checkpoint_root" in job.inputs:
            words = shlex.split(str(job.inputs.get("entrypoint", "")))
            pairs = (w.lstrip("+").split("=", 1) for w in words if "=" in w and "." in w)
            return {key: value for key, value in pairs}
    return {}


def money_lines(
    settings: StackSettings,
    minutes: float,
    job: Mapping[str, str],
    book: PriceBook | None = None,
    record: Mapping[str, Any] | None = None,
    gpu_from: float = 0.0,
) -> list[str]:
    """Dollars (pricing/: the prices of pricing/table.py unless a book is given): the hourly rate
    of what runs, by capacity mode and GKE mode, the whole run from `pulumi up` to the GPUs'
    release (the cost to the first step as the mode bills it, with the GPU nodes billed from
    minute `gpu_from`; the training's steps from the rehearsal's `record` of this run where there
    is one, else the program's estimate, said so), and the kept checkpoints' storage (verl's
    save steps from the same record)."""
    book = book or price_book(settings)
    counted = record_steps(record)
    steps, counted_by = counted if counted is not None else (training_steps(job), ESTIMATED)
    facts = RunFacts(
        steps, counted_by, tokens_per_step(job), _num_params(settings), _evaluation(settings)
    )
    region_note = (
        ""
        if settings.region == REGION
        else f"; this stack is in {settings.region}: its prices differ, `pulumi up` reads them"
    )
    return [
        f"  prices: list prices for {REGION} (pricing/table.py: sources and dates below); "
        f"prices vary by region{region_note}",
        *cost_lines(settings, book, facts, minutes, gpu_from),
        f"  control plane ($/h): {usd(CLUSTER_FEE.usd or 0)} per cluster-hour, the GKE cluster "
        f"management fee in both modes ({GKE_PRICING}); "
        + (
            "the free tier's credit covers zonal and Autopilot clusters, not this regional one"
            if settings.mode is Mode.STANDARD
            else "the free tier's monthly credit may cover one Autopilot cluster per billing "
            "account"
        ),
        f"  logging: Cloud Logging {rate(LOGGING_INGEST)} after the first "
        f"{LOGGING_FREE_GIB_PER_MONTH} GiB per project per month; the run's logs are not modelled",
        f"  checkpoints in the kept bucket: {_checkpoint_line(settings, job, record)}",
    ]


def _num_params(settings: StackSettings) -> int | None:
    try:
        return model_facts(settings).arch.num_params  # verl-gke:modelConfig or the table
    except ModelFactsError:
        return None


def _evaluation(settings: StackSettings) -> EvaluationPlan | None:
    return training_job(settings).evaluation


def checkpoints_kept(
    job: Mapping[str, str], record: Mapping[str, Any] | None = None
) -> tuple[int | None, str]:
    """(how many actor checkpoints stay in the bucket, why): verl saves every save_freq steps
    and at the last step (ray_trainer.fit) over len(train_dataloader) x total_epochs steps
    (drop_last=True) and keeps trainer.max_actor_ckpt_to_keep of them, all when unset; where a
    rehearsal's `record` counted the run's length, the steps it saves at are verl's own."""
    save_freq = int(job.get("trainer.save_freq", "0"))
    if save_freq <= 0:
        return 0, "trainer.save_freq <= 0 saves none"
    keep = job.get("trainer.max_actor_ckpt_to_keep", "null")
    cap = None if keep in ("null", "None", "") else int(keep)
    steps = training_steps(job)
    kept_why = (
        "all kept (trainer.max_actor_ckpt_to_keep unset)" if cap is None else f"the last {cap} kept"
    )
    length = (record or {}).get("length")
    if record_steps(record) is not None and isinstance(length, Mapping):
        saved = list(length.get("save_steps") or [])
        count = len(saved) if cap is None else min(cap, len(saved))
        at = ", ".join(str(step) for step in saved) or "none"
        return count, (
            f"{length['last_step']} steps, verl saves at {at} (the rehearsal's record): "
            f"{len(saved)}, {kept_why}"
        )
    if steps is None:
        return cap, f"one per {save_freq} steps, {kept_why}; the step count depends on the dataset"
    saves = -(-steps // save_freq)
    count = saves if cap is None else min(cap, saves)
    return count, f"{steps} steps, a save every {save_freq} and at the last: {saves}, {kept_why}"


def _checkpoint_line(
    settings: StackSettings, job: Mapping[str, str], record: Mapping[str, Any] | None = None
) -> str:
    try:
        arch = model_facts(settings).arch  # verl-gke:modelConfig or the committed table
    except ModelFactsError:
        arch = None
    count, why = checkpoints_kept(job, record)
    if not job:
        return "no GRPO job in this plan"
    storage = f"GCS Standard {rate(GCS_STANDARD)}"
    if arch is None:
        return (
            f"{CHECKPOINT_BYTES_PER_PARAM} B per model parameter each (fp32 weights + AdamW's "
            f"two fp32 moments); model size not in the known table; {why}; {storage}"
        )
    gib = CHECKPOINT_BYTES_PER_PARAM * arch.num_params / GIB
    head = (
        f"~{gib:,.0f} GiB each ({CHECKPOINT_BYTES_PER_PARAM} B x {arch.num_params / 1e9:.1f}B "
        f"parameters: fp32 weights 4 B + AdamW's exp_avg and exp_avg_sq 8 B)"
    )
    if GCS_STANDARD.usd is None:
        return f"{head}; {why}; {storage}"
    each = gib * GCS_STANDARD.usd
    kept = "" if count is None else f", {usd(each * count)} per month for the {count} kept"
    return f"{head}; {why}; at {storage}: {usd(each)} per checkpoint-month{kept}"
