"""The whole run as the user is billed for it, from `pulumi up` to the GPUs' release: the cost to
the first training step as each capacity mode bills the GPU nodes, the training (its steps x an
estimated step time scaled by the work in a step), the export, the evaluation and the idle
minutes before the GPU workers scale to zero; and the money lines the plan and `pulumi up`'s log
share, and the stack outputs `python -m tools.run` prices the run with.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any

from config.bucket_layout import GSM8K_TRAIN
from config.capacity import IDLE_TIMEOUT_SECONDS
from config.run_inputs import GSM8K_ROWS
from config.settings import StackSettings
from pricing.billing import (
    OWN_RATE_KEY,
    PriceBook,
    config_key,
    cpu_line,
    gke_mode_line,
    gpu_line,
    hourly,
    modes_line,
    rate,
    regions_line,
    source_name,
    table_age_line,
    usd,
)
from pricing.table import BILLING_PRICING_CONSOLE
from training.grpo_spec import GrpoSpec
from training.model_evaluation import THROUGHPUT_SOURCE, EvaluationPlan, generation_hours
from training.run_life import CHECKPOINT_WRITE_MIB_PER_S_PER_NODE

# Step time: an ESTIMATE scaled from NeMo-RL's performance summary (docs/about/
# performance-summary.md, v0.4, DGX-H100, GRPO on OpenMathInstruct-2, Megatron-core, on policy):
# Qwen3-32B on 32 GPUs, 2,048 sequences per step (G-GBS) of 3,206 tokens on average, 540
# tokens/sec/GPU ("total number of tokens used in training in a batch, divided by the step time,
# divided by the total number of GPUs"), 393 s per step. Scaled here by this job's tokens per
# step (prompts x rollouts x (prompt + response) at their maxima: more tokens than verl will
# see) and its model's parameters against Qwen3-32B's, on this stack's GPU count; H200, B200
# and GB200 are faster per GPU than the H100 it was measured on. `python -m tools.run` shows
# the measured one.
ANCHOR_TOKENS_PER_S_PER_GPU = 540.0
ANCHOR_PARAMS = 32_762_123_264  # Qwen3-32B (config.json: 64 layers, hidden 5120, 151936 vocab)
# The one step time measured with this program's job (bench/results/gpu-learn-2026-12-07.json,
# step_seconds_median_after_first): verl 0.6.1's trainer on one H100 with a Hugging Face
# stand-in for vLLM, a 3.4 M-parameter Qwen2, 32 prompts x 8 rollouts of at most 64 + 16 tokens.
# Shown beside the estimate as what has been measured, not scaled from: a model 10,000 times
# smaller and a different rollout engine.
MEASURED_STEP = (
    "measured once: 2.0 s per step for a 3.4 M-parameter model, 20,480 tokens per step, 1 H100, "
    "verl 0.6.1 with a Hugging Face stand-in rollout (bench/results/gpu-learn-2026-12-07.json): "
    "too small to scale from"
)
STEP_SOURCE = (
    "estimate: NeMo-RL v0.4's 540 tokens/s/GPU for Qwen3-32B GRPO on H100, scaled by this "
    f"job's tokens per step at the maximum lengths and its parameters; {MEASURED_STEP}"
)
# The export (payloads/export): verl's model merger reads the actor checkpoint's fp32 weights
# (4 B per parameter) and writes bf16 safetensors (2 B); at the checkpoint write rate that
# training/run_life.py chose low for one node: an ESTIMATE.
EXPORT_BYTES_PER_PARAM = 4 + 2
# How the plan's step count was found, said next to it.
ESTIMATED = "the program's estimate; verl's own count comes with the rehearsal's record"
EXPORT_SOURCE = (
    f"estimate: the merger reads {EXPORT_BYTES_PER_PARAM - 2} B and writes 2 B per parameter at "
    f"{CHECKPOINT_WRITE_MIB_PER_S_PER_NODE} MiB/s (training/run_life.py's write rate, chosen low)"
)


def training_steps(job: Mapping[str, str]) -> int | None:
    """verl's step count (ray_trainer: trainer.total_training_steps when set, else
    len(train_dataloader) x total_epochs with drop_last=True) where the dataset's size is known."""
    if "trainer.total_training_steps" in job:
        return int(job["trainer.total_training_steps"])
    if job.get("data.train_files") == GSM8K_TRAIN and "data.train_batch_size" in job:
        batches = GSM8K_ROWS["train"] // int(job["data.train_batch_size"])
        return batches * int(job.get("trainer.total_epochs", "1"))
    return None


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


