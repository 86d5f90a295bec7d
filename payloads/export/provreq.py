"""Ask for GPU nodes again on GKE Standard flex-start (queued provisioning), from the Ray head.

The worker pods consume a ProvisioningRequest named in the RayCluster's worker template
(`autoscaling.x-k8s.io/consume-provisioning-request`). In kubernetes/autoscaler's
cluster-autoscaler a pod consuming a request never triggers an ordinary scale-up
(processors/provreq/pods_filter.go at 54cc606), and a request stops booking capacity once it is
BookingExpired (10 min after Provisioned, or once all its pods are scheduled) or Failed
(processors/provreq/processor.go at 0cc6feb; only for the classes that code serves, so for
queued-provisioning.gke.io the runner applies the 10 minutes itself: books_capacity). So the
nodes of a request come once: after a node
loss, after KubeRay's autoscaler scaled the workers to zero, or for a later run, this module
creates a new request for the missing nodes (the stack's request body, rendered by
manifests/capacity.runner_capacity, with a new name and count) and points the worker template's
annotation at it. KubeRay builds each new worker pod from the group's template and does not
recreate running pods when the template changes (ray-operator/controllers/ray/
raycluster_controller.go at v1.7.0: shouldRecreatePodsForUpgrade only with
upgradeStrategy Recreate, which the RayCluster does not set). The runner's earlier requests are
deleted once the new one is Provisioned or Failed, unless a live worker pod still consumes them;
worker pods left unscheduled on an earlier request (KubeRay recreated them before the template
named the new one) are deleted so that KubeRay recreates them on the new request.

Stdlib only. In the pod: the API server from KUBERNETES_SERVICE_HOST/PORT, the service account's
token (re-read for every call: kubelet rotates it) and TLS verified against its ca.crt.
"""

from __future__ import annotations

import copy
import json
import math
import os
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# Marks the requests the runner made (the stack's own request is Pulumi's and stays).
RUNNER_LABEL = "verl-gke/requested-by"
RUNNER_VALUE = "runner"
PROVISIONED = "Provisioned"
FAILED = "Failed"
BOOKING_EXPIRED = "BookingExpired"
CAPACITY_REVOKED = "CapacityRevoked"
# A Provisioned request holds its nodes for the pods that consume it this long
# (cluster-autoscaler processors/provreq/processor.go defaultReservationTime, 10 min, at
# cluster-autoscaler-1.36.1). That code marks BookingExpired only for the classes it serves
# (provisioningrequest/supported_classes.go: check-capacity, best-effort-atomic-scale-up), not
# queued-provisioning.gke.io, so the runner does not wait for GKE to set the condition.
BOOKING_WINDOW_S = 600.0


class KubeError(RuntimeError):
    """A Kubernetes API call failed; the message names the call and the server's answer."""


