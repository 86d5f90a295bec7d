"""How the Ray job provider reports faults, through the real
`python -m pulumi.dynamic` host over gRPC against a real local Ray head.

- Log endpoints that fail while the status answers end a first-step wait after
  deadline_submit_s, saying the log could not be read, not that the job did not step; the job
  keeps running.
- A slow dashboard that answers every request is not unreachable: each request has its own
  budget (deadline_reach_s) once the dashboard has answered.
- A job stopped and deleted out of band (`ray job stop` + `ray job delete`) does not fail the
  next `up`: Ray forgets a deleted id but can still write its end under it, so the id is not
  reused; a state API that cannot say so is retried, then the id is used with a warning.
- The provider's own errors reach the engine as their message: the host answers every exception
  with `traceback.format_exc()` (pulumi 3.272 `pulumi/dynamic/__main__.py`,
  `_abort_with_traceback`); a bug keeps its traceback, and VERL_GKE_DEBUG=1 keeps it for all.

Stand-ins: tests/support/local_proxies.start_fault_proxy in front of the real dashboard (answers
500 to the log endpoints, or holds each response), tests/job_fixtures/startup_job.py as verl.
"""

from __future__ import annotations

import re
import shlex
import sys
import time
from typing import Any

import grpc
import pytest
from ray.job_submission import JobDetails, JobStatus, JobSubmissionClient

from jobs import dashboard_access
from jobs.ray_job import JobDeadlines, RayJobArgs, RayJobProvider
from tests.support.dynamic_host import (
    STARTUP_JOB,
    DynamicHost,
    engine_inputs,
    from_wire,
    grpo_job_urn,
    start_dynamic_host,
    wire,
)
from tests.support.local_proxies import start_fault_proxy
from tests.support.ray_head import RayHead, stop_job

# Starts real processes (a Ray head, the provider host, a GCS emulator or subprocesses).
pytestmark = pytest.mark.integration

URN = grpo_job_urn("reports")
FAST = JobDeadlines(
    submit_s=30.0, reach_s=5.0, start_s=60.0, startup_grace_s=0.3, first_step_s=60.0,
    wait_s=60.0, stop_s=30.0, poll_interval_s=0.2,
)  # fmt: skip
# Ray's log endpoints: the state API's file read and the Jobs API's whole log
# (ray/dashboard/modules/log/log_manager.py, ray/dashboard/modules/job/job_head.py).
LOG_PATHS = r"^/api/v0/logs/|^/api/jobs/[^/]+/logs"


def job_props(
    url: str, run: str, wait_for: str, deadlines: JobDeadlines = FAST, *args: str
) -> dict[str, Any]:
    command = [sys.executable, str(STARTUP_JOB), "--run", run, *args]
    return RayJobArgs(
        entrypoint=shlex.join(command),
        runtime_env={},
        dashboard=dashboard_access.url_dashboard(url),
        checkpoint_root=None,
        submission_id_prefix="reports",
        wait_for=wait_for,
        deadlines=deadlines,
    ).to_props()


def wait_for_log(jobs: JobSubmissionClient, sid: str, text: str, timeout_s: float = 60) -> str:
    deadline = time.monotonic() + timeout_s
    logs = jobs.get_job_logs(sid)
    while text not in logs and time.monotonic() < deadline:
        time.sleep(0.2)
        logs = jobs.get_job_logs(sid)
    return logs


def test_failing_log_endpoints_end_the_first_step_wait_saying_the_log_could_not_be_read(
    host: DynamicHost, head: RayHead, jobs: JobSubmissionClient
) -> None:
    proxy = start_fault_proxy(head.dashboard_url, fail_paths=LOG_PATHS)
    deadlines = JobDeadlines(**{**FAST.__dict__, "submit_s": 3.0})
    props = job_props(proxy.endpoint, "log-unreadable", "first_step", deadlines)
    props["entrypoint"] += " --startup-seconds 0.5 --hold-seconds 300"
    provider = RayJobProvider()
    checked = host.check(URN, None, engine_inputs(props, provider))
    sid = ""
    try:
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as failure:
            host.create(URN, checked.inputs)
        waited = time.monotonic() - started
        message = failure.value.details()
        assert message.startswith("Ray job "), message
        sid = message.split("Ray job ", 1)[1].split(" ", 1)[0]
        # The job did log its first step: blaming it would be wrong.
        assert "step:1 - " in wait_for_log(jobs, sid, "step:1 - ")
        assert "is RUNNING, but its driver log could not be read for" in message
        assert "without logging a training step" not in message
        assert "deadline_submit_s=3" in message and "500" in message
        assert "GET /api/v0/logs/file" in message and f"GET /api/jobs/{sid}/logs" in message
        assert f"ray job logs {sid} --address {proxy.endpoint}" in message
        assert "It keeps running; the next `pulumi up` adopts it" in message
        # Bounded by deadline_submit_s, far inside deadline_first_step_s (60 s).
        assert waited < deadlines.first_step_s - 10, waited
        assert proxy.failed >= 3
        assert jobs.get_job_status(sid) == JobStatus.RUNNING
        # Item 11: the message, not the host's traceback.
        assert "Traceback" not in message
        assert "VERL_GKE_DEBUG=1" in message
    finally:
        proxy.stop()
        if sid:
            stop_job(jobs, sid)


