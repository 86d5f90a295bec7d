"""How the GPU capacity is obtained (`verl-gke:capacity`) and what follows from it: the one
dispatch on the capacity mode. Components and manifests read a CapacityPlan; they never branch on
the mode themselves.

Which profile/mode supports which capacity is a profile-table fact (config/profiles.py,
`AcceleratorProfile.capacity`, with its sources).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import assert_never

from config.profiles import Capacity, Mode

# A flex-start VM runs at most seven days (GKE "About GPU obtainability with flex-start"; AI
# Hypercomputer "obtain capacity"); the ProvisioningRequest asks for that whole window, since a
# GRPO run that is cut short resumes from its last checkpoint anyway.
MAX_RUN_DURATION_SECONDS = 7 * 24 * 3600
# How long an idle Ray GPU worker stays before KubeRay's autoscaler removes it (then GKE removes
# the node). Long enough for the gap between the workers becoming ready and the GRPO job's
# demand arriving (the fabric check and the job submission run in between), short enough that a
# finished run stops paying for 16 GPUs within a quarter of an hour (plus GKE's scale-down delay).
IDLE_TIMEOUT_SECONDS = 900
# The default of `verl-gke:capacityWaitMinutes`: the GPU pool's create timeout before capacity
# modes existed (components/gpu_node_pool.py, 90 min), so `pulumi up` waits exactly as long as it
# did for reserved nodes.
DEFAULT_WAIT_MINUTES = 90
# Bound of the wait: beyond a day, end `pulumi up` and run it again later (the request stays).
MAX_WAIT_MINUTES = 24 * 60
# What `pulumi up` allows the RayCluster on top of the capacity wait: image pull, init
# containers and Ray start on the new nodes (planning/startup_links.py models 20-40 min; the
# RayCluster's create timeout was 150 = 90 + 60 before capacity modes existed).
START_MARGIN_MINUTES = 60


@dataclass(frozen=True)
class CapacityPlan:
    """What one capacity mode means for the GPU nodes, the Ray workers and the bill."""

    capacity: Capacity
    # Node pool (Standard): fixed size inside a reservation, autoscaled 0..N outside one.
    fixed_size: bool
    flex_start: bool
    spot: bool
    # All N nodes at once through a ProvisioningRequest (GKE flex-start with queued
    # provisioning), Standard only.
    queued_provisioning: bool
    # KubeRay's autoscaler with minReplicas 0, and node pool autoscaling from 0.
    scale_to_zero: bool
    # One line for the plan: how the N nodes are obtained.
    how: str

    @property
    def uses_reservation(self) -> bool:
        return self.capacity is Capacity.RESERVATION

    @property
    def gpus_after_rehearsal(self) -> bool:
        """Whether the GPU node pool and the RayCluster are created only once the rehearsal
        succeeded (components/rehearsal.py), so a failed rehearsal costs no GPU node-hour: where
        GPU nodes bill only from their creation (flex-start, Spot, on-demand). A reservation
        bills its machines whether nodes run or not, so there they are created alongside data
        prep and the rehearsal, and the time to the first step stays as short as before."""
        return not self.uses_reservation

    def rehearsal_failure_cost(self) -> str:
        """What a failed rehearsal costs in GPU node-hours, for the plan."""
        if self.gpus_after_rehearsal:
            return (
                "nothing in GPU node-hours: the GPU node pool and the RayCluster are created "
                "only after the rehearsal succeeded (its pod runs on the CPU nodes)"
            )
        return (
            "the reservation's machines bill anyway; the GPU nodes are created alongside the "
            "rehearsal and no training starts until it succeeded"
        )

    @property
    def nodes_all_at_once(self) -> bool:
        """True where the N GPU nodes are created together or not at all, so none exists (and
        none is billed) while the rest are awaited: flex-start, whose ProvisioningRequest is
        granted whole (GKE "flex-start with queued provisioning") or whose ComputeClass scale-up
        is provisioned as a single unit (GKE "About GPU obtainability with flex-start"). Spot and
        on-demand nodes come one by one as the zone has them (the cluster autoscaler resizes the
        node pool and Compute Engine creates what it can), and each bills from its creation."""
        return self.flex_start


def capacity_plan(capacity: Capacity, mode: Mode) -> CapacityPlan:
    match capacity:
        case Capacity.RESERVATION:
            return CapacityPlan(
                capacity, True, False, False, False, False,
                "the reservation's machines, a fixed number of nodes",
            )  # fmt: skip
        case Capacity.FLEX_START:
            queued = mode is Mode.STANDARD
            how = (
                "flex-start with queued provisioning: one ProvisioningRequest for all nodes, "
                "granted all at once or not at all"
                if queued
                else "flex-start through the ComputeClass: the autoscaler provisions the "
                "nodes of one scale-up as a single unit"
            )
            return CapacityPlan(capacity, False, True, False, queued, True, how)
        case Capacity.SPOT:
            return CapacityPlan(
                capacity, False, False, True, False, True,
                "Spot VMs, node by node as the zone has them; preemptible: a preempted node "
                "stops the run, which resumes from its last checkpoint on the next pulumi up",
            )  # fmt: skip
        case Capacity.ON_DEMAND:
            return CapacityPlan(
                capacity, False, False, False, False, True,
                "on-demand VMs, node by node as the zone has them (rarely available for these "
                "machines)",
            )  # fmt: skip
        case unknown:
            assert_never(unknown)


def ready_timeout_minutes(wait_minutes: int) -> int:
    """How long `pulumi up` waits for the RayCluster: the capacity wait plus the start-up."""
    return wait_minutes + START_MARGIN_MINUTES
