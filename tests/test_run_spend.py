"""`python -m tools.run`'s spend from the GPU nodes' own lifetimes (pricing/spend.py, read by
tools/run_nodes.py), against a scripted cluster: a stand-in Kubernetes API server on 127.0.0.1
whose nodes come and go, answering GET /api/v1/nodes with a core/v1 NodeList and GET
/api/v1/events?fieldSelector=involvedObject.kind=Node with a core/v1 EventList of the node
lifecycle controller's "RegisteredNode" / "RemovingNode" events (kubernetes
pkg/controller/nodelifecycle/node_lifecycle_controller.go), behind a bearer token; and the
measured cost per step and the projected cost to finish. Prices are test values.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from jobs.dashboard_access import DashboardUrl, KubeServiceProxy
from jobs.verl_log import STEP_TIME_KEY, StepMetrics
from pricing.spend import GPU_LABEL, node_spend
from tools.run import RunView, cost_rows
from tools.run_nodes import read_node_lives
from tools.run_target import RunPrice

T0 = datetime(2026, 12, 7, 10, 0, tzinfo=UTC)
TOKEN = "scripted"


def stamp(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")


@dataclass
class Cluster:
    """What the API server holds now: the nodes that exist and the Node events kept."""

    nodes: dict[str, tuple[float, bool]] = field(default_factory=dict)  # name -> (created, gpu)
    events: list[tuple[str, str, float]] = field(default_factory=list)  # (reason, node, minute)

    def add(self, name: str, minute: float, gpu: bool) -> None:
        self.nodes[name] = (minute, gpu)
        self.events.append(("RegisteredNode", name, minute))

    def remove(self, name: str, minute: float) -> None:
        del self.nodes[name]
        self.events.append(("RemovingNode", name, minute))

    def node_list(self) -> dict[str, Any]:
        items = []
        for name, (minute, gpu) in self.nodes.items():
            labels = {"kubernetes.io/hostname": name}
            if gpu:
                labels[GPU_LABEL] = "nvidia-h200-141gb"
            items.append(
                {"metadata": {"name": name, "creationTimestamp": stamp(minute), "labels": labels}}
            )
        return {"kind": "NodeList", "apiVersion": "v1", "items": items}

    def event_list(self) -> dict[str, Any]:
        items = [
            {
                "metadata": {"name": f"{node}.{i}", "namespace": "default"},
                "involvedObject": {"kind": "Node", "name": node, "apiVersion": "v1"},
                "reason": reason,
                "message": f"Node {node} event: {reason}",
                "firstTimestamp": stamp(minute),
                "lastTimestamp": stamp(minute),
                "type": "Normal",
            }
            for i, (reason, node, minute) in enumerate(self.events)
        ]
        return {"kind": "EventList", "apiVersion": "v1", "items": items}


@pytest.fixture
def cluster() -> Iterator[tuple[Cluster, str]]:
    state = Cluster()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlparse(self.path)
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                return self._answer(401, {"kind": "Status", "code": 401})
            if url.path == "/api/v1/nodes":
                return self._answer(200, state.node_list())
            selector = parse_qs(url.query).get("fieldSelector")
            if url.path == "/api/v1/events" and selector == ["involvedObject.kind=Node"]:
                return self._answer(200, state.event_list())
            return self._answer(404, {"kind": "Status", "code": 404})

        def _answer(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield state, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def spec(endpoint: str) -> KubeServiceProxy:
    return KubeServiceProxy(endpoint, "", "verl", "h200-ray-cluster-head-svc")


def minute(m: float) -> float:
    return (T0 + timedelta(minutes=m)).timestamp()


PRICE = RunPrice(
    gpu_node_hourly_usd=40.0,
    gpu_nodes=2,
    stack_hourly_usd=81.10,
    source="test prices",
    fixed_hourly_usd=1.10,
)


def view(now_minute: float, steps: tuple[StepMetrics, ...] = ()) -> RunView:
    return RunView(
        submission_id="a3u-1-r2",
        dashboard="http://127.0.0.1:8265",
        status="RUNNING",
        message="",
        start_time_ms=int(minute(60) * 1000),
        end_time_ms=None,
        phase="training",
        steps=steps,
        validation={},
        validation_points=(),
        total_steps=58 if steps else None,
        log_source="whole log",
        now_s=minute(now_minute),
    )


def test_spend_follows_the_nodes_as_they_come_and_go(cluster: tuple[Cluster, str]) -> None:
    """Test prices: a GPU node $40/h, the rest of the stack $1.10/h.
    minute 0   the CPU node registers (the stack's first node)
    minute 20  gpu node g1 is created; minute 22 g2
    minute 40  read: g1 20 min + g2 18 min = 38 min = 0.63333 h x 40 = $25.3333
               + 40 min x $1.10/h = $0.7333 -> $26.07
    minute 50  g1 is preempted (RemovingNode); minute 55 g3 replaces it
    minute 90  read: g1 30 + g2 68 + g3 35 = 133 min = 2.21667 h x 40 = $88.6667
               + 90 min x $1.10/h = $1.65 -> $90.32; the Ray job started at minute 60, so its
               running time alone (0.5 h x $81.10 = $40.55) would leave out more than half."""
    state, endpoint = cluster
    state.add("gke-c-cpu-pool-1a2b-x1", 0, gpu=False)
    state.add("gke-c-gpu-pool-3c4d-g1", 20, gpu=True)
    state.add("gke-c-gpu-pool-3c4d-g2", 22, gpu=True)
    lives, why = read_node_lives(spec(endpoint), lambda: TOKEN)
    assert lives is not None and why == ""
    early = node_spend(lives, minute(40), 40.0, 1.10)
    assert early.usd == pytest.approx(38 / 60 * 40 + 40 / 60 * 1.10)
    state.remove("gke-c-gpu-pool-3c4d-g1", 50)
    state.add("gke-c-gpu-pool-3c4d-g3", 55, gpu=True)
    lives, _ = read_node_lives(spec(endpoint), lambda: TOKEN)
    assert lives is not None
    assert [(life.name, life.end_s is None) for life in lives if life.gpu] == [
        ("gke-c-gpu-pool-3c4d-g1", False),
        ("gke-c-gpu-pool-3c4d-g2", True),
        ("gke-c-gpu-pool-3c4d-g3", True),
    ]
    late = node_spend(lives, minute(90), 40.0, 1.10)
    assert late.gpu_node_hours == pytest.approx(133 / 60)
    assert late.usd == pytest.approx(133 / 60 * 40 + 1.5 * 1.10)
    rows = dict(cost_rows(view(90), PRICE, lives))
    assert rows["spent"].startswith("$90.32 so far (3 GPU nodes seen (2 now), 2.22 node-hours")
    assert "nodes removed before the cluster's event window" in rows["spent"]


def test_a_removed_node_is_a_gpu_node_by_its_pools_prefix(cluster: tuple[Cluster, str]) -> None:
    """Autopilot names its nodes gk3-<cluster>-<pool>-<hash>-<suffix>: a removed node of the
    same instance group as a GPU node that exists is a GPU node; one whose registration fell out
    of the event window is counted from its removal (a lower bound), said so."""
    state, endpoint = cluster
    state.add("gk3-c-nap-9xyz-h1", 10, gpu=True)
    state.add("gk3-c-nap-9xyz-h2", 10, gpu=True)
    state.remove("gk3-c-nap-9xyz-h2", 70)
    state.add("gk3-c-pool-2-cpu-k1", 5, gpu=False)
    state.remove("gk3-c-pool-2-cpu-k1", 30)
    state.events = [
        e for e in state.events if e[1] != "gk3-c-nap-9xyz-h2" or e[0] != "RegisteredNode"
    ]
    lives, _ = read_node_lives(spec(endpoint), lambda: TOKEN)
    assert lives is not None
    gpu = {life.name: life for life in lives if life.gpu}
    assert set(gpu) == {"gk3-c-nap-9xyz-h1", "gk3-c-nap-9xyz-h2"}
    assert not gpu["gk3-c-nap-9xyz-h2"].start_known
    spent = node_spend(lives, minute(80), 40.0, 0.0)
    assert spent.gpu_node_hours == pytest.approx(70 / 60)  # h1 70 min, h2 0 min seen
    assert "fell out of the event window" in spent.how


def test_removed_nodes_of_no_pool_seen_now_are_said_not_guessed(
    cluster: tuple[Cluster, str],
) -> None:
    """Autopilot after scale-to-zero: both GPU nodes (gk3-c-nap-9xyz-*) are gone, only the head's
    node (gk3-c-pool-2-k1) exists. The removed nodes' pool has no node now, so whether they were
    GPU nodes is not known: 0 GPU node-hours counted, and their 50 + 50 min = 1.67 node-hours
    said instead of silently dropped."""
    state, endpoint = cluster
    state.add("gk3-c-pool-2-k1", 0, gpu=False)
    state.add("gk3-c-nap-9xyz-h1", 10, gpu=True)
    state.add("gk3-c-nap-9xyz-h2", 10, gpu=True)
    state.remove("gk3-c-nap-9xyz-h1", 60)
    state.remove("gk3-c-nap-9xyz-h2", 60)
    lives, _ = read_node_lives(spec(endpoint), lambda: TOKEN)
    assert lives is not None
    unknown = {life.name for life in lives if not life.kind_known}
    assert unknown == {"gk3-c-nap-9xyz-h1", "gk3-c-nap-9xyz-h2"}
    spent = node_spend(lives, minute(90), 40.0, 0.0)
    assert spent.gpu_node_hours == 0
    assert "2 removed nodes of no pool seen now (1.67 node-hours)" in spent.how


def test_without_cluster_access_the_spend_is_the_jobs_time_said_so(
    cluster: tuple[Cluster, str],
) -> None:
    _, endpoint = cluster
    lives, why = read_node_lives(DashboardUrl("http://127.0.0.1:8265"))
    assert lives is None and "plain dashboard URL" in why
    refused, why = read_node_lives(spec(endpoint), lambda: "wrong token")
    assert refused is None and why == "the cluster's nodes could not be read (HTTPError)"
    rows = dict(cost_rows(view(90), PRICE, None, why))
    # The job ran from minute 60: 0.5 h x $81.10 = $40.55, a lower bound.
    assert rows["spent"].startswith("$40.55 so far (from the Ray job's running time only")
    assert rows["spent"].endswith("the cluster's nodes could not be read (HTTPError))")


def test_the_measured_cost_per_step_and_the_cost_to_finish() -> None:
    """Steps of 240, 250 and 260 s: a mean of 250 s x $81.10/h = $5.6319 per step; at step 3 of
    58 the 55 steps left cost 55 x 5.6319 = $309.76."""
    steps = tuple(
        StepMetrics(step, {STEP_TIME_KEY: seconds})
        for step, seconds in ((1, 240.0), (2, 250.0), (3, 260.0))
    )
    rows = dict(cost_rows(view(90, steps), PRICE, []))
    assert rows["cost per step"].startswith("$5.63 (measured: the mean timing_s/step of 3 steps")
    assert rows["to finish"].startswith("$309.76 for the 55 steps left (training only")
    bounded = RunPrice(40.0, 2, 81.10, "t", 1.10, bound="at least ")
    assert dict(cost_rows(view(90, steps), bounded, []))["to finish"].startswith("at least $309.76")
