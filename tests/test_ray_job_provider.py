"""The Ray job dynamic provider (jobs/ray_job.py) against a real local Ray head and GCS emulator.

Unit tests: they call the provider's methods directly, in the order the engine would (check ->
diff -> delete/create/update/read), and look at the cluster through Ray's own
JobSubmissionClient. What the engine really sends, through the real `python -m pulumi.dynamic`
host over gRPC, is covered by the contract tests in test_ray_job_contract.py and
test_preview_unknowns.py. The session's Ray head and emulator (tests/conftest.py) serve it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import shlex
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import dill
import pytest
from pulumi.dynamic.dynamic import serialize_provider
from pulumi.output import Unknown
from ray._raylet import GcsClient
from ray.dashboard.modules.job.common import JobInfoStorageClient
from ray.exceptions import AuthenticationError
from ray.job_submission import JobStatus, JobSubmissionClient

from jobs import dashboard_access
from jobs.dashboard_client import is_auth_failure, state_api_supervisor_known
from jobs.dashboard_client import is_transient as _is_transient
from jobs.ray_job import (
    UNKNOWN,
    JobDeadlines,
    RayJobArgs,
    RayJobProvider,
    find_tagged_result,
    input_problems,
    submission_id,
)
from tests.support.gcs_emulator import GcsEmulator
from tests.support.local_proxies import (
    TcpForwarder,
    make_tls_material,
    start_service_proxy,
)
from tests.support.ray_head import RayHead, free_port, stop_job

# Starts real processes (a Ray head, the provider host, a GCS emulator or subprocesses).
pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[1]
FAKE_TRAINER = REPO / "tests" / "job_fixtures" / "fake_trainer.py"
BUCKET = "provider-ckpt"
FAST = JobDeadlines(
    submit_s=60.0,
    start_s=60.0,
    startup_grace_s=0.3,
    wait_s=60.0,
    stop_s=30.0,
    poll_interval_s=0.1,
)


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gcs(gcs: GcsEmulator) -> Iterator[GcsEmulator]:
    """The module's bucket (tests/conftest.py); the provider's own checkpoint discovery uses the
    default storage client, which finds the emulator through STORAGE_EMULATOR_HOST."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STORAGE_EMULATOR_HOST", gcs.url)
        yield gcs


def props(
    dashboard: dict[str, Any],
    gcs: GcsEmulator,
    run: str,
    *,
    steps: int = 2,
    step_seconds: float = 0.0,
    fail_at_step: int = 0,
    log_lines_per_step: int = 1,
    wait_for: str = "running",
    deadlines: JobDeadlines = FAST,
) -> dict[str, Any]:
    """Inputs as the engine hands them to the provider; `run` names the checkpoint folder."""
    root = f"gs://{BUCKET}/{run}"
    command = [
        sys.executable, str(FAKE_TRAINER), "--root", root, "--steps", str(steps),
        "--step-seconds", str(step_seconds), "--fail-at-step", str(fail_at_step),
        "--log-lines-per-step", str(log_lines_per_step), "--world-size", "2",
    ]  # fmt: skip
    return RayJobArgs(
        entrypoint=shlex.join(command),
        runtime_env={
            "env_vars": {"STORAGE_EMULATOR_HOST": gcs.url, "TOKENIZERS_PARALLELISM": "true"}
        },
        dashboard=dashboard,
        checkpoint_root=root,
        submission_id_prefix="test",
        wait_for=wait_for,
        deadlines=deadlines,
    ).to_props()


def long_running(head: RayHead, gcs: GcsEmulator, run: str) -> dict[str, Any]:
    return props(dashboard_access.url_dashboard(head.dashboard_url), gcs, run, steps=100_000,
                 step_seconds=0.5)  # fmt: skip


def jobs_with_id(jobs: JobSubmissionClient, prefix: str) -> list[str]:
    return sorted(
        job.submission_id
        for job in jobs.list_jobs()
        if job.submission_id and job.submission_id.startswith(prefix)
    )


def supervisor_states(head: RayHead, sid: str) -> list[str]:
    """The states of every job supervisor actor Ray started for the id (its state API)."""
    query = urllib.parse.urlencode(
        {
            "filter_keys": "name",
            "filter_predicates": "=",
            "filter_values": f"_ray_internal_job_actor_{sid}",
            "limit": 100,
        }
    )
    with urllib.request.urlopen(f"{head.dashboard_url}/api/v0/actors?{query}", timeout=30) as r:
        return sorted(actor["state"] for actor in json.load(r)["data"]["result"]["result"])


def stop_quietly(provider: RayJobProvider, sid: str, state: dict[str, Any]) -> None:
    provider.delete(sid, state)


# -- against the real head --------------------------------------------------------------------


def test_submit_runs_to_success_and_reads_checkpoints_back(
    provider: RayJobProvider, head: RayHead, gcs: GcsEmulator, jobs: JobSubmissionClient
) -> None:
    inputs = props(
        dashboard_access.url_dashboard(head.dashboard_url),
        gcs,
        "success",
        steps=3,
        wait_for="finished",
    )
    created = provider.create(inputs)
    sid = created.id
    outs = created.outs
    assert outs is not None
    # The id the head ran the job under: `test-<12 hex>` (the derivation is pinned by
    # test_submission_ids_of_existing_stacks_do_not_change), the only job of this spec.
    assert re.fullmatch(r"test-[0-9a-f]{12}", sid)
    assert [j.submission_id for j in jobs.list_jobs() if j.entrypoint == inputs["entrypoint"]] == [
        sid
    ]
    assert jobs.get_job_status(sid) == JobStatus.SUCCEEDED
    root = f"gs://{BUCKET}/success"
    expected = [f"{root}/global_step_{n}" for n in (1, 2, 3)]
    assert outs["status"] == "SUCCEEDED"
    assert outs["message"] == "Job finished successfully."
    assert outs["submission_id"] == sid
    assert outs["checkpoint_root"] == root
    assert outs["checkpoints"] == expected
    assert (outs["latest_step"], outs["latest_checkpoint"]) == (3, f"{root}/global_step_3")
    assert outs["start_time"] is not None and outs["end_time"] is not None
    assert outs["start_time"] <= outs["end_time"]
    assert f"ray job logs {sid} --address {head.dashboard_url}" in outs["dashboard_hint"]
    # Every input is kept in the state: diff and update receive the old state, not old inputs.
    assert {k: outs[k] for k in inputs if k != "checkpoint_root"} == {
        k: v for k, v in inputs.items() if k != "checkpoint_root"
    }

    refreshed = provider.read(sid, outs)
    assert refreshed.id == sid and refreshed.outs is not None
    assert refreshed.outs["status"] == "SUCCEEDED"
    assert refreshed.outs["checkpoints"] == expected
    assert refreshed.outs["latest_step"] == 3


