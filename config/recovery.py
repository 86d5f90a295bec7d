"""How the job's runner recovers a run (payloads/export/supervise.py): the restart budget and the
hang watchdog's bounds, from verl-gke:maxRestarts, verl-gke:hangMinutes and
verl-gke:firstStepMinutes. Rendered as the runner's arguments by training/model_export.py.

The default restart budget depends on how the GPU nodes are obtained (config/capacity.py): Spot
VMs are preempted whenever Compute Engine needs the capacity back (GCE "Spot VMs": no maximum
runtime, 30 s notice), so a long Spot run loses nodes often and gets the most restarts; a
reservation's or a flex-start pool's nodes are lost only to host errors or a GPU falling off the
bus, for which a few restarts suffice before a person should look.
"""

from __future__ import annotations

from dataclasses import dataclass

from config.capacity import Capacity

DEFAULT_MAX_RESTARTS = {
    Capacity.SPOT: 10,
    Capacity.FLEX_START: 3,
    Capacity.RESERVATION: 3,
    Capacity.ON_DEMAND: 3,
}
# No new training step for this long is a hang, unless the run's slowest step times
# HANG_FACTOR is longer (a checkpoint or validation step is several times an ordinary one).
DEFAULT_HANG_MINUTES = 30
HANG_FACTOR = 3.0
# Before the first step: model load, vLLM start and validation (planning/startup_links.py
# models 20-40 min for the start-up after the nodes exist; a 32B model's validation adds more).
DEFAULT_FIRST_STEP_MINUTES = 120
# How long a lost GPU node takes to come back, which is how long the runner waits for the GPUs
# before it gives up (supervise.py --capacity-wait-s): node creation (no published A3 Ultra /
# A4 / A4X figure; NVIDIA/aicr#2065 reports ~35 min for a node pool to reach RUNNING: the
# conservative end of 10-35 min, est.), inside a reservation after GKE node auto-repair's ~10 min
# of NotReady (GKE "Node auto-repair"), plus the Ray worker's start on the new node (image pull,
# init containers, Ray; est., planning/startup_links.py models ~8 min cold). On Standard
# flex-start a new ProvisioningRequest queues first, for a time Dynamic Workload Scheduler does
# not bound: the stack's own wait for queued capacity, verl-gke:capacityWaitMinutes, applies.
# planning/startup_links.py and planning/recovery_links.py model recovery with the same figures.
NODE_CREATION_MINUTES = 35.0
AUTO_REPAIR_NOT_READY_MINUTES = 10.0
WORKER_START_MINUTES = 10.0


def lost_node_wait_minutes(
    capacity: Capacity, queued_provisioning: bool, capacity_wait_minutes: int
) -> float:
    """How long the runner waits for a lost node's GPUs before it gives up (see above)."""
    if queued_provisioning:
        return float(capacity_wait_minutes)
    repair = AUTO_REPAIR_NOT_READY_MINUTES if capacity is Capacity.RESERVATION else 0.0
    return repair + NODE_CREATION_MINUTES + WORKER_START_MINUTES


@dataclass(frozen=True)
class RecoveryPlan:
    max_restarts: int
    hang_floor_s: float
    hang_factor: float
    first_step_bound_s: float
    lost_node_wait_s: float
    # Where a hung run's stacks go, relative to the run folder (supervise.STACKS_DIR).
    stacks_subdir: str

    def runner_arguments(self, gpus_needed: int) -> list[str]:
        """The runner's options (payloads/export/supervise.py add_arguments)."""
        return [
            "--max-restarts", str(self.max_restarts),
            "--hang-floor-s", f"{self.hang_floor_s:g}",
            "--hang-factor", f"{self.hang_factor:g}",
            "--first-step-bound-s", f"{self.first_step_bound_s:g}",
            "--gpus-needed", str(gpus_needed),
            "--capacity-wait-s", f"{self.lost_node_wait_s:g}",
        ]  # fmt: skip

    def hang_bound_text(self) -> str:
        return (
            f"no new step within max({self.hang_floor_s / 60:g} min, "
            f"{self.hang_factor:g} x the slowest step), plus the checkpoint's estimated write "
            f"time on a step that saves; {self.first_step_bound_s / 60:g} min before the first "
            "step (time without the worker group's GPUs not counted); GPUs missing after a lost "
            f"node are waited for {self.lost_node_wait_s / 60:g} min"
        )


def recovery_plan(
    capacity: Capacity,
    max_restarts: int | None,
    hang_minutes: int,
    first_step_minutes: int,
    *,
    queued_provisioning: bool = False,
    capacity_wait_minutes: int = 90,
) -> RecoveryPlan:
    from config.bucket_layout import STACKS_DIR

    return RecoveryPlan(
        max_restarts=DEFAULT_MAX_RESTARTS[capacity] if max_restarts is None else max_restarts,
        hang_floor_s=hang_minutes * 60.0,
        hang_factor=HANG_FACTOR,
        first_step_bound_s=first_step_minutes * 60.0,
        lost_node_wait_s=60.0
        * lost_node_wait_minutes(capacity, queued_provisioning, capacity_wait_minutes),
        stacks_subdir=STACKS_DIR,
    )
