"""Modelled time from a lost GPU node to training again, per capacity mode, and what a hang
costs in GPU-hours today and with the runner's watchdog (payloads/export/supervise.py).

The chain after a node loss: the trainer fails (detection), a replacement node comes (per
capacity mode), the worker pod starts on it (driver, image pull, init containers, `ray start`:
the start-up model's own links), then the supervisor restarts verl, which loads the model and
the checkpoint and logs a step (the start-up model's GRPO links plus the checkpoint load).
Every link carries its source or is marked an estimate, as in planning/startup_links.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from config.capacity import Capacity
from config.recovery import AUTO_REPAIR_NOT_READY_MINUTES
from planning.startup_links import Link, StartupLinks

# A link that never ends (none today; bench/critical_path.py prints it as "never").
NEVER = math.inf
# processor.go's BookingExpired/Failed lifecycle skips classes other than check-capacity and
# best-effort-atomic-scale-up (provisioningrequest/supported_classes.go), so only the pod filter
# is the open-source code's word on queued-provisioning.gke.io.
PROVREQ_SOURCE = (
    "kubernetes/autoscaler cluster-autoscaler/processors/provreq/"
    "provisioning_request_pods_filter.go (an unschedulable pod annotated as consuming a "
    "ProvisioningRequest never triggers a scale-up): the runner makes a new request for the "
    "missing nodes (payloads/export/provreq.py); how fast GKE serves it is GKE's own code"
)
# The supervisor counts GPUs only once Ray's GCS has declared a lost node dead:
# failure_threshold x (period + timeout) = 5 x (3 s + 10 s) (Ray 2.47/2.49 defaults).
DEATH_GRACE_MINUTES = 65 / 60
# Until a person notices a hung run today (nothing watches it after the first step; estimate:
# a run left overnight).
UNATTENDED_HOURS = 8.0


def _link(key: str, title: str, minutes: float, source: str, *, estimate: bool) -> Link:
    return Link(key, title, minutes, source, estimate)


def detection() -> Link:
    return _link(
        "loss-detected",
        "trainer fails after the node is lost",
        0.5 + DEATH_GRACE_MINUTES,
        "est.: the driver's ray.get fails once the actor's connection drops (seconds, measured "
        "by bench/recovery.py) or once the GCS declares the node dead (health_check_period_ms "
        "3000 x failure_threshold 5, Ray 2.47/2.49 ray_config_def.h); plus the supervisor's "
        "wait before counting GPUs, 65 s (Ray's health-check bound, payloads/export/supervise.py)",
        estimate=True,
    )


def replacement(capacity: Capacity, mode: str, table: StartupLinks) -> Link:
    """A node for the recreated worker pod (KubeRay recreates a deleted worker pod)."""
    nodes = table.gpu_nodes
    why = {
        Capacity.RESERVATION: "GKE node auto-repair recreates the reservation's node after "
        "~10 min NotReady (GKE 'Node auto-repair'), then it boots as a new node",
        Capacity.SPOT: "the cluster autoscaler adds a Spot node for the pending worker when the "
        "zone has one (none may come while Compute Engine reclaims Spot capacity)",
        Capacity.FLEX_START: "the ComputeClass's autoscaler provisions a node for the pending "
        "worker (Autopilot flex-start)"
        if mode != "standard"
        else "a new ProvisioningRequest for the missing nodes, then queued provisioning "
        f"(its queue time not modelled; {PROVREQ_SOURCE})",
        Capacity.ON_DEMAND: "the cluster autoscaler adds an on-demand node when the zone has one",
    }[capacity]
    extra = AUTO_REPAIR_NOT_READY_MINUTES if capacity is Capacity.RESERVATION else 0.0
    return _link(
        "node-replaced",
        f"replacement node ({capacity.value})",
        nodes.minutes + extra,
        f"est.: {why}; node creation as the start-up model's '{nodes.title}' ({nodes.source})",
        estimate=True,
    )


def resume(table: StartupLinks) -> tuple[Link, ...]:
    """From the replacement node to a training step again."""
    checkpoint = _link(
        "checkpoint-load",
        "checkpoint load (FSDP shards, optimizer, dataloader)",
        1.0,
        "est.: every rank reads its own model/optim/extra_state shard through GCS FUSE "
        "(verl/utils/checkpoint/fsdp_checkpoint_manager.py load_checkpoint)",
        estimate=True,
    )
    return (*table.cold_worker_start(), *table.grpo, checkpoint)


@dataclass(frozen=True)
class RecoveryChain:
    capacity: Capacity
    links: tuple[Link, ...]

    @property
    def minutes(self) -> float:
        return sum(link.minutes for link in self.links)

    @property
    def estimated_minutes(self) -> float:
        return sum(link.minutes for link in self.links if link.estimate)


def node_loss_chain(capacity: Capacity, mode: str, table: StartupLinks) -> RecoveryChain:
    lost = (detection(), replacement(capacity, mode, table))
    return RecoveryChain(capacity, (*lost, *resume(table)))


def restart_minutes(table: StartupLinks) -> float:
    """A restart on the same nodes (after a hang): verl's start-up again, no node or pull."""
    return sum(link.minutes for link in table.grpo) + 1.0


def hang_gpu_hours(gpus: int, bound_minutes: float, restart_min: float) -> tuple[float, float]:
    """GPU-hours one hang costs: (today, left until a person notices after UNATTENDED_HOURS;
    with the watchdog, the bound plus a restart on the same nodes)."""
    return gpus * UNATTENDED_HOURS, gpus * (bound_minutes + restart_min) / 60
