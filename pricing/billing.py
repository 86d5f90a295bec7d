"""How Google bills a stack, for the plan and `pulumi up`'s log: $/h of the GPU nodes and the
whole stack per capacity mode and GKE mode, the CPU side, the other regions' rates and the
table's age (pricing/whole_run.py adds the run's phases to them).

Which price a figure uses (PriceBook): the user's own rate (verl-gke:gpuNodeHourlyUsd) for the
stack's capacity mode, else the Cloud Billing catalog read during `pulumi up`
(pricing/catalog.py), else pricing/table.py; every figure names its source, and a bound or an
estimate says so ("at most", "at least", "~").

GKE Standard bills its nodes at Compute Engine's rates until they are deleted (GKE pricing,
Standard mode). GKE Autopilot bills the GPU workers node-based (GKE "Deploy GPU workloads in
Autopilot": the Compute Engine hardware plus an Autopilot premium), the Ray head on the
Performance class node-based too (its own node, c2 family here), other Pods Pod-based at the
general-purpose rates; the premium has no figure in the table, so an Autopilot total is a lower
bound; its GPU nodes cost more than Standard's by that premium.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import date

from config.profiles import Capacity, Mode
from config.settings import StackSettings
from pricing.catalog import CATALOG_SOURCE, COMMIT_1Y, COMMIT_3Y, CatalogRead
from pricing.table import (
    A3U_LOCAL_SSD_NOTE,
    A4_SLICE_SKU,
    AUTOPILOT_GPUS,
    AUTOPILOT_POD_GIB,
    AUTOPILOT_POD_VCPU,
    AUTOPILOT_PREMIUM,
    CLUSTER_FEE,
    GKE_PRICING,
    SKYPILOT_V7,
    SKYPILOT_V8,
    SPOT_BY_REGION,
    Price,
    cpu_machine_price,
    gpu_machine_price,
    table_age_days,
)

OWN_RATE_KEY = "verl-gke:gpuNodeHourlyUsd"
# The machine of the Autopilot Ray head: the Performance class with machine-family c2
# (manifests/ray_cluster.py) gives each Pod a node of its own, billed node-based; c2-standard-16
# is the smallest c2 shape whose 16 vCPUs hold the head's 12 (c2-standard-8 has 8). GKE picks
# the size, so this is an estimate, and a lower bound (a larger node costs more).
AUTOPILOT_HEAD_MACHINE = "c2-standard-16"


@dataclass(frozen=True)
class PriceBook:
    """The prices one stack's figures use: its GPU machine under each capacity mode it accepts,
    its CPU pool machine (Standard) or the Autopilot head's machine, and the committed rates the
    catalog lists (empty without a read)."""

    gpu: Mapping[Capacity, Price]
    cpu: Price | None
    catalog_note: str = ""  # what the catalog read gave, or why it gave nothing
    catalog_read: bool = False  # the API answered SKUs
    committed: Mapping[str, Price] = field(default_factory=dict)
    autopilot_head: Price | None = None
    # The Compute Engine price of the GPU machine per capacity mode, before any Autopilot premium.
    hardware: Mapping[Capacity, Price] = field(default_factory=dict)

    def stack_gpu(self, settings: StackSettings) -> Price:
        return self.gpu[settings.capacity]


def price_book(settings: StackSettings, catalog: CatalogRead | None = None) -> PriceBook:
    """Own rate > catalog > table, per figure; on Autopilot each GPU node's figure is the Compute
    Engine hardware plus the Autopilot premium (a lower bound where the premium was not read)."""
    machine = settings.profile.machine_type
    live = catalog or CatalogRead()
    autopilot = settings.mode is Mode.AUTOPILOT
    gpu: dict[Capacity, Price] = {}
    hardware: dict[Capacity, Price] = {}
    for capacity in settings.profile.capacity[settings.mode].supported:
        hardware[capacity] = live.gpu.get(capacity) or gpu_machine_price(machine, capacity)
        gpu[capacity] = (
            with_premium(hardware[capacity], live.premium.get(capacity))
            if autopilot
            else hardware[capacity]
        )
    if settings.gpu_node_hourly_usd is not None:
        gpu[settings.capacity] = Price(
            settings.gpu_node_hourly_usd,
            "per node-hour",
            OWN_RATE_KEY,
            "your setting",
            region=settings.region,
            basis="your own rate",
        )
    cpu = None if autopilot else (live.cpu or cpu_machine_price(settings.cpu_machine_type))
    head = None
    if autopilot and not settings.profile.ray_head_on_gpu_nodes:
        head = with_premium(_autopilot_head(), live.head_premium)
    note = "" if catalog is None else catalog.note
    return PriceBook(
        gpu=gpu,
        cpu=cpu,
        catalog_note=note,
        catalog_read=live.skus > 0,
        committed=dict(live.committed),
        autopilot_head=head,
        hardware=hardware,
    )


def with_premium(hardware: Price, premium: Price | None) -> Price:
    """An Autopilot node-based node: its Compute Engine hardware plus the Autopilot premium (GKE
    "Deploy GPU workloads in Autopilot"); without a premium figure, a lower bound."""
    if hardware.usd is None:
        return hardware
    if premium is None or premium.usd is None:
        if hardware.at_most:  # a discount and a premium, neither priced: no bound either way
            return replace(
                hardware,
                at_most=False,
                estimate=True,
                basis=f"{hardware.basis}; + {AUTOPILOT_PREMIUM.basis}: neither a bound",
            )
        return replace(
            hardware,
            at_least=True,
            basis=f"{hardware.basis}; + {AUTOPILOT_PREMIUM.basis}",
        )
    return replace(
        hardware,
        usd=round(hardware.usd + premium.usd, 5),
        basis=(
            f"{hardware.basis}; + {usd(premium.usd)} per node-hour of {premium.basis} "
            f"({source_name(premium)})"
        ),
    )


def _autopilot_head() -> Price:
    machine = cpu_machine_price(AUTOPILOT_HEAD_MACHINE)
    return Price(
        machine.usd,
        machine.unit,
        machine.source,
        machine.read_on,
        basis=(
            f"the Ray head's own Performance-class node, node-based: {AUTOPILOT_HEAD_MACHINE} "
            "(the smallest c2 that holds its 12 vCPUs; GKE picks the size, so at least this) at "
            "the Compute Engine rate"
        ),
        at_least=True,
        estimate=True,
    )


def usd(value: float) -> str:
    return f"${value:,.2f}" if value >= 0.1 else f"${value:.4g}"


def source_name(price: Price) -> str:
    if price.source in (SKYPILOT_V7, SKYPILOT_V8):
        version = "v8" if price.source == SKYPILOT_V8 else "v7"
        catalog = f"SkyPilot's GCP catalog {version} of Cloud Billing SKUs"
        return f"price table: {catalog}, read {price.read_on}"
    if price.source == A4_SLICE_SKU:
        return f"price table: the {A4_SLICE_SKU} as quoted publicly, read {price.read_on}"
    if price.source == CATALOG_SOURCE:
        return f"{CATALOG_SOURCE}, read {price.read_on}"
    if price.source == OWN_RATE_KEY:
        return f"your {OWN_RATE_KEY}"
    return f"{price.source}, read {price.read_on}"


def rate(price: Price) -> str:
    """'$86.76 per node-hour' with its bound, or why there is no figure and where to find it."""
    if price.usd is None:
        return f"no price ({price.basis})"
    return f"{price.bound}{usd(price.usd)} {price.unit}"


@dataclass(frozen=True)
class Hourly:
    """The stack's $/h while it trains: the priced parts, the unpriced ones by name."""

    usd: float
    missing: tuple[str, ...]
    at_most: bool
    at_least: bool = False  # a charge without a figure is left out (Autopilot's premium)
    gpu_usd: float | None = None  # the GPU nodes' part
    fixed_usd: float = 0.0  # what bills from the cluster's creation: control plane, CPU side

    def text(self) -> str:
        if self.missing:
            return f"at least {usd(self.usd)}/h priced; {', '.join(self.missing)}: no price"
        return f"{self.bound}{usd(self.usd)}/h"

    estimate: bool = False  # neither bound holds (an unpriced discount and an unpriced premium)

    @property
    def bound(self) -> str:
        if self.estimate:
            return "~"
        if self.missing or self.at_least:
            return "at least "
        return "at most " if self.at_most else ""


