"""What a wait for a submitted Ray job reads besides its status, and when that ends the wait.

- LogScan: the driver log's tail, read while waiting for verl's first training step (the step
  line and the start-up phase, jobs/verl_log.py), with a count of the reads that failed in a
  row: the dashboard can answer the job's status while its log endpoints fail.
- check_log_readable: such failures, LOG_READ_FAILURES in a row for deadline_submit_s, end the
  wait saying the log could not be read (not that the job did not step); the job keeps running.
- supervisor_lost: a job whose supervisor actor Ray saw die before the entrypoint ran (Ray 2.60:
  "Job supervisor actor died"; Ray 2.47 and 2.49: "Unexpected error occurred: The actor died");
  the provider submits it once more under the next attempt's id.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from jobs import job_logs, secret_scan, verl_log
from jobs.provider_errors import ProviderTimeoutError

if TYPE_CHECKING:
    from ray.dashboard.modules.job.pydantic_models import JobDetails

# Without the state API, the whole driver log is read to find the first step: at most this often.
FULL_LOG_EVERY_S = 60.0
# A first-step wait whose log reads fail this many times in a row, for deadline_submit_s, ends.
LOG_READ_FAILURES = 3

# What Ray's job monitor (dashboard/modules/job/job_manager.py, _monitor_job_internal) writes as
# the FAILED message of a job whose supervisor actor died while the job was not terminal: Ray 2.60
# has a branch for ActorDiedError (error_type JOB_SUPERVISOR_ACTOR_DIED); Ray 2.47.0 and 2.49.0
# (the heads' versions) have none, so the error reaches the generic branch, "Unexpected error
# occurred: {e}", and ActorDiedError's message begins "The actor died" (ray/exceptions.py, both
# for BASE_ERROR_MSG and for a creation-task error). Causes include a supervisor lost with its
# node or killed, and the monitor of a job deleted with `ray job delete` writing it over a new
# submission that reused the id; the provider does not reuse such an id
# (RayJobProvider._was_submitted) unless Ray's state API could not tell it was used.
SUPERVISOR_DIED = "Job supervisor actor died"
SUPERVISOR_DIED_RAY_2_49 = "Unexpected error occurred: The actor died"
SUPERVISOR_LOST = (
    "Ray lost the job's supervisor before the entrypoint ran (Job supervisor actor died, e.g. its "
    "node was lost, or the submission id was used by a job deleted outside Pulumi): submitting it "
    "once more under the next attempt's id"
)


class LogSource(Protocol):
    """The part of the provider's dashboard view that reads a driver log."""

    reach_s: float

    def log_tail(
        self,
        sid: str,
        driver_node_id: str | None,
        lines: int,
        max_chars: int,
        whole_log_fallback: bool,
        patience_s: float | None,
    ) -> list[str]: ...


class LogScan:
    """Reads the driver log's tail while waiting for the first training step, and counts the
    reads that failed in a row."""

    def __init__(self) -> None:
        self.phase = verl_log.NO_OUTPUT
        self._last_whole_log = -math.inf
        self.failures = 0  # consecutive failed reads
        self.failing_since: float | None = None
        self.last_error = ""

    def poll(self, source: LogSource, sid: str, info: JobDetails) -> verl_log.StepMetrics | None:
        now = time.monotonic()
        # A run of failures tries the whole log (GET /api/jobs/<id>/logs) too, once at least.
        streak = self.failing_since is not None and self._last_whole_log < self.failing_since
        whole_log_ok = streak or now - self._last_whole_log >= FULL_LOG_EVERY_S
        driver_node_id = getattr(info, "driver_node_id", None)
        if not driver_node_id and not whole_log_ok:
            return None  # no driver node yet: nothing to read until the whole log is due
        if whole_log_ok:
            self._last_whole_log = now
        try:
            lines = source.log_tail(
                sid,
                driver_node_id,
                job_logs.SCAN_LINES,
                job_logs.SCAN_LINE_MAX_CHARS,
                whole_log_fallback=whole_log_ok,
                patience_s=min(source.reach_s, 10.0),
            )
        except Exception as exc:  # counted; check_log_readable decides when it is too long
            self.failures += 1
            self.failing_since = now if self.failing_since is None else self.failing_since
            self.last_error = secret_scan.redact(str(exc))[:500]
            return None
        self.failures, self.failing_since = 0, None
        text = "\n".join(lines)
        phase = verl_log.startup_phase(text)
        # A tail can scroll past a marker: the phase never moves backwards.
        if verl_log.PHASES.index(phase) > verl_log.PHASES.index(self.phase):
            self.phase = phase
        return verl_log.first_training_step(text)


def check_log_readable(
    scan: LogScan, now: float, sid: str, submit_s: float, address: str, hint: str
) -> None:
    """Raise when the driver log could not be read LOG_READ_FAILURES times in a row for at
    least deadline_submit_s (how long a wait tolerates the dashboard not answering): the job's
    steps cannot be seen. The job keeps running."""
    if scan.failing_since is None or scan.failures < LOG_READ_FAILURES:
        return
    failing = now - scan.failing_since
    if failing < submit_s:
        return
    raise ProviderTimeoutError(
        f"Ray job {sid} is RUNNING, but its driver log could not be read for {failing:.0f}s "
        f"({scan.failures} attempts in a row, deadline_submit_s={submit_s:.0f}; last error: "
        f"{scan.last_error}), so whether verl logged a training step is unknown. It keeps "
        "running; the next `pulumi up` adopts it. The dashboard at "
        f"{address} answers the job's status but not its log (GET /api/v0/logs/file, Ray's "
        f"state API, and GET /api/jobs/{sid}/logs); read the log yourself: {hint}"
    )


def supervisor_lost(info: JobDetails, first_step: Mapping[str, Any] | None) -> bool:
    """The job failed because Ray lost its supervisor before its entrypoint ran.

    The supervisor writes driver_node_id together with RUNNING, just before it starts the
    entrypoint, and a later FAILED keeps it (job_supervisor.py run, common.py put_status; Ray
    2.47, 2.49, 2.60): a job without one never ran its entrypoint.
    """
    message = info.message or ""
    return (
        info.status.value == "FAILED"
        and message.startswith((SUPERVISOR_DIED, SUPERVISOR_DIED_RAY_2_49))
        and not getattr(info, "driver_node_id", None)
        and getattr(info, "driver_exit_code", None) is None
        and first_step is None
    )
