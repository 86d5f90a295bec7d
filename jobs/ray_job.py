"""The GRPO training run as a Pulumi dynamic resource: one Ray job, submitted through the Jobs API.

Lifecycle (DESIGN.md, Decisions):
- create: submits with a deterministic id, `<stack>-<sha256(entrypoint, runtime_env)[:12]>`, so a
  re-run of `pulumi up` adopts the job instead of starting a second one. If every earlier attempt
  with that id ended FAILED or STOPPED (a fast failure, a destroy), the next attempt gets the
  suffix `-r<N>`; a job that is pending, running or succeeded is always adopted. Returns once the
  job is RUNNING and survived `startup_grace_s` (or, with `wait`, once it is terminal). FAILED or
  STOPPED fails the step with Ray's message and the driver log's last lines.
- diff: a new entrypoint, runtime env or id prefix replaces the job, old one stopped first
  (delete_before_replace: GPUs are exclusive). So does a new dashboard target: the job record
  lives in the Ray head the dashboard leads to, and a new GKE endpoint or CA means a new cluster
  whose head has never seen the job (create adopts it by its deterministic id if it is there
  after all). Deadlines, `wait` and checkpoint_root are updated in place.
- preview: any input may be unknown, at any depth (the endpoint and CA of a cluster that does
  not exist yet). The real host hands check/diff `pulumi.output.Unknown` objects for them
  (`python -m pulumi.dynamic` deserializes with keep_unknowns=True); a direct caller may pass
  the wire sentinel string. check validates only what is known and never fails on an unknown;
  diff counts an unknown as a change, and as a replacement where a change would replace.
- read (`pulumi refresh`): status, message, times and the checkpoints in the bucket; a job the
  cluster no longer knows is reported gone.
- delete: stops the job if it still runs and waits until it is terminal. Checkpoints are never
  deleted, neither is the job record (its log stays readable).

Rules of pulumi.dynamic that shape this module (verl-ray-pulumi-facts.md §C): the provider is
pickled with dill into the state and runs in a separate process, so it holds no client, socket or
token; heavy imports happen inside methods; connection data are inputs; the engine applies no
timeouts, so every wait here has its own deadline; progress goes to stdout with flush=True.
"""

from __future__ import annotations

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

from jobs import dashboard_access
from jobs.checkpoints import CheckpointListing, discover_checkpoints, normalize_root, parse_gcs_url

if TYPE_CHECKING:
    from ray.dashboard.modules.job.pydantic_models import JobDetails
    from ray.job_submission import JobSubmissionClient

T = TypeVar("T")


# Inputs whose change means a different job (replace): what runs, and the Ray head that holds its
# record (the dashboard target). All other inputs only say how to watch it (update in place).
SPEC_KEYS = ("entrypoint", "runtime_env", "submission_id_prefix", "dashboard")
CONNECTION_KEYS = (
    "checkpoint_root",
    "wait",
    "deadline_submit_s",
    "deadline_start_s",
    "deadline_startup_grace_s",
    "deadline_wait_s",
    "deadline_stop_s",
    "deadline_poll_interval_s",
    "result_tag",
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
)
LOG_TAIL_LINES = 50
MESSAGE_MAX_CHARS = 1000
# Rebuild the client (and so fetch a new OAuth token) at least this often during long waits.
CLIENT_MAX_AGE_S = 300.0
PROGRESS_EVERY_S = 60.0
# connect, read timeouts of one HTTP request to the dashboard
REQUEST_TIMEOUT_S = (10.0, 60.0)

_HF_TOKEN = re.compile(r"hf_[A-Za-z0-9]{30,}")
# Key names that hold a secret: *TOKEN* (but not TOKENIZERS_PARALLELISM or *_TOKENS counts),
# *SECRET*, *PASSWORD*, *API_KEY, *ACCESS_KEY. Keys ending in _PATH/_FILE only point at one.
_SECRET_KEY = re.compile(r"TOKEN(?!IZER|S)|SECRET|PASSW(OR)?D|API_KEY$|ACCESS_KEY$")
_SECRET_POINTER = re.compile(r"_(PATH|FILE|DIR)$")
_TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
_RAY_ADDRESS_ENV = ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS")
_ENV_LOCK = threading.Lock()


