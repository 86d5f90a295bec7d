"""The Ray job provider under faults, against real local Ray heads.

What must hold: a job is forgotten only on positive evidence (the Ray head, the Kubernetes API or
the GKE API says it is gone); without evidence refresh keeps it as UNREACHABLE and destroy or a
replacement fails with what could not be reached and what to do, so a changed spec never puts a
second job next to a running one; operations give up on a silent dashboard after
deadline_reach_s (plus a bounded evidence inquiry) and do not wait for each other; a failure's
log tail is capped.

Real pieces: Ray heads on 127.0.0.1 (one shared, one per test that stops its head by PID), the
real `python -m pulumi.dynamic` host over gRPC for the engine's sequences. Stand-ins (nothing
else can play them offline): the Kubernetes API server and the GKE API (tests/support/kube_api.py,
real response shapes), a socket that accepts and never answers.
"""

from __future__ import annotations

import shlex
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from pulumi.runtime.proto import provider_pb2
from ray.job_submission import JobStatus, JobSubmissionClient

from jobs import dashboard_access, job_logs
from jobs.job_evidence import gke_cluster_input, ray_pods_summary
from jobs.ray_job import JobDeadlines, RayJobArgs, RayJobProvider
from tests.support.dynamic_host import (
    STARTUP_JOB,
    DynamicHost,
    engine_inputs,
    from_wire,
    grpo_job_urn,
)
from tests.support.kube_api import GkeApi, HeadPod, KubeApi, stand_in_token
from tests.support.local_proxies import TcpForwarder
from tests.support.ray_head import RayHead, free_port, start_ray_head, stop_job

# Starts real processes (a Ray head, the provider host, a GCS emulator or subprocesses).
pytestmark = pytest.mark.integration

URN = grpo_job_urn("faults")
REACH_S = 2.0
FAST = JobDeadlines(
    submit_s=30.0, reach_s=REACH_S, start_s=60.0, startup_grace_s=0.3, first_step_s=60.0,
    wait_s=60.0, stop_s=30.0, poll_interval_s=0.1,
)  # fmt: skip
# The contract: an operation answers within 60 s of deciding the dashboard is unreachable (after
# deadline_reach_s). A bound, not a speed test: bench/job_provider.py measures the real figure.
ANSWER_BOUND_S = REACH_S + 60.0
NAMESPACE, SERVICE, CLUSTER = "verl", "h200-ray-head-svc", "h200-ray"


@pytest.fixture
def kube(head: RayHead) -> Iterator[KubeApi]:
    api = KubeApi(
        NAMESPACE, SERVICE, CLUSTER, dashboard_port=_port(head.dashboard_url),
        head_pods=[HeadPod(f"{CLUSTER}-head-x7k2p")],
    )  # fmt: skip
    with api:
        yield api


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def job_props(
    dashboard: dict[str, Any],
    run: str,
    *,
    args: tuple[str, ...] = ("--hold-seconds", "300"),
    wait_for: str = "running",
    gke: dict[str, Any] | None = None,
    deadlines: JobDeadlines = FAST,
) -> dict[str, Any]:
    command = [sys.executable, str(STARTUP_JOB), "--run", run, *args]
    return RayJobArgs(
        entrypoint=shlex.join(command),
        runtime_env={},
        dashboard=dashboard,
        checkpoint_root=None,
        submission_id_prefix="faults",
        wait_for=wait_for,
        deadlines=deadlines,
        gke_cluster=gke,
    ).to_props()


def kube_dashboard(kube: KubeApi) -> dict[str, Any]:
    return dashboard_access.kube_proxy_dashboard(kube.endpoint, "", NAMESPACE, SERVICE)


def faults_jobs(jobs: JobSubmissionClient) -> list[str]:
    return sorted(j.submission_id or "" for j in jobs.list_jobs() if j.status == JobStatus.RUNNING)


# -- no replacement on a guess ----------------------------------------------------------------