def test_a_slow_dashboard_that_answers_every_request_is_not_unreachable(
    host: DynamicHost, head: RayHead, jobs: JobSubmissionClient
) -> None:
    # reach 3 s; the proxy holds each response 2 s: the connection check (GET /api/version) and
    # the status read take 4 s together, each one is answered within its own 3 s.
    deadlines = JobDeadlines(**{**FAST.__dict__, "reach_s": 3.0})
    props = job_props(head.dashboard_url, "slow", "running", deadlines, "--hold-seconds", "300")
    provider = RayJobProvider()
    checked = host.check(URN, None, engine_inputs(props, provider))
    created = host.create(URN, checked.inputs)
    sid = created.id
    proxy = start_fault_proxy(head.dashboard_url, delay_s=2.0)
    try:
        outputs = from_wire(created.properties)
        outputs["dashboard"] = dashboard_access.url_dashboard(proxy.endpoint)
        started = time.monotonic()
        read = host.read(URN, sid, wire(outputs))
        took = time.monotonic() - started
        state = from_wire(read.properties)
        assert (read.id, state["status"]) == (sid, "RUNNING"), state["message"]
        assert proxy.forwarded >= 2 and took >= 4.0
        # Each operation still answers within 60 s of its patience (docs/reliability.md).
        assert took < deadlines.reach_s + 60
    finally:
        proxy.stop()
        stop_job(jobs, sid)


def test_a_silent_request_still_decides_unreachable_after_deadline_reach_s(
    host: DynamicHost, head: RayHead
) -> None:
    # A response held longer than deadline_reach_s is no answer: refresh keeps the job as
    # UNREACHABLE after reach_s, as before (the 60 s answer bound).
    deadlines = JobDeadlines(**{**FAST.__dict__, "reach_s": 2.0})
    proxy = start_fault_proxy(head.dashboard_url, delay_s=30.0)
    try:
        props = job_props(proxy.endpoint, "silent", "running", deadlines)
        state = {**props, "submission_id": "reports-0123456789ab", "status": "RUNNING"}
        started = time.monotonic()
        read = host.read(URN, "reports-0123456789ab", engine_inputs(state, RayJobProvider()))
        took = time.monotonic() - started
        assert from_wire(read.properties)["status"] == "UNREACHABLE"
        assert took < deadlines.reach_s + 15, took
    finally:
        proxy.stop()


