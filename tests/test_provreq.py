"""Standard flex-start: the runner asks for GPU nodes again (payloads/export/provreq.py), against a
stand-in Kubernetes API server on 127.0.0.1 (tests/support/kube_api.py CapacityApi), with the
request body and the Role the program renders for a flex-start stack.

Rules encoded, with their source:
- A pod consuming a ProvisioningRequest never triggers an ordinary scale-up (kubernetes/
  autoscaler cluster-autoscaler/processors/provreq/pods_filter.go at 54cc606); a request that is
  BookingExpired or Failed books no capacity any more (processors/provreq/processor.go at
  0cc6feb, provisioningrequest/conditions ShouldCapacityBeBooked): so a new request is made only
  when the one the workers consume is one of those, or gone.
- KubeRay v1.7.0 builds new worker pods from the group's template and recreates running pods
  only with upgradeStrategy Recreate (raycluster_controller.go shouldRecreatePodsForUpgrade):
  the runner changes only the template's consume annotation, by a JSON patch guarded by a test
  of the group's name.
"""

from __future__ import annotations

import copy
import json
import shlex
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from ray.util.state import list_nodes

from manifests import capacity as capacity_manifests
from manifests.ray_cluster import WORKER_GROUP
from payloads.export import provreq, supervise
from tests.program import plan
from tests.support import schemas
from tests.support.kube_api import TOKEN, CapacityApi
from tests.support.ray_head import RayHead, ray_temp_dir
from tests.support.ray_worker import alive_nodes, start_ray_worker, wait_until

RAY_JOB = "pulumi-python:dynamic/jobs:RayJob"
RAY_CLUSTER = "kubernetes:ray.io/v1:RayCluster"
PROVISIONING_REQUEST = "kubernetes:autoscaling.x-k8s.io/v1:ProvisioningRequest"
ROLE = "kubernetes:rbac.authorization.k8s.io/v1:Role"
ROLE_BINDING = "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding"
EXPIRED = {"type": "BookingExpired", "status": "True", "reason": "CapacityReservationTimeExpired"}


def flex_start(stack: str = "a3u") -> Any:
    return plan(
        stack, "standard", unset=("verl-gke:reservation",), **{"verl-gke__capacity": "flexStart"}
    )


@pytest.fixture(scope="module")
def rendered() -> tuple[dict[str, Any], dict[str, Any]]:
    """The runner's --capacity-request and the RayCluster, as the a3u flex-start stack renders
    them."""
    result = flex_start()
    argv = shlex.split(result.one(RAY_JOB, "grpo-job").inputs["entrypoint"])
    spec = json.loads(argv[argv.index("--capacity-request") + 1])
    cluster = copy.deepcopy(dict(result.one(RAY_CLUSTER).inputs))
    return spec, cluster


@pytest.fixture
def api(rendered: tuple[dict[str, Any], dict[str, Any]]) -> Iterator[CapacityApi]:
    spec, cluster = rendered
    stack_request = copy.deepcopy(spec["request"])
    stack_request["status"] = {"conditions": [EXPIRED]}
    name = stack_request["metadata"]["name"]
    namespace = stack_request["metadata"]["namespace"]
    with CapacityApi(namespace, copy.deepcopy(cluster), {name: stack_request}) as server:
        yield server


def renewer(
    api: CapacityApi, rendered: tuple[dict[str, Any], Any], tmp_path: Path, said: list[str]
) -> provreq.CapacityRenewer:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    client = provreq.KubeClient(api.endpoint, token, None)
    return provreq.CapacityRenewer(provreq.CapacitySpec(**rendered[0]), client, said.append)


def consumed(api: CapacityApi) -> str:
    (group,) = api.ray_cluster["spec"]["workerGroupSpecs"]
    return group["template"]["metadata"]["annotations"][capacity_manifests.CONSUME_ANNOTATION]


