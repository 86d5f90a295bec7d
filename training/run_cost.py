"""What a run costs, for the plan and `pulumi up`'s log: $/h per GPU node and for the whole stack,
per capacity mode, the cost to the first step as each mode bills the GPU nodes, one more hour, and
the whole run where its step count is known.

Which price a figure uses (PriceBook): the user's own rate (verl-gke:gpuNodeHourlyUsd) for the
stack's capacity mode, else the Cloud Billing catalog read during `pulumi up`
(training/live_prices.py), else config/price_table.py; every figure names its source.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from config.bucket_layout import GSM8K_TRAIN
from config.price_table import (
    BILLING_PRICING_CONSOLE,
    CLUSTER_FEE,
    GKE_PRICING,
    SKYPILOT_CATALOG,
    Price,
    cpu_machine_price,
    gpu_machine_price,
)
from config.profiles import Capacity, Mode
from config.run_inputs import GSM8K_ROWS
from config.settings import StackSettings
from training.grpo_spec import GrpoSpec
from training.live_prices import CATALOG_SOURCE, CatalogRead
from training.model_evaluation import THROUGHPUT_SOURCE, EvaluationPlan, generation_hours

OWN_RATE_KEY = "verl-gke:gpuNodeHourlyUsd"
# Step time: an ESTIMATE, not measured for this job (no published step time of Qwen2.5-32B GRPO
# on H200/B200/GB200 was found). Range from NeMo-RL's performance summary (docs/about/
# performance-summary.md, v0.4, DGX-H100, GRPO on OpenMathInstruct-2): 393 s/step for Qwen3-32B
# on 32 GPUs at 4096-token sequences (the high end: this job's 512 + 512 tokens are shorter) and
# 97.7 s/step for Llama3.1-8B on 16 GPUs (the low end). `python -m tools.run` shows the real one.
STEP_SECONDS_LOW = 97.7
STEP_SECONDS_HIGH = 393.0
STEP_SOURCE = "estimate from NeMo-RL's GRPO performance summary (v0.4, H100), not measured here"


@dataclass(frozen=True)
class PriceBook:
    """The node-hour prices one stack's figures use: its GPU machine under each capacity mode it
    accepts, and its CPU pool machine (None on Autopilot, which has no pool)."""

    gpu: Mapping[Capacity, Price]
    cpu: Price | None
    catalog_note: str = ""  # what the catalog read gave, or why it gave nothing
    catalog_read: bool = False  # the API answered SKUs

    def stack_gpu(self, settings: StackSettings) -> Price:
        return self.gpu[settings.capacity]


def price_book(settings: StackSettings, catalog: CatalogRead | None = None) -> PriceBook:
    """Own rate > catalog > table, per figure."""
    machine = settings.profile.machine_type
    live = catalog or CatalogRead()
    gpu: dict[Capacity, Price] = {}
    for capacity in settings.profile.capacity[settings.mode].supported:
        gpu[capacity] = live.gpu.get(capacity) or gpu_machine_price(machine, capacity)
    if settings.gpu_node_hourly_usd is not None:
        gpu[settings.capacity] = Price(
            settings.gpu_node_hourly_usd,
            "per node-hour",
            OWN_RATE_KEY,
            "your setting",
            region=settings.region,
            basis="your own rate",
        )
    cpu = None
    if settings.mode is Mode.STANDARD:
        cpu = live.cpu or cpu_machine_price(settings.cpu_machine_type)
    note = "" if catalog is None else catalog.note
    return PriceBook(gpu=gpu, cpu=cpu, catalog_note=note, catalog_read=live.skus > 0)


def usd(value: float) -> str:
    return f"${value:,.2f}" if value >= 0.1 else f"${value:.3f}"


def source_name(price: Price) -> str:
    if price.source == SKYPILOT_CATALOG:
        return f"price table: SkyPilot's GCP catalog of Cloud Billing SKUs, read {price.read_on}"
    if price.source == CATALOG_SOURCE:
        return f"{CATALOG_SOURCE}, read {price.read_on}"
    if price.source == OWN_RATE_KEY:
        return f"your {OWN_RATE_KEY}"
    return f"{price.source}, read {price.read_on}"


def rate(price: Price) -> str:
    """'$86.76 per node-hour' with its bound, or why there is no figure and where to find it."""
    if price.usd is None:
        return f"no price ({price.basis})"
    bound = "at most " if price.at_most else ""
    return f"{bound}{usd(price.usd)} {price.unit}"


@dataclass(frozen=True)
class Hourly:
    """The stack's $/h while it trains: the priced parts, the unpriced ones by name."""

    usd: float
    missing: tuple[str, ...]
    at_most: bool

    def text(self) -> str:
        bound = "at most " if self.at_most else ""
        head = f"{bound}{usd(self.usd)}/h"
        if self.missing:
            return f"at least {usd(self.usd)}/h priced; {', '.join(self.missing)}: no price"
        return head