def test_create_returns_while_running_and_a_second_create_adopts(
    provider: RayJobProvider, head: RayHead, gcs: GcsEmulator, jobs: JobSubmissionClient
) -> None:
    inputs = long_running(head, gcs, "adopt")
    first = provider.create(inputs)
    assert first.outs is not None and first.outs["status"] == "RUNNING"
    try:
        second = provider.create(inputs)
        assert second.id == first.id
        assert second.outs is not None and second.outs["status"] == "RUNNING"
        assert jobs_with_id(jobs, first.id) == [first.id]
    finally:
        stop_quietly(provider, first.id, first.outs)


def test_destroy_stops_a_running_job_and_is_idempotent(
    provider: RayJobProvider, head: RayHead, gcs: GcsEmulator, jobs: JobSubmissionClient
) -> None:
    created = provider.create(long_running(head, gcs, "destroy"))
    assert created.outs is not None
    assert jobs.get_job_status(created.id) == JobStatus.RUNNING
    provider.delete(created.id, created.outs)
    assert jobs.get_job_status(created.id) == JobStatus.STOPPED
    provider.delete(created.id, created.outs)  # a second destroy finds it terminal: no error
    assert jobs.get_job_status(created.id) == JobStatus.STOPPED


def test_changed_spec_replaces_and_stops_the_old_job_before_the_new_one_starts(
    provider: RayJobProvider, head: RayHead, gcs: GcsEmulator, jobs: JobSubmissionClient
) -> None:
    old_inputs = long_running(head, gcs, "replace")
    old = provider.create(old_inputs)
    assert old.outs is not None
    new_inputs = {**old_inputs, "entrypoint": old_inputs["entrypoint"] + " --save-freq 5"}

    diff = provider.diff(old.id, old.outs, new_inputs)
    assert diff.changes is True
    assert diff.replaces == ["entrypoint"]
    assert diff.delete_before_replace is True
    # What the engine does for delete_before_replace: delete the old resource, then create.
    provider.delete(old.id, old.outs)
    new = provider.create(new_inputs)
    assert new.outs is not None
    try:
        assert new.id != old.id
        old_info, new_info = jobs.get_job_info(old.id), jobs.get_job_info(new.id)
        assert old_info.status == JobStatus.STOPPED
        assert new_info.status == JobStatus.RUNNING
        assert old_info.end_time is not None and new_info.start_time is not None
        assert old_info.end_time <= new_info.start_time
    finally:
        stop_quietly(provider, new.id, new.outs)


def test_a_stopped_job_is_resubmitted_as_a_new_attempt(
    provider: RayJobProvider, head: RayHead, gcs: GcsEmulator, jobs: JobSubmissionClient
) -> None:
    inputs = long_running(head, gcs, "attempts")
    first = provider.create(inputs)
    assert first.outs is not None
    provider.delete(first.id, first.outs)  # e.g. `pulumi destroy`, then `pulumi up` again
    second = provider.create(inputs)
    assert second.outs is not None
    try:
        assert second.id == f"{first.id}-r2"
        assert jobs.get_job_status(second.id) == JobStatus.RUNNING
        assert jobs_with_id(jobs, first.id) == [first.id, second.id]
        # Running again adopts the live attempt instead of starting a third.
        assert provider.create(inputs).id == second.id
    finally:
        stop_quietly(provider, second.id, second.outs)


def test_an_id_whose_record_was_deleted_is_never_submitted_again(
    provider: RayJobProvider, head: RayHead, gcs: GcsEmulator, jobs: JobSubmissionClient
) -> None:
    # `ray job stop` + `ray job delete` outside Pulumi, then `pulumi up`. Ray's monitor of the
    # deleted job can still write FAILED under the id when it sees the old supervisor die, over a
    # new submission that reused the id (job_manager.py _monitor_job_internal: Ray 2.60 "Job
    # supervisor actor died", 2.47 and 2.49 "Unexpected error occurred: The actor died"), so the
    # next attempt takes the next id.
    inputs = long_running(head, gcs, "deleted")
    first = provider.create(inputs)
    stop_job(jobs, first.id, timeout_s=60)
    assert jobs.delete_job(first.id) is True
    second = provider.create(inputs)
    assert second.outs is not None
    try:
        assert second.id == f"{first.id}-r2"
        # Give the old monitor its turn (it polls every JOB_MONITOR_LOOP_PERIOD_S, 1 s): on Ray
        # 2.60 the deleted id's FAILED record may come back, on 2.47 and 2.49 none does. It can
        # only land on first.id, so this guards against a return to reusing the id.
        deadline = time.monotonic() + 5
        while first.id not in jobs_with_id(jobs, first.id) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(2)
        info = jobs.get_job_info(second.id)
        assert info.status == JobStatus.RUNNING, info.message
        # The deleted id was submitted once: one supervisor, the stopped job's.
        assert len(supervisor_states(head, first.id)) == 1
        assert provider.create(inputs).id == second.id
    finally:
        stop_quietly(provider, second.id, second.outs)


