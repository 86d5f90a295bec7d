"""verl-gke:maxHourlyUsd: a cap on the whole stack's $/h while it trains (SkyPilot and dstack
offer such a price cap). A plan whose priced $/h is above it is refused before anything is
created, with the setting, the value and fixes that are themselves accepted; a plan whose GPU
nodes have no price cannot be checked against a cap and is refused too, naming the setting
that gives them one.
"""

from __future__ import annotations

import math

from config.profiles import Capacity
from config.settings import SettingsError, StackSettings, config_key
from pricing.billing import OWN_RATE_KEY, PriceBook, hourly, usd

KEY = "verl-gke:maxHourlyUsd"


def cap_problem(settings: StackSettings, book: PriceBook) -> str | None:
    """Why the plan breaks the cap (one message with its fixes), or None."""
    cap = settings.max_hourly_usd
    if cap is None:
        return None
    total = hourly(settings, book)
    stack = settings.stack
    if total.missing:
        return (
            f"{KEY} = {cap:g}: the plan's $/h cannot be checked against it, "
            f"{', '.join(total.missing)} have no price. Fix: pulumi config set {OWN_RATE_KEY} "
            f"<your USD per node-hour> -s {stack}, or pulumi config rm {KEY} -s {stack}"
        )
    if total.usd <= cap:
        return None
    fixes = [f"pulumi config set {KEY} {math.ceil(total.usd)} -s {stack} (this plan's rate)"]
    for capacity, price in book.gpu.items():
        if capacity is settings.capacity or price.usd is None:
            continue
        other = hourly(settings, book, capacity)
        if other.usd <= cap and not other.missing and capacity is not Capacity.RESERVATION:
            # Spot and flex-start take no reservation (config/settings.py refuses the pair).
            unset = (
                f"pulumi config rm {config_key('reservation')} -s {stack} and "
                if settings.reservation
                else ""
            )
            fixes.append(
                f"{unset}pulumi config set {config_key('capacity')} {capacity.value} -s {stack} "
                f"({other.text()})"
            )
    return (
        f"{KEY} = {cap:g}: this plan costs {total.bound}{usd(total.usd)}/h while it trains "
        f"({settings.gpu_nodes} x {settings.profile.machine_type} {settings.capacity.value}, "
        f"the control plane and the CPU side), above the cap. Fix: " + "; or ".join(fixes)
    )


def check_cap(settings: StackSettings, book: PriceBook) -> None:
    """Raise SettingsError when the plan breaks verl-gke:maxHourlyUsd."""
    problem = cap_problem(settings, book)
    if problem is not None:
        raise SettingsError(f"stack {settings.stack!r}: {problem}")