def spec_job(spec: GrpoSpec) -> dict[str, str]:
    """The Hydra overrides of the spec that decide the run's length and its work per step (any
    extra override of trainer.total_training_steps included, the last one winning as in Hydra)."""
    job = {
        "data.train_files": spec.train_files,
        "data.train_batch_size": str(spec.train_batch_size),
        "trainer.total_epochs": str(spec.total_epochs),
        "actor_rollout_ref.rollout.n": str(spec.rollout_n),
        "data.max_prompt_length": str(spec.max_prompt_length),
        "data.max_response_length": str(spec.max_response_length),
    }
    for override in spec.extra_overrides:
        key, _, value = override.lstrip("+").partition("=")
        if key == "trainer.total_training_steps":
            job[key] = value
    return job


def spec_steps(spec: GrpoSpec) -> int | None:
    return training_steps(spec_job(spec))


def tokens_per_step(job: Mapping[str, str]) -> int | None:
    """Prompts x rollouts x (prompt + response length) at their maxima: the most tokens a step
    trains on (verl pads nothing into the count; real lengths are shorter)."""
    keys = (
        "data.train_batch_size",
        "actor_rollout_ref.rollout.n",
        "data.max_prompt_length",
        "data.max_response_length",
    )
    if not all(key in job for key in keys):
        return None
    prompts, rollouts, prompt, response = (int(job[key]) for key in keys)
    return prompts * rollouts * (prompt + response)


@dataclass(frozen=True)
class RunFacts:
    """What the whole run's cost needs of the job: its length and its work."""

    steps: int | None
    counted_by: str
    tokens_per_step: int | None
    num_params: int | None
    evaluation: EvaluationPlan | None = None

    def step_seconds(self, gpus: int) -> float | None:
        """The ESTIMATED step time (STEP_SOURCE)."""
        if not self.tokens_per_step or not self.num_params or gpus <= 0:
            return None
        scaled = self.tokens_per_step * self.num_params / ANCHOR_PARAMS
        return scaled / (ANCHOR_TOKENS_PER_S_PER_GPU * gpus)

    def export_hours(self, nodes: int) -> float | None:
        """The ESTIMATED export time (EXPORT_SOURCE); the merge runs on one node."""
        if not self.num_params or nodes <= 0:
            return None
        rate = CHECKPOINT_WRITE_MIB_PER_S_PER_NODE * 2**20
        return EXPORT_BYTES_PER_PARAM * self.num_params / rate / 3600


def first_step(
    settings: StackSettings, book: PriceBook, minutes: float, gpu_from: float
) -> tuple[float, str]:
    """(cost, the line) up to the first step: the control plane and the CPU side bill from the
    start, the GPU nodes as the capacity mode bills them: a reservation throughout (it bills
    whether used or not), other modes from the GPU nodes' creation at minute `gpu_from`."""
    total = hourly(settings, book)
    fixed = total.fixed_usd * minutes / 60
    plan = settings.capacity_plan
    gpu_minutes = minutes if plan.uses_reservation else max(0.0, minutes - gpu_from)
    parts = (
        f"control plane and CPU side {usd(fixed)} ({minutes:.0f} min x {usd(total.fixed_usd)}/h)"
    )
    if total.gpu_usd is None:
        head = f"at least {usd(fixed)}: {parts}; the GPU nodes: no price"
        return fixed, head
    gpu = total.gpu_usd * gpu_minutes / 60
    since = (
        "the reservation bills throughout"
        if plan.uses_reservation
        else f"from their creation at minute {gpu_from:.0f}"
    )
    cost = fixed + gpu
    head = (
        f"{minutes:.0f} min: {total.bound}{usd(cost)} = {parts} + GPU nodes {usd(gpu)} "
        f"({gpu_minutes:.0f} min, {since}, x {usd(total.gpu_usd)}/h)"
    )
    return cost, head + _waiting_tail(settings, book)