def hourly(settings: StackSettings, book: PriceBook, capacity: Capacity | None = None) -> Hourly:
    """The stack's $/h under its own capacity mode, or under `capacity` for comparison."""
    gpu = book.gpu[capacity or settings.capacity]
    gpu_usd = None if gpu.usd is None else gpu.usd * settings.gpu_nodes
    fixed: list[tuple[str, float | None]] = [("control plane", CLUSTER_FEE.usd)]
    if book.cpu is not None:
        cpu = book.cpu.usd
        fixed.append(
            (f"{settings.cpu_nodes} CPU nodes", None if cpu is None else cpu * settings.cpu_nodes)
        )
    if book.autopilot_head is not None:
        fixed.append(("the Ray head's node", book.autopilot_head.usd))
    parts = [(f"{settings.gpu_nodes} GPU nodes", gpu_usd), *fixed]
    known = sum(value for _, value in parts if value is not None)
    missing = tuple(what for what, value in parts if value is None)
    fixed_usd = sum(value for _, value in fixed if value is not None)
    head = book.autopilot_head
    at_least = gpu.at_least or (head is not None and head.at_least)
    return Hourly(known, missing, gpu.at_most, at_least, gpu_usd, fixed_usd, gpu.estimate)


def gpu_line(settings: StackSettings, book: PriceBook) -> str:
    price = book.stack_gpu(settings)
    machine, mode, nodes = (
        settings.profile.machine_type,
        settings.capacity.value,
        settings.gpu_nodes,
    )
    if price.usd is None:
        head = f"{machine} {mode}: {rate(price)}; x {nodes} nodes"
    else:
        head = (
            f"{machine} {mode}: {rate(price)} x {nodes} nodes = {price.bound}"
            f"{usd(price.usd * nodes)}/h ({source_name(price)}; {price.basis})"
        )
    if settings.mode is Mode.AUTOPILOT:
        head += (
            f"; on Autopilot these nodes (the Accelerator compute class) are billed node-based: "
            f"the Compute Engine hardware plus the Autopilot premium ({AUTOPILOT_GPUS})"
        )
    if settings.capacity is Capacity.RESERVATION:
        head += (
            "; a reservation is billed from its own start to its end, whether VMs use it or "
            "not, not from pulumi up"
        )
    if machine == "a3-ultragpu-8g":
        head += f"; {A3U_LOCAL_SSD_NOTE}"
    return head


