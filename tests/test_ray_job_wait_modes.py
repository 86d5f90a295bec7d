"""Wait modes and failures after `pulumi up`, through the real
`python -m pulumi.dynamic` host over gRPC, against a real local Ray head.

- wait_for=first_step (the default): create returns once verl's first training step is in the
  driver log (a `step:N - ... timing_s/step:...` line behind Ray's `(TaskRunner pid=...)` prefix,
  parsed by jobs/verl_log.py; the validation line `step:0` does not count), recording it;
- a run that dies before that point fails create with Ray's message and its own last lines;
- wait_for=running returns as soon as the job runs; wait_for=finished waits for SUCCEEDED;
- a run that fails after up: refresh records FAILED, Ray's message and the capped log tail, and
  the next up says it resubmits, as which id, and from which checkpoint.

Stand-in jobs (tests/job_fixtures/startup_job.py) print verl's start-up markers and step lines in
a few seconds; the session's Ray head, GCS emulator and host (tests/conftest.py) serve it.
"""

from __future__ import annotations

import dataclasses
import shlex
import sys
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from pulumi.runtime.proto import provider_pb2
from ray.job_submission import JobStatus, JobSubmissionClient

from jobs import dashboard_access, job_logs
from jobs.ray_job import JobDeadlines, RayJobArgs, RayJobProvider
from tests.job_fixtures.fake_trainer import write_checkpoint
from tests.support.dynamic_host import (
    STARTUP_JOB,
    DynamicHost,
    engine_inputs,
    from_wire,
    grpo_job_urn,
)
from tests.support.gcs_emulator import GcsEmulator
from tests.support.ray_head import RayHead

# Starts real processes (a Ray head, the provider host, a GCS emulator or subprocesses).
pytestmark = pytest.mark.integration

BUCKET = "wait-modes"
URN = grpo_job_urn("waits")
FAST = JobDeadlines(
    submit_s=30.0, reach_s=5.0, start_s=60.0, startup_grace_s=0.3, first_step_s=60.0,
    wait_s=60.0, stop_s=30.0, poll_interval_s=0.1,
)  # fmt: skip


def job_props(head: RayHead, run: str, wait_for: str | None, *args: str) -> dict[str, Any]:
    command = [sys.executable, str(STARTUP_JOB), "--run", run, *args]
    return RayJobArgs(
        entrypoint=shlex.join(command),
        runtime_env={},
        dashboard=dashboard_access.url_dashboard(head.dashboard_url),
        checkpoint_root=f"gs://{BUCKET}/{run}",
        submission_id_prefix="waits",
        wait_for=wait_for,
        deadlines=FAST,
    ).to_props()


def up(host: DynamicHost, props: dict[str, Any]) -> tuple[Any, provider_pb2.CreateResponse]:
    checked = host.check(URN, None, engine_inputs(props, RayJobProvider()))
    assert list(checked.failures) == []
    return checked, host.create(URN, checked.inputs)


def printed(host: DynamicHost, sid: str, awaited: str = "") -> list[str]:
    """The job's progress lines, once one containing `awaited` has arrived."""
    prefix = f"[ray-job {sid}]"
    lines = host.output_once(f"{prefix} {awaited}")
    return [line.rstrip("\n") for line in lines if line.startswith(prefix)]


