"""The GRPO training run as a Pulumi dynamic resource: one Ray job, submitted through the Jobs API.

Contract (what the program passes, what the state holds; RayJobArgs builds the inputs):

Inputs. "spec": a change replaces the job (old one stopped first); the rest updates in place.
  entrypoint: str                      spec; the shell command Ray runs on the head
  runtime_env: dict                    spec; Ray runtime env, no secrets
  dashboard: dict                      spec; dashboard_access.url_dashboard(url) or
                                       kube_proxy_dashboard(endpoint, ca, namespace, service)
  submission_id_prefix: str            spec; usually the stack name
  checkpoint_root: str | None          gs://bucket/folder of verl's checkpoints
  wait_for: str = "first_step"         when create returns: "running" (RUNNING and still so after
                                       deadline_startup_grace_s), "first_step" (verl logged its
                                       first training step, jobs/verl_log.py), "finished"
                                       (SUCCEEDED). States written before this input hold
                                       `wait: bool`; it still reads as True -> "finished",
                                       False -> "running", and RayJobArgs(wait=...) still works.
  deadline_submit_s = 600              create: how long the dashboard of a new cluster may take
                                       to answer at all, and how long a wait tolerates it (or,
                                       in "first_step", the driver log) not answering
  deadline_reach_s = 45                read/delete: how long a dashboard that does not answer is
                                       retried before the operation decides it is unreachable;
                                       once it has answered, each request may take this long
  deadline_start_s = 3600              PENDING -> RUNNING
  deadline_startup_grace_s = 30        "running": RUNNING for this long
  deadline_first_step_s = 7200         "first_step": RUNNING -> first training step logged
  deadline_wait_s = 604800             "finished": RUNNING -> terminal
  deadline_stop_s = 300                stop request -> terminal
  deadline_poll_interval_s = 5
  result_tag: str | None               a job that prints {"check": <tag>, ...}: `result` output
  gke_cluster: dict | None             job_evidence.gke_cluster_input(project, location, name):
                                       lets refresh/destroy ask the GKE API whether the cluster
                                       is gone when the dashboard does not answer
Outputs: every input, plus
  submission_id, status (PENDING | RUNNING | SUCCEEDED | FAILED | STOPPED, or UNREACHABLE after
  a refresh that could not reach the dashboard and found no evidence the job is gone), message,
  dashboard_hint, checkpoint_root, checkpoints, latest_checkpoint, latest_step, start_time,
  end_time, result,
  log_tail: str | None                 the driver log's last lines (at most 50, each cut to 500
                                       characters, cuts marked) of a FAILED or STOPPED job
  first_step: dict | None              {"step", "seen_at", "metrics"}: the first training step
                                       seen ("first_step" mode); metrics are a few headline keys
  last_seen: dict | None               {"status", "at", "head_session"}: what the Ray head last
                                       said and when (kept through UNREACHABLE refreshes)
  user_stop: bool | None               a STOPPED run: whether the user stopped it with
                                       `python -m tools.run stop` (jobs/user_stop.py)
  attempts, restarts_used: int | None  the runner's training attempts and restarts so far (its
                                       last `verl-gke-recovery:` line in the driver log's last
                                       RECOVERY_TAIL_LINES lines, jobs/recovery_log.py; kept
                                       from the previous refresh when none is there)

Lifecycle (DESIGN.md, Decisions and Real contracts):
- create: submits with a deterministic id, `<stack>-<sha256(entrypoint, runtime_env)[:12]>`, so a
  re-run of `pulumi up` adopts the job instead of starting a second one. If every earlier attempt
  with that id ended FAILED or STOPPED (a fast failure, a destroy) or was deleted, the next
  attempt gets the suffix `-r<N>` and the provider says from which checkpoint verl resumes; a job
  that is pending, running or succeeded is always adopted. Returns at the `wait_for` point,
  printing progress lines (phase, elapsed time, where to look if it is stuck). A run that ends
  FAILED or STOPPED before that point fails the step with Ray's message and the driver log's
  capped tail.
- diff: a new entrypoint, runtime env or id prefix replaces the job, old one stopped first
  (delete_before_replace: GPUs are exclusive). So does a new dashboard target: the job record
  lives in the Ray head the dashboard leads to. A state whose last refresh saw FAILED or STOPPED
  is replaced too (`pulumi up` resubmits), and diff says so plainly, unless the user stopped it
  (user_stop): that run stays stopped until `python -m tools.run resume` removes the record.
  Deadlines, wait_for, checkpoint_root and gke_cluster are updated in place.
- preview: any input may be unknown, at any depth (pulumi.output.Unknown objects in the real
  host, or the wire sentinel). check validates only what is known; diff counts an unknown as a
  change, and as a replacement where a change would replace.
- read (`pulumi refresh`): status, message, times, checkpoints, and for FAILED/STOPPED the log
  tail.
- delete: stops the job if it still runs and waits until it is terminal. Checkpoints and the job
  record are kept.

Faults. A job is forgotten only on positive evidence that it is gone: the Ray head says it does not
know the id (404), or, when the dashboard does not answer within deadline_reach_s, the Kubernetes
API (the head Service is gone, or no head pod is running) or the GKE API (the cluster is gone) says
so (jobs/job_evidence.py, at most 15 s more). Without evidence, read keeps the resource and its last
outputs with status UNREACHABLE and prints a warning; delete fails with what could not be reached
and what to do, so an engine replacement (delete first) never submits the new job next to a running
old one. No lock is held across a network call: concurrent operations in one provider process do not
wait for each other. A first-step wait whose driver log cannot be read (3 failures in a row over
deadline_submit_s) ends saying so, the job left running. An id is not submitted twice: one whose
record was deleted (`ray job stop` + `ray job delete`) but whose supervisor actor Ray's state API
still lists counts as an ended attempt (when the state API cannot tell, create warns and uses the
id). A job whose supervisor actor died before its entrypoint ran is submitted once more under the
next -rN id. Errors of the provider's own (jobs/provider_errors.py) reach `pulumi up` as their
message, without the host's traceback.

Rules of pulumi.dynamic that shape this module (pulumi sdk/python/lib/pulumi/dynamic): the provider
is pickled with dill into the state and runs in a separate process, so it holds no client, socket or
token; heavy imports happen inside methods; connection data are inputs; the engine applies no
timeouts, so every wait here has its own deadline; progress goes to stdout with flush=True.
"""

