"""Contract tests: the RayJob dynamic resource through the real `python -m pulumi.dynamic` host.

The engine never calls jobs/ray_job.py directly: it starts the host in the project folder, which
unpickles the provider from the `__provider` input and answers gRPC calls. These tests speak that
protocol (tests/support/dynamic_host.py) in the order the engine uses:

- preview of a new stack: Check only, with inputs not known yet (the GKE endpoint and CA of a
  cluster that does not exist, a wholly unknown input, every input unknown);
- `pulumi up`: Check, Create;
- preview of an unchanged stack: Check, Diff -> DIFF_NONE;
- preview of an update that replaces the cluster: Check, Diff -> replace (delete first);
- an in-place change: Diff -> DIFF_SOME without replaces, Update;
- a changed spec: Diff -> replace, Delete (the running job stops), Create;
- refresh: Read with the prior outputs; a job the head no longer knows reads back as gone;
- destroy: Delete.

A real Ray head on 127.0.0.1 runs the jobs and a GCS emulator holds the checkpoints (in the
module's own bucket); the session's head, emulator and host serve it (tests/conftest.py).
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pulumi.output import Unknown
from pulumi.runtime.proto import provider_pb2
from pulumi.runtime.rpc import UNKNOWN
from ray.job_submission import JobStatus, JobSubmissionClient

from jobs import dashboard_access
from jobs.ray_job import JobDeadlines, RayJobArgs, RayJobProvider
from payloads.export.supervise import LOG_PREFIX
from tests.support.dynamic_host import (
    PROVIDER_KEY,
    DynamicHost,
    engine_inputs,
    from_wire,
    grpo_job_urn,
)
from tests.support.gcs_emulator import GcsEmulator
from tests.support.ray_head import RayHead

# Starts real processes (a Ray head, the provider host, a GCS emulator or subprocesses).
pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[1]
FAKE_TRAINER = REPO / "tests" / "job_fixtures" / "fake_trainer.py"
BUCKET = "contract-ckpt"
PREFIX = "contract"
URN = grpo_job_urn("contract")
FAST = JobDeadlines(
    submit_s=30.0, start_s=60.0, startup_grace_s=0.3, wait_s=60.0, stop_s=30.0,
    poll_interval_s=0.1,
)  # fmt: skip
# How long a test waits for the fake trainer to write its first checkpoint.
PROGRESS_DEADLINE_S = 60.0


def job_props(
    dashboard: Any, gcs_url: str, run: str, changes: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A training-like job's inputs: the fake trainer writes verl's checkpoint layout to `run`."""
    root = f"gs://{BUCKET}/{run}"
    command = [
        sys.executable, str(FAKE_TRAINER), "--root", root, "--steps", "100000",
        "--step-seconds", "0.3", "--world-size", "2",
    ]  # fmt: skip
    props = RayJobArgs(
        entrypoint=shlex.join(command),
        runtime_env={"env_vars": {"STORAGE_EMULATOR_HOST": gcs_url}},
        dashboard=dashboard,
        checkpoint_root=root,
        submission_id_prefix=PREFIX,
        wait_for="running",
        deadlines=FAST,
    ).to_props()
    return {**props, **(changes or {})}


def news(props: dict[str, Any]) -> Any:
    """The inputs as the engine sends them, with the provider pickled as the SDK pickles it."""
    return engine_inputs(props, RayJobProvider())


def failures(response: provider_pb2.CheckResponse) -> list[tuple[str, str]]:
    return [(f.property, f.reason) for f in response.failures]


# -- preview of a new stack: Check with values not known yet ---------------------------------

PLACEHOLDER = dashboard_access.url_dashboard("http://127.0.0.1:1")
PREVIEW_INPUTS: dict[str, dict[str, Any]] = {
    # The first `pulumi up` of a stack: the GKE cluster does not exist yet.
    "cluster-endpoint-and-ca-unknown": {
        "dashboard": dashboard_access.kube_proxy_dashboard(
            UNKNOWN, UNKNOWN, "default", "h200-ray-cluster-head-svc"
        )
    },
    "dashboard-wholly-unknown": {"dashboard": UNKNOWN},
    "checkpoint-bucket-unknown": {"checkpoint_root": UNKNOWN},
    "runtime-env-value-unknown": {"runtime_env": {"env_vars": {"BUCKET": UNKNOWN}}},
    "entrypoint-unknown": {"entrypoint": UNKNOWN},
}


