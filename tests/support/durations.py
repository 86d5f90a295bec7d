"""Pulumi custom-timeout strings ("90m", "2h", "1h30m": Go duration syntax) as minutes."""

from __future__ import annotations

import re

_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(h|m|s)")
_UNIT_MINUTES = {"h": 60.0, "m": 1.0, "s": 1 / 60}


def minutes(duration: str) -> float:
    parts = _PART.findall(duration)
    if not parts or "".join(n + u for n, u in parts) != duration:
        raise ValueError(f"not a duration: {duration!r}")
    return sum(float(number) * _UNIT_MINUTES[unit] for number, unit in parts)