from __future__ import annotations

import copy
import json
import math
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pulumi
import pulumi.dynamic

from jobs import (
    dashboard_access,
    job_evidence,
    job_wait,
    provider_errors,
    recovery_log,
    user_stop,
    verl_log,
)
from jobs.checkpoints import CheckpointListing, discover_checkpoints, normalize_root
from jobs.dashboard_client import (
    Dashboard,
    DashboardAuthError,
    DashboardUnreachableError,
    recreated_after_delete,
)
from jobs.job_inputs import (
    CONNECTION_KEYS,
    OUTPUT_KEYS,
    SPEC_KEYS,
    UNKNOWN,
    JobDeadlines,
    JobInputs,
    RayJobArgs,
    differs,
    input_problems,
    redact,
    secret_problems,
    submission_id,
)
from jobs.job_messages import (
    MESSAGE_MAX_CHARS,
    MODE_POINT,
    duration,
    failure_report,
    log_tail_output,
    new_run_note,
    no_evidence_message,
    not_known,
    progress,
    reach_hint,
    resubmit_note,
    resume_note,
    short_message,
    stop_command,
    stuck_hint,
    user_stop_note,
)
from jobs.provider_errors import ProviderRuntimeError, ProviderTimeoutError

if TYPE_CHECKING:
    from ray.dashboard.modules.job.pydantic_models import JobDetails
    from ray.job_submission import JobSubmissionClient

# Importable from here as before (the program, tests, and states that name this module).
__all__ = [
    "UNKNOWN",
    "JobDeadlines",
    "RayJob",
    "RayJobArgs",
    "RayJobProvider",
    "find_tagged_result",
    "input_problems",
    "redact",
    "secret_problems",
    "submission_id",
]

# In the dynamic host (which imports this module to unpickle the provider), the provider's own
# errors reach the engine as their message, without a traceback (jobs/provider_errors.py).
provider_errors.install_in_dynamic_host()


UNREACHABLE = "UNREACHABLE"
# An earlier attempt's id whose record `ray job delete` removed (RayJobProvider._was_submitted).
DELETED = "DELETED"
# Headline metrics of the first training step kept in the `first_step` output.
FIRST_STEP_KEYS = (
    verl_log.STEP_TIME_KEY,
    verl_log.SCORE_KEY,
    verl_log.REWARD_KEY,
    verl_log.RESPONSE_LENGTH_KEY,
    verl_log.THROUGHPUT_KEY,
)
PROGRESS_EVERY_S = 60.0

_TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})


