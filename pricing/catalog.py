"""Current list prices of the stack's machines from Google's Cloud Billing Catalog API, read during
`pulumi up` (credentials at hand) through Google's client library (google-cloud-billing), and
kept for a day.

What is read: the public SKUs of Compute Engine (services/6F81-5844-456A/skus; Cloud Billing
"Get Google Cloud pricing information": each SKU has a description, a category with
resourceGroup and usageType, the serviceRegions it is sold in, and pricingInfo whose
pricingExpression lists tieredRates with a unitPrice of units + nanos, per usageUnit).

How a node's price is built, per machine family (the families are told apart by their SKUs'
descriptions, never by a prefix that two families share):
- A3 Ultra (a3-ultragpu-8g): 8 x the "H200 141GB GPU" SKU + the host's Core and Ram SKUs: "A3
  Ultra" ones where the catalog has them, else the A3 family's ("A3 Instance Core/Ram", the
  rates SkyPilot's catalog prices A3 Ultra's host at); A3 High's "Nvidia H100 80GB GPU" and A3
  Mega's "Nvidia H100 80GB Mega GPU" never price it.
- A4 (a4-highgpu-8g): 8 x the "A4 Nvidia B200 (1 gpu slice)" SKU, nothing else: A4 is billed
  per GPU slice, the host's vCPUs and memory included (the catalog has no A4 Core or Ram SKU).
- N4 (the CPU pool): vCPUs x "N4 Instance Core" + GiB x "N4 Instance Ram".
Capacity modes by description and usage type: on-demand SKUs (usageType OnDemand) for
reservations; "Spot Preemptible" SKUs for Spot (the description decides: some Spot SKUs carry the
OnDemand usage type); "DWS Defined Duration" SKUs for flex-start (as the A100 SKU "Nvidia Tesla
A100 80GB GPU attached to DWS Defined Duration VMs running in Americas" is named); "Commitment
v1: ... for 1 Year / 3 Years" SKUs for the committed rates shown beside a reservation.

Never fails `pulumi up`: anything the API answers other than SKUs (API disabled, permission
refused, no credentials, no network) leaves the table's figures in place with the reason. Not
asked at all when the user's own rate (verl-gke:gpuNodeHourlyUsd) is set.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from config.profiles import Capacity, Mode
from config.settings import StackSettings
from pricing.table import Price

COMPUTE_SERVICE = "services/6F81-5844-456A"
CATALOG_SOURCE = "Cloud Billing Catalog API (services/6F81-5844-456A/skus)"
# Kubernetes Engine's SKUs: the Autopilot premiums of node-based billing, named "Autopilot
# Accelerator CPU Premium (<region>)", "Autopilot Accelerator Memory Premium (<region>)", one per
# GPU model ("Autopilot H100 80GB Premium (<region>)"), "Autopilot Performance CPU Premium
# (<region>)" ... and "Spot" variants (the names Google's own GoogleCloudPlatform/
# autopilot-cost-calculator reads; node price = the Compute Engine machine + vCPUs x CPU premium
# + GiB x memory premium + GPUs x GPU premium).
GKE_SERVICE = "services/CCD8-9BF1-090E"
# The token of each GPU machine's premium SKU.
_PREMIUM_GPU = {"a3-ultragpu-8g": "H200", "a4-highgpu-8g": "B200"}
# Seconds per API call (a page of up to 5,000 SKUs).
TIMEOUT_S = 60.0
# How long a read is reused: Spot prices "can change up to once every day" (Spot VMs pricing).
CACHE_FOR = timedelta(days=1)
CACHE_ENV = "XDG_CACHE_HOME"

# GPU SKUs by machine type: (the phrase its description holds, whether the SKU is a whole slice
# of the machine, host included).
_GPU_SKU: Mapping[str, tuple[str, bool]] = {
    "a3-ultragpu-8g": ("H200 141GB GPU", False),
    "a4-highgpu-8g": ("A4 Nvidia B200 (1 gpu slice)", True),
}
# Host SKU series by machine type, in order of preference.
_HOST_SERIES: Mapping[str, tuple[str, ...]] = {"a3-ultragpu-8g": ("A3 Ultra", "A3")}
# Memory per vCPU of N4 shapes (Compute Engine general-purpose machines: N4 highmem 8 GB, standard
# 4 GB, highcpu 2 GB per vCPU).
_N4_GIB_PER_VCPU = {"highmem": 8, "standard": 4, "highcpu": 2}
# Descriptions of SKUs that price none of the modes read here.
_OTHER = ("reserved", "custom", "premium", "sole tenancy", "capacity optimized", "calendar mode")
ON_DEMAND, SPOT, FLEX = "on-demand", "spot", "flex-start"
COMMIT_1Y, COMMIT_3Y = "1-year commitment", "3-year commitment"
_KIND_OF_CAPACITY = {
    Capacity.RESERVATION: ON_DEMAND,
    Capacity.ON_DEMAND: ON_DEMAND,
    Capacity.SPOT: SPOT,
    Capacity.FLEX_START: FLEX,
}


@dataclass(frozen=True)
class Node:
    """What one node of a machine type bills: vCPU-hours and GiB-hours of its host SKUs (the
    first of `host_series` that the catalog prices), and its GPUs (or GPU slices)."""

    host_series: tuple[str, ...]  # ("A3 Ultra", "A3"), ("N4",); () for a slice-billed machine
    vcpus: int
    ram_gib: float
    gpu_sku: str | None = None
    gpus: int = 0
    gpu_sku_machine: str | None = None  # the GPU machine type (for its Autopilot premium SKU)


@dataclass(frozen=True)
class CatalogRead:
    """The catalog's prices for the stack, per capacity mode, and what happened."""

    gpu: Mapping[Capacity, Price] = field(default_factory=dict)
    cpu: Price | None = None
    note: str = ""
    skus: int = 0  # how many SKUs the API answered (0: not read)
    committed: Mapping[str, Price] = field(default_factory=dict)  # COMMIT_1Y / COMMIT_3Y
    # Autopilot: the premium per GPU node-hour by capacity mode, and per node-hour of the Ray
    # head's machine (None: not read, or not found).
    premium: Mapping[Capacity, Price] = field(default_factory=dict)
    head_premium: Price | None = None


