"""How the job provider reaches the Ray dashboard (the Jobs API).

Two forms, both plain dicts so they travel as Pulumi inputs:

- ``url_dashboard("http://127.0.0.1:8265")``: a dashboard the machine running Pulumi can reach
  directly (a local head in tests, an existing cluster).
- ``kube_proxy_dashboard(endpoint, ca, namespace, service)``: the head Service through the GKE API
  server's service proxy, ``https://<endpoint>/api/v1/namespaces/<ns>/services/<svc>:<port>/proxy``.
  The API server authenticates a Google OAuth access token (fetched from Application Default
  Credentials when a call starts, never stored in inputs or state) and its certificate is checked
  against the cluster CA. No public dashboard, no `kubectl port-forward` process.

Nothing in this module keeps a client, a token or a file open between calls: the provider is
pickled into the Pulumi state and runs in another process.
"""

from __future__ import annotations

import base64
import binascii
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

TokenProvider = Callable[[], str]

# connect, read timeouts of one HTTP request to the dashboard (see RequestBudget).
REQUEST_TIMEOUT_S = (10.0, 60.0)

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
_KUBE_KEYS = frozenset(
    {"kube_api_endpoint", "cluster_ca_certificate", "namespace", "service", "port_name"}
)


@dataclass(frozen=True)
class DashboardUrl:
    url: str  # http(s)://host:port[/prefix]


@dataclass(frozen=True)
class KubeServiceProxy:
    # The GKE endpoint (IP or host[:port], https assumed) or a full base URL with its scheme
    # (tests point it at a plain-http proxy on 127.0.0.1).
    kube_api_endpoint: str
    # Base64 PEM as in GKE's master_auth.cluster_ca_certificate (a raw PEM is accepted too);
    # empty means the system trust store.
    cluster_ca_certificate: str
    namespace: str
    service: str
    port_name: str = "dashboard"

    @property
    def base_url(self) -> str:
        endpoint = self.kube_api_endpoint.rstrip("/")
        return endpoint if "://" in endpoint else f"https://{endpoint}"

    @property
    def proxy_path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/services/{self.service}:{self.port_name}/proxy"


DashboardSpec = DashboardUrl | KubeServiceProxy


@dataclass(frozen=True)
class ClientArgs:
    """Keyword arguments for ray.job_submission.JobSubmissionClient."""

    address: str  # safe to print and to store: holds no credentials
    headers: dict[str, str] = field(repr=False)  # may hold a bearer token: never print or store
    verify: bool | str  # True, or the path of a CA bundle file


def url_dashboard(url: Any) -> dict[str, Any]:
    """Program-side input for a directly reachable dashboard (url may be a pulumi.Input)."""
    return {"url": url}


def kube_proxy_dashboard(
    kube_api_endpoint: Any,
    cluster_ca_certificate: Any,
    namespace: Any,
    service: Any,
    port_name: str = "dashboard",
) -> dict[str, Any]:
    """Program-side input for the API-server service proxy (values may be pulumi.Inputs)."""
    return {
        "kube_api_endpoint": kube_api_endpoint,
        "cluster_ca_certificate": cluster_ca_certificate,
        "namespace": namespace,
        "service": service,
        "port_name": port_name,
    }


def _never_unknown(_value: Any) -> bool:
    return False


def check_dashboard(value: Any, is_unknown: Callable[[Any], bool] = _never_unknown) -> None:
    """Raise ValueError for the first problem in the known parts of a `dashboard` input.

    is_unknown tells which values are not known yet (a preview: the GKE endpoint and CA of a
    cluster that does not exist yet); those are skipped, never reported, and the rest is still
    checked, so a preview catches a wrong key or an empty namespace.
    """
    if is_unknown(value):
        return
    if not isinstance(value, Mapping):
        raise ValueError(
            f"dashboard must be a mapping, got {type(value).__name__}; use url_dashboard(...) or "
            "kube_proxy_dashboard(...)"
        )
    keys = set(value)
    if keys == {"url"}:
        url = value["url"]
        if is_unknown(url):
            return
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(
                f"dashboard.url must be an http(s) URL, got {url!r}; e.g. 'http://127.0.0.1:8265'"
            )
        return
    if keys <= _KUBE_KEYS and {"kube_api_endpoint", "namespace", "service"} <= keys:
        for key in ("kube_api_endpoint", "namespace", "service"):
            if is_unknown(value[key]):
                continue
            if not isinstance(value[key], str) or not value[key]:
                raise ValueError(f"dashboard.{key} must be a non-empty string, got {value[key]!r}")
        port_name = value.get("port_name")
        if port_name is not None and not is_unknown(port_name) and not isinstance(port_name, str):
            raise ValueError(
                f"dashboard.port_name must be the head Service's port name, got {port_name!r}; "
                "e.g. 'dashboard'"
            )
        ca = value.get("cluster_ca_certificate")
        if ca and not is_unknown(ca):
            if not isinstance(ca, str):
                raise ValueError(
                    "dashboard.cluster_ca_certificate must be a string (base64 of the PEM, as in "
                    f"master_auth.cluster_ca_certificate), got {type(ca).__name__}"
                )
            decode_ca_certificate(ca)
        return
    raise ValueError(
        f"dashboard has keys {sorted(keys)}; expected either ['url'] or "
        f"{sorted(_KUBE_KEYS)} (port_name and cluster_ca_certificate optional)"
    )