def test_failing_entrypoint_fails_with_rays_message_and_the_log_tail(
    provider: RayJobProvider, head: RayHead, gcs: GcsEmulator, jobs: JobSubmissionClient
) -> None:
    # wait_for=running: the failure must be caught during the startup grace (a long one here, so
    # that a slow start cannot let the job look healthy before it fails).
    inputs = props(
        dashboard_access.url_dashboard(head.dashboard_url),
        gcs,
        "failing",
        steps=5,
        fail_at_step=2,
        log_lines_per_step=40,
        deadlines=replace(FAST, startup_grace_s=120.0),
    )
    with pytest.raises(RuntimeError) as failure:
        provider.create(inputs)
    # The job the head ran for this spec (its id is not taken from the function under test).
    (sid,) = [j.submission_id for j in jobs.list_jobs() if j.entrypoint == inputs["entrypoint"]]
    text = str(failure.value)
    assert f"Ray job {sid} FAILED: Job entrypoint command failed with exit code 3" in text
    assert "RuntimeError: boom at step 2" in text
    assert "--- driver log, last 50 lines (at most 50, each cut at 500 characters) ---" in text
    tail = text.split(" characters) ---\n", 1)[1].splitlines()
    assert len(tail) == 50
    assert tail[-1] == "RuntimeError: boom at step 2"
    assert "step:1 - line:0 -" not in text  # older lines are cut
    assert jobs.get_job_status(sid) == JobStatus.FAILED


def test_dashboard_down_at_submit_then_up_within_the_deadline(
    provider: RayJobProvider, head: RayHead, gcs: GcsEmulator, jobs: JobSubmissionClient
) -> None:
    forwarder = TcpForwarder(target_port=int(head.dashboard_url.rsplit(":", 1)[1]))
    late_url = f"http://127.0.0.1:{forwarder.listen_port}"
    inputs = props(
        dashboard_access.url_dashboard(late_url), gcs, "late-dashboard", wait_for="finished"
    )
    # Down (every connection reset) until the provider has tried at least twice and 2 s passed.
    forwarder.refuse()
    started = time.monotonic()
    opened = threading.Thread(target=_open_after_retries, args=(forwarder, started, 2, 2.0))
    opened.start()
    try:
        created = provider.create(inputs)
    finally:
        opened.join()
        forwarder.stop()
    assert created.outs is not None and created.outs["status"] == "SUCCEEDED"
    assert time.monotonic() - started >= 2.0  # it could only have succeeded after retrying
    assert forwarder.refused >= 2
    assert forwarder.connections > 0
    assert jobs.get_job_status(created.id) == JobStatus.SUCCEEDED


def _open_after_retries(
    forwarder: TcpForwarder, since: float, tries: int, min_s: float, limit_s: float = 120.0
) -> None:
    while time.monotonic() - since < limit_s and (
        forwarder.refused < tries or time.monotonic() - since < min_s
    ):
        time.sleep(0.05)
    forwarder.start()


def test_dashboard_down_past_the_deadline_names_the_address(
    provider: RayJobProvider, gcs: GcsEmulator
) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"
    deadlines = JobDeadlines(submit_s=1.5, poll_interval_s=0.2)
    inputs = props(dashboard_access.url_dashboard(nobody), gcs, "no-dashboard", deadlines=deadlines)
    with pytest.raises(RuntimeError) as failure:
        provider.create(inputs)
    assert f"Ray dashboard at {nobody} did not answer within" in str(failure.value)
    assert "Failed to connect to Ray" in str(failure.value)


def test_refresh_after_the_job_record_is_gone_reports_it_gone(
    provider: RayJobProvider, head: RayHead, gcs: GcsEmulator, jobs: JobSubmissionClient
) -> None:
    created = provider.create(
        props(dashboard_access.url_dashboard(head.dashboard_url), gcs, "gone", wait_for="finished")
    )
    assert created.outs is not None
    assert jobs.delete_job(created.id) is True
    refreshed = provider.read(created.id, created.outs)
    assert refreshed.id is None
    assert refreshed.outs == {}


def test_refresh_reads_the_status_ray_writes_back_after_a_delete_as_gone(
    provider: RayJobProvider, head: RayHead, gcs: GcsEmulator, jobs: JobSubmissionClient
) -> None:
    """Ray 2.60's job monitor writes FAILED under a deleted id when the delete came before it saw
    the ended supervisor exit (job_manager.py _monitor_job_internal). Here Ray's own storage
    client writes that status, as the monitor does, so the record exists whatever the race."""
    created = provider.create(
        props(dashboard_access.url_dashboard(head.dashboard_url), gcs, "back", wait_for="finished")
    )
    assert created.outs is not None
    assert jobs.delete_job(created.id) is True
    storage = JobInfoStorageClient(GcsClient(address=head.gcs_address))
    died = "Job supervisor actor died: The actor died unexpectedly before finishing this task."
    asyncio.run(storage.put_status(created.id, JobStatus.FAILED, message=died))
    assert jobs.get_job_status(created.id) == JobStatus.FAILED
    refreshed = provider.read(created.id, created.outs)
    assert refreshed.id is None
    assert refreshed.outs == {}


def test_service_proxy_addressing_with_a_bearer_token(
    head: RayHead, gcs: GcsEmulator, jobs: JobSubmissionClient
) -> None:
    proxy = start_service_proxy(head.dashboard_url, "sesame", "verl", "verl-head-svc")
    try:
        dashboard = dashboard_access.kube_proxy_dashboard(
            proxy.endpoint, "", "verl", "verl-head-svc"
        )
        tokens: list[str] = []

        def token() -> str:
            tokens.append("sesame")
            return "sesame"

        provider = RayJobProvider(token_provider=token)
        created = provider.create(props(dashboard, gcs, "proxied", wait_for="finished"))
        assert created.outs is not None and created.outs["status"] == "SUCCEEDED"
        assert created.outs["latest_step"] == 2
        assert proxy.forwarded > 0 and proxy.rejected == 0 and tokens
        assert (
            "kubectl port-forward -n verl service/verl-head-svc 8265:dashboard"
            in (created.outs["dashboard_hint"])
        )
        # The token is fetched per call and never lands in the state.
        assert "sesame" not in json.dumps(created.outs)
        assert provider.read(created.id, created.outs).outs["status"] == "SUCCEEDED"  # type: ignore[index]

        # Without the token the proxy answers 401, both to Ray's client and to the provider.
        address = f"{proxy.endpoint}{proxy.prefix}"
        with pytest.raises(AuthenticationError):
            JobSubmissionClient(address)
        wrong = RayJobProvider(token_provider=lambda: "guess")
        with pytest.raises(RuntimeError, match="refused the credentials"):
            wrong.read(created.id, created.outs)
        assert proxy.rejected >= 2
    finally:
        proxy.stop()