@pytest.mark.parametrize("case", sorted(PREVIEW_INPUTS))
def test_preview_check_passes_unknown_inputs_through(host: DynamicHost, case: str) -> None:
    props = job_props(PLACEHOLDER, "http://127.0.0.1:1", "preview", PREVIEW_INPUTS[case])
    checked = host.check(URN, None, news(props))
    assert failures(checked) == []
    # The engine keeps what Check returns as the resource's inputs: the unknowns stay unknown
    # (the preview shows them as "known after apply") and the provider stays attached.
    returned = from_wire(checked.inputs)
    for key, value in PREVIEW_INPUTS[case].items():
        assert _unknown_paths(returned[key]) == _unknown_paths(value), key
    assert returned[PROVIDER_KEY] == from_wire(news(props))[PROVIDER_KEY]


def test_preview_check_passes_when_every_input_is_unknown(host: DynamicHost) -> None:
    props = {key: UNKNOWN for key in job_props(PLACEHOLDER, "", "x")}
    checked = host.check(URN, None, news(props))
    assert failures(checked) == []
    returned = from_wire(checked.inputs)
    assert all(isinstance(returned[key], Unknown) for key in props)


def test_preview_check_still_reports_known_mistakes_next_to_unknowns(host: DynamicHost) -> None:
    # The endpoint and CA are unknown, the namespace is known and wrong: only the known mistake is
    # reported, with its key, and the unknowns are not mistaken for bad values.
    dashboard = dashboard_access.kube_proxy_dashboard(UNKNOWN, UNKNOWN, "", "ray-head-svc")
    props = job_props(dashboard, "http://127.0.0.1:1", "preview", {"deadline_stop_s": -1})
    checked = host.check(URN, None, news(props))
    assert failures(checked) == [
        ("dashboard", "dashboard.namespace must be a non-empty string, got ''"),
        ("deadline_stop_s", "deadline_stop_s must be a number of seconds >= 0, got -1.0; e.g. 600"),
    ]


# -- up, re-preview, replaced cluster, in-place change, changed spec, refresh, destroy --------


