"""What the offline plan prints or writes never holds a secret: every secret value is replaced by
a marker naming where it came from (`<redacted: verl-gke:hfToken>`).

Secret values are the config values of secret settings (hfToken, wandbApiKey: by the settings
model, whether or not they were given with --secret) and every value the program marked secret
(a Kubernetes Secret's data/stringData, secret env values), read off the recorded resources.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from config.settings import SECRET_FIELDS, config_key
from jobs.secret_scan import redact
from planning.offline_engine import PlanResult

SECRET_CONFIG_KEYS = frozenset(config_key(name) for name in SECRET_FIELDS)


def marker(where: str) -> str:
    return f"<redacted: {where}>"


def secret_markers(config: Mapping[str, str], result: PlanResult | None = None) -> dict[str, str]:
    """Secret value -> the marker that replaces it."""
    markers: dict[str, str] = {}
    for resource in result.resources if result else ():
        for key in resource.secret_inputs:
            for text in _strings(resource.inputs.get(key)):
                markers.setdefault(text, marker(f"{resource.name}.{key}"))
    # Config keys last: they name the setting, which says more than the resource does.
    for key in SECRET_CONFIG_KEYS:
        if config.get(key):
            markers[config[key]] = marker(key)
    return markers


def redacted(value: Any, markers: Mapping[str, str]) -> Any:
    """`value` (a manifest, a line) with every secret replaced by its marker."""
    if isinstance(value, str):
        return redact(value, markers)
    if isinstance(value, Mapping):
        return {key: redacted(item, markers) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [redacted(item, markers) for item in value]
    return value


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, Mapping):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list | tuple):
        return [s for item in value for s in _strings(item)]
    return []