def test_the_up_after_a_job_was_stopped_and_deleted_out_of_band_submits_a_fresh_attempt(
    host: DynamicHost, head: RayHead, jobs: JobSubmissionClient
) -> None:
    # Measured on a Ray 2.60 head (job_manager.py, _monitor_job_internal): after `ray job delete`,
    # the deleted job's monitor still sees its supervisor actor die and writes FAILED "Job
    # supervisor actor died" under the id, before the refresh reads it or after, and over a new
    # submission that reused the id (a user's `pulumi up --refresh` meets the same race). The
    # contract: the refresh either drops the job (the head does not know the id) or keeps it as
    # FAILED with Ray's message; the `up` that follows never reuses the id, and its job is still
    # running once the old monitor has written.
    props = job_props(head.dashboard_url, "deleted", "running", FAST, "--hold-seconds", "300")
    provider = RayJobProvider()
    checked = host.check(URN, None, engine_inputs(props, provider))
    created = host.create(URN, checked.inputs)
    sid, again = created.id, ""
    try:
        stop_job(jobs, sid)
        assert jobs.delete_job(sid)
        refreshed = host.read(URN, sid, created.properties)
        if refreshed.id:
            # The monitor wrote its record back first: the state keeps the run as FAILED with
            # Ray's message, and the `up` replaces it (delete first: nothing left to stop).
            assert refreshed.id == sid
            state = from_wire(refreshed.properties)
            assert state["status"] == "FAILED", state
            assert (state["message"] or "").startswith("Job supervisor actor died"), state
            diff = host.diff(URN, sid, refreshed.properties, checked.inputs, checked.inputs)
            assert (list(diff.replaces), diff.deleteBeforeReplace) == (["status"], True)
            host.delete(URN, sid, refreshed.properties)
        again = host.create(URN, checked.inputs).id
        assert again == f"{sid}-r2"
        said = (f"resubmitting {sid} (its record was deleted) as {again}",
                f"resubmitting {sid} (it ended FAILED) as {again}")  # fmt: skip
        lines = host.output_once(f"as {again};")
        assert any(text in line for line in lines for text in said), lines
        # The old monitor's write, when Ray makes one (it does not when it saw the supervisor
        # die before the delete), lands under sid within a second or two of the stop.
        deadline = time.monotonic() + 10
        while not _holds_supervisor_died(jobs, sid) and time.monotonic() < deadline:
            time.sleep(0.2)
        new = jobs.get_job_info(again)
        assert new.status == JobStatus.RUNNING, new.message
    finally:
        for job in (sid, again):
            info = _info_or_none(jobs, job) if job else None
            if info is not None and not info.status.is_terminal():
                stop_job(jobs, job)


def _info_or_none(jobs: JobSubmissionClient, sid: str) -> JobDetails | None:
    """The job's details; None while the head has no record of the id (a deleted job's record
    is absent until Ray's monitor writes it back, when it does)."""
    try:
        return jobs.get_job_info(sid)
    except RuntimeError as exc:
        if "404" in str(exc):
            return None
        raise


def _holds_supervisor_died(jobs: JobSubmissionClient, sid: str) -> bool:
    info = _info_or_none(jobs, sid)
    return info is not None and (info.message or "").startswith("Job supervisor actor died")


def test_a_failing_state_api_is_retried_then_the_id_is_used_with_a_warning(
    host: DynamicHost, head: RayHead, jobs: JobSubmissionClient
) -> None:
    # Ray's state API answers 500 (DataSourceUnavailable, or a proxy's 502/503) to the lookup of
    # the id's supervisor: create retries it for deadline_reach_s, then says it could not check
    # and submits under the id instead of failing the run.
    proxy = start_fault_proxy(head.dashboard_url, fail_paths=r"^/api/v0/actors")
    props = job_props(proxy.endpoint, "no-state-api", "running", FAST, "--hold-seconds", "300")
    checked = host.check(URN, None, engine_inputs(props, RayJobProvider()))
    sid = ""
    try:
        started = time.monotonic()
        sid = host.create(URN, checked.inputs).id
        took = time.monotonic() - started
        assert not re.search(r"-r\d+$", sid), sid
        # Retried for deadline_reach_s (5 s), not for the submit's patience (30 s); the job
        # itself needs the 0.3 s running grace on top.
        assert proxy.failed >= 1 and FAST.reach_s <= took < FAST.submit_s, (proxy.failed, took)
        warning = "did not say whether this id was used before (Ray dashboard at"
        lines = host.output_once(warning)
        assert any(warning in line and "500" in line and sid in line for line in lines), lines
        assert jobs.get_job_status(sid) == JobStatus.RUNNING
    finally:
        proxy.stop()
        if sid:
            stop_job(jobs, sid)


def test_provider_errors_reach_the_engine_as_their_message_and_bugs_keep_the_traceback(
    host: DynamicHost, head: RayHead
) -> None:
    props = job_props(head.dashboard_url, "bad-update", "running")
    provider = RayJobProvider()
    olds = engine_inputs(props, provider)
    bad = engine_inputs({**props, "deadline_stop_s": -1.0}, provider)
    with pytest.raises(grpc.RpcError) as failure:
        host.update(URN, "reports-0123456789ab", olds, bad)
    message = failure.value.details()
    assert message.startswith("invalid RayJob inputs:\n- deadline_stop_s"), message
    assert "Traceback" not in message
    # Not one of the provider's errors (the host's own KeyError: no pickled provider): the
    # host's traceback, untouched.
    with pytest.raises(grpc.RpcError) as bug:
        host.update(URN, "reports-0123456789ab", olds, wire(props))
    assert bug.value.details().startswith("Traceback (most recent call last):")
    assert "KeyError: '__provider'" in bug.value.details()