class RayJobProvider(pulumi.dynamic.ResourceProvider):
    """CRUD for one Ray job. Stateless: everything it needs comes in the inputs of each call."""

    def __init__(self, token_provider: dashboard_access.TokenProvider | None = None) -> None:
        super().__init__()
        # Test seam; None means Google Application Default Credentials at call time.
        self._token_provider = token_provider

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.CheckResult:
        failures = [
            pulumi.dynamic.CheckFailure(key, reason)
            for key, reason in input_problems(news, allow_unknown=True)
        ]
        return pulumi.dynamic.CheckResult(news, failures)

    def diff(
        self, _id: str, _olds: dict[str, Any], _news: dict[str, Any]
    ) -> pulumi.dynamic.DiffResult:
        # An unknown new value (preview) counts as changed: if it is a SPEC_KEY it may name
        # another job or another Ray head, so the preview shows the replacement the update may do.
        changed = [k for k in (*SPEC_KEYS, *CONNECTION_KEYS) if differs(k, _olds, _news)]
        replaces = [k for k in changed if k in SPEC_KEYS]
        status = _olds.get("status")
        if replaces and (
            note := new_run_note(_olds.get("checkpoint_root"), _news.get("checkpoint_root"))
        ):
            progress(_id, note)
        if status == "STOPPED" and _olds.get("user_stop") and not replaces:
            # The user stopped it (jobs/user_stop.py): it stays stopped until they resume it.
            progress(_id, user_stop_note(_id, _olds))
        elif status in ("FAILED", "STOPPED"):
            # The last refresh saw the run end without success: `pulumi up` submits it again.
            if not replaces:
                progress(_id, resubmit_note(_id, status, _olds))
            replaces.append("status")
        return pulumi.dynamic.DiffResult(
            changes=bool(changed or replaces),
            replaces=replaces,
            delete_before_replace=True,
        )

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        job = JobInputs.parse(props)
        # create may meet a cluster that is still starting: deadline_submit_s, not reach_s.
        with self._dashboard(job, job.deadlines.submit_s) as dashboard:
            sid = self._submit_or_adopt(dashboard, job)
            info, first_step = self._await(dashboard, job, sid)
            if job_wait.supervisor_lost(info, first_step):
                progress(sid, job_wait.SUPERVISOR_LOST)
                # sid now ended FAILED: the next attempt gets a fresh -rN id.
                sid = self._submit_or_adopt(dashboard, job)
                info, first_step = self._await(dashboard, job, sid)
            # A run the user stopped (jobs/user_stop.py) is not a failure: it enters the state
            # as STOPPED with user_stop, and diff keeps it stopped.
            stopped_by_user = _user_stop(dashboard, sid, info, {}) is True
            if info.status.value in ("FAILED", "STOPPED") and not stopped_by_user:
                raise ProviderRuntimeError(
                    failure_report(dashboard, sid, info, job.wait_for, first_step)
                )
            result = _tagged_result(dashboard, job, sid, info)
            outs = _outputs(job, sid, info, _discover(job.checkpoint_root, None), result, dashboard)
        outs["first_step"] = first_step
        if stopped_by_user:
            outs["user_stop"] = True
            progress(sid, user_stop_note(sid, outs))
        return pulumi.dynamic.CreateResult(sid, outs)

    def read(self, id_: str, props: dict[str, Any]) -> pulumi.dynamic.ReadResult:
        job = JobInputs.parse(props)
        with self._dashboard(job) as dashboard:
            try:
                info = dashboard.job_info(id_)
            except DashboardUnreachableError as exc:
                return self._read_unreachable(dashboard, job, id_, props, exc)
            if info is None:
                progress(id_, f"{not_known(dashboard, props)}: removing it from the state")
                return pulumi.dynamic.ReadResult(None, {})
            if recreated_after_delete(info):
                progress(
                    id_,
                    f"the Ray head at {dashboard.address} has only the {info.status.value} status "
                    "its job monitor wrote after the job's record was deleted (`ray job delete`): "
                    "removing it from the state",
                )
                return pulumi.dynamic.ReadResult(None, {})
            try:
                result = _tagged_result(dashboard, job, id_, info) or props.get("result")
            except DashboardUnreachableError:  # the status was read; keep the last result
                result = props.get("result")
            log_tail = log_tail_output(dashboard, id_, info, props)
            stopped_by_user = _user_stop(dashboard, id_, info, props)
            recovery = _recovery(dashboard, id_, info, props)
            listing = _discover(job.checkpoint_root, _listing_from(props))
            outs = _outputs(job, id_, info, listing, result, dashboard)
        outs.update(recovery)
        outs["log_tail"] = log_tail
        outs["first_step"] = props.get("first_step")
        outs["user_stop"] = stopped_by_user
        return pulumi.dynamic.ReadResult(id_, outs)

    def update(
        self, _id: str, _olds: dict[str, Any], _news: dict[str, Any]
    ) -> pulumi.dynamic.UpdateResult:
        job = JobInputs.parse(_news)
        outs = {k: _olds.get(k) for k in OUTPUT_KEYS}
        outs.update(job.to_props())
        outs["dashboard_hint"] = dashboard_access.dashboard_hint(job.dashboard, _id)
        if differs("checkpoint_root", _olds, _news):
            listing = _discover(job.checkpoint_root, None)
            outs.update(_listing_outputs(listing))
        outs["checkpoint_root"] = job.checkpoint_root
        return pulumi.dynamic.UpdateResult(outs)

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        job = JobInputs.parse(_props)
        with self._dashboard(job) as dashboard:
            try:
                info = dashboard.job_info(_id)
            except DashboardUnreachableError as exc:
                self._gone_or_raise(dashboard, job, _id, exc)
                return
            if info is None:
                progress(_id, f"{not_known(dashboard, _props)}: nothing to stop")
                return
            if info.status.value in _TERMINAL:
                progress(_id, f"already {info.status.value}: nothing to stop")
                return
            progress(_id, f"{info.status.value}: stopping (checkpoints are kept)")
            try:
                self._stop(dashboard, job, _id)
            except DashboardUnreachableError as exc:
                self._gone_or_raise(dashboard, job, _id, exc)

    # -- helpers (instance methods only so that tests can swap the token source) --------------

    @contextmanager
    def _dashboard(self, job: JobInputs, patience_s: float | None = None) -> Iterator[Dashboard]:
        """The Jobs API for one operation; calls retry a silent dashboard for patience_s
        (default deadline_reach_s), then raise DashboardUnreachableError."""
        with dashboard_access.client_args(job.dashboard, self._token_provider) as make_args:
            yield Dashboard(
                address=dashboard_access.dashboard_address(job.dashboard),
                make_args=make_args,
                patience_s=job.deadlines.reach_s if patience_s is None else patience_s,
                reach_s=job.deadlines.reach_s,
                max_backoff_s=max(job.deadlines.poll_interval_s, 0.5),
            )

    def _stop(self, dashboard: Dashboard, job: JobInputs, sid: str) -> None:
        dashboard.stop(sid)
        deadline = time.monotonic() + job.deadlines.stop_s
        while True:
            info = dashboard.job_info(sid)
            if info is None or info.status.value in _TERMINAL:
                progress(sid, f"{info.status.value if info else 'gone'}")
                return
            if time.monotonic() > deadline:
                raise ProviderTimeoutError(
                    f"Ray job {sid} is still {info.status.value} {job.deadlines.stop_s:.0f}s "
                    f"after the stop request (dashboard {dashboard.address}); stop it with "
                    f"{stop_command(job.dashboard, sid)} and run the command again"
                )
            time.sleep(job.deadlines.poll_interval_s)

    def _evidence(self, dashboard: Dashboard, job: JobInputs) -> job_evidence.Evidence:
        return job_evidence.gather(
            job.dashboard,
            job.gke_cluster,
            dashboard.make_args,
            self._token_provider or dashboard_access.google_adc_token,
        )

    def _gone_or_raise(
        self,
        dashboard: Dashboard,
        job: JobInputs,
        sid: str,
        exc: DashboardUnreachableError,
    ) -> None:
        """Return when the Kubernetes or GKE API proves the job's head gone; raise otherwise."""
        evidence = self._evidence(dashboard, job)
        if evidence.gone:
            progress(
                sid,
                f"the Ray dashboard did not answer, and {evidence.proof}: the job ended with its "
                "Ray head. Nothing to stop.",
            )
            return
        raise ProviderRuntimeError(no_evidence_message(job, sid, exc, evidence)) from exc

    def _read_unreachable(
        self,
        dashboard: Dashboard,
        job: JobInputs,
        sid: str,
        props: Mapping[str, Any],
        exc: DashboardUnreachableError,
    ) -> pulumi.dynamic.ReadResult:
        evidence = self._evidence(dashboard, job)
        if evidence.gone:
            progress(
                sid,
                f"the Ray dashboard did not answer, and {evidence.proof}: the job ended with its "
                "Ray head; removing it from the state",
            )
            return pulumi.dynamic.ReadResult(None, {})
        outs = {k: props.get(k) for k in OUTPUT_KEYS}
        outs.update(job.to_props())
        outs["checkpoint_root"] = job.checkpoint_root
        outs["dashboard_hint"] = dashboard_access.dashboard_hint(job.dashboard, sid)
        last_seen = props.get("last_seen")
        if not last_seen and props.get("status") not in (None, UNREACHABLE):
            # A state written before last_seen existed: its status is the last known one.
            last_seen = {"status": props.get("status"), "at": None, "head_session": None}
        outs["last_seen"] = last_seen
        outs["status"] = UNREACHABLE
        known = (
            f"last known status {last_seen['status']}"
            + (f" at {last_seen['at']}" if last_seen.get("at") else "")
            if last_seen
            else "no status known"
        )
        outs["message"] = redact(
            f"{exc.short()}; nothing proved the job gone ({evidence.summary()}); {known}"
        )[:MESSAGE_MAX_CHARS]
        progress(
            sid,
            f"WARNING: status unknown, kept in the state as {UNREACHABLE} ({known}): "
            f"{exc.short()}; nothing proved the job gone ({evidence.summary()}). "
            f"Run `pulumi refresh` again once the dashboard answers: {reach_hint(job)}",
        )
        return pulumi.dynamic.ReadResult(sid, outs)

    def _submit_or_adopt(self, dashboard: Dashboard, job: JobInputs) -> str:
        base = job.base_submission_id
        attempt = 1
        ended: tuple[str, str] | None = None  # the last ended attempt: (id, how)
        while True:
            sid = base if attempt == 1 else f"{base}-r{attempt}"
            # The first answer of a new cluster's dashboard may take minutes (head pod starting).
            previous = dashboard.job_info(sid)
            if previous is not None and previous.status.value not in ("FAILED", "STOPPED"):
                progress(sid, f"already submitted ({previous.status.value}): adopting it")
                return sid
            if previous is None and not self._was_submitted(dashboard, sid):
                break
            ended = (sid, previous.status.value if previous is not None else DELETED)
            attempt += 1
        if ended is not None and ended[1] == "STOPPED" and user_stop.recorded(dashboard, ended[0]):
            # Stopped with `python -m tools.run stop` while create waited on it: it stays stopped.
            return ended[0]
        if ended is not None:
            listing = _discover(job.checkpoint_root, None)
            how = "its record was deleted" if ended[1] == DELETED else f"it ended {ended[1]}"
            progress(
                sid,
                f"resubmitting {ended[0]} ({how}) as {sid}; "
                f"{resume_note(job.checkpoint_root, listing.latest_checkpoint)}",
            )

        def submit(client: JobSubmissionClient) -> str:
            try:
                client.submit_job(
                    entrypoint=job.entrypoint,
                    # A copy: Ray 2.47's submit_job writes the uploaded package's URI over
                    # runtime_env["working_dir"] in the dict it gets (2.60 copies it first), and
                    # this dict becomes the state's runtime_env, which the next diff compares.
                    runtime_env=copy.deepcopy(job.runtime_env) or None,
                    submission_id=sid,
                    metadata={"managed-by": "pulumi verl-gke", "spec-id": base},
                )
                return "submitted"
            except RuntimeError as exc:
                # Ray answers a duplicate id with a 500 wrapping the agent's 400: only the text
                # tells it apart (Ray Jobs API, job_head.py submit).
                if "already exists" in str(exc):
                    return "already exists: adopting it"
                raise

        progress(sid, dashboard.call(f"submit job {sid}", submit))
        return sid

    @staticmethod
    def _was_submitted(dashboard: Dashboard, sid: str) -> bool:
        """Whether an id the head has no record of was submitted before (its record deleted).

        Such an id is not reused: the deleted job's monitor in Ray's job manager may still be
        watching the old supervisor (job_manager.py _monitor_job_internal, Ray 2.47, 2.49,
        2.60). A new submission under the id then goes unmonitored (monitored_jobs holds the id),
        and the old monitor writes FAILED over its record when the old supervisor dies (2.60 "Job
        supervisor actor died", 2.47 and 2.49 "Unexpected error occurred: The actor died"), or,
        on 2.60, "failed to start" when the start time it cached is older than the start timeout:
        the new entrypoint never starts (its supervisor refuses a record that is not PENDING,
        job_supervisor.py run) or runs on under a FAILED record. Ray keeps the old supervisor
        actor listed, alive or dead, which tells a used id from a fresh one. The lookup only
        advises: when it fails (other than on credentials) create warns and uses the id.
        """
        try:
            known = dashboard.supervisor_known(sid, patience_s=dashboard.reach_s)
            why = "no usable answer: an older head's 404, or a list Ray cut short"
        except DashboardAuthError:
            raise  # the submit would be refused the same way
        except ProviderRuntimeError as exc:
            known, why = None, str(exc)[:300]
        if known is None:
            progress(
                sid,
                "WARNING: Ray's state API (GET /api/v0/actors) did not say whether this id was "
                f"used before ({why}); submitting under it",
            )
        return known is True

    def _await(
        self, dashboard: Dashboard, job: JobInputs, sid: str
    ) -> tuple[JobDetails, dict[str, Any] | None]:
        """Poll until the wait_for point or a terminal status; (details, first_step output)."""
        watch = _Watch(started=time.monotonic())
        progress(
            sid,
            f"waiting until {MODE_POINT[job.wait_for]} (wait_for={job.wait_for}); to watch it: "
            f"{dashboard_access.dashboard_hint(job.dashboard, sid)}",
        )
        while True:
            info = _job_info_while_waiting(dashboard, sid)
            status = info.status.value
            now = time.monotonic()
            if status != watch.last_status:
                progress(sid, f"{status}: {short_message(info.message)}")
                watch.last_status, watch.last_progress = status, now
            if status in _TERMINAL:
                # A run may log its first step and end between two polls: look for it, so that
                # success and failure reports say which side of the first step the run ended.
                wants_step = job.wait_for == "first_step"
                step = watch.scan.poll(dashboard, sid, info) if wants_step else None
                return info, _first_step_output(step) if step else None
            if status == "RUNNING":
                phase = _running_phase(dashboard, job, sid, info, watch, now)
                if phase is None:
                    return info, watch.first_step
            else:
                phase = "pending (runtime env, or waiting for resources)"
                _check_start_deadline(job, sid, info, now - watch.started)
            if phase != watch.last_phase or now - watch.last_progress >= PROGRESS_EVERY_S:
                progress(
                    sid,
                    self._progress_line(dashboard, job, sid, status, phase, now - watch.started),
                )
                watch.last_phase, watch.last_progress = phase, now
            time.sleep(job.deadlines.poll_interval_s)

    def _progress_line(
        self,
        dashboard: Dashboard,
        job: JobInputs,
        sid: str,
        status: str,
        phase: str,
        elapsed: float,
    ) -> str:
        parts = [f"phase: {phase}, {duration(elapsed)} since submission"]
        if job.wait_for == "finished" and job.checkpoint_root is not None:
            latest = _discover(job.checkpoint_root, None).latest_step
            parts.append(f"latest checkpoint step {latest}")
        if isinstance(job.dashboard, dashboard_access.KubeServiceProxy) and (
            status == "PENDING" or phase != "running"
        ):
            pods = job_evidence.ray_pods_summary(job.dashboard, dashboard.make_args)
            if pods:
                parts.append(pods)
        parts.append(f"if it seems stuck: {stuck_hint(job, sid, status)}")
        return "; ".join(parts)