def test_changed_spec_while_the_dashboard_is_unreachable_never_submits_the_replacement(
    host: DynamicHost, kube: KubeApi, jobs: JobSubmissionClient
) -> None:
    provider = RayJobProvider(token_provider=stand_in_token)
    first = job_props(kube_dashboard(kube), "replace-guard")
    checked = host.check(URN, None, engine_inputs(first, provider))
    created = host.create(URN, checked.inputs)
    sid = created.id
    try:
        assert jobs.get_job_status(sid) == JobStatus.RUNNING
        # The dashboard stops answering (the API server's proxy: "connection refused"); the head
        # Service and a Running head pod are still there.
        kube.dashboard_port = None
        second = {**first, "entrypoint": first["entrypoint"] + " --steps 2"}
        second_checked = host.check(URN, checked.inputs, engine_inputs(second, provider))
        diff = host.diff(URN, sid, created.properties, second_checked.inputs, checked.inputs)
        assert diff.changes == provider_pb2.DiffResponse.DIFF_SOME
        assert (list(diff.replaces), diff.deleteBeforeReplace) == (["entrypoint"], True)

        # delete_before_replace: the engine deletes first; without evidence the delete fails...
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as failure:
            host.delete(URN, sid, created.properties)
        assert time.monotonic() - started < ANSWER_BOUND_S
        message = failure.value.details()
        assert f"Ray job {sid} may still be running" in message
        assert f"the Ray dashboard at {kube.endpoint}/api/v1/namespaces/verl/services/" in message
        assert "did not answer for" in message and "connection refused" in message
        assert f"Kubernetes API: the head pod is running ({CLUSTER}-head-x7k2p: Running)" in message
        assert f"kubectl get pods -n {NAMESPACE} -l ray.io/node-type=head" in message
        assert f"ray job stop {sid} --address http://127.0.0.1:8265" in message
        assert "pulumi state delete" in message and "pulumi refresh" in message
        # ...so the engine stops and never calls Create: the old job runs on, alone.
        assert jobs.get_job_status(sid) == JobStatus.RUNNING
        assert [s for s in faults_jobs(jobs) if s.startswith("faults-")] == [sid]

        # refresh keeps the job, its outputs and what was last seen, marked UNREACHABLE.
        read = host.read(URN, sid, created.properties, checked.inputs)
        assert read.id == sid
        state, before = from_wire(read.properties), from_wire(created.properties)
        assert state["status"] == "UNREACHABLE"
        assert state["last_seen"]["status"] == "RUNNING"
        assert state["last_seen"]["at"] == before["last_seen"]["at"]
        for key in ("submission_id", "start_time", "dashboard_hint", "entrypoint"):
            assert state[key] == before[key], key
        assert "nothing proved the job gone" in state["message"]
        warning = f"[ray-job {sid}] WARNING: status unknown, kept in the state as UNREACHABLE"
        assert any(warning in line for line in host.output_once(warning)), host.output

        # Evidence: KubeRay removed the head Service with the RayCluster. Now delete goes ahead.
        kube.service_exists = False
        host.delete(URN, sid, created.properties)
        evidence = f"head Service {NAMESPACE}/{SERVICE} does not exist"
        assert any(
            evidence in line and "Nothing to stop" in line for line in host.output_once(evidence)
        ), host.output
    finally:
        stop_job(jobs, sid)