def modes_line(settings: StackSettings, book: PriceBook) -> str:
    """The GPU machine's node-hour rate under every capacity mode the stack accepts (and the
    committed rates the catalog lists), so the modes can be compared before choosing; the
    stack's own is marked."""
    rates = []
    for capacity, price in book.gpu.items():
        chosen = " (this stack)" if capacity is settings.capacity else ""
        if price.usd is None:
            rates.append(f"{capacity.value}{chosen} no price")  # why: the GPU nodes line
            continue
        stack = hourly(settings, book, capacity).text()
        rates.append(f"{capacity.value}{chosen} {rate(price)}, stack {stack}")
    for term in (COMMIT_1Y, COMMIT_3Y):
        if (committed := book.committed.get(term)) is not None:
            rates.append(f"reservation at a {term} {rate(committed)} ({source_name(committed)})")
    return f"{settings.profile.machine_type}: " + "; ".join(rates)


def gke_mode_line(settings: StackSettings, book: PriceBook) -> str:
    """Standard against Autopilot for the same GPU nodes, as each bills them: Standard the
    Compute Engine hardware and its CPU pool, Autopilot the same hardware plus its premium on
    every node and the Ray head's own node."""
    hardware = book.hardware.get(settings.capacity) or book.stack_gpu(settings)
    if hardware.usd is None or settings.gpu_node_hourly_usd is not None:
        return "no comparison (the GPU nodes have no list price here, or your own rate is set)"
    nodes = hardware.usd * settings.gpu_nodes
    fee = CLUSTER_FEE.usd or 0.0
    pool = (cpu_machine_price(settings.cpu_machine_type).usd or 0.0) * settings.cpu_nodes
    standard = nodes + pool + fee
    line = (
        f"Standard {usd(standard)}/h (GPU nodes {usd(nodes)} + {settings.cpu_nodes} x "
        f"{settings.cpu_machine_type} {usd(pool)} + control plane); Autopilot bills the same "
        f"GPU hardware plus its premium on every node ({AUTOPILOT_GPUS})"
    )
    if settings.mode is not Mode.AUTOPILOT:
        return line
    ours = hourly(settings, book)
    if not book.stack_gpu(settings).at_least:  # the premium was read
        verdict = f"{ours.bound}{usd(ours.usd)}/h, above Standard by {usd(ours.usd - standard)}/h"
    else:
        head = book.autopilot_head.usd if book.autopilot_head and book.autopilot_head.usd else 0.0
        saved = max(0.0, pool - head)
        verdict = (
            f"at least {usd(ours.usd)}/h priced, plus the premium on {settings.total_gpus} GPUs "
            f"(not priced): above Standard once that premium passes {usd(saved)}/h, what the "
            f"Ray head's node costs less than the CPU pool"
        )
    return f"{line}; this stack on Autopilot: {verdict}"