def test_verl_gke_debug_keeps_the_traceback_of_provider_errors(head: RayHead) -> None:
    props = job_props(head.dashboard_url, "bad-update", "running")
    provider = RayJobProvider()
    bad = engine_inputs({**props, "deadline_stop_s": -1.0}, provider)
    with start_dynamic_host(env={"VERL_GKE_DEBUG": "1"}) as debug_host:
        with pytest.raises(grpc.RpcError) as failure:
            debug_host.update(URN, "reports-0123456789ab", engine_inputs(props, provider), bad)
    message = failure.value.details()
    assert message.startswith("Traceback (most recent call last):")
    assert "ProviderInputError: invalid RayJob inputs:" in message


class _FlakyLog:
    """A log source whose reads fail or answer as scripted (True: a step line, False: 500)."""

    reach_s = 1.0

    def __init__(self, script: list[bool]) -> None:
        self.script = script

    def log_tail(self, *_args: Any, **_kwargs: Any) -> list[str]:
        if not self.script.pop(0):
            raise RuntimeError("Request failed with status code 500: log endpoint down")
        return ["(TaskRunner pid=1) step:1 - timing_s/step:3.0 - training/global_step:1"]


def test_a_log_read_that_succeeds_restarts_the_count_of_failures() -> None:
    from types import SimpleNamespace

    from jobs import job_wait
    from jobs.provider_errors import ProviderTimeoutError

    info = SimpleNamespace(driver_node_id="node-1")
    scan, source = job_wait.LogScan(), _FlakyLog([False, False, True, False, False, False])

    def poll_at(now: float) -> None:
        scan.poll(source, "job", info)  # type: ignore[arg-type]
        job_wait.check_log_readable(scan, now, "job", 10.0, "http://dash", "hint")

    for _ in range(2):
        poll_at(time.monotonic() + 100)  # two failures: fewer than LOG_READ_FAILURES
    poll_at(time.monotonic() + 100)  # a read that works: the count starts again
    assert (scan.failures, scan.failing_since) == (0, None)
    for _ in range(2):
        poll_at(time.monotonic() + 100)
    with pytest.raises(ProviderTimeoutError, match="driver log could not be read") as failure:
        poll_at(time.monotonic() + 100)  # the third failure in a row, 100 s > 10 s
    assert "status code 500: log endpoint down" in str(failure.value)
    # Three failures in a row within deadline_submit_s are not enough.
    fresh = job_wait.LogScan()
    for _ in range(3):
        fresh.poll(_FlakyLog([False]), "job", info)  # type: ignore[arg-type]
    job_wait.check_log_readable(fresh, time.monotonic(), "job", 10.0, "http://dash", "hint")


def test_a_supervisor_lost_before_the_entrypoint_ran_is_recognised_at_ray_2_47_to_2_60() -> None:
    """The FAILED record Ray's job monitor writes when the supervisor actor dies while the job is
    not terminal (dashboard/modules/job/job_manager.py, _monitor_job_internal): Ray 2.60 says
    "Job supervisor actor died: {e}"; Ray 2.47.0 and 2.49.0, the clusters' heads, have no
    ActorDiedError branch and say "Unexpected error occurred: {e}", where ActorDiedError's text
    starts with BASE_ERROR_MSG (ray/exceptions.py). The supervisor writes driver_node_id with
    RUNNING, just before it starts the entrypoint (job_supervisor.py run), and FAILED keeps it."""
    from types import SimpleNamespace

    from jobs import job_wait

    died = "The actor died unexpectedly before finishing this task.\n\tclass_name: JobSupervisor"

    def lost(message: str, driver_node_id: str | None = None, status: str = "FAILED") -> bool:
        info = SimpleNamespace(
            status=SimpleNamespace(value=status),
            message=message,
            driver_node_id=driver_node_id,
            driver_exit_code=None,
        )
        return job_wait.supervisor_lost(info, None)  # type: ignore[arg-type]

    assert lost(f"Job supervisor actor died: {died}")  # Ray 2.60
    assert lost(f"Unexpected error occurred: {died}")  # Ray 2.47.0, 2.49.0
    # The entrypoint had started (RUNNING wrote driver_node_id): a real failure, not resubmitted.
    assert not lost(f"Unexpected error occurred: {died}", driver_node_id="node-1")
    assert not lost(f"Job supervisor actor died: {died}", driver_node_id="node-1")
    # Other failures of the monitor's generic branch are not a lost supervisor.
    assert not lost("Unexpected error occurred: failed to get job supervisor.")
    assert not lost(f"Job supervisor actor died: {died}", status="STOPPED")