@pytest.mark.parametrize(
    ("pods", "service", "gone", "finding"),
    [
        ([], True, True, "no head pod exists (pods with labels app.kubernetes.io/created-by="),
        ([HeadPod("h-head", "Pending")], True, True, "no head pod is running (h-head: Pending"),
        ([HeadPod("h-head", "Running", "CrashLoopBackOff")], True, True,
         "no head pod is running (h-head: Running (ray-head CrashLoopBackOff))"),
        ([HeadPod("h-head", "Failed"), HeadPod("h-head-2", "Running")], True, False,
         "the head pod is running"),
        ([HeadPod("h-head", "Running")], False, True,
         f"the head Service {NAMESPACE}/{SERVICE} does not exist"),
    ],
    ids=["no-head-pod", "head-pending", "head-crashlooping", "head-running", "service-gone"],
)  # fmt: skip
def test_delete_goes_ahead_only_on_kubernetes_evidence(
    kube: KubeApi,
    pods: list[HeadPod],
    service: bool,
    gone: bool,
    finding: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The dashboard never answers here; the state says the job was RUNNING.
    kube.dashboard_port, kube.head_pods, kube.service_exists = None, pods, service
    state = {**job_props(kube_dashboard(kube), "evidence"), "status": "RUNNING"}
    provider = RayJobProvider(token_provider=stand_in_token)
    if gone:
        provider.delete("faults-0123456789ab", state)
        assert finding in capsys.readouterr().out
    else:
        with pytest.raises(RuntimeError) as failure:
            provider.delete("faults-0123456789ab", state)
        assert finding in str(failure.value)
        assert "may still be running" in str(failure.value)
    if not service:
        # The proxy's own NotFound for the Service: decided at once, not retried for reach_s.
        proxied = [r for r in kube.requests if "/proxy/" in r]
        assert len(proxied) == 1, kube.requests


def test_progress_lines_summarise_the_ray_pods(kube: KubeApi) -> None:
    kube.head_pods = [HeadPod("h-head", "Running"), HeadPod("h-worker-0", "Pending")]
    spec = dashboard_access.parse_dashboard(kube_dashboard(kube))
    assert isinstance(spec, dashboard_access.KubeServiceProxy)
    with dashboard_access.client_args(spec, stand_in_token) as make_args:
        summary = ray_pods_summary(spec, make_args)
    assert summary == f"Ray pods of {CLUSTER}: 1 Pending, 1 Running (ContainerCreating x1)"


def test_a_404_that_is_not_the_api_servers_notfound_proves_nothing(kube: KubeApi) -> None:
    # Wrong namespace: the stand-in answers like the API server for an unknown path (a Status
    # 404 without details), which says nothing about the head Service.
    dashboard = dashboard_access.kube_proxy_dashboard(kube.endpoint, "", "elsewhere", SERVICE)
    state = {**job_props(dashboard, "not-evidence"), "status": "RUNNING"}
    with pytest.raises(RuntimeError) as failure:
        RayJobProvider(token_provider=stand_in_token).delete("faults-0123456789ab", state)
    assert "Kubernetes API: GET /api/v1/namespaces/elsewhere/services/" in str(failure.value)
    assert "answered 404" in str(failure.value)


# -- a real head stopped by PID ---------------------------------------------------------------


def test_head_stopped_refresh_keeps_the_job_and_destroy_needs_evidence(
    capsys: pytest.CaptureFixture[str],
) -> None:
    own_dir = Path(tempfile.mkdtemp(prefix="rjs", dir="/tmp"))
    own = start_ray_head(own_dir)
    gke = GkeApi("proj", "us-central1", "verl-h200").start()
    try:
        cluster = {**gke_cluster_input("proj", "us-central1", "verl-h200"),
                   "api_endpoint": gke.endpoint}  # fmt: skip
        provider = RayJobProvider(token_provider=stand_in_token)
        inputs = job_props(
            dashboard_access.url_dashboard(own.dashboard_url), "stopped", gke=cluster
        )
        created = provider.create(inputs)
        assert created.outs is not None and created.outs["status"] == "RUNNING"
        session = created.outs["last_seen"]["head_session"]
        assert session and session.startswith("session_")
        own.stop()  # the whole head, by PID: the dashboard refuses connections from now on
        capsys.readouterr()

        started = time.monotonic()
        refreshed = provider.read(created.id, created.outs)
        assert time.monotonic() - started < ANSWER_BOUND_S
        assert refreshed.id == created.id and refreshed.outs is not None
        assert refreshed.outs["status"] == "UNREACHABLE"
        assert refreshed.outs["last_seen"] == created.outs["last_seen"]
        assert refreshed.outs["start_time"] == created.outs["start_time"]
        assert "GKE API: the cluster verl-h200 exists (status RUNNING)" in refreshed.outs["message"]
        assert "WARNING: status unknown" in capsys.readouterr().out

        # A second refresh keeps what was last seen, not "UNREACHABLE".
        again = provider.read(created.id, refreshed.outs)
        assert again.outs is not None and again.outs["last_seen"]["status"] == "RUNNING"

        with pytest.raises(RuntimeError) as failure:
            provider.delete(created.id, refreshed.outs)
        text = str(failure.value)
        assert f"the Ray dashboard at {own.dashboard_url} did not answer for" in text
        assert "Failed to connect to Ray" in text
        assert "GKE API: the cluster verl-h200 exists" in text
        assert f"`ray job stop {created.id} --address {own.dashboard_url}`" in text
        assert "pulumi state delete" in text

        # The GKE API says the cluster is gone: positive evidence, destroy completes and a
        # refresh drops the job.
        gke.cluster_exists = False
        provider.delete(created.id, refreshed.outs)
        gone = "the cluster projects/proj/locations/us-central1/clusters/verl-h200 does not exist"
        assert f"{gone} (404 NOT_FOUND)" in capsys.readouterr().out
        dropped = provider.read(created.id, refreshed.outs)
        assert (dropped.id, dropped.outs) == (None, {})
    finally:
        gke.stop()
        own.stop()
        shutil.rmtree(own_dir, ignore_errors=True)


def test_plain_url_without_evidence_sources_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"
    state = {**job_props(dashboard_access.url_dashboard(nobody), "nobody"), "status": "RUNNING"}
    with pytest.raises(RuntimeError) as failure:
        RayJobProvider().delete("faults-0123456789ab", state)
    text = str(failure.value)
    assert "no other source to ask (a plain dashboard URL and no gke_cluster input)" in text
    assert f"is the Ray head behind {nobody} running and reachable from this machine?" in text


# -- bounded, concurrent answers --------------------------------------------------------------


class SilentServer:
    """Accepts TCP connections and never answers (a black-holed or frozen dashboard); records
    how many connections were open at the same time."""

    def __init__(self) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(16)
        self._socket.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        self.open = self.max_open = 0
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = self._socket.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._hold, args=(conn,), daemon=True).start()

    def _hold(self, conn: socket.socket) -> None:
        with self._lock:
            self.open += 1
            self.max_open = max(self.max_open, self.open)
        try:
            while conn.recv(65536):
                pass  # read the request, never answer
        except OSError:
            pass
        finally:
            conn.close()
            with self._lock:
                self.open -= 1

    def stop(self) -> None:
        self._stopped.set()
        self._socket.close()