def test_the_runner_gets_the_stacks_request_body_only_on_standard_flex_start(
    rendered: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    spec, cluster = rendered
    result = flex_start()
    assert spec["request"] == dict(result.one(PROVISIONING_REQUEST).inputs)
    assert spec["ray_cluster"] == cluster["metadata"]["name"]
    assert spec["worker_group"] == WORKER_GROUP
    assert spec["gpus_per_node"] == 8
    for stack, mode in (("a3u", "standard"), ("a4", "autopilot")):
        entrypoint = plan(stack, mode).one(RAY_JOB, "grpo-job").inputs["entrypoint"]
        assert "--capacity-request" not in entrypoint


def test_a_new_request_for_the_missing_nodes_when_the_consumed_one_is_expired(
    api: CapacityApi, rendered: tuple[dict[str, Any], Any], tmp_path: Path
) -> None:
    said: list[str] = []
    stack_name = rendered[0]["request"]["metadata"]["name"]
    name = renewer(api, rendered, tmp_path, said).renew(1, "1700000000-a002")
    assert name == f"{stack_name}-1700000000-a002"
    posts = [call for call in api.calls if call[0] == "POST"]
    assert len(posts) == 1
    body = posts[0][3]
    expected = copy.deepcopy(rendered[0]["request"])
    expected["metadata"]["name"] = name
    expected["metadata"]["labels"][provreq.RUNNER_LABEL] = provreq.RUNNER_VALUE
    expected["spec"]["podSets"][0]["count"] = 1
    assert body == expected
    assert schemas.custom_resource_errors(body, schemas.required_crds_dir()) == []
    (patch,) = [call for call in api.calls if call[0] == "PATCH"]
    assert patch[2] == "application/json-patch+json"
    assert patch[3][0] == {
        "op": "test",
        "path": "/spec/workerGroupSpecs/0/groupName",
        "value": WORKER_GROUP,
    }
    assert consumed(api) == name
    # The patched RayCluster is still valid against KubeRay v1.7.0's CRD.
    assert schemas.custom_resource_errors(api.ray_cluster, schemas.required_crds_dir()) == []


def test_no_new_request_while_the_consumed_one_still_books_capacity(
    api: CapacityApi, rendered: tuple[dict[str, Any], Any], tmp_path: Path
) -> None:
    stack_name = rendered[0]["request"]["metadata"]["name"]
    api.requests[stack_name]["status"] = {"conditions": [{"type": "Accepted", "status": "True"}]}
    assert renewer(api, rendered, tmp_path, []).renew(2, "1700000000-a002") is None
    assert [c[0] for c in api.calls] == ["GET", "GET"]
    assert consumed(api) == stack_name


def _rfc3339(seconds_ago: float) -> str:
    stamp = datetime.now(UTC) - timedelta(seconds=seconds_ago)
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize(
    ("conditions", "asks_again"),
    [
        # Provisioned within the booking window: its nodes may still be coming.
        ([{"type": "Provisioned", "status": "True", "lastTransitionTime": _rfc3339(60)}], False),
        # Provisioned longer ago, and no BookingExpired: cluster-autoscaler's refresh sets that
        # only for the classes it serves (provisioningrequest/supported_classes.go at
        # cluster-autoscaler-1.36.1), not for queued-provisioning.gke.io.
        ([{"type": "Provisioned", "status": "True", "lastTransitionTime": _rfc3339(660)}], True),
        # autoscaling.x-k8s.io/v1 types.go: CapacityRevoked, the resources are no longer valid.
        ([{"type": "CapacityRevoked", "status": "True", "lastTransitionTime": _rfc3339(5)}], True),
    ],
)
def test_a_provisioned_request_books_its_nodes_for_the_booking_window_only(
    api: CapacityApi,
    rendered: tuple[dict[str, Any], Any],
    tmp_path: Path,
    conditions: list[dict[str, str]],
    asks_again: bool,
) -> None:
    """processors/provreq/processor.go defaultReservationTime (10 min, cluster-autoscaler-1.36.1):
    a request's nodes wait that long for its pods."""
    stack_name = rendered[0]["request"]["metadata"]["name"]
    api.requests[stack_name]["status"] = {"conditions": conditions}
    name = renewer(api, rendered, tmp_path, []).renew(1, "1700000000-a002")
    assert (name is not None) is asks_again
    assert consumed(api) == (name if asks_again else stack_name)


def test_a_failed_patch_is_retried_without_a_second_request(
    api: CapacityApi, rendered: tuple[dict[str, Any], Any], tmp_path: Path
) -> None:
    # The supervisor retries renew() at every poll after a KubeError (supervise.py
    # _wait_for_gpus): each retry must not create another request that GKE would provision.
    api.forbidden_patches = 2
    renew = renewer(api, rendered, tmp_path, [])
    for attempt in ("1-a002", "2-a002"):
        with pytest.raises(provreq.KubeError, match="HTTP 403"):
            renew.renew(1, attempt)
    name = renew.renew(1, "3-a002")
    posts = [call for call in api.calls if call[0] == "POST"]
    assert len(posts) == 1 and name == posts[0][3]["metadata"]["name"]
    assert consumed(api) == name


def test_earlier_runner_requests_go_once_the_new_one_is_provisioned(
    api: CapacityApi, rendered: tuple[dict[str, Any], Any], tmp_path: Path
) -> None:
    stack_name = rendered[0]["request"]["metadata"]["name"]
    api.provisioned_on_create = False
    renew = renewer(api, rendered, tmp_path, [])
    first = renew.renew(2, "1-a002")
    assert first is not None
    api.requests[first]["status"] = {"conditions": [EXPIRED]}
    renew.settle()
    second = renew.renew(2, "2-a003")
    assert second is not None
    renew.settle()  # not provisioned yet: nothing deleted
    assert set(api.requests) == {stack_name, first, second}
    api.requests[second]["status"] = {"conditions": [{"type": "Provisioned", "status": "True"}]}
    renew.settle()
    # The stack's own request is Pulumi's: kept.
    assert set(api.requests) == {stack_name, second}
    assert ("DELETE", f"{renew.spec.requests_path(first)}") in [(c[0], c[1]) for c in api.calls]


def _worker_pod(api: CapacityApi, name: str, consumes: str, node: str | None) -> None:
    """A worker pod as KubeRay labels it (ray.io/cluster, ray.io/group: ray-operator
    common/pod.go labelPod), consuming `consumes`; scheduled on `node`, or Pending without one."""
    api.pods[name] = {
        "metadata": {
            "name": name,
            "labels": {"ray.io/cluster": api.ray_cluster["metadata"]["name"],
                       "ray.io/group": WORKER_GROUP, "ray.io/node-type": "worker"},
            "annotations": {capacity_manifests.CONSUME_ANNOTATION: consumes},
        },
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": "Running" if node else "Pending"},
    }  # fmt: skip


def test_an_earlier_request_whose_nodes_still_run_workers_is_kept(
    api: CapacityApi, rendered: tuple[dict[str, Any], Any], tmp_path: Path
) -> None:
    stack_name = rendered[0]["request"]["metadata"]["name"]
    api.provisioned_on_create = False
    said: list[str] = []
    renew = renewer(api, rendered, tmp_path, said)
    first = renew.renew(2, "1-a002")
    assert first is not None
    _worker_pod(api, "w-1", first, "gke-node-1")  # a surviving worker on first's node
    api.requests[first]["status"] = {"conditions": [EXPIRED]}
    renew.settle()
    second = renew.renew(1, "2-a003")
    assert second is not None
    api.requests[second]["status"] = {"conditions": [{"type": "Provisioned", "status": "True"}]}
    renew.settle()
    assert set(api.requests) == {stack_name, first, second}
    assert any(f"kept the earlier ProvisioningRequest {first}" in line for line in said), said


def test_an_unscheduled_worker_on_a_spent_request_is_recreated_on_the_new_one(
    api: CapacityApi, rendered: tuple[dict[str, Any], Any], tmp_path: Path
) -> None:
    """KubeRay recreated the lost worker before the template named the new request: the pod
    consumes the spent request and waits forever (pods_filter.go). It is deleted, so KubeRay
    recreates it from the patched template; the running worker stays."""
    stack_name = rendered[0]["request"]["metadata"]["name"]
    _worker_pod(api, "w-running", stack_name, "gke-node-1")
    _worker_pod(api, "w-recreated", stack_name, None)
    said: list[str] = []
    name = renewer(api, rendered, tmp_path, said).renew(1, "1-a002")
    assert name is not None
    assert set(api.pods) == {"w-running"}
    deletes = [c[1] for c in api.calls if c[0] == "DELETE"]
    assert deletes == [f"/api/v1/namespaces/{api.namespace}/pods/w-recreated"]
    # The pod is deleted only after the template names the new request.
    order = [c[0] for c in api.calls]
    assert order.index("PATCH") < order.index("DELETE")
    assert any("deleted the unscheduled worker pod w-recreated" in line for line in said)


def test_the_role_allows_exactly_the_runners_calls() -> None:
    result = flex_start()
    role = dict(result.one(ROLE).inputs)
    binding = dict(result.one(ROLE_BINDING).inputs)
    for body in (role, binding):
        schemas.validate_core(body, "1.34")
    ray_cluster = result.one(RAY_CLUSTER).inputs
    assert role["rules"] == [
        {
            "apiGroups": ["autoscaling.x-k8s.io"],
            "resources": ["provisioningrequests"],
            "verbs": ["create", "get", "list", "delete"],
        },
        {
            "apiGroups": ["ray.io"],
            "resources": ["rayclusters"],
            "resourceNames": [ray_cluster["metadata"]["name"]],
            "verbs": ["get", "patch"],
        },
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "delete"]},
    ]
    head = ray_cluster["spec"]["headGroupSpec"]["template"]["spec"]
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": head["serviceAccountName"],
            "namespace": role["metadata"]["namespace"],
        }
    ]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    # Only Standard flex-start stacks get it.
    for stack, mode in (("a3u", "standard"), ("a4", "autopilot")):
        assert plan(stack, mode).of_type(ROLE) == []


