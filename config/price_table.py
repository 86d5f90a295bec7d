"""Google Cloud list prices the plan and `pulumi up`'s log multiply when nothing better is known,
each with where it was read and when.

Prices are in USD, before taxes, discounts and committed-use or negotiated rates, and vary by
region: the figures are for REGION (Iowa, us-central1) unless a price says "global". Order of
precedence (training/run_cost.py): the user's own rate (`verl-gke:gpuNodeHourlyUsd`), then the
Cloud Billing Catalog read during `pulumi up` (training/live_prices.py), then this table.

GPU machines: Google's pricing pages (GPU, VM instance, Spot, all-pricing, About Flex-start VMs)
render their tables in the browser; the copies read here held no figures. The figures below are
SkyPilot's GCP catalog (SKYPILOT_CATALOG), which its fetcher builds from Google's own Cloud
Billing Catalog API (skypilot-org/skypilot sky/catalog/data_fetchers/fetch_gcp.py: the host is
vCPUs x the "A3 Instance" Core SKU + GiB x its Ram SKU, the GPUs are count x the "H200 141GB GPU"
SKU; OnDemand and Preemptible usage types). Where neither shows a figure the price is None and
`basis` says why and where the user finds theirs: never a guess.

To update: read the source again, change `usd` and `read_on` together.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from config.profiles import Capacity

# The region the figures are for.
REGION = "us-central1"

GKE_PRICING = "https://cloud.google.com/kubernetes-engine/pricing"
GCS_PRICING = "https://cloud.google.com/storage/pricing"
LOGGING_PRICING = "https://cloud.google.com/stackdriver/pricing"
VM_PRICING = "https://cloud.google.com/compute/vm-instance-pricing"
GPU_PRICING = "https://cloud.google.com/compute/gpus-pricing"
SPOT_PRICING = "https://cloud.google.com/spot-vms/pricing"
# Flex-start VMs are billed at their own discounted SKUs (Compute Engine "About Flex-start VMs":
# "you obtain vCPUs, memory, and any attached GPUs at a discounted price"; A4X is not offered as
# a Flex-start VM there). The rates are listed with the machine's other prices.
FLEX_START_PRICING = "https://cloud.google.com/compute/all-pricing"
# Where a user sees the SKU prices of their own billing account (contract prices included).
BILLING_PRICING_CONSOLE = "https://console.cloud.google.com/billing/pricing"
# SkyPilot's GCP catalog at the commit read (columns Price and SpotPrice, USD per hour).
SKYPILOT_CATALOG = (
    "https://github.com/skypilot-org/skypilot-catalog/blob/"
    "017e2502fb63c7a28757acd94002b2d6099d3e3d/catalogs/v7/gcp/vms.csv"
)
CATALOG_READ_ON = "2026-12-04"


@dataclass(frozen=True)
class Price:
    usd: float | None  # None: no figure from any source read (basis says why and where to look)
    unit: str
    source: str
    read_on: str  # ISO date the source was read
    region: str = REGION
    basis: str = ""  # how the figure applies, or why there is none and where to find it
    at_most: bool = False  # the figure is an upper bound (a discount applies that is not known)


def _price(usd: float | None, unit: str, source: str, read_on: str = "2026-12-01") -> Price:
    return Price(usd, unit, source, read_on)


# GKE pricing: "A flat cluster management fee of $0.10 per cluster per hour (charged in 1 second
# increments) applies to all GKE clusters irrespective of the mode of operation" (Standard and
# Autopilot alike); the free tier's $74.40 monthly credit per billing account applies to zonal
# and Autopilot clusters only.
CLUSTER_FEE = Price(0.10, "per cluster-hour", GKE_PRICING, "2026-12-01", region="global")
# Cloud Storage pricing, Data storage, Regions, Iowa (us-central1): Standard storage $0.020 per
# GB per month, where GB is 2^30 bytes (a GiB).
GCS_STANDARD = _price(0.020, "per GiB-month", GCS_PRICING)
# Google Cloud Observability pricing, Cloud Logging: $0.50/GiB streamed into log buckets, the
# first 50 GiB per project per month free.
LOGGING_INGEST = Price(0.50, "per GiB ingested", LOGGING_PRICING, "2026-12-01", region="global")
LOGGING_FREE_GIB_PER_MONTH = 50

# SkyPilot catalog rows for us-central1 (us-central1-b for the GPU machine):
#   a3-ultragpu-8g,224.0,2952.0,,,,us-central1,us-central1-b,12.266,2.82111   (host)
#   ,,,H200,8,{...144384 MiB...},us-central1,us-central1-b,74.49392,29.7976   (8 x H200)
#   n4-highmem-16,16.0,128.0,,,,us-central1,us-central1-a,0.9951,0.39805
A3U_ON_DEMAND = round(12.266 + 74.49392, 5)  # $86.75992 per node-hour
A3U_SPOT = round(2.82111 + 29.7976, 5)  # $32.61871 per node-hour
N4_HIGHMEM_16_ON_DEMAND = 0.9951

_NODE_HOUR = "per node-hour"
_OWN_RATE = "set verl-gke:gpuNodeHourlyUsd to your rate"
# A reservation bills the machine at its default (on-demand) rate, or the rate of the commitment
# or calendar-mode reservation that holds it, from the reservation's own start whether VMs use it
# or not (Compute Engine VM instance pricing: reserved resources are billed as running
# instances).
_RESERVATION_BASIS = (
    "the on-demand list rate a reservation bills unless a commitment or calendar-mode price "
    f"applies; committed and negotiated rates are not published: {_OWN_RATE}"
)
_FLEX_BASIS = (
    "flex-start bills discounted SKUs (About Flex-start VMs) for which no figure was read, so "
    "this on-demand list rate is an upper bound; pulumi up reads the discounted rate from the "
    f"Cloud Billing catalog, or {_OWN_RATE}"
)
# skypilot-org/skypilot fetch_gcp.py: "GCP does not have A4 instance in SKUs API yet", and the
# catalog has no a4-highgpu-8g row and no B200 row for us-central1.
_A4_BASIS = (
    "Google's Cloud Billing catalog had no A4 (a4-highgpu-8g) price when SkyPilot's fetcher "
    f"read it, and the pricing pages show none: see yours at {BILLING_PRICING_CONSOLE} (SKUs "
    f"'A4 Nvidia B200 (1 gpu slice)'), pulumi up reads the catalog, or {_OWN_RATE}"
)
# AI Hypercomputer A4X guide: reservation-bound provisioning only; no catalog row exists.
_A4X_BASIS = (
    "Google publishes no list price for A4X (a4x-highgpu-4g): it is sold through reservations "
    f"only, at the price of your reservation agreement; {_OWN_RATE}"
)


def _gpu(usd: float | None, basis: str, at_most: bool = False) -> Price:
    return Price(usd, _NODE_HOUR, SKYPILOT_CATALOG, CATALOG_READ_ON, basis=basis, at_most=at_most)


# GPU machine per node-hour, host + GPUs, by capacity mode.
GPU_MACHINE: Mapping[tuple[str, Capacity], Price] = MappingProxyType(
    {
        ("a3-ultragpu-8g", Capacity.RESERVATION): _gpu(A3U_ON_DEMAND, _RESERVATION_BASIS),
        ("a3-ultragpu-8g", Capacity.FLEX_START): _gpu(A3U_ON_DEMAND, _FLEX_BASIS, at_most=True),
        ("a3-ultragpu-8g", Capacity.SPOT): _gpu(
            A3U_SPOT, "Spot list rate (Preemptible SKUs); Spot prices change up to once a month"
        ),
        **{
            ("a4-highgpu-8g", capacity): _gpu(None, _A4_BASIS)
            for capacity in (Capacity.RESERVATION, Capacity.FLEX_START, Capacity.SPOT)
        },
        ("a4x-highgpu-4g", Capacity.RESERVATION): _gpu(None, _A4X_BASIS),
    }
)
# The Standard CPU node pool's machine, per node-hour, on-demand (the pool is neither Spot nor
# flex-start; components/gke_cluster.py).
CPU_MACHINE: Mapping[str, Price] = MappingProxyType(
    {
        "n4-highmem-16": Price(
            N4_HIGHMEM_16_ON_DEMAND,
            _NODE_HOUR,
            SKYPILOT_CATALOG,
            CATALOG_READ_ON,
            basis="on-demand list rate",
        )
    }
)


def every_price() -> dict[str, Price]:
    """Every entry of the table by a readable name (the tests check each has a source and date)."""
    table = {
        "GKE cluster management fee": CLUSTER_FEE,
        "Cloud Storage Standard": GCS_STANDARD,
        "Cloud Logging ingestion": LOGGING_INGEST,
    }
    table.update({f"{m} {c.value}": p for (m, c), p in GPU_MACHINE.items()})
    table.update({m: p for m, p in CPU_MACHINE.items()})
    return table


def gpu_machine_price(machine_type: str, capacity: Capacity) -> Price:
    """The node-hour price of a GPU machine under a capacity mode; a machine or mode the table
    lacks is a None price that points at the GPU pricing page."""
    fallback = Price(
        None, _NODE_HOUR, GPU_PRICING, CATALOG_READ_ON, basis=f"not in the table; {_OWN_RATE}"
    )
    return GPU_MACHINE.get((machine_type, capacity), fallback)


def cpu_machine_price(machine_type: str) -> Price:
    fallback = Price(
        None,
        _NODE_HOUR,
        VM_PRICING,
        CATALOG_READ_ON,
        basis=f"not in the table; see {BILLING_PRICING_CONSOLE}",
    )
    return CPU_MACHINE.get(machine_type, fallback)
