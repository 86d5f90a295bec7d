"""Where a GRPO run is: its Ray dashboard and submission id, from flags and `pulumi stack
output` (flags win). Used by every command of `python -m tools.run`.

The dashboard is reached the way the job provider reaches it (jobs/dashboard_access.py): through
the GKE API server's service proxy with a short-lived token from Application Default Credentials
and the cluster CA, or at a plain URL (a local cluster, a port-forward).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs import dashboard_access
from jobs.dashboard_client import Dashboard, DashboardUnreachableError
from jobs.provider_errors import ProviderRuntimeError

REPO = Path(__file__).resolve().parent.parent
PULUMI_TIMEOUT_S = 120.0
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
# What the stack costs per hour (__main__.py exports pricing/whole_run.py stack_outputs): exact, a
# lower bound (Autopilot's premium not read) or an upper bound (flex-start's discount not read).
OUT_GPU_NODE_HOURLY = "gpuNodeHourlyUsd"
OUT_GPU_NODES = "gpuNodes"
OUT_FIXED_HOURLY = "fixedHourlyUsd"
OUT_STACK_HOURLY = "stackHourlyUsd"
OUT_STACK_HOURLY_BOUNDS = {"stackHourlyUsdAtLeast": "at least ", "stackHourlyUsdAtMost": "at most "}
OUT_PRICE_SOURCE = "priceSource"
# The rehearsal's answers (__main__.py exports jobs/rehearsal_verdict.py's outputs).
OUT_REHEARSAL_RECORD = "rehearsalRecord"
OUT_REHEARSAL_STEPS = "rehearsalSteps"
OUT_REHEARSAL_SAVE_STEPS = "rehearsalSaveSteps"
OUT_REHEARSAL_ROWS = "rehearsalRows"
OUT_REHEARSAL_REWARD = "rehearsalRewardSamples"
OUT_REHEARSAL_VERSIONS = "rehearsalVersions"
OUT_REHEARSAL_PROBLEMS = "rehearsalProblems"
SECRET_PLACEHOLDER = "[secret]"  # what `pulumi stack output` prints for a secret it does not show


class RunToolError(Exception):
    """A problem the user can fix; printed as one message, exit status 1."""


@dataclass(frozen=True)
class RunPrice:
    """The stack's hourly price as `pulumi up` priced it (None: no figure for the GPU nodes)."""

    gpu_node_hourly_usd: float | None
    gpu_nodes: int
    stack_hourly_usd: float | None
    source: str
    fixed_hourly_usd: float = 0.0  # control plane and CPU side
    bound: str = ""  # "at least ", "at most " or "" (an exact list price)

    @classmethod
    def from_outputs(cls, outputs: dict[str, Any]) -> RunPrice | None:
        if OUT_PRICE_SOURCE not in outputs:
            return None  # a stack from before the cost outputs
        gpu, total, bound = outputs.get(OUT_GPU_NODE_HOURLY), outputs.get(OUT_STACK_HOURLY), ""
        for key, said in OUT_STACK_HOURLY_BOUNDS.items():
            if total is None and outputs.get(key) is not None:
                total, bound = outputs[key], said
        return cls(
            gpu_node_hourly_usd=None if gpu is None else float(gpu),
            gpu_nodes=int(outputs.get(OUT_GPU_NODES) or 0),
            stack_hourly_usd=None if total is None else float(total),
            source=str(outputs[OUT_PRICE_SOURCE]),
            fixed_hourly_usd=float(outputs.get(OUT_FIXED_HOURLY) or 0.0),
            bound=bound,
        )


@dataclass(frozen=True)
class Rehearsal:
    """What the rehearsal answered with verl's own code (None where the outputs have nothing)."""

    record: str
    steps: int | None
    save_steps: list[int] | None
    rows: dict[str, Any] | None
    reward_samples: list[dict[str, Any]] | None
    versions: dict[str, Any] | None
    problems: list[str]

    @classmethod
    def from_outputs(cls, outputs: dict[str, Any]) -> Rehearsal | None:
        if not outputs.get(OUT_REHEARSAL_RECORD):
            return None  # a stack from before the rehearsal
        steps = outputs.get(OUT_REHEARSAL_STEPS)
        return cls(
            record=str(outputs[OUT_REHEARSAL_RECORD]),
            steps=int(steps) if isinstance(steps, int | float) else None,
            save_steps=_list(outputs.get(OUT_REHEARSAL_SAVE_STEPS)),
            rows=_dict(outputs.get(OUT_REHEARSAL_ROWS)),
            reward_samples=_list(outputs.get(OUT_REHEARSAL_REWARD)),
            versions=_dict(outputs.get(OUT_REHEARSAL_VERSIONS)),
            problems=[str(p) for p in _list(outputs.get(OUT_REHEARSAL_PROBLEMS)) or []],
        )