def test_first_step_mode_returns_once_verl_logged_its_first_training_step(
    host: DynamicHost, head: RayHead, jobs: JobSubmissionClient
) -> None:
    props = job_props(head, "first-step", None, "--startup-seconds", "2", "--hold-seconds", "120")
    assert props["wait_for"] == "first_step"  # the default
    checked, created = up(host, props)
    sid = created.id
    try:
        state = from_wire(created.properties)
        assert state["status"] == "RUNNING"
        assert jobs.get_job_status(sid) == JobStatus.RUNNING  # still training
        first = state["first_step"]
        # step:0 (validation before training) is not a training step.
        assert first["step"] == 1
        assert first["metrics"] == {
            "timing_s/step": 42.5,
            "critic/score/mean": 0.1,
            "response_length/mean": 312.5,
            "perf/throughput": 1534.2,
        }
        assert first["seen_at"] >= state["start_time"]
        assert "timing_s/step:42.5" in jobs.get_job_logs(sid)
        lines = printed(host, sid, "first training step logged")
        assert any("until verl logs its first training step (wait_for=first_step)" in line
                   for line in lines)  # fmt: skip
        assert any("first training step logged (step 1)" in line for line in lines), lines
        # Progress lines name the start-up phase, the elapsed time and where to look.
        assert any(
            "phase: loading model, " in line
            and "since submission; if it seems stuck: the driver log: "
            f"`ray job logs {sid} --address {head.dashboard_url}`"
            in line
            for line in lines
        ), lines
        # A refresh keeps what the wait recorded.
        read = host.read(URN, sid, created.properties, checked.inputs)
        assert from_wire(read.properties)["first_step"] == first
    finally:
        host.delete(URN, sid, created.properties)
    assert jobs.get_job_status(sid) == JobStatus.STOPPED


def test_a_run_that_dies_before_its_first_step_fails_up_with_rays_message_and_its_last_lines(
    host: DynamicHost, head: RayHead, jobs: JobSubmissionClient
) -> None:
    props = job_props(head, "dies", "first_step", "--fail-before-step")
    with pytest.raises(grpc.RpcError) as failure:
        up(host, props)
    details = failure.value.details()
    assert "FAILED: Job entrypoint command failed with exit code 7\n" in details
    assert "(before verl logs its first training step, wait_for=first_step)" in details
    tail = details.split(" characters) ---\n", 1)[1]
    assert "(TaskRunner pid=4242) Model config after override" in tail
    assert "(TaskRunner pid=4242) torch.OutOfMemoryError: CUDA out of memory (stand-in)" in tail
    assert "last available logs" not in details  # Ray's own 10-line excerpt is replaced


def test_a_run_that_ends_right_after_its_first_step_is_reported_as_such(
    host: DynamicHost, head: RayHead, jobs: JobSubmissionClient, tmp_path: Path
) -> None:
    # The wait polls every 15 s. The run logs step 1 and fails only once released, and the test
    # releases it right after a poll saw it RUNNING without a step: the wait next sees it FAILED,
    # and the report must say it failed after its first step, not before.
    slow_poll = dataclasses.replace(FAST, poll_interval_s=15.0)
    release = tmp_path / "release"
    command = [
        sys.executable, str(STARTUP_JOB), "--run", "ends-after-step", "--fail-after-steps",
        "--release-file", str(release),
    ]  # fmt: skip
    props = RayJobArgs(
        entrypoint=shlex.join(command),
        runtime_env={},
        dashboard=dashboard_access.url_dashboard(head.dashboard_url),
        checkpoint_root=None,
        submission_id_prefix="waits",
        wait_for="first_step",
        deadlines=slow_poll,
    ).to_props()
    releaser = threading.Thread(
        target=_release_after_a_running_poll, args=(host, len(host.output), release)
    )
    releaser.start()
    try:
        with pytest.raises(grpc.RpcError) as failure:
            up(host, props)
    finally:
        release.touch()
        releaser.join()
    details = failure.value.details()
    assert "FAILED: Job entrypoint command failed with exit code 9\n" in details
    assert (
        "(after verl logged its first training step (step 1), before pulumi up returned, "
        "wait_for=first_step)"
    ) in details


def _release_after_a_running_poll(
    host: DynamicHost, since: int, release: Path, limit_s: float = 300
) -> None:
    """Create `release` once the provider has printed (after line `since` of the host's output) a
    RUNNING status and, after it, that poll's phase line, printed just before the wait sleeps
    its poll interval."""
    deadline = time.monotonic() + limit_s
    while not release.exists() and time.monotonic() < deadline:
        lines = list(host.output)[since:]
        running = [i for i, line in enumerate(lines) if "] RUNNING: " in line]
        if running and any("] phase: " in line for line in lines[running[0] + 1 :]):
            release.touch()
            return
        time.sleep(0.05)


