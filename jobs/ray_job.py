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

Lifecycle (DESIGN.md, Decisions and Real contracts):
- create: submits with a deterministic id, `<stack>-<sha256(entrypoint, runtime_env)[:12]>`, so a
  re-run of `pulumi up` adopts the job instead of starting a second one. If every earlier attempt
  with that id ended FAILED or STOPPED (a fast failure, a destroy), the next attempt gets the
  suffix `-r<N>` and the provider says from which checkpoint verl resumes; a job that is pending,
  running or succeeded is always adopted. Returns at the `wait_for` point, printing progress
  lines (phase, elapsed time, where to look if it is stuck). A run that ends FAILED or STOPPED
  before that point fails the step with Ray's message and the driver log's capped tail.
- diff: a new entrypoint, runtime env or id prefix replaces the job, old one stopped first
  (delete_before_replace: GPUs are exclusive). So does a new dashboard target: the job record
  lives in the Ray head the dashboard leads to. A state whose last refresh saw FAILED or STOPPED
  is replaced too (`pulumi up` resubmits), and diff says so plainly. Deadlines, wait_for,
  checkpoint_root and gke_cluster are updated in place.
- preview: any input may be unknown, at any depth (pulumi.output.Unknown objects in the real
  host, or the wire sentinel). check validates only what is known; diff counts an unknown as a
  change, and as a replacement where a change would replace.
- read (`pulumi refresh`): status, message, times, checkpoints, and for FAILED/STOPPED the log
  tail.
- delete: stops the job if it still runs and waits until it is terminal. Checkpoints and the job
  record are kept.

Faults (issues 9, 17). A job is forgotten only on positive evidence that it is gone: the Ray head
says it does not know the id (404), or, when the dashboard does not answer within
deadline_reach_s, the Kubernetes API (the head Service is gone, or no head pod is running) or the
GKE API (the cluster is gone) says so (jobs/job_evidence.py, at most 15 s more). Without
evidence, read keeps the resource and its last outputs with status UNREACHABLE and prints a
warning; delete fails with what could not be reached and what to do, so an engine replacement
(delete first) never submits the new job next to a running old one. No lock is held across a
network call: concurrent operations in one provider process do not wait for each other. A
first-step wait whose driver log cannot be read (3 failures in a row over deadline_submit_s)
ends saying so, the job left running. A job whose supervisor actor died before its entrypoint
ran (Ray writes that over a submission id reused after `ray job stop` + `ray job delete`) is
submitted once more under the next -rN id. Errors of the provider's own (jobs/provider_errors.py)
reach `pulumi up` as their message, without the host's traceback.

Rules of pulumi.dynamic that shape this module (verl-ray-pulumi-facts.md §C): the provider is
pickled with dill into the state and runs in a separate process, so it holds no client, socket or
token; heavy imports happen inside methods; connection data are inputs; the engine applies no
timeouts, so every wait here has its own deadline; progress goes to stdout with flush=True.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import re
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import pulumi
import pulumi.dynamic
from pulumi.output import Unknown

# The wire form of a value not known until apply (preview); the host turns it into an Unknown.
from pulumi.runtime.rpc import UNKNOWN

from jobs import (
    dashboard_access,
    job_evidence,
    job_logs,
    job_wait,
    provider_errors,
    secret_scan,
    verl_log,
)
from jobs.checkpoints import CheckpointListing, discover_checkpoints, normalize_root, parse_gcs_url
from jobs.provider_errors import ProviderInputError, ProviderRuntimeError, ProviderTimeoutError

if TYPE_CHECKING:
    from ray.dashboard.modules.job.pydantic_models import JobDetails
    from ray.job_submission import JobSubmissionClient

T = TypeVar("T")

# In the dynamic host (which imports this module to unpickle the provider), the provider's own
# errors reach the engine as their message, without a traceback (jobs/provider_errors.py).
provider_errors.install_in_dynamic_host()


WAIT_MODES = ("running", "first_step", "finished")
DEFAULT_WAIT_FOR = "first_step"
# Inputs whose change means a different job (replace): what runs, and the Ray head that holds its
# record (the dashboard target). All other inputs only say how to watch it (update in place).
SPEC_KEYS = ("entrypoint", "runtime_env", "submission_id_prefix", "dashboard")
CONNECTION_KEYS = (
    "checkpoint_root",
    "wait_for",
    "deadline_submit_s",
    "deadline_reach_s",
    "deadline_start_s",
    "deadline_startup_grace_s",
    "deadline_first_step_s",
    "deadline_wait_s",
    "deadline_stop_s",
    "deadline_poll_interval_s",
    "result_tag",
    "gke_cluster",
)
OUTPUT_KEYS = (
    "submission_id",
    "status",
    "message",
    "dashboard_hint",
    "checkpoint_root",
    "checkpoints",
    "latest_checkpoint",
    "latest_step",
    "start_time",
    "end_time",
    "result",
    "log_tail",
    "first_step",
    "last_seen",
)
UNREACHABLE = "UNREACHABLE"
MESSAGE_MAX_CHARS = 1000
# Headline metrics of the first training step kept in the `first_step` output.
FIRST_STEP_KEYS = (
    verl_log.STEP_TIME_KEY,
    verl_log.SCORE_KEY,
    verl_log.REWARD_KEY,
    verl_log.RESPONSE_LENGTH_KEY,
    verl_log.THROUGHPUT_KEY,
)
# Rebuild the client (and so fetch a new OAuth token) at least this often during long waits.
CLIENT_MAX_AGE_S = 300.0
PROGRESS_EVERY_S = 60.0

_TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
_RAY_ADDRESS_ENV = ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS")
# Guards os.environ while Ray's client reads its address from it; never held across network I/O.
_ENV_LOCK = threading.Lock()


@dataclass(frozen=True)
class JobDeadlines:
    """The provider's own deadlines (Pulumi enforces none on dynamic providers), in seconds."""

    submit_s: float = 600.0  # create: a new cluster's dashboard answering at all; waits' patience
    reach_s: float = 45.0  # read/delete: retry a dashboard that does not answer, then decide
    start_s: float = 3600.0  # PENDING -> RUNNING (runtime env setup, waiting for resources)
    startup_grace_s: float = 30.0  # "running": still RUNNING after this long
    first_step_s: float = 7200.0  # "first_step": RUNNING -> first training step in the log
    wait_s: float = 7 * 24 * 3600.0  # "finished": RUNNING -> terminal
    stop_s: float = 300.0  # stop request -> terminal (delete, replace)
    poll_interval_s: float = 5.0


