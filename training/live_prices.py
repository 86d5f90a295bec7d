"""Current list prices of the stack's machines from Google's Cloud Billing Catalog API, read during
`pulumi up` (credentials at hand) through Google's client library (google-cloud-billing).

What is read: the public SKUs of Compute Engine (services/6F81-5844-456A/skus; Cloud Billing
"Get Google Cloud pricing information": each SKU has a description, a category with
resourceGroup and usageType, the serviceRegions it is sold in, and pricingInfo whose
pricingExpression lists tieredRates with a unitPrice of units + nanos, per usageUnit). A node's
price is built as SkyPilot's fetcher builds its catalog (skypilot-org/skypilot
sky/catalog/data_fetchers/fetch_gcp.py): vCPUs x the series' Core SKU + GiB x its Ram SKU + GPUs x
the GPU SKU, matched by description in the stack's region, OnDemand SKUs for on-demand and
reservations, Preemptible ("Spot Preemptible") SKUs for Spot. Flex-start VMs bill their own
discounted SKUs, named "DWS Defined Duration" in the catalog (as the A100 SKU "Nvidia Tesla A100
80GB GPU attached to DWS Defined Duration VMs running in Americas" is).

Never fails `pulumi up`: anything the API answers other than SKUs (API disabled, permission
refused, no credentials, no network) leaves the table's figures in place with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from config.price_table import Price
from config.profiles import Capacity
from config.settings import StackSettings

COMPUTE_SERVICE = "services/6F81-5844-456A"
CATALOG_SOURCE = "Cloud Billing Catalog API (services/6F81-5844-456A/skus)"
# Seconds per API call (a page of up to 5,000 SKUs).
TIMEOUT_S = 60.0

# SKU descriptions (fetch_gcp.py SERIES_TO_DESCRIPTION and get_gpu_price): the host's Core/Ram SKUs
# carry "<series> Instance" ("A3 Instance Core running in Americas", "N4 Instance Ram running in
# Americas"); the GPU SKUs "H200 141GB GPU" (A3 Ultra) and "Nvidia B200 (1 gpu slice)" (A4).
_GPU_SKU = {"a3-ultragpu-8g": "H200 141GB GPU", "a4-highgpu-8g": "Nvidia B200 (1 gpu slice)"}
# Memory per vCPU of N4 shapes (Compute Engine general-purpose machines: N4 highmem 8 GB, standard
# 4 GB, highcpu 2 GB per vCPU).
_N4_GIB_PER_VCPU = {"highmem": 8, "standard": 4, "highcpu": 2}
# Descriptions of SKUs that are not the list price of a running VM.
_NOT_LIST = (
    "commitment",
    "reserved",
    "custom",
    "premium",
    "sole tenancy",
    "capacity optimized",
    "calendar mode",
)
_SPOT = "Spot Preemptible"
_FLEX = "DWS Defined Duration"


@dataclass(frozen=True)
class Node:
    """What one node of a machine type bills: vCPU-hours and GiB-hours of its series' SKUs, and
    its GPUs."""

    series: str  # "A3", "N4": the token of its Core and Ram SKU descriptions
    vcpus: int
    ram_gib: float
    gpu_sku: str | None = None
    gpus: int = 0


@dataclass(frozen=True)
class CatalogRead:
    """The catalog's prices for the stack, per capacity mode, and what happened."""

    gpu: Mapping[Capacity, Price] = field(default_factory=dict)
    cpu: Price | None = None
    note: str = ""
    skus: int = 0  # how many SKUs the API answered (0: not read)


def gpu_node(settings: StackSettings) -> Node | None:
    profile = settings.profile
    gpu_sku = _GPU_SKU.get(profile.machine_type)
    if gpu_sku is None:
        return None  # A4X: no SKU of its own in the catalog (config/price_table.py)
    series = profile.machine_type.split("-", 1)[0].upper()
    machine = profile.machine
    return Node(series, machine.vcpus, machine.memory_gib, gpu_sku, profile.gpus_per_node)


def cpu_node(machine_type: str) -> Node | None:
    match = re.fullmatch(r"n4-(highmem|standard|highcpu)-(\d+)", machine_type)
    if match is None:
        return None
    vcpus = int(match.group(2))
    return Node("N4", vcpus, vcpus * _N4_GIB_PER_VCPU[match.group(1)])


def unit_usd(sku: Any) -> float | None:
    """The first tier's unit price (units + nanos / 1e9) of the SKU's current pricing."""
    if not sku.pricing_info:
        return None
    rates = sku.pricing_info[0].pricing_expression.tiered_rates
    if not rates:
        return None
    price = rates[0].unit_price
    return int(price.units) + price.nanos / 1e9


