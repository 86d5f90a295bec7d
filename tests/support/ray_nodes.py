"""Extra Ray nodes on 127.0.0.1 joined to a test head: "GPU nodes" for the recovery tests.

Ray accepts declared resources on any machine (`ray start --num-gpus=1` on a CPU host), so a
placement group of {"GPU": 1} bundles lands on these nodes as verl's lands on GPU nodes. Each
node is one `ray start --address=<head> --block` process tree (raylet, its agents and the
workers it spawns): `kill()` SIGKILLs that tree by PID, as a lost machine; `stop()` ends it
gently. Ports are picked free like the head's (tests/support/ray_head.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.ray_head import (
    _INHERITED_RAY_ADDRESS_VARS,
    _PATIENT_START,
    _RUNTIME_STARTED,
    LOOPBACK_ENV,
    RayHead,
    _descendants,
    _tail,
    free_ports,
    stop_tree,
)
from tests.support.ray_start_patient import KEEP_LOOPBACK_ENV


@dataclass
class RayNode:
    log_path: Path
    _root: subprocess.Popen[bytes] = field(repr=False)
    pids: tuple[int, ...] = ()

    def kill(self) -> None:
        """SIGKILL the node's whole process tree at once: a lost machine."""
        stop_tree(self._root, self.pids, grace_s=0.0)

    def stop(self) -> None:
        stop_tree(self._root, self.pids, grace_s=3.0)


def start_gpu_node(
    head: RayHead, ray_bin: Path | None, log_dir: Path, timeout_s: float = 180.0
) -> RayNode:
    """A node with one declared GPU and one CPU, joined to `head` (ray_bin: the `ray` of the
    head's Ray release; None: this interpreter's); returns once `ray start`
    says the runtime started (raises with its log if it exits first or times out)."""
    ports = free_ports(7)
    launcher = (
        [str(ray_bin.with_name("python")), "-I", str(_PATIENT_START)]
        if ray_bin is not None
        else [sys.executable, "-I", str(_PATIENT_START)]
    )
    command = [
        *launcher, "start", "--block", f"--address={head.gcs_address}",
        "--node-ip-address=127.0.0.1", "--num-gpus=1", "--num-cpus=1",
        f"--node-manager-port={ports[0]}", f"--object-manager-port={ports[1]}",
        f"--metrics-export-port={ports[2]}", f"--dashboard-agent-listen-port={ports[3]}",
        f"--dashboard-agent-grpc-port={ports[4]}", f"--runtime-env-agent-port={ports[5]}",
        "--min-worker-port=0", "--max-worker-port=0",
        "--object-store-memory=80000000", "--disable-usage-stats",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in _INHERITED_RAY_ADDRESS_VARS}
    # LOOPBACK_ENV's "0" makes `ray start` refuse to join a head (scripts.py, "Multi-node Ray
    # clusters are not supported", Ray 2.47-2.60); the node's address is given explicitly instead.
    env[next(iter(LOOPBACK_ENV))] = "1"
    env[KEEP_LOOPBACK_ENV] = "1"
    if ray_bin is not None:  # the node's agent finds py-spy (stack dumps) on PATH
        env["PATH"] = f"{ray_bin.parent}{os.pathsep}{env.get('PATH', '')}"
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"node-{ports[0]}.log"
    with log_path.open("wb") as log:
        root = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
    node = RayNode(log_path=log_path, _root=root)
    deadline = time.monotonic() + timeout_s
    while _RUNTIME_STARTED not in log_path.read_bytes():
        if root.poll() is not None or time.monotonic() > deadline:
            node.kill()
            raise RuntimeError(f"GPU node did not start; its log ({log_path}):\n{_tail(log_path)}")
        time.sleep(0.3)
    node.pids = (root.pid, *_descendants(root.pid))
    return node


def alive_gpus(head: RayHead) -> float:
    """GPUs of the head's alive nodes, from Ray's state API (GET /api/v0/nodes)."""
    query = urllib.parse.urlencode(
        {"limit": 1000, "filter_keys": "state", "filter_predicates": "=", "filter_values": "ALIVE"}
    )
    with urllib.request.urlopen(f"{head.dashboard_url}/api/v0/nodes?{query}", timeout=30) as r:
        body = json.loads(r.read())
    nodes = body["data"]["result"]["result"]
    return sum(float(node.get("resources_total", {}).get("GPU", 0)) for node in nodes)


def wait_for_gpus(head: RayHead, count: float, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while alive_gpus(head) != count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the cluster did not reach {count} alive GPUs in {timeout_s} s")
        time.sleep(0.5)