_DEFAULT_DEADLINES = JobDeadlines()


def wait_mode(props: Mapping[str, Any]) -> Any:
    """The effective wait mode: `wait_for`, else the legacy boolean `wait`, else the default."""
    mode = props.get("wait_for")
    if mode is not None:
        return mode if is_unknown(mode) else str(mode)
    legacy = props.get("wait")
    if legacy is not None and not is_unknown(legacy):
        return "finished" if legacy else "running"
    return DEFAULT_WAIT_FOR


@dataclass(frozen=True)
class RayJobArgs:
    """Inputs of one RayJob. Values may be pulumi Inputs except submission_id_prefix, wait_for
    and wait."""

    entrypoint: Any  # Input[str]: the shell command Ray runs on the head
    runtime_env: Any  # Input[dict]: Ray runtime env (env_vars, working_dir, ...), no secrets
    dashboard: Any  # Input[dict]: dashboard_access.url_dashboard / kube_proxy_dashboard
    # Input[str]: gs://bucket/folder = trainer.default_local_dir's bucket path; None for a job
    # that writes no checkpoints.
    checkpoint_root: Any
    submission_id_prefix: str  # usually the stack name
    # Deprecated: True = wait_for "finished", False = "running". Ignored when wait_for is given.
    wait: bool | None = None
    deadlines: JobDeadlines = field(default_factory=JobDeadlines)
    # A job that prints its result as one JSON line {"check": <result_tag>, ...}: the provider
    # exposes the last such line of a finished job as the `result` output.
    result_tag: str | None = None
    wait_for: str | None = None  # "running" | "first_step" | "finished"; None: see `wait`
    # Input[dict] | None: job_evidence.gke_cluster_input(project, location, name)
    gke_cluster: Any = None

    def to_props(self) -> dict[str, Any]:
        return {
            "entrypoint": self.entrypoint,
            "runtime_env": self.runtime_env,
            "dashboard": self.dashboard,
            "checkpoint_root": self.checkpoint_root,
            "submission_id_prefix": self.submission_id_prefix,
            "wait_for": wait_mode({"wait_for": self.wait_for, "wait": self.wait}),
            **{f"deadline_{f.name}": getattr(self.deadlines, f.name) for f in fields(JobDeadlines)},
            "result_tag": self.result_tag,
            "gke_cluster": self.gke_cluster,
            # A caller still passing the deprecated boolean sees it among the inputs, as before;
            # the provider reads wait_for (derived from it above).
            **({"wait": self.wait} if self.wait is not None else {}),
        }


@dataclass(frozen=True)
class JobInputs:
    """The provider-side, validated view of a RayJob's inputs (all values known)."""

    entrypoint: str
    runtime_env: dict[str, Any]
    dashboard: dashboard_access.DashboardSpec
    dashboard_input: dict[str, Any]
    checkpoint_root: str | None
    submission_id_prefix: str
    wait_for: str
    deadlines: JobDeadlines
    result_tag: str | None
    gke_cluster: job_evidence.GkeClusterRef | None
    gke_cluster_input: dict[str, Any] | None

    @classmethod
    def parse(cls, props: Mapping[str, Any]) -> JobInputs:
        problems = input_problems(props)
        if problems:
            raise ProviderInputError(
                "invalid RayJob inputs:\n" + "\n".join(f"- {p}" for _, p in problems)
            )
        deadlines = JobDeadlines(
            **{
                f.name: float(props[f"deadline_{f.name}"])
                for f in fields(JobDeadlines)
                if props.get(f"deadline_{f.name}") is not None
            }
        )
        gke = props.get("gke_cluster")
        return cls(
            entrypoint=props["entrypoint"],
            runtime_env=dict(props.get("runtime_env") or {}),
            dashboard=dashboard_access.parse_dashboard(props["dashboard"]),
            dashboard_input=dict(props["dashboard"]),
            checkpoint_root=(
                normalize_root(props["checkpoint_root"])
                if props.get("checkpoint_root") is not None
                else None
            ),
            submission_id_prefix=props["submission_id_prefix"],
            wait_for=wait_mode(props),
            deadlines=deadlines,
            result_tag=props.get("result_tag"),
            gke_cluster=job_evidence.parse_gke_cluster(gke),
            gke_cluster_input=dict(gke) if gke is not None else None,
        )

    def to_props(self) -> dict[str, Any]:
        return RayJobArgs(
            entrypoint=self.entrypoint,
            runtime_env=self.runtime_env,
            dashboard=self.dashboard_input,
            checkpoint_root=self.checkpoint_root,
            submission_id_prefix=self.submission_id_prefix,
            wait_for=self.wait_for,
            deadlines=self.deadlines,
            result_tag=self.result_tag,
            gke_cluster=self.gke_cluster_input,
        ).to_props()

    @property
    def base_submission_id(self) -> str:
        return submission_id(self.submission_id_prefix, self.entrypoint, self.runtime_env)


def submission_id(prefix: str, entrypoint: str, runtime_env: Mapping[str, Any]) -> str:
    """`<prefix>-<12 hex of sha256 of the canonical JSON of entrypoint and runtime env>`.

    Ray-id-safe (lowercase letters, digits, '-') and stable across Pulumi's int->float round trip.
    """
    canonical = json.dumps(
        {"entrypoint": entrypoint, "runtime_env": _canonical(runtime_env)},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=True,
    )
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:12]
    safe = re.sub(r"[^a-z0-9]+", "-", prefix.lower()).strip("-")[:40].strip("-") or "job"
    return f"{safe}-{digest}"


