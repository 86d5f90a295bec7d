"""A run the user stopped stays stopped: the record `python -m tools.run stop` leaves in the Ray
head, and how the job provider reads it.

Ray's own record of a stopped job cannot say who stopped it: `ray job stop`, the provider's delete
and a replacement all end in STOPPED, and a job's metadata is fixed at submission (the Jobs API
has no call that changes it). So the stop command submits, before it stops the run, a second,
tiny job under the id ``<run id>-user-stop`` that prints one line and ends; its metadata names
the run. The provider's refresh (read) of a STOPPED run looks that id up (one GET; 404 when
there is none) and records ``user_stop`` in the state; diff then keeps the run stopped instead of
resubmitting it, and says how to resume. `python -m tools.run resume` deletes the record (Ray's
DELETE /api/jobs/<id>, allowed for a finished job); the next `pulumi up --refresh` resubmits the
run under its next ``-r<N>`` id, resuming from its latest checkpoint.
"""

from __future__ import annotations

import shlex
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobs.dashboard_client import Dashboard

SUFFIX = "-user-stop"
METADATA_KEY = "verl-gke-user-stop"  # the stopped run's submission id
_TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})


def marker_id(sid: str) -> str:
    return f"{sid}{SUFFIX}"


def record(dashboard: Dashboard, sid: str) -> None:
    """Leave the user-stop record of run `sid` in its Ray head (idempotent)."""
    marker = marker_id(sid)
    if dashboard.job_info(marker) is not None:
        return
    at = datetime.now(tz=UTC).isoformat(timespec="seconds")
    line = f"verl-gke: run {sid} stopped by the user at {at} (python -m tools.run stop)"
    dashboard.call(
        f"record the user stop of {sid}",
        lambda client: client.submit_job(
            entrypoint=f"echo {shlex.quote(line)}",
            submission_id=marker,
            metadata={METADATA_KEY: sid, "stopped-at": at},
        ),
    )


def recorded(dashboard: Dashboard, sid: str) -> bool:
    """Whether the user stopped run `sid` with `python -m tools.run stop` (and did not resume)."""
    info = dashboard.job_info(marker_id(sid))
    return info is not None and (info.metadata or {}).get(METADATA_KEY) == sid


def clear(dashboard: Dashboard, sid: str, timeout_s: float) -> bool:
    """Delete the user-stop record of run `sid`; False when there was none. Ray deletes only a
    finished job: the record's one `echo` is waited for, at most timeout_s."""
    marker = marker_id(sid)
    deadline = time.monotonic() + timeout_s
    while True:
        info = dashboard.job_info(marker)
        if info is None:
            return False
        if info.status.value in _TERMINAL or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    dashboard.call(f"delete {marker}", lambda client: client.delete_job(marker))
    return True