def test_engine_sequence_from_first_up_to_destroy(
    host: DynamicHost, head: RayHead, gcs: GcsEmulator, jobs: JobSubmissionClient
) -> None:
    dashboard = dashboard_access.url_dashboard(head.dashboard_url)
    first = job_props(dashboard, gcs.url, "run-a")

    # `pulumi up` previews first: the head's address is not known yet.
    preview = host.check(URN, None, news({**first, "dashboard": {"url": UNKNOWN}}))
    assert failures(preview) == []

    # up: Check, Create. The job runs on the head under its deterministic id.
    checked = host.check(URN, None, news(first))
    assert failures(checked) == []
    created = host.create(URN, checked.inputs)
    sid = created.id
    # `contract-<12 hex>` (the derivation is pinned by test_ray_job_provider.py's
    # test_submission_ids_of_existing_stacks_do_not_change), and the head's only job of this spec.
    assert re.fullmatch(rf"{PREFIX}-[0-9a-f]{{12}}", sid)
    assert [j.submission_id for j in jobs.list_jobs() if j.entrypoint == first["entrypoint"]] == [
        sid
    ]
    state = from_wire(created.properties)
    assert state["status"] == "RUNNING" and state["submission_id"] == sid
    assert state[PROVIDER_KEY] == from_wire(checked.inputs)[PROVIDER_KEY]
    assert jobs.get_job_status(sid) == JobStatus.RUNNING

    # Preview of the unchanged stack: Check(olds = stored inputs), Diff against the outputs.
    again = host.check(URN, checked.inputs, news(first))
    assert failures(again) == []
    unchanged = host.diff(URN, sid, created.properties, again.inputs, checked.inputs)
    assert unchanged.changes == provider_pb2.DiffResponse.DIFF_NONE

    # Preview of an update that replaces the cluster: the new head's address is unknown. The job
    # is shown as replaced (stopped first), nothing is stopped by the preview itself.
    moved = host.check(URN, checked.inputs, news({**first, "dashboard": {"url": UNKNOWN}}))
    assert failures(moved) == []
    replaced = host.diff(URN, sid, created.properties, moved.inputs, checked.inputs)
    assert replaced.changes == provider_pb2.DiffResponse.DIFF_SOME
    assert (list(replaced.replaces), replaced.deleteBeforeReplace) == (["dashboard"], True)
    assert jobs.get_job_status(sid) == JobStatus.RUNNING

    # A watch setting changes: updated in place, same job.
    patient = {**first, "deadline_wait_s": 120.0}
    patient_checked = host.check(URN, checked.inputs, news(patient))
    in_place = host.diff(URN, sid, created.properties, patient_checked.inputs, checked.inputs)
    assert in_place.changes == provider_pb2.DiffResponse.DIFF_SOME
    assert list(in_place.replaces) == []
    updated = host.update(URN, sid, created.properties, patient_checked.inputs)
    updated_state = from_wire(updated.properties)
    assert (updated_state["submission_id"], updated_state["deadline_wait_s"]) == (sid, 120.0)
    assert jobs.get_job_status(sid) == JobStatus.RUNNING

    # A changed spec: Diff says replace, delete first; the engine deletes, then creates.
    second = job_props(dashboard, gcs.url, "run-b")
    second_checked = host.check(URN, patient_checked.inputs, news(second))
    assert failures(second_checked) == []
    respec = host.diff(URN, sid, updated.properties, second_checked.inputs, checked.inputs)
    assert respec.changes == provider_pb2.DiffResponse.DIFF_SOME
    assert (list(respec.replaces), respec.deleteBeforeReplace) == (["entrypoint"], True)
    host.delete(URN, sid, updated.properties)
    assert jobs.get_job_status(sid) == JobStatus.STOPPED
    recreated = host.create(URN, second_checked.inputs)
    new_sid = recreated.id
    assert re.fullmatch(rf"{PREFIX}-[0-9a-f]{{12}}", new_sid)
    assert [j.submission_id for j in jobs.list_jobs() if j.entrypoint == second["entrypoint"]] == [
        new_sid
    ]
    assert new_sid != sid and jobs.get_job_status(new_sid) == JobStatus.RUNNING

    # refresh: Read with the prior outputs, until the trainer has written a checkpoint.
    outputs = recreated.properties
    deadline = time.monotonic() + PROGRESS_DEADLINE_S
    while True:
        read = host.read(URN, new_sid, outputs, second_checked.inputs)
        assert read.id == new_sid
        refreshed = from_wire(read.properties)
        if refreshed.get("latest_step") is not None or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    root = f"gs://{BUCKET}/run-b"
    assert refreshed["status"] == "RUNNING"
    assert refreshed.get("latest_step", 0) >= 1
    assert refreshed["checkpoints"][0] == f"{root}/global_step_1"
    assert refreshed["latest_checkpoint"] == f"{root}/global_step_{refreshed['latest_step']:.0f}"
    assert refreshed[PROVIDER_KEY] == from_wire(second_checked.inputs)[PROVIDER_KEY]

    # destroy: Delete with the refreshed outputs stops the running job and keeps its record.
    host.delete(URN, new_sid, read.properties)
    assert jobs.get_job_status(new_sid) == JobStatus.STOPPED

    # A refresh of a job whose record is gone from the head drops it from the state (empty id).
    # Ray's monitor of a just-stopped job can write its record again after a delete when it sees
    # the supervisor die (job_manager.py _monitor_job: FAILED "Job supervisor actor died"), so the
    # record is deleted until it stays gone for a few seconds.
    assert jobs.delete_job(new_sid) is True
    _until_the_record_stays_deleted(jobs, new_sid)
    gone = host.read(URN, new_sid, read.properties, second_checked.inputs)
    assert gone.id == ""

    # What the provider printed reached the host's stdout (the CLI shows it as diagnostics).
    assert host.alive()
    stopping = f"[ray-job {sid}] RUNNING: stopping"
    assert any(stopping in line for line in host.output_once(stopping)), host.output