def test_service_proxy_answering_503_at_first_is_retried(
    head: RayHead, gcs: GcsEmulator, jobs: JobSubmissionClient
) -> None:
    proxy = start_service_proxy(
        head.dashboard_url, "sesame", "verl", "head-svc", unavailable_first=4
    )
    try:
        dashboard = dashboard_access.kube_proxy_dashboard(proxy.endpoint, "", "verl", "head-svc")
        created = RayJobProvider(token_provider=lambda: "sesame").create(
            props(dashboard, gcs, "no-endpoints-yet", wait_for="finished")
        )
        assert created.outs is not None and created.outs["status"] == "SUCCEEDED"
        assert jobs.get_job_status(created.id) == JobStatus.SUCCEEDED
    finally:
        proxy.stop()


def test_service_proxy_over_tls_verifies_against_the_cluster_ca(
    head: RayHead, gcs: GcsEmulator, tmp_path: Path
) -> None:
    tls = make_tls_material(tmp_path / "tls")
    proxy = start_service_proxy(head.dashboard_url, "sesame", "verl", "head-svc", tls=tls)
    try:
        assert "://" not in proxy.endpoint  # a bare host:port, as GKE's endpoint
        ca = base64.b64encode(tls.ca_pem).decode()  # as GKE's master_auth.cluster_ca_certificate
        provider = RayJobProvider(token_provider=lambda: "sesame")
        dashboard = dashboard_access.kube_proxy_dashboard(proxy.endpoint, ca, "verl", "head-svc")
        created = provider.create(props(dashboard, gcs, "tls", wait_for="finished"))
        assert created.outs is not None and created.outs["status"] == "SUCCEEDED"

        # Another CA: the certificate check fails at once (not retried until the deadline).
        other_ca = base64.b64encode(make_tls_material(tmp_path / "other").ca_pem).decode()
        impostor = dashboard_access.kube_proxy_dashboard(
            proxy.endpoint, other_ca, "verl", "head-svc"
        )
        with pytest.raises(RuntimeError) as failure:
            provider.read(created.id, {**created.outs, "dashboard": impostor})
        assert "CERTIFICATE_VERIFY_FAILED" in str(failure.value)
        assert "did not answer within" not in str(failure.value)
    finally:
        proxy.stop()


def test_provider_survives_dill_serialization(
    head: RayHead, gcs: GcsEmulator, jobs: JobSubmissionClient
) -> None:
    plain = dill.loads(dill.dumps(RayJobProvider(), recurse=True))
    # What pulumi stores in the state (`__provider`): sorted-dict dill, base64.
    stored = dill.loads(base64.b64decode(serialize_provider(RayJobProvider())))
    for index, revived in enumerate((plain, stored)):
        assert isinstance(revived, RayJobProvider)
        created = revived.create(
            props(
                dashboard_access.url_dashboard(head.dashboard_url),
                gcs,
                f"dill-{index}",
                wait_for="finished",
            )
        )
        assert created.outs is not None and created.outs["status"] == "SUCCEEDED"
        assert jobs.get_job_status(created.id) == JobStatus.SUCCEEDED


