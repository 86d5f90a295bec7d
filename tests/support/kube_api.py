"""Stand-ins on 127.0.0.1 for the Kubernetes API server and the GKE API, as the job provider's
fault handling sees them (nothing else can play them offline). Minimal, but in the real response
shapes:

- Kubernetes (``KubeApi``): a bearer token or 401; ``GET /api/v1/namespaces/<ns>/services/<svc>``
  -> the Service (KubeRay's head Service labels and selector) or a ``Status`` 404 with reason
  NotFound and details {name, kind: services}; ``GET /api/v1/namespaces/<ns>/pods?labelSelector=``
  -> a ``PodList`` of the head pods whose labels match; the service proxy
  ``/api/v1/namespaces/<ns>/services/<svc>:<port>/proxy/...`` forwards to the Ray dashboard, or
  answers what the API server answers when it cannot: 404 NotFound without the Service, 503
  "no endpoints available for service" without a running head pod, 503 "error trying to reach
  service: dial tcp ...: connect: connection refused" when the dashboard does not listen.
- GKE (``GkeApi``): ``GET /v1/projects/<p>/locations/<l>/clusters/<name>`` -> the cluster, or a
  Google API error ``{"error": {"code": 404, "status": "NOT_FOUND", ...}}``.

Both keep their state in plain attributes that a test flips (``kube.service_exists = False``,
``kube.head_pods = [HeadPod("x-head", "Pending")]``, ``gke.cluster_exists = False``).
"""

from __future__ import annotations

import http.client
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

TOKEN = "sesame"


def stand_in_token() -> str:
    """Token source for a RayJobProvider under test: module-level, so that dill pickles it by
    reference and the dynamic-provider host can import it."""
    return TOKEN


class _LocalServer:
    """Start, stop and address of a stand-in served on 127.0.0.1 by its ``_handle``."""

    _server: ThreadingHTTPServer | None

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        raise NotImplementedError

    @property
    def endpoint(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> Self:
        self._server = _serve(self._handle)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


@dataclass
class HeadPod:
    name: str
    phase: str = "Running"  # Pending, Running, Succeeded, Failed, Unknown
    container_waiting: str | None = None  # e.g. "CrashLoopBackOff": the container is not running


@dataclass
class KubeApi(_LocalServer):
    namespace: str
    service: str
    cluster: str  # the RayCluster name (ray.io/cluster label)
    dashboard_port: int | None  # where the proxy forwards; None: nothing listens
    port_name: str = "dashboard"
    service_exists: bool = True
    head_pods: list[HeadPod] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # "GET /path" of every request
    _server: ThreadingHTTPServer | None = field(default=None, repr=False)

    @property
    def head_selector(self) -> dict[str, str]:
        # KubeRay's HeadServiceLabels (ray-operator/controllers/ray/common/service.go, v1.5.1).
        return {
            "ray.io/cluster": self.cluster,
            "ray.io/node-type": "head",
            "ray.io/identifier": f"{self.cluster}-head",
            "app.kubernetes.io/name": "kuberay",
            "app.kubernetes.io/created-by": "kuberay-operator",
        }

    # -- request handling --------------------------------------------------------------------

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        url = urlsplit(handler.path)
        self.requests.append(f"{handler.command} {url.path}")
        if handler.headers.get("Authorization") != f"Bearer {TOKEN}":
            _reply(handler, 401, _status(401, "Unauthorized", "Unauthorized"))
            return
        ns = re.escape(self.namespace)
        proxy = re.fullmatch(
            rf"/api/v1/namespaces/{ns}/services/([^/:]+):([^/]+)/proxy(/.*)?", url.path
        )
        if proxy:
            self._proxy(handler, proxy.group(1), proxy.group(3) or "/", url.query)
            return
        service = re.fullmatch(rf"/api/v1/namespaces/{ns}/services/([^/]+)", url.path)
        if service and handler.command == "GET":
            name = service.group(1)
            if not (self.service_exists and name == self.service):
                _reply(handler, 404, _not_found("services", name))
                return
            _reply(handler, 200, self._service_object())
            return
        if url.path == f"/api/v1/namespaces/{self.namespace}/pods" and handler.command == "GET":
            selector = parse_qs(url.query).get("labelSelector", [""])[0]
            _reply(handler, 200, self._pod_list(selector))
            return
        _reply(
            handler,
            404,
            _status(404, "NotFound", "the server could not find the requested resource"),
        )

    def _proxy(self, handler: BaseHTTPRequestHandler, name: str, rest: str, query: str) -> None:
        if not (self.service_exists and name == self.service):
            _reply(handler, 404, _not_found("services", name))
            return
        if not any(_running(pod) for pod in self.head_pods):
            message = f'no endpoints available for service "{name}"'
            _reply(handler, 503, _status(503, "ServiceUnavailable", message))
            return
        body = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        try:
            if self.dashboard_port is None:
                raise ConnectionRefusedError("connection refused")
            upstream = http.client.HTTPConnection("127.0.0.1", self.dashboard_port, timeout=60)
            skip = {"host", "authorization", "connection", "content-length"}
            headers = {k: v for k, v in handler.headers.items() if k.lower() not in skip}
            target = rest + (f"?{query}" if query else "")
            upstream.request(handler.command, target, body=body or None, headers=headers)
            response = upstream.getresponse()
            payload = response.read()
            upstream.close()
        except OSError:
            message = (
                f"error trying to reach service: dial tcp 127.0.0.1:{self.dashboard_port or 8265}"
                ": connect: connection refused"
            )
            _reply(handler, 503, _status(503, "ServiceUnavailable", message))
            return
        _reply_raw(handler, response.status, payload, response.getheader("Content-Type"))

    def _service_object(self) -> dict[str, Any]:
        return {
            "kind": "Service",
            "apiVersion": "v1",
            "metadata": {
                "name": self.service,
                "namespace": self.namespace,
                "labels": dict(self.head_selector),
            },
            "spec": {
                "selector": dict(self.head_selector),
                "ports": [{"name": self.port_name, "port": 8265, "targetPort": 8265}],
            },
        }

    def _pod_list(self, selector: str) -> dict[str, Any]:
        wanted = dict(part.split("=", 1) for part in selector.split(",") if "=" in part)
        labels = self.head_selector
        matches = all(labels.get(k) == v for k, v in wanted.items())
        return {
            "kind": "PodList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": "1"},
            "items": [_pod_object(pod, labels, self.namespace) for pod in self.head_pods]
            if matches
            else [],
        }


