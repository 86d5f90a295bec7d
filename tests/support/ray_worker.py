"""A worker node joined to a local test head (tests/support/ray_head.py), stopped by PID.

    worker = start_ray_worker(head, Path(tempfile.mkdtemp(prefix="rw", dir="/tmp")), num_gpus=1)
    ...
    worker.stop()  # the node leaves: its raylet and workers get SIGTERM, then SIGKILL

`ray start --address <gcs> --block` keeps one root process whose descendants are the node;
stop() signals that tree only (never `ray stop`, which kills every Ray process of the machine).
`--num-gpus` only declares the resource: Ray schedules by it and no GPU is touched.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.ray_head import (
    _INHERITED_RAY_ADDRESS_VARS,
    RayHead,
    free_ports,
)

JOIN_LOOPBACK = Path(__file__).with_name("ray_join_loopback.py")
# The variable LOOPBACK_ENV sets to 0 for the head (ray/_private/ray_constants.py).
ENABLE_CLUSTER_VAR = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@dataclass
class RayWorker:
    temp_dir: Path
    log_path: Path
    # The node's `ray start` process tree, stopped the way a head's is (RayHead.stop).
    _tree: RayHead = field(repr=False)

    def stop(self, grace_s: float = 3.0) -> None:
        """SIGTERM the node's process tree, then SIGKILL whatever is alive after grace_s."""
        self._tree.stop(grace_s)


def start_ray_worker(
    head: RayHead, temp_dir: Path, *, num_gpus: int = 0, num_cpus: int = 1
) -> RayWorker:
    """Start a node that joins `head`; returns at once (alive_nodes tells when it has joined)."""
    ports = free_ports(6)
    command = [
        sys.executable, "-I", str(JOIN_LOOPBACK), "start", "--block",
        f"--address={head.gcs_address}",
        "--node-ip-address=127.0.0.1",
        f"--node-manager-port={ports[0]}",
        f"--object-manager-port={ports[1]}",
        f"--dashboard-agent-listen-port={ports[2]}",
        f"--dashboard-agent-grpc-port={ports[3]}",
        f"--runtime-env-agent-port={ports[4]}",
        f"--metrics-export-port={ports[5]}",
        "--min-worker-port=0", "--max-worker-port=0",
        f"--num-cpus={num_cpus}",
        f"--num-gpus={num_gpus}",
        "--object-store-memory=100000000",
        f"--temp-dir={temp_dir}",
        "--disable-usage-stats",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in _INHERITED_RAY_ADDRESS_VARS}
    # A node joining a head: `ray start --address` refuses with LOOPBACK_ENV's 0; with 1, the
    # address stays 127.0.0.1 through ray_join_loopback.py and the node's own through
    # --node-ip-address.
    env[ENABLE_CLUSTER_VAR] = "1"
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    temp_dir.mkdir(parents=True, exist_ok=True)
    log_path = temp_dir / "ray-start.log"
    with log_path.open("wb") as log:
        root = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
    tree = RayHead(
        dashboard_url=head.dashboard_url,
        gcs_address=head.gcs_address,
        temp_dir=temp_dir,
        log_path=log_path,
        pids=(root.pid,),
        _root=root,
    )
    return RayWorker(temp_dir=temp_dir, log_path=log_path, _tree=tree)


def alive_nodes(head: RayHead, resource: str) -> list[str]:
    """Node ids of the head's alive nodes that offer `resource` (the dashboard's state API)."""
    from ray.util.state import list_nodes

    nodes = list_nodes(address=head.dashboard_url, detail=True, raise_on_missing_output=False)
    return [
        n.node_id
        for n in nodes
        if n.state == "ALIVE" and (n.resources_total or {}).get(resource, 0) > 0
    ]


def wait_until(what: str, check: Callable[[], bool], timeout_s: float = 300) -> None:
    """Poll `check`; the deadline only ends a test that would hang (slow is fine)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"still not {what} after {timeout_s} s"
        time.sleep(0.5)
