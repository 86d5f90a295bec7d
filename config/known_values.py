"""Values a setting can only take from a list that exists outside this program (regions and zones,
published chart versions, GKE's Kubernetes minors, names a cluster already holds), each table
with its source. Pure functions: settings.py turns a returned reason into `key = value: reason.
Fix: ...`, and every suggestion returned here is itself accepted by the same rule.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from types import MappingProxyType

# --- regions and zones -----------------------------------------------------------------------
# Compute Engine regions and their zone letters: "Regions and zones", "Available regions and
# zones" table (cloud.google.com/compute/docs/regions-zones), as listed in 2025; `gcloud compute
# zones list` prints the live list. A region or zone missing here fails only when GKE creates the
# cluster or the GPU pool, after the paid steps before it.
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


_ZONE = re.compile(r"^(?P<region>[a-z]+-[a-z]+[0-9]+)-[a-z]$")


def region_for_fix(region: str, zone: str) -> str:
    """The region a fix names: `region` if it exists, else the zone's region if that exists,
    else the listed region nearest to what was typed (a zone typed as the region: its region)."""
    if region in REGION_ZONES:
        return region
    zone_match = _ZONE.match(zone)
    if zone_match and zone_match["region"] in REGION_ZONES:
        return zone_match["region"]
    typed = _ZONE.match(region)
    return nearest_region(typed["region"] if typed else region)


def zone_in(region: str, letter: str = "b") -> str:
    """Zone `letter` of a listed region, or its first zone when it has no such letter."""
    letters = REGION_ZONES[region]
    return f"{region}-{letter if letter in letters else letters[0]}"


def region_problem(region: str) -> str | None:
    if region in REGION_ZONES:
        return None
    return (
        "not a Compute Engine region (gcloud compute regions list shows them; a region opened "
        "after this program's table in config/known_values.py needs adding there)"
    )


def zone_problem(zone: str, region: str) -> tuple[str, str] | None:
    """(reason, a zone that exists in `region`) when `zone` is not one of its zones; None when it
    is, or when `region` is itself unknown (region_problem reports that)."""
    letters = REGION_ZONES.get(region)
    if letters is None or not zone.startswith(f"{region}-"):
        return None
    letter = zone.removeprefix(f"{region}-")
    if letter in letters:
        return None
    zones = ", ".join(f"{region}-{z}" for z in letters)
    return f"{region} has the zones {zones} only", f"{region}-{letters[0]}"


# --- Helm chart versions ---------------------------------------------------------------------
# Every published release of the charts the program installs; `helm install --version X` fails
# for any other X, after the cluster (and on A4X the GPU pool) exists.
# kuberay-operator: the chart of each release tag of ray-project/kuberay
# (helm-chart/kuberay-operator/Chart.yaml, tags v1.0.0 ... v1.7.0, read at feeaf72, 2026-08-19).
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
# (deployments/helm/nvidia-dra-driver-gpu/Chart.yaml, read at 22407113, 2026-05-15).
DRA_DRIVER_CHART_VERSIONS = ("25.3.0", "25.3.1", "25.3.2", "25.8.0", "25.8.1", "25.12.0")


def chart_version_problem(
    value: str, published: tuple[str, ...], usable: tuple[str, ...]
) -> tuple[str, str] | None:
    """(reason, the nearest of the `usable` versions) when `value` is not a published version."""
    if value.removeprefix("v") in published:
        return None
    close = difflib.get_close_matches(value.removeprefix("v"), usable, n=1, cutoff=0.0)
    return (
        f"not a published release of the chart (known: {', '.join(published)})",
        close[0] if close else usable[-1],
    )


# --- Kubernetes versions ---------------------------------------------------------------------
# GKE offers no Kubernetes minor before upstream Kubernetes releases it; the newest upstream minor
# this program knows is 1.37 (kubernetes-validate 1.37.0 ships schemas 1.25 ... 1.37,
# reference/test-tooling.md). A floor above every version GKE offers fails only after the cluster
# exists (components/gke_cluster.py compares the cluster's version with the floor).
NEWEST_KUBERNETES_MINOR = 37


def kubernetes_minor_problem(minor: int) -> str | None:
    if minor <= NEWEST_KUBERNETES_MINOR:
        return None
    return (
        f"no GKE release channel offers 1.{minor}: the newest Kubernetes minor released is "
        f"1.{NEWEST_KUBERNETES_MINOR}"
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
# "google" or close misspellings such as "g00gle".
_LOOKALIKE = str.maketrans({"0": "o", "1": "l", "3": "e", "9": "g"})
_GOOGLE_LIKE = re.compile(r"g+o{1,}g+l+e")


def google_like(name: str) -> bool:
    squashed = re.sub(r"[-_.]", "", name.lower().translate(_LOOKALIKE))
    return name.lower().startswith("goog") or bool(_GOOGLE_LIKE.search(squashed))


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