def input_problems(props: Mapping[str, Any], allow_unknown: bool = False) -> list[tuple[str, str]]:
    """(property, reason) for every invalid input.

    allow_unknown (check, preview): values not known yet (is_unknown), top-level or nested, are
    skipped and the known rest is still checked.
    """

    def unknown(value: Any) -> bool:
        return allow_unknown and is_unknown(value)

    checks = (
        _spec_problems,
        _location_problems,
        _wait_mode_problems,
        _gke_cluster_problems,
        _deadline_problems,
        _secret_input_problems,
    )
    return [problem for check in checks for problem in check(props, unknown)]


_UnknownTest = Callable[[Any], bool]


def _spec_problems(props: Mapping[str, Any], unknown: _UnknownTest) -> list[tuple[str, str]]:
    """What runs: the entrypoint, its runtime env and the submission id prefix."""
    problems: list[tuple[str, str]] = []
    entrypoint = props.get("entrypoint")
    if not unknown(entrypoint) and (not isinstance(entrypoint, str) or not entrypoint.strip()):
        problems.append(
            ("entrypoint", f"entrypoint must be a non-empty command string, got {entrypoint!r}")
        )
    runtime_env = props.get("runtime_env")
    if not (unknown(runtime_env) or runtime_env is None or isinstance(runtime_env, Mapping)):
        problems.append(
            ("runtime_env", f"runtime_env must be a mapping, got {type(runtime_env).__name__}")
        )
    prefix = props.get("submission_id_prefix")
    if not unknown(prefix) and not (isinstance(prefix, str) and re.search(r"[A-Za-z0-9]", prefix)):
        problems.append(
            (
                "submission_id_prefix",
                f"submission_id_prefix must contain a letter or digit, got {prefix!r}; "
                "e.g. the stack name 'a4x'",
            )
        )
    return problems


def _location_problems(props: Mapping[str, Any], unknown: _UnknownTest) -> list[tuple[str, str]]:
    """Where the job is: the dashboard that leads to its Ray head, and its checkpoint root."""
    problems: list[tuple[str, str]] = []
    try:
        dashboard_access.check_dashboard(props.get("dashboard"), unknown)
    except ValueError as exc:
        problems.append(("dashboard", str(exc)))
    root = props.get("checkpoint_root")
    if root is not None and not unknown(root):
        try:
            parse_gcs_url(root)
        except (ValueError, TypeError) as exc:
            problems.append(("checkpoint_root", str(exc)))
    return problems


def _wait_mode_problems(props: Mapping[str, Any], unknown: _UnknownTest) -> list[tuple[str, str]]:
    """When create returns: wait_for, or the legacy `wait` flag of older states."""
    problems: list[tuple[str, str]] = []
    mode = props.get("wait_for")
    if mode is not None and not unknown(mode) and mode not in WAIT_MODES:
        problems.append(
            (
                "wait_for",
                f"wait_for must be one of {', '.join(WAIT_MODES)}, got {mode!r}; e.g. "
                f"'{DEFAULT_WAIT_FOR}' (up returns once verl logged its first training step)",
            )
        )
    legacy = props.get("wait")
    if legacy is not None and not unknown(legacy) and not isinstance(legacy, bool):
        problems.append(("wait", f"wait must be true or false, got {legacy!r}; prefer wait_for"))
    return problems


def _gke_cluster_problems(props: Mapping[str, Any], unknown: _UnknownTest) -> list[tuple[str, str]]:
    try:
        job_evidence.check_gke_cluster(props.get("gke_cluster"), unknown)
    except ValueError as exc:
        return [("gke_cluster", str(exc))]
    return []


def _deadline_problems(props: Mapping[str, Any], unknown: _UnknownTest) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    for deadline in fields(JobDeadlines):
        key = f"deadline_{deadline.name}"
        value = props.get(key)
        if value is None or unknown(value):
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
            problems.append(
                (key, f"{key} must be a number of seconds >= 0, got {value!r}; e.g. 600")
            )
    return problems


def _secret_input_problems(
    props: Mapping[str, Any], _unknown: _UnknownTest
) -> list[tuple[str, str]]:
    # Unknown parts cannot hold a secret we could see; the known parts are still checked.
    return [
        (key, reason)
        for key in ("entrypoint", "runtime_env")
        for reason in secret_problems(key, props.get(key))
    ]


def secret_problems(path: str, value: Any) -> list[str]:
    """Reasons why `value` (walked recursively) looks like it carries a secret (the detector is
    jobs/secret_scan.py, shared with the job preflight and the plan)."""
    return [
        f"{found.path}: secrets must not be RayJob inputs (they would be stored in the Pulumi "
        "state and in the Ray job record); remove the key and let the pods read the secret from "
        "a Kubernetes Secret (the HF token: hf-secret, key hf_token)"
        if found.by_name
        else f"{found.path} contains what looks like a Hugging Face token (hf_...); the token "
        "must not be a RayJob input: the pods read it from the Kubernetes Secret hf-secret"
        for found in secret_scan.find_secrets(path, value)
    ]


