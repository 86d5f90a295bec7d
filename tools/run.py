"""Status and curves of a GRPO run from the command line.

    python -m tools.run a4                          # reads `pulumi stack output` of stack a4
    python -m tools.run a4 --plot run.png           # + reward and response-length curves
    python -m tools.run --dashboard-url http://127.0.0.1:8265 --submission-id ID [--json]

Prints the Ray job's status, the current step, the latest score, response length, throughput and
step time from verl's console metric lines (parsed by jobs/verl_log.py, the parser the job
provider uses), and the start-up phase while no step has been logged yet.

The dashboard is reached the way the job provider reaches it (jobs/dashboard_access.py): through
the GKE API server's service proxy with a short-lived token from Application Default Credentials
and the cluster CA, or at a plain URL (a local cluster, a port-forward). Connection values come
from the stack outputs when the Pulumi CLI is on PATH; flags override them.

Logs: status uses the last --tail-lines lines of the driver log (Ray's state API,
``GET /api/v0/logs/file?submission_id=...&node_id=<driver node>&lines=N``) and falls back to
the whole log (Jobs API) when the tail holds no training step or the state API does not answer;
--plot and --all-steps read the whole log, since every step's line is needed.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs import dashboard_access, verl_log
from jobs.verl_log import StepMetrics

if TYPE_CHECKING:
    from matplotlib.figure import Figure

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TAIL_LINES = 2000
DEFAULT_TIMEOUT_S = 15.0
PULUMI_TIMEOUT_S = 120.0
# connect, read timeouts of one request to the dashboard
REQUEST_TIMEOUT_S = (10.0, 60.0)
# The stack outputs this tool reads (__main__.py exports).
OUT_SUBMISSION_ID = "jobSubmissionId"
OUT_NAMESPACE = "namespace"
OUT_HEAD_SERVICE = "rayHeadService"
OUT_KUBECONFIG = "kubeconfig"
# Plain outputs (no --show-secrets needed); older stacks have only the kubeconfig.
OUT_CLUSTER_ENDPOINT = "clusterEndpoint"
OUT_CLUSTER_CA = "clusterCaCertificate"
OUT_CLUSTER_NAME = "clusterName"
OUT_CLUSTER_LOCATION = "clusterLocation"
SECRET_PLACEHOLDER = "[secret]"  # what `pulumi stack output` prints for a secret it does not show

_TOTAL_STEPS = re.compile(r"Total training steps: (\d+)")
_VALIDATION_PREFIXES = ("val-core/", "val-aux/")


class RunToolError(Exception):
    """A problem the user can fix; printed as one message, exit status 1."""


# -- where the run is ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    dashboard: dashboard_access.DashboardSpec
    submission_id: str
    stack: str | None


def stack_outputs(
    stack: str, run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run
) -> dict[str, Any]:
    """`pulumi stack output --json` of `stack` (secrets stay hidden), from the project folder."""
    if shutil.which("pulumi") is None:
        raise RunToolError(
            f"the Pulumi CLI is not on PATH, so the outputs of stack {stack!r} cannot be read; "
            "pass the run's coordinates as flags instead: --submission-id ID and either "
            "--dashboard-url URL (a reachable dashboard, e.g. after kubectl port-forward) or "
            "--kube-api-endpoint, --cluster-ca, --namespace and --head-service"
        )
    command = ["pulumi", "stack", "output", "--json", "--show-secrets=false", "-s", stack]
    result = _pulumi(command, run)
    try:
        outputs = json.loads(result.stdout or "{}")
    except json.JSONDecodeError as exc:
        raise RunToolError(f"`{' '.join(command)}` did not print JSON ({exc})") from exc
    if not isinstance(outputs, dict):
        raise RunToolError(f"`{' '.join(command)}` printed {type(outputs).__name__}, not an object")
    return outputs


def _pulumi(
    command: list[str], run: Callable[..., subprocess.CompletedProcess[str]]
) -> subprocess.CompletedProcess[str]:
    try:
        # stdin closed: a passphrase prompt must fail here, not hang the tool.
        result = run(
            command,
            cwd=REPO,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=PULUMI_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RunToolError(f"`{' '.join(command)}` could not run: {exc}") from exc
    if result.returncode != 0:
        detail = (result.stderr or result.stdout or "").strip().splitlines()
        raise RunToolError(
            f"`{' '.join(command)}` failed (exit {result.returncode}): "
            f"{detail[-1] if detail else 'no output'}"
        )
    return result


def kubeconfig_cluster(kubeconfig: str) -> tuple[str, str]:
    """(server, certificate-authority-data) of the first cluster in a kubeconfig (JSON or YAML)."""
    try:
        config = json.loads(kubeconfig)
    except json.JSONDecodeError:
        import yaml  # the program's own kubeconfig is JSON; a hand-made one may be YAML

        config = yaml.safe_load(kubeconfig)
    try:
        cluster = config["clusters"][0]["cluster"]
        return str(cluster["server"]), str(cluster.get("certificate-authority-data") or "")
    except (KeyError, IndexError, TypeError) as exc:
        raise RunToolError(
            "the stack's kubeconfig output has no clusters[0].cluster.server; pass "
            "--kube-api-endpoint and --cluster-ca instead"
        ) from exc


def resolve_target(
    args: argparse.Namespace,
    run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run,
) -> Target:
    """Combine flags and stack outputs (flags win) into a dashboard spec and a submission id."""
    kube_complete = all((args.kube_api_endpoint, args.namespace, args.head_service)) and (
        args.cluster_ca is not None
    )
    need_outputs = args.stack is not None and (
        args.submission_id is None or (args.dashboard_url is None and not kube_complete)
    )
    outputs: dict[str, Any] = stack_outputs(args.stack, run) if need_outputs else {}

    submission_id = args.submission_id or _output(outputs, OUT_SUBMISSION_ID)
    if not submission_id:
        raise RunToolError(
            "no submission id: pass --submission-id, or a stack whose jobSubmissionId output "
            "is set (`pulumi up` has submitted the job)"
        )
    if args.dashboard_url:
        spec_input = dashboard_access.url_dashboard(args.dashboard_url)
    else:
        endpoint, ca = args.kube_api_endpoint, args.cluster_ca
        if (endpoint is None or ca is None) and args.stack is not None:
            kube_endpoint, kube_ca = _endpoint_from_stack(args.stack, outputs, run)
            endpoint, ca = endpoint or kube_endpoint, ca if ca is not None else kube_ca
        namespace = args.namespace or _output(outputs, OUT_NAMESPACE)
        service = args.head_service or _output(outputs, OUT_HEAD_SERVICE)
        missing = [
            flag
            for flag, value in (
                ("--kube-api-endpoint", endpoint),
                ("--namespace", namespace),
                ("--head-service", service),
            )
            if not value
        ]
        if missing:
            raise RunToolError(
                f"no way to reach the Ray dashboard: missing {', '.join(missing)}; pass them "
                "(or a stack whose outputs carry them), or --dashboard-url URL"
            )
        spec_input = dashboard_access.kube_proxy_dashboard(endpoint, ca or "", namespace, service)
    try:
        spec = dashboard_access.parse_dashboard(spec_input)
    except ValueError as exc:
        raise RunToolError(str(exc)) from exc
    return Target(dashboard=spec, submission_id=str(submission_id), stack=args.stack)


def _output(outputs: dict[str, Any], key: str) -> Any:
    value = outputs.get(key)
    return None if value == SECRET_PLACEHOLDER else value


def _endpoint_from_stack(
    stack: str, outputs: dict[str, Any], run: Callable[..., subprocess.CompletedProcess[str]]
) -> tuple[str, str]:
    """The API server endpoint and CA: the stack's clusterEndpoint and clusterCaCertificate
    outputs, or (stacks from before them) its kubeconfig output.

    The program exports the kubeconfig as a secret, although it holds no credential (it names
    gke-gcloud-auth-plugin): only that one output is read with --show-secrets.
    """
    endpoint, ca = _output(outputs, OUT_CLUSTER_ENDPOINT), _output(outputs, OUT_CLUSTER_CA)
    if endpoint and ca:
        return str(endpoint), str(ca)
    kubeconfig = outputs.get(OUT_KUBECONFIG)
    if kubeconfig == SECRET_PLACEHOLDER or (kubeconfig is None and OUT_KUBECONFIG in outputs):
        command = ["pulumi", "stack", "output", OUT_KUBECONFIG, "--show-secrets", "-s", stack]
        try:
            kubeconfig = _pulumi(command, run).stdout
        except RunToolError as exc:
            cluster = outputs.get(OUT_CLUSTER_NAME) or "<cluster>"
            location = outputs.get(OUT_CLUSTER_LOCATION) or "<location>"
            raise RunToolError(
                f"{exc}. Pass the API server and its CA as flags instead: --kube-api-endpoint "
                "and --cluster-ca, e.g. from `gcloud container clusters describe "
                f"{cluster} --location={location} "
                "--format='value(endpoint,masterAuth.clusterCaCertificate)'`"
            ) from exc
    if not kubeconfig:
        return "", ""
    return kubeconfig_cluster(str(kubeconfig))


# -- what the run did ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RunView:
    submission_id: str
    dashboard: str  # the Jobs API address (no credentials)
    status: str
    message: str
    start_time_ms: int | None
    end_time_ms: int | None
    phase: str
    steps: tuple[StepMetrics, ...]  # one per training step, by step number
    validation: dict[str, float]  # latest value of each val-* key
    validation_points: tuple[tuple[int, float], ...]  # (step, main val score) for the plot
    total_steps: int | None
    log_source: str
    now_s: float = field(default_factory=time.time)

    @property
    def elapsed_s(self) -> float | None:
        if self.start_time_ms is None:
            return None
        end_s = self.end_time_ms / 1000 if self.end_time_ms else self.now_s
        return max(0.0, end_s - self.start_time_ms / 1000)

    @property
    def latest(self) -> StepMetrics | None:
        return self.steps[-1] if self.steps else None


class JobsApi:
    """Read-only calls to the Ray Jobs and state APIs over plain HTTP (requests).

    Addressing, token and CA come from jobs/dashboard_access.py, as for the job provider: one
    `ClientArgs` per call, so a token fetched from ADC is never older than one request. Ray's
    JobSubmissionClient is not used: it needs GET /api/version first and lets RAY_ADDRESS
    override the address, and this tool only reads three endpoints.
    """

    def __init__(
        self, make_args: Callable[[], dashboard_access.ClientArgs], timeout_s: float
    ) -> None:
        self.make_args = make_args
        self.timeout_s = timeout_s

    def get(self, path: str, what: str, params: dict[str, str] | None = None) -> Any:
        """GET address+path; retries refused connections, timeouts, 5xx and 429 for timeout_s.
        Returns the requests.Response of any other status."""
        import requests

        deadline = time.monotonic() + self.timeout_s
        backoff, attempts = 0.25, 0
        while True:
            attempts += 1
            args = self.make_args()
            try:
                response = requests.get(
                    args.address + path,
                    params=params,
                    headers=args.headers,
                    verify=args.verify,
                    timeout=REQUEST_TIMEOUT_S,
                )
            except requests.exceptions.SSLError as exc:
                raise RunToolError(
                    f"TLS check failed for {args.address} while trying to {what}: {exc}. Is the "
                    "CA (--cluster-ca or the stack's kubeconfig) the one of this cluster?"
                ) from exc
            except (requests.ConnectionError, requests.Timeout) as exc:
                last = f"{type(exc).__name__}: {str(exc)[:300]}"
            else:
                if response.status_code in (401, 403):
                    raise RunToolError(
                        f"{args.address} refused the credentials (HTTP {response.status_code}) "
                        f"while trying to {what}. Through the GKE service proxy the account of "
                        "Application Default Credentials needs the Kubernetes permission to "
                        "proxy to the head service (services/proxy)"
                    )
                if response.status_code < 500 and response.status_code != 429:
                    return response
                last = f"HTTP {response.status_code}: {response.text.strip()[:300]}"
            if time.monotonic() + backoff > deadline:
                raise DashboardUnreachableError(
                    f"Ray dashboard at {args.address} did not answer within "
                    f"{self.timeout_s:.0f}s ({attempts} attempts) while trying to {what}; "
                    f"last error: {last}"
                )
            time.sleep(backoff)
            backoff = min(backoff * 2, 2.0)

    def job(self, sid: str) -> dict[str, Any] | None:
        """The job's details (GET /api/jobs/<id>), None when the head does not know the id."""
        response = self.get(f"/api/jobs/{sid}", f"read job {sid}")
        if response.status_code == 404:
            return None
        return _json(response, f"GET /api/jobs/{sid}")

    def job_ids(self) -> list[str]:
        """Submission ids the head knows, newest first (GET /api/jobs/)."""
        jobs = _json(self.get("/api/jobs/", "list jobs"), "GET /api/jobs/")
        recent = sorted(jobs, key=lambda job: job.get("start_time") or 0, reverse=True)
        return [job["submission_id"] for job in recent if job.get("submission_id")]

    def log(self, sid: str) -> str:
        """The whole driver log (GET /api/jobs/<id>/logs)."""
        response = self.get(f"/api/jobs/{sid}/logs", f"read the log of {sid}")
        return str(_json(response, f"GET /api/jobs/{sid}/logs").get("logs") or "")

    def log_tail(self, sid: str, node_id: str, lines: int) -> str | None:
        """The last `lines` lines of the driver log from the state API, or None when it does not
        give them (an empty log: Ray 2.47 answers 500 for one) so the caller reads it whole.

        The state API resolves the file from submission_id, but its option check
        (GetLogOptions, Ray 2.47 and 2.60 alike) rejects a request without node_id or node_ip:
        the driver's node, from the job's details, goes along.
        """
        params = {"submission_id": sid, "node_id": node_id, "lines": str(lines)}
        try:
            response = self.get("/api/v0/logs/file", f"read the log tail of {sid}", params)
        except DashboardUnreachableError:
            return None
        if response.status_code != 200:
            return None
        return response.content.decode("utf-8", errors="replace")