@dataclass(frozen=True)
class JobDeadlines:
    """The provider's own deadlines (Pulumi enforces none on dynamic providers), in seconds."""

    submit_s: float = 600.0  # keep retrying an unreachable/busy dashboard, per operation
    start_s: float = 3600.0  # PENDING -> RUNNING (runtime env setup, waiting for resources)
    startup_grace_s: float = 30.0  # still RUNNING after this long: create returns (wait off)
    wait_s: float = 7 * 24 * 3600.0  # RUNNING -> terminal when wait is on
    stop_s: float = 300.0  # stop request -> terminal (delete, replace)
    poll_interval_s: float = 5.0


@dataclass(frozen=True)
class RayJobArgs:
    """Inputs of one RayJob. Values may be pulumi Inputs except submission_id_prefix and wait."""

    entrypoint: Any  # Input[str]: the shell command Ray runs on the head
    runtime_env: Any  # Input[dict]: Ray runtime env (env_vars, working_dir, ...), no secrets
    dashboard: Any  # Input[dict]: dashboard_access.url_dashboard / kube_proxy_dashboard
    # Input[str]: gs://bucket/folder = trainer.default_local_dir's bucket path; None for a job
    # that writes no checkpoints.
    checkpoint_root: Any
    submission_id_prefix: str  # usually the stack name
    wait: bool = False  # block `pulumi up` until the job is terminal
    deadlines: JobDeadlines = field(default_factory=JobDeadlines)
    # A job that prints its result as one JSON line {"check": <result_tag>, ...}: the provider
    # exposes the last such line of a finished job as the `result` output.
    result_tag: str | None = None

    def to_props(self) -> dict[str, Any]:
        return {
            "entrypoint": self.entrypoint,
            "runtime_env": self.runtime_env,
            "dashboard": self.dashboard,
            "checkpoint_root": self.checkpoint_root,
            "submission_id_prefix": self.submission_id_prefix,
            "wait": self.wait,
            **{f"deadline_{f.name}": getattr(self.deadlines, f.name) for f in fields(JobDeadlines)},
            "result_tag": self.result_tag,
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
    wait: bool
    deadlines: JobDeadlines
    result_tag: str | None

    @classmethod
    def parse(cls, props: Mapping[str, Any]) -> JobInputs:
        problems = input_problems(props)
        if problems:
            raise ValueError("invalid RayJob inputs:\n" + "\n".join(f"- {p}" for _, p in problems))
        deadlines = JobDeadlines(
            **{
                f.name: float(props[f"deadline_{f.name}"])
                for f in fields(JobDeadlines)
                if props.get(f"deadline_{f.name}") is not None
            }
        )
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
            wait=bool(props.get("wait", False)),
            deadlines=deadlines,
            result_tag=props.get("result_tag"),
        )

    def to_props(self) -> dict[str, Any]:
        return RayJobArgs(
            entrypoint=self.entrypoint,
            runtime_env=self.runtime_env,
            dashboard=self.dashboard_input,
            checkpoint_root=self.checkpoint_root,
            submission_id_prefix=self.submission_id_prefix,
            wait=self.wait,
            deadlines=self.deadlines,
            result_tag=self.result_tag,
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
    problems: list[tuple[str, str]] = []

    def unknown(value: Any) -> bool:
        return allow_unknown and is_unknown(value)

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
    for deadline in fields(JobDeadlines):
        key = f"deadline_{deadline.name}"
        value = props.get(key)
        if value is None or unknown(value):
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
            problems.append(
                (key, f"{key} must be a number of seconds >= 0, got {value!r}; e.g. 600")
            )
    for key in ("entrypoint", "runtime_env"):
        # Unknown parts cannot hold a secret we could see; the known parts are still checked.
        problems.extend((key, reason) for reason in secret_problems(key, props.get(key)))
    return problems


def secret_problems(path: str, value: Any) -> list[str]:
    """Reasons why `value` (walked recursively) looks like it carries a secret."""
    found: list[str] = []
    if isinstance(value, Mapping):
        for key, item in value.items():
            upper = str(key).upper()
            if _SECRET_KEY.search(upper) and not _SECRET_POINTER.search(upper):
                found.append(
                    f"{path}.{key}: secrets must not be RayJob inputs (they would be stored in "
                    "the Pulumi state and in the Ray job record); remove the key and let the pods "
                    "read the secret from a Kubernetes Secret (the HF token: hf-secret, key "
                    "hf_token)"
                )
            else:
                found.extend(secret_problems(f"{path}.{key}", item))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found.extend(secret_problems(f"{path}[{index}]", item))
    elif isinstance(value, str) and _HF_TOKEN.search(value):
        found.append(
            f"{path} contains what looks like a Hugging Face token (hf_...); the token must not "
            "be a RayJob input: the pods read it from the Kubernetes Secret hf-secret"
        )
    return found


def redact(text: str) -> str:
    return _HF_TOKEN.sub("hf_***", text)


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
        if _olds.get("status") in ("FAILED", "STOPPED"):
            # The last refresh saw the run end without success: `pulumi up` submits it again
            # (as <id>-rN; verl resumes from its latest checkpoint).
            replaces.append("status")
        return pulumi.dynamic.DiffResult(
            changes=bool(changed or replaces),
            replaces=replaces,
            delete_before_replace=True,
        )

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        job = JobInputs.parse(props)
        with self._dashboard(job) as dashboard:
            sid = self._submit_or_adopt(dashboard, job)
            info = self._await_started(dashboard, job, sid)
            if info.status.value in ("FAILED", "STOPPED"):
                raise RuntimeError(_failure_report(dashboard, sid, info))
            result = _tagged_result(dashboard, job, sid, info)
        listing = _discover(job.checkpoint_root, None)
        return pulumi.dynamic.CreateResult(sid, _outputs(job, sid, info, listing, result))

    def read(self, id_: str, props: dict[str, Any]) -> pulumi.dynamic.ReadResult:
        job = JobInputs.parse(props)
        with self._dashboard(job) as dashboard:
            info = dashboard.job_info(id_)
            result = _tagged_result(dashboard, job, id_, info) if info else props.get("result")
        if info is None:
            _progress(id_, "the Ray cluster no longer knows this job: removing it from the state")
            return pulumi.dynamic.ReadResult(None, {})
        listing = _discover(job.checkpoint_root, _listing_from(props))
        return pulumi.dynamic.ReadResult(id_, _outputs(job, id_, info, listing, result))

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
                # Typically the cluster or its GPU nodes are already gone (a partial destroy, a
                # cluster deleted by hand): a job cannot outlive its Ray head, and failing here
                # would leave a state that no later destroy could clear.
                _progress(_id, f"{exc} Nothing to stop: the job ends with its Ray cluster.")
                return
            if info is None:
                _progress(_id, "not known to the Ray cluster: nothing to stop")
                return
            if info.status.value in _TERMINAL:
                _progress(_id, f"already {info.status.value}: nothing to stop")
                return
            _progress(_id, f"{info.status.value}: stopping (checkpoints are kept)")
            dashboard.call("stop the job", lambda client: client.stop_job(_id))
            deadline = time.monotonic() + job.deadlines.stop_s
            while True:
                info = dashboard.job_info(_id)
                if info is None or info.status.value in _TERMINAL:
                    _progress(_id, f"{info.status.value if info else 'gone'}")
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"Ray job {_id} is still {info.status.value} {job.deadlines.stop_s:.0f}s "
                        f"after the stop request (dashboard {dashboard.address}); stop it with "
                        f"`ray job stop {_id}` (see the dashboard_hint output) and run the "
                        "command again"
                    )
                time.sleep(job.deadlines.poll_interval_s)

    # -- helpers (instance methods only so that tests can swap the token source) --------------

    @contextmanager
    def _dashboard(self, job: JobInputs) -> Iterator[_Dashboard]:
        with dashboard_access.client_args(job.dashboard, self._token_provider) as make_args:
            yield _Dashboard(
                address=dashboard_access.dashboard_address(job.dashboard),
                make_args=make_args,
                retry_deadline_s=job.deadlines.submit_s,
                max_backoff_s=max(job.deadlines.poll_interval_s, 0.5),
            )

    def _submit_or_adopt(self, dashboard: _Dashboard, job: JobInputs) -> str:
        base = job.base_submission_id
        attempt, previous = 1, dashboard.job_info(base)
        while previous is not None and previous.status.value in ("FAILED", "STOPPED"):
            attempt += 1
            candidate = f"{base}-r{attempt}"
            _progress(candidate, f"earlier attempt ended {previous.status.value}: trying again")
            previous = dashboard.job_info(candidate)
        sid = base if attempt == 1 else f"{base}-r{attempt}"
        if previous is not None:
            _progress(sid, f"already submitted ({previous.status.value}): adopting it")
            return sid

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

    def _await_started(self, dashboard: _Dashboard, job: JobInputs, sid: str) -> JobDetails:
        deadlines = job.deadlines
        started = time.monotonic()
        running_since: float | None = None
        last_status = ""
        last_progress = started
        while True:
            info = dashboard.job_info(sid)
            if info is None:
                raise RuntimeError(
                    f"Ray job {sid} disappeared from the cluster at {dashboard.address} while "
                    "starting (was the head restarted?)"
                )
            status = info.status.value
            now = time.monotonic()
            if status != last_status:
                _progress(sid, f"{status}: {_short_message(info.message)}")
                last_status, last_progress = status, now
            if status in _TERMINAL:
                return info
            if status == "RUNNING":
                running_since = running_since if running_since is not None else now
                if not job.wait and now - running_since >= deadlines.startup_grace_s:
                    return info
                if job.wait and now - running_since > deadlines.wait_s:
                    raise TimeoutError(
                        f"Ray job {sid} still RUNNING after the wait deadline "
                        f"({deadlines.wait_s:.0f}s); it keeps running and the next `pulumi up` "
                        "adopts it"
                    )
            elif now - started > deadlines.start_s:
                raise TimeoutError(
                    f"Ray job {sid} still {status} after {deadlines.start_s:.0f}s "
                    f"({_short_message(info.message)}); it stays submitted and the next "
                    f"`pulumi up` adopts it; stop it with `ray job stop {sid}` if it is stuck"
                )
            if now - last_progress >= PROGRESS_EVERY_S:
                note = ""
                if job.wait:
                    latest = _discover(job.checkpoint_root, None).latest_step
                    note = f", latest checkpoint step {latest}"
                _progress(sid, f"{status} for {now - (running_since or started):.0f}s{note}")
                last_progress = now
            time.sleep(deadlines.poll_interval_s)