def redact(text: str) -> str:
    return secret_scan.redact(text)


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
        changed = [k for k in (*SPEC_KEYS, *CONNECTION_KEYS) if _differs(k, _olds, _news)]
        replaces = [k for k in changed if k in SPEC_KEYS]
        status = _olds.get("status")
        if replaces and (
            note := _new_run_note(_olds.get("checkpoint_root"), _news.get("checkpoint_root"))
        ):
            _progress(_id, note)
        if status in ("FAILED", "STOPPED"):
            # The last refresh saw the run end without success: `pulumi up` submits it again.
            if not replaces:
                _progress(_id, _resubmit_note(_id, status, _olds))
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
                _progress(sid, job_wait.SUPERVISOR_LOST)
                # sid now ended FAILED: the next attempt gets a fresh -rN id.
                sid = self._submit_or_adopt(dashboard, job)
                info, first_step = self._await(dashboard, job, sid)
            if info.status.value in ("FAILED", "STOPPED"):
                raise ProviderRuntimeError(
                    _failure_report(dashboard, sid, info, job.wait_for, first_step)
                )
            result = _tagged_result(dashboard, job, sid, info)
            outs = _outputs(job, sid, info, _discover(job.checkpoint_root, None), result, dashboard)
        outs["first_step"] = first_step
        return pulumi.dynamic.CreateResult(sid, outs)

    def read(self, id_: str, props: dict[str, Any]) -> pulumi.dynamic.ReadResult:
        job = JobInputs.parse(props)
        with self._dashboard(job) as dashboard:
            try:
                info = dashboard.job_info(id_)
            except DashboardUnreachableError as exc:
                return self._read_unreachable(dashboard, job, id_, props, exc)
            if info is None:
                _progress(id_, f"{_not_known(dashboard, props)}: removing it from the state")
                return pulumi.dynamic.ReadResult(None, {})
            try:
                result = _tagged_result(dashboard, job, id_, info) or props.get("result")
            except DashboardUnreachableError:  # the status was read; keep the last result
                result = props.get("result")
            log_tail = _log_tail_output(dashboard, id_, info, props)
            listing = _discover(job.checkpoint_root, _listing_from(props))
            outs = _outputs(job, id_, info, listing, result, dashboard)
        outs["log_tail"] = log_tail
        outs["first_step"] = props.get("first_step")
        return pulumi.dynamic.ReadResult(id_, outs)

    def update(
        self, _id: str, _olds: dict[str, Any], _news: dict[str, Any]
    ) -> pulumi.dynamic.UpdateResult:
        job = JobInputs.parse(_news)
        outs = {k: _olds.get(k) for k in OUTPUT_KEYS}
        outs.update(job.to_props())
        outs["dashboard_hint"] = dashboard_access.dashboard_hint(job.dashboard, _id)
        if _differs("checkpoint_root", _olds, _news):
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
                _progress(_id, f"{_not_known(dashboard, _props)}: nothing to stop")
                return
            if info.status.value in _TERMINAL:
                _progress(_id, f"already {info.status.value}: nothing to stop")
                return
            _progress(_id, f"{info.status.value}: stopping (checkpoints are kept)")
            try:
                self._stop(dashboard, job, _id)
            except DashboardUnreachableError as exc:
                self._gone_or_raise(dashboard, job, _id, exc)

    # -- helpers (instance methods only so that tests can swap the token source) --------------

    @contextmanager
    def _dashboard(self, job: JobInputs, patience_s: float | None = None) -> Iterator[_Dashboard]:
        """The Jobs API for one operation; calls retry a silent dashboard for patience_s
        (default deadline_reach_s), then raise DashboardUnreachableError."""
        with dashboard_access.client_args(job.dashboard, self._token_provider) as make_args:
            yield _Dashboard(
                address=dashboard_access.dashboard_address(job.dashboard),
                make_args=make_args,
                patience_s=job.deadlines.reach_s if patience_s is None else patience_s,
                reach_s=job.deadlines.reach_s,
                max_backoff_s=max(job.deadlines.poll_interval_s, 0.5),
            )

    def _stop(self, dashboard: _Dashboard, job: JobInputs, sid: str) -> None:
        dashboard.call("stop the job", lambda client: client.stop_job(sid))
        deadline = time.monotonic() + job.deadlines.stop_s
        while True:
            info = dashboard.job_info(sid)
            if info is None or info.status.value in _TERMINAL:
                _progress(sid, f"{info.status.value if info else 'gone'}")
                return
            if time.monotonic() > deadline:
                raise ProviderTimeoutError(
                    f"Ray job {sid} is still {info.status.value} {job.deadlines.stop_s:.0f}s "
                    f"after the stop request (dashboard {dashboard.address}); stop it with "
                    f"{_stop_command(job.dashboard, sid)} and run the command again"
                )
            time.sleep(job.deadlines.poll_interval_s)

    def _evidence(self, dashboard: _Dashboard, job: JobInputs) -> job_evidence.Evidence:
        return job_evidence.gather(
            job.dashboard,
            job.gke_cluster,
            dashboard.make_args,
            self._token_provider or dashboard_access.google_adc_token,
        )

    def _gone_or_raise(
        self,
        dashboard: _Dashboard,
        job: JobInputs,
        sid: str,
        exc: DashboardUnreachableError,
    ) -> None:
        """Return when the Kubernetes or GKE API proves the job's head gone; raise otherwise."""
        evidence = self._evidence(dashboard, job)
        if evidence.gone:
            _progress(
                sid,
                f"the Ray dashboard did not answer, and {evidence.proof}: the job ended with its "
                "Ray head. Nothing to stop.",
            )
            return
        raise ProviderRuntimeError(_no_evidence_message(job, sid, exc, evidence)) from exc

    def _read_unreachable(
        self,
        dashboard: _Dashboard,
        job: JobInputs,
        sid: str,
        props: Mapping[str, Any],
        exc: DashboardUnreachableError,
    ) -> pulumi.dynamic.ReadResult:
        evidence = self._evidence(dashboard, job)
        if evidence.gone:
            _progress(
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
        _progress(
            sid,
            f"WARNING: status unknown, kept in the state as {UNREACHABLE} ({known}): "
            f"{exc.short()}; nothing proved the job gone ({evidence.summary()}). "
            f"Run `pulumi refresh` again once the dashboard answers: {_reach_hint(job)}",
        )
        return pulumi.dynamic.ReadResult(sid, outs)

    def _submit_or_adopt(self, dashboard: _Dashboard, job: JobInputs) -> str:
        base = job.base_submission_id
        # The first answer of a new cluster's dashboard may take minutes (head pod starting).
        attempt, previous = 1, dashboard.job_info(base)
        ended: tuple[str, str] | None = None
        while previous is not None and previous.status.value in ("FAILED", "STOPPED"):
            ended = (f"{base}-r{attempt}" if attempt > 1 else base, previous.status.value)
            attempt += 1
            previous = dashboard.job_info(f"{base}-r{attempt}")
        sid = base if attempt == 1 else f"{base}-r{attempt}"
        if previous is not None:
            _progress(sid, f"already submitted ({previous.status.value}): adopting it")
            return sid
        if ended is not None:
            listing = _discover(job.checkpoint_root, None)
            _progress(
                sid,
                f"resubmitting {ended[0]} (it ended {ended[1]}) as {sid}; "
                f"{_resume_note(job.checkpoint_root, listing.latest_checkpoint)}",
            )

        def submit(client: JobSubmissionClient) -> str:
            try:
                client.submit_job(
                    entrypoint=job.entrypoint,
                    runtime_env=job.runtime_env or None,
                    submission_id=sid,
                    metadata={"managed-by": "pulumi verl-gke", "spec-id": base},
                )
                return "submitted"
            except RuntimeError as exc:
                # Ray answers a duplicate id with a 500 wrapping the agent's 400: only the text
                # tells it apart (verl-ray-pulumi-facts.md §B).
                if "already exists" in str(exc):
                    return "already exists: adopting it"
                raise

        _progress(sid, dashboard.call(f"submit job {sid}", submit))
        return sid

    def _await(
        self, dashboard: _Dashboard, job: JobInputs, sid: str
    ) -> tuple[JobDetails, dict[str, Any] | None]:
        """Poll until the wait_for point or a terminal status; (details, first_step output)."""
        watch = _Watch(started=time.monotonic())
        _progress(
            sid,
            f"waiting until {_MODE_POINT[job.wait_for]} (wait_for={job.wait_for}); to watch it: "
            f"{dashboard_access.dashboard_hint(job.dashboard, sid)}",
        )
        while True:
            info = _job_info_while_waiting(dashboard, sid)
            status = info.status.value
            now = time.monotonic()
            if status != watch.last_status:
                _progress(sid, f"{status}: {_short_message(info.message)}")
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
                _progress(
                    sid,
                    self._progress_line(dashboard, job, sid, status, phase, now - watch.started),
                )
                watch.last_phase, watch.last_progress = phase, now
            time.sleep(job.deadlines.poll_interval_s)

    def _progress_line(
        self,
        dashboard: _Dashboard,
        job: JobInputs,
        sid: str,
        status: str,
        phase: str,
        elapsed: float,
    ) -> str:
        parts = [f"phase: {phase}, {_duration(elapsed)} since submission"]
        if job.wait_for == "finished" and job.checkpoint_root is not None:
            latest = _discover(job.checkpoint_root, None).latest_step
            parts.append(f"latest checkpoint step {latest}")
        if isinstance(job.dashboard, dashboard_access.KubeServiceProxy) and (
            status == "PENDING" or phase != "running"
        ):
            pods = job_evidence.ray_pods_summary(job.dashboard, dashboard.make_args)
            if pods:
                parts.append(pods)
        parts.append(f"if it seems stuck: {_stuck_hint(job, sid, status)}")
        return "; ".join(parts)


_MODE_POINT = {
    "running": "the job is RUNNING",
    "first_step": "verl logs its first training step",
    "finished": "the job has finished",
}


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


def _job_info_while_waiting(dashboard: _Dashboard, sid: str) -> JobDetails:
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
    dashboard: _Dashboard,
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
            _progress(
                sid,
                f"first training step logged (step {step.step}) "
                f"{_duration(now - watch.started)} after submission",
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
                f"Ray job {sid} has run for {_duration(ran)} {seen} "
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
            f"({_short_message(info.message)}); it stays submitted and the next "
            f"`pulumi up` adopts it; stop it with {_stop_command(job.dashboard, sid)} "
            "if it is stuck"
        )


class DashboardUnreachableError(ProviderRuntimeError):
    """The dashboard did not answer within the operation's patience, or is not there at all."""

    def __init__(self, message: str, address: str, waited_s: float, last_error: str) -> None:
        super().__init__(message)
        self.address = address
        self.waited_s = waited_s
        self.last_error = last_error

    def short(self) -> str:
        return (
            f"the Ray dashboard at {self.address} did not answer for {self.waited_s:.0f}s "
            f"(last error: {self.last_error[:300]})"
        )


@dataclass
class _Dashboard:
    """One method call's view of the Jobs API: a client rebuilt on demand, calls with retries."""

    address: str
    make_args: Callable[[], dashboard_access.ClientArgs]
    patience_s: float  # default: retry transient failures this long, then decide unreachable
    reach_s: float  # deadline_reach_s: patience of calls that only add detail (log tails)
    max_backoff_s: float
    session: str | None = None  # the head's session name, from GET /api/version
    _client: Any = None
    _args: dashboard_access.ClientArgs | None = None
    _client_born: float = 0.0
    _answered: bool = False  # the last call was answered: the next one's requests get their own

    def call(
        self,
        what: str,
        operation: Callable[[JobSubmissionClient], T],
        patience_s: float | None = None,
    ) -> T:
        """Run operation(client), retrying transient failures for patience_s (default: the
        reachability budget), then raise DashboardUnreachableError."""
        began = time.monotonic()
        budget = self._budget(began, self.patience_s if patience_s is None else patience_s)
        deadline = budget.retry_until
        backoff = 0.25
        attempts = 0
        while True:
            attempts += 1
            try:
                client = self._fresh_client(budget)
                client.budget = budget
                result = operation(client)
                self._answered = True
                return result
            except Exception as exc:  # classified right below
                if _is_auth_failure(exc):
                    raise ProviderRuntimeError(
                        f"Ray dashboard at {self.address} refused the credentials while trying "
                        f"to {what}: {redact(_first_line(exc))[:500]}. Through the GKE service "
                        "proxy the account of Application Default Credentials needs the "
                        "Kubernetes permission to proxy to the head service (services/proxy)"
                    ) from exc
                last_error = redact(_describe(exc))[:500]
                if _is_missing_dashboard(exc):
                    # Nothing answers as a Ray dashboard there (a removed head Service behind
                    # the API server's proxy, a wrong URL): waiting will not change that.
                    self._client = None
                    raise DashboardUnreachableError(
                        f"Ray dashboard at {self.address} is not there while trying to {what}: "
                        f"{last_error}",
                        self.address,
                        time.monotonic() - began,
                        last_error,
                    ) from exc
                if not _is_transient(exc):
                    raise ProviderRuntimeError(
                        f"Ray dashboard at {self.address}: could not {what}: "
                        f"{redact(_describe(exc))[:2000]}"
                    ) from exc
                self._client, self._answered, budget.answered = None, False, False
                if time.monotonic() + backoff > deadline:
                    waited = time.monotonic() - began
                    raise DashboardUnreachableError(
                        f"Ray dashboard at {self.address} did not answer within "
                        f"{waited:.0f}s ({attempts} attempts) while trying to {what}; last "
                        f"error: {last_error}. Check that the Ray head is running and "
                        "reachable from this machine.",
                        self.address,
                        waited,
                        last_error,
                    ) from exc
                time.sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff_s)

    def _budget(self, began: float, window: float) -> dashboard_access.RequestBudget:
        """Retry for `window`; once answered, each request may take the larger of the window
        and deadline_reach_s, at most dashboard_access.REQUEST_TIMEOUT_S[1]."""
        per_request_s = min(dashboard_access.REQUEST_TIMEOUT_S[1], max(window, self.reach_s))
        return dashboard_access.RequestBudget(
            began + window, per_request_s, answered=self._answered
        )

    def job_info(self, sid: str, patience_s: float | None = None) -> JobDetails | None:
        """The job's details, or None when the Ray head does not know the id."""

        def get(client: JobSubmissionClient) -> JobDetails | None:
            try:
                return client.get_job_info(sid)
            except RuntimeError as exc:
                if "404" in str(exc) and "does not exist" in str(exc):
                    return None
                raise

        return self.call(f"read job {sid}", get, patience_s)

    def log_tail(
        self,
        sid: str,
        driver_node_id: str | None,
        lines: int = job_logs.TAIL_LINES,
        max_chars: int = job_logs.TAIL_LINE_MAX_CHARS,
        whole_log_fallback: bool = True,
        patience_s: float | None = None,
    ) -> list[str]:
        """The driver log's last lines, capped (jobs/job_logs.py)."""

        def fetch(client: JobSubmissionClient) -> list[str]:
            assert self._args is not None  # set by _fresh_client before any operation
            try:
                return job_logs.state_api_tail(
                    self._args, client.request_timeout, sid, driver_node_id, lines, max_chars
                )
            except job_logs.LogNotAvailableError:
                if not whole_log_fallback:
                    raise
                return job_logs.capped_lines(client.get_job_logs(sid), lines, max_chars)

        return self.call(f"read the log of {sid}", fetch, patience_s)

    def _fresh_client(self, budget: dashboard_access.RequestBudget) -> Any:
        now = time.monotonic()
        if self._client is None or now - self._client_born > CLIENT_MAX_AGE_S:
            args = self.make_args()
            client = _new_client(args)
            client.budget = budget
            self.session = client.head_session()
            self._client, self._args, self._client_born = client, args, now
        return self._client


