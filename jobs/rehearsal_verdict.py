"""The rehearsal's verdict in `pulumi up`: a dynamic resource that reads the record the rehearsal
Job wrote to the bucket (components/rehearsal.py, verl_scripts/rehearsal.py) and either fails the
update with the record's problems — each setting, verl's or the library's own message and the fix,
as a message, not a traceback (jobs/provider_errors.py) — or gives the record's answers as
outputs: the run's length in steps and its save steps, the rows kept, the reward's sample scores,
the versions found in the training image.

The GPU node pool and the RayCluster (outside a reservation) and the GRPO job wait for this
resource, so a rehearsal that found a problem stops `pulumi up` before any of them.

Rules of pulumi.dynamic that shape this module (as jobs/ray_job.py): the provider is pickled into
the state and runs in `python -m pulumi.dynamic`, so it holds no client; the storage client is made
per call (Application Default Credentials, or STORAGE_EMULATOR_HOST in tests).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pulumi
import pulumi.dynamic

from jobs import provider_errors
from jobs.checkpoints import parse_gcs_url
from payloads.rehearse import problem_line

if TYPE_CHECKING:
    from google.cloud import storage

provider_errors.install_in_dynamic_host()

# Inputs: the record's gs:// URL, the Job's uid (a new Job, a new rehearsal: read again), and the
# kubectl hint for the pod's log.
INPUT_KEYS = ("record_url", "job_uid", "logs_hint")
# Outputs taken from the record (summary below).
OUTPUT_KEYS = (
    "ok",
    "steps",
    "save_steps",
    "length_source",
    "rows",
    "reward_samples",
    "versions",
    "problems",
    "notes",
)


def summary(record: dict[str, Any]) -> dict[str, Any]:
    """The record's answers as outputs (None where the record has none)."""
    length = record.get("length") if isinstance(record.get("length"), dict) else {}
    reward = record.get("reward") if isinstance(record.get("reward"), dict) else {}
    problems = [p for p in record.get("problems") or [] if isinstance(p, dict)]
    return {
        "ok": record.get("ok") is True and not problems,
        "steps": length.get("last_step"),
        "save_steps": length.get("save_steps"),
        "length_source": length.get("source"),
        "rows": record.get("data"),
        "reward_samples": reward.get("samples"),
        "versions": record.get("versions"),
        "problems": [problem_line(p) for p in problems],
        "notes": record.get("notes") or [],
    }


def failure_message(outs: dict[str, Any], record_url: str) -> str:
    lines = outs["problems"] or [
        "the record says ok=false without naming a problem: read it for its notes"
    ]
    return "\n".join(
        [
            "the rehearsal (verl's own code on this job's command, in the training image) found "
            "problems; no GPU trained:",
            *(f"  - {line}" for line in lines),
            f"record: {record_url}",
        ]
    )


def read_record(
    record_url: str, logs_hint: str, client: storage.Client | None = None
) -> dict[str, Any]:
    """The record's JSON object; ProviderRuntimeError naming what to do when it is absent or not
    a record."""
    from google.api_core import exceptions
    from google.auth import exceptions as auth_exceptions
    from google.cloud import storage

    bucket, path = parse_gcs_url(record_url)
    try:
        if client is None:
            client = storage.Client(project=None)
        text = client.bucket(bucket).blob(path).download_as_text()
    except exceptions.NotFound:
        raise provider_errors.ProviderRuntimeError(
            f"the rehearsal Job completed but wrote no record at {record_url}; its log says why: "
            f"{logs_hint}"
        ) from None
    except (exceptions.GoogleAPIError, auth_exceptions.GoogleAuthError) as error:
        raise provider_errors.ProviderRuntimeError(
            f"could not read the rehearsal's record {record_url}: {error}. Fix: give the "
            "credentials `pulumi up` runs with read access to the bucket (gcloud auth "
            "application-default login), then run `pulumi up` again"
        ) from None
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        record = None
        reason = f"not JSON ({error})"
    else:
        reason = "not a JSON object"
    if not isinstance(record, dict):
        raise provider_errors.ProviderRuntimeError(
            f"the rehearsal's record {record_url} is {reason}; its log: {logs_hint}"
        )
    return record


def existing_record(record_url: str, timeout_s: float = 10.0) -> dict[str, Any] | None:
    """The record of this command if an earlier rehearsal wrote it, for `pulumi up`'s cost block
    (verl's own step count instead of the program's estimate); None when it is absent or cannot
    be read (no bucket yet, no credentials): the estimate is then used, and said so."""
    try:
        from google.cloud import storage

        bucket, path = parse_gcs_url(record_url)
        client = storage.Client(project=None)
        text = client.bucket(bucket).blob(path).download_as_text(timeout=timeout_s, retry=None)
        record = json.loads(text)
    except Exception:  # any failure means "no record to use": the plan's estimate is said
        return None
    return record if isinstance(record, dict) else None


class RehearsalVerdictProvider(pulumi.dynamic.ResourceProvider):
    """Reads and judges the record; stateless (everything comes in the inputs)."""

    def _judged(self, props: dict[str, Any]) -> dict[str, Any]:
        record = read_record(props["record_url"], props["logs_hint"])
        outs = {**{k: props.get(k) for k in INPUT_KEYS}, **summary(record)}
        if not outs["ok"]:
            raise provider_errors.ProviderRuntimeError(failure_message(outs, props["record_url"]))
        return outs

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        return pulumi.dynamic.CreateResult(props["record_url"], self._judged(props))

    def diff(
        self, _id: str, olds: dict[str, Any], news: dict[str, Any]
    ) -> pulumi.dynamic.DiffResult:
        changed = [k for k in INPUT_KEYS if olds.get(k) != news.get(k)]
        return pulumi.dynamic.DiffResult(changes=bool(changed), replaces=[], stables=[])

    def update(
        self, _id: str, _olds: dict[str, Any], news: dict[str, Any]
    ) -> pulumi.dynamic.UpdateResult:
        return pulumi.dynamic.UpdateResult(self._judged(news))

    def read(self, id_: str, props: dict[str, Any]) -> pulumi.dynamic.ReadResult:
        """`pulumi refresh`: the record as it is now; kept as it was if it cannot be read."""
        try:
            record = read_record(props["record_url"], props.get("logs_hint") or "")
        except provider_errors.ProviderError:
            return pulumi.dynamic.ReadResult(id_, props)
        return pulumi.dynamic.ReadResult(id_, {**props, **summary(record)})

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        """The record stays in the bucket with the run's other files."""


class RehearsalVerdict(pulumi.dynamic.Resource, module="jobs", name="RehearsalVerdict"):
    """The rehearsal's record, judged (see the module docstring)."""

    ok: pulumi.Output[bool]
    steps: pulumi.Output[int | None]
    save_steps: pulumi.Output[list[int] | None]
    length_source: pulumi.Output[str | None]
    rows: pulumi.Output[dict[str, Any] | None]
    reward_samples: pulumi.Output[list[dict[str, Any]] | None]
    versions: pulumi.Output[dict[str, Any] | None]
    problems: pulumi.Output[list[str]]
    notes: pulumi.Output[list[str]]

    def __init__(
        self,
        name: str,
        record_url: pulumi.Input[str],
        job_uid: pulumi.Input[str],
        logs_hint: str,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props: dict[str, Any] = {
            "record_url": record_url,
            "job_uid": job_uid,
            "logs_hint": logs_hint,
            **{key: None for key in OUTPUT_KEYS},
        }
        super().__init__(RehearsalVerdictProvider(), name, props, opts)