@dataclass
class _Watch:
    """What one wait for a submitted job (RayJobProvider._await) has seen so far."""

    started: float
    running_since: float | None = None
    last_status: str = ""
    last_phase: str = ""
    last_progress: float = field(init=False)
    scan: job_wait.LogScan = field(default_factory=job_wait.LogScan)
    first_step: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self.last_progress = self.started


def _job_info_while_waiting(dashboard: Dashboard, sid: str) -> JobDetails:
    """The job's details; it was submitted, so an unreachable dashboard or a missing job is an
    error that says so."""
    try:
        # The job exists: a dashboard blip during a long wait is waited out
        # (deadline_submit_s, the patience of create).
        info = dashboard.job_info(sid)
    except DashboardUnreachableError as exc:
        raise DashboardUnreachableError(
            f"{exc} Ray job {sid} was submitted and may still be running: the next "
            "`pulumi up` adopts it, `pulumi refresh` records its status.",
            exc.address,
            exc.waited_s,
            exc.last_error,
        ) from exc
    if info is None:
        raise ProviderRuntimeError(
            f"Ray job {sid} disappeared from the cluster at {dashboard.address} while "
            "starting (was the head restarted?)"
        )
    return info


def _running_phase(
    dashboard: Dashboard,
    job: JobInputs,
    sid: str,
    info: JobDetails,
    watch: _Watch,
    now: float,
) -> str | None:
    """The phase of a RUNNING job, or None once the wait_for point is reached (then the first
    step's output, in "first_step" mode, is in watch.first_step). Raises TimeoutError when the
    mode's deadline has passed; the job keeps running."""
    deadlines, mode = job.deadlines, job.wait_for
    if watch.running_since is None:
        watch.running_since = now
    ran = now - watch.running_since
    if mode == "running" and ran >= deadlines.startup_grace_s:
        return None
    phase = "running"
    if mode == "first_step":
        step = watch.scan.poll(dashboard, sid, info)
        if step is not None:
            progress(
                sid,
                f"first training step logged (step {step.step}) "
                f"{duration(now - watch.started)} after submission",
            )
            watch.first_step = _first_step_output(step)
            return None
        phase = watch.scan.phase
        job_wait.check_log_readable(
            watch.scan,
            now,
            sid,
            job.deadlines.submit_s,
            dashboard.address,
            dashboard_access.dashboard_hint(job.dashboard, sid),
        )
        if ran > deadlines.first_step_s:
            scan = watch.scan
            seen = (
                f"while its driver log could not be read ({scan.failures} attempts in a row; "
                f"last error: {scan.last_error}), so whether it logged a training step is unknown"
                if scan.failing_since is not None
                else "without logging a training step"
            )
            raise ProviderTimeoutError(
                f"Ray job {sid} has run for {duration(ran)} {seen} "
                f"(deadline_first_step_s={deadlines.first_step_s:.0f}; "
                f"last phase: {phase}). It keeps running; the next `pulumi up` "
                f"adopts it. Look at its log: "
                f"{dashboard_access.dashboard_hint(job.dashboard, sid)}"
            )
    if mode == "finished" and ran > deadlines.wait_s:
        raise ProviderTimeoutError(
            f"Ray job {sid} still RUNNING after the wait deadline "
            f"({deadlines.wait_s:.0f}s); it keeps running and the next `pulumi up` "
            "adopts it"
        )
    return phase


