"""The one client of the Ray dashboard: the Jobs API (ray.job_submission.JobSubmissionClient) and
the state API's log file endpoint, used by the job provider (jobs/ray_job.py) and by
`python -m tools.run`.

Every Ray REST path the project calls is in this module: ``GET /api/version`` (the connection
check, and the head's session name), the Jobs API through Ray's SDK (``/api/jobs/...``: submit,
details, list, logs, stop), ``GET /api/v0/logs/file`` (the driver log's last lines, see
``state_api_tail``) and ``GET /api/v0/actors`` (whether an id's job supervisor ever existed, see
``state_api_supervisor_known``).

Addressing, the token and the CA come from jobs/dashboard_access.py; a client is rebuilt at least
every CLIENT_MAX_AGE_S, so an OAuth token fetched from ADC stays fresh in long waits. Ray's SDK
adds Ray's own token (RAY_AUTH_MODE=token, the token from RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or
~/.ray/auth_token; ray/_private/authentication/http_token_authentication.py, Ray 2.60) unless an
Authorization header is given already (the GKE proxy's OAuth token): the state API request uses
the client's own headers, so it carries the same credential. A 401/403 is reported as what it
is: Ray's token check (its body "Unauthorized: Missing authentication token" / "Forbidden:
Invalid authentication token", same file) or the Kubernetes API server's (a Status object).
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlencode

from jobs import dashboard_access, job_logs
from jobs.provider_errors import ProviderRuntimeError
from jobs.secret_scan import redact

if TYPE_CHECKING:
    from ray.dashboard.modules.job.pydantic_models import JobDetails
    from ray.job_submission import JobSubmissionClient

T = TypeVar("T")

# Rebuild the client (and so fetch a new OAuth token) at least this often during long waits.
CLIENT_MAX_AGE_S = 300.0


_RAY_ADDRESS_ENV = ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS")


# Ray names a job's supervisor actor "_ray_internal_job_actor_<submission id>" in this namespace
# (JOB_ACTOR_NAME_TEMPLATE and SUPERVISOR_ACTOR_RAY_NAMESPACE, dashboard/modules/job/common.py,
# Ray 2.47, 2.49 and 2.60).
SUPERVISOR_ACTOR_NAME = "_ray_internal_job_actor_{sid}"
SUPERVISOR_NAMESPACE = "SUPERVISOR_ACTOR_RAY_NAMESPACE"
# The entrypoint Ray writes when it puts a status on an id whose record is missing
# (dashboard/modules/job/common.py JobInfoStorageClient.put_status, Ray 2.47, 2.49, 2.60). Its
# job monitor does so after `ray job delete` removed a record before the monitor saw the ended
# supervisor exit: a FAILED "Job supervisor actor died" record under the deleted id
# (job_manager.py _monitor_job_internal; docs/reliability.md).
RECREATED_ENTRYPOINT = "Entrypoint not found."


def recreated_after_delete(info: JobDetails) -> bool:
    """Whether the record is the status Ray's job monitor wrote after the job's own record was
    deleted, not the job's record: it names no entrypoint."""
    return info.entrypoint == RECREATED_ENTRYPOINT


# Guards os.environ while Ray's client reads its address from it; never held across network I/O.
_ENV_LOCK = threading.Lock()


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


class DashboardAuthError(ProviderRuntimeError):
    """The dashboard, or the API server in front of it, refused the request's credentials."""


# The bodies of Ray's own token check (ray/_private/authentication/http_token_authentication.py,
# get_token_auth_middleware, Ray 2.60): 401 without a token, 403 with another token.
RAY_TOKEN_REFUSALS = ("Missing authentication token", "Invalid authentication token")


def auth_failure_message(address: str, what: str, exc: BaseException) -> str:
    """What refused the request, from the answer's body: Ray's token check, or the Kubernetes
    API server's authentication/authorization (a Status object) in front of the dashboard."""
    text = str(exc)
    first = redact(_first_line(exc))[:500]
    if any(refusal in text for refusal in RAY_TOKEN_REFUSALS):
        missing = RAY_TOKEN_REFUSALS[0] in text
        why = "no Ray token was sent" if missing else "the Ray token sent is not the head's"
        return (
            f"Ray dashboard at {address} refused the request while trying to {what}: {first}. "
            f"The Ray head checks Ray's own token (RAY_AUTH_MODE=token) and {why}. Set "
            "RAY_AUTH_MODE=token and the head's token in RAY_AUTH_TOKEN (or in the file "
            "RAY_AUTH_TOKEN_PATH names, or ~/.ray/auth_token) in this shell and run the command "
            "again. This is Ray's token authentication, not a Kubernetes permission."
        )
    return (
        f"Ray dashboard at {address} refused the credentials while trying to {what}: {first}. "
        "Through the GKE service proxy the account of Application Default Credentials needs the "
        "Kubernetes permission to proxy to the head service (services/proxy)"
    )


