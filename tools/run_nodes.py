"""The cluster's nodes and their Node events, read from the Kubernetes API with the credentials
`python -m tools.run` reaches the dashboard with (a short-lived Google token and the cluster CA):
GET /api/v1/nodes and GET /api/v1/events?fieldSelector=involvedObject.kind=Node (core/v1
NodeList and EventList). pricing/spend.py turns them into node lifetimes.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import requests

from jobs import dashboard_access
from jobs.dashboard_access import DashboardSpec, KubeServiceProxy
from pricing.spend import NodeLife, node_lives

NODES_PATH = "/api/v1/nodes"
NODE_EVENTS_PATH = "/api/v1/events?fieldSelector=involvedObject.kind%3DNode"


def read_node_lives(
    spec: DashboardSpec,
    token_provider: dashboard_access.TokenProvider | None = None,
    timeout_s: float = 15.0,
) -> tuple[list[NodeLife] | None, str]:
    """(the nodes' lifetimes, ""), or (None, why they could not be read): a plain dashboard URL
    gives no cluster access; an API that refuses or does not answer is said, never raised."""
    if not isinstance(spec, KubeServiceProxy):
        return None, "a plain dashboard URL gives no access to the cluster's nodes"
    ca_path: str | None = None
    try:
        if spec.cluster_ca_certificate and spec.base_url.startswith("https://"):
            handle, ca_path = tempfile.mkstemp(prefix="kube-ca-", suffix=".pem")
            with os.fdopen(handle, "wb") as ca_file:
                ca_file.write(dashboard_access.decode_ca_certificate(spec.cluster_ca_certificate))
        tokens = token_provider or dashboard_access.google_adc_token
        headers = {"Authorization": f"Bearer {tokens()}"}
        verify: bool | str = ca_path or True

        def get(path: str) -> Any:
            answer = requests.get(
                spec.base_url + path, headers=headers, verify=verify, timeout=timeout_s
            )
            answer.raise_for_status()
            return answer.json()

        return node_lives(get(NODES_PATH), get(NODE_EVENTS_PATH)), ""
    except Exception as error:  # refused, unreachable, no credentials: the job's time is next
        return None, f"the cluster's nodes could not be read ({type(error).__name__})"
    finally:
        if ca_path is not None:
            os.unlink(ca_path)