class DashboardUnreachableError(RunToolError):
    """The dashboard did not answer within the timeout."""


def _json(response: Any, what: str) -> Any:
    if response.status_code != 200:
        raise RunToolError(f"{what} answered HTTP {response.status_code}: {response.text[:300]}")
    try:
        return response.json()
    except ValueError as exc:
        raise RunToolError(
            f"{what} did not answer JSON, so this is not a Ray dashboard: check the URL, or the "
            "namespace, service and port name given to the service proxy"
        ) from exc


def read_run(
    target: Target,
    *,
    tail_lines: int = DEFAULT_TAIL_LINES,
    full_log: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    token_provider: dashboard_access.TokenProvider | None = None,
) -> RunView:
    address = dashboard_access.dashboard_address(target.dashboard)
    sid = target.submission_id
    with dashboard_access.client_args(target.dashboard, token_provider) as make_args:
        api = JobsApi(make_args, timeout_s)
        try:
            info = api.job(sid)
            if info is None:
                raise RunToolError(_unknown_id_message(api, address, target))
            log, source = None, ""
            node_id = info.get("driver_node_id")
            if not full_log and tail_lines > 0 and node_id:
                log = api.log_tail(sid, node_id, tail_lines)
                source = f"last {tail_lines} lines"
                if log is not None and not verl_log.training_steps(log):
                    log = None  # no step in the tail: the phase needs the whole log
            if log is None:
                log, source = api.log(sid), "whole log"
        except DashboardUnreachableError as exc:
            raise RunToolError(f"{exc}\n{_reach_advice(target)}") from exc
        except RunToolError:
            raise
        except Exception as exc:  # ADC without credentials, a malformed answer: say where
            raise RunToolError(
                f"could not read job {sid} at {address}: {type(exc).__name__}: {exc}\n"
                f"{_reach_advice(target)}"
            ) from exc

    return summarize(
        sid,
        address,
        str(info.get("status")),
        info.get("message"),
        info.get("start_time"),
        info.get("end_time"),
        log,
        source,
    )