def _check_start_deadline(job: JobInputs, sid: str, info: JobDetails, waited: float) -> None:
    """A job not RUNNING yet after deadline_start_s fails the wait; it stays submitted."""
    if waited > job.deadlines.start_s:
        raise ProviderTimeoutError(
            f"Ray job {sid} still {info.status.value} after {job.deadlines.start_s:.0f}s "
            f"({short_message(info.message)}); it stays submitted and the next "
            f"`pulumi up` adopts it; stop it with {stop_command(job.dashboard, sid)} "
            "if it is stuck"
        )


def _first_step_output(step: verl_log.StepMetrics) -> dict[str, Any]:
    metrics = {
        key: step.values[key]
        for key in FIRST_STEP_KEYS
        if key in step.values and math.isfinite(step.values[key])
    }
    return {"step": step.step, "seen_at": _now_iso(), "metrics": metrics}


def _now_iso() -> str:
    return datetime.now(tz=UTC).isoformat(timespec="seconds")


def _discover(root: str | None, previous: CheckpointListing | None) -> CheckpointListing:
    if root is None:
        return CheckpointListing.empty(None)
    try:
        return discover_checkpoints(root)
    except Exception as exc:  # a storage hiccup must not fail a job operation
        progress(root, f"could not list checkpoints ({exc}); keeping the previous values")
        return previous or CheckpointListing.empty(root)