def test_concurrent_operations_in_one_host_do_not_wait_for_each_other(host: DynamicHost) -> None:
    silent = SilentServer()
    try:
        deadlines = JobDeadlines(reach_s=4.0, poll_interval_s=0.1)
        states = [
            {**job_props(dashboard_access.url_dashboard(silent.url), f"silent-{i}",
                         deadlines=deadlines),
             "submission_id": f"faults-silent-{i}", "status": "RUNNING"}
            for i in range(2)
        ]  # fmt: skip
        provider = RayJobProvider()
        results: list[Any] = [None, None]

        def refresh(index: int) -> None:
            wire = engine_inputs(states[index], provider)
            results[index] = host.read(URN, f"faults-silent-{index}", wire)

        threads = [threading.Thread(target=refresh, args=(i,)) for i in range(2)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        elapsed = time.monotonic() - started
        # Both requests were in flight together: no lock serialises calls across the network.
        assert silent.max_open >= 2
        assert elapsed < 4.0 + 60.0
        for result in results:
            assert result is not None and from_wire(result.properties)["status"] == "UNREACHABLE"
    finally:
        silent.stop()


def test_a_dashboard_that_comes_back_is_read_normally(
    head: RayHead, jobs: JobSubmissionClient
) -> None:
    # A forwarder in front of the head plays a dashboard that drops out and comes back.
    forwarder = TcpForwarder(target_port=_port(head.dashboard_url))
    forwarder.start()
    url = f"http://127.0.0.1:{forwarder.listen_port}"
    provider = RayJobProvider()
    created = provider.create(job_props(dashboard_access.url_dashboard(url), "comes-back"))
    try:
        forwarder.stop()
        lost = provider.read(created.id, created.outs or {})
        assert lost.outs is not None and lost.outs["status"] == "UNREACHABLE"
        forwarder = TcpForwarder(target_port=_port(head.dashboard_url),
                                 listen_port=forwarder.listen_port)  # fmt: skip
        forwarder.start()
        back = provider.read(created.id, lost.outs)
        assert back.outs is not None and back.outs["status"] == "RUNNING"
        assert back.outs["last_seen"]["status"] == "RUNNING"
        assert back.outs["last_seen"]["at"] >= lost.outs["last_seen"]["at"]
    finally:
        forwarder.stop()
        stop_job(jobs, created.id)


# -- capped failure tail -----------------------------------------------------------------------


def test_a_failure_with_5_mb_log_lines_reports_a_capped_tail(
    head: RayHead, jobs: JobSubmissionClient
) -> None:
    inputs = job_props(
        dashboard_access.url_dashboard(head.dashboard_url),
        "long-lines",
        args=("--long-lines", "3", "--long-line-bytes", "5000000", "--fail-before-step"),
        wait_for="first_step",
    )
    provider = RayJobProvider()
    with pytest.raises(RuntimeError) as failure:
        provider.create(inputs)
    text = str(failure.value)
    assert len(text) < 40_000  # was 5+ MB
    assert "FAILED: Job entrypoint command failed with exit code 7" in text
    assert "(before verl logs its first training step, wait_for=first_step)" in text
    header, tail = text.split(" characters) ---\n", 1)
    lines = tail.splitlines()
    assert len(lines) <= job_logs.TAIL_LINES
    assert lines[-1].endswith("torch.OutOfMemoryError: CUDA out of memory (stand-in)")
    assert "\x1b[" not in tail  # colour codes stripped
    cut = [line for line in lines if "long line" in line]
    assert len(cut) == 3
    for line in cut:
        kept, marker = line.split(" [... ", 1)
        assert len(kept) == job_logs.TAIL_LINE_MAX_CHARS
        assert marker.endswith(" more bytes cut]")
        assert int(marker.split(" ", 1)[0].replace(",", "")) > 4_999_000

    # refresh of the FAILED job records the same capped tail as an output.
    sid = header.split("Ray job ", 1)[1].split(" ", 1)[0]
    assert jobs.get_job_status(sid) == JobStatus.FAILED
    outs = provider.read(sid, {**inputs, "status": "RUNNING"}).outs
    assert outs is not None and outs["status"] == "FAILED"
    assert outs["log_tail"] == tail
    assert outs["message"] == "Job entrypoint command failed with exit code 7"