def _list(value: Any) -> list[Any] | None:
    return value if isinstance(value, list) else None


def _dict(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


@dataclass(frozen=True)
class Target:
    dashboard: dashboard_access.DashboardSpec
    submission_id: str
    stack: str | None
    price: RunPrice | None = None
    rehearsal: Rehearsal | None = None


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
    return Target(
        dashboard=spec,
        submission_id=str(submission_id),
        stack=args.stack,
        price=RunPrice.from_outputs(outputs),
        rehearsal=Rehearsal.from_outputs(outputs),
    )


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


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that say where the run is (every command takes them)."""
    parser.add_argument("stack", nargs="?", help="Pulumi stack (a4x, a4, a3u) to read outputs of")
    parser.add_argument("--submission-id", help="Ray job submission id (default: stack output)")
    reach = parser.add_argument_group("how to reach the Ray dashboard (default: stack outputs)")
    reach.add_argument("--dashboard-url", help="a directly reachable dashboard, e.g. local Ray")
    reach.add_argument("--kube-api-endpoint", help="GKE API server endpoint (IP or https URL)")
    reach.add_argument("--cluster-ca", help="cluster CA, base64 of the PEM (as GKE gives it)")
    reach.add_argument("--namespace", help="namespace of the RayCluster")
    reach.add_argument("--head-service", help="name of the Ray head Service")


def reach_advice(target: Target) -> str:
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


@contextmanager
def open_dashboard(
    target: Target,
    timeout_s: float,
    token_provider: dashboard_access.TokenProvider | None = None,
) -> Iterator[Dashboard]:
    """The job provider's dashboard client for `target`; a dashboard that does not answer is
    retried for timeout_s. Its errors become RunToolErrors that say what was tried."""
    with dashboard_access.client_args(target.dashboard, token_provider) as make_args:
        dashboard = Dashboard(
            address=dashboard_access.dashboard_address(target.dashboard),
            make_args=make_args,
            patience_s=timeout_s,
            reach_s=timeout_s,
            max_backoff_s=2.0,
        )
        try:
            yield dashboard
        except DashboardUnreachableError as exc:
            raise RunToolError(f"{exc}\n{reach_advice(target)}") from exc
        except ProviderRuntimeError as exc:  # refused credentials, an answer that is not Ray's
            raise RunToolError(str(exc)) from exc
        except RunToolError:
            raise
        except Exception as exc:  # ADC without credentials, a malformed answer: say where
            raise RunToolError(
                f"could not reach job {target.submission_id} at {dashboard.address}: "
                f"{type(exc).__name__}: {exc}\n{reach_advice(target)}"
            ) from exc


def job_details(dashboard: Dashboard, target: Target) -> Any:
    """The job's details (Ray's JobDetails); a RunToolError naming known jobs if it has none."""
    info = dashboard.job_info(target.submission_id)
    if info is None:
        raise RunToolError(_unknown_id_message(dashboard, target))
    return info


def _unknown_id_message(dashboard: Dashboard, target: Target) -> str:
    try:
        jobs = dashboard.list_jobs()
    except Exception:  # the listing only decorates the message
        jobs = []
    recent = sorted(jobs, key=lambda job: job.start_time or 0, reverse=True)
    known = [job.submission_id for job in recent if job.submission_id][:5]
    where = f"stack {target.stack}'s " if target.stack else "this "
    return (
        f"the Ray dashboard at {dashboard.address} knows no job with submission id "
        f"{target.submission_id!r}; check the id (`pulumi stack output jobSubmissionId`) and that "
        f"{where}dashboard belongs to the cluster the job ran on (a replaced RayCluster forgets "
        f"its jobs). Jobs it knows, newest first: {', '.join(known) if known else 'none'}"
    )