def _waiting_tail(settings: StackSettings, book: PriceBook) -> str:
    plan = settings.capacity_plan
    if plan.uses_reservation:
        return "; the reservation itself bills from its own start to its end, used or not"
    if plan.nodes_all_at_once:
        return "; the GPU nodes bill from the grant, nothing while capacity is awaited"
    gpu = book.stack_gpu(settings).usd
    waiting = settings.gpu_nodes - 1
    if gpu is None or waiting == 0:
        return "; each GPU node bills from its creation"
    worst = waiting * gpu * settings.capacity_wait_minutes / 60
    return (
        f"; plus the nodes billed while the rest are awaited: {usd(gpu)} per node per hour of "
        f"waiting, {usd(worst)} if {waiting} nodes wait the whole "
        f"{config_key('capacityWaitMinutes')} ({settings.capacity_wait_minutes} min); no cap: "
        f"if pulumi up fails while the rest are awaited, the nodes granted keep billing until "
        f"they scale to zero or pulumi destroy"
    )


def evaluation_hours(settings: StackSettings, facts: RunFacts) -> float | None:
    plan = facts.evaluation
    if plan is None or facts.num_params is None:
        return None
    return generation_hours(plan, facts.num_params, settings.profile.gpu_type)


def evaluation_line(
    settings: StackSettings, book: PriceBook, plan: EvaluationPlan | None, num_params: int
) -> str:
    """The evaluation after the export: the most tokens it generates, the hours at the estimated
    throughput on the rollout's tensor-parallel GPUs, and their cost at the whole stack's $/h
    (every node stays up until the job ends)."""
    if plan is None:
        return "off (verl-gke:evaluation.enabled or verl-gke:exportModel is false): nothing"
    tokens = plan.generated_tokens()
    total = hourly(settings, book)
    if tokens is None:
        return (
            f"(1 greedy + {plan.samples} sampled) answers x {plan.max_new_tokens} tokens x 2 "
            "models per held-out prompt; the split's size is known once data prep has run "
            f"(verl-gke:evaluation.prompts caps it); {total.text()} meanwhile"
        )
    head = (
        f"at most {tokens:,} tokens ({plan.prompts:,} prompts x (1 + {plan.samples}) x "
        f"{plan.max_new_tokens} x 2 models)"
    )
    hours = generation_hours(plan, num_params, settings.profile.gpu_type)
    if hours is None:
        return f"{head}; no throughput figure for {settings.profile.gpu_type}"
    return (
        f"{head} on {plan.tensor_parallel} GPU(s) = {hours * 60:.0f} min x "
        f"{total.text()} = {total.bound}{usd(hours * total.usd)} ({THROUGHPUT_SOURCE})"
    )


@dataclass(frozen=True)
class Phase:
    name: str
    hours: float | None  # None: not known
    how: str


def run_phases(settings: StackSettings, facts: RunFacts) -> list[Phase]:
    """Training, export, evaluation and the idle tail, with their hours and how each is known."""
    step = facts.step_seconds(settings.total_gpus)
    if facts.steps is None or step is None:
        training = Phase("training", None, "the step count depends on the dataset")
    else:
        work = (
            f"{facts.steps} steps ({facts.counted_by}) x ~{step:.0f} s per step "
            f"({facts.tokens_per_step:,} tokens per step, {STEP_SOURCE})"
        )
        training = Phase("training", facts.steps * step / 3600, work)
    export = facts.export_hours(settings.gpu_nodes)
    phases = [training, Phase("export", export, EXPORT_SOURCE)]
    evaluation = evaluation_hours(settings, facts)
    if facts.evaluation is not None:
        phases.append(Phase("evaluation", evaluation, THROUGHPUT_SOURCE))
    if settings.capacity_plan.scale_to_zero:
        idle = IDLE_TIMEOUT_SECONDS / 3600
        phases.append(Phase("idle tail", idle, "the idle minutes before the workers scale to 0"))
    return phases