@functools.cache
def _client_class() -> type:
    import requests
    from ray.job_submission import JobSubmissionClient

    class _TimedClient(JobSubmissionClient):  # type: ignore[misc]
        # The SDK sends requests without a timeout; a black-holed address would hang forever.
        # _Dashboard.call sets the operation's budget before each attempt.
        budget = dashboard_access.RequestBudget(math.inf, dashboard_access.REQUEST_TIMEOUT_S[1])

        @property
        def request_timeout(self) -> tuple[float, float]:
            return self.budget.timeout()

        def _check_connection_and_version(self, *args: Any, **kwargs: Any) -> None:
            # JobSubmissionClient.__init__ checks the connection; here that request happens in
            # head_session(), after the constructor, so that the environment lock is never held
            # across network I/O.
            return None

        def _do_request(self, method: str, endpoint: str, **kwargs: Any) -> Any:
            kwargs.setdefault("timeout", self.budget.timeout())
            response = super()._do_request(method, endpoint, **kwargs)
            if response.status_code < 500 and response.status_code != 429:
                self.budget.answered = True
            return response

        def head_session(self) -> str | None:
            """GET /api/version: the connection check, and the head's session name."""
            try:
                response = self._do_request("GET", "/api/version")
            except requests.exceptions.ConnectionError as exc:
                raise ConnectionError(
                    f"Failed to connect to Ray at address: {self._address}."
                ) from exc
            if response.status_code == 404:
                raise RuntimeError(
                    f"Version check returned 404: {response.text[:300]}. This is not a Ray "
                    "dashboard."
                )
            if response.status_code != 200:
                raise RuntimeError(
                    f"Request failed with status code {response.status_code}: "
                    f"{response.text[:500]}."
                )
            try:
                session = response.json().get("session_name")
            except ValueError as exc:
                raise RuntimeError(
                    f"GET /api/version answered {response.text[:200]!r}, not Ray's JSON"
                ) from exc
            return str(session) if session else None

    return _TimedClient