class DashboardUnreachableError(RuntimeError):
    """The dashboard did not answer within the retry deadline."""


@dataclass
class _Dashboard:
    """One method call's view of the Jobs API: a client rebuilt on demand, calls with retries."""

    address: str
    make_args: Callable[[], dashboard_access.ClientArgs]
    retry_deadline_s: float
    max_backoff_s: float
    _client: JobSubmissionClient | None = None
    _client_born: float = 0.0

    def call(self, what: str, operation: Callable[[JobSubmissionClient], T]) -> T:
        """Run operation(client), retrying transient failures until the retry deadline."""
        deadline = time.monotonic() + self.retry_deadline_s
        backoff = 0.25
        attempts = 0
        while True:
            attempts += 1
            try:
                return operation(self._fresh_client())
            except Exception as exc:  # classified right below
                if _is_auth_failure(exc):
                    raise RuntimeError(
                        f"Ray dashboard at {self.address} refused the credentials while trying "
                        f"to {what}: {redact(_first_line(exc))[:500]}. Through the GKE service "
                        "proxy the account of Application Default Credentials needs the "
                        "Kubernetes permission to proxy to the head service (services/proxy)"
                    ) from exc
                if not _is_transient(exc):
                    raise RuntimeError(
                        f"Ray dashboard at {self.address}: could not {what}: "
                        f"{redact(_describe(exc))[:2000]}"
                    ) from exc
                self._client = None
                if time.monotonic() + backoff > deadline:
                    raise DashboardUnreachableError(
                        f"Ray dashboard at {self.address} did not answer within "
                        f"{self.retry_deadline_s:.0f}s ({attempts} attempts) while trying to "
                        f"{what}; last error: {redact(_describe(exc))[:500]}. Check that the "
                        "Ray head is running and reachable from this machine."
                    ) from exc
                time.sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff_s)

    def job_info(self, sid: str) -> JobDetails | None:
        """The job's details, or None when the cluster does not know the id."""

        def get(client: JobSubmissionClient) -> JobDetails | None:
            try:
                return client.get_job_info(sid)
            except RuntimeError as exc:
                if "404" in str(exc) and "does not exist" in str(exc):
                    return None
                raise

        return self.call(f"read job {sid}", get)

    def _fresh_client(self) -> JobSubmissionClient:
        now = time.monotonic()
        if self._client is None or now - self._client_born > CLIENT_MAX_AGE_S:
            self._client = _new_client(self.make_args())
            self._client_born = now
        return self._client


