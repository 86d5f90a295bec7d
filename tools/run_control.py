"""`python -m tools.run` commands that act on a run or watch it live: stop, resume, --follow.

- stop: records that the user stopped the run (jobs/user_stop.py: the job provider then keeps it
  stopped through `pulumi up` and `pulumi up --refresh`), asks Ray to stop it (POST
  /api/jobs/<id>/stop: SIGTERM to the entrypoint and each of its descendants, SIGKILL to them
  after Ray's grace period: job_supervisor.py, Ray 2.47/2.49) and waits until Ray reports it
  STOPPED. Checkpoints are kept.
- resume: removes that record; the next `pulumi up --refresh` resubmits the run under its next
  -r<N> id and verl resumes from its latest checkpoint.
- --follow: prints the driver log from its start as the driver writes it (the Jobs API's log
  websocket, as `ray job logs --follow`), and between its lines, prefixed "==> ", the start-up
  phase when it changes and each training step (jobs/verl_log.py, the provider's parser), until
  the run ends. A closed stream is reopened; more than RECONNECTS closes in a row that brought
  nothing new, while the run has not ended, are an error.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from jobs import job_logs, user_stop, verl_log
from tools.run_target import RunToolError, Target, job_details, open_dashboard

DESCRIPTIONS = {
    "stop": (
        "Stop the stack's GRPO run and record that you stopped it: `pulumi up` (also with "
        "--refresh) keeps it stopped instead of resubmitting it; checkpoints are kept. Exit "
        "status 0 once Ray reports it STOPPED (or it had already ended), 1 on an error. Undo "
        "with `python -m tools.run resume`."
    ),
    "resume": (
        "Remove the record `python -m tools.run stop` left: the next `pulumi up --refresh` "
        "resubmits the stopped run under its next -r<N> id, resuming from its latest "
        "checkpoint. Exit status 0, or 1 on an error."
    ),
}
_TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
# How long stop waits for Ray to report STOPPED (Ray's own grace before SIGKILL is 3 s by
# default, RAY_JOB_STOP_WAIT_TIME_S; a driver with a large process tree takes longer).
STOP_WAIT_S = 120.0
RECONNECTS = 5


def control(command: str, target: Target, timeout_s: float) -> int:
    """Run `stop` or `resume`; the exit status."""
    if command == "stop":
        return stop(target, timeout_s)
    if command == "resume":
        return resume(target, timeout_s)
    raise RunToolError(f"unknown command {command!r}; one of: stop, resume")


def stop(target: Target, timeout_s: float, wait_s: float = STOP_WAIT_S) -> int:
    sid = target.submission_id
    with open_dashboard(target, timeout_s) as dashboard:
        info = job_details(dashboard, target)
        status = info.status.value
        if status in _TERMINAL:
            print(f"{sid} already {status}: nothing to stop")
            return 0
        # The record first: a refresh that sees STOPPED then always sees who stopped it.
        user_stop.record(dashboard, sid)
        dashboard.stop(sid)
        deadline = time.monotonic() + wait_s
        while status not in _TERMINAL:
            if time.monotonic() > deadline:
                raise RunToolError(
                    f"Ray job {sid} is still {status} {wait_s:.0f}s after the stop request; run "
                    "`python -m tools.run stop` again, or look at its driver log"
                )
            time.sleep(1.0)
            status = job_details(dashboard, target).status.value
    print(
        f"{sid} {status}; recorded as stopped by you ({user_stop.marker_id(sid)}): `pulumi up` "
        "keeps it stopped. To run it again: `python -m tools.run resume`, then "
        "`pulumi up --refresh`."
    )
    return 0


def resume(target: Target, timeout_s: float) -> int:
    sid = target.submission_id
    with open_dashboard(target, timeout_s) as dashboard:
        status = job_details(dashboard, target).status.value
        removed = user_stop.clear(dashboard, sid, timeout_s)
    if not removed:
        print(f"{sid} ({status}) has no stop record of `python -m tools.run stop`: nothing to do")
        return 0
    print(
        f"{sid} ({status}): stop record removed; `pulumi up --refresh` resubmits the run "
        "(the refresh sees it STOPPED and not stopped by you)"
    )
    return 0


class Progress:
    """Phase and step lines from the log as it streams: complete lines only, the phase only
    forward (a marker seen once stays passed), each training step once."""

    def __init__(self) -> None:
        self.phase = verl_log.NO_OUTPUT
        self.last_step = 0
        self._recent = job_logs.CappedLines(job_logs.SCAN_LINES, job_logs.SCAN_LINE_MAX_CHARS)

    def feed(self, lines: list[str]) -> list[str]:
        notes: list[str] = []
        self._recent.feed(("\n".join(lines) + "\n").encode())
        phase = verl_log.startup_phase("\n".join(self._recent.lines()))
        if verl_log.PHASES.index(phase) > verl_log.PHASES.index(self.phase):
            self.phase = phase
            notes.append(f"phase: {phase}")
        for metrics in verl_log.training_steps("\n".join(lines)):
            if metrics.step > self.last_step:
                self.last_step = metrics.step
                notes.append(f"step {metrics.step}: {_step_summary(metrics)}")
        return notes


def _step_summary(metrics: verl_log.StepMetrics) -> str:
    parts = []
    for key in (verl_log.SCORE_KEY, verl_log.RESPONSE_LENGTH_KEY, verl_log.STEP_TIME_KEY):
        value = metrics.get(key)
        if value is not None:
            parts.append(f"{key} {value:.4g}")
    return ", ".join(parts) or "logged"


def follow(target: Target, timeout_s: float, out: TextIO = sys.stdout) -> None:
    """Print the driver log until the run has ended (see the module doc)."""
    sid = target.submission_id
    progress = Progress()
    printed, partial = 0, ""
    with open_dashboard(target, timeout_s) as dashboard:
        job_details(dashboard, target)
        idle = 0  # consecutive connections that brought nothing new
        while True:
            received, before = 0, printed  # each connection starts at the log's start
            closed = "closed"
            try:
                for chunk in dashboard.follow_log(sid):
                    skip = max(0, printed - received)
                    received += len(chunk)
                    if skip >= len(chunk):
                        continue
                    printed += len(chunk) - skip
                    text = partial + chunk[skip:]
                    *lines, partial = text.split("\n")
                    _emit(out, lines, progress)
            except RuntimeError as exc:  # the socket closed early (a proxy, a head restart)
                closed = f"closed ({exc})"
            status = job_details(dashboard, target).status.value
            if status in _TERMINAL:
                break
            idle = 0 if printed > before else idle + 1
            if idle > RECONNECTS:
                raise RunToolError(
                    f"following the log of {sid}: the log stream {closed} {idle} times in a row "
                    f"with nothing new while the run is {status}; run it again, or look at the "
                    "driver log in the Ray dashboard"
                )
            out.write(f"==> log stream {closed} while {status}; reconnecting\n")
            time.sleep(1.0)
    if partial:
        _emit(out, [partial], progress)
    out.write(f"==> {sid} {status}\n")
    out.flush()


def _emit(out: TextIO, lines: list[str], progress: Progress) -> None:
    for line in lines:
        out.write(line + "\n")
    for note in progress.feed(lines):
        out.write(f"==> {note}\n")
    out.flush()