def summarize(
    submission_id: str,
    dashboard: str,
    status: str,
    message: str | None,
    start_time_ms: int | None,
    end_time_ms: int | None,
    log: str,
    log_source: str,
) -> RunView:
    """Everything the report shows, from the job's details and (part of) its driver log."""
    by_step: dict[int, StepMetrics] = {}
    for metrics in verl_log.training_steps(log):
        by_step[metrics.step] = metrics  # a step logged twice: the last line wins
    all_lines = verl_log.step_lines(log)
    validation = {
        key: value
        for key, value in verl_log.latest_values(all_lines).items()
        if key.startswith(_VALIDATION_PREFIXES)
    }
    points = []
    for metrics in all_lines:
        main = _main_validation_key(metrics.values)
        if main is not None and not math.isnan(metrics.values[main]):
            points.append((metrics.step, metrics.values[main]))
    totals = _TOTAL_STEPS.findall(log)
    return RunView(
        submission_id=submission_id,
        dashboard=dashboard,
        status=status,
        message=(message or "").strip(),
        start_time_ms=start_time_ms,
        end_time_ms=end_time_ms,
        phase=verl_log.startup_phase(log),
        steps=tuple(by_step[step] for step in sorted(by_step)),
        validation=validation,
        validation_points=tuple(points),
        total_steps=int(totals[-1]) if totals else None,
        log_source=log_source,
    )


