"""Cost in money before anything is created: the price table's provenance, the
plan's $/h on every stack, mode and capacity the settings accept, the arithmetic against a hand
derivation, and the billing-while-waiting claim against the capacity plan's own fact."""

from __future__ import annotations

import re
from datetime import date

import pytest
from planning.price_table import Price

from config.capacity import capacity_plan
from config.profiles import PROFILES, Capacity, Mode
from config.settings import SettingsError, StackSettings, load_settings
from planning import cost_facts, price_table
from planning.cost_facts import checkpoints_kept, money_lines, wait_line, what_you_pay_for
from tests.program import REAL, plan

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


def test_every_price_has_a_date_and_a_google_source_page() -> None:
    for name, price in price_table.every_price().items():
        assert date.fromisoformat(price.read_on) <= date.today(), name
        assert re.fullmatch(r"https://cloud\.google\.com/[a-z0-9/-]+", price.source), name
        assert price.unit and price.region in (price_table.REGION, "global"), name
        assert price.usd is None or price.usd > 0, name


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
    priced = re.search(rf"\$[\d.,]+ per node-hour x {settings.gpu_nodes} nodes = \$[\d.,]+/h", gpu)
    missing = re.search(r"price not in table \(see https://cloud\.google\.com/\S+\)", gpu)
    assert priced or missing, gpu
    (plane,) = [x for x in lines if "control plane ($/h):" in x]
    assert "$0.10 per cluster-hour" in plane
    (cpu,) = [x for x in lines if x.startswith("  CPU:")]
    if mode is Mode.STANDARD:
        assert settings.cpu_machine_type in cpu and f"x {settings.cpu_nodes} nodes" in cpu
    else:
        assert "bills the CPU pods' resource requests" in cpu
    reserved = "billed from its own start to its end, whether VMs use it or not" in gpu
    assert reserved == (capacity is Capacity.RESERVATION)
    assert any("prices vary by region" in x for x in lines)


def test_the_arithmetic_for_a3u_standard_spot(monkeypatch: pytest.MonkeyPatch) -> None:
    """Test prices, not real ones: GPU node $50/h, CPU node $1/h; the control plane's $0.10/h is
    the table's. a3u Standard defaults to 2 GPU nodes and 1 CPU node:
      per hour  = 2 x 50 + 1 x 1 + 0.10 = $101.10
      90 min    = 1.5 x 101.10 = $151.65
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
    monkeypatch.setattr(cost_facts, "gpu_machine_price", lambda *_: _test_price(50.0))
    monkeypatch.setattr(cost_facts, "cpu_machine_price", lambda *_: _test_price(1.0))
    settings = settings_for("a3u", Mode.STANDARD, Capacity.SPOT)
    assert (settings.gpu_nodes, settings.cpu_nodes) == (2, 1)
    text = "\n".join(money_lines(settings, 90.0, DEFAULT_JOB))
    assert "$50.00 per node-hour x 2 nodes = $100.00/h" in text
    assert "90 min x $101.10/h = $151.65" in text
    assert "~366 GiB each" in text and "32.8B parameters" in text
    assert "58 steps" in text and ": 6, all kept" in text
    assert "$7.32 per checkpoint-month, $43.94 per month for the 6 kept" in text


def _test_price(usd: float) -> Price:
    return Price(usd, "per node-hour", price_table.VM_PRICING, "2026-12-01")


def test_without_a_price_the_first_step_cost_is_a_lower_bound_naming_what_is_missing() -> None:
    settings = settings_for("a4", Mode.STANDARD, Capacity.FLEX_START)
    text = "\n".join(money_lines(settings, 60.0, DEFAULT_JOB))
    # 60 min x the control plane's $0.10/h; the GPU and CPU nodes have no price in the table.
    assert (
        "at least $0.10 (60 min x $0.10/h priced); 2 GPU nodes, 1 CPU nodes: price not in table"
        in text
    )


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


@pytest.mark.parametrize(("stack", "mode", "capacity"), ACCEPTED)
def test_every_capacity_mode_the_stack_accepts_has_its_rate_or_says_not_in_table(
    stack: str, mode: Mode, capacity: Capacity
) -> None:
    # The modes line lets a user compare the capacity modes before choosing one: every mode the
    # settings accept for this profile and GKE mode (asked of load_settings, as ACCEPTED is) is
    # named with its own table entry, whose page is the one the table records for that mode.
    settings = settings_for(stack, mode, capacity)
    (line,) = [x for x in money_lines(settings, 60.0, DEFAULT_JOB) if "by capacity mode" in x]
    machine = settings.profile.machine_type
    for other in [c for s, m, c in ACCEPTED if (s, m) == (stack, mode)]:
        price = price_table.GPU_MACHINE[(machine, other)]
        chosen = " (this stack)" if other is capacity else ""
        shown = (
            f"price not in table (see {price.source})"
            if price.usd is None
            else f"${price.usd:,.2f} per node-hour"
        )
        assert f"{other.value}{chosen} {shown}" in line, line
    assert line.count("(this stack)") == 1


def test_the_table_holds_every_machine_and_capacity_the_stacks_accept() -> None:
    # No stack falls back to the generic "see the GPU pricing page" entry: each accepted
    # machine x capacity has its own row with a source page and a read date.
    for stack, _mode, capacity in ACCEPTED:
        machine = PROFILES[stack].machine_type
        assert (machine, capacity) in price_table.GPU_MACHINE, (machine, capacity)
    for machine in {settings_for(*combo).cpu_machine_type for combo in ACCEPTED}:
        assert machine in price_table.CPU_MACHINE, machine


def test_the_modes_line_carries_the_tables_rates(monkeypatch: pytest.MonkeyPatch) -> None:
    """Test prices, not real ones: reservation $80, flexStart $40, Spot $30 per a3-ultragpu-8g
    node-hour. a3u Standard on Spot with 2 GPU nodes and 1 CPU node at $1:
      GPU       = 2 x 30 = $60.00/h
      per hour  = 60 + 1 + 0.10 (control plane) = $61.10
      45 min    = 0.75 x 61.10 = $45.825, shown as $45.83
    """
    rates = {Capacity.RESERVATION: 80.0, Capacity.FLEX_START: 40.0, Capacity.SPOT: 30.0}
    monkeypatch.setattr(
        cost_facts, "gpu_machine_price", lambda _machine, capacity: _test_price(rates[capacity])
    )
    monkeypatch.setattr(cost_facts, "cpu_machine_price", lambda *_: _test_price(1.0))
    settings = settings_for("a3u", Mode.STANDARD, Capacity.SPOT)
    text = "\n".join(money_lines(settings, 45.0, DEFAULT_JOB))
    assert (
        "a3-ultragpu-8g: reservation $80.00 per node-hour; flexStart $40.00 per node-hour; "
        "spot (this stack) $30.00 per node-hour" in text
    )
    assert "$30.00 per node-hour x 2 nodes = $60.00/h" in text
    assert "45 min x $61.10/h = $45.83; plus the nodes billed while the rest are awaited" in text
