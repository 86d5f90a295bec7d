"""Cost in money before anything is created: the price table's provenance, the plan's $/h on
every stack, mode and capacity the settings accept, the user's own rate, the arithmetic against a
hand derivation, and the billing-while-waiting claim against the capacity plan's own fact."""

from __future__ import annotations

import re
from datetime import date

import pytest

from pricing import table as price_table
from config.capacity import capacity_plan
from pricing.table import Price
from config.profiles import PROFILES, Capacity, Mode
from config.settings import SettingsError, StackSettings, load_settings
from planning.cost_facts import checkpoints_kept, money_lines, wait_line, what_you_pay_for
from tests.program import REAL, plan
from tools.run import RunView, cost_text
from tools.run_target import RunPrice
from pricing.billing import ESTIMATED, PriceBook, price_book, stack_outputs

# The rendered GRPO job's Hydra overrides that decide the checkpoints (the a3u/a4 default job).
DEFAULT_JOB = {
    "data.train_files": "/data/gsm8k/train.parquet",
    "data.train_batch_size": "256",
    "trainer.save_freq": "10",
    "trainer.total_epochs": "2",
    "actor_rollout_ref.model.path": "/data/Qwen2.5-32B-Instruct",
}


def settings_for(stack: str, mode: Mode, capacity: Capacity) -> StackSettings:
    config = {**REAL, "verl-gke:mode": mode.value, "verl-gke:capacity": capacity.value}
    if capacity is not Capacity.RESERVATION:
        del config["verl-gke:reservation"]
    return load_settings(stack, config, offline=False).settings


def accepted() -> list[tuple[str, Mode, Capacity]]:
    """Every stack x mode x capacity that the settings accept (asked of load_settings itself,
    not of the profile table, so a capacity the settings refuse is not expected to be priced)."""
    combos = []
    for stack, profile in PROFILES.items():
        for mode in profile.modes:
            for capacity in Capacity:
                try:
                    settings_for(stack, mode, capacity)
                except SettingsError:
                    continue
                combos.append((stack, mode, capacity))
    return combos


ACCEPTED = accepted()


def test_every_price_has_a_date_a_source_and_a_reason_when_it_has_no_figure() -> None:
    sources = (r"https://cloud\.google\.com/[a-z0-9/-]+", re.escape(price_table.SKYPILOT_CATALOG))
    for name, price in price_table.every_price().items():
        assert date.fromisoformat(price.read_on) <= date.today(), name
        assert any(re.fullmatch(source, price.source) for source in sources), name
        assert price.unit and price.region in (price_table.REGION, "global"), name
        assert price.usd is None or price.usd > 0, name
        if price.usd is None:  # never a guess: why none, and where the user finds theirs
            assert "gpuNodeHourlyUsd" in price.basis, name
            assert "publishes no" in price.basis or "had no" in price.basis, name


def test_the_a3_ultra_figures_are_the_catalogs_host_plus_eight_h200_rows() -> None:
    # skypilot-catalog catalogs/v7/gcp/vms.csv at 017e250, us-central1-b: host a3-ultragpu-8g
    # Price 12.266, SpotPrice 2.82111; H200 x 8 Price 74.49392, SpotPrice 29.7976.
    table = price_table.GPU_MACHINE
    assert table[("a3-ultragpu-8g", Capacity.RESERVATION)].usd == pytest.approx(86.75992)
    assert table[("a3-ultragpu-8g", Capacity.SPOT)].usd == pytest.approx(32.61871)
    # Flex-start bills discounted SKUs (About Flex-start VMs): the on-demand rate bounds it.
    flex = table[("a3-ultragpu-8g", Capacity.FLEX_START)]
    assert flex.at_most and flex.usd == pytest.approx(86.75992)
    assert price_table.CPU_MACHINE["n4-highmem-16"].usd == 0.9951


def test_the_accepted_combinations_are_the_profile_tables_and_none_is_on_demand() -> None:
    # config/profiles.py: AI Hypercomputer sells none of these machines on demand.
    table = {
        (stack, mode, capacity)
        for stack, profile in PROFILES.items()
        for mode in profile.modes
        for capacity in profile.capacity[mode].supported
    }
    assert set(ACCEPTED) == table
    assert all(capacity is not Capacity.ON_DEMAND for _, _, capacity in ACCEPTED)