def _main_validation_key(values: Any) -> str | None:
    # verl: f"val-core/{data_source}/{var}/{metric}", e.g. val-core/openai/gsm8k/reward/mean@1
    candidates = sorted(k for k in values if k.startswith("val-core/") and "/mean@" in k)
    return candidates[0] if candidates else None


def _unknown_id_message(api: JobsApi, address: str, target: Target) -> str:
    try:
        known = api.job_ids()[:5]
    except Exception:  # the listing only decorates the message
        known = []
    where = f"stack {target.stack}'s " if target.stack else "this "
    return (
        f"the Ray dashboard at {address} knows no job with submission id "
        f"{target.submission_id!r}; check the id (`pulumi stack output jobSubmissionId`) and that "
        f"{where}dashboard belongs to the cluster the job ran on (a replaced RayCluster forgets "
        f"its jobs). Jobs it knows, newest first: {', '.join(known) if known else 'none'}"
    )


def _reach_advice(target: Target) -> str:
    spec = target.dashboard
    if isinstance(spec, dashboard_access.DashboardUrl):
        return (
            f"Tried the Ray Jobs API at {spec.url} directly. Check that the Ray head is running "
            "and that this machine reaches that URL (for a GKE cluster: a running `kubectl "
            "port-forward`, or pass the stack / --kube-api-endpoint to use the API server proxy)."
        )
    return (
        f"Tried the Ray Jobs API through the Kubernetes API server proxy at "
        f"{dashboard_access.dashboard_address(spec)}. Check: the cluster endpoint and CA "
        "(--kube-api-endpoint/--cluster-ca or the stack's kubeconfig), the namespace and head "
        f"service ({spec.namespace}/{spec.service}, port {spec.port_name}: `kubectl get svc -n "
        f"{spec.namespace}`), that Application Default Credentials work (`gcloud auth "
        "application-default print-access-token`) and that the account may proxy to services."
    )