def gpu_node(settings: StackSettings) -> Node | None:
    profile = settings.profile
    found = _GPU_SKU.get(profile.machine_type)
    if found is None:
        return None  # A4X: no SKU of its own in the catalog (pricing/table.py)
    phrase, slice_billed = found
    series = () if slice_billed else _HOST_SERIES[profile.machine_type]
    machine = profile.machine
    return Node(
        series,
        machine.vcpus,
        machine.memory_gib,
        phrase,
        profile.gpus_per_node,
        profile.machine_type,
    )


def cpu_node(machine_type: str) -> Node | None:
    match = re.fullmatch(r"n4-(highmem|standard|highcpu)-(\d+)", machine_type)
    if match is None:
        return None
    vcpus = int(match.group(2))
    return Node(("N4",), vcpus, vcpus * _N4_GIB_PER_VCPU[match.group(1)])


def unit_usd(sku: Any) -> float | None:
    """The first tier's unit price (units + nanos / 1e9) of the SKU's current pricing."""
    if not sku.pricing_info:
        return None
    rates = sku.pricing_info[0].pricing_expression.tiered_rates
    if not rates:
        return None
    price = rates[0].unit_price
    return int(price.units) + price.nanos / 1e9


def sku_kind(sku: Any) -> str | None:
    """Which price the SKU is: ON_DEMAND, SPOT, FLEX, COMMIT_1Y, COMMIT_3Y, or None (another)."""
    text = sku.description.lower()
    if "commitment" in text:
        if re.search(r"\b1 year", text):
            return COMMIT_1Y
        return COMMIT_3Y if re.search(r"\b3 year", text) else None
    if any(word in text for word in _OTHER):
        return None
    if "dws defined duration" in text:
        return FLEX
    if "spot preemptible" in text or sku.category.usage_type == "Preemptible":
        return SPOT
    return ON_DEMAND if sku.category.usage_type == "OnDemand" else None