def _new_client(args: dashboard_access.ClientArgs) -> Any:
    cls = _client_class()
    # JobSubmissionClient lets RAY_ADDRESS / RAY_API_SERVER_ADDRESS override the address it is
    # given; a Ray user's shell often exports one, which would send the job to another cluster.
    # The constructor does no network I/O (see _client_class), so the lock is held briefly.
    with _ENV_LOCK:
        saved = {k: os.environ.pop(k) for k in _RAY_ADDRESS_ENV if k in os.environ}
        try:
            return cls(address=args.address, headers=dict(args.headers), verify=args.verify)
        finally:
            os.environ.update(saved)


def _is_missing_dashboard(exc: BaseException) -> bool:
    text = str(exc)
    if "Version check returned 404" in text:
        return True
    # The API server's own NotFound (the head Service is gone) through its service proxy.
    compact = text.replace(" ", "")
    return "statuscode404" in compact and '"kind":"Status"' in compact and "NotFound" in compact


def _is_transient(exc: BaseException) -> bool:
    import requests

    if any(isinstance(e, ssl.SSLError | requests.exceptions.SSLError) for e in _chain(exc)):
        # A certificate that does not match the cluster CA will not start matching later
        # (requests counts SSLError as a ConnectionError; the SDK rewraps it as one).
        return False
    if isinstance(exc, ConnectionError | requests.ConnectionError | requests.Timeout):
        return True
    if isinstance(exc, requests.HTTPError) and exc.response is not None:
        return exc.response.status_code >= 500 or exc.response.status_code == 429
    if isinstance(exc, RuntimeError) and "already exists" not in str(exc):
        match = re.search(r"status code (\d{3})", str(exc))
        return bool(match) and (int(match.group(1)) >= 500 or match.group(1) == "429")
    return False