@dataclass
class GkeApi(_LocalServer):
    project: str
    location: str
    name: str
    cluster_exists: bool = True
    requests: list[str] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = field(default=None, repr=False)

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        path = urlsplit(handler.path).path
        self.requests.append(f"{handler.command} {path}")
        if handler.headers.get("Authorization") != f"Bearer {TOKEN}":
            _reply(
                handler,
                401,
                _google_error(
                    401, "UNAUTHENTICATED", "Request had invalid authentication credentials."
                ),
            )
            return
        resource = f"projects/{self.project}/locations/{self.location}/clusters/{self.name}"
        if path == f"/v1/{resource}" and self.cluster_exists:
            _reply(handler, 200, {"name": self.name, "status": "RUNNING", "endpoint": "127.0.0.1"})
            return
        _reply(
            handler,
            404,
            _google_error(404, "NOT_FOUND", f"Not found: {path.removeprefix('/v1/')}."),
        )


@dataclass
class CapacityApi(_LocalServer):
    """The API server as the runner's ProvisioningRequest calls see it (payloads/export/
    provreq.py): ProvisioningRequests (autoscaling.x-k8s.io/v1) created, read, listed by label
    and deleted; one RayCluster read and changed by a JSON patch (RFC 6902 `test` and `add`, as
    the API server applies application/json-patch+json). A created request is given
    `provisioned_on_create` as its Provisioned condition (GKE's own controller does this once
    the nodes exist). Every call is kept in `calls` as (method, path, content type, body)."""

    namespace: str
    ray_cluster: dict[str, Any]
    requests: dict[str, dict[str, Any]] = field(default_factory=dict)
    provisioned_on_create: bool = True
    forbidden_patches: int = 0  # the next this many RayCluster patches get 403, as without RBAC
    # Worker pods by name (metadata with labels and annotations, spec.nodeName, status.phase),
    # listed by label selector and deleted as the API server does.
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    calls: list[tuple[str, str, str, Any]] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = field(default=None, repr=False)

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        url = urlsplit(handler.path)
        length = int(handler.headers.get("Content-Length") or 0)
        body = json.loads(handler.rfile.read(length)) if length else None
        kind = handler.headers.get("Content-Type", "")
        self.calls.append((handler.command, url.path, kind, body))
        if handler.headers.get("Authorization") != f"Bearer {TOKEN}":
            _reply(handler, 401, _status(401, "Unauthorized", "Unauthorized"))
            return
        ns = re.escape(self.namespace)
        provreq = re.fullmatch(
            rf"/apis/autoscaling\.x-k8s\.io/v1/namespaces/{ns}/provisioningrequests(?:/([^/]+))?",
            url.path,
        )
        cluster = self.ray_cluster["metadata"]["name"]
        pods = re.fullmatch(rf"/api/v1/namespaces/{ns}/pods(?:/([^/]+))?", url.path)
        if provreq:
            self._requests(handler, provreq.group(1), url.query, body)
        elif pods:
            self._pods(handler, pods.group(1), url.query)
        elif url.path == f"/apis/ray.io/v1/namespaces/{self.namespace}/rayclusters/{cluster}":
            self._cluster(handler, kind, body)
        else:
            _reply(handler, 404, _status(404, "NotFound", "the server could not find it"))

    def _requests(
        self, handler: BaseHTTPRequestHandler, name: str | None, query: str, body: Any
    ) -> None:
        method = handler.command
        if method == "POST" and name is None:
            created = body["metadata"]["name"]
            if created in self.requests:
                _reply(handler, 409, _status(409, "AlreadyExists", f"{created} already exists"))
                return
            if self.provisioned_on_create:
                condition = {"type": "Provisioned", "status": "True", "reason": "Provisioned"}
                body = {**body, "status": {"conditions": [condition]}}
            self.requests[created] = body
            _reply(handler, 201, body)
        elif method == "GET" and name is None:
            selector = parse_qs(query).get("labelSelector", [""])[0]
            key, _, value = selector.partition("=")
            items = [
                r
                for r in self.requests.values()
                if r["metadata"].get("labels", {}).get(key) == value
            ]
            _reply(handler, 200, {"kind": "ProvisioningRequestList", "items": items})
        elif name not in self.requests:
            _reply(handler, 404, _not_found("provisioningrequests.autoscaling.x-k8s.io", name))
        elif method == "GET":
            _reply(handler, 200, self.requests[name])
        elif method == "DELETE":
            _reply(handler, 200, self.requests.pop(name))
        else:
            _reply(handler, 405, _status(405, "MethodNotAllowed", method))

    def _pods(self, handler: BaseHTTPRequestHandler, name: str | None, query: str) -> None:
        if handler.command == "GET" and name is None:
            selector = parse_qs(query).get("labelSelector", [""])[0]
            wanted = dict(part.split("=", 1) for part in selector.split(",") if part)
            items = [
                pod
                for pod in self.pods.values()
                if all(pod["metadata"].get("labels", {}).get(k) == v for k, v in wanted.items())
            ]
            _reply(handler, 200, {"kind": "PodList", "items": items})
        elif handler.command == "DELETE" and name in self.pods:
            _reply(handler, 200, self.pods.pop(name))
        elif handler.command == "DELETE":
            _reply(handler, 404, _not_found("pods", str(name)))
        else:
            _reply(handler, 405, _status(405, "MethodNotAllowed", handler.command))

    def _cluster(self, handler: BaseHTTPRequestHandler, kind: str, body: Any) -> None:
        if handler.command == "GET":
            _reply(handler, 200, self.ray_cluster)
            return
        if handler.command != "PATCH" or kind != "application/json-patch+json":
            _reply(handler, 415, _status(415, "UnsupportedMediaType", kind))
            return
        if self.forbidden_patches > 0:
            self.forbidden_patches -= 1
            _reply(handler, 403, _status(403, "Forbidden", "cannot patch resource rayclusters"))
            return
        for op in body:
            *parents, last = [
                part.replace("~1", "/").replace("~0", "~") for part in op["path"].split("/")[1:]
            ]
            target: Any = self.ray_cluster
            for part in parents:
                target = target[int(part)] if isinstance(target, list) else target[part]
            if op["op"] == "test" and target[last] != op["value"]:
                _reply(handler, 422, _status(422, "Invalid", f"test failed at {op['path']}"))
                return
            if op["op"] == "add":
                target[last] = op["value"]
        _reply(handler, 200, self.ray_cluster)