def whole_run_lines(
    settings: StackSettings,
    book: PriceBook,
    facts: RunFacts,
    minutes: float | None,
    gpu_from: float = 0.0,
) -> list[str]:
    """The whole run from `pulumi up` to the GPUs' release, phase by phase, and its total."""
    total = hourly(settings, book)
    lines = []
    priced: list[float] = []  # the priced part of every phase whose length is known
    complete = minutes is not None and not total.missing
    if minutes is not None:
        cost, text = first_step(settings, book, minutes, gpu_from)
        lines.append(f"    start-up to the first step: {text}")
        priced.append(cost)
    for phase in run_phases(settings, facts):
        if phase.hours is None:
            lines.append(f"    {phase.name}: {phase.how}; {total.text()} meanwhile")
            complete = False
            continue
        cost = phase.hours * total.usd
        lines.append(
            f"    {phase.name}: {phase.hours * 60:,.0f} min x {total.text()} = "
            f"{total.bound}{usd(cost)} ({phase.how})"
        )
        priced.append(cost)
    if not settings.capacity_plan.scale_to_zero:
        lines.append(
            "    after the run: the reservation's nodes stay until pulumi destroy, billed by the "
            "reservation until it ends"
        )
    if complete:
        head = f"{total.bound}{usd(sum(priced))}"
    elif total.bound in ("", "at least ") or total.missing:
        unpriced = f"; {', '.join(total.missing)}: no price" if total.missing else ""
        head = f"at least {usd(sum(priced))} (the parts priced and known{unpriced})"
    else:
        # An upper bound or an estimate of the parts known is no lower bound of the whole.
        head = f"{total.bound}{usd(sum(priced))} for the parts known, plus the parts not known"
    return [f"  the whole run, pulumi up to the GPUs' release: {head}", *lines]


def cost_lines(
    settings: StackSettings,
    book: PriceBook,
    facts: RunFacts,
    minutes: float | None,
    gpu_from: float = 0.0,
    today: date | None = None,
) -> list[str]:
    """The money lines shared by the plan and `pulumi up`'s log (indented two spaces)."""
    lines = [
        f"  GPU nodes ($/h): {gpu_line(settings, book)}",
        f"  GPU node rate by capacity mode ({config_key('capacity')}): "
        f"{modes_line(settings, book)}",
        f"  GKE mode: {gke_mode_line(settings, book)}",
    ]
    if (regions := regions_line(settings)) is not None:
        lines.append(f"  other regions: {regions}")
    lines.append(f"  CPU: {cpu_line(settings, book)}")
    lines.append(f"  whole stack while it trains: {hourly(settings, book).text()}")
    lines.append(f"  one more hour of training: {hourly(settings, book).text()}")
    lines.extend(whole_run_lines(settings, book, facts, minutes, gpu_from))
    lines.append(f"  price age: {table_age_line(today or date.today())}")
    if settings.gpu_node_hourly_usd is None:
        lines.append(
            f"  your own rate (committed-use, negotiated, reservation): pulumi config set "
            f"{OWN_RATE_KEY} <USD per node-hour>; your prices: {BILLING_PRICING_CONSOLE}"
        )
    return lines


def up_block(settings: StackSettings, book: PriceBook, facts: RunFacts) -> str:
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
            *cost_lines(settings, book, facts, None),
            "  modelled cost to the first training step: see `python -m tools.plan "
            f"{settings.stack}`",
        ]
    )


def stack_outputs(settings: StackSettings, book: PriceBook) -> dict[str, object]:
    """The stack outputs `python -m tools.run` prices the run with: one GPU node-hour, the rest
    of the stack per hour, and the whole stack per hour while it trains, each named for what it
    is: an exact list price (stackHourlyUsd), a lower bound (stackHourlyUsdAtLeast, Autopilot:
    the premium not priced) or an upper bound (stackHourlyUsdAtMost, flex-start's discount not
    read); all None where unpriced, or where neither bound holds (Autopilot flex-start)."""
    gpu = book.stack_gpu(settings)
    total = hourly(settings, book)
    priced = not total.missing
    bounded = {
        key: round(total.usd, 5) if priced and total.bound == said else None
        for key, said in (
            ("stackHourlyUsdAtLeast", "at least "),
            ("stackHourlyUsdAtMost", "at most "),
        )
    }
    return {
        "gpuNodeHourlyUsd": gpu.usd,
        "gpuNodes": settings.gpu_nodes,
        "fixedHourlyUsd": round(total.fixed_usd, 5),
        "stackHourlyUsd": round(total.usd, 5) if priced and not total.bound else None,
        **bounded,
        "priceSource": source_name(gpu) if gpu.usd is not None else rate(gpu),
    }