def test_a_job_with_a_working_dir_is_unchanged_on_the_next_preview(
    host: DynamicHost, head: RayHead, gcs: GcsEmulator, jobs: JobSubmissionClient, tmp_path: Path
) -> None:
    """The GRPO job ships its runner as the runtime env's working_dir (training/assembly.py).
    JobSubmissionClient.submit_job uploads it and writes the package URI over
    runtime_env["working_dir"] (ray/_private/runtime_env/working_dir.py
    upload_working_dir_if_needed); Ray 2.47's client does so in the caller's dict
    (ray/dashboard/modules/job/sdk.py, no copy; 2.60 deep-copies first). The state must keep
    the input as given, or every later `pulumi up` sees a changed spec and stops the run to
    resubmit it: the GPU run, whose provider host had Ray 2.47, saw diff replace on
    runtime_env (bench/results/gpu-run-1gpu-2026-12-04.json)."""
    (tmp_path / "runner.txt").write_text("shipped with the job\n")
    dashboard = dashboard_access.url_dashboard(head.dashboard_url)
    first = job_props(dashboard, gcs.url, "run-wd")
    first["runtime_env"] = {**first["runtime_env"], "working_dir": str(tmp_path)}
    checked = host.check(URN, None, news(first))
    created = host.create(URN, checked.inputs)
    try:
        assert from_wire(created.properties)["runtime_env"] == first["runtime_env"]
        again = host.check(URN, checked.inputs, news(first))
        unchanged = host.diff(URN, created.id, created.properties, again.inputs, checked.inputs)
        assert unchanged.changes == provider_pb2.DiffResponse.DIFF_NONE, list(unchanged.diffs)
        read = host.read(URN, created.id, created.properties, checked.inputs)
        assert from_wire(read.properties)["runtime_env"] == first["runtime_env"]
    finally:
        host.delete(URN, created.id, created.properties)
    assert jobs.get_job_status(created.id) == JobStatus.STOPPED


def _unknown_paths(value: Any, path: str = "") -> list[str]:
    """Where in a value the unknowns are (the sentinel string or an Unknown object)."""
    if isinstance(value, Unknown) or value == UNKNOWN:
        return [path]
    if isinstance(value, dict):
        return [p for key in sorted(value) for p in _unknown_paths(value[key], f"{path}.{key}")]
    if isinstance(value, list):
        return [p for i, item in enumerate(value) for p in _unknown_paths(item, f"{path}[{i}]")]
    return []


def _until_the_record_stays_deleted(jobs: JobSubmissionClient, sid: str) -> None:
    quiet_since = time.monotonic()
    deadline = quiet_since + PROGRESS_DEADLINE_S
    while time.monotonic() - quiet_since < 5.0:
        assert time.monotonic() < deadline, f"{sid}'s record keeps coming back"
        if sid in {job.submission_id for job in jobs.list_jobs()}:
            jobs.delete_job(sid)
            quiet_since = time.monotonic()
        time.sleep(0.5)


def test_refresh_reads_the_runners_attempts_and_restarts(
    host: DynamicHost, head: RayHead, jobs: JobSubmissionClient
) -> None:
    # The runner prints a summary line at each attempt's start and end (payloads/export/
    # supervise.py _save); the last one in the log is the state. Two attempts, one restart.
    first = {"max_restarts": 3, "restarts_used": 0, "attempts": [{"number": 1}]}
    last = {"max_restarts": 3, "restarts_used": 1, "attempts": [{"number": 1}, {"number": 2}]}
    script = (
        f"print({LOG_PREFIX + json.dumps(first)!r}, flush=True)\n"
        f"print({LOG_PREFIX + json.dumps(last)!r}, flush=True)\n"
        "print('step:1 - training/global_step:1 - timing_s/step:0.1', flush=True)\n"
        "import time; time.sleep(600)\n"
    )
    props = RayJobArgs(
        entrypoint=shlex.join([sys.executable, "-c", script]),
        runtime_env={},
        dashboard=dashboard_access.url_dashboard(head.dashboard_url),
        checkpoint_root=None,
        submission_id_prefix="recovery-counts",
        wait_for="running",
        deadlines=FAST,
    ).to_props()
    checked = host.check(URN, None, news(props))
    created = host.create(URN, checked.inputs)
    state = from_wire(created.properties)
    assert (state.get("attempts"), state.get("restarts_used")) == (None, None)
    deadline = time.monotonic() + PROGRESS_DEADLINE_S
    while True:
        read = host.read(URN, created.id, created.properties, checked.inputs)
        refreshed = from_wire(read.properties)
        if refreshed.get("attempts") is not None or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert (refreshed["attempts"], refreshed["restarts_used"]) == (2, 1)
    assert refreshed["status"] == "RUNNING"
    host.delete(URN, created.id, read.properties)
    assert jobs.get_job_status(created.id) == JobStatus.STOPPED