def test_client_ignores_ray_address_from_the_environment(
    provider: RayJobProvider,
    head: RayHead,
    gcs: GcsEmulator,
    jobs: JobSubmissionClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A Ray user's shell often exports RAY_ADDRESS; Ray's client would prefer it to our input.
    monkeypatch.setenv("RAY_ADDRESS", f"http://127.0.0.1:{free_port()}")
    created = provider.create(
        props(dashboard_access.url_dashboard(head.dashboard_url), gcs, "env", wait_for="finished")
    )
    assert created.outs is not None and created.outs["status"] == "SUCCEEDED"


# -- pure logic (no cluster) ------------------------------------------------------------------


def plain_props(**overrides: Any) -> dict[str, Any]:
    base = RayJobArgs(
        entrypoint="python3 -m verl.trainer.main_ppo trainer.save_freq=10",
        runtime_env={
            "env_vars": {
                "TOKENIZERS_PARALLELISM": "true",
                "HF_HOME": "/data/hf_home",
                "HF_TOKEN_PATH": "/var/run/secrets/hf/hf_token",
                "VLLM_MAX_TOKENS": "8192",
            }
        },
        dashboard=dashboard_access.url_dashboard("http://127.0.0.1:8265"),
        checkpoint_root="gs://bucket/checkpoints/run",
        submission_id_prefix="a4x",
    ).to_props()
    return {**base, **overrides}


def test_submission_id_is_deterministic_safe_and_spec_sensitive() -> None:
    env = {"env_vars": {"A": "1"}, "config": {"setup_timeout_seconds": 600}}
    sid = submission_id("A4X stack!", "python3 train.py", env)
    assert sid == submission_id("A4X stack!", "python3 train.py", json.loads(json.dumps(env)))
    # Pulumi's wire format turns 600 into 600.0: same job.
    float_env = {"env_vars": {"A": "1"}, "config": {"setup_timeout_seconds": 600.0}}
    assert sid == submission_id("A4X stack!", "python3 train.py", float_env)
    assert sid.startswith("a4x-stack-") and len(sid) == len("a4x-stack-") + 12
    assert set(sid) <= set("abcdefghijklmnopqrstuvwxyz0123456789-")
    assert sid != submission_id("A4X stack!", "python3 train.py", {"env_vars": {"A": "2"}})
    assert sid != submission_id("A4X stack!", "python3 train.py --x", env)


def test_submission_ids_of_existing_stacks_do_not_change() -> None:
    # A stack's state holds the id; a changed derivation would make the next `pulumi up` submit
    # the running job again under a new id. Derived by hand from the documented form (the prefix
    # lowercased with runs of other characters turned into '-', then the first 12 hex digits of
    # the SHA-256 of the compact, key-sorted JSON of entrypoint and runtime env, whole floats as
    # integers):
    #   printf '%s' '{"entrypoint":"python3 train.py","runtime_env":{"env_vars":{"A":"1"}}}' \
    #     | sha256sum                               -> be7785737988...
    #   printf '%s' '{"entrypoint":"python3 -m verl.trainer.main_ppo trainer.nnodes=2",'\
    #     '"runtime_env":{"env_vars":{"N":600}}}' | sha256sum   -> 4fa6c098675a...
    env = {"env_vars": {"A": "1"}}
    assert submission_id("A4X stack!", "python3 train.py", env) == "a4x-stack-be7785737988"
    entrypoint = "python3 -m verl.trainer.main_ppo trainer.nnodes=2"
    assert submission_id("grpo", entrypoint, {"env_vars": {"N": 600.0}}) == "grpo-4fa6c098675a"


@pytest.mark.parametrize("unknown", [UNKNOWN, Unknown()], ids=["wire-sentinel", "Unknown"])
def test_check_accepts_the_default_shape_and_unknowns(unknown: Any) -> None:
    provider = RayJobProvider()
    assert provider.check({}, plain_props()).failures == []
    nested = plain_props(
        entrypoint=unknown,
        dashboard={"kube_api_endpoint": unknown, "cluster_ca_certificate": unknown,
                   "namespace": "verl", "service": unknown, "port_name": "dashboard"},
        checkpoint_root=unknown,
    )  # fmt: skip
    assert provider.check({}, nested).failures == []
    every_input_unknown = {key: unknown for key in plain_props()}
    assert provider.check({}, every_input_unknown).failures == []


@pytest.mark.parametrize("unknown", [UNKNOWN, Unknown()], ids=["wire-sentinel", "Unknown"])
def test_check_still_rejects_the_known_parts_next_to_unknowns(unknown: Any) -> None:
    bad = plain_props(
        dashboard={"kube_api_endpoint": unknown, "cluster_ca_certificate": unknown,
                   "namespace": "", "service": "svc"},
        runtime_env={"env_vars": {"HF_TOKEN": "x", "BUCKET": unknown}},
        checkpoint_root="/data/checkpoints",
    )  # fmt: skip
    failures = RayJobProvider().check({}, bad).failures
    assert sorted((f.property, f.reason.split(",")[0]) for f in failures) == [
        ("checkpoint_root", "checkpoint_root must be a gs://<bucket>/<folder> URL"),
        ("dashboard", "dashboard.namespace must be a non-empty string"),
        ("runtime_env", "runtime_env.env_vars.HF_TOKEN: secrets must not be RayJob inputs (they "
         "would be stored in the Pulumi state and in the Ray job record); remove the key and let "
         "the pods read the secret from a Kubernetes Secret (the HF token: hf-secret"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("overrides", "prop", "fragment"),
    [
        ({"runtime_env": {"env_vars": {"HF_TOKEN": "x"}}}, "runtime_env",
         "runtime_env.env_vars.HF_TOKEN: secrets must not be RayJob inputs"),
        ({"runtime_env": {"env_vars": {"WANDB_API_KEY": "x"}}}, "runtime_env",
         "runtime_env.env_vars.WANDB_API_KEY"),
        ({"runtime_env": {"env_vars": {"HUGGINGFACEHUB_API_TOKEN": "x"}}}, "runtime_env",
         "runtime_env.env_vars.HUGGINGFACEHUB_API_TOKEN"),
        ({"runtime_env": {"config": {"db_password": "x"}}}, "runtime_env",
         "runtime_env.config.db_password"),
        ({"runtime_env": {"env_vars": {"X": "hf_" + "a1B2" * 9}}}, "runtime_env",
         "runtime_env.env_vars.X contains what looks like a Hugging Face token"),
        ({"entrypoint": "huggingface-cli login --token hf_" + "Z" * 34 + " && train"},
         "entrypoint", "entrypoint contains what looks like a Hugging Face token"),
        ({"entrypoint": "  "}, "entrypoint", "entrypoint must be a non-empty command"),
        ({"dashboard": {"url": "127.0.0.1:8265"}}, "dashboard", "dashboard.url must be an http"),
        ({"dashboard": {"host": "x"}}, "dashboard", "expected either ['url']"),
        ({"dashboard": dashboard_access.kube_proxy_dashboard("1.2.3.4", "bm90IGEgY2VydA==",
                                                            "verl", "svc")},
         "dashboard", "does not contain a PEM certificate"),
        ({"checkpoint_root": "/data/checkpoints"}, "checkpoint_root",
         "checkpoint_root must be a gs://<bucket>/<folder> URL, got '/data/checkpoints'"),
        ({"deadline_submit_s": -1}, "deadline_submit_s", "must be a number of seconds >= 0"),
        ({"submission_id_prefix": "--"}, "submission_id_prefix", "must contain a letter"),
        ({"wait_for": "soon"}, "wait_for",
         "wait_for must be one of running, first_step, finished, got 'soon'"),
        ({"wait": "yes"}, "wait", "wait must be true or false"),
        ({"gke_cluster": {"project": "p", "name": "c"}}, "gke_cluster",
         "gke_cluster must be a mapping with project, location and name"),
        ({"gke_cluster": {"project": "p", "location": "", "name": "c"}}, "gke_cluster",
         "gke_cluster.location must be a non-empty string"),
        ({"deadline_reach_s": -5}, "deadline_reach_s", "must be a number of seconds >= 0"),
    ],
)  # fmt: skip
def test_check_rejects_bad_inputs_with_a_clear_reason(
    overrides: dict[str, Any], prop: str, fragment: str
) -> None:
    failures = RayJobProvider().check({}, plain_props(**overrides)).failures
    assert [(f.property, fragment in f.reason) for f in failures] == [(prop, True)], failures


def test_diff_replaces_on_spec_changes_and_updates_in_place_otherwise() -> None:
    provider = RayJobProvider()
    state = {**plain_props(), "status": "RUNNING", "submission_id": "a4x-0123"}

    def diff(**news: Any) -> tuple[bool | None, list[str] | None, bool | None]:
        result = provider.diff("a4x-0123", state, plain_props(**news))
        return result.changes, result.replaces, result.delete_before_replace

    assert diff() == (False, [], True)
    assert diff(entrypoint="python3 other.py") == (True, ["entrypoint"], True)
    assert diff(runtime_env={"env_vars": {"X": "1"}}) == (True, ["runtime_env"], True)
    assert diff(submission_id_prefix="a4") == (True, ["submission_id_prefix"], True)
    # Another Ray head (a new cluster's endpoint): it has no record of this job.
    new_head = dashboard_access.url_dashboard("http://10.0.0.1:8265")
    assert diff(dashboard=new_head) == (True, ["dashboard"], True)
    # How to watch the job: no replace.
    assert diff(wait_for="finished")[:2] == (True, [])
    assert diff(deadline_submit_s=5.0)[:2] == (True, [])
    assert diff(checkpoint_root="gs://bucket/elsewhere")[:2] == (True, [])
    assert diff(checkpoint_root="gs://bucket/checkpoints/run/") == (False, [], True)
    # Pulumi's wire floats are not a change.
    assert diff(deadline_submit_s=600) == (False, [], True)
    # Unknown during preview (the wire sentinel, or the Unknown object the real host passes): a
    # spec value or the dashboard target may change the job, a watch setting may not.
    for unknown in (UNKNOWN, Unknown()):
        assert diff(entrypoint=unknown)[:2] == (True, ["entrypoint"])
        assert diff(runtime_env={"env_vars": {"BUCKET": unknown}})[:2] == (True, ["runtime_env"])
        assert diff(dashboard={"url": unknown})[:2] == (True, ["dashboard"])
        assert diff(dashboard=unknown)[:2] == (True, ["dashboard"])
        assert diff(checkpoint_root=unknown)[:2] == (True, [])
        assert diff(deadline_wait_s=unknown)[:2] == (True, [])


@pytest.mark.parametrize(
    ("status", "resubmit"),
    [("FAILED", True), ("STOPPED", True), ("SUCCEEDED", False), ("RUNNING", False)],
)
def test_up_resubmits_a_run_that_ended_without_success(status: str, resubmit: bool) -> None:
    state = {**plain_props(), "status": status, "submission_id": "a4x-0123"}
    result = RayJobProvider().diff("a4x-0123", state, plain_props())
    assert (result.changes, result.replaces) == ((True, ["status"]) if resubmit else (False, []))


def test_update_stores_new_connection_inputs_and_keeps_observed_outputs() -> None:
    state = {
        **plain_props(),
        "submission_id": "a4x-0123",
        "status": "RUNNING",
        "message": "Job is currently running.",
        "dashboard_hint": "old",
        "checkpoint_root": "gs://bucket/checkpoints/run",
        "checkpoints": ["gs://bucket/checkpoints/run/global_step_10"],
        "latest_checkpoint": "gs://bucket/checkpoints/run/global_step_10",
        "latest_step": 10.0,
        "start_time": "2026-11-29T10:00:00+00:00",
        "end_time": None,
    }
    news = plain_props(
        dashboard=dashboard_access.url_dashboard("http://10.1.2.3:8265"), wait_for="finished"
    )
    outs = RayJobProvider().update("a4x-0123", state, news).outs
    assert outs is not None
    assert outs["dashboard"] == {"url": "http://10.1.2.3:8265"} and outs["wait_for"] == "finished"
    assert "--address http://10.1.2.3:8265" in outs["dashboard_hint"]
    for key in ("status", "checkpoints", "latest_step", "start_time", "submission_id"):
        assert outs[key] == state[key]


def test_kube_proxy_client_arguments() -> None:
    pem = b"-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"
    spec = dashboard_access.parse_dashboard(
        dashboard_access.kube_proxy_dashboard(
            "34.1.2.3", base64.b64encode(pem).decode(), "verl", "verl-raycluster-head-svc"
        )
    )
    calls: list[int] = []

    def token() -> str:
        calls.append(1)
        return f"ya29.token-{len(calls)}"

    with dashboard_access.client_args(spec, token) as make:
        first, second = make(), make()
        assert first.address == (
            "https://34.1.2.3/api/v1/namespaces/verl/services/"
            "verl-raycluster-head-svc:dashboard/proxy"
        )
        assert first.headers == {"Authorization": "Bearer ya29.token-1"}
        assert second.headers == {"Authorization": "Bearer ya29.token-2"}  # fetched per client
        assert isinstance(first.verify, str)
        ca_file = Path(first.verify)
        assert ca_file.read_bytes() == pem
        assert ca_file.stat().st_mode & 0o077 == 0  # private to this user
        assert "ya29" not in repr(first)
    assert not ca_file.exists()

    plain = dashboard_access.parse_dashboard(dashboard_access.url_dashboard("http://h:8265/"))
    with dashboard_access.client_args(plain, token) as make:
        assert make() == dashboard_access.ClientArgs("http://h:8265", {}, True)
    assert len(calls) == 2  # no token for a plain URL


def test_program_side_construction_registers_inputs_and_outputs() -> None:
    # Under pulumi's mocks in a subprocess: set_mocks is process-wide and must not leak into the
    # lead's program tests that share this pytest process.
    script = """
import json, pulumi

class Mocks(pulumi.runtime.Mocks):
    seen = {}
    def new_resource(self, args):
        Mocks.seen[args.typ] = sorted(args.inputs)
        return f"{args.name}-id", {**args.inputs, "status": "RUNNING"}
    def call(self, args):
        return {}

pulumi.runtime.set_mocks(Mocks(), project="verl-gke", stack="a4x", preview=False)
from jobs.ray_job import RayJob, RayJobArgs
from jobs.dashboard_access import kube_proxy_dashboard

@pulumi.runtime.test
def run():
    job = RayJob("grpo", RayJobArgs(
        entrypoint="python3 -m verl.trainer.main_ppo",
        runtime_env={"env_vars": {"HF_HOME": "/data/hf"}},
        dashboard=kube_proxy_dashboard(pulumi.Output.from_input("34.1.2.3"), "", "verl", "svc"),
        checkpoint_root="gs://bucket/run",
        submission_id_prefix=pulumi.get_stack(),
    ))
    report = lambda status: print(json.dumps({"status": status, "seen": Mocks.seen}))
    return job.status.apply(report)

run()
try:
    RayJob("bad", RayJobArgs(entrypoint="x", runtime_env={"env_vars": {"HF_TOKEN": "t"}},
           dashboard={"url": "http://h:1"}, checkpoint_root="gs://bucket/run",
           submission_id_prefix="a4x"))
except ValueError as exc:
    print(json.dumps({"error": str(exc)}))
"""
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    registered, error = lines[0], lines[1]
    assert registered["status"] == "RUNNING"
    inputs = registered["seen"]["pulumi-python:dynamic/jobs:RayJob"]
    assert {"entrypoint", "runtime_env", "dashboard", "checkpoint_root", "wait_for"} <= set(inputs)
    assert "__provider" in inputs
    assert "runtime_env.env_vars.HF_TOKEN" in error["error"]


class _StateApiAnswer:
    """A client whose GET /api/v0/actors gets one scripted answer: shapes a local head does not
    give (another namespace, a cut-short list, an older head's 404, a 5xx, a refused token)."""

    def __init__(self, status: int, body: Any) -> None:
        self.status_code, self.body = status, body
        self.text = body if isinstance(body, str) else json.dumps(body)

    def json(self) -> Any:
        if isinstance(self.body, str):
            raise ValueError("not JSON")
        return self.body

    def _do_request(self, _method: str, endpoint: str) -> _StateApiAnswer:
        assert endpoint.startswith("/api/v0/actors?filter_keys=name&filter_predicates=%3D&")
        return self


def _actors(*rows: dict[str, str], total: int = 0, fetched: int = 0) -> dict[str, Any]:
    """A list answer as ListApiResponse: `total` actors in the GCS, `fetched` of them (its limit
    reached when fewer) filtered by name to `rows` (ray/util/state/common.py)."""
    listing = {"result": list(rows), "total": total or 3, "num_after_truncation": fetched or 3,
               "num_filtered": len(rows)}  # fmt: skip
    return {"result": True, "data": {"result": listing}}


SUPERVISOR_OF_X = {"name": "_ray_internal_job_actor_x", "state": "DEAD",
                   "ray_namespace": "SUPERVISOR_ACTOR_RAY_NAMESPACE"}  # fmt: skip


@pytest.mark.parametrize(
    ("status", "body", "known"),
    [
        (200, _actors(SUPERVISOR_OF_X), True),
        (200, _actors(), False),
        # The state API's name filter ignores case (state_api_utils.py); ids are exact.
        (200, _actors({**SUPERVISOR_OF_X, "name": "_RAY_INTERNAL_JOB_ACTOR_X"}), False),
        (200, _actors({**SUPERVISOR_OF_X, "ray_namespace": "user"}), False),
        # More than RAY_MAX_LIMIT_FROM_DATA_SOURCE actors: the dashboard filtered a cut list.
        (200, _actors(total=12_000, fetched=10_000), None),
        (200, _actors(SUPERVISOR_OF_X, total=12_000, fetched=10_000), True),
        (200, _actors(total=10_000, fetched=10_000), False),
        # More matches than `limit` (the filter ignores case): the rows were trimmed.
        (200, {"data": {"result": {**_actors()["data"]["result"], "num_filtered": 101}}}, None),
        (404, "Not Found", None),
        (200, "<html>", None),
        (200, {"data": {"result": None}}, None),
    ],
)  # fmt: skip
def test_the_supervisor_lookup_says_unknown_when_the_state_api_cannot_tell(
    status: int, body: Any, known: bool | None
) -> None:
    assert state_api_supervisor_known(_StateApiAnswer(status, body), "x") is known


# 401/403: Ray 2.60's client raises AuthenticationError itself first (dashboard_sdk.py); these
# cover the lookup's own branch for a client that does not.
@pytest.mark.parametrize(("status", "retried", "credential"), [
    (500, True, False), (503, True, False), (429, True, False), (401, False, True),
    (403, False, True),
])  # fmt: skip
def test_the_supervisor_lookup_raises_what_the_dashboard_client_retries_or_reports(
    status: int, retried: bool, credential: bool
) -> None:
    with pytest.raises(RuntimeError) as failure:
        state_api_supervisor_known(_StateApiAnswer(status, "busy"), "x")
    assert (_is_transient(failure.value), is_auth_failure(failure.value)) == (retried, credential)


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (ConnectionError("Failed to connect to Ray at address: http://h:1."), True),
        (RuntimeError("Request failed with status code 500: No available agent to submit job, "
                      "please try again later.."), True),
        (RuntimeError("Request failed with status code 503: no endpoints available"), True),
        (RuntimeError("Request failed with status code 500: Traceback ... ValueError: Job with "
                      "submission_id x already exists. Please use a different submission_id."),
         False),
        (RuntimeError("Request failed with status code 404: Job x does not exist."), False),
        (RuntimeError("Request failed with status code 400: bad runtime_env"), False),
        (ValueError("something else"), False),
    ],
)  # fmt: skip
def test_transient_errors_are_told_apart(error: Exception, transient: bool) -> None:
    assert _is_transient(error) is transient


