"""`ray start --address 127.0.0.1:<port>` that keeps the head's loopback address.

Run with the Python of the Ray installation: ``python ray_join_loopback.py start --address ...``.
A joining node needs RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1 (with 0, `ray start --address` aborts:
"Multi-node Ray clusters are not supported", ray/scripts/scripts.py, Ray 2.60), and with 1 Ray
rewrites a loopback bootstrap address to the host's first interface address
(services.resolve_ip_for_localhost via canonicalize_bootstrap_address), where a test head, bound
to 127.0.0.1, does not listen. This keeps the address as given; otherwise Ray's own CLI runs.
"""

from __future__ import annotations

import sys


def main() -> int:
    from ray._private import services
    from ray.scripts.scripts import main as ray_main

    services.resolve_ip_for_localhost = lambda host: host  # type: ignore[assignment]
    sys.argv[0] = "ray"
    return int(ray_main() or 0)


if __name__ == "__main__":
    sys.exit(main())