def hourly(settings: StackSettings, book: PriceBook, capacity: Capacity | None = None) -> Hourly:
    """The stack's $/h under its own capacity mode, or under `capacity` for comparison."""
    gpu = book.gpu[capacity or settings.capacity]
    parts: list[tuple[str, float | None]] = [
        (
            f"{settings.gpu_nodes} GPU nodes",
            None if gpu.usd is None else gpu.usd * settings.gpu_nodes,
        ),
        ("control plane", CLUSTER_FEE.usd),
    ]
    if book.cpu is not None:
        cpu = book.cpu.usd
        parts.append(
            (f"{settings.cpu_nodes} CPU nodes", None if cpu is None else cpu * settings.cpu_nodes)
        )
    known = sum(value for _, value in parts if value is not None)
    missing = tuple(what for what, value in parts if value is None)
    return Hourly(known, missing, gpu.at_most)


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
        bound = "at most " if price.at_most else ""
        head = (
            f"{machine} {mode}: {rate(price)} x {nodes} nodes = {bound}{usd(price.usd * nodes)}/h "
            f"({source_name(price)}; {price.basis})"
        )
    if settings.mode is Mode.AUTOPILOT:
        head += (
            f"; on Autopilot these nodes, chosen through the ComputeClass, are billed node-based "
            f"with GKE's Autopilot premium on top (see {GKE_PRICING})"
        )
    if settings.capacity is Capacity.RESERVATION:
        head += (
            "; a reservation is billed from its own start to its end, whether VMs use it or "
            "not, not from pulumi up"
        )
    return head


def modes_line(settings: StackSettings, book: PriceBook) -> str:
    """The GPU machine's node-hour rate under every capacity mode the stack accepts, so the modes
    can be compared before choosing; the stack's own is marked."""
    rates = []
    for capacity, price in book.gpu.items():
        chosen = " (this stack)" if capacity is settings.capacity else ""
        if price.usd is None:
            rates.append(f"{capacity.value}{chosen} no price")  # why: the GPU nodes line
            continue
        stack = hourly(settings, book, capacity).text()
        rates.append(f"{capacity.value}{chosen} {rate(price)}, stack {stack}")
    return f"{settings.profile.machine_type}: " + "; ".join(rates)


def cpu_line(settings: StackSettings, book: PriceBook) -> str | None:
    if book.cpu is None:
        return None
    price, machine = book.cpu, settings.cpu_machine_type
    count = f"x {settings.cpu_nodes} nodes (autoscaled up to {settings.cpu_max_nodes})"
    if price.usd is None:
        return f"{machine}: {rate(price)}; {count}"
    return (
        f"{machine}: {rate(price)} {count} = {usd(price.usd * settings.cpu_nodes)}/h "
        f"({source_name(price)})"
    )