class KubeClient:
    def __init__(self, server: str, token_file: Path, ca_file: Path | None) -> None:
        self.server = server.rstrip("/")
        self.token_file = token_file
        self.context = ssl.create_default_context(cafile=str(ca_file)) if ca_file else None

    @classmethod
    def in_cluster(cls) -> KubeClient:
        host = os.environ["KUBERNETES_SERVICE_HOST"]
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        host = f"[{host}]" if ":" in host else host  # an IPv6 service address
        return cls(f"https://{host}:{port}", SERVICE_ACCOUNT / "token", SERVICE_ACCOUNT / "ca.crt")

    def call(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> dict[str, Any] | None:
        """The answer's object; None for 404 on GET and DELETE."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.server + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token_file.read_text().strip()}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(request, timeout=30, context=self.context) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            if exc.code == 404 and method in ("GET", "DELETE"):
                return None
            text = exc.read().decode(errors="replace")
            try:
                text = json.loads(text).get("message", text)
            except (json.JSONDecodeError, AttributeError):
                pass
            raise KubeError(f"{method} {path}: HTTP {exc.code}: {text}") from None
        except OSError as exc:
            raise KubeError(f"{method} {path}: {exc}") from None


@dataclass(frozen=True)
class CapacitySpec:
    """manifests/capacity.runner_capacity, as the runner receives it (--capacity-request)."""

    request: dict[str, Any]
    ray_cluster: str
    worker_group: str
    consume_annotation: str
    gpus_per_node: float

    @classmethod
    def from_json(cls, text: str) -> CapacitySpec:
        return cls(**json.loads(text))

    @property
    def namespace(self) -> str:
        return str(self.request["metadata"]["namespace"])

    def requests_path(self, name: str = "") -> str:
        api = self.request["apiVersion"]
        tail = f"/{name}" if name else ""
        return f"/apis/{api}/namespaces/{self.namespace}/provisioningrequests{tail}"

    def worker_pods_path(self) -> str:
        """This worker group's pods: KubeRay labels each pod it creates with ray.io/cluster and
        ray.io/group (ray-operator controllers/ray/common/pod.go labelPod; utils constants
        RayClusterLabelKey, RayNodeGroupLabelKey)."""
        selector = f"ray.io/cluster%3D{self.ray_cluster},ray.io/group%3D{self.worker_group}"
        return f"/api/v1/namespaces/{self.namespace}/pods?labelSelector={selector}"

    def pod_path(self, name: str) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods/{name}"

    def cluster_path(self) -> str:
        return f"/apis/ray.io/v1/namespaces/{self.namespace}/rayclusters/{self.ray_cluster}"

    def body(self, name: str, count: int) -> dict[str, Any]:
        """The stack's request with another name and count, labelled as the runner's."""
        body = copy.deepcopy(self.request)
        body["metadata"]["name"] = name
        body["metadata"].setdefault("labels", {})[RUNNER_LABEL] = RUNNER_VALUE
        body["spec"]["podSets"][0]["count"] = count
        return body


def condition_true(request: dict[str, Any] | None, kind: str) -> bool:
    conditions = ((request or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


def _provisioned_at(request: dict[str, Any]) -> float | None:
    """When the request became Provisioned (its condition's lastTransitionTime, RFC 3339)."""
    for condition in (request.get("status") or {}).get("conditions") or []:
        if condition.get("type") == PROVISIONED and condition.get("status") == "True":
            stamp = str(condition.get("lastTransitionTime") or "").replace("Z", "+00:00")
            try:
                return datetime.fromisoformat(stamp).timestamp()
            except ValueError:
                return None
    return None


def books_capacity(request: dict[str, Any] | None, now: float | None = None) -> bool:
    """Whether nodes may still come for a request: it exists, is neither BookingExpired, Failed
    (provisioningrequest/conditions ShouldCapacityBeBooked) nor CapacityRevoked
    (autoscaling.x-k8s.io/v1 types.go: its resources are no longer valid), and is not Provisioned
    longer ago than BOOKING_WINDOW_S (a request's nodes come once). A Provisioned condition
    without a readable time counts as recent."""
    if request is None or any(
        condition_true(request, kind) for kind in (BOOKING_EXPIRED, FAILED, CAPACITY_REVOKED)
    ):
        return False
    provisioned = _provisioned_at(request)
    now = time.time() if now is None else now
    return provisioned is None or now - provisioned <= BOOKING_WINDOW_S


def nodes_missing(spec: CapacitySpec, gpus_needed: float, gpus_alive: float) -> int:
    return max(0, math.ceil((gpus_needed - gpus_alive) / spec.gpus_per_node))


class CapacityRenewer:
    """One new request at a time; the runner's older ones go once it is Provisioned or Failed."""

    def __init__(self, spec: CapacitySpec, client: KubeClient, say: Callable[[str], None]) -> None:
        self.spec = spec
        self.client = client
        self.say = say
        self.pending: str | None = None  # created, not yet Provisioned or Failed
        self.unpatched: str | None = None  # created, the worker template not yet pointed at it

    def _group_index(self, cluster: dict[str, Any]) -> tuple[int, str | None]:
        for index, group in enumerate(cluster["spec"]["workerGroupSpecs"]):
            if group.get("groupName") == self.spec.worker_group:
                annotations = group["template"].get("metadata", {}).get("annotations", {})
                return index, annotations.get(self.spec.consume_annotation)
        raise KubeError(f"RayCluster {self.spec.ray_cluster} has no group {self.spec.worker_group}")

    def renew(self, count: int, suffix: str) -> str | None:
        """A new request for `count` nodes, consumed by the next worker pods; None when the
        request the workers consume still books capacity (its nodes are coming)."""
        cluster = self.client.call("GET", self.spec.cluster_path())
        if cluster is None:
            raise KubeError(f"RayCluster {self.spec.namespace}/{self.spec.ray_cluster} not found")
        index, current = self._group_index(cluster)
        if current and books_capacity(self.client.call("GET", self.spec.requests_path(current))):
            return None
        if self.unpatched is None:  # after a failed patch, the request already made is reused
            name = f"{self.spec.request['metadata']['name']}-{suffix}"
            self.client.call("POST", self.spec.requests_path(), self.spec.body(name, count))
            self.unpatched = name
        name = self.unpatched
        key = self.spec.consume_annotation.replace("~", "~0").replace("/", "~1")
        group = f"/spec/workerGroupSpecs/{index}"
        patch = [
            {"op": "test", "path": f"{group}/groupName", "value": self.spec.worker_group},
            {"op": "add", "path": f"{group}/template/metadata/annotations/{key}", "value": name},
        ]
        self.client.call("PATCH", self.spec.cluster_path(), patch, "application/json-patch+json")
        self.pending, self.unpatched = name, None
        self.say(f"asked for {count} GPU node(s) again: ProvisioningRequest {name}")
        self._recreate_unscheduled(name)
        return name

    def _live_pods(self) -> list[dict[str, Any]]:
        listed = self.client.call("GET", self.spec.worker_pods_path()) or {}
        return [
            pod
            for pod in listed.get("items", [])
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            and not pod["metadata"].get("deletionTimestamp")
        ]

    def _consumes(self, pod: dict[str, Any]) -> str | None:
        return (pod["metadata"].get("annotations") or {}).get(self.spec.consume_annotation)

    def _recreate_unscheduled(self, name: str) -> None:
        """Delete the group's worker pods that no node was found for and that consume another
        request: KubeRay may have recreated a lost worker from the template before it named
        `name`, and it does not rebuild existing pods when the template changes; it recreates a
        deleted worker pod from the current template (replicas). A pod consuming a request never
        triggers an ordinary scale-up (pods_filter.go), so without this it waits forever."""
        for pod in self._live_pods():
            scheduled = bool((pod.get("spec") or {}).get("nodeName"))
            if scheduled or self._consumes(pod) in (None, name):
                continue
            pod_name = pod["metadata"]["name"]
            self.client.call("DELETE", self.spec.pod_path(pod_name))
            self.say(
                f"deleted the unscheduled worker pod {pod_name} (it consumed "
                f"{self._consumes(pod)}): KubeRay recreates it consuming {name}"
            )

    def settle(self) -> None:
        """Once the pending request is Provisioned or Failed, delete the runner's others."""
        if self.pending is None:
            return
        request = self.client.call("GET", self.spec.requests_path(self.pending))
        if condition_true(request, FAILED) or request is None:
            self.say(f"ProvisioningRequest {self.pending} failed: {_conditions(request)}")
        elif not condition_true(request, PROVISIONED):
            return
        keep, self.pending = self.pending, None
        # A request whose nodes still run workers stays: what GKE does to the nodes of a deleted
        # queued-provisioning request is GKE's own code, not read here.
        in_use = {self._consumes(pod) for pod in self._live_pods()}
        selector = f"?labelSelector={RUNNER_LABEL}%3D{RUNNER_VALUE}"
        listed = self.client.call("GET", self.spec.requests_path() + selector) or {}
        for item in listed.get("items", []):
            name = item["metadata"]["name"]
            if name == keep:
                continue
            if name in in_use:
                self.say(f"kept the earlier ProvisioningRequest {name}: workers still consume it")
                continue
            self.client.call("DELETE", self.spec.requests_path(name))
            self.say(f"deleted the earlier ProvisioningRequest {name}")


def _conditions(request: dict[str, Any] | None) -> str:
    if request is None:
        return "it no longer exists"
    conditions = (request.get("status") or {}).get("conditions") or []
    return "; ".join(
        f"{c.get('type')}={c.get('status')} {c.get('message', '')}" for c in conditions
    )
