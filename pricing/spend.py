"""What a run has cost so far, from the GPU nodes' own lifetimes (what Compute Engine bills: an
instance from its start until it is deleted), and from the Ray job's running time only where the
cluster cannot be read; the measured cost per step and the projected cost to finish.

Lifetimes come from the Kubernetes API (read by tools/run_nodes.py):
- nodes that exist: metadata.creationTimestamp; GPU nodes carry the label
  cloud.google.com/gke-accelerator (GKE sets it on every GPU node);
- nodes already removed: the node lifecycle controller's events on them, "RegisteredNode"
  ("Registered Node <name> in Controller") and "RemovingNode" ("Removing Node <name> from
  Controller") (kubernetes pkg/controller/nodelifecycle/node_lifecycle_controller.go: emitted
  when the controller first observes a node, so again for every node after it restarts; a removed
  node counts from its earliest RegisteredNode kept, which a restart can make later). A removed
  node is a GPU node when its name carries a GPU node pool's prefix (GKE names a node
  <instance group>-<suffix>; the Standard GPU pool is named "gpu-pool"). A removed node of no
  pool seen now (Autopilot's GPU pools once scaled to zero) cannot be told GPU or CPU: it is not
  counted as a GPU node, and its hours are said. Events are kept an hour by default
  (kube-apiserver --event-ttl), so a node removed longer ago is not seen: said so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

GPU_LABEL = "cloud.google.com/gke-accelerator"
GPU_POOL_TOKEN = "-gpu-pool-"  # components/gpu_node_pool.py GPU_POOL_NAME in GKE's node names
REGISTERED, REMOVING = "RegisteredNode", "RemovingNode"


@dataclass(frozen=True)
class NodeLife:
    name: str
    start_s: float  # creation (or, for a removed node without its registration event, first seen)
    end_s: float | None  # removal; None: the node still exists
    gpu: bool
    start_known: bool = True  # False: the creation fell out of the event window
    kind_known: bool = True  # False: removed, of no pool seen now: GPU or CPU is not known


def _seconds(stamp: str | None) -> float | None:
    if not stamp:
        return None
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _event_time(event: Mapping[str, Any]) -> float | None:
    for key in ("eventTime", "lastTimestamp", "firstTimestamp"):
        if (seconds := _seconds(event.get(key))) is not None:
            return seconds
    return _seconds((event.get("metadata") or {}).get("creationTimestamp"))


def _prefix(name: str) -> str:
    return name.rsplit("-", 1)[0]


def node_lives(nodes: Mapping[str, Any], events: Mapping[str, Any]) -> list[NodeLife]:
    """Every node seen, present (from a NodeList) or removed (from an EventList of Node events)."""
    lives: dict[str, NodeLife] = {}
    for node in nodes.get("items", []):
        meta = node.get("metadata") or {}
        created = _seconds(meta.get("creationTimestamp"))
        if created is None:
            continue
        gpu = GPU_LABEL in (meta.get("labels") or {})
        lives[meta["name"]] = NodeLife(meta["name"], created, None, gpu)
    gpu_prefixes = {_prefix(life.name) for life in lives.values() if life.gpu}
    cpu_prefixes = {_prefix(life.name) for life in lives.values() if not life.gpu}
    registered: dict[str, float] = {}
    removed: dict[str, float] = {}
    for event in events.get("items", []):
        involved = event.get("involvedObject") or {}
        when = _event_time(event)
        if involved.get("kind") != "Node" or when is None:
            continue
        name = str(involved.get("name"))
        if event.get("reason") == REGISTERED:
            registered[name] = min(when, registered.get(name, when))
        elif event.get("reason") == REMOVING:
            removed[name] = max(when, removed.get(name, when))
    for name, end in removed.items():
        if name in lives:
            continue  # re-created under the same name: the present node counts
        start = registered.get(name)
        gpu = GPU_POOL_TOKEN in name or _prefix(name) in gpu_prefixes
        kind_known = gpu or _prefix(name) in cpu_prefixes
        known = start is not None
        lives[name] = NodeLife(name, start if known else end, end, gpu, known, kind_known)
    return sorted(lives.values(), key=lambda life: (life.start_s, life.name))


@dataclass(frozen=True)
class Spend:
    usd: float | None  # None: no price
    gpu_node_hours: float
    how: str  # where the hours came from, and what they leave out


def node_spend(
    lives: Sequence[NodeLife],
    now_s: float,
    gpu_node_usd: float | None,
    fixed_usd: float,
) -> Spend:
    """GPU node-hours x the node rate, plus the rest of the stack (control plane, CPU side) from
    the first node's creation; what the lifetimes could not see is said."""
    gpu = [life for life in lives if life.gpu]
    hours = sum(((life.end_s or now_s) - life.start_s) / 3600 for life in gpu)
    first = min((life.start_s for life in lives), default=now_s)
    notes = [
        f"{len(gpu)} GPU nodes seen ({sum(life.end_s is None for life in gpu)} now), "
        f"{hours:.2f} node-hours from their creation to their removal or now"
    ]
    if any(not life.start_known for life in gpu):
        notes.append("a removed node's creation fell out of the event window: counted from later")
    unknown = [life for life in lives if not life.kind_known]
    if unknown:
        unknown_hours = sum(((life.end_s or now_s) - life.start_s) / 3600 for life in unknown)
        notes.append(
            f"{len(unknown)} removed nodes of no pool seen now ({unknown_hours:.2f} node-hours) "
            "could not be told GPU or CPU and are not counted as GPU nodes"
        )
    notes.append("nodes removed before the cluster's event window (an hour) are not seen")
    if gpu_node_usd is None:
        return Spend(None, hours, "; ".join(notes))
    total = hours * gpu_node_usd + (now_s - first) / 3600 * fixed_usd
    return Spend(total, hours, "; ".join(notes))


def job_spend(elapsed_s: float, stack_usd: float | None) -> Spend:
    """Where the cluster cannot be read: the Ray job's running time x the stack's rate, a lower
    bound (the GPU nodes' time before the job started and after it ended is left out)."""
    hours = elapsed_s / 3600
    usd = None if stack_usd is None else hours * stack_usd
    how = (
        f"from the Ray job's running time only, {hours:.2f} h x the stack's rate (the cluster's "
        "nodes could not be read): the GPU nodes' start-up, earlier attempts and the idle "
        "minutes after the run are left out"
    )
    return Spend(usd, hours, how)


def step_cost(step_seconds: Iterable[float], stack_usd: float) -> float | None:
    """The measured cost of one training step: the mean of the logged step times x the stack's
    rate."""
    times = [t for t in step_seconds if t > 0]
    if not times:
        return None
    return sum(times) / len(times) / 3600 * stack_usd
