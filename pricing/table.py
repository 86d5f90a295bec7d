"""Google Cloud list prices the plan and `pulumi up`'s log multiply when nothing better is known,
each with where it was read, when, and how it applies.

Prices are in USD, before taxes, discounts and negotiated rates, and vary by region: the figures
are for REGION (Iowa, us-central1) unless a price says "global". Order of precedence
(pricing/billing.py): the user's own rate (`verl-gke:gpuNodeHourlyUsd`), then the Cloud Billing
Catalog read during `pulumi up` (pricing/catalog.py), then this table.

GPU machines: Google's pricing pages (GPU, VM instance, all-pricing, About Flex-start VMs) render
their tables in the browser; the copies read here held no GPU figures. The figures below come
from Google's Cloud Billing Catalog as others read it:
- SkyPilot's GCP catalog (SKYPILOT_V8), which its fetcher builds from the Cloud Billing Catalog
  API (skypilot-org/skypilot sky/catalog/data_fetchers/fetch_gcp.py: the host is vCPUs x the
  series' Core SKU + GiB x its Ram SKU, the GPUs are count x the GPU SKU; OnDemand and
  Preemptible usage types). Its GPU rows take the FIRST SKU of the usage type whose description
  names the GPU (get_gpu_price breaks on the first match), and Google tags some discounted SKUs
  OnDemand (public catalog readers' fixtures: "Spot Preemptible A4 Nvidia B200 (1 gpu slice)
  running in Americas" and the "... attached to DWS Defined Duration VMs ..." SKUs), so one can
  stand in for the list price: its B200 rows show two on-demand figures for the same 8 slices,
  $90.216 (us-central1, us-east1, us-south1, europe-west4) and $64.44 (us-east4, us-west2,
  us-west3, europe-north1), where the list SKU gives $128.88 (below); its H200 rows likewise give
  $74.49392 in us-central1 but $36.60258 in europe-west4. Its host rows price every a3-* machine
  with the SKUs whose description holds "A3 Instance" (SERIES_TO_DESCRIPTION), so an A3 Ultra
  host SKU of its own would not be found there.
- The catalog SKU "A4 Nvidia B200 (1 gpu slice) running in Americas" at $16.11 per slice-hour,
  as public catalog readers quote it (their fixtures carry catalog data of 2026-07-07).
Where no source shows a figure the price is None and `basis` says why and where the user finds
theirs: never a guess.

Spot prices "can change up to once every day" (Compute Engine "Spot VMs" and VM instance
pricing pages): the Spot figures are the catalog's of the day it was built; `pulumi up` reads
today's.

To update: read the source again, change `usd` and `read_on` together.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from types import MappingProxyType

from config.profiles import Capacity

# The region the figures are for.
REGION = "us-central1"

GKE_PRICING = "https://cloud.google.com/kubernetes-engine/pricing"
# GKE "Deploy GPU workloads in Autopilot" (Pricing): from GKE 1.29.4-gke.1427000 every GPU Pod
# uses the Accelerator compute class, node-based: "You're billed for the Compute Engine hardware
# that runs your GPU workloads, plus an Autopilot premium for node management and scalability."
AUTOPILOT_GPUS = "https://cloud.google.com/kubernetes-engine/docs/how-to/autopilot-gpus"
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
# SkyPilot's GCP catalogs at the commits read (columns Price and SpotPrice, USD per hour).
SKYPILOT_V7 = (
    "https://github.com/skypilot-org/skypilot-catalog/blob/"
    "017e2502fb63c7a28757acd94002b2d6099d3e3d/catalogs/v7/gcp/vms.csv"
)
SKYPILOT_V8 = (
    "https://github.com/skypilot-org/skypilot-catalog/blob/"
    "006059e0f18acb1341e22a27751e9f80df6ba92f/catalogs/v8/gcp/vms.csv"
)
V7_READ_ON = "2026-12-04"
V8_READ_ON = "2026-12-07"
# The A4 slice SKU as public catalog readers quote it (test fixtures of billing-catalog readers
# holding the catalog's rows of 2026-07-07; issue 37 quotes the same figure).
A4_SLICE_SKU = "Cloud Billing SKU 'A4 Nvidia B200 (1 gpu slice) running in Americas'"
A4_SLICE_READ_ON = "2026-12-07"
# The GKE Autopilot general-purpose Pod rates for us-central1 as public cost tools quote GKE's
# pricing page (its tables render in the browser; the copy read here held none).
AUTOPILOT_POD_READ_ON = "2026-12-07"


@dataclass(frozen=True)
class Price:
    usd: float | None  # None: no figure from any source read (basis says why and where to look)
    unit: str
    source: str
    read_on: str  # ISO date the source was read, or "your setting"
    region: str = REGION
    basis: str = ""  # how the figure applies, or why there is none and where to find it
    at_most: bool = False  # an upper bound (a discount applies that is not known)
    at_least: bool = False  # a lower bound (a charge applies that is not known)
    estimate: bool = False  # a modelled figure, not a list price (basis says what it assumes)

    @property
    def bound(self) -> str:
        """'at most ', 'at least ', '~' or '': what the figure is, said before it."""
        if self.at_most:
            return "at most "
        if self.at_least:
            return "at least "
        return "~" if self.estimate else ""


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

# SkyPilot catalog v8 rows for us-central1 (us-central1-b for the GPU machines):
#   a3-ultragpu-8g,224.0,2952.0,,,,us-central1,us-central1-b,12.266,3.74713      (host)
#   ,,,H200,8,{...144384 MiB...},us-central1,us-central1-b,74.49392,37.2472       (8 x H200)
#   a4-highgpu-8g,224.0,3968.0,,,,us-central1,us-central1-b,0.0,0.0          (host: in the slices)
#   ,,,B200,8,{...184320 MiB...},us-central1,us-central1-b,90.216,32.6064         (8 x B200)
#   c2-standard-16,16.0,64.0,,,,us-central1,us-central1-a,0.83523,0.27187
# and v7 (017e250):  n4-highmem-16,16.0,128.0,,,,us-central1,us-central1-a,0.9951,0.39805
# The a3-ultragpu-8g host part ($12.266 = 224 vCPUs + 2952 GiB) is exactly the "A3 Instance"
# Core and Ram rates that also price a3-highgpu-8g ($9.46006 = 208 vCPUs + 1872 GiB: $0.025498
# per vCPU-hour, $0.0022203 per GiB-hour): SkyPilot's fetcher looks for no other host SKU
# (SERIES_TO_DESCRIPTION). Whether A3 Ultra's host bills at SKUs of its own on demand was not
# read: billing data quoted publicly names "DWS Defined Duration A3 Ultra Instance Core" for
# flex-start, and `pulumi up`'s read prefers "A3 Ultra" host SKUs (pricing/catalog.py). The GPU
# part is the "H200 141GB GPU running in Americas" SKU, $9.31174 per GPU-hour (also quoted by
# public catalog readers' fixtures of 2026-07-07).
A3U_ON_DEMAND = round(12.266 + 74.49392, 5)  # $86.75992 per node-hour
A3U_SPOT = round(3.74713 + 37.2472, 5)  # $40.99433 per node-hour (v7 of 2026-12-04: $32.61871)
A4_SLICE_ON_DEMAND = 16.11  # per GPU slice-hour: one B200 with its share of the host
A4_ON_DEMAND = round(8 * A4_SLICE_ON_DEMAND, 5)  # $128.88 per node-hour
A4_SPOT = 32.6064  # per node-hour, v8 (8 x $4.0758 per slice-hour)
N4_HIGHMEM_16_ON_DEMAND = 0.9951
C2_STANDARD_16_ON_DEMAND = 0.83523

_NODE_HOUR = "per node-hour"
_OWN_RATE = "set verl-gke:gpuNodeHourlyUsd to your rate"
# A reservation bills the machine at its default (on-demand) rate, or the rate of the commitment
# or calendar-mode reservation that holds it, from the reservation's own start whether VMs use it
# or not (Compute Engine VM instance pricing: reserved resources are billed as running
# instances). Commitment prices are public catalog SKUs ("Commitment v1: ... for 1 Year");
# `pulumi up` reads them where the catalog lists them.
_RESERVATION_BASIS = (
    "the on-demand list rate a reservation bills unless a commitment or calendar-mode price "
    "applies (public Commitment SKUs: `pulumi up` reads them); a negotiated rate: "
    f"{_OWN_RATE}"
)
_FLEX_BASIS = (
    "flex-start bills discounted SKUs (About Flex-start VMs) for which no figure was read, so "
    "this on-demand list rate is an upper bound; pulumi up reads the discounted rate from the "
    f"Cloud Billing catalog, or {_OWN_RATE}"
)
_SPOT_BASIS = (
    "Spot list rate (Spot Preemptible SKUs); Spot prices can change up to once every day "
    f"({SPOT_PRICING}): pulumi up reads today's"
)
# A4 is billed per GPU slice (one B200 with its share of vCPUs and memory): the catalog has no A4
# Core or Ram SKU, and SkyPilot v8 prices the a4-highgpu-8g host at $0.0.
_A4_ON_DEMAND_BASIS = (
    f"8 x the ${A4_SLICE_ON_DEMAND} per slice-hour on-demand SKU (A4 bills per GPU slice, host "
    "included); SkyPilot's catalog shows $90.216 (70 % of this) in us-central1 and $64.44 (50 %) "
    "in us-east4 for the same 8 slices: its fetcher takes the first OnDemand-tagged SKU naming "
    "the slice, and Google tags discounted ones (Spot, DWS Defined Duration) OnDemand too; the "
    "$16.11 is the catalog's figure of 2026-07-07 as its public readers quote it"
)
# AI Hypercomputer A4X guide: reservation-bound provisioning only; no catalog row exists.
_A4X_BASIS = (
    "Google publishes no list price for A4X (a4x-highgpu-4g): it is sold through reservations "
    f"only, at the price of your reservation agreement; {_OWN_RATE}"
)
# A3 Ultra bundles 12,000 GiB of Local SSD (32 x 375 GiB): no source read says whether it is
# billed on top of the machine, so it is not priced.
A3U_LOCAL_SSD_NOTE = (
    "the 12,000 GiB of Local SSD that comes with a3-ultragpu-8g is not priced: no source read "
    f"says whether it bills on top of the machine (check its SKU at {BILLING_PRICING_CONSOLE})"
)


def _gpu(
    usd: float | None,
    basis: str,
    source: str = SKYPILOT_V8,
    read_on: str = V8_READ_ON,
    at_most: bool = False,
) -> Price:
    return Price(usd, _NODE_HOUR, source, read_on, basis=basis, at_most=at_most)


# GPU machine per node-hour, host + GPUs, by capacity mode.
GPU_MACHINE: Mapping[tuple[str, Capacity], Price] = MappingProxyType(
    {
        ("a3-ultragpu-8g", Capacity.RESERVATION): _gpu(A3U_ON_DEMAND, _RESERVATION_BASIS),
        ("a3-ultragpu-8g", Capacity.FLEX_START): _gpu(A3U_ON_DEMAND, _FLEX_BASIS, at_most=True),
        ("a3-ultragpu-8g", Capacity.SPOT): _gpu(A3U_SPOT, _SPOT_BASIS),
        ("a4-highgpu-8g", Capacity.RESERVATION): _gpu(
            A4_ON_DEMAND,
            f"{_A4_ON_DEMAND_BASIS}; {_RESERVATION_BASIS}",
            A4_SLICE_SKU,
            A4_SLICE_READ_ON,
        ),
        ("a4-highgpu-8g", Capacity.FLEX_START): _gpu(
            A4_ON_DEMAND,
            f"{_A4_ON_DEMAND_BASIS}; {_FLEX_BASIS}",
            A4_SLICE_SKU,
            A4_SLICE_READ_ON,
            at_most=True,
        ),
        ("a4-highgpu-8g", Capacity.SPOT): _gpu(
            A4_SPOT,
            "8 slices at SkyPilot's Spot figure, $4.0758 per slice-hour (host included): the "
            "first Preemptible-tagged SKU naming the slice, which one not known; a public "
            "reader's fixture quotes 'Spot Preemptible A4 Nvidia B200 (1 gpu slice) running in "
            f"Americas' at $4.9542, tagged OnDemand; {_SPOT_BASIS}",
        ),
        ("a4x-highgpu-4g", Capacity.RESERVATION): _gpu(None, _A4X_BASIS, GPU_PRICING),
    }
)
# Other regions that offer the GPU machine, with the catalog's Spot node-hour figure (host + GPUs;
# SkyPilot v8 rows; None: no Spot row). On-demand figures per region are not repeated: the
# catalog's GPU rows there mix in discounted SKUs (see the module docstring).
SPOT_BY_REGION: Mapping[str, Mapping[str, float | None]] = MappingProxyType(
    {
        "a3-ultragpu-8g": MappingProxyType(
            {
                "us-central1": A3U_SPOT,
                "us-east4": round(2.80034 + 29.2536, 5),
                "us-west1": round(3.74713 + 37.2472, 5),
                "us-south1": round(3.15354 + 43.9512, 5),
                "us-east5": None,
                "europe-west1": round(3.08825 + 41.0128, 5),
                "europe-west4": round(2.94949 + 39.1096, 5),
                "asia-south1": round(2.92129 + 38.7368, 5),
                "asia-south2": None,
            }
        ),
        "a4-highgpu-8g": MappingProxyType(
            {
                "us-central1": A4_SPOT,
                "us-east1": 32.6064,
                "us-east4": 32.6064,
                "us-south1": 32.6064,
                "us-west2": 32.6064,
                "us-west3": 32.6064,
                "europe-north1": 35.8672,
                "europe-west4": 35.8672,
                "asia-northeast1": 39.128,
                "asia-southeast1": 35.5712,
            }
        ),
    }
)
# The Standard CPU node pool's machine, per node-hour, on-demand (the pool is neither Spot nor
# flex-start; components/gke_cluster.py), and the machine of the Autopilot Ray head.
CPU_MACHINE: Mapping[str, Price] = MappingProxyType(
    {
        "n4-highmem-16": Price(
            N4_HIGHMEM_16_ON_DEMAND,
            _NODE_HOUR,
            SKYPILOT_V7,
            V7_READ_ON,
            basis="on-demand list rate",
        ),
        "c2-standard-16": Price(
            C2_STANDARD_16_ON_DEMAND,
            _NODE_HOUR,
            SKYPILOT_V8,
            V8_READ_ON,
            basis="on-demand list rate",
        ),
    }
)
# GKE Autopilot, general-purpose Pods (Pod-based billing, the Pods' resource requests):
# $0.0445 per vCPU-hour and $0.0049225 per GiB-hour in us-central1; system Pods are not charged
# on Pod-based billing (GKE pricing, Autopilot mode).
AUTOPILOT_POD_VCPU = Price(
    0.0445, "per vCPU-hour", GKE_PRICING, AUTOPILOT_POD_READ_ON, basis="general-purpose Pods"
)
AUTOPILOT_POD_GIB = Price(
    0.0049225, "per GiB-hour", GKE_PRICING, AUTOPILOT_POD_READ_ON, basis="general-purpose Pods"
)
# The Autopilot premium on node-based billing (Accelerator and Performance compute classes): its
# SKUs ("Autopilot Accelerator CPU Premium", "Autopilot Accelerator Memory Premium", per-GPU
# premiums, "Autopilot Performance CPU Premium" ...: the names GoogleCloudPlatform/
# autopilot-cost-calculator reads) were not read here, so it has no figure.
AUTOPILOT_PREMIUM = Price(
    None,
    "per node-hour",
    AUTOPILOT_GPUS,
    V8_READ_ON,
    basis=(
        "the Autopilot premium on node-based billing (Accelerator and Performance classes): its "
        f"SKUs were not read; see them at {BILLING_PRICING_CONSOLE} (Kubernetes Engine)"
    ),
)


def every_price() -> dict[str, Price]:
    """Every entry of the table by a readable name (the tests check each has a source and date)."""
    table = {
        "GKE cluster management fee": CLUSTER_FEE,
        "Cloud Storage Standard": GCS_STANDARD,
        "Cloud Logging ingestion": LOGGING_INGEST,
        "Autopilot Pod vCPU": AUTOPILOT_POD_VCPU,
        "Autopilot Pod memory": AUTOPILOT_POD_GIB,
    }
    table.update({f"{m} {c.value}": p for (m, c), p in GPU_MACHINE.items()})
    table.update({m: p for m, p in CPU_MACHINE.items()})
    return table


def table_age_days(today: date) -> int:
    """Days since the oldest figure of the GPU machines was read."""
    dates = [date.fromisoformat(p.read_on) for p in GPU_MACHINE.values()]
    return (today - min(dates)).days


def gpu_machine_price(machine_type: str, capacity: Capacity) -> Price:
    """The node-hour price of a GPU machine under a capacity mode; a machine or mode the table
    lacks is a None price that points at the GPU pricing page."""
    fallback = Price(
        None, _NODE_HOUR, GPU_PRICING, V8_READ_ON, basis=f"not in the table; {_OWN_RATE}"
    )
    return GPU_MACHINE.get((machine_type, capacity), fallback)


def cpu_machine_price(machine_type: str) -> Price:
    fallback = Price(
        None,
        _NODE_HOUR,
        VM_PRICING,
        V8_READ_ON,
        basis=f"not in the table; see {BILLING_PRICING_CONSOLE}",
    )
    return CPU_MACHINE.get(machine_type, fallback)