# -- output -------------------------------------------------------------------------------------

FIELDS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    # label, keys in order of preference, unit
    ("score", (verl_log.SCORE_KEY, verl_log.REWARD_KEY), ""),
    ("response length", (verl_log.RESPONSE_LENGTH_KEY,), "tokens"),
    ("throughput", (verl_log.THROUGHPUT_KEY,), "tokens/s/GPU"),
    ("step time", (verl_log.STEP_TIME_KEY,), "s"),
)


def format_duration(seconds: float) -> str:
    total = round(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m {secs:02d}s"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def _number(value: float) -> str:
    if not math.isfinite(value):
        return str(value)
    return f"{value:.4g}" if abs(value) < 1e5 else f"{value:,.0f}"


def render_text(view: RunView) -> str:
    rows: list[tuple[str, str]] = [("run", view.submission_id)]
    status = view.status
    if view.elapsed_s is not None:
        verb = "after" if view.end_time_ms else "for"
        status += f" {verb} {format_duration(view.elapsed_s)}"
    rows.append(("status", status))
    latest = view.latest
    if latest is None:
        rows.append(("step", f"no training step logged yet (phase: {view.phase})"))
    else:
        of = f" of {view.total_steps}" if view.total_steps else ""
        rows.append(("step", f"{latest.step}{of}"))
        for label, keys, unit in FIELDS:
            found = latest.first_of(*keys)
            if found is not None:
                key, value = found
                rows.append((label, f"{_number(value)} {unit}".rstrip() + f"  ({key})"))
    for key in sorted(view.validation):
        if key.startswith("val-core/"):
            rows.append(("validation", f"{_number(view.validation[key])}  ({key})"))
    if view.message and view.status in ("FAILED", "STOPPED"):
        rows.append(("message", view.message.splitlines()[0][:300]))
    rows.append(("dashboard", view.dashboard))
    rows.append(("log read", view.log_source))
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label:<{width}}  {value}" for label, value in rows)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None  # JSON has no NaN / Infinity