@pytest.mark.parametrize(("stack", "mode", "capacity"), ACCEPTED)
def test_the_block_shows_dollars_per_hour_or_names_the_missing_page(
    stack: str, mode: Mode, capacity: Capacity
) -> None:
    settings = settings_for(stack, mode, capacity)
    lines = money_lines(settings, 60.0, DEFAULT_JOB)
    (gpu,) = [x for x in lines if "GPU nodes ($/h):" in x]
    assert f"{settings.profile.machine_type} {capacity.value}:" in gpu
    priced = re.search(
        rf"\$[\d.,]+ per node-hour x {settings.gpu_nodes} nodes = (at most )?\$[\d.,]+/h", gpu
    )
    missing = re.search(r"no price \(.*(console\.cloud\.google\.com|reservation agreement)", gpu)
    assert priced or missing, gpu
    (plane,) = [x for x in lines if "control plane ($/h):" in x]
    assert "$0.10 per cluster-hour" in plane
    (cpu,) = [x for x in lines if x.startswith("  CPU:")]
    if mode is Mode.STANDARD:
        assert settings.cpu_machine_type in cpu and f"x {settings.cpu_nodes} nodes" in cpu
    else:
        assert "bills the CPU pods' resource requests" in cpu
    (first,) = [x for x in lines if "cost to the first training step:" in x]
    (run,) = [x for x in lines if "the whole run:" in x]
    assert f"58 steps ({ESTIMATED}) x 97.7-393 s per step" in run
    assert "one more hour" in "\n".join(lines)
    if priced:  # the GPU nodes are in the first-step cost, not only the control plane
        assert not first.partition(":")[2].strip().startswith("at least")
    reserved = "billed from its own start to its end, whether VMs use it or not" in gpu
    assert reserved == (capacity is Capacity.RESERVATION)
    assert any("prices vary by region" in x for x in lines)


def book_of(settings: StackSettings, gpu: dict[Capacity, float], cpu: float) -> PriceBook:
    """Test prices, not real ones, in the book the cost model reads."""
    return PriceBook(gpu={c: _test_price(usd) for c, usd in gpu.items()}, cpu=_test_price(cpu))


def test_the_arithmetic_for_a3u_standard_spot() -> None:
    """Test prices, not real ones: GPU node $50/h, CPU node $1/h; the control plane's $0.10/h is
    the table's. a3u Standard defaults to 2 GPU nodes and 1 CPU node:
      per hour  = 2 x 50 + 1 x 1 + 0.10 = $101.10
      90 min    = 1.5 x 101.10 = $151.65
      waiting   = Spot nodes come one by one: 1 node x $50 x 90 min (capacityWaitMinutes) = $75
      run       = 58 steps x 97.7 s = 1.574 h -> $159.14; x 393 s = 6.332 h -> $640.13
    Qwen2.5-32B from its config.json (hidden 5120, intermediate 27648, 64 layers, 40 heads, 8 KV
    heads of 128, vocab 152064, untied embeddings, q/k/v biases):
      per layer = q 5120*5120 + 5120 + k,v 2*(5120*1024 + 1024) + o 5120*5120
                  + mlp 3*5120*27648 + norms 2*5120 = 487,605,248
      total     = 64 * 487,605,248 + 2 * 152064*5120 + 5120 = 32,763,876,352
    One FSDP actor checkpoint = 12 B/param (fp32 weights 4 + AdamW's two fp32 moments 8)
      = 393,166,516,224 B = 366.17 GiB; at $0.020/GiB-month = $7.32 per checkpoint-month.
    GSM8K train has 7473 rows: 7473 // 256 = 29 steps per epoch (drop_last), x 2 epochs = 58
    steps; saves at 10, 20, 30, 40, 50 and the last, 58: 6 kept -> 6 x 7.3234 = $43.94/month.
    """
    settings = settings_for("a3u", Mode.STANDARD, Capacity.SPOT)
    assert (settings.gpu_nodes, settings.cpu_nodes) == (2, 1)
    book = book_of(settings, {Capacity.SPOT: 50.0}, 1.0)
    text = "\n".join(money_lines(settings, 90.0, DEFAULT_JOB, book))
    assert "$50.00 per node-hour x 2 nodes = $100.00/h" in text
    assert "whole stack while it trains: $101.10/h" in text
    assert "90 min x $101.10/h = $151.65" in text
    assert "$50.00 per node per hour of waiting, $75.00 if 1 nodes wait the whole" in text
    assert "one more hour of training: $101.10/h" in text
    assert "= 1.6-6.3 h, $159.14-$640.13" in text
    assert "~366 GiB each" in text and "32.8B parameters" in text
    assert "58 steps" in text and ": 6, all kept" in text
    assert "$7.32 per checkpoint-month, $43.94 per month for the 6 kept" in text


def _test_price(usd: float) -> Price:
    return Price(usd, "per node-hour", price_table.VM_PRICING, "2026-12-01")