def test_input_problems_collects_every_failure() -> None:
    problems = input_problems(
        plain_props(entrypoint="", checkpoint_root="s3://x/y", dashboard={"url": 3})
    )
    assert sorted(prop for prop, _ in problems) == ["checkpoint_root", "dashboard", "entrypoint"]


def test_a_job_without_checkpoints_reports_its_tagged_result(
    provider: RayJobProvider, head: RayHead, tmp_path: Path
) -> None:
    # The shape of the fabric check job: its code travels as the job's working_dir, it keeps no
    # checkpoints, and its verdict is one JSON line that becomes the `result` output.
    (tmp_path / "report.py").write_text(
        "import json\n"
        "print('warming up')\n"
        "print(json.dumps({'check': 'demo', 'busbw_gbps': 12.5, 'ok': True}))\n"
        "print(json.dumps({'check': 'other', 'ok': False}))\n"
    )
    inputs = RayJobArgs(
        entrypoint="python report.py",
        runtime_env={"working_dir": str(tmp_path)},
        dashboard=dashboard_access.url_dashboard(head.dashboard_url),
        checkpoint_root=None,
        submission_id_prefix="tagged",
        wait_for="finished",
        deadlines=FAST,
        result_tag="demo",
    ).to_props()
    assert provider.check({}, inputs).failures == []
    created = provider.create(inputs)
    outs = created.outs or {}
    assert outs["status"] == "SUCCEEDED"
    assert outs["result"] == {"check": "demo", "busbw_gbps": 12.5, "ok": True}
    assert outs["checkpoints"] == [] and outs["checkpoint_root"] is None
    refreshed = provider.read(created.id, outs)
    assert refreshed.outs is not None and refreshed.outs["result"] == outs["result"]


