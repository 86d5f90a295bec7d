"""`python -m tools.run` as a user runs it against real local Ray heads: the exit status and the
cause of a FAILED run, --follow, stop (and the job provider's next operation, through the real
dynamic-provider host, keeping the run stopped), resume, and a head with Ray's token
authentication.

Rules encoded, with their source:
- Ray writes a failed entrypoint's status message as "Job entrypoint command failed with exit
  code N, last available logs (truncated to 20,000 chars):\\n<log end>"
  (ray/dashboard/modules/job/job_supervisor.py, Ray 2.60): the cause is after that header.
- Ray's job log websocket (/api/jobs/<id>/logs/tail) sends the log from its start and closes once
  the job is terminal and its log read (job_manager.py tail_job_logs, Ray 2.60).
- A head started with RAY_AUTH_MODE=token answers a request without its token 401 "Unauthorized:
  Missing authentication token" (ray/_private/authentication/http_token_authentication.py,
  Ray 2.60); Ray's SDK sends the token found in RAY_AUTH_TOKEN when RAY_AUTH_MODE=token.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import ray
from pulumi.runtime.proto import provider_pb2
from ray.job_submission import JobStatus, JobSubmissionClient

from jobs import dashboard_access
from jobs.dashboard_client import Dashboard
from jobs.job_inputs import JobInputs
from jobs.ray_job import JobDeadlines, RayJobArgs, RayJobProvider
from tests.support.dynamic_host import (
    STARTUP_JOB,
    DynamicHost,
    engine_inputs,
    from_wire,
    grpo_job_urn,
)
from tests.support.ray_head import RayHead, temporary_ray_head
from tests.support.run_tool import rows, tool
from tools import run_control
from tools.run_target import RunToolError, Target, open_dashboard

# Starts real processes (a Ray head, the provider host, a GCS emulator or subprocesses).
pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent
WAIT_S = 120.0
URN = grpo_job_urn("stops")
FAST = JobDeadlines(
    submit_s=30.0, reach_s=5.0, start_s=60.0, startup_grace_s=0.3, first_step_s=60.0,
    wait_s=60.0, stop_s=30.0, poll_interval_s=0.1,
)  # fmt: skip
RAY_TOKEN = "0123456789abcdef0123456789abcdef"


def startup_job(*args: str) -> str:
    return shlex.join([sys.executable, str(STARTUP_JOB), *args])


def submit(jobs: JobSubmissionClient, entrypoint: str) -> str:
    # A head's dashboard answers before its agent has registered; until then Ray answers a
    # submission 500 "No available agent to submit job, please try again later"
    # (job_head.py, Ray 2.60).
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            return jobs.submit_job(entrypoint=entrypoint)
        except RuntimeError as exc:
            if "No available agent" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def wait_until(jobs: JobSubmissionClient, sid: str, statuses: set[JobStatus]) -> JobStatus:
    deadline = time.monotonic() + WAIT_S
    while (status := jobs.get_job_status(sid)) not in statuses:
        assert time.monotonic() < deadline, (sid, status, jobs.get_job_logs(sid))
        time.sleep(0.2)
    return status


def test_a_failed_run_exits_non_zero_and_shows_the_cause_past_rays_log_header(
    head: RayHead, jobs: JobSubmissionClient
) -> None:
    sid = submit(jobs, startup_job("--run", "failed", "--fail-before-step"))
    wait_until(jobs, sid, {JobStatus.FAILED})
    message = jobs.get_job_info(sid).message
    assert "last available logs (truncated to 20,000 chars):" in message  # Ray's own header

    result = tool("--dashboard-url", head.dashboard_url, "--submission-id", sid)
    assert result.returncode == 3, result.stderr
    assert rows(result.stdout)["message"] == "Job entrypoint command failed with exit code 7"
    assert "last available logs" not in result.stdout
    cause = result.stdout.split("\ncause (the driver log's last ", 1)[1].splitlines()
    assert cause[-1].endswith("torch.OutOfMemoryError: CUDA out of memory (stand-in)")
    assert cause[-2].endswith("Traceback (most recent call last):")

    as_json = tool("--dashboard-url", head.dashboard_url, "--submission-id", sid, "--json")
    assert as_json.returncode == 3
    cause_json = json.loads(as_json.stdout)["cause"]
    assert cause_json[-1].endswith("torch.OutOfMemoryError: CUDA out of memory (stand-in)")


def test_follow_streams_the_log_with_phases_and_steps_until_the_run_ends(
    head: RayHead, jobs: JobSubmissionClient
) -> None:
    sid = submit(
        jobs,
        startup_job(
            "--run", "follow", "--startup-seconds", "2", "--steps", "3", "--step-seconds", "1",
            "--hold-seconds", "8",
        ),
    )  # fmt: skip
    environment = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    process = subprocess.Popen(
        [sys.executable, "-m", "tools.run", "--dashboard-url", head.dashboard_url,
         "--submission-id", sid, "--follow"],
        cwd=REPO, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines: list[str] = []
    status_at_step: Any = None
    try:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("==> step 3:") and status_at_step is None:
                status_at_step = jobs.get_job_status(sid)
        assert process.wait(timeout=WAIT_S) == 0, (lines, process.stderr.read())
    finally:
        if process.poll() is None:
            process.kill()
    # Streamed: the third step was shown while the job still ran (it holds 8 s after it).
    assert status_at_step == JobStatus.RUNNING, lines
    notes = [line for line in lines if line.startswith("==> ")]
    assert [n for n in notes if n.startswith("==> step")] == [
        "==> step 1: critic/score/mean 0.1, response_length/mean 312.5, timing_s/step 42.5",
        "==> step 2: critic/score/mean 0.2, response_length/mean 312.5, timing_s/step 43.5",
        "==> step 3: critic/score/mean 0.3, response_length/mean 312.5, timing_s/step 44.5",
    ]
    assert any(n.startswith("==> phase: ") for n in notes), notes
    assert f"==> {sid} SUCCEEDED" in lines
    # Every log line once, in order, before the status report.
    logged = [line for line in lines if "step:" in line and not line.startswith("==> ")]
    assert [line.split("step:", 1)[1].split(" ")[0] for line in logged] == ["0", "1", "2", "3"]
    step_three = next(n for n in notes if n.startswith("==> step 3:"))
    assert lines.index(logged[-1]) < lines.index(step_three)
    report = rows("\n".join(lines[lines.index(f"==> {sid} SUCCEEDED") + 1 :]))
    assert report["run"] == sid and report["status"].startswith("SUCCEEDED after")


def test_follow_fails_when_the_stream_keeps_closing_with_nothing_new_while_the_run_runs(
    head: RayHead, jobs: JobSubmissionClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A proxy that closes the log websocket at once: follow must not end 0 on a RUNNING run.
    sid = submit(jobs, startup_job("--run", "idle-stream", "--hold-seconds", "600"))
    try:
        wait_until(jobs, sid, {JobStatus.RUNNING})
        target = Target(dashboard_access.DashboardUrl(head.dashboard_url), sid, None)
        with open_dashboard(target, 30.0) as dashboard:
            # Ray's SDK raises a websocket ERROR only when it knows the head's version
            # (tail_job_logs, ray/dashboard/modules/job/sdk.py, Ray 2.60).
            known = dashboard.call("version", lambda client: client._server_ray_version)
        assert known == ray.__version__
        monkeypatch.setattr(run_control, "RECONNECTS", 2)
        monkeypatch.setattr(Dashboard, "follow_log", lambda _self, _sid: iter(()))
        out = io.StringIO()
        with pytest.raises(RunToolError, match="3 times in a row with nothing new"):
            run_control.follow(target, 30.0, out)
        assert out.getvalue().count("reconnecting") == 2
    finally:
        jobs.stop_job(sid)


def stop_props(head: RayHead) -> dict[str, Any]:
    return RayJobArgs(
        entrypoint=startup_job("--run", "user-stop", "--hold-seconds", "600"),
        runtime_env={},
        dashboard=dashboard_access.url_dashboard(head.dashboard_url),
        checkpoint_root=None,
        submission_id_prefix="stops",
        wait_for="running",
        deadlines=FAST,
    ).to_props()


def test_a_run_the_user_stopped_stays_stopped_through_refresh_and_up_until_resumed(
    head: RayHead, jobs: JobSubmissionClient, host: DynamicHost
) -> None:
    props = stop_props(head)
    checked = host.check(URN, None, engine_inputs(props, RayJobProvider()))
    created = host.create(URN, checked.inputs)
    sid = created.id
    where = ("--dashboard-url", head.dashboard_url, "--submission-id", sid)
    try:
        assert from_wire(created.properties)["status"] == "RUNNING"
        stopped = tool("stop", *where)
        assert stopped.returncode == 0, stopped.stderr
        assert f"{sid} STOPPED; recorded as stopped by you" in stopped.stdout
        assert jobs.get_job_status(sid) == JobStatus.STOPPED
        assert tool(*where).returncode == 4  # status of a STOPPED run

        # `pulumi up --refresh`: Read, then Diff against the refreshed state, as the engine does.
        read = host.read(URN, sid, created.properties, checked.inputs)
        state = from_wire(read.properties)
        assert (state["status"], state["user_stop"]) == ("STOPPED", True)
        again = host.check(URN, checked.inputs, engine_inputs(props, RayJobProvider()))
        kept = host.diff(URN, sid, read.properties, again.inputs, checked.inputs)
        assert kept.changes == provider_pb2.DiffResponse.DIFF_NONE
        assert list(kept.replaces) == []
        note = host.output_once(f"[ray-job {sid}] stopped by the user")
        assert any("python -m tools.run resume" in line for line in note), note
        known = [job.submission_id for job in jobs.list_jobs()]
        assert f"{sid}-r2" not in known  # nothing was resubmitted

        # Resume: the record goes; the next refresh sees a plain STOPPED run and up resubmits.
        resumed = tool("resume", *where)
        assert resumed.returncode == 0, resumed.stderr
        assert "stop record removed" in resumed.stdout
        reread = host.read(URN, sid, read.properties, checked.inputs)
        assert from_wire(reread.properties)["user_stop"] is False
        resubmit = host.diff(URN, sid, reread.properties, again.inputs, checked.inputs)
        assert (list(resubmit.replaces), resubmit.deleteBeforeReplace) == (["status"], True)
    finally:
        host.delete(URN, sid, created.properties)


def test_a_run_stopped_while_create_waits_is_kept_stopped_by_the_next_create(
    head: RayHead, jobs: JobSubmissionClient, host: DynamicHost
) -> None:
    # `pulumi up` waits in create (wait_for=finished) when the user stops the run; that up and
    # the next one (create again) must not resubmit it as -r2.
    props = {
        **stop_props(head),
        "entrypoint": startup_job("--run", "stop-in-create", "--hold-seconds", "600"),
        "submission_id_prefix": "stopwait",
        "wait_for": "finished",
    }
    sid = JobInputs.parse(props).base_submission_id
    checked = host.check(URN, None, engine_inputs(props, RayJobProvider()))
    with ThreadPoolExecutor(max_workers=1) as pool:
        creating = pool.submit(host.create, URN, checked.inputs)
        deadline = time.monotonic() + WAIT_S
        while sid not in [job.submission_id for job in jobs.list_jobs()]:
            assert time.monotonic() < deadline and not creating.done(), "create submitted nothing"
            time.sleep(0.2)
        wait_until(jobs, sid, {JobStatus.RUNNING})
        stopped = tool("stop", "--dashboard-url", head.dashboard_url, "--submission-id", sid)
        assert stopped.returncode == 0, stopped.stderr
        first = creating.result(timeout=WAIT_S)
    again = host.create(URN, checked.inputs)
    for created in (first, again):
        state = from_wire(created.properties)
        assert (created.id, state["status"], state["user_stop"]) == (sid, "STOPPED", True)
    note = host.output_once(f"[ray-job {sid}] stopped by the user")
    assert any("python -m tools.run resume" in line for line in note), note
    assert f"{sid}-r2" not in [job.submission_id for job in jobs.list_jobs()]


def test_a_stop_of_a_finished_run_records_nothing(head: RayHead, jobs: JobSubmissionClient) -> None:
    sid = submit(jobs, startup_job("--run", "done", "--steps", "1"))
    wait_until(jobs, sid, {JobStatus.SUCCEEDED})
    result = tool("stop", "--dashboard-url", head.dashboard_url, "--submission-id", sid)
    assert (result.returncode, result.stdout.strip()) == (
        0,
        f"{sid} already SUCCEEDED: nothing to stop",
    )
    assert f"{sid}-user-stop" not in [job.submission_id for job in jobs.list_jobs()]


# -- a head with Ray's token authentication -----------------------------------------------------


@pytest.fixture(scope="module")
def token_head() -> Iterator[RayHead]:
    """A head of its own: it wants Ray's token on every request (its readiness probe sends it)."""
    token_env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": RAY_TOKEN}
    with temporary_ray_head("rtk", extra_env=token_env) as ray_head:
        yield ray_head