def _listing_from(props: Mapping[str, Any]) -> CheckpointListing:
    raw_root = props.get("checkpoint_root")
    root = normalize_root(str(raw_root)) if raw_root is not None else None
    checkpoints = tuple(str(c) for c in props.get("checkpoints") or ())
    latest_step = props.get("latest_step")
    return CheckpointListing(
        root=root,
        checkpoints=checkpoints,
        steps=tuple(int(c.rsplit("_", 1)[1]) for c in checkpoints),
        latest_step=int(latest_step) if latest_step is not None else None,
        latest_checkpoint=props.get("latest_checkpoint"),
    )


def _listing_outputs(listing: CheckpointListing) -> dict[str, Any]:
    return {
        "checkpoint_root": listing.root,
        "checkpoints": list(listing.checkpoints),
        "latest_checkpoint": listing.latest_checkpoint,
        "latest_step": listing.latest_step,
    }


def _user_stop(
    dashboard: Dashboard, sid: str, info: JobDetails, props: Mapping[str, Any]
) -> bool | None:
    """Whether a STOPPED run was stopped by the user (jobs/user_stop.py); None otherwise."""
    if info.status.value != "STOPPED":
        return None
    try:
        return user_stop.recorded(dashboard, sid)
    except DashboardUnreachableError:
        # The status was read, the record was not: a stop the last refresh saw stays known.
        return True if props.get("user_stop") else None


