"""The GPU location during `pulumi up`: a region or zone the Compute API does not list, and a zone
whose machineTypes.list lacks the profile's machine type, are refused before any resource exists,
with a fix the same check accepts; an API that does not answer is a warning only. The Compute
API is mocked (a project's regions, zones and machine types as a table), through the Pulumi
runtime's invoke mocks where the real pulumi_gcp invokes are called."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

import pulumi
import pytest
from pulumi.runtime import mocks

from components.location_check import check_gpu_location
from config.gpu_zones import ComputeAnswers, ComputeUnansweredError, location_problems
from config.settings import SettingsError, StackSettings, load_settings

# A project's view: region -> zone -> machine types offered (a made-up table, not Google's).
WORLD: Mapping[str, Mapping[str, frozenset[str]]] = {
    "us-central1": {
        "us-central1-a": frozenset({"a3-ultragpu-8g"}),
        "us-central1-b": frozenset({"a4-highgpu-8g", "a4x-highgpu-4g"}),
        "us-central1-c": frozenset(),
    },
    "europe-west1": {"europe-west1-b": frozenset(), "europe-west1-c": frozenset()},
    "europe-west4": {
        "europe-west4-a": frozenset(),
        "europe-west4-b": frozenset({"a3-ultragpu-8g"}),
    },
}
GOOD = {
    "gcp:project": "my-proj",
    "verl-gke:hfToken": "hf_abcdefghijklmnop",
    "verl-gke:reservation": "my-res",
}


def _settings(stack: str, region: str, zone: str) -> StackSettings:
    values = {**GOOD, "gcp:region": region, "verl-gke:zone": zone}
    return load_settings(stack, values, offline=False).settings


def _table_api(world: Mapping[str, Mapping[str, frozenset[str]]] = WORLD) -> ComputeAnswers:
    return ComputeAnswers(
        regions=lambda: sorted(world),
        zones=lambda region: sorted(world[region]),
        offers=lambda zone, machine: machine in world[zone.rsplit("-", 1)[0]][zone],
    )


def _after_fix(stack: str, region: str, zone: str, problem: str) -> tuple[str, str]:
    """(region, zone) once each `pulumi config set` of the problem's fix is applied."""
    fix = problem.split("Fix: ", 1)[1]
    for key, value in re.findall(r"pulumi config set ([\w-]+:\w+) (\S+) -s " + stack, fix):
        if key == "gcp:region":
            region = value
        elif key == "verl-gke:zone":
            zone = value
    return region, zone


@pytest.mark.parametrize(
    ("stack", "region", "zone", "named"),
    [
        ("a3u", "us-central9", "us-central9-b", "gcp:region = 'us-central9'"),
        ("a3u", "us-central1", "us-central1-z", "verl-gke:zone = 'us-central1-z' is not a zone"),
        ("a4x", "us-central1", "us-central1-a", "does not offer a4x-highgpu-4g"),
        ("a3u", "europe-west4", "europe-west4-a", "does not offer a3-ultragpu-8g"),
    ],
)
def test_a_location_the_api_refuses_is_refused_with_a_fix_it_accepts(
    stack: str, region: str, zone: str, named: str
) -> None:
    (problem,), notes = location_problems(_settings(stack, region, zone), _table_api())
    assert named in problem and notes == []
    fixed = _after_fix(stack, region, zone, problem)
    assert fixed != (region, zone), problem
    assert location_problems(_settings(stack, *fixed), _table_api()) == ([], [])


def test_a_region_where_no_zone_offers_the_machine_says_how_to_find_one() -> None:
    # The case: A4X in europe-west1-b.
    (problem,), _ = location_problems(
        _settings("a4x", "europe-west1", "europe-west1-b"), _table_api()
    )
    assert problem.startswith(
        "verl-gke:zone = 'europe-west1-b' does not offer a4x-highgpu-4g, in gcp:region "
        "'europe-west1', and no zone of europe-west1 offers a4x-highgpu-4g"
    )
    assert 'gcloud compute machine-types list --filter="name=a4x-highgpu-4g"' in problem


def test_an_api_that_does_not_answer_is_a_warning_never_a_refusal() -> None:
    def unanswered(*_: object) -> Any:
        raise ComputeUnansweredError("regions.list failed: 403 Compute Engine API disabled")

    api = ComputeAnswers(regions=unanswered, zones=unanswered, offers=unanswered)
    problems, (note,) = location_problems(_settings("a4x", "us-central1", "us-central1-b"), api)
    assert problems == []
    assert "were not checked against the Compute API (regions.list failed: 403" in note