def _host_part(text: str, series: str) -> str | None:
    """'cpu' or 'ram' when the description prices that part of a host of `series`."""
    if "GPU" in text:
        return None
    token = re.escape(series)
    if re.search(rf"\b{token} (Instance )?(Core|Cpu)\b", text):
        return "cpu"
    if re.search(rf"\b{token} (Instance )?Ram\b", text):
        return "ram"
    return None


def _parts(skus: Iterable[Any], node: Node, kind: str, region: str) -> dict[str, set[float]]:
    """Every figure the SKUs of `kind` in `region` give each part of the node, per node-hour:
    'gpu', and 'cpu:<series>' / 'ram:<series>' for each host series."""
    parts: dict[str, set[float]] = {}
    for sku in skus:
        if region not in sku.service_regions or sku_kind(sku) != kind:
            continue
        usd = unit_usd(sku)
        if usd is None:
            continue
        text = sku.description
        if node.gpu_sku and node.gpu_sku in text:
            parts.setdefault("gpu", set()).add(round(usd * node.gpus, 9))
            continue
        for series in node.host_series:
            part = _host_part(text, series)
            if part is not None:
                amount = node.vcpus if part == "cpu" else node.ram_gib
                parts.setdefault(f"{part}:{series}", set()).add(round(usd * amount, 9))
    return parts


def node_price(skus: Iterable[Any], node: Node, kind: str, region: str) -> tuple[float, str] | None:
    """(the node-hour price, which host SKUs priced it) from the SKUs, or None when a part has no
    SKU, or several SKUs of different prices: the description does not single one out, and
    picking whichever the API lists first could bill the wrong provisioning model. (SkyPilot's
    catalog, built with such a first match, shows the hazard: catalogs/v8/gcp/vms.csv at 006059e
    prices the same 8 B200 slices at $90.216 in us-central1 and $64.44 in us-east4, and 8 x H200
    at $74.49392 in us-central1 but $36.60258 in europe-west4.)"""
    parts = _parts(list(skus), node, kind, region)
    if any(len(found) > 1 for found in parts.values()):
        return None
    total = 0.0
    if node.gpu_sku:
        if "gpu" not in parts:
            return None
        total += next(iter(parts["gpu"]))
    if not node.host_series:
        return round(total, 5), "GPU slices, host included"
    for series in node.host_series:
        cpu, ram = parts.get(f"cpu:{series}"), parts.get(f"ram:{series}")
        if cpu and ram:
            host = next(iter(cpu)) + next(iter(ram))
            return round(total + host, 5), f"{series} Core and Ram SKUs"
    return None


def default_client() -> Any:
    """Google's client with Application Default Credentials, over REST (what the tests' stand-in
    speaks too)."""
    from google.cloud import billing_v1  # deferred: only `pulumi up` reads the catalog

    return billing_v1.CloudCatalogClient(transport="rest")


def list_skus(client: Any, service: str = COMPUTE_SERVICE) -> list[Any]:
    from google.cloud import billing_v1  # deferred: only `pulumi up` reads the catalog

    request = billing_v1.ListSkusRequest(parent=service, currency_code="USD")
    return list(client.list_skus(request=request, timeout=TIMEOUT_S))