@dataclass
class Dashboard:
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
                if is_auth_failure(exc):
                    raise DashboardAuthError(auth_failure_message(self.address, what, exc)) from exc
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
                if not is_transient(exc):
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

    def supervisor_known(self, sid: str, patience_s: float | None = None) -> bool | None:
        """Whether the head lists a job supervisor actor for the id, alive or dead: True means
        the id was submitted before, even when its job record is gone (`ray job delete`); None
        when the state API gives no usable answer."""
        return self.call(
            f"look up the supervisor of {sid}",
            lambda client: state_api_supervisor_known(client, sid),
            patience_s,
        )

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
            try:
                return state_api_tail(client, sid, driver_node_id, lines, max_chars)
            except job_logs.LogNotAvailableError:
                if not whole_log_fallback:
                    raise
                return job_logs.capped_lines(client.get_job_logs(sid), lines, max_chars)

        return self.call(f"read the log of {sid}", fetch, patience_s)

    def whole_log(self, sid: str, patience_s: float | None = None) -> str:
        """The whole driver log (GET /api/jobs/<id>/logs)."""
        return str(
            self.call(f"read the log of {sid}", lambda c: c.get_job_logs(sid), patience_s) or ""
        )

    def list_jobs(self) -> list[JobDetails]:
        """Every job the head knows (GET /api/jobs/)."""
        return list(self.call("list jobs", lambda client: client.list_jobs()))

    def stop(self, sid: str) -> bool:
        """Ask Ray to stop the job (POST /api/jobs/<id>/stop); False when it had ended."""
        return bool(self.call(f"stop job {sid}", lambda client: client.stop_job(sid)))

    def follow_log(self, sid: str) -> Iterator[str]:
        """The driver log from its start, in chunks as the driver writes them, until the job has
        ended: the Jobs API's websocket /api/jobs/<id>/logs/tail (JobSubmissionClient.
        tail_job_logs, what `ray job logs --follow` reads; Ray's job manager closes it once the
        job is terminal and its log read to the end). Raises RuntimeError when the socket
        closes abnormally (the caller reconnects; the log then starts over)."""
        import asyncio

        client = self.call(f"follow the log of {sid}", lambda client: client)
        stream = client.tail_job_logs(sid)
        loop = asyncio.new_event_loop()
        try:
            while True:
                try:
                    chunk = loop.run_until_complete(stream.__anext__())
                except StopAsyncIteration:
                    return
                yield chunk
        finally:
            loop.run_until_complete(stream.aclose())
            loop.close()

    def _fresh_client(self, budget: dashboard_access.RequestBudget) -> Any:
        now = time.monotonic()
        if self._client is None or now - self._client_born > CLIENT_MAX_AGE_S:
            args = self.make_args()
            client = new_client(args)
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
        # Dashboard.call sets the operation's budget before each attempt.
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
                body = response.json()
            except ValueError as exc:
                raise RuntimeError(
                    f"GET /api/version answered {response.text[:200]!r}, not Ray's JSON"
                ) from exc
            # What Ray's own connection check records: tail_job_logs raises a websocket ERROR
            # only when it knows the head is newer than 2.0.1, else it ends the stream as if
            # closed (ray/dashboard/modules/dashboard_sdk.py and job/sdk.py, Ray 2.60).
            self._server_ray_version = body.get("ray_version")
            session = body.get("session_name")
            return str(session) if session else None

    return _TimedClient


def new_client(args: dashboard_access.ClientArgs) -> Any:
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


def is_transient(exc: BaseException) -> bool:
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


def is_auth_failure(exc: BaseException) -> bool:
    from ray.exceptions import AuthenticationError

    return isinstance(exc, AuthenticationError) or bool(
        re.search(r"status code 40[13]\b", str(exc))
    )


