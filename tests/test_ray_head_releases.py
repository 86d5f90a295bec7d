"""The job provider against real Ray heads of the releases the stacks run.

The provider and its client are the program's Ray (requirements.txt), while each stack's cluster
runs the Ray of its image (config/profiles.py ray_version: 2.47.0 on A4 and A3 Ultra, 2.49.0 on
A4X). The provider skips the Ray SDK's client/head version check (jobs/ray_job.py:
_TimedClient._check_connection_and_version does nothing; head_session() only reads the session
name from GET /api/version), so nothing but a real head of each release shows that every call the
provider makes works against it: submit, a resubmit answered "already exists" (adoption), job
info and status, the driver log, the log tail through the State API with the driver's node_id,
stop and delete, and the state API's list of actors (a deleted id's job supervisor).

Each head runs from its own virtualenv, `<VERL_GKE_RAY_VENVS>/<release>` (.ci/setup builds
.venv-ray/<release> from requirements-ray-<release>.txt), one module-scoped head per release.
The tests are the existing ones, run unchanged against these heads: the engine's whole sequence
through the real dynamic-provider host (tests/test_ray_job_contract.py) and the provider's own
tests of success with checkpoints, adoption, destroy, attempts, the failure's log tail and a
vanished job record (tests/test_ray_job_provider.py).
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from ray.job_submission import JobSubmissionClient

from config.profiles import PROFILES
from jobs.ray_job import RayJobProvider
from tests import test_ray_job_contract as contract
from tests import test_ray_job_provider as provider_tests
from tests.support.dynamic_host import DynamicHost, start_dynamic_host
from tests.support.gcs_emulator import GcsEmulator, start_gcs_emulator
from tests.support.ray_head import RayHead, temporary_ray_head
from tests.support.require import require

# Starts real processes (a Ray head, the provider host, a GCS emulator or subprocesses).
pytestmark = pytest.mark.integration

VENVS_ENV = "VERL_GKE_RAY_VENVS"
# Every Ray release a stack's cluster runs.
RELEASES = sorted({profile.ray_version for profile in PROFILES.values()})


def ray_bin(release: str) -> Path:
    """The `ray` command of the release's virtualenv (skipped locally, a failure in CI)."""
    root = os.environ.get(VENVS_ENV)
    build = (
        f"python3 -m venv .venv-ray/{release} && .venv-ray/{release}/bin/python -m pip install "
        f"-r requirements-ray-{release}.txt (what .ci/setup does), then {VENVS_ENV}=$PWD/.venv-ray"
    )
    require(root, f"{VENVS_ENV} is unset: the Ray {release} head needs its virtualenv; {build}")
    command = Path(str(root)) / release / "bin" / "ray"
    require(command.is_file(), f"{command} is missing: {build}")
    return command


def head_release(head: RayHead) -> str:
    with urllib.request.urlopen(f"{head.dashboard_url}/api/version", timeout=30) as response:
        return str(json.loads(response.read())["ray_version"])


@pytest.fixture(scope="module", params=RELEASES, ids=[f"ray-{r}" for r in RELEASES])
def head(request: pytest.FixtureRequest) -> Iterator[RayHead]:
    with temporary_ray_head("rv", ray_bin=ray_bin(request.param)) as ray_head:
        # The head is the release under test, not the program's Ray.
        assert head_release(ray_head) == request.param
        yield ray_head


@pytest.fixture(scope="module")
def gcs(head: RayHead) -> Iterator[GcsEmulator]:
    """One emulator per head (checkpoints of one release's runs never meet another's)."""
    with start_gcs_emulator() as emulator:
        for bucket in (contract.BUCKET, provider_tests.BUCKET):
            emulator.client().create_bucket(bucket)
        # The in-process provider's checkpoint discovery uses the default storage client.
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("STORAGE_EMULATOR_HOST", emulator.url)
            yield emulator


@pytest.fixture(scope="module")
def host(gcs: GcsEmulator) -> Iterator[DynamicHost]:
    with start_dynamic_host(env={"STORAGE_EMULATOR_HOST": gcs.url}) as dynamic_host:
        yield dynamic_host


def test_engine_sequence_from_first_up_to_destroy(
    host: DynamicHost, head: RayHead, gcs: GcsEmulator, jobs: JobSubmissionClient
) -> None:
    contract.test_engine_sequence_from_first_up_to_destroy(host, head, gcs, jobs)


# The provider's own tests, each run unchanged against the release's head. The failure's log tail
# comes from GET /api/v0/logs/file with the driver's node_id (jobs/job_logs.py).
PROVIDER_TESTS = (
    provider_tests.test_submit_runs_to_success_and_reads_checkpoints_back,
    provider_tests.test_create_returns_while_running_and_a_second_create_adopts,
    provider_tests.test_destroy_stops_a_running_job_and_is_idempotent,
    provider_tests.test_a_stopped_job_is_resubmitted_as_a_new_attempt,
    provider_tests.test_an_id_whose_record_was_deleted_is_never_submitted_again,
    provider_tests.test_failing_entrypoint_fails_with_rays_message_and_the_log_tail,
    provider_tests.test_refresh_after_the_job_record_is_gone_reports_it_gone,
)


@pytest.mark.parametrize("provider_test", PROVIDER_TESTS, ids=[t.__name__ for t in PROVIDER_TESTS])
def test_provider(
    provider_test: Callable[[RayJobProvider, RayHead, GcsEmulator, JobSubmissionClient], None],
    provider: RayJobProvider,
    head: RayHead,
    gcs: GcsEmulator,
    jobs: JobSubmissionClient,
) -> None:
    provider_test(provider, head, gcs, jobs)