# -- shared plumbing ------------------------------------------------------------------------


def _serve(handle: Any) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            handle(self)

        def do_POST(self) -> None:
            handle(self)

        def do_PUT(self) -> None:
            handle(self)

        def do_DELETE(self) -> None:
            handle(self)

        def do_PATCH(self) -> None:
            handle(self)

        def log_message(self, format: str, *args: object) -> None:
            return  # keep test output quiet

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
    ).start()
    return server


def _status(
    code: int, reason: str, message: str, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A metav1.Status as the API server writes it."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return body


def _not_found(kind: str, name: str) -> dict[str, Any]:
    return _status(404, "NotFound", f'{kind} "{name}" not found', {"name": name, "kind": kind})


def _google_error(code: int, status: str, message: str) -> dict[str, Any]:
    return {
        "error": {
            "code": code,
            "message": message,
            "errors": [
                {
                    "message": message,
                    "domain": "global",
                    "reason": "notFound" if code == 404 else "authError",
                }
            ],
            "status": status,
        }
    }


def _running(pod: HeadPod) -> bool:
    return pod.phase == "Running" and pod.container_waiting is None


def _pod_object(pod: HeadPod, labels: dict[str, str], namespace: str) -> dict[str, Any]:
    if pod.container_waiting is not None:
        state: dict[str, Any] = {"waiting": {"reason": pod.container_waiting}}
    elif pod.phase == "Running":
        state = {"running": {"startedAt": "2026-12-01T00:00:00Z"}}
    else:
        state = {"waiting": {"reason": "ContainerCreating"}}
    return {
        "metadata": {"name": pod.name, "namespace": namespace, "labels": dict(labels)},
        "status": {
            "phase": pod.phase,
            "containerStatuses": [{"name": "ray-head", "ready": _running(pod), "state": state}],
        },
    }


def _reply(handler: BaseHTTPRequestHandler, code: int, body: dict[str, Any]) -> None:
    _reply_raw(handler, code, json.dumps(body).encode(), "application/json")


def _reply_raw(
    handler: BaseHTTPRequestHandler, code: int, payload: bytes, content_type: str | None
) -> None:
    handler.send_response(code)
    handler.send_header("Content-Type", content_type or "application/json")
    handler.send_header("Content-Length", str(len(payload)))
    handler.end_headers()
    handler.wfile.write(payload)