@pytest.mark.parametrize("capacity", [Capacity.SPOT, Capacity.FLEX_START, Capacity.RESERVATION])
def test_a3u_prints_a_gpu_node_price_and_a_first_step_cost_with_the_gpus(
    capacity: Capacity,
) -> None:
    """The table's own figures: 60 min x (2 GPU nodes + 1 n4-highmem-16 at $0.9951 + $0.10)."""
    settings = settings_for("a3u", Mode.STANDARD, capacity)
    gpu = price_table.GPU_MACHINE[("a3-ultragpu-8g", capacity)]
    assert gpu.usd is not None
    text = "\n".join(money_lines(settings, 60.0, DEFAULT_JOB))
    assert f"{gpu.usd:,.2f} per node-hour x 2 nodes" in text
    per_hour = 2 * gpu.usd + 0.9951 + 0.10
    assert f"60 min x {'at most ' if gpu.at_most else ''}${per_hour:,.2f}/h" in text
    assert f"= {'at most ' if gpu.at_most else ''}${per_hour:,.2f}" in text
    assert "read 2026-12-04" in text  # the source's date


@pytest.mark.parametrize(
    ("stack", "capacity", "where"),
    [
        ("a4", Capacity.FLEX_START, "console.cloud.google.com/billing/pricing"),
        ("a4", Capacity.SPOT, "console.cloud.google.com/billing/pricing"),
        ("a4x", Capacity.RESERVATION, "the price of your reservation agreement"),
    ],
)
def test_a4_and_a4x_say_google_publishes_no_price_and_where_to_look(
    stack: str, capacity: Capacity, where: str
) -> None:
    settings = settings_for(stack, Mode.STANDARD, capacity)
    text = "\n".join(money_lines(settings, 60.0, DEFAULT_JOB))
    (gpu,) = [x for x in text.splitlines() if "GPU nodes ($/h):" in x]
    assert "no price (" in gpu and where in gpu and "verl-gke:gpuNodeHourlyUsd" in gpu
    assert "$" not in gpu.partition("($/h):")[2].partition("no price")[0]  # no figure made up


def test_the_users_own_rate_wins_and_is_named() -> None:
    config = {**REAL, "verl-gke:capacity": "reservation", "verl-gke:gpuNodeHourlyUsd": "41.5"}
    settings = load_settings("a4x", config, offline=False).settings
    text = "\n".join(money_lines(settings, 60.0, DEFAULT_JOB))
    assert "$41.50 per node-hour x 4 nodes = $166.00/h (your verl-gke:gpuNodeHourlyUsd" in text
    assert "pulumi config set verl-gke:gpuNodeHourlyUsd" not in text  # already set


@pytest.mark.parametrize("value", ["0", "-3", "20000", "nan", "abc"])
def test_a_bad_own_rate_is_refused_naming_the_setting(value: str) -> None:
    config = {**REAL, "verl-gke:gpuNodeHourlyUsd": value}
    with pytest.raises(SettingsError, match=rf"gpuNodeHourlyUsd = '{value}': .* Fix: pulumi"):
        load_settings("a3u", config, offline=False)


def test_without_a_price_the_first_step_cost_is_a_lower_bound_naming_what_is_missing() -> None:
    settings = settings_for("a4", Mode.STANDARD, Capacity.FLEX_START)
    text = "\n".join(money_lines(settings, 60.0, DEFAULT_JOB))
    # 60 min x (the control plane's $0.10/h + n4-highmem-16's $0.9951/h); the GPU nodes have none.
    assert "at least $1.10 (60 min x $1.10/h priced); 2 GPU nodes: no price" in text


def test_kept_checkpoints_follow_max_actor_ckpt_to_keep_and_the_dataset() -> None:
    assert checkpoints_kept({**DEFAULT_JOB, "trainer.max_actor_ckpt_to_keep": "2"})[0] == 2
    custom = {**DEFAULT_JOB, "data.train_files": "/data/mine/train.parquet"}
    count, why = checkpoints_kept(custom)
    assert count is None and "depends on the dataset" in why
    assert checkpoints_kept({**DEFAULT_JOB, "trainer.save_freq": "-1"})[0] == 0
    # total_training_steps overrides the epochs (verl ray_trainer): 25 steps, saves 10, 20, 25.
    assert checkpoints_kept({**DEFAULT_JOB, "trainer.total_training_steps": "25"})[0] == 3