def autopilot_premium(
    skus: Iterable[Any], node: Node, compute_class: str, spot: bool, region: str
) -> float | None:
    """The Autopilot premium per node-hour of a node-based `node` of `compute_class`
    ("Accelerator", "Performance"): vCPUs x the class's CPU premium + GiB x its memory premium
    (+ GPUs x the GPU model's premium, Accelerator), from Kubernetes Engine's SKUs of `region`
    ("Spot" ones for Spot); None when a part is missing or ambiguous."""
    infix = "Spot " if spot else ""
    names = {
        f"Autopilot {compute_class} {infix}CPU Premium ({region})": ("cpu", node.vcpus),
        f"Autopilot {compute_class} {infix}Memory Premium ({region})": ("ram", node.ram_gib),
    }
    gpu = _PREMIUM_GPU.get(node.gpu_sku_machine or "")
    if gpu is not None:
        pattern = rf"^Autopilot (Nvidia )?{gpu}\b[^()]* {infix}Premium \({re.escape(region)}\)$"
    found: dict[str, set[float]] = {}
    for sku in skus:
        usd, text = unit_usd(sku), sku.description
        if usd is None:
            continue
        if text in names:
            part, amount = names[text]
            found.setdefault(part, set()).add(round(usd * amount, 9))
        elif gpu is not None and re.match(pattern, text) and (spot or "Spot" not in text):
            found.setdefault("gpu", set()).add(round(usd * node.gpus, 9))
    needed = {"cpu", "ram", *(("gpu",) if gpu is not None else ())}
    if not needed <= found.keys() or any(len(values) > 1 for values in found.values()):
        return None
    return round(sum(next(iter(values)) for values in found.values()), 5)


def cache_path(settings: StackSettings) -> Path:
    """Where a read is kept: the user's cache folder ($XDG_CACHE_HOME, else ~/.cache), one file per
    region and machine pair."""
    root = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache")
    machines = f"{settings.profile.machine_type}-{settings.cpu_machine_type}"
    return root / "verl-gke" / f"catalog-{settings.region}-{machines}.json"


def _to_json(read: CatalogRead, read_at: datetime) -> dict[str, Any]:
    def price(p: Price) -> dict[str, Any]:
        return {"usd": p.usd, "basis": p.basis, "read_on": p.read_on}

    return {
        "read_at": read_at.isoformat(),
        "skus": read.skus,
        "gpu": {c.value: price(p) for c, p in read.gpu.items()},
        "cpu": None if read.cpu is None else price(read.cpu),
        "committed": {term: price(p) for term, p in read.committed.items()},
        "premium": {c.value: price(p) for c, p in read.premium.items()},
        "head_premium": None if read.head_premium is None else price(read.head_premium),
    }


def _from_json(data: Mapping[str, Any], region: str) -> CatalogRead:
    def price(entry: Mapping[str, Any]) -> Price:
        return Price(
            float(entry["usd"]),
            "per node-hour",
            CATALOG_SOURCE,
            str(entry["read_on"]),
            region=region,
            basis=str(entry["basis"]),
        )

    cpu, head = data.get("cpu"), data.get("head_premium")
    return CatalogRead(
        gpu={Capacity(c): price(p) for c, p in data["gpu"].items()},
        cpu=None if cpu is None else price(cpu),
        note=f"{data['skus']} SKUs read {data['read_at'][:16].replace('T', ' ')} UTC (kept a day)",
        skus=int(data["skus"]),
        committed={term: price(p) for term, p in data.get("committed", {}).items()},
        premium={Capacity(c): price(p) for c, p in data.get("premium", {}).items()},
        head_premium=None if head is None else price(head),
    )


def _cached(path: Path, now: datetime, region: str) -> CatalogRead | None:
    try:
        data = json.loads(path.read_text())
        if now - datetime.fromisoformat(data["read_at"]) >= CACHE_FOR:
            return None
        return _from_json(data, region)
    except (OSError, ValueError, KeyError, TypeError):
        return None  # no cache, or one this version cannot read: read the catalog again