def test_running_mode_returns_before_the_first_step(
    host: DynamicHost, head: RayHead, jobs: JobSubmissionClient
) -> None:
    props = job_props(head, "running", "running", "--startup-seconds", "30")
    _, created = up(host, props)
    try:
        state = from_wire(created.properties)
        assert (state["status"], state.get("first_step")) == ("RUNNING", None)  # null: not sent
        assert "step:1" not in jobs.get_job_logs(created.id)
    finally:
        host.delete(URN, created.id, created.properties)


def test_finished_mode_waits_for_success(
    host: DynamicHost, head: RayHead, jobs: JobSubmissionClient
) -> None:
    props = job_props(head, "finished", "finished", "--steps", "2")
    _, created = up(host, props)
    state = from_wire(created.properties)
    assert state["status"] == "SUCCEEDED" and state["end_time"] is not None
    assert jobs.get_job_status(created.id) == JobStatus.SUCCEEDED
    assert "Final validation metrics" in jobs.get_job_logs(created.id)


def test_a_failure_after_up_is_recorded_by_refresh_and_up_resubmits_from_the_checkpoint(
    host: DynamicHost, head: RayHead, gcs: GcsEmulator, jobs: JobSubmissionClient, tmp_path: Path
) -> None:
    run = "fails-later"
    # Holds after its first step until the test has seen `up` return, then fails.
    hold = tmp_path / "hold"
    props = job_props(head, run, "first_step", "--hold-file", str(hold), "--fail-after-steps")
    checked, created = up(host, props)
    sid = created.id
    assert from_wire(created.properties)["status"] == "RUNNING"
    hold.touch()
    # verl saved step 1 before the run failed.
    write_checkpoint(gcs.client().bucket(BUCKET), run, 1, world_size=2)
    deadline = time.monotonic() + 60
    while not jobs.get_job_status(sid).is_terminal() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert jobs.get_job_status(sid) == JobStatus.FAILED

    # pulumi refresh: FAILED, Ray's message, the capped tail, the checkpoint to resume from.
    read = host.read(URN, sid, created.properties, checked.inputs)
    state = from_wire(read.properties)
    assert read.id == sid and state["status"] == "FAILED"
    assert state["message"] == "Job entrypoint command failed with exit code 9"
    tail = state["log_tail"].splitlines()
    assert 0 < len(tail) <= job_logs.TAIL_LINES
    assert tail[-1] == "(TaskRunner pid=4242) RuntimeError: NCCL watchdog timeout (stand-in)"
    checkpoint = f"gs://{BUCKET}/{run}/global_step_1"
    assert state["latest_checkpoint"] == checkpoint

    # pulumi up after it: the preview's diff says plainly what happens.
    again = host.check(URN, checked.inputs, engine_inputs(props, RayJobProvider()))
    diff = host.diff(URN, sid, read.properties, again.inputs, checked.inputs)
    assert (list(diff.replaces), diff.deleteBeforeReplace) == (["status"], True)
    said = (
        f"[ray-job {sid}] the last refresh saw it FAILED (Job entrypoint command failed with "
        f"exit code 9): resubmitting {sid} as {sid}-r2; the run continues in "
        f"gs://{BUCKET}/{run}: verl resumes from {checkpoint}"
    )
    assert said in printed(host, sid, "the last refresh saw it FAILED"), printed(host, sid)
    # The engine's replacement: delete (nothing to stop), then create the next attempt, which
    # holds after its first step again.
    hold.unlink()
    host.delete(URN, sid, read.properties)
    resubmitted = host.create(URN, again.inputs)
    try:
        assert resubmitted.id == f"{sid}-r2"
        assert (
            f"[ray-job {sid}-r2] resubmitting {sid} (it ended FAILED) as {sid}-r2; the run "
            f"continues in gs://{BUCKET}/{run}: verl resumes from {checkpoint}"
        ) in printed(host, f"{sid}-r2", "resubmitting")
        assert from_wire(resubmitted.properties)["first_step"]["step"] == 1
    finally:
        jobs.stop_job(resubmitted.id)
