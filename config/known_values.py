"""Values a setting can only take from a list that exists outside this program (regions and zones,
published chart versions, GKE's Kubernetes minors, names a cluster already holds), each table
with its source. Pure functions: settings.py turns a returned reason into `key = value: reason.
Fix: ...`, and every suggestion returned here is itself accepted by the same rule.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from datetime import date
from types import MappingProxyType

# --- regions and zones -----------------------------------------------------------------------
# Compute Engine regions and their zone letters from the public "Regions and zones" table
# (cloud.google.com/compute/docs/regions-zones), as listed in 2025: a partial list. It is not every
# location a project can use: AI zones (`us-central1-ai1a`, `us-south1-ai1b`; "AI zones",
# docs.cloud.google.com/compute/docs/regions-zones/ai-zones) are visible only to projects with
# reserved capacity there, and regions such as us-east7 are not in the public table. So a
# location missing here is a warning, never a refusal: only a malformed name is refused
# (settings.py), and `gcloud compute zones list` prints the project's live list.
REGION_ZONES: Mapping[str, str] = MappingProxyType(
    {
        "africa-south1": "abc",
        "asia-east1": "abc",
        "asia-east2": "abc",
        "asia-northeast1": "abc",
        "asia-northeast2": "abc",
        "asia-northeast3": "abc",
        "asia-south1": "abc",
        "asia-south2": "abc",
        "asia-southeast1": "abc",
        "asia-southeast2": "abc",
        "australia-southeast1": "abc",
        "australia-southeast2": "abc",
        "europe-central2": "abc",
        "europe-north1": "abc",
        "europe-north2": "abc",
        "europe-southwest1": "abc",
        "europe-west1": "bcd",
        "europe-west2": "abc",
        "europe-west3": "abc",
        "europe-west4": "abc",
        "europe-west6": "abc",
        "europe-west8": "abc",
        "europe-west9": "abc",
        "europe-west10": "abc",
        "europe-west12": "abc",
        "me-central1": "abc",
        "me-central2": "abc",
        "me-west1": "abc",
        "northamerica-northeast1": "abc",
        "northamerica-northeast2": "abc",
        "northamerica-south1": "abc",
        "southamerica-east1": "abc",
        "southamerica-west1": "abc",
        "us-central1": "abcf",
        "us-east1": "bcd",
        "us-east4": "abc",
        "us-east5": "abc",
        "us-south1": "abc",
        "us-west1": "abc",
        "us-west2": "abc",
        "us-west3": "abc",
        "us-west4": "abc",
    }
)


def nearest_region(value: str) -> str:
    """The listed region closest to `value` as typed (us-central9 -> us-central1)."""
    close = difflib.get_close_matches(value, list(REGION_ZONES), n=1, cutoff=0.0)
    return close[0] if close else "us-central1"


# A standard zone is REGION-LETTER; an AI zone is REGION-aiN + the letter of its parent zone
# ("AI zones": us-central1-a is the parent zone of us-central1-ai1a).
_ZONE = re.compile(r"^(?P<region>[a-z]+-[a-z]+[0-9]+)-(?P<suffix>(?:ai[0-9]+)?[a-z])$")


def is_zone(name: str) -> bool:
    """`name` is spelled as a zone (REGION-LETTER or REGION-aiN+LETTER)."""
    return _ZONE.match(name) is not None


def region_for_fix(region: str, zone: str) -> str:
    """The region a fix names: `region` if it is a region name, else the zone's region, else
    the listed region nearest to what was typed (a zone typed as the region: its region)."""
    if re.fullmatch(r"[a-z]+-[a-z]+[0-9]+", region):
        return region
    zone_match = _ZONE.match(zone)
    if zone_match:
        return zone_match["region"]
    typed = _ZONE.match(region)
    return typed["region"] if typed else nearest_region(region)


def zone_in(region: str, letter: str = "b") -> str:
    """Zone `letter` of `region`: for a listed region one of its zones (its first when it has no
    such letter); for another region the letter as asked."""
    letters = REGION_ZONES.get(region)
    if letters is None:
        return f"{region}-{letter}"
    return f"{region}-{letter if letter in letters else letters[0]}"


def location_notice(region: str, zone: str) -> str | None:
    """A warning when `region` or a standard zone is missing from the public table (a typo, or a
    location the table does not list); None when both are listed. AI zones are never in it."""
    match = _ZONE.match(zone)
    if region not in REGION_ZONES:
        near = nearest_region(region)
        return (
            f"gcp:region {region!r} is not in the public Compute Engine region table "
            f"(config/known_values.py; nearest: {near}). If it is a typo, GKE fails when it "
            "creates the cluster; check it with `gcloud compute regions list`."
        )
    if (
        match
        and match["suffix"] not in REGION_ZONES[region]
        and not match["suffix"].startswith("ai")
    ):
        zones = ", ".join(f"{region}-{z}" for z in REGION_ZONES[region])
        return (
            f"zone {zone!r} is not in the public Compute Engine zone table ({region}: {zones}). "
            "If it is a typo, GKE fails when it creates the GPU node pool; check it with "
            "`gcloud compute zones list`."
        )
    return None


# --- Helm chart versions ---------------------------------------------------------------------
# Every published release of the charts the program installs, up to the date each table was read;
# `helm install --version X` fails for any other X, after the cluster (and on A4X the GPU pool)
# exists. A version above the newest listed one may have been published since: it is accepted
# with a warning (chart_version_notice), unless it lies beyond what can have been released since
# the table was read (KubeRay, below); a gap inside the table is refused.
# kuberay-operator: the chart of each release tag of ray-project/kuberay
# (helm-chart/kuberay-operator/Chart.yaml, tags v1.0.0 ... v1.7.0, read at feeaf72, 2026-08-19;
# the v1.1.1 tag's Chart.yaml still says 1.1.0, and the chart repository's index.yaml,
# ray-project/kuberay-helm gh-pages, lists 1.1.1). Release candidates and the 0.x charts are
# published too but not listed: the 0.x charts predate the ray.io/v1 API this program uses.
KUBERAY_CHART_VERSIONS = (
    "1.0.0",
    "1.1.0",
    "1.1.1",
    "1.2.0",
    "1.2.1",
    "1.2.2",
    "1.3.0",
    "1.3.1",
    "1.3.2",
    "1.4.0",
    "1.4.1",
    "1.4.2",
    "1.5.0",
    "1.5.1",
    "1.5.2",
    "1.6.0",
    "1.6.1",
    "1.6.2",
    "1.7.0",
)
# nvidia-dra-driver-gpu: the chart version of each release tag of NVIDIA/k8s-dra-driver-gpu
# (deployments/helm/nvidia-dra-driver-gpu/Chart.yaml, read at 22407113, 2026-05-15; later
# releases are a chart renamed dra-driver-nvidia-gpu, v0.4.0 on).
DRA_DRIVER_CHART_VERSIONS = ("25.3.0", "25.3.1", "25.3.2", "25.8.0", "25.8.1", "25.12.0")
_RELEASE = re.compile(
    r"^(?P<major>[0-9]+)\.(?P<minor>[0-9]+)\.(?P<patch>[0-9]+)(?:-[0-9A-Za-z.-]+)?$"
)


def _release(version: str) -> tuple[int, int, int] | None:
    match = _RELEASE.match(version.removeprefix("v"))
    return (int(match["major"]), int(match["minor"]), int(match["patch"])) if match else None


def _newer_than_listed(value: str, published: tuple[str, ...]) -> bool:
    release = _release(value)
    newest = max(_release(v) or (0, 0, 0) for v in published)
    return release is not None and release > newest


# KubeRay's minor releases (tag dates of ray-project/kuberay): v1.0.0 2023-11-05, v1.1.0
# 2024-03-21, v1.2.0 2024-08-29, v1.3.0 2025-02-18, v1.4.0 2025-06-20, v1.5.0 2025-11-04, v1.6.0
# 2026-03-18, v1.7.0 2026-08-19: never two within four months. So no more than one minor every
# three months can have followed the newest listed release; a version beyond that (1.70.0) was
# never published, while one within it may have been and gets only the notice.
KUBERAY_CHART_VERSIONS_READ = date(2026, 8, 19)
MONTHS_PER_MINOR_AT_MOST = 3


def _beyond_release_window(
    value: str, published: tuple[str, ...], since: date, today: date
) -> str | None:
    """Why `value` cannot have been released by `today` when `published` was complete on
    `since`; None when it may have been."""
    release = _release(value)
    newest = max(_release(v) or (0, 0, 0) for v in published)
    if release is None or release <= newest:
        return None
    months = (today.year - since.year) * 12 + today.month - since.month
    highest_minor = newest[1] + 1 + max(months, 0) // MONTHS_PER_MINOR_AT_MOST
    if (release[0] == newest[0] and release[1] <= highest_minor) or release[0] == newest[0] + 1:
        return None
    return (
        f"not a release of the chart: {published[-1]} was the newest on {since:%Y-%m-%d}, and "
        f"at most one minor release every {MONTHS_PER_MINOR_AT_MOST} months can have followed "
        f"(up to {newest[0]}.{highest_minor} by {today:%Y-%m})"
    )


def chart_version_problem(
    value: str,
    published: tuple[str, ...],
    usable: tuple[str, ...],
    released_since: date | None = None,
    today: date | None = None,
) -> tuple[str, str] | None:
    """(reason, the nearest of the `usable` versions) when `value` is not a published version;
    None for a listed one and for one newer than every listed one (chart_version_notice) that
    may have been released since the table was read (`released_since`, when given)."""
    close = difflib.get_close_matches(value.removeprefix("v"), usable, n=1, cutoff=0.0)
    if released_since is not None:
        beyond = _beyond_release_window(value, published, released_since, today or date.today())
        if beyond:
            return beyond, usable[-1]
    if value.removeprefix("v") in published or _newer_than_listed(value, published):
        return None
    return (
        f"not a published release of the chart (published up to {published[-1]}: "
        f"{', '.join(published)})",
        close[0] if close else usable[-1],
    )


def chart_version_notice(key: str, value: str, published: tuple[str, ...]) -> str | None:
    if not _newer_than_listed(value, published):
        return None
    return (
        f"{key} = {value!r} is newer than the releases this program has read (up to "
        f"{published[-1]}, config/known_values.py); if it was never published, `helm install` "
        "fails after the cluster exists (`helm search repo --versions` lists them)."
    )


# --- Kubernetes versions ---------------------------------------------------------------------
# GKE offers no Kubernetes minor before upstream Kubernetes releases it. The newest minor this
# program has read is 1.37 (kubernetes-validate 1.37.0 ships schemas 1.25 ... 1.37),
# released by August 2026; upstream releases three minors a year
# ("Kubernetes Release Cadence", KEP-2572), so no more than one every three months after it. A
# floor above every version GKE offers fails only after the cluster exists
# (components/gke_cluster.py compares the cluster's version with the floor); a bound that did not
# move with the date would, from the next release on, refuse a version GKE does offer.
NEWEST_KUBERNETES_MINOR = 37
NEWEST_KUBERNETES_MINOR_SINCE = date(2026, 8, 1)


def newest_possible_minor(today: date) -> int:
    """The highest minor upstream can have released by `today` (one of slack for the month)."""
    months = (today.year - NEWEST_KUBERNETES_MINOR_SINCE.year) * 12 + (
        today.month - NEWEST_KUBERNETES_MINOR_SINCE.month
    )
    return NEWEST_KUBERNETES_MINOR + 1 + max(months, 0) // 3


def kubernetes_minor_problem(minor: int, today: date | None = None) -> str | None:
    newest = newest_possible_minor(today or date.today())
    if minor <= newest:
        return None
    return (
        f"no GKE release channel offers 1.{minor}: Kubernetes releases at most one minor every "
        f"three months, and 1.{NEWEST_KUBERNETES_MINOR} came out in "
        f"{NEWEST_KUBERNETES_MINOR_SINCE:%B %Y}"
    )


# --- names a cluster already holds -----------------------------------------------------------
# Kubernetes reserves the `kube-` prefix for system namespaces ("Namespaces", kubernetes.io:
# "Avoid creating namespaces with the prefix kube-"); GKE runs its own components in `gke-*` and
# `gmp-*` namespaces (gke-managed-*, gmp-system, gmp-public). The program creates the workload
# namespace (unless it is `default`) and the KSA, and pulumi-kubernetes >= 4.29 fails on an object
# that already exists.
RESERVED_NAMESPACE_PREFIXES = ("kube-", "gke-", "gmp-")
# Every namespace has a ServiceAccount `default` (kube-controller-manager's serviceaccount
# controller creates it).
EXISTING_SERVICE_ACCOUNTS = frozenset({"default"})
SUGGESTED_NAMESPACE = "verl"
SUGGESTED_KSA = "verl-ray"


def namespace_problem(value: str, taken: Mapping[str, str]) -> str | None:
    """Why the program cannot create namespace `value`; `taken` maps namespaces other components
    of this stack create to the component."""
    if value.startswith(RESERVED_NAMESPACE_PREFIXES):
        return (
            f"namespaces starting with {', '.join(RESERVED_NAMESPACE_PREFIXES)} are reserved for "
            "Kubernetes and GKE (kube-system, kube-public, kube-node-lease and gmp-system exist "
            "on every GKE cluster, and creating one fails with AlreadyExists)"
        )
    if value in taken:
        return f"{taken[value]} creates this namespace itself; two owners of one object fail"
    return None


def ksa_problem(value: str) -> str | None:
    if value in EXISTING_SERVICE_ACCOUNTS:
        return (
            "every namespace already has this ServiceAccount, so creating it fails (and its "
            "Workload Identity binding would apply to every pod that names no account)"
        )
    return None


# --- GCS bucket names ------------------------------------------------------------------------
# GCS "Bucket naming rules": names cannot begin with the "goog" prefix, and cannot contain
# "google" or close misspellings such as "g00gle". The rule reads the name as written: two words
# that only meet across a separator ("dog-ogle") are no spelling of google, so separators are not
# removed before matching.
_LOOKALIKE = str.maketrans({"0": "o", "1": "l", "3": "e", "9": "g"})
_GOOGLE_LIKE = re.compile(r"g+o{1,}g+l+e")


def google_like(name: str) -> bool:
    lowered = name.lower()
    return lowered.startswith("goog") or bool(_GOOGLE_LIKE.search(lowered.translate(_LOOKALIKE)))


# --- single-architecture images --------------------------------------------------------------
# The NCCL gIB installer is published as one repository per architecture
# (container-engine-accelerators gpudirect-gib manifests; Cluster Toolkit's A4X blueprint uses
# nccl-plugin-gib-arm64): an amd64 image on arm64 nodes fails with "exec format error".
SINGLE_ARCH_IMAGES: Mapping[str, str] = MappingProxyType(
    {
        "us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib": "amd64",
        "us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib-arm64": "arm64",
    }
)


def image_arch_problem(image: str, arch: str) -> str | None:
    repository = re.split(r"[:@]", image.rsplit("/", 1)[-1], maxsplit=1)[0]
    path = f"{image.rsplit('/', 1)[0]}/{repository}" if "/" in image else repository
    built_for = SINGLE_ARCH_IMAGES.get(path)
    if built_for is None or built_for == arch:
        return None
    return f"this image is built for {built_for} only and the GPU nodes are {arch}"
