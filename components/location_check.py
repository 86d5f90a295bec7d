"""The Compute API's answers about the stack's region, zone and GPU machine type (pulumi_gcp's
invokes, which use the provider's credentials), checked before any resource is registered by
`pulumi up` (config/gpu_zones.py holds the rules)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import pulumi_gcp as gcp

from config.gpu_zones import ComputeAnswers, ComputeUnansweredError, location_problems
from config.settings import StackSettings, report

T = TypeVar("T")


def _asked(what: str, ask: Callable[[], T]) -> T:
    try:
        return ask()
    except Exception as error:  # any failure of the invoke is no verdict on the location
        raise ComputeUnansweredError(f"{what} failed: {error}") from None


def compute_answers(project: str) -> ComputeAnswers:
    """Compute Engine API v1 regions.list, zones.list (by region) and machineTypes.list (by zone,
    filtered by name) through pulumi_gcp's get_regions, get_zones and get_machine_types."""

    def regions() -> Sequence[str]:
        return _asked("regions.list", lambda: list(gcp.compute.get_regions(project=project).names))

    def zones(region: str) -> Sequence[str]:
        return _asked(
            f"zones.list of {region}",
            lambda: list(gcp.compute.get_zones(project=project, region=region).names),
        )

    def offers(zone: str, machine: str) -> bool:
        # A successful call is an answer: no list (the bridge may leave an empty one out) means
        # the zone offers no machine type of that name.
        found = _asked(
            f"machineTypes.list of {zone}",
            lambda: [
                item.name
                for item in gcp.compute.get_machine_types(
                    project=project, zone=zone, filter=f"name = {machine}"
                ).machine_types
                or []
            ],
        )
        return machine in found

    return ComputeAnswers(regions=regions, zones=zones, offers=offers)


def check_gpu_location(
    settings: StackSettings, warn: Callable[[str], None], api: ComputeAnswers | None = None
) -> None:
    """location_problems raised as a SettingsError; a note (no answer) goes to `warn`."""
    found = location_problems(settings, api or compute_answers(settings.project))
    report(settings.stack, "the Compute API refuses the GPU location", found, warn)