def _mode_matches(sku: Any, capacity: Capacity) -> bool:
    text = sku.description
    lower = text.lower()
    if any(word in lower for word in _NOT_LIST):
        return False
    if capacity is Capacity.SPOT:
        return sku.category.usage_type == "Preemptible" and _SPOT in text
    if capacity is Capacity.FLEX_START:
        return _FLEX in text
    return sku.category.usage_type == "OnDemand" and _SPOT not in text and "DWS" not in text


def _part(sku: Any, node: Node) -> tuple[str, float] | None:
    """Which part of the node the SKU prices ('cpu', 'ram', 'gpu') and its amount per node."""
    group, text = sku.category.resource_group, sku.description
    if node.gpu_sku and group == "GPU" and node.gpu_sku in text:
        return "gpu", node.gpus
    if not re.search(rf"\b{node.series}\b", text) or "GPU" in text:
        return None
    if group == "CPU" or (group not in ("RAM",) and " Core " in f" {text} "):
        return "cpu", node.vcpus
    if group == "RAM":
        return "ram", node.ram_gib
    return None


def node_price(skus: Iterable[Any], node: Node, capacity: Capacity, region: str) -> float | None:
    """The node-hour price from the SKUs, or None when one of its parts has no SKU, or several
    SKUs of different prices: the description does not single one out, and picking whichever the
    API lists first could bill the wrong provisioning model. (SkyPilot's catalog, built with such a
    first match, shows the hazard: skypilot-catalog 017e250 catalogs/v7/gcp/vms.csv lists 8 x H100
    in us-central1 at $33.60609/h and in us-east4 at $78.37241/h, and 8 x H200 in us-central1 at
    $74.49392/h but in europe-west4 at $36.60258/h.)"""
    parts: dict[str, set[float]] = {}
    for sku in skus:
        if region not in sku.service_regions or not _mode_matches(sku, capacity):
            continue
        part = _part(sku, node)
        usd = unit_usd(sku)
        if part is not None and usd is not None:
            parts.setdefault(part[0], set()).add(round(usd * part[1], 9))
    needed = {"cpu", "ram", *(("gpu",) if node.gpu_sku else ())}
    if not needed <= parts.keys() or any(len(found) > 1 for found in parts.values()):
        return None
    return round(sum(found.pop() for found in parts.values()), 5)


def default_client() -> Any:
    """Google's client with Application Default Credentials, over REST (what the tests' stand-in
    speaks too)."""
    from google.cloud import billing_v1  # deferred: only `pulumi up` reads the catalog

    return billing_v1.CloudCatalogClient(transport="rest")


def list_skus(client: Any) -> list[Any]:
    from google.cloud import billing_v1  # deferred: only `pulumi up` reads the catalog

    request = billing_v1.ListSkusRequest(parent=COMPUTE_SERVICE, currency_code="USD")
    return list(client.list_skus(request=request, timeout=TIMEOUT_S))


def read_catalog(
    settings: StackSettings, client_factory: Callable[[], Any] = default_client
) -> CatalogRead:
    """The catalog's node-hour prices of the stack's GPU machine (each capacity mode the stack
    may use) and CPU pool machine in its region; an empty read with the reason on any failure."""
    try:
        skus = list_skus(client_factory())
    except Exception as error:
        reason = str(error).strip().splitlines()[0][:300] if str(error).strip() else ""
        return CatalogRead(note=f"{type(error).__name__}: {reason}")
    read_on = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    region = settings.region

    def price(usd: float | None, basis: str) -> Price | None:
        return (
            None
            if usd is None
            else Price(usd, "per node-hour", CATALOG_SOURCE, read_on, region=region, basis=basis)
        )

    gpu: dict[Capacity, Price] = {}
    node = gpu_node(settings)
    for capacity in settings.profile.capacity[settings.mode].supported:
        found = None if node is None else node_price(skus, node, capacity, region)
        basis = "on-demand list rate" if capacity is Capacity.RESERVATION else "list rate"
        if (entry := price(found, basis)) is not None:
            gpu[capacity] = entry
    cpu = cpu_node(settings.cpu_machine_type)
    cpu_usd = None if cpu is None else node_price(skus, cpu, Capacity.ON_DEMAND, region)
    return CatalogRead(
        gpu=gpu,
        cpu=price(cpu_usd, "on-demand list rate"),
        note=f"{len(skus)} SKUs read {read_on}",
        skus=len(skus),
    )