def _new_client(args: dashboard_access.ClientArgs) -> JobSubmissionClient:
    from ray.job_submission import JobSubmissionClient

    class _TimedClient(JobSubmissionClient):
        # The SDK sends requests without a timeout; a black-holed address would hang forever.
        def _do_request(self, method: str, endpoint: str, **kwargs: Any) -> Any:
            kwargs.setdefault("timeout", REQUEST_TIMEOUT_S)
            return super()._do_request(method, endpoint, **kwargs)

    # JobSubmissionClient lets RAY_ADDRESS / RAY_API_SERVER_ADDRESS override the address it is
    # given; a Ray user's shell often exports one, which would send the job to another cluster.
    with _ENV_LOCK:
        saved = {k: os.environ.pop(k) for k in _RAY_ADDRESS_ENV if k in os.environ}
        try:
            return _TimedClient(
                address=args.address, headers=dict(args.headers), verify=args.verify
            )
        finally:
            os.environ.update(saved)


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


def _failure_report(dashboard: _Dashboard, sid: str, info: JobDetails) -> str:
    try:
        logs = dashboard.call(f"read the log of {sid}", lambda client: client.get_job_logs(sid))
        tail = "\n".join(logs.rstrip("\n").splitlines()[-LOG_TAIL_LINES:])
    except Exception as exc:  # the report must not hide the job's own failure
        tail = f"(driver log not readable: {exc})"
    return redact(
        f"Ray job {sid} {info.status.value}: {_short_message(info.message)}\n"
        f"--- last {LOG_TAIL_LINES} lines of the driver log ---\n{tail}"
    )


def _short_message(message: str | None) -> str:
    """Ray's status message without the log excerpt it appends on failure (we add our own)."""
    text = (message or "").split(", last available logs", 1)[0]
    text = text.split("last available logs", 1)[0].strip()
    return redact(text[:MESSAGE_MAX_CHARS])


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
    result: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        **job.to_props(),
        "submission_id": sid,
        "status": info.status.value,
        "message": _short_message(info.message),
        "dashboard_hint": dashboard_access.dashboard_hint(job.dashboard, sid),
        **_listing_outputs(listing),
        "start_time": _iso(info.start_time),
        "end_time": _iso(info.end_time),
        "result": result,
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


def _differs(key: str, olds: Mapping[str, Any], news: Mapping[str, Any]) -> bool:
    old, new = olds.get(key), news.get(key)
    if _contains_unknown(new):
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