def to_json(view: RunView) -> dict[str, Any]:
    latest = view.latest
    return {
        "submission_id": view.submission_id,
        "dashboard": view.dashboard,
        "status": view.status,
        "message": view.message,
        "start_time_ms": view.start_time_ms,
        "end_time_ms": view.end_time_ms,
        "elapsed_s": view.elapsed_s,
        "phase": view.phase,
        "step": latest.step if latest else None,
        "total_steps": view.total_steps,
        "latest": {k: _finite(v) for k, v in latest.values.items()} if latest else {},
        "validation": {k: _finite(v) for k, v in view.validation.items()},
        "steps": [
            {
                "step": metrics.step,
                **{
                    key: _finite(value)
                    for label, keys, _ in FIELDS
                    if (found := metrics.first_of(*keys)) is not None
                    for key, value in [found]
                },
            }
            for metrics in view.steps
        ],
        "log_source": view.log_source,
    }


def _series(steps: Sequence[StepMetrics], key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for metrics in steps:
        value = metrics.get(key)
        if value is not None and math.isfinite(value):
            xs.append(metrics.step)
            ys.append(value)
    return xs, ys


def plot_run(view: RunView) -> Figure:
    """Two stacked panels over the training step: the mean score (with the validation score as
    points) and the mean response length. No min-max bands: with GSM8K's 0/1 reward the score's
    min and max are 0 and 1 at every step, and the longest response is the length cap."""
    import matplotlib

    matplotlib.use("Agg")  # no display on a laptop shell over ssh or in CI
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 6), dpi=100, layout="constrained")
    score_ax, length_ax = figure.subplots(2, 1, sharex=True)
    score_key = (
        verl_log.SCORE_KEY
        if any(verl_log.SCORE_KEY in m.values for m in view.steps)
        else verl_log.REWARD_KEY
    )
    for ax, key, label in (
        (score_ax, score_key, "score"),
        (length_ax, verl_log.RESPONSE_LENGTH_KEY, "response length (tokens)"),
    ):
        xs, ys = _series(view.steps, key)
        ax.plot(xs, ys, marker="o", markersize=3, label=key)
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best", fontsize="small")
    if view.validation_points:
        vx, vy = zip(*view.validation_points, strict=True)
        main = _main_validation_key(view.validation) or "validation"
        score_ax.plot(vx, vy, "s", color="tab:green", label=main)
        score_ax.legend(loc="best", fontsize="small")
    length_ax.set_xlabel("training step")
    score_ax.set_title(f"{view.submission_id} ({view.status})", fontsize="medium")
    return figure


# -- command line -------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.run",
        description="Status, latest metrics and curves of the stack's GRPO run.",
    )
    parser.add_argument("stack", nargs="?", help="Pulumi stack (a4x, a4, a3u) to read outputs of")
    parser.add_argument("--submission-id", help="Ray job submission id (default: stack output)")
    reach = parser.add_argument_group("how to reach the Ray dashboard (default: stack outputs)")
    reach.add_argument("--dashboard-url", help="a directly reachable dashboard, e.g. local Ray")
    reach.add_argument("--kube-api-endpoint", help="GKE API server endpoint (IP or https URL)")
    reach.add_argument("--cluster-ca", help="cluster CA, base64 of the PEM (as GKE gives it)")
    reach.add_argument("--namespace", help="namespace of the RayCluster")
    reach.add_argument("--head-service", help="name of the Ray head Service")
    parser.add_argument("--plot", type=Path, metavar="FILE.png", help="write the curves to a PNG")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument(
        "--tail-lines",
        type=int,
        default=DEFAULT_TAIL_LINES,
        help="lines of the log end to read for the status (0: the whole log)",
    )
    parser.add_argument(
        "--all-steps", action="store_true", help="read the whole log (every step in --json)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help="seconds to keep retrying an unreachable dashboard",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        target = resolve_target(args)
        view = read_run(
            target,
            tail_lines=args.tail_lines,
            full_log=bool(args.plot) or args.all_steps,
            timeout_s=args.timeout,
        )
    except RunToolError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(to_json(view), indent=2))
    else:
        print(render_text(view))
    if args.plot:
        if not view.steps:
            print(
                f"error: no training step logged yet (phase: {view.phase}); nothing to plot",
                file=sys.stderr,
            )
            return 1
        plot_run(view).savefig(args.plot)
        if not args.json:
            print(f"plot written to {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
