"""Evidence that a Ray job is gone, asked from outside its Ray head.

The job provider forgets a job (refresh drops it, destroy or a replacement goes ahead) only on
positive evidence. The Ray head is asked first (jobs/ray_job.py); when its dashboard does not
answer, this module asks the two other authorities that can know:

- the Kubernetes API, through the same endpoint, OAuth token and cluster CA as the dashboard's
  service proxy: ``GET /api/v1/namespaces/<ns>/services/<head svc>`` answering a ``Status`` with
  reason ``NotFound`` for that service means the head Service is gone (KubeRay deletes it with the
  RayCluster). When the Service exists, its selector (KubeRay: ``ray.io/cluster``,
  ``ray.io/node-type: head``, ...) lists the head pods: none, or none whose phase is Running with
  every container running, means the head that ran the job is not running (a new head does not
  resume a job whose driver died with the old one);
- the GKE API (optional ``gke_cluster`` input): ``GET
  https://container.googleapis.com/v1/projects/<p>/locations/<l>/clusters/<name>`` answering a
  Google error with code 404 and status ``NOT_FOUND`` means the cluster is gone.

Anything else (a timeout, a refused connection, 401/403, a 404 that is not the API's own
NotFound for exactly that object, a Running head pod) is recorded as a finding that proves
nothing. Every request has a short timeout and the whole inquiry a budget, so an unreachable
cluster costs seconds, not minutes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from jobs import dashboard_access

GKE_API = "https://container.googleapis.com"
GKE_KEYS = frozenset({"project", "location", "name", "api_endpoint"})
EVIDENCE_BUDGET_S = 15.0
_CONNECT_TIMEOUT_S = 3.0
_READ_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class GkeClusterRef:
    """The GKE cluster that runs the Ray cluster; asked whether it still exists."""

    project: str
    location: str
    name: str
    # The API's base URL; tests point it at a stand-in on 127.0.0.1.
    api_endpoint: str = GKE_API

    @property
    def url(self) -> str:
        return (
            f"{self.api_endpoint.rstrip('/')}/v1/projects/{quote(self.project, safe='')}"
            f"/locations/{quote(self.location, safe='')}/clusters/{quote(self.name, safe='')}"
        )


def gke_cluster_input(project: Any, location: Any, name: Any) -> dict[str, Any]:
    """Program-side value of the RayJob `gke_cluster` input (values may be pulumi.Inputs)."""
    return {"project": project, "location": location, "name": name}


def _never_unknown(_value: Any) -> bool:
    return False


def check_gke_cluster(value: Any, is_unknown: Callable[[Any], bool] = _never_unknown) -> None:
    """Raise ValueError for the first problem in the known parts of a `gke_cluster` input."""
    if value is None or is_unknown(value):
        return
    if not isinstance(value, Mapping) or not {"project", "location", "name"} <= set(value):
        raise ValueError(
            f"gke_cluster must be a mapping with project, location and name, got {value!r}; "
            "e.g. gke_cluster_input('my-project', 'us-central1', 'verl-a4x')"
        )
    unknown_keys = sorted(set(value) - GKE_KEYS)
    if unknown_keys:
        raise ValueError(
            f"gke_cluster has unexpected keys {unknown_keys}; allowed: {sorted(GKE_KEYS)}"
        )
    for key in ("project", "location", "name"):
        item = value[key]
        if not is_unknown(item) and (not isinstance(item, str) or not item):
            raise ValueError(f"gke_cluster.{key} must be a non-empty string, got {item!r}")
    endpoint = value.get("api_endpoint")
    if endpoint is not None and not is_unknown(endpoint):
        if not isinstance(endpoint, str) or not endpoint.startswith(("http://", "https://")):
            raise ValueError(
                f"gke_cluster.api_endpoint must be an http(s) URL, got {endpoint!r}; "
                f"leave it out for {GKE_API}"
            )


def parse_gke_cluster(value: Mapping[str, Any] | None) -> GkeClusterRef | None:
    if value is None:
        return None
    check_gke_cluster(value)
    return GkeClusterRef(
        project=value["project"],
        location=value["location"],
        name=value["name"],
        api_endpoint=value.get("api_endpoint") or GKE_API,
    )


@dataclass(frozen=True)
class Finding:
    source: str  # "Kubernetes API" or "GKE API"
    gone: bool  # positive evidence that the Ray head that ran the job is gone
    detail: str  # what was asked and what the answer was


@dataclass(frozen=True)
class Evidence:
    findings: tuple[Finding, ...]

    @property
    def gone(self) -> bool:
        return any(f.gone for f in self.findings)

    @property
    def proof(self) -> str:
        """The findings that prove the job gone."""
        return "; ".join(f"{f.source}: {f.detail}" for f in self.findings if f.gone)

    def summary(self) -> str:
        if not self.findings:
            return "no other source to ask (a plain dashboard URL and no gke_cluster input)"
        return "; ".join(f"{f.source}: {f.detail}" for f in self.findings)


def gather(
    spec: dashboard_access.DashboardSpec,
    gke: GkeClusterRef | None,
    make_args: Callable[[], dashboard_access.ClientArgs],
    token: Callable[[], str],
    budget_s: float = EVIDENCE_BUDGET_S,
) -> Evidence:
    """Ask the Kubernetes API (service-proxy dashboards) and the GKE API (when given).

    Stops at the first proof; never raises (a failure to ask is a finding that proves nothing).
    """
    deadline = time.monotonic() + budget_s
    findings: list[Finding] = []
    if isinstance(spec, dashboard_access.KubeServiceProxy):
        findings.append(_ask_kubernetes(spec, make_args, deadline))
        if findings[-1].gone:
            return Evidence(tuple(findings))
    if gke is not None:
        findings.append(_ask_gke(gke, token, deadline))
    return Evidence(tuple(findings))


def _timeout(deadline: float) -> tuple[float, float]:
    left = max(0.5, deadline - time.monotonic())
    return (min(_CONNECT_TIMEOUT_S, left), min(_READ_TIMEOUT_S, left))


_KUBERNETES = "Kubernetes API"


def _ask_kubernetes(
    spec: dashboard_access.KubeServiceProxy,
    make_args: Callable[[], dashboard_access.ClientArgs],
    deadline: float,
) -> Finding:
    """Evidence from the API server: the head Service is gone, or no head pod runs."""
    import requests

    service_path = f"/api/v1/namespaces/{spec.namespace}/services/{spec.service}"
    try:
        args = make_args()
        response = requests.get(
            spec.base_url + service_path,
            headers=args.headers,
            verify=args.verify,
            timeout=_timeout(deadline),
        )
    except Exception as exc:  # a failure to ask proves nothing
        return Finding(_KUBERNETES, False, f"GET {service_path} failed: {_short(exc)}")
    if response.status_code == 404 and _is_k8s_not_found(response, "services", spec.service):
        return Finding(
            _KUBERNETES,
            True,
            f"the head Service {spec.namespace}/{spec.service} does not exist "
            f"(GET {service_path}: 404 NotFound)",
        )
    if response.status_code != 200:
        return Finding(
            _KUBERNETES,
            False,
            f"GET {service_path} answered {response.status_code} ({_status_message(response)})",
        )
    selector = _head_selector(_json(response))
    if not selector:
        return Finding(
            _KUBERNETES,
            False,
            f"the head Service {spec.service} exists; its selector names no head",
        )
    return _ask_for_head_pods(spec, args, selector, deadline)


def _ask_for_head_pods(
    spec: dashboard_access.KubeServiceProxy,
    args: dashboard_access.ClientArgs,
    selector: Mapping[str, str],
    deadline: float,
) -> Finding:
    """The head Service exists: evidence only if none of the pods it selects is running."""
    import requests

    label_selector = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
    pods_path = f"/api/v1/namespaces/{spec.namespace}/pods"
    try:
        pods = requests.get(
            spec.base_url + pods_path,
            params={"labelSelector": label_selector},
            headers=args.headers,
            verify=args.verify,
            timeout=_timeout(deadline),
        )
    except Exception as exc:
        return Finding(
            _KUBERNETES, False, f"the head Service exists; listing its pods failed: {_short(exc)}"
        )
    body = _json(pods)
    if pods.status_code != 200 or body.get("kind") != "PodList":
        return Finding(
            _KUBERNETES,
            False,
            f"the head Service exists; GET {pods_path}?labelSelector={label_selector} answered "
            f"{pods.status_code} ({_status_message(pods)})",
        )
    states = [_pod_state(pod) for pod in body.get("items") or []]
    if any(running for _, running in states):
        described = ", ".join(text for text, _ in states)
        return Finding(_KUBERNETES, False, f"the head pod is running ({described})")
    if not states:
        return Finding(
            _KUBERNETES, True, f"no head pod exists (pods with labels {label_selector}: none)"
        )
    described = ", ".join(text for text, _ in states)
    return Finding(_KUBERNETES, True, f"no head pod is running ({described})")


def _ask_gke(gke: GkeClusterRef, token: Callable[[], str], deadline: float) -> Finding:
    import requests

    source = "GKE API"
    path = f"projects/{gke.project}/locations/{gke.location}/clusters/{gke.name}"
    try:
        response = requests.get(
            gke.url, headers={"Authorization": f"Bearer {token()}"}, timeout=_timeout(deadline)
        )
    except Exception as exc:
        return Finding(source, False, f"GET {path} failed: {_short(exc)}")
    body = _json(response)
    error = body.get("error") if isinstance(body.get("error"), dict) else {}
    if response.status_code == 404 and error.get("status") == "NOT_FOUND":
        return Finding(source, True, f"the cluster {path} does not exist (404 NOT_FOUND)")
    if response.status_code == 200:
        return Finding(
            source, False, f"the cluster {gke.name} exists (status {body.get('status', '?')})"
        )
    detail = error.get("message") or response.text[:200]
    return Finding(source, False, f"GET {path} answered {response.status_code} ({detail})")


def _is_k8s_not_found(response: Any, kind: str, name: str) -> bool:
    """The API server's own NotFound Status for exactly this object (not a proxy's 404 page)."""
    body = _json(response)
    details = body.get("details") if isinstance(body.get("details"), dict) else {}
    return (
        body.get("kind") == "Status"
        and body.get("reason") == "NotFound"
        and details.get("kind") == kind
        and details.get("name") == name
    )


def _head_selector(service: Mapping[str, Any]) -> dict[str, str]:
    spec = service.get("spec") if isinstance(service.get("spec"), dict) else {}
    selector = dict(spec.get("selector") or {})
    if selector.get("ray.io/node-type") == "head":
        return {str(k): str(v) for k, v in selector.items()}
    metadata = service.get("metadata") if isinstance(service.get("metadata"), dict) else {}
    cluster = (metadata.get("labels") or {}).get("ray.io/cluster")
    if cluster:
        return {"ray.io/cluster": str(cluster), "ray.io/node-type": "head"}
    return {}


def _pod_state(pod: Mapping[str, Any]) -> tuple[str, bool]:
    name = (pod.get("metadata") or {}).get("name", "?")
    status = pod.get("status") or {}
    phase = status.get("phase", "Unknown")
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return f"{name}: {phase}, being deleted", False
    containers = status.get("containerStatuses") or []
    waiting = [
        f"{c.get('name')} {(c.get('state') or {}).get('waiting', {}).get('reason', 'not running')}"
        for c in containers
        if "running" not in (c.get("state") or {})
    ]
    running = phase == "Running" and bool(containers) and not waiting
    text = f"{name}: {phase}" + (f" ({', '.join(waiting)})" if waiting else "")
    return text, running


def _json(response: Any) -> dict[str, Any]:
    try:
        value = response.json()
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _status_message(response: Any) -> str:
    body = _json(response)
    message = body.get("message") or (body.get("error") or {}).get("message")
    return str(message or response.text[:200] or response.reason)


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


def ray_pods_summary(
    spec: dashboard_access.KubeServiceProxy,
    make_args: Callable[[], dashboard_access.ClientArgs],
    budget_s: float = 5.0,
) -> str | None:
    """One line on the Ray cluster's pods for progress messages, e.g. "Ray pods: 1 Running,
    2 Pending (ContainerCreating x2)"; None when the Kubernetes API does not tell."""
    import requests

    deadline = time.monotonic() + budget_s
    try:
        args = make_args()
        service = requests.get(
            f"{spec.base_url}/api/v1/namespaces/{spec.namespace}/services/{spec.service}",
            headers=args.headers,
            verify=args.verify,
            timeout=_timeout(deadline),
        )
        labels = (_json(service).get("metadata") or {}).get("labels") or {}
        cluster = labels.get("ray.io/cluster")
        if service.status_code != 200 or not cluster:
            return None
        pods = requests.get(
            f"{spec.base_url}/api/v1/namespaces/{spec.namespace}/pods",
            params={"labelSelector": f"ray.io/cluster={cluster}"},
            headers=args.headers,
            verify=args.verify,
            timeout=_timeout(deadline),
        )
    except Exception:  # progress text only
        return None
    items = _json(pods).get("items") or []
    if pods.status_code != 200:
        return None
    phases: dict[str, int] = {}
    reasons: dict[str, int] = {}
    for pod in items:
        status = pod.get("status") or {}
        phase = status.get("phase", "Unknown")
        phases[phase] = phases.get(phase, 0) + 1
        for container in status.get("containerStatuses") or status.get("conditions") or []:
            waiting = (container.get("state") or {}).get("waiting") or {}
            reason = waiting.get("reason") or (
                container.get("reason") if container.get("status") == "False" else None
            )
            if reason:
                reasons[reason] = reasons.get(reason, 0) + 1
    if not items:
        return f"Ray pods of {cluster}: none yet"
    text = ", ".join(f"{count} {phase}" for phase, count in sorted(phases.items()))
    if reasons:
        text += " (" + ", ".join(f"{r} x{n}" for r, n in sorted(reasons.items())) + ")"
    return f"Ray pods of {cluster}: {text}"