@pytest.mark.parametrize(("stack", "mode", "capacity"), ACCEPTED)
def test_billing_while_waiting_matches_the_capacity_plan(
    stack: str, mode: Mode, capacity: Capacity
) -> None:
    settings = settings_for(stack, mode, capacity)
    cplan = capacity_plan(capacity, mode)
    line = wait_line(settings)
    if cplan.uses_reservation:
        assert "billed" not in line  # the reservation bills on its own schedule (GPU line)
    elif cplan.nodes_all_at_once:
        assert "all at once" in cplan.how or "single unit" in cplan.how
        assert "none is billed, until all are granted together" in line
    else:
        assert "node by node" in cplan.how
        assert "the first nodes are billed while the rest are awaited" in line


def test_on_demand_would_be_node_by_node_too() -> None:
    # Refused by the settings, but the capacity plan still describes it: no all-at-once claim.
    for mode in Mode:
        cplan = capacity_plan(Capacity.ON_DEMAND, mode)
        assert not cplan.nodes_all_at_once and "node by node" in cplan.how


def test_the_plan_prints_the_money_lines_from_the_rendered_job() -> None:
    settings = settings_for("a4", Mode.STANDARD, Capacity.RESERVATION)
    text = "\n".join(what_you_pay_for(plan("a4", "standard"), settings))
    assert "control plane ($/h): $0.10 per cluster-hour" in text
    assert "checkpoints in the kept bucket: ~366 GiB each" in text
    assert "58 steps" in text and "all kept (trainer.max_actor_ckpt_to_keep unset)" in text
    assert re.search(r"modelled cost to the first training step: at least \$[\d.]+ \(\d+ min", text)
    assert "no price (Google's Cloud Billing catalog had no A4" in text


@pytest.mark.parametrize(("stack", "mode", "capacity"), ACCEPTED)
def test_every_capacity_mode_the_stack_accepts_has_its_rate_or_says_no_price(
    stack: str, mode: Mode, capacity: Capacity
) -> None:
    # The modes line lets a user compare the capacity modes before choosing one: every mode the
    # settings accept for this profile and GKE mode (asked of load_settings, as ACCEPTED is) is
    # named with its own table entry.
    settings = settings_for(stack, mode, capacity)
    (line,) = [x for x in money_lines(settings, 60.0, DEFAULT_JOB) if "by capacity mode" in x]
    machine = settings.profile.machine_type
    for other in [c for s, m, c in ACCEPTED if (s, m) == (stack, mode)]:
        price = price_table.GPU_MACHINE[(machine, other)]
        chosen = " (this stack)" if other is capacity else ""
        bound = "at most " if price.at_most else ""
        shown = "no price" if price.usd is None else f"{bound}${price.usd:,.2f} per node-hour, "
        assert f"{other.value}{chosen} {shown}" in line, line
    assert line.count("(this stack)") == 1


def test_the_table_holds_every_machine_and_capacity_the_stacks_accept() -> None:
    # No stack falls back to the generic "not in the table" entry: each accepted machine x
    # capacity has its own row with a source and a read date.
    for stack, _mode, capacity in ACCEPTED:
        machine = PROFILES[stack].machine_type
        assert (machine, capacity) in price_table.GPU_MACHINE, (machine, capacity)
    for machine in {settings_for(*combo).cpu_machine_type for combo in ACCEPTED}:
        assert machine in price_table.CPU_MACHINE, machine


def test_the_modes_line_carries_the_books_rates() -> None:
    """Test prices, not real ones: reservation $80, flexStart $40, Spot $30 per a3-ultragpu-8g
    node-hour. a3u Standard on Spot with 2 GPU nodes and 1 CPU node at $1:
      GPU       = 2 x 30 = $60.00/h
      per hour  = 60 + 1 + 0.10 (control plane) = $61.10
      45 min    = 0.75 x 61.10 = $45.825, shown as $45.83
      the stack per hour on a reservation 2 x 80 + 1.10 = $161.10, on flex-start 2 x 40 + 1.10 =
      $81.10
    """
    rates = {Capacity.RESERVATION: 80.0, Capacity.FLEX_START: 40.0, Capacity.SPOT: 30.0}
    settings = settings_for("a3u", Mode.STANDARD, Capacity.SPOT)
    text = "\n".join(money_lines(settings, 45.0, DEFAULT_JOB, book_of(settings, rates, 1.0)))
    assert (
        "a3-ultragpu-8g: reservation $80.00 per node-hour, stack $161.10/h; flexStart $40.00 "
        "per node-hour, stack $81.10/h; spot (this stack) $30.00 per node-hour, stack $61.10/h"
        in text
    )
    assert "$30.00 per node-hour x 2 nodes = $60.00/h" in text
    assert "45 min x $61.10/h = $45.83; plus the nodes billed while the rest are awaited" in text