def test_the_gpu_count_leaves_out_a_node_that_died(head: RayHead) -> None:
    """The count the runner asks Ray for, once a GPU node joined the head and left: the state
    after a scale-to-zero. Ray 2.60's dashboard refuses the node list filtered by state once a
    node is dead (supervise.Cluster.alive_gpus says why); the count must not depend on it."""
    cluster = supervise.Cluster(head.dashboard_url)
    with ray_temp_dir("rw") as temp_dir:
        worker = start_ray_worker(head, temp_dir, num_gpus=1)
        try:
            wait_until("joined", lambda: len(alive_nodes(head, "GPU")) == 1)
            assert cluster.alive_gpus() == 1
        finally:
            worker.stop()
        wait_until("gone", lambda: not alive_nodes(head, "GPU"))
    assert any(node.state == "DEAD" for node in list_nodes(address=head.dashboard_url))
    assert cluster.alive_gpus() == 0


def test_before_the_export_one_node_is_asked_for_when_no_gpu_is_alive(
    head: RayHead, api: CapacityApi, rendered: tuple[dict[str, Any], Any], tmp_path: Path
) -> None:
    # No GPU node alive on the session's head (the one of the test above died): the state after
    # KubeRay scaled the workers to 0.
    said: list[str] = []
    capacity = renewer(api, rendered, tmp_path, said)
    supervise.ask_for_export_node(capacity, head.dashboard_url, said.append)
    assert not [line for line in said if line.startswith("could not")], said
    (posted,) = [call[3] for call in api.calls if call[0] == "POST"]
    assert posted["spec"]["podSets"][0]["count"] == 1
    assert posted["metadata"]["name"].endswith("-export")
    assert consumed(api) == posted["metadata"]["name"]


