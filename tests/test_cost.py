"""Cost in money before anything is created: the price table's provenance, the plan's $/h on
every stack, mode and capacity the settings accept, the user's own rate, the arithmetic against a
hand derivation, and the billing-while-waiting claim against the capacity plan's own fact."""

from __future__ import annotations

import re
from datetime import date

import pytest

from config.capacity import capacity_plan
from config.profiles import PROFILES, Capacity, Mode
from config.settings import SettingsError, StackSettings, load_settings
from planning.cost_facts import checkpoints_kept, money_lines, wait_line, what_you_pay_for
from pricing import table as price_table
from pricing.billing import PriceBook, hourly, price_book
from pricing.catalog import CatalogRead
from pricing.guard import check_cap
from pricing.table import Price
from pricing.whole_run import ESTIMATED, stack_outputs
from tests.program import REAL, plan
from tools.run import RunView, cost_rows
from tools.run_target import RunPrice

# The rendered GRPO job's Hydra overrides that decide the checkpoints (the a3u/a4 default job).
DEFAULT_JOB = {
    "data.train_files": "/data/gsm8k/train.parquet",
    "data.train_batch_size": "256",
    "trainer.save_freq": "10",
    "trainer.total_epochs": "2",
    "actor_rollout_ref.model.path": "/data/Qwen2.5-32B-Instruct",
    "actor_rollout_ref.rollout.n": "8",
    "data.max_prompt_length": "512",
    "data.max_response_length": "512",
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
    sources = (
        r"https://cloud\.google\.com/[a-z0-9/-]+",
        re.escape(price_table.SKYPILOT_V7),
        re.escape(price_table.SKYPILOT_V8),
        re.escape(price_table.A4_SLICE_SKU),
    )
    for name, price in price_table.every_price().items():
        assert date.fromisoformat(price.read_on) <= date.today(), name
        assert any(re.fullmatch(source, price.source) for source in sources), name
        assert price.unit and price.region in (price_table.REGION, "global"), name
        assert price.usd is None or price.usd > 0, name
        if price.usd is None:  # never a guess: why none, and where the user finds theirs
            assert "gpuNodeHourlyUsd" in price.basis, name
            assert "publishes no" in price.basis or "had no" in price.basis, name


def test_the_a3_ultra_figures_are_the_catalogs_host_plus_eight_h200_rows() -> None:
    # skypilot-catalog catalogs/v8/gcp/vms.csv at 006059e, us-central1-b: host a3-ultragpu-8g
    # Price 12.266, SpotPrice 3.74713; H200 x 8 Price 74.49392, SpotPrice 37.2472.
    table = price_table.GPU_MACHINE
    assert table[("a3-ultragpu-8g", Capacity.RESERVATION)].usd == pytest.approx(86.75992)
    assert table[("a3-ultragpu-8g", Capacity.SPOT)].usd == pytest.approx(40.99433)
    # Flex-start bills discounted SKUs (About Flex-start VMs): the on-demand rate bounds it.
    flex = table[("a3-ultragpu-8g", Capacity.FLEX_START)]
    assert flex.at_most and flex.usd == pytest.approx(86.75992)
    assert price_table.CPU_MACHINE["n4-highmem-16"].usd == 0.9951
    # Google's Spot page: "Spot prices ... can change up to once every day".
    assert "once every day" in table[("a3-ultragpu-8g", Capacity.SPOT)].basis


def test_a4_is_priced_per_gpu_slice_in_every_capacity_mode() -> None:
    """A4 bills per GPU slice, the host included (SkyPilot v8 prices the a4-highgpu-8g host at
    $0.0): 8 slices x $16.11 (the on-demand slice SKU) = $128.88 per node-hour; Spot 8 x
    $4.0758 = $32.6064 (v8). SkyPilot's on-demand B200 figure, $90.216, is exactly 70 % of
    $128.88 and its us-east4 one, $64.44, exactly 50 %: discounted SKUs its first-match fetcher
    took for the list price, which the table's basis says."""
    table = price_table.GPU_MACHINE
    reservation = table[("a4-highgpu-8g", Capacity.RESERVATION)]
    assert reservation.usd == pytest.approx(8 * 16.11) and not reservation.at_most
    assert 90.216 / reservation.usd == pytest.approx(0.70) and 64.44 / reservation.usd == 0.5
    assert "$90.216 (70 % of this)" in reservation.basis and "per GPU slice" in reservation.basis
    flex = table[("a4-highgpu-8g", Capacity.FLEX_START)]
    assert flex.at_most and flex.usd == pytest.approx(128.88)
    assert table[("a4-highgpu-8g", Capacity.SPOT)].usd == pytest.approx(8 * 4.0758)
    for stack, mode, capacity in ACCEPTED:
        if stack == "a4":
            assert (
                price_book(settings_for(stack, mode, capacity))
                .stack_gpu(settings_for(stack, mode, capacity))
                .usd
            ), (mode, capacity)


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
    lines = money_lines(settings, 60.0, DEFAULT_JOB, gpu_from=20.0)
    (gpu,) = [x for x in lines if "GPU nodes ($/h):" in x]
    assert f"{settings.profile.machine_type} {capacity.value}:" in gpu
    priced = re.search(
        rf"\$[\d.,]+ per node-hour x {settings.gpu_nodes} nodes = (at most |at least |~)?"
        r"\$[\d.,]+/h",
        gpu,
    )
    missing = re.search(r"no price \(.*reservation agreement", gpu)
    assert priced or missing, gpu
    assert bool(missing) == (stack == "a4x")  # only A4X has no list price
    (plane,) = [x for x in lines if "control plane ($/h):" in x]
    assert "$0.10 per cluster-hour" in plane
    (cpu,) = [x for x in lines if x.startswith("  CPU:")]
    if mode is Mode.STANDARD:
        assert settings.cpu_machine_type in cpu and f"x {settings.cpu_nodes} nodes" in cpu
    else:
        assert "no CPU node pool" in cpu and "Pod-based" in cpu
    (first,) = [x for x in lines if "start-up to the first step:" in x]
    (run,) = [x for x in lines if "the whole run, pulumi up to the GPUs' release:" in x]
    (training,) = [x for x in lines if x.strip().startswith("training:")]
    assert f"58 steps ({ESTIMATED}) x ~" in training and "estimate" in training
    assert "one more hour" in "\n".join(lines)
    if priced:  # the GPU nodes are in the first-step cost, not only the control plane
        assert "GPU nodes $" in first
    reserved = "billed from its own start to its end, whether VMs use it or not" in gpu
    assert reserved == (capacity is Capacity.RESERVATION)
    assert any("prices vary by region" in x for x in lines)
    # Autopilot is never shown as exact: its premium or the head's node size is not known.
    if mode is Mode.AUTOPILOT and priced:
        assert re.search(r": (at least |~)\$", run), run


def book_of(settings: StackSettings, gpu: dict[Capacity, float], cpu: float) -> PriceBook:
    """Test prices, not real ones, in the book the cost model reads."""
    return PriceBook(gpu={c: _test_price(usd) for c, usd in gpu.items()}, cpu=_test_price(cpu))


def _money(text: str, label: str) -> float:
    """The phase's cost: the first amount after "= " on its line (the whole run's: after ":")."""
    line = next(x for x in text.splitlines() if x.startswith(label))
    found = re.search(r"(?:= |release: )(?:at most |at least |~)?\$([\d,]+\.\d\d)", line)
    assert found, (label, line)
    return float(found.group(1).replace(",", ""))


def test_the_arithmetic_for_a3u_standard_spot() -> None:
    """Test prices, not real ones: GPU node $50/h, CPU node $1/h; the control plane's $0.10/h is
    the table's. a3u Standard defaults to 2 GPU nodes, 16 GPUs, and 1 CPU node:
      per hour    = 2 x 50 + 1 x 1 + 0.10 = $101.10
      first step  = 90 min; the control plane and CPU node from minute 0: 1.5 x 1.10 = $1.65;
                    the Spot GPU nodes from their creation at minute 30: 1.0 x 100 = $100;
                    = $101.65 (not 1.5 x 101.10 = $151.65: GPUs are not billed from minute 0)
      waiting     = Spot nodes come one by one: 1 node x $50 x 90 min (capacityWaitMinutes) = $75
      step time   = 256 prompts x 8 rollouts x (512 + 512) = 2,097,152 tokens x
                    (32,763,876,352 / 32,762,123,264 params) / (540 tokens/s/GPU x 16) = 242.74 s
      training    = 58 x 242.74 s = 3.9108 h x 101.10 = $395.38
      export      = 6 B x 32,763,876,352 / (100 x 2^20 B/s) = 1,874.8 s = 0.52077 h -> $52.65
      idle tail   = 900 s = 0.25 h -> $25.28 (rounded: 25.275)
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
    assert (settings.gpu_nodes, settings.cpu_nodes, settings.total_gpus) == (2, 1, 16)
    book = book_of(settings, {Capacity.SPOT: 50.0}, 1.0)
    text = "\n".join(money_lines(settings, 90.0, DEFAULT_JOB, book, gpu_from=30.0))
    assert "$50.00 per node-hour x 2 nodes = $100.00/h" in text
    assert "whole stack while it trains: $101.10/h" in text
    assert "90 min: $101.65 = control plane and CPU side $1.65" in text
    assert "GPU nodes $100.00 (60 min, from their creation at minute 30, x $100.00/h)" in text
    assert "$50.00 per node per hour of waiting, $75.00 if 1 nodes wait the whole" in text
    assert "no cap: if pulumi up fails while the rest are awaited" in text
    assert "one more hour of training: $101.10/h" in text
    assert "x ~243 s per step (2,097,152 tokens per step" in text
    assert _money(text, "    training:") == pytest.approx(395.38, abs=0.01)
    assert _money(text, "    export:") == pytest.approx(52.65, abs=0.01)
    assert _money(text, "    idle tail:") == pytest.approx(25.275, abs=0.01)
    evaluation = _money(text, "    evaluation:")
    whole = _money(text, "  the whole run, pulumi up")
    assert whole == pytest.approx(101.65 + 395.38 + 52.65 + evaluation + 25.275, abs=0.03)
    assert "~366 GiB each" in text and "32.8B parameters" in text
    assert "58 steps" in text and ": 6, all kept" in text
    assert "$7.32 per checkpoint-month, $43.94 per month for the 6 kept" in text


def _test_price(usd: float) -> Price:
    return Price(usd, "per node-hour", price_table.VM_PRICING, "2026-12-01")


def test_the_step_time_scales_with_the_work_in_a_step() -> None:
    """trainBatchSize 1024 instead of 256: 7473 // 1024 x 2 epochs = 14 steps instead of 58, each
    4 x the tokens, so the training costs about the same (56 / 58 of it), not four times less."""
    settings = settings_for("a3u", Mode.STANDARD, Capacity.SPOT)
    book = book_of(settings, {Capacity.SPOT: 50.0}, 1.0)
    small = "\n".join(money_lines(settings, 60.0, DEFAULT_JOB, book))
    big_job = {**DEFAULT_JOB, "data.train_batch_size": "1024"}
    big = "\n".join(money_lines(settings, 60.0, big_job, book))
    assert "14 steps" in big and "8,388,608 tokens per step" in big
    ratio = _money(big, "    training:") / _money(small, "    training:")
    assert ratio == pytest.approx(56 / 58, rel=1e-3)


@pytest.mark.parametrize("capacity", [Capacity.SPOT, Capacity.FLEX_START, Capacity.RESERVATION])
def test_a3u_bills_the_gpu_nodes_as_its_capacity_mode_does(capacity: Capacity) -> None:
    """The table's own figures: the control plane and the n4-highmem-16 ($0.9951) from minute 0,
    the GPU nodes from minute 20 (their creation), or throughout on a reservation."""
    settings = settings_for("a3u", Mode.STANDARD, capacity)
    gpu = price_table.GPU_MACHINE[("a3-ultragpu-8g", capacity)]
    assert gpu.usd is not None
    text = "\n".join(money_lines(settings, 60.0, DEFAULT_JOB, gpu_from=20.0))
    assert f"{gpu.usd:,.2f} per node-hour x 2 nodes" in text
    gpu_minutes = 60 if capacity is Capacity.RESERVATION else 40
    cost = 1.0 * (0.9951 + 0.10) + gpu_minutes / 60 * 2 * gpu.usd
    bound = "at most " if gpu.at_most else ""
    assert f"60 min: {bound}${cost:,.2f} = control plane and CPU side $1.10" in text
    assert f"GPU nodes ${gpu_minutes / 60 * 2 * gpu.usd:,.2f} ({gpu_minutes} min, " in text
    assert "read 2026-12-07" in text  # the source's date


def test_a4x_says_google_publishes_no_price_and_where_to_look() -> None:
    settings = settings_for("a4x", Mode.STANDARD, Capacity.RESERVATION)
    text = "\n".join(money_lines(settings, 60.0, DEFAULT_JOB))
    (gpu,) = [x for x in text.splitlines() if "GPU nodes ($/h):" in x]
    assert "no price (" in gpu and "the price of your reservation agreement" in gpu
    assert "verl-gke:gpuNodeHourlyUsd" in gpu
    assert "$" not in gpu.partition("($/h):")[2].partition("no price")[0]  # no figure made up
    # 60 min x (the control plane's $0.10/h + n4-highmem-16's $0.9951/h); the GPU nodes have none.
    assert "start-up to the first step: at least $1.10" in text and "GPU nodes: no price" in text
    # The whole run is at least the sum of the priced parts of its phases, never "$0".
    parts = [_money(text, f"    {name}:") for name in ("training", "export", "evaluation")]
    whole = _money(text, "  the whole run, pulumi up")
    assert whole == pytest.approx(1.0951 + sum(parts), abs=0.02) and whole > 1.0951
    assert "(the parts priced and known; 4 GPU nodes: no price)" in text


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


@pytest.mark.parametrize(
    ("stack", "capacity"), [("a3u", Capacity.RESERVATION), ("a4", Capacity.SPOT)]
)
def test_autopilot_bills_more_than_standard_for_the_same_gpus(
    stack: str, capacity: Capacity
) -> None:
    """GKE "Deploy GPU workloads in Autopilot": node-based, the Compute Engine hardware plus the
    Autopilot premium. Without the premium's figure the Autopilot GPU nodes are a lower bound at
    the hardware's price; with a premium read from the catalog (test figure $2.50 per node-hour)
    the Autopilot stack is above the Standard stack: 2 x 2.50 = $5.00 more for the GPU nodes,
    less what the Ray head's c2-standard-16 ($0.83523) costs less than the n4-highmem-16 pool
    ($0.9951): 5.00 - 0.15987 = $4.84013 per hour."""
    standard = settings_for(stack, Mode.STANDARD, capacity)
    autopilot = settings_for(stack, Mode.AUTOPILOT, capacity)
    hardware = price_book(standard).stack_gpu(standard)
    unread = price_book(autopilot).stack_gpu(autopilot)
    assert unread.usd == hardware.usd and unread.at_least and "premium" in unread.basis
    premium = Price(2.50, "per node-hour", "test", "2026-12-07", basis="a test premium")
    read = CatalogRead(premium={capacity: premium}, head_premium=None)
    book = price_book(autopilot, read)
    assert book.stack_gpu(autopilot).usd == pytest.approx(hardware.usd + 2.50)
    difference = hourly(autopilot, book).usd - hourly(standard, price_book(standard)).usd
    assert difference == pytest.approx(2 * 2.50 - (0.9951 - 0.83523))
    # Shown and exported as a bound, never as exact.
    outputs = stack_outputs(autopilot, book)
    assert outputs["stackHourlyUsd"] is None and outputs["stackHourlyUsdAtLeast"] is not None
    (line,) = [x for x in money_lines(autopilot, 60.0, DEFAULT_JOB, book) if "GKE mode:" in x]
    assert "above Standard by $4.84/h" in line


def test_autopilot_without_the_premium_says_when_it_passes_standard() -> None:
    settings = settings_for("a3u", Mode.AUTOPILOT, Capacity.RESERVATION)
    (line,) = [x for x in money_lines(settings, 60.0, DEFAULT_JOB) if "GKE mode:" in x]
    # Standard: 2 x 86.75992 + 0.9951 + 0.10 = $174.61; the head's node saves 0.9951 - 0.83523.
    assert "Standard $174.61/h" in line
    assert "above Standard once that premium passes $0.16/h" in line


def test_the_cap_refuses_a_plan_above_it_with_fixes_that_are_accepted() -> None:
    """a3u on a reservation: 2 x 86.75992 + 0.9951 + 0.10 = $174.61/h, above a $100 cap; Spot
    (2 x 40.99433 + 1.0951 = $83.08/h) is under it."""
    config = {**REAL, "verl-gke:maxHourlyUsd": "100"}
    settings = load_settings("a3u", config, offline=False).settings
    with pytest.raises(SettingsError) as refused:
        check_cap(settings, price_book(settings))
    message = str(refused.value)
    assert "verl-gke:maxHourlyUsd = 100: this plan costs $174.61/h" in message
    assert "Fix: pulumi config set verl-gke:maxHourlyUsd 175 -s a3u" in message
    assert (
        "pulumi config rm verl-gke:reservation -s a3u and pulumi config set verl-gke:capacity "
        "spot -s a3u ($83.08/h)" in message
    )
    # Each fix is accepted: the cap it names, or the capacity it names.
    raised = load_settings("a3u", {**config, "verl-gke:maxHourlyUsd": "175"}, offline=False)
    check_cap(raised.settings, price_book(raised.settings))
    spot = {**config, "verl-gke:capacity": "spot"}
    del spot["verl-gke:reservation"]
    cheaper = load_settings("a3u", spot, offline=False).settings
    check_cap(cheaper, price_book(cheaper))


def test_the_cap_cannot_be_checked_without_a_gpu_price() -> None:
    config = {**REAL, "verl-gke:capacity": "reservation", "verl-gke:maxHourlyUsd": "500"}
    settings = load_settings("a4x", config, offline=False).settings
    with pytest.raises(SettingsError, match=r"cannot be checked against it.*gpuNodeHourlyUsd"):
        check_cap(settings, price_book(settings))
    own = load_settings("a4x", {**config, "verl-gke:gpuNodeHourlyUsd": "50"}, offline=False)
    check_cap(own.settings, price_book(own.settings))  # 4 x 50 + 1.0951 = $201.10 < $500


@pytest.mark.parametrize("value", ["0", "-1", "abc"])
def test_a_bad_cap_is_refused_naming_the_setting(value: str) -> None:
    with pytest.raises(SettingsError, match=rf"maxHourlyUsd = '{value}'"):
        load_settings("a3u", {**REAL, "verl-gke:maxHourlyUsd": value}, offline=False)


def test_the_plan_says_how_old_the_table_is() -> None:
    settings = settings_for("a3u", Mode.STANDARD, Capacity.SPOT)
    lines = money_lines(settings, 60.0, DEFAULT_JOB)
    (age,) = [x for x in lines if "price age:" in x]
    days = (date.today() - date(2026, 12, 7)).days
    assert f"read {days} days ago at the oldest" in age and "Spot prices can change daily" in age
    (regions,) = [x for x in lines if "other regions:" in x]
    # v8: us-east4 host Spot 2.80034 + H200 Spot 29.2536 = $32.05394.
    assert "us-east4 $32.05" in regions and "us-central1 $40.99 (this stack)" in regions


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
    # The rendered job's own tokens per step: 256 prompts x 8 rollouts x (512 + 512).
    assert "2,097,152 tokens per step" in text
    assert "$128.88 per node-hour x 2 nodes = $257.76/h" in text
    assert re.search(r"start-up to the first step: \d+ min: \$[\d,.]+ = control plane", text)


@pytest.mark.parametrize(("stack", "mode", "capacity"), ACCEPTED)
def test_every_capacity_mode_the_stack_accepts_has_its_rate_or_says_no_price(
    stack: str, mode: Mode, capacity: Capacity
) -> None:
    # The modes line lets a user compare the capacity modes before choosing one: every mode the
    # settings accept for this profile and GKE mode (asked of load_settings, as ACCEPTED is) is
    # named with its own figure (on Autopilot, the hardware's plus the premium: a bound).
    settings = settings_for(stack, mode, capacity)
    (line,) = [x for x in money_lines(settings, 60.0, DEFAULT_JOB) if "by capacity mode" in x]
    book = price_book(settings)
    machine = settings.profile.machine_type
    for other in [c for s, m, c in ACCEPTED if (s, m) == (stack, mode)]:
        price = book.gpu[other]
        assert price.usd == price_table.GPU_MACHINE[(machine, other)].usd
        chosen = " (this stack)" if other is capacity else ""
        shown = (
            "no price" if price.usd is None else f"{price.bound}${price.usd:,.2f} per node-hour, "
        )
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
      the stack per hour on a reservation 2 x 80 + 1.10 = $161.10, on flex-start 2 x 40 + 1.10 =
      $81.10; the committed rates the catalog lists are shown beside them
    """
    rates = {Capacity.RESERVATION: 80.0, Capacity.FLEX_START: 40.0, Capacity.SPOT: 30.0}
    settings = settings_for("a3u", Mode.STANDARD, Capacity.SPOT)
    book = book_of(settings, rates, 1.0)
    committed = Price(55.0, "per node-hour", "test", "2026-12-07", basis="1-year commitment rate")
    book = PriceBook(gpu=book.gpu, cpu=book.cpu, committed={"1-year commitment": committed})
    text = "\n".join(money_lines(settings, 45.0, DEFAULT_JOB, book))
    assert (
        "a3-ultragpu-8g: reservation $80.00 per node-hour, stack $161.10/h; flexStart $40.00 "
        "per node-hour, stack $81.10/h; spot (this stack) $30.00 per node-hour, stack $61.10/h; "
        "reservation at a 1-year commitment $55.00 per node-hour" in text
    )
    assert "$30.00 per node-hour x 2 nodes = $60.00/h" in text


def test_the_table_book_is_the_default() -> None:
    settings = settings_for("a3u", Mode.STANDARD, Capacity.SPOT)
    assert (
        price_book(settings).stack_gpu(settings)
        == price_table.GPU_MACHINE[("a3-ultragpu-8g", Capacity.SPOT)]
    )


def _view(start_s: float, end_s: float | None, now_s: float, steps: tuple = ()) -> RunView:
    return RunView(
        submission_id="a3u-1",
        dashboard="http://127.0.0.1:8265",
        status="SUCCEEDED" if end_s else "RUNNING",
        message="",
        start_time_ms=int(start_s * 1000),
        end_time_ms=None if end_s is None else int(end_s * 1000),
        phase="training",
        steps=steps,
        validation={},
        validation_points=(),
        total_steps=58 if steps else None,
        log_source="whole log",
        now_s=now_s,
    )


def test_tools_run_prices_the_run_from_the_stack_outputs() -> None:
    """Without the cluster's nodes (a plain dashboard URL), the spend is the job's running time x
    the stack's rate, said to leave out the GPU nodes' time around it: running 90 min at
    $83.08/h: 1.5 h x 83.08376 = $124.63."""
    price = RunPrice.from_outputs(
        {
            "gpuNodeHourlyUsd": 40.99433,
            "gpuNodes": 2,
            "fixedHourlyUsd": 1.0951,
            "stackHourlyUsd": 83.08376,
            "priceSource": "price table",
        }
    )
    rows = dict(cost_rows(_view(1000.0, None, 1000.0 + 5400), price, None, "a plain URL"))
    assert rows["cost"] == "$83.08/h for the stack (2 GPU nodes x $40.99; price table)"
    assert rows["spent"].startswith("$124.63 so far (from the Ray job's running time only")
    assert "the idle minutes after the run are left out; a plain URL" in rows["spent"]
    unpriced = RunPrice.from_outputs(
        {
            "gpuNodeHourlyUsd": None,
            "gpuNodes": 4,
            "stackHourlyUsd": None,
            "priceSource": "no price (Google publishes no list price for A4X)",
        }
    )
    assert cost_rows(_view(0.0, None, 60.0), unpriced) == [
        ("cost", "no price for the GPU nodes (no price (Google publishes no list price for A4X))")
    ]
    assert RunPrice.from_outputs({"jobSubmissionId": "x"}) is None  # a stack from before
    # A bound is carried as one: Autopilot's lower bound.
    lower = RunPrice.from_outputs(
        {"gpuNodeHourlyUsd": 86.76, "gpuNodes": 2, "stackHourlyUsdAtLeast": 174.46,
         "priceSource": "t"}
    )  # fmt: skip
    assert lower is not None and lower.bound == "at least " and lower.stack_hourly_usd == 174.46


def test_the_stack_outputs_carry_the_stacks_hourly_price() -> None:
    """a3u Spot at the table's rates: 2 x 40.99433 + 0.9951 + 0.10 = 83.08376 per hour."""
    settings = settings_for("a3u", Mode.STANDARD, Capacity.SPOT)
    outputs = stack_outputs(settings, price_book(settings))
    assert outputs["gpuNodeHourlyUsd"] == pytest.approx(40.99433)
    assert outputs["stackHourlyUsd"] == pytest.approx(83.08376)
    assert outputs["fixedHourlyUsd"] == pytest.approx(1.0951)
    assert RunPrice.from_outputs(outputs) is not None
    flex = settings_for("a3u", Mode.STANDARD, Capacity.FLEX_START)
    bounded = stack_outputs(flex, price_book(flex))
    assert bounded["stackHourlyUsd"] is None and bounded["stackHourlyUsdAtMost"] is not None


def test_the_whole_run_takes_verls_count_from_the_rehearsals_record() -> None:
    """verl 0.6.1 ends at the step the data gives (58 on GSM8K at batch 256) even where
    trainer.total_training_steps asks for 100; the rehearsal's record says so and the plan uses
    it instead of its own count, naming where it came from."""
    settings = settings_for("a3u", Mode.STANDARD, Capacity.RESERVATION)
    job = {**DEFAULT_JOB, "trainer.total_training_steps": "100"}
    (estimate,) = [x for x in money_lines(settings, 60.0, job) if x.strip().startswith("training:")]
    assert f"100 steps ({ESTIMATED})" in estimate
    record = {"length": {"last_step": 58, "source": "dataloader x epochs"}}
    lines = money_lines(settings, 60.0, job, record=record)
    (run,) = [x for x in lines if x.strip().startswith("training:")]
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


def test_the_program_refuses_a_plan_above_the_cap_before_anything_is_created() -> None:
    """The real program under the offline engine (a preview's path): __main__.py checks the cap
    right after pricing, before any resource is registered."""
    with pytest.raises(SettingsError, match=r"maxHourlyUsd = 100: this plan costs \$174\.61/h"):
        plan("a3u", "standard", **{"verl-gke__maxHourlyUsd": "100"})