# The runner prints its recovery line at each attempt's start and end, with every attempt in it
# (about 150 characters each, payloads/export/supervise.py): read further back than the failure
# tail, with longer lines.
RECOVERY_TAIL_LINES = 1000
RECOVERY_LINE_MAX_CHARS = 8000
# A job prints its result line last (the fabric check; the GRPO job's evaluation summary, after
# which the runner prints at most a line or two).
RESULT_TAIL_LINES = 50


def _recovery(
    dashboard: Dashboard, sid: str, info: JobDetails, props: Mapping[str, Any]
) -> dict[str, int | None]:
    """The attempts and restarts of the runner (payloads/export/supervise.py), from its last
    recovery line; the previous values when the log's end holds none or cannot be read."""
    previous = {key: props.get(key) for key in ("attempts", "restarts_used")}
    try:
        lines = dashboard.log_tail(
            sid,
            getattr(info, "driver_node_id", None),
            lines=RECOVERY_TAIL_LINES,
            max_chars=RECOVERY_LINE_MAX_CHARS,
            patience_s=dashboard.reach_s,
        )
    except Exception as exc:  # the status was read; the counts are a detail
        progress(sid, f"could not read the recovery record ({redact(str(exc))[:200]})")
        return previous
    record = recovery_log.latest_record("\n".join(lines))
    return recovery_log.counts(record) if record is not None else previous