def _describe(exc: BaseException) -> str:
    """The error text, plus the TLS failure that Ray's SDK hides behind 'Failed to connect'."""
    import requests

    text = str(exc).rstrip(".")
    for inner in _chain(exc):
        if isinstance(inner, ssl.SSLError | requests.exceptions.SSLError) and inner is not exc:
            return (
                f"{text} (TLS: {inner}; is dashboard.cluster_ca_certificate the CA of the cluster "
                "that serves this endpoint?)"
            )
    status = re.match(r"Request failed with status code (\d{3}): (\{.*\})\.?$", text, re.DOTALL)
    if status:
        # The API server's service proxy answers with a Kubernetes Status: keep its message.
        try:
            body = json.loads(status.group(2))
        except ValueError:
            body = None
        if isinstance(body, dict) and body.get("kind") == "Status":
            return f"HTTP {status.group(1)} from the Kubernetes API server: {body.get('message')}"
    if "Version check returned 404" in text:
        return (
            "GET /api/version answered 404, so this is not a Ray dashboard: check the URL, or "
            "the namespace, service and port name given to the service proxy"
        )
    return text


def _first_line(exc: BaseException) -> str:
    # Ray appends advice about its own token auth, which does not apply to a proxy's 401.
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _is_auth_failure(exc: BaseException) -> bool:
    from ray.exceptions import AuthenticationError

    return isinstance(exc, AuthenticationError) or bool(
        re.search(r"status code 40[13]\b", str(exc))
    )


def _capped_tail(dashboard: _Dashboard, sid: str, info: JobDetails) -> str:
    """The driver log's last lines, capped; a note when it cannot be read."""
    try:
        lines = dashboard.log_tail(
            sid, getattr(info, "driver_node_id", None), patience_s=dashboard.reach_s
        )
    except Exception as exc:  # the report must not hide the job's own failure
        return f"(driver log not readable: {redact(str(exc))[:500]})"
    return redact("\n".join(lines))


def _failure_report(
    dashboard: _Dashboard,
    sid: str,
    info: JobDetails,
    mode: str,
    first_step: Mapping[str, Any] | None = None,
) -> str:
    tail = _capped_tail(dashboard, sid, info)
    count = len(tail.splitlines())
    when = (
        f"after verl logged its first training step (step {first_step['step']}), before "
        f"pulumi up returned"
        if first_step is not None
        else f"before {_MODE_POINT[mode]}"
    )
    return (
        f"Ray job {sid} {info.status.value}: {_short_message(info.message)}\n"
        f"({when}, wait_for={mode})\n"
        f"--- driver log, last {count} lines (at most {job_logs.TAIL_LINES}, each cut at "
        f"{job_logs.TAIL_LINE_MAX_CHARS} characters) ---\n{tail}"
    )


def _log_tail_output(
    dashboard: _Dashboard, sid: str, info: JobDetails, props: Mapping[str, Any]
) -> str | None:
    """The `log_tail` output: the capped tail of a FAILED or STOPPED job, read once."""
    status = info.status.value
    if status not in ("FAILED", "STOPPED"):
        return None
    if props.get("status") == status and props.get("log_tail"):
        return str(props["log_tail"])  # a terminal job's log does not change
    return _capped_tail(dashboard, sid, info)


def _short_message(message: str | None) -> str:
    """Ray's status message without the log excerpt it appends on failure (we add our own)."""
    text = (message or "").split(", last available logs", 1)[0]
    text = text.split("last available logs", 1)[0].strip()
    return redact(text[:MESSAGE_MAX_CHARS])


def _not_known(dashboard: _Dashboard, props: Mapping[str, Any]) -> str:
    """Why a 404 from the Ray head proves the job gone, in words."""
    ran_under = (props.get("last_seen") or {}).get("head_session")
    if ran_under and dashboard.session and ran_under != dashboard.session:
        return (
            f"a new Ray head answers at {dashboard.address} (session {dashboard.session}; the "
            f"job ran under {ran_under}) and does not know the job: the head that ran it is gone"
        )
    return f"the Ray head at {dashboard.address} does not know this job (404)"


def _reach_hint(job: JobInputs) -> str:
    spec = job.dashboard
    if isinstance(spec, dashboard_access.KubeServiceProxy):
        return (
            f"is the head pod running (`kubectl get pods -n {spec.namespace} -l "
            f"ray.io/node-type=head`)? does the dashboard answer through the API server "
            f"(`kubectl get --raw /api/v1/namespaces/{spec.namespace}/services/"
            f"{spec.service}:{spec.port_name}/proxy/api/version`)?"
        )
    return f"is the Ray head behind {spec.url} running and reachable from this machine?"


def _stop_command(spec: dashboard_access.DashboardSpec, sid: str) -> str:
    if isinstance(spec, dashboard_access.KubeServiceProxy):
        return (
            f"`kubectl port-forward -n {spec.namespace} service/{spec.service} "
            f"8265:{spec.port_name}` and `ray job stop {sid} --address http://127.0.0.1:8265`"
        )
    return f"`ray job stop {sid} --address {spec.url}`"


def _stuck_hint(job: JobInputs, sid: str, status: str) -> str:
    spec = job.dashboard
    if isinstance(spec, dashboard_access.KubeServiceProxy):
        pods = f"`kubectl get pods -n {spec.namespace}` (Pending or ContainerCreating: nodes or "
        pods += "image pulls; `kubectl describe pod` says which)"
        if status == "PENDING":
            return f"{pods}; the job's status message in the Ray dashboard"
        return f"the driver log (`ray job logs`, see dashboard_hint); {pods}"
    if status == "PENDING":
        return f"the Ray dashboard at {spec.url} (resources, runtime env)"
    return f"the driver log: `ray job logs {sid} --address {spec.url}`"


