"""The real components the integration tier shares, and the tier's marker.

Started once a session on first use and stopped at its end (tests talk only to 127.0.0.1):
- ray_head: a Ray head (tests/support/ray_head.py) whose job agent accepts submissions;
- gcs_emulator: fake-gcs-server (tests/support/gcs_emulator.py);
- provider_host: `python -m pulumi.dynamic` (tests/support/dynamic_host.py), with
  STORAGE_EMULATOR_HOST pointed at the emulator for the provider's checkpoint discovery.

Test modules use them through the module-scoped fixtures `head`, `jobs`, `gcs` and `host`, which
keep the modules apart whatever their order:
- head / jobs: jobs are addressed by submission id and every module submits under its own prefix;
  when a module ends, every job still running on the shared head is stopped, so no module's jobs
  run into the next one's;
- gcs: the module's own bucket (the module's BUCKET), created at its start and removed with its
  objects at its end;
- host: the provider keeps no state between calls; what it prints names the job's submission id.
A module that needs a component of its own (a head with token auth, another Ray release, a head it
stops) defines a fixture of the same name, built with the same tests/support helpers.

Tiers: `pytest -m "not integration"` is the inner loop; `pytest` runs both. A test is
`integration` when it uses a shared component (marked here) or its module starts processes itself
(`pytestmark` in the module).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
from ray.job_submission import JobSubmissionClient

from jobs.ray_job import RayJobProvider
from tests.support.dynamic_host import DynamicHost, start_dynamic_host
from tests.support.gcs_emulator import GcsEmulator, start_gcs_emulator
from tests.support.ray_head import RayHead, temporary_ray_head, wait_for_job_agent
from tests.support.require import use_local_prerequisites

INTEGRATION = "integration"
# A test whose fixtures include one of these starts (or shares) a real process.
SHARED_COMPONENTS = frozenset({"ray_head", "gcs_emulator", "provider_host"})
# How long the jobs a module left running may take to stop (Ray stops a job with SIGTERM and, after
# RAY_JOB_STOP_WAIT_TIME_S = 3 s, SIGKILL: ray/dashboard/modules/job/job_supervisor.py); generous
# for a loaded machine.
STOP_LEFTOVERS_S = 120.0


def pytest_configure(config: pytest.Config) -> None:
    # No test reaches the Hugging Face Hub: a program run as by `pulumi up` (not a preview) reads
    # the model's config.json and the dataset's access from HF_ENDPOINT (training/hub_client.py),
    # here a port nothing listens on; the tests of those reads start their own stand-in.
    os.environ["HF_ENDPOINT"] = "http://127.0.0.1:9"
    # What `bash .ci/setup` installed in the clone (CRDs, verl and Ray virtualenvs).
    use_local_prerequisites(config.rootpath)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SHARED_COMPONENTS & set(getattr(item, "fixturenames", ())):
            item.add_marker(INTEGRATION)


# -- session components ------------------------------------------------------------------------


@pytest.fixture(scope="session")
def ray_head() -> Iterator[RayHead]:
    # Three CPUs: the fabric check's two gloo ranks and the export's merge task (one each) fit.
    with temporary_ray_head("rhs", num_cpus=3) as head:
        wait_for_job_agent(head)
        yield head


@pytest.fixture(scope="session")
def gcs_emulator() -> Iterator[GcsEmulator]:
    with start_gcs_emulator() as emulator:
        yield emulator


@pytest.fixture(scope="session")
def provider_host(gcs_emulator: GcsEmulator) -> Iterator[DynamicHost]:
    with start_dynamic_host(env={"STORAGE_EMULATOR_HOST": gcs_emulator.url}) as host:
        yield host


# -- what a module sees ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def head(ray_head: RayHead) -> Iterator[RayHead]:
    """The shared head; the jobs the module leaves running are stopped when it ends."""
    yield ray_head
    stop_running_jobs(JobSubmissionClient(ray_head.dashboard_url), STOP_LEFTOVERS_S)


@pytest.fixture(scope="module")
def jobs(head: RayHead) -> JobSubmissionClient:
    return JobSubmissionClient(head.dashboard_url)


@pytest.fixture(scope="module")
def gcs(gcs_emulator: GcsEmulator, request: pytest.FixtureRequest) -> Iterator[GcsEmulator]:
    """The shared emulator with the module's own bucket (its BUCKET), removed when it ends."""
    name = getattr(request.module, "BUCKET", None)
    if not isinstance(name, str):
        raise TypeError(
            f"{request.module.__name__} uses the `gcs` fixture without a BUCKET = '<name>' of its "
            "own (one bucket a module keeps modules apart)"
        )
    bucket = gcs_emulator.client().create_bucket(name)
    yield gcs_emulator
    for blob in list(gcs_emulator.client().list_blobs(name)):
        blob.delete()
    bucket.delete()


@pytest.fixture(scope="module")
def host(provider_host: DynamicHost) -> DynamicHost:
    return provider_host


@pytest.fixture
def provider() -> RayJobProvider:
    """The dynamic provider in this process, as a fresh instance per test."""
    return RayJobProvider()


def stop_running_jobs(client: JobSubmissionClient, timeout_s: float) -> None:
    """Stop every submitted job not yet ended; raise if one is still running after timeout_s."""
    running = [
        job.submission_id
        for job in client.list_jobs()
        if job.submission_id and not job.status.is_terminal()
    ]
    for sid in running:
        client.stop_job(sid)
    deadline = time.monotonic() + timeout_s
    while running := [sid for sid in running if not client.get_job_status(sid).is_terminal()]:
        if time.monotonic() > deadline:
            raise AssertionError(f"jobs still running {timeout_s:.0f}s after a stop: {running}")
        time.sleep(0.5)