def cpu_line(settings: StackSettings, book: PriceBook) -> str:
    if book.cpu is None:
        return autopilot_cpu_line(settings, book)
    price, machine = book.cpu, settings.cpu_machine_type
    count = f"x {settings.cpu_nodes} nodes (autoscaled up to {settings.cpu_max_nodes})"
    if price.usd is None:
        return f"{machine}: {rate(price)}; {count}"
    return (
        f"{machine}: {rate(price)} {count} = {usd(price.usd * settings.cpu_nodes)}/h "
        f"({source_name(price)})"
    )


def autopilot_cpu_line(settings: StackSettings, book: PriceBook) -> str:
    """What Autopilot bills beside the GPU nodes."""
    pods = (
        f"other Pods (KubeRay operator, data prep and the rehearsal while they run) Pod-based at "
        f"{rate(AUTOPILOT_POD_VCPU)} + {rate(AUTOPILOT_POD_GIB)} of their requests "
        f"({GKE_PRICING}, read {AUTOPILOT_POD_VCPU.read_on}; system Pods are not charged "
        "there), not summed"
    )
    head = book.autopilot_head
    if head is None:
        return f"no CPU node pool: the Ray head shares a GPU node; {pods}"
    return f"no CPU node pool; the Ray head: {rate(head)} ({head.basis}); {pods}"


def regions_line(settings: StackSettings) -> str | None:
    """The same machine's Spot rate in the other regions the catalog lists it in."""
    machine = settings.profile.machine_type
    by_region = SPOT_BY_REGION.get(machine)
    if not by_region:
        return None
    shown = [
        f"{region} {'no Spot row' if value is None else usd(value)}"
        + (" (this stack)" if region == settings.region else "")
        for region, value in by_region.items()
    ]
    source = source_name(gpu_machine_price(machine, Capacity.SPOT))
    return (
        f"{machine} Spot per node-hour by region ({source}; Spot prices change daily): "
        + ", ".join(shown)
    )


def table_age_line(today: date) -> str:
    return (
        f"the price table's GPU figures were read {table_age_days(today)} days ago at the "
        f"oldest; Spot prices can change daily, list prices when Google announces it"
    )


def config_key(key: str) -> str:
    return f"verl-gke:{key}"