def test_find_tagged_result_takes_the_last_matching_json_line() -> None:
    logs = (
        '{"check": "fabric", "ok": false}\n'
        'noise {"check": "fabric"}\n'
        '{"check": "fabric", "ok": true}\n'
    )
    assert find_tagged_result(logs, "fabric") == {"check": "fabric", "ok": True}
    assert find_tagged_result(logs, "memory") is None
    assert find_tagged_result("{not json\n", "fabric") is None


@pytest.mark.parametrize(
    ("legacy", "mode"), [({"wait": False}, "running"), ({"wait": True}, "finished")]
)
def test_states_written_with_the_boolean_wait_read_as_the_matching_mode(
    legacy: dict[str, Any], mode: str
) -> None:
    # A state from before wait_for and the new deadlines: same job, nothing to update.
    old_state = {
        k: v
        for k, v in plain_props().items()
        if k not in ("wait_for", "deadline_reach_s", "deadline_first_step_s", "gke_cluster")
    }
    old_state.update(legacy, status="RUNNING", submission_id="a4x-0123")
    provider = RayJobProvider()
    assert provider.diff("a4x-0123", old_state, plain_props(wait_for=mode)).changes is False
    other = "first_step" if mode != "first_step" else "running"
    assert provider.diff("a4x-0123", old_state, plain_props(wait_for=other)).replaces == []
    assert provider.diff("a4x-0123", old_state, plain_props(wait_for=other)).changes is True
    # The deprecated program-side argument still works, and wait_for wins over it.
    assert RayJobArgs(**_base_args(), **legacy).to_props()["wait_for"] == mode
    assert (
        RayJobArgs(**_base_args(), **legacy, wait_for="first_step").to_props()["wait_for"]
        == "first_step"
    )
    assert RayJobArgs(**_base_args()).to_props()["wait_for"] == "first_step"  # the default
    # Emitted only while a caller still passes it (program code not yet moved to wait_for).
    assert RayJobArgs(**_base_args(), **legacy).to_props()["wait"] is legacy["wait"]
    assert "wait" not in RayJobArgs(**_base_args(), wait_for=mode).to_props()