def test_a_token_heads_401_is_reported_as_rays_token_auth_and_the_token_is_honoured(
    token_head: RayHead,
) -> None:
    client = JobSubmissionClient(
        token_head.dashboard_url, headers={"Authorization": f"Bearer {RAY_TOKEN}"}
    )
    sid = submit(client, startup_job("--run", "token", "--steps", "1"))
    where = ("--dashboard-url", token_head.dashboard_url, "--submission-id", sid, "--timeout", "5")

    refused = tool(*where)
    assert refused.returncode == 1
    assert "Missing authentication token" in refused.stderr
    assert "This is Ray's token authentication, not a Kubernetes permission." in refused.stderr
    assert "services/proxy" not in refused.stderr

    wrong = tool(*where, env={"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "f" * 32})
    assert wrong.returncode == 1
    assert "the Ray token sent is not the head's" in wrong.stderr

    deadline = time.monotonic() + WAIT_S
    while client.get_job_status(sid) != JobStatus.SUCCEEDED:
        assert time.monotonic() < deadline, client.get_job_logs(sid)
        time.sleep(0.2)
    allowed = tool(*where, env={"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": RAY_TOKEN})
    assert allowed.returncode == 0, allowed.stderr
    assert rows(allowed.stdout)["status"].startswith("SUCCEEDED after")