def parse_dashboard(value: Mapping[str, Any]) -> DashboardSpec:
    """Turn a known `dashboard` input into a spec; ValueError names the bad key and a valid form."""
    check_dashboard(value)
    if set(value) == {"url"}:
        return DashboardUrl(url=value["url"].rstrip("/"))
    return KubeServiceProxy(
        kube_api_endpoint=value["kube_api_endpoint"],
        cluster_ca_certificate=value.get("cluster_ca_certificate") or "",
        namespace=value["namespace"],
        service=value["service"],
        port_name=value.get("port_name") or "dashboard",
    )


def decode_ca_certificate(value: str) -> bytes:
    """GKE gives the CA as base64 of the PEM; accept that or the PEM itself."""
    if value.lstrip().startswith("-----BEGIN"):
        pem = value.encode()
    else:
        try:
            pem = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError(
                "dashboard.cluster_ca_certificate is neither a PEM nor base64 of a PEM "
                f"({exc}); pass the cluster's master_auth.cluster_ca_certificate as is"
            ) from exc
    if b"-----BEGIN CERTIFICATE-----" not in pem:
        raise ValueError(
            "dashboard.cluster_ca_certificate does not contain a PEM certificate "
            "('-----BEGIN CERTIFICATE-----'); pass the cluster's master_auth.cluster_ca_certificate"
        )
    return pem


def dashboard_address(spec: DashboardSpec) -> str:
    """The Jobs API base URL (no credentials in it)."""
    if isinstance(spec, DashboardUrl):
        return spec.url
    return spec.base_url + spec.proxy_path


def dashboard_hint(spec: DashboardSpec, submission_id: str) -> str:
    """A command a human can paste to see the dashboard and the job's log."""
    if isinstance(spec, DashboardUrl):
        return (
            f"open {spec.url}  # Ray dashboard; job log: "
            f"ray job logs {submission_id} --address {spec.url} --follow"
        )
    return (
        f"kubectl port-forward -n {spec.namespace} service/{spec.service} 8265:{spec.port_name}"
        f"  # then open http://127.0.0.1:8265; job log: "
        f"ray job logs {submission_id} --address http://127.0.0.1:8265 --follow"
    )


def google_adc_token() -> str:
    """A fresh OAuth access token from Application Default Credentials (cloud-platform scope)."""
    import google.auth
    import google.auth.transport.requests

    credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
    credentials.refresh(google.auth.transport.requests.Request())
    token = credentials.token
    if not token:
        raise RuntimeError(
            "Application Default Credentials returned no access token; run "
            "`gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS"
        )
    return str(token)


@contextmanager
def client_args(
    spec: DashboardSpec, token_provider: TokenProvider | None = None
) -> Iterator[Callable[[], ClientArgs]]:
    """Yield a factory of JobSubmissionClient arguments, valid inside the `with` block.

    Each factory call fetches a new token (kube proxy form), so a long wait can build a new client
    before the previous token expires. The CA is written to a private temporary file for the block
    (requests and aiohttp verify against a file path) and removed afterwards.
    """
    if isinstance(spec, DashboardUrl):
        yield lambda: ClientArgs(address=spec.url, headers={}, verify=True)
        return
    tokens = token_provider or google_adc_token
    ca_path: str | None = None
    try:
        if spec.cluster_ca_certificate and spec.base_url.startswith("https://"):
            handle, ca_path = tempfile.mkstemp(prefix="ray-dashboard-ca-", suffix=".pem")
            with os.fdopen(handle, "wb") as ca_file:
                ca_file.write(decode_ca_certificate(spec.cluster_ca_certificate))
        verify: bool | str = ca_path if ca_path is not None else True
        address = dashboard_address(spec)

        def build() -> ClientArgs:
            return ClientArgs(
                address=address, headers={"Authorization": f"Bearer {tokens()}"}, verify=verify
            )

        yield build
    finally:
        if ca_path is not None:
            os.unlink(ca_path)


@dataclass
class RequestBudget:
    """The (connect, read) timeouts of one operation's requests to the dashboard.

    Until the dashboard has answered (a response below 500, not 429), every request ends by
    retry_until, the operation's patience: a silent or black-holed dashboard is decided
    unreachable then. Once it has answered, each request gets per_request_s of its own (at most
    REQUEST_TIMEOUT_S[1]), ending by retry_until + per_request_s at the latest: a slow dashboard
    that answers every request is not declared unreachable because the connection check and the
    call shared one budget.
    """

    retry_until: float  # time.monotonic() value
    per_request_s: float
    answered: bool = False

    def timeout(self) -> tuple[float, float]:
        now = time.monotonic()
        until = self.retry_until + (self.per_request_s if self.answered else 0.0)
        read = max(0.5, min(self.per_request_s, until - now))
        return (min(REQUEST_TIMEOUT_S[0], read), read)