def _base_args() -> dict[str, Any]:
    return {
        "entrypoint": "python3 train.py",
        "runtime_env": {},
        "dashboard": dashboard_access.url_dashboard("http://127.0.0.1:8265"),
        "checkpoint_root": None,
        "submission_id_prefix": "a4x",
    }


@pytest.mark.parametrize(
    ("state", "said"),
    [
        ({"submission_id": "a4x-0123", "latest_checkpoint": "gs://b/run/global_step_40",
          "message": "Job entrypoint command failed with exit code 1, last available logs ..."},
         "the last refresh saw it FAILED (Job entrypoint command failed with exit code 1): "
         "resubmitting a4x-0123 as a4x-0123-r2; the run continues in "
         "gs://bucket/checkpoints/run: verl resumes from gs://b/run/global_step_40"),
        ({"submission_id": "a4x-0123-r2", "latest_checkpoint": None, "message": ""},
         "the last refresh saw it FAILED: resubmitting a4x-0123-r2 as a4x-0123-r3; the run "
         "starts at step 0 in gs://bucket/checkpoints/run: no checkpoint there yet"),
        ({"submission_id": "a4x-0123", "checkpoint_root": None, "message": None},
         "resubmitting a4x-0123 as a4x-0123-r2; the job keeps no checkpoints: it starts from "
         "the beginning"),
    ],
)  # fmt: skip
def test_diff_after_a_failed_refresh_says_what_up_resubmits(
    state: dict[str, Any], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    olds = {**plain_props(), "status": "FAILED", **state}
    RayJobProvider().diff(state["submission_id"], olds, plain_props())
    assert said in capsys.readouterr().out


@pytest.mark.parametrize(
    ("old_root", "new_root", "said"),
    [
        ("gs://b/verl/checkpoints/e/w16-0123abcd", "gs://b/verl/checkpoints/e/w32-4567cdef",
         "the new job starts a new run at step 0 in gs://b/verl/checkpoints/e/w32-4567cdef, not "
         "in gs://b/verl/checkpoints/e/w16-0123abcd (world size 16 -> 32; verl cannot load a "
         "checkpoint of another one)"),
        ("gs://b/verl/checkpoints/e/w16-0123abcd", "gs://b/verl/checkpoints/e/w16-4567cdef",
         "(model, actor strategy, fsdp_size or LoRA changed; verl cannot resume across)"),
        ("gs://b/verl/checkpoints/e/w16-0123abcd", "gs://b/verl/checkpoints/f/w16-0123abcd",
         "(another checkpoint folder (experiment name or defaultLocalDir))"),
    ],
)  # fmt: skip
def test_diff_of_a_changed_job_says_whether_the_run_continues(
    old_root: str, new_root: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # A changed spec replaces the job; whether verl resumes depends on the checkpoint folder
    # (one per resume identity, config/bucket_layout.run_checkpoint_dir).
    olds = {**plain_props(), "status": "RUNNING", "checkpoint_root": old_root}
    news = {**plain_props(), "entrypoint": "python3 other.py", "checkpoint_root": new_root}
    RayJobProvider().diff("a4x-0123", olds, news)
    assert said in capsys.readouterr().out
    same = {**news, "checkpoint_root": old_root}
    RayJobProvider().diff("a4x-0123", olds, same)
    assert "new run" not in capsys.readouterr().out
