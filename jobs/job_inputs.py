"""The RayJob's inputs: what the program passes (RayJobArgs), their checks (input_problems, the
messages `pulumi preview` and the provider's check show), the provider's validated view
(JobInputs), the deterministic submission id, and how diff compares old and new inputs.

The contract these implement is in jobs/ray_job.py's docstring.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from pulumi.output import Unknown

# The wire form of a value not known until apply (preview); the host turns it into an Unknown.
from pulumi.runtime.rpc import UNKNOWN

from jobs import dashboard_access, job_evidence, secret_scan
from jobs.checkpoints import normalize_root, parse_gcs_url
from jobs.provider_errors import ProviderInputError

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
    "user_stop",
    "attempts",
    "restarts_used",
)


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


DEFAULT_DEADLINES = JobDeadlines()


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
        return getattr(DEFAULT_DEADLINES, key.removeprefix("deadline_"), None)
    return value


def differs(key: str, olds: Mapping[str, Any], news: Mapping[str, Any]) -> bool:
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
