"""Whether gcp:region and verl-gke:zone exist and the zone offers the profile's machine type, from
the Compute API's answers during `pulumi up` (components/location_check.py asks them).

No primary table of the zones that offer a4x-highgpu-4g, a4-highgpu-8g and a3-ultragpu-8g was
found for this program (Google's "GPU regions and zones" page was not in the sources at hand), so
the offline plan checks only what can be known without the API: the names' format and the zone's
region (config/stack_rules.py), and warns about a location missing from the partial public region
table (config/known_values.py). With credentials, the API is the source: regions.list,
zones.list and machineTypes.list of the stack's project (Compute Engine API v1). An API that does
not answer is no verdict: only a definite "no such region", "no such zone" or "not offered" is
refused, before any resource exists.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from config.settings import StackSettings, config_key


class ComputeUnansweredError(Exception):
    """The Compute API gave no answer (no credentials, API disabled, network): no verdict."""


@dataclass(frozen=True)
class ComputeAnswers:
    """The Compute API's answers for the stack's project; each raises ComputeUnansweredError."""

    regions: Callable[[], Sequence[str]]
    zones: Callable[[str], Sequence[str]]  # the zones of a region
    offers: Callable[[str, str], bool]  # (zone, machine type) -> machineTypes.list has it


def location_problems(s: StackSettings, api: ComputeAnswers) -> tuple[list[str], list[str]]:
    """(problems, notes): a problem names the setting, its value and a fix the same checks
    accept; a note says what could not be checked and why."""
    machine = s.profile.machine_type
    try:
        regions = list(api.regions())
        if not regions:  # every project sees regions: an empty list is no answer
            raise ComputeUnansweredError("regions.list returned no region")
        if s.region not in regions:
            return [_region_problem(s, regions, api)], []
        zones = list(api.zones(s.region))
        if not zones:  # a listed region has zones: an empty list is no answer
            raise ComputeUnansweredError(f"zones.list of {s.region} returned no zone")
        if s.zone not in zones:
            return [_zone_problem(s, zones, api, "is not a zone of")], []
        if not api.offers(s.zone, machine):
            return [_zone_problem(s, zones, api, f"does not offer {machine}, in")], []
    except ComputeUnansweredError as error:
        return [], [
            f"gcp:region {s.region!r} and {config_key('zone')} {s.zone!r} were not checked "
            f"against the Compute API ({error}); GKE refuses a location that does not offer "
            f"{machine} when it creates the GPU node pool"
        ]
    return [], []


def _offering_zones(
    zones: Callable[[], Sequence[str]], machine: str, api: ComputeAnswers
) -> list[str] | None:
    """The zones that offer `machine`, for a fix; None when the API stopped answering after its
    verdict (the verdict stands, the fix then says how to find a zone)."""
    try:
        return [zone for zone in sorted(zones()) if api.offers(zone, machine)]
    except ComputeUnansweredError:
        return None


def _zone_problem(s: StackSettings, zones: Sequence[str], api: ComputeAnswers, what: str) -> str:
    machine = s.profile.machine_type
    offering = _offering_zones(lambda: zones, machine, api)
    where = f"{config_key('zone')} = {s.zone!r} {what} gcp:region {s.region!r}"
    if offering:
        return (
            f"{where} (the Compute API: zones offering {machine} there: {', '.join(offering)}). "
            f"Fix: {s.fix('zone', offering[0])} (the zone of your reservation, if you have one)"
        )
    none_there = f", and no zone of {s.region} offers {machine}" if offering == [] else ""
    return (
        f"{where}{none_there} (the Compute API). Fix: choose a "
        f'region and zone that do (`gcloud compute machine-types list --filter="name={machine}"`'
        f"), then pulumi config set gcp:region REGION -s {s.stack} and "
        f"{s.fix('zone', 'ZONE')}"
    )


def _region_problem(s: StackSettings, regions: Sequence[str], api: ComputeAnswers) -> str:
    machine = s.profile.machine_type
    where = (
        f"gcp:region = {s.region!r}: the Compute API lists no such region for project {s.project}"
    )
    near = difflib.get_close_matches(s.region, regions, n=1, cutoff=0.0)
    offering = _offering_zones(lambda: api.zones(near[0]), machine, api) if near else None
    if offering:
        return (
            f"{where} (nearest: {near[0]}, where {offering[0]} offers {machine}). Fix: "
            f"pulumi config set gcp:region {near[0]} -s {s.stack} and "
            f"{s.fix('zone', offering[0])}"
        )
    return (
        f"{where}. Fix: choose a region and zone that offer {machine} (`gcloud compute "
        f'machine-types list --filter="name={machine}"`), then pulumi config set gcp:region '
        f"REGION -s {s.stack} and {s.fix('zone', 'ZONE')}"
    )