def test_a_later_run_after_scale_to_zero_asks_for_all_nodes_before_it_starts(
    head: RayHead, api: CapacityApi, rendered: tuple[dict[str, Any], Any], tmp_path: Path
) -> None:
    # No GPU node alive (the one of the test above died) and the consumed request spent: the
    # first attempt's worker pods need a new request for all gpuNodes nodes (16 GPUs, 8 each).
    said: list[str] = []
    capacity = renewer(api, rendered, tmp_path, said)
    policy = supervise.Policy(0, float("inf"), float("inf"), gpus_needed=16)
    command = [sys.executable, "-c", "print('trained')"]
    run = supervise.Supervisor(
        command,
        tmp_path,
        policy,
        supervise.Cluster(head.dashboard_url),
        said.append,
        capacity=capacity,
    )
    assert run.run() == 0
    assert not [line for line in said if line.startswith("could not")], said
    (posted,) = [call[3] for call in api.calls if call[0] == "POST"]
    assert posted["spec"]["podSets"][0]["count"] == 2
    assert posted["metadata"]["name"].endswith("-a001")
    assert consumed(api) == posted["metadata"]["name"]


def test_a_node_lost_while_the_request_still_books_capacity_is_asked_for_once_it_no_longer_does(
    api: CapacityApi,
    rendered: tuple[dict[str, Any], Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before a restart the runner asks for the missing nodes; while the consumed request still
    books capacity no request is made, and the question is asked again (every ASK_AGAIN_S)
    until it no longer does: a node lost within the booking window still gets a request."""
    monkeypatch.setattr(supervise, "ASK_AGAIN_S", 0.2)
    stack_name = rendered[0]["request"]["metadata"]["name"]
    api.requests[stack_name]["status"] = {"conditions": [{"type": "Accepted", "status": "True"}]}
    said: list[str] = []
    policy = supervise.Policy(0, float("inf"), float("inf"), gpus_needed=16)
    runner = supervise.Supervisor(
        ["true"], tmp_path, policy, supervise.Cluster("http://127.0.0.1:9"), said.append,
        capacity=renewer(api, rendered, tmp_path, said),
    )  # fmt: skip
    assert runner._ask_for_nodes(16, 8, "a002") is False
    assert runner._ask_for_nodes(16, 8, "a002") is False  # not yet asked again: no API call
    assert [c[0] for c in api.calls] == ["GET", "GET"]
    api.requests[stack_name]["status"] = {"conditions": [EXPIRED]}
    time.sleep(0.3)
    assert runner._ask_for_nodes(16, 8, "a002") is True
    (posted,) = [call[3] for call in api.calls if call[0] == "POST"]
    assert posted["spec"]["podSets"][0]["count"] == 1
    assert consumed(api) == posted["metadata"]["name"]