def test_the_table_book_is_the_default() -> None:
    settings = settings_for("a3u", Mode.STANDARD, Capacity.SPOT)
    assert (
        price_book(settings).stack_gpu(settings)
        == price_table.GPU_MACHINE[("a3-ultragpu-8g", Capacity.SPOT)]
    )


def _view(start_s: float, end_s: float | None, now_s: float) -> RunView:
    return RunView(
        submission_id="a3u-1",
        dashboard="http://127.0.0.1:8265",
        status="SUCCEEDED" if end_s else "RUNNING",
        message="",
        start_time_ms=int(start_s * 1000),
        end_time_ms=None if end_s is None else int(end_s * 1000),
        phase="training",
        steps=(),
        validation={},
        validation_points=(),
        total_steps=None,
        log_source="whole log",
        now_s=now_s,
    )


def test_tools_run_prices_the_run_from_the_stack_outputs() -> None:
    """Running 90 min at $66.33/h: 1.5 h x 66.33252 = $99.50 so far; finished after 2 h:
    2.0 h x 66.33252 = $132.67 in total."""
    price = RunPrice.from_outputs(
        {
            "gpuNodeHourlyUsd": 32.61871,
            "gpuNodes": 2,
            "stackHourlyUsd": 66.33252,
            "priceSource": "price table",
        }
    )
    running = cost_text(_view(1000.0, None, 1000.0 + 5400), price)
    assert running == (
        "$66.33/h for the stack (2 GPU nodes x $32.62; price table); "
        "so far: 1.50 h x $66.33/h = $99.50"
    )
    finished = cost_text(_view(1000.0, 1000.0 + 7200, 99999.0), price)
    assert finished is not None and finished.endswith("total: 2.00 h x $66.33/h = $132.67")
    unpriced = RunPrice.from_outputs(
        {
            "gpuNodeHourlyUsd": None,
            "gpuNodes": 4,
            "stackHourlyUsd": None,
            "priceSource": "no price (Google publishes no list price for A4X)",
        }
    )
    assert cost_text(_view(0.0, None, 60.0), unpriced) == (
        "no price for the GPU nodes (no price (Google publishes no list price for A4X))"
    )
    assert RunPrice.from_outputs({"jobSubmissionId": "x"}) is None  # a stack from before


def test_the_stack_outputs_carry_the_stacks_hourly_price() -> None:
    """a3u Spot at the table's rates: 2 x 32.61871 + 0.9951 + 0.10 = 66.33252 per hour."""
    settings = settings_for("a3u", Mode.STANDARD, Capacity.SPOT)
    outputs = stack_outputs(settings, price_book(settings))
    assert outputs["gpuNodeHourlyUsd"] == pytest.approx(32.61871)
    assert outputs["stackHourlyUsd"] == pytest.approx(66.33252)
    assert RunPrice.from_outputs(outputs) is not None


def test_the_whole_run_takes_verls_count_from_the_rehearsals_record() -> None:
    """verl 0.6.1 ends at the step the data gives (58 on GSM8K at batch 256) even where
    trainer.total_training_steps asks for 100; the rehearsal's record says so and the plan uses
    it instead of its own count, naming where it came from."""
    settings = settings_for("a3u", Mode.STANDARD, Capacity.RESERVATION)
    job = {**DEFAULT_JOB, "trainer.total_training_steps": "100"}
    (estimate,) = [x for x in money_lines(settings, 60.0, job) if "the whole run:" in x]
    assert f"100 steps ({ESTIMATED})" in estimate
    record = {"length": {"last_step": 58, "source": "dataloader x epochs"}}
    lines = money_lines(settings, 60.0, job, record=record)
    (run,) = [x for x in lines if "the whole run:" in x]
    assert "58 steps (verl's own count, from the rehearsal's record: dataloader x epochs)" in run


@pytest.mark.parametrize(
    ("capacity", "said"),
    [
        (Capacity.RESERVATION, "the reservation's machines bill anyway"),
        (Capacity.SPOT, "nothing in GPU node-hours"),
        (Capacity.FLEX_START, "nothing in GPU node-hours"),
    ],
)
def test_the_plan_says_what_a_failed_rehearsal_costs(capacity: Capacity, said: str) -> None:
    extra = {} if capacity is Capacity.RESERVATION else {"verl-gke__capacity": capacity.value}
    unset = () if capacity is Capacity.RESERVATION else ("verl-gke:reservation",)
    result = plan("a4", "standard", unset=unset, **extra)
    lines = what_you_pay_for(result, settings_for("a4", Mode.STANDARD, capacity))
    (line,) = [x for x in lines if "a failed rehearsal" in x]
    assert said in line