@pytest.mark.parametrize(
    ("stack", "region", "zone", "named"),
    [
        ("a3u", "us-central9", "us-central9-b", "gcp:region = 'us-central9': the Compute API"),
        ("a4x", "us-central1", "us-central1-a", "does not offer a4x-highgpu-4g, in gcp:region"),
    ],
)
def test_a_refusal_stands_when_the_api_stops_answering_while_a_fix_is_sought(
    stack: str, region: str, zone: str, named: str
) -> None:
    # regions.list and zones.list answer, and so does machineTypes.list of the stack's own zone,
    # so the verdict is definite (Compute Engine API v1); the calls that only look for a zone to
    # suggest fail.
    table = _table_api()

    def offers(asked: str, machine: str) -> bool:
        if asked == zone:
            return table.offers(asked, machine)
        raise ComputeUnansweredError("machineTypes.list failed: 503")

    api = ComputeAnswers(regions=table.regions, zones=table.zones, offers=offers)
    (problem,), notes = location_problems(_settings(stack, region, zone), api)
    assert named in problem and notes == []
    assert "no zone of" not in problem  # not known: the API did not say
    assert 'gcloud compute machine-types list --filter="name=' in problem


# --- the real pulumi_gcp invokes, answered by the Pulumi runtime's mocks -------------------------


def _machine_type(name: str, zone: str) -> dict[str, Any]:
    # The fields of a machineTypes.list item that pulumi_gcp's result type requires.
    return {
        "name": name, "accelerators": [], "architecture": "X86_64", "bundledLocalSsds": [],
        "deprecateds": [], "description": name, "guestCpus": 1, "isSharedCpus": False,
        "maximumPersistentDisks": 1, "maximumPersistentDisksSizeGb": 1, "memoryMb": 1,
        "selfLink": f"zones/{zone}/machineTypes/{name}",
    }  # fmt: skip


class _ComputeApi(mocks.Mocks):
    """Answers the invokes as the provider returns Compute API v1 lists; `fail` raises."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def new_resource(self, args: mocks.MockResourceArgs) -> tuple[str, dict]:
        raise AssertionError(f"no resource may be created: {args.typ}")

    def call(self, args: mocks.MockCallArgs) -> dict[str, Any]:
        given = dict(args.args)
        self.calls.append((args.token, given))
        if self.fail:
            raise RuntimeError("googleapi: Error 403: Compute Engine API has not been used")
        if args.token == "gcp:compute/getRegions:getRegions":
            return {"names": sorted(WORLD), "id": "regions", "project": given["project"]}
        if args.token == "gcp:compute/getZones:getZones":
            return {"names": sorted(WORLD[given["region"]]), "id": "zones"}
        if args.token == "gcp:compute/getMachineTypes:getMachineTypes":
            zone = given["zone"]
            offered = WORLD[zone.rsplit("-", 1)[0]][zone]
            wanted = given["filter"].removeprefix("name = ")
            found = [_machine_type(m, zone) for m in sorted(offered) if m == wanted]
            # An empty list may be left out of the answer: the zone still offers nothing.
            return {"machineTypes": found, "id": "types"} if found else {"id": "types"}
        raise AssertionError(args.token)


@pytest.fixture
def compute_api() -> Iterator[_ComputeApi]:
    api = _ComputeApi()
    pulumi.runtime.set_mocks(api, preview=False)
    yield api
    pulumi.runtime.set_mocks(_ComputeApi(fail=True), preview=False)


def test_pulumi_up_asks_the_compute_api_and_refuses_a_zone_without_the_machine(
    compute_api: _ComputeApi,
) -> None:
    settings = _settings("a4x", "us-central1", "us-central1-a")
    with pytest.raises(SettingsError, match="Fix: pulumi config set verl-gke:zone us-central1-b"):
        check_gpu_location(settings, warn=pytest.fail)
    assert (
        "gcp:compute/getMachineTypes:getMachineTypes",
        {"filter": "name = a4x-highgpu-4g", "zone": "us-central1-a", "project": "my-proj"},
    ) in compute_api.calls
    check_gpu_location(_settings("a4x", "us-central1", "us-central1-b"), warn=pytest.fail)


def test_pulumi_up_goes_on_with_a_warning_when_the_compute_api_fails(
    compute_api: _ComputeApi,
) -> None:
    compute_api.fail = True
    warnings: list[str] = []
    check_gpu_location(_settings("a4x", "us-central1", "us-central1-b"), warn=warnings.append)
    (warning,) = warnings
    assert "regions.list failed: googleapi: Error 403" in warning