def _no_evidence_message(
    job: JobInputs, sid: str, exc: DashboardUnreachableError, evidence: job_evidence.Evidence
) -> str:
    return redact(
        f"Ray job {sid} may still be running: {exc.short()}, and nothing proved the job gone "
        f"({evidence.summary()}). It stays in the state and nothing replaces it: a new job next "
        "to a running one would compete for the same GPUs.\n"
        "What you can do:\n"
        f"- make the dashboard reachable and run the command again: {_reach_hint(job)}\n"
        f"- or stop the job yourself ({_stop_command(job.dashboard, sid)}) and run the command "
        "again;\n"
        "- or, if you know the cluster and the job are gone: `pulumi refresh` drops the job once "
        "the Kubernetes or GKE API confirms it; otherwise remove it from the state with "
        "`pulumi state delete '<URN of this RayJob>'` (`pulumi stack --show-urns` lists the "
        "URNs) and run the command again."
    )


def _next_attempt(sid: str) -> str:
    match = re.fullmatch(r"(.+)-r(\d+)", sid)
    return f"{match.group(1)}-r{int(match.group(2)) + 1}" if match else f"{sid}-r2"


def _resume_note(root: str | None, latest_checkpoint: str | None) -> str:
    if root is None:
        return "the job keeps no checkpoints: it starts from the beginning"
    if latest_checkpoint:
        return f"the run continues in {root}: verl resumes from {latest_checkpoint}"
    return f"the run starts at step 0 in {root}: no checkpoint there yet"


# A run folder's name, `w<world size>-<hash of the resume identity>` (config/bucket_layout.py).
_RUN_FOLDER = re.compile(r"/w(\d+)-([0-9a-f]{8})$")


def _new_run_note(old_root: Any, new_root: Any) -> str | None:
    """What a changed job spec does to the run: None when the checkpoint folder is the same
    (verl resumes there), else why the new job starts a new run in a new folder."""
    if not isinstance(new_root, str) or old_root == new_root:
        return None
    old = _RUN_FOLDER.search(str(old_root or ""))
    new = _RUN_FOLDER.search(new_root)
    if old and new and old[1] != new[1]:
        why = f"world size {old[1]} -> {new[1]}; verl cannot load a checkpoint of another one"
    elif old and new and old[2] != new[2]:
        why = "model, actor strategy, fsdp_size or LoRA changed; verl cannot resume across"
    else:
        why = "another checkpoint folder (experiment name or defaultLocalDir)"
    return f"the new job starts a new run at step 0 in {new_root}, not in {old_root} ({why})"


def _resubmit_note(sid: str, status: str, olds: Mapping[str, Any]) -> str:
    root = olds.get("checkpoint_root")
    why = _short_message(olds.get("message"))
    return (
        f"the last refresh saw it {status}{f' ({why})' if why else ''}: resubmitting {sid} as "
        f"{_next_attempt(sid)}; "
        f"{_resume_note(str(root) if root else None, olds.get('latest_checkpoint'))}"
    )


def _first_step_output(step: verl_log.StepMetrics) -> dict[str, Any]:
    metrics = {
        key: step.values[key]
        for key in FIRST_STEP_KEYS
        if key in step.values and math.isfinite(step.values[key])
    }
    return {"step": step.step, "seen_at": _now_iso(), "metrics": metrics}


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _now_iso() -> str:
    return datetime.now(tz=UTC).isoformat(timespec="seconds")


def _discover(root: str | None, previous: CheckpointListing | None) -> CheckpointListing:
    if root is None:
        return CheckpointListing.empty(None)
    try:
        return discover_checkpoints(root)
    except Exception as exc:  # a storage hiccup must not fail a job operation
        _progress(root, f"could not list checkpoints ({exc}); keeping the previous values")
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


def _tagged_result(
    dashboard: _Dashboard, job: JobInputs, sid: str, info: JobDetails
) -> dict[str, Any] | None:
    """The job's own JSON result line, once it has finished (see RayJobArgs.result_tag)."""
    if job.result_tag is None or info.status.value not in _TERMINAL:
        return None
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
    dashboard: _Dashboard,
) -> dict[str, Any]:
    status = info.status.value
    return {
        **job.to_props(),
        "submission_id": sid,
        "status": status,
        "message": _short_message(info.message),
        "dashboard_hint": dashboard_access.dashboard_hint(job.dashboard, sid),
        **_listing_outputs(listing),
        "start_time": _iso(info.start_time),
        "end_time": _iso(info.end_time),
        "result": result,
        "log_tail": None,
        "first_step": None,
        "last_seen": {"status": status, "at": _now_iso(), "head_session": dashboard.session},
    }


def _iso(epoch_ms: int | None) -> str | None:
    if not epoch_ms:
        return None
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).isoformat(timespec="seconds")


def _progress(subject: str, text: str) -> None:
    # The engine shows a dynamic provider's stdout lines as info diagnostics.
    print(f"[ray-job {subject}] {text}", flush=True)


def _canonical(value: Any) -> Any:
    """Pulumi turns every number into a float on the wire; hash 600.0 and 600 alike."""
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value


def is_unknown(value: Any) -> bool:
    """A value not known until apply: an Unknown object (what the real host passes) or the wire
    sentinel string (what the engine sends, and what direct callers may pass)."""
    return isinstance(value, Unknown) or (isinstance(value, str) and value == UNKNOWN)


def _contains_unknown(value: Any) -> bool:
    if is_unknown(value):
        return True
    if isinstance(value, Mapping):
        return any(_contains_unknown(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_contains_unknown(v) for v in value)
    return False


def _effective(key: str, props: Mapping[str, Any]) -> Any:
    """An input's value as the provider uses it: the wait mode from `wait_for` or the legacy
    `wait`, a missing deadline as its default (states written before it existed)."""
    if key == "wait_for":
        return wait_mode(props)
    value = props.get(key)
    if value is None and key.startswith("deadline_"):
        return getattr(_DEFAULT_DEADLINES, key.removeprefix("deadline_"), None)
    return value


def _differs(key: str, olds: Mapping[str, Any], news: Mapping[str, Any]) -> bool:
    old, new = _effective(key, olds), _effective(key, news)
    if _contains_unknown(news.get(key)) or _contains_unknown(new):
        return True
    if key == "checkpoint_root":
        # The state holds the normalized URL (it is also an output).
        try:
            return normalize_root(str(old)) != normalize_root(str(new))
        except ValueError:
            return bool(old != new)
    return bool(_canonical(old) != _canonical(new))


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