def first_step_line(settings: StackSettings, book: PriceBook, minutes: float) -> str:
    """minutes x the stack's $/h, GPU nodes included, as the capacity mode bills them."""
    total = hourly(settings, book)
    cost = minutes / 60 * total.usd
    head = f"{minutes:.0f} min x {total.text()} = {'at most ' if total.at_most else ''}{usd(cost)}"
    if total.missing:
        head = f"at least {usd(cost)} ({minutes:.0f} min x {usd(total.usd)}/h priced); " + (
            f"{', '.join(total.missing)}: no price"
        )
    plan = settings.capacity_plan
    if plan.uses_reservation:
        return f"{head}; the reservation itself bills from its own start, used or not"
    if plan.nodes_all_at_once:
        return f"{head}; the GPU nodes bill from the grant, nothing while capacity is awaited"
    gpu = book.stack_gpu(settings).usd
    waiting = settings.gpu_nodes - 1
    if gpu is None or waiting == 0:
        return f"{head}; each GPU node bills from its creation"
    worst = waiting * gpu * settings.capacity_wait_minutes / 60
    return (
        f"{head}; plus the nodes billed while the rest are awaited: {usd(gpu)} per node per hour "
        f"of waiting, {usd(worst)} if {waiting} nodes wait the whole "
        f"{config_key('capacityWaitMinutes')} ({settings.capacity_wait_minutes} min)"
    )


def config_key(key: str) -> str:
    return f"verl-gke:{key}"


def training_steps(job: Mapping[str, str]) -> int | None:
    """verl's step count (ray_trainer: trainer.total_training_steps when set, else
    len(train_dataloader) x total_epochs with drop_last=True) where the dataset's size is known."""
    if "trainer.total_training_steps" in job:
        return int(job["trainer.total_training_steps"])
    if job.get("data.train_files") == GSM8K_TRAIN and "data.train_batch_size" in job:
        batches = GSM8K_ROWS["train"] // int(job["data.train_batch_size"])
        return batches * int(job.get("trainer.total_epochs", "1"))
    return None


# How the plan's step count was found, said next to it.
ESTIMATED = "the program's estimate; verl's own count comes with the rehearsal's record"


def record_steps(record: Mapping[str, Any] | None) -> tuple[int, str] | None:
    """The run's length in steps from the rehearsal's record (verl_scripts/rehearsal.py:
    length.last_step, the step at which verl's fit() ends) and how it was counted; None without
    one."""
    length = (record or {}).get("length")
    last = length.get("last_step") if isinstance(length, Mapping) else None
    if not isinstance(last, int) or isinstance(last, bool):
        return None
    assert isinstance(length, Mapping)
    return last, f"verl's own count, from the rehearsal's record: {length.get('source')}"


def run_line(
    settings: StackSettings, book: PriceBook, steps: int | None, counted_by: str = ESTIMATED
) -> str:
    """The whole run: steps (and how they were counted) x the step-time range, at the stack's
    $/h; per hour when the step count is not known."""
    total = hourly(settings, book)
    if steps is None:
        return (
            f"the step count depends on the dataset: {total.text()} while it trains "
            f"(step time {STEP_SECONDS_LOW:g}-{STEP_SECONDS_HIGH:g} s, {STEP_SOURCE})"
        )
    low_h, high_h = steps * STEP_SECONDS_LOW / 3600, steps * STEP_SECONDS_HIGH / 3600
    bound = "at most " if total.at_most else ""
    cost = f"{bound}{usd(low_h * total.usd)}-{usd(high_h * total.usd)}"
    if total.missing:
        cost = f"at least {usd(low_h * total.usd)}-{usd(high_h * total.usd)} (priced parts)"
    return (
        f"{steps} steps ({counted_by}) x {STEP_SECONDS_LOW:g}-{STEP_SECONDS_HIGH:g} s per step "
        f"({STEP_SOURCE}) = {low_h:.1f}-{high_h:.1f} h, {cost}"
    )


def evaluation_line(
    settings: StackSettings, book: PriceBook, plan: EvaluationPlan | None, num_params: int
) -> str:
    """The evaluation after the export: the most tokens it generates, the hours at the estimated
    throughput on the rollout's tensor-parallel GPUs, and their cost at the whole stack's $/h
    (every node stays up until the job ends)."""
    if plan is None:
        return "off (verl-gke:evaluation.enabled or verl-gke:exportModel is false): nothing"
    tokens = plan.generated_tokens()
    if tokens is None:
        return (
            f"(1 greedy + {plan.samples} sampled) answers x {plan.max_new_tokens} tokens x 2 "
            "models per held-out prompt; the split's size is known once data prep has run "
            f"(verl-gke:evaluation.prompts caps it); {hourly(settings, book).text()} meanwhile"
        )
    head = (
        f"at most {tokens:,} tokens ({plan.prompts:,} prompts x (1 + {plan.samples}) x "
        f"{plan.max_new_tokens} x 2 models)"
    )
    hours = generation_hours(plan, num_params, settings.profile.gpu_type)
    if hours is None:
        return f"{head}; no throughput figure for {settings.profile.gpu_type}"
    total = hourly(settings, book)
    cost = f"{'at most ' if total.at_most else ''}{usd(hours * total.usd)}"
    if total.missing:
        cost = f"at least {usd(hours * total.usd)} (priced parts)"
    return (
        f"{head} on {plan.tensor_parallel} GPU(s) = {hours * 60:.0f} min x "
        f"{total.text()} = {cost} ({THROUGHPUT_SOURCE})"
    )


