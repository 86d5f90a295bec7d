"""Google Cloud list prices the plan's "What you pay for" block multiplies, each with the page it
was read from and the date it was read.

Prices are in USD, before taxes, discounts and committed-use or negotiated rates, and vary by
region: the figures are for REGION (Iowa, us-central1) unless a price says "global". A price the
pages did not show when read is None: the plan then prints "price not in table (see <page>)" for
that line instead of a guess. The accelerator-optimized pages (GPU machines, Spot and
flex-start rates) and the N4 page render their tables in the browser, and the copies read here
held no figures for a4x-highgpu-4g, a4-highgpu-8g, a3-ultragpu-8g or n4-highmem-16. Searched
again on 2026-12-02 (the GPU, VM instance, Spot and all-pricing pages, About Flex-start VMs, the
accelerator-optimized machine family page): the copies reached show the billing model and no
figure. Figures found only in third-party compilations of the Cloud Billing catalog are not
Google's page and are not entered here.

To update: read the page, change `usd` and `read_on` together.
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


@dataclass(frozen=True)
class Price:
    usd: float | None  # None: not in the table (the page showed no figure when read)
    unit: str
    source: str
    read_on: str  # ISO date the page was read
    region: str = REGION


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

# GPU machine per node-hour, by capacity. A reservation bills the machine at its default
# (on-demand) rate, or the rate of the commitment or calendar-mode reservation that holds it,
# from the reservation's own start whether VMs use it or not (Compute Engine VM instance
# pricing: reserved resources are billed as running instances).
GPU_MACHINE: Mapping[tuple[str, Capacity], Price] = MappingProxyType(
    {
        (machine, capacity): _price(None, "per node-hour", source)
        for machine in ("a4x-highgpu-4g", "a4-highgpu-8g", "a3-ultragpu-8g")
        for capacity, source in (
            (Capacity.RESERVATION, GPU_PRICING),
            (Capacity.FLEX_START, FLEX_START_PRICING),
            (Capacity.SPOT, SPOT_PRICING),
        )
    }
)
# The Standard CPU node pool's machine, per node-hour (default and only priced machine).
CPU_MACHINE: Mapping[str, Price] = MappingProxyType(
    {"n4-highmem-16": _price(None, "per node-hour", VM_PRICING)}
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
    fallback = _price(None, "per node-hour", GPU_PRICING)
    return GPU_MACHINE.get((machine_type, capacity), fallback)


def cpu_machine_price(machine_type: str) -> Price:
    return CPU_MACHINE.get(machine_type, _price(None, "per node-hour", VM_PRICING))
