"""`ray start`, for the Ray releases whose start gives the dashboard a fixed ~20 s to come up.

Run with the Python of the Ray installation to start (start_ray_head does this for a head of
another Ray release): ``<venv>/bin/python ray_start_patient.py start --head ...``.

Ray 2.47 and 2.49 (`ray/_private/services.py`, start_api_server) poll the GCS for the dashboard's
address 200 times, 0.1 s apart, then fail `ray start`; Ray 2.60 waits
RAY_DASHBOARD_STARTUP_TIMEOUT_S instead (ray_constants). On a loaded two-core machine the
dashboard, which starts nine module subprocesses that each import Ray, takes longer than 20 s.
For those releases this stretches that poll's 0.1 s sleeps to 1 s (about 200 s in all), and
otherwise runs Ray's own CLI unchanged; the head is ready when its dashboard answers.
"""

from __future__ import annotations

import sys
import time
import types

STRETCHED_SLEEP_S = 1.0


def _stretch_dashboard_wait() -> None:
    from ray._private import ray_constants, services

    if hasattr(ray_constants, "RAY_DASHBOARD_STARTUP_TIMEOUT_S"):
        return  # a release with a configurable wait: start_ray_head sets it

    def sleep(seconds: float) -> None:
        time.sleep(STRETCHED_SLEEP_S if seconds == 0.1 else seconds)

    patient = types.ModuleType("time")
    patient.__dict__.update(time.__dict__)
    patient.sleep = sleep  # type: ignore[attr-defined]
    services.time = patient  # type: ignore[attr-defined]


# Set by tests/support/ray_nodes.py for a node joining a head on 127.0.0.1: Ray rewrites a
# loopback --address to the host's first interface address (services.py,
# resolve_ip_for_localhost, Ray 2.47-2.60) when multi-node clusters are enabled, which a joining
# node needs (scripts.py refuses to start one otherwise). This keeps 127.0.0.1.
KEEP_LOOPBACK_ENV = "VERL_GKE_TEST_KEEP_LOOPBACK"


def _keep_loopback() -> None:
    import os

    from ray._private import services

    if os.environ.get(KEEP_LOOPBACK_ENV) == "1":
        services.resolve_ip_for_localhost = lambda host: host  # type: ignore[assignment]


def main() -> int:
    _stretch_dashboard_wait()
    _keep_loopback()
    from ray.scripts.scripts import main as ray_main

    sys.argv[0] = "ray"
    return int(ray_main() or 0)


if __name__ == "__main__":
    sys.exit(main())