def prices_from_skus(skus: list[Any], settings: StackSettings, read_at: datetime) -> CatalogRead:
    """The catalog's node-hour prices of the stack's GPU machine (each capacity mode the stack
    may use, and the committed rates) and CPU pool machine in its region."""
    read_on = read_at.strftime("%Y-%m-%d %H:%M UTC")
    region = settings.region

    def price(found: tuple[float, str] | None, basis: str) -> Price | None:
        if found is None:
            return None
        usd, how = found
        return Price(
            usd, "per node-hour", CATALOG_SOURCE, read_on, region=region, basis=f"{basis} ({how})"
        )

    gpu: dict[Capacity, Price] = {}
    node = gpu_node(settings)
    for capacity in settings.profile.capacity[settings.mode].supported:
        kind = _KIND_OF_CAPACITY[capacity]
        found = None if node is None else node_price(skus, node, kind, region)
        basis = "on-demand list rate" if capacity is Capacity.RESERVATION else f"{kind} list rate"
        if (entry := price(found, basis)) is not None:
            gpu[capacity] = entry
    committed: dict[str, Price] = {}
    for term in (COMMIT_1Y, COMMIT_3Y):
        found = None if node is None else node_price(skus, node, term, region)
        if (entry := price(found, f"{term} rate")) is not None:
            committed[term] = entry
    cpu = cpu_node(settings.cpu_machine_type)
    cpu_found = None if cpu is None else node_price(skus, cpu, ON_DEMAND, region)
    return CatalogRead(
        gpu=gpu,
        cpu=price(cpu_found, "on-demand list rate"),
        note=f"{len(skus)} SKUs read {read_on}",
        skus=len(skus),
        committed=committed,
    )


# The Autopilot Ray head's machine (pricing/billing.py AUTOPILOT_HEAD_MACHINE): vCPUs and GiB.
HEAD_NODE = Node((), 16, 64.0)


def with_premiums(
    read: CatalogRead, gke_skus: list[Any], settings: StackSettings, read_at: datetime
) -> CatalogRead:
    """The read with the Autopilot premiums of the stack's GPU nodes (per capacity mode) and of
    the Ray head's Performance-class node, where Kubernetes Engine's SKUs give them."""
    read_on = read_at.strftime("%Y-%m-%d %H:%M UTC")
    region = settings.region

    def price(usd: float | None, basis: str) -> Price | None:
        if usd is None:
            return None
        source = f"Cloud Billing Catalog API ({GKE_SERVICE}/skus)"
        return Price(usd, "per node-hour", source, read_on, region=region, basis=basis)

    node = gpu_node(settings)
    premium: dict[Capacity, Price] = {}
    for capacity in read.gpu:
        spot = capacity is Capacity.SPOT
        found = (
            None if node is None else autopilot_premium(gke_skus, node, "Accelerator", spot, region)
        )
        if (entry := price(found, "the Autopilot Accelerator premium")) is not None:
            premium[capacity] = entry
    head = autopilot_premium(gke_skus, HEAD_NODE, "Performance", False, region)
    return CatalogRead(
        gpu=read.gpu,
        cpu=read.cpu,
        note=f"{read.note} + {len(gke_skus)} Kubernetes Engine SKUs",
        skus=read.skus,
        committed=read.committed,
        premium=premium,
        head_premium=price(head, "the Autopilot Performance premium"),
    )


def read_catalog(
    settings: StackSettings,
    client_factory: Callable[[], Any] = default_client,
    now: datetime | None = None,
) -> CatalogRead:
    """The stack's prices from the catalog, or from a read of the last day kept in the user's
    cache; nothing asked when the user's own rate is set; an empty read with the reason on any
    failure (not kept)."""
    if settings.gpu_node_hourly_usd is not None:
        return CatalogRead(note="not asked: your verl-gke:gpuNodeHourlyUsd is set")
    now = now or datetime.now(UTC)
    path = cache_path(settings)
    if (kept := _cached(path, now, settings.region)) is not None:
        return kept
    try:
        skus = list_skus(client_factory())
    except Exception as error:
        reason = str(error).strip().splitlines()[0][:300] if str(error).strip() else ""
        return CatalogRead(note=f"{type(error).__name__}: {reason}")
    read = prices_from_skus(skus, settings, now)
    if settings.mode is Mode.AUTOPILOT:
        try:
            read = with_premiums(read, list_skus(client_factory(), GKE_SERVICE), settings, now)
        except Exception as error:
            note = f"{read.note}; Kubernetes Engine SKUs not read ({type(error).__name__})"
            read = CatalogRead(read.gpu, read.cpu, note, read.skus, read.committed)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(_to_json(read, now), indent=1))
    except OSError:
        pass  # a cache that cannot be written only means the next `pulumi up` reads again
    return read