def cost_lines(
    settings: StackSettings,
    book: PriceBook,
    steps: int | None,
    minutes: float | None,
    counted_by: str = ESTIMATED,
) -> list[str]:
    """The money lines shared by the plan and `pulumi up`'s log (indented two spaces)."""
    lines = [
        f"  GPU nodes ($/h): {gpu_line(settings, book)}",
        f"  GPU node rate by capacity mode ({config_key('capacity')}): "
        f"{modes_line(settings, book)}",
    ]
    if (cpu := cpu_line(settings, book)) is not None:
        lines.append(f"  CPU: {cpu}")
    lines.append(f"  whole stack while it trains: {hourly(settings, book).text()}")
    if minutes is not None:
        lines.append(
            f"  modelled cost to the first training step: "
            f"{first_step_line(settings, book, minutes)}"
        )
    lines.append(f"  one more hour of training: {hourly(settings, book).text()}")
    lines.append(f"  the whole run: {run_line(settings, book, steps, counted_by)}")
    if settings.gpu_node_hourly_usd is None:
        lines.append(
            f"  your own rate (committed-use, negotiated, reservation): pulumi config set "
            f"{OWN_RATE_KEY} <USD per node-hour>; your prices: {BILLING_PRICING_CONSOLE}"
        )
    return lines


def spec_steps(spec: GrpoSpec) -> int | None:
    """training_steps of the job as the spec renders it (its step keys and any extra override
    of trainer.total_training_steps, the last one winning as in Hydra)."""
    job = {
        "data.train_files": spec.train_files,
        "data.train_batch_size": str(spec.train_batch_size),
        "trainer.total_epochs": str(spec.total_epochs),
    }
    for override in spec.extra_overrides:
        key, _, value = override.lstrip("+").partition("=")
        if key == "trainer.total_training_steps":
            job[key] = value
    return training_steps(job)


def up_block(
    settings: StackSettings,
    book: PriceBook,
    steps: int | None,
    counted_by: str = ESTIMATED,
    evaluation: str | None = None,
) -> str:
    """`pulumi up`'s cost block: where the prices came from, then the shared money lines (the
    first-step cost is the plan's: its start-up model needs the plan's own graph)."""
    read = book.catalog_note
    origin = (
        f"Cloud Billing catalog read: {read}"
        if book.catalog_read
        else f"Cloud Billing catalog not read ({read or 'not asked'}); the table's figures are used"
    )
    return "\n".join(
        [
            "What you pay for:",
            f"  prices in {settings.region}: {origin}",
            *cost_lines(settings, book, steps, None, counted_by),
            *([f"  the export's evaluation: {evaluation}"] if evaluation else []),
            "  modelled cost to the first training step: see `python -m tools.plan "
            f"{settings.stack}`",
        ]
    )


def stack_outputs(settings: StackSettings, book: PriceBook) -> dict[str, object]:
    """The stack outputs `python -m tools.run` prices the run with: one GPU node-hour and the
    whole stack per hour while it trains, each with its source (None where unpriced)."""
    gpu = book.stack_gpu(settings)
    total = hourly(settings, book)
    return {
        "gpuNodeHourlyUsd": gpu.usd,
        "gpuNodes": settings.gpu_nodes,
        "stackHourlyUsd": None if total.missing else round(total.usd, 5),
        "priceSource": source_name(gpu) if gpu.usd is not None else rate(gpu),
    }