def state_api_tail(
    client: Any, submission_id: str, driver_node_id: str | None, lines: int, max_chars: int
) -> list[str]:
    """The last `lines` lines of the driver log through Ray's state API, capped per line.

    ``GET /api/v0/logs/file?submission_id=<id>&node_id=<driver node>&lines=N``. Measured against
    a real Ray 2.60 head: without ``node_id`` (or ``node_ip``) the dashboard answers 500
    (GetLogOptions: "node_id or node_ip must be provided ... when no actor or task_id"), so the
    driver's node id comes from the job's details (``driver_node_id``); a last line without a
    newline counts as a line. ``format=text`` asks Ray 2.34-2.44 not to prefix each chunk with
    "1" (ray PR #46556; removed again in #51787 and ignored since). The body is read as a stream
    and each line is cut while reading (jobs/job_logs.py), so a 5 MB line never sits in memory
    whole. A plain streamed request with the Jobs API client's own address, headers (the OAuth or
    Ray token), cookies and CA: Ray's request helper reads the whole body before returning.
    Raises job_logs.LogNotAvailableError when the state API cannot serve the file (no driver
    node yet, an older head): the caller reads the whole log instead.
    """
    import requests

    if not driver_node_id:
        raise job_logs.LogNotAvailableError(f"job {submission_id} has no driver node yet")
    query = urlencode(
        {
            "submission_id": submission_id,
            "node_id": driver_node_id,
            "lines": lines,
            "format": "text",
        }
    )
    with requests.get(
        f"{client._address}/api/v0/logs/file?{query}",
        headers=client._headers,
        cookies=client._cookies,
        verify=client._verify,
        timeout=client.request_timeout,
        stream=True,
    ) as response:
        if response.status_code in (401, 403):
            # The wording the credential check (is_auth_failure) recognises.
            raise RuntimeError(
                f"Request failed with status code {response.status_code}: {response.text[:300]}"
            )
        if response.status_code != 200:
            raise job_logs.LogNotAvailableError(
                f"state API answered {response.status_code}: {response.text[:200]!r}"
            )
        chunks = response.iter_content(job_logs.CHUNK_BYTES)
        return job_logs.capped_from_chunks(chunks, lines, max_chars)


def state_api_supervisor_known(client: Any, submission_id: str) -> bool | None:
    """Whether Ray's state API lists the id's job supervisor actor (any state); None when it
    cannot tell: an answer that is not a list (400, 404 from an older head, another body), or a
    list cut short (at its source or by `limit`) without a match.

    ``GET /api/v0/actors?filter_keys=name&filter_predicates==&filter_values=<name>&detail=false``.
    Ray keeps a dead actor's entry (the GCS's last maximum_gcs_destroyed_actor_cached_count dead
    actors: 100,000 in Ray 2.47, 2.49 and 2.60), and `ray job delete` removes only the job's record
    (job_manager.py delete_job, Ray 2.47, 2.49, 2.60): measured on Ray 2.47 and 2.60 heads, the
    supervisor of a job stopped and deleted is listed DEAD. The name filter is applied by the
    dashboard after it fetched at most RAY_MAX_LIMIT_FROM_DATA_SOURCE (10,000 by default) actors
    from the GCS (state_manager.py get_all_actor_info; the GCS filters only actor_id, job_id and
    state), and reports that cut as total > num_after_truncation; `limit` then trims the filtered
    rows (num_filtered > the rows returned). The filter matches names without regard to case
    (state_api_utils.py), hence the exact check here. A 5xx or 429 answer raises, so that
    Dashboard.call retries it as it does every call.
    """
    name = SUPERVISOR_ACTOR_NAME.format(sid=submission_id)
    query = urlencode(
        {
            "filter_keys": "name",
            "filter_predicates": "=",
            "filter_values": name,
            "detail": "false",
            "limit": 100,
        }
    )
    response = client._do_request("GET", f"/api/v0/actors?{query}")
    if (
        response.status_code in (401, 403)
        or response.status_code >= 500
        or response.status_code == 429
    ):
        # The wording that is_auth_failure and is_transient recognise.
        raise RuntimeError(
            f"Request failed with status code {response.status_code}: {response.text[:300]}"
        )
    if response.status_code != 200:
        return None
    try:
        listing = response.json()["data"]["result"]
        rows = listing["result"]
        # Cut at the source (the GCS stopped at its limit), or by `limit` after the filter.
        source_cut = int(listing.get("total", 0)) > int(listing.get("num_after_truncation", 0))
        cut_short = source_cut or int(listing.get("num_filtered", 0)) > len(rows)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if not isinstance(rows, list):
        return None
    found = any(
        isinstance(row, dict)
        and row.get("name") == name
        and row.get("ray_namespace", SUPERVISOR_NAMESPACE) == SUPERVISOR_NAMESPACE
        for row in rows
    )
    return True if found else (None if cut_short else False)