def _tagged_result(
    dashboard: Dashboard, job: JobInputs, sid: str, info: JobDetails
) -> dict[str, Any] | None:
    """The job's own JSON result line, once it has finished (see RayJobArgs.result_tag): from the
    driver log's end (the GRPO job's log can be hundreds of MB and is read on every refresh),
    else the whole log."""
    if job.result_tag is None or info.status.value not in _TERMINAL:
        return None
    tail = dashboard.log_tail(
        sid,
        getattr(info, "driver_node_id", None),
        lines=RESULT_TAIL_LINES,
        max_chars=RECOVERY_LINE_MAX_CHARS,
        patience_s=dashboard.reach_s,
    )
    found = find_tagged_result("\n".join(tail), job.result_tag)
    if found is not None:
        return found
    logs = dashboard.call(f"read the log of {sid}", lambda client: client.get_job_logs(sid))
    return find_tagged_result(logs, job.result_tag)


def find_tagged_result(logs: str, tag: str) -> dict[str, Any] | None:
    """The last log line that is a JSON object with "check" equal to `tag`."""
    for line in reversed(logs.splitlines()):
        text = line.strip()
        # Ray prefixes output of actors/tasks; the driver's own lines are bare.
        if not text.startswith("{"):
            continue
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict) and value.get("check") == tag:
            return value
    return None


def _outputs(
    job: JobInputs,
    sid: str,
    info: JobDetails,
    listing: CheckpointListing,
    result: dict[str, Any] | None,
    dashboard: Dashboard,
) -> dict[str, Any]:
    status = info.status.value
    return {
        **job.to_props(),
        "submission_id": sid,
        "status": status,
        "message": short_message(info.message),
        "dashboard_hint": dashboard_access.dashboard_hint(job.dashboard, sid),
        **_listing_outputs(listing),
        "start_time": _iso(info.start_time),
        "end_time": _iso(info.end_time),
        "result": result,
        "log_tail": None,
        "first_step": None,
        "user_stop": None,
        "attempts": None,
        "restarts_used": None,
        "last_seen": {"status": status, "at": _now_iso(), "head_session": dashboard.session},
    }


def _iso(epoch_ms: int | None) -> str | None:
    if not epoch_ms:
        return None
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).isoformat(timespec="seconds")


class RayJob(pulumi.dynamic.Resource, module="jobs", name="RayJob"):
    """One Ray job on an existing Ray cluster, tracked by Pulumi (see the module docstring)."""

    submission_id: pulumi.Output[str]
    status: pulumi.Output[str]
    message: pulumi.Output[str]
    dashboard_hint: pulumi.Output[str]
    checkpoint_root: pulumi.Output[str]
    checkpoints: pulumi.Output[list[str]]
    latest_checkpoint: pulumi.Output[str | None]
    latest_step: pulumi.Output[int | None]
    start_time: pulumi.Output[str | None]
    end_time: pulumi.Output[str | None]
    result: pulumi.Output[dict[str, Any] | None]
    log_tail: pulumi.Output[str | None]
    first_step: pulumi.Output[dict[str, Any] | None]
    last_seen: pulumi.Output[dict[str, Any] | None]
    user_stop: pulumi.Output[bool | None]
    attempts: pulumi.Output[int | None]
    restarts_used: pulumi.Output[int | None]

    def __init__(
        self, name: str, args: RayJobArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        props = args.to_props()
        # Fail in the program, before any resource exists, for every value already known.
        problems = input_problems(_mask_outputs(props), allow_unknown=True)
        if problems:
            raise ValueError(
                f"RayJob {name}: invalid inputs:\n" + "\n".join(f"- {p}" for _, p in problems)
            )
        props.update({key: None for key in OUTPUT_KEYS if key not in props})
        super().__init__(RayJobProvider(), name, props, opts)


def _mask_outputs(value: Any) -> Any:
    """value with every pulumi Output (or other awaitable) replaced by UNKNOWN."""
    if isinstance(value, pulumi.Output) or hasattr(value, "__await__"):
        return UNKNOWN
    if isinstance(value, Mapping):
        return {k: _mask_outputs(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_mask_outputs(v) for v in value]
    return value
