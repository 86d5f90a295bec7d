"""One detector for secrets in values that must not carry one (a Ray job's entrypoint and runtime
env, the GRPO job settings that end up there, what the offline plan prints and writes).

Pure and dependency-free (it sits beside the provider, which the Pulumi dynamic-provider host
loads): the job provider (jobs/ray_job.py), the job preflight (training/assembly.py) and the plan
(tools/plan.py) all import it, so a token the preflight lets through is one the provider would let
through too, and the other way round.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

# A Hugging Face user access token: `hf_` and 30+ letters/digits (34 in today's tokens).
HF_TOKEN = re.compile(r"hf_[A-Za-z0-9]{30,}")
# Key names that hold a secret: *TOKEN* (but not TOKENIZERS_PARALLELISM or *_TOKENS counts),
# *SECRET*, *PASSWORD*, *API_KEY, *ACCESS_KEY. Keys ending in _PATH/_FILE only point at one.
SECRET_KEY = re.compile(r"TOKEN(?!IZER|S)|SECRET|PASSW(OR)?D|API_KEY$|ACCESS_KEY$")
_SECRET_POINTER = re.compile(r"_(PATH|FILE|DIR)$")
# Shorter known secrets are not searched for inside other text: they would match by accident.
MIN_KNOWN_SECRET_CHARS = 8


@dataclass(frozen=True)
class SecretFinding:
    """Where a secret was seen: `path` names the key; `by_name` says the key's name marks it as
    a secret (e.g. env var HF_TOKEN), otherwise the value itself looks like one."""

    path: str
    by_name: bool


def secret_key_name(key: str) -> bool:
    upper = key.upper()
    return bool(SECRET_KEY.search(upper)) and not _SECRET_POINTER.search(upper)


def find_secrets(
    path: str, value: Any, known: Collection[str] = (), *, check_names: bool = True
) -> list[SecretFinding]:
    """Every place in `value` (walked recursively) that carries a secret: a key named like one
    (check_names), a Hugging Face token, or one of the `known` secret values (the stack's own)."""
    found: list[SecretFinding] = []
    if isinstance(value, Mapping):
        for key, item in value.items():
            if check_names and secret_key_name(str(key)):
                found.append(SecretFinding(f"{path}.{key}", by_name=True))
            else:
                found.extend(find_secrets(f"{path}.{key}", item, known, check_names=check_names))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found.extend(find_secrets(f"{path}[{index}]", item, known, check_names=check_names))
    elif isinstance(value, str) and (
        HF_TOKEN.search(value) or any(s in value for s in _searchable(known))
    ):
        found.append(SecretFinding(path, by_name=False))
    return found


def _searchable(known: Collection[str]) -> list[str]:
    return [s for s in known if len(s) >= MIN_KNOWN_SECRET_CHARS]


def redact(text: str, known: Mapping[str, str] | None = None) -> str:
    """`text` with every Hugging Face token replaced by `hf_***` and every `known` secret value
    by its marker (value -> marker, e.g. `<redacted: verl-gke:hfToken>`)."""
    for secret, marker in sorted((known or {}).items(), key=lambda kv: -len(kv[0])):
        if len(secret) >= MIN_KNOWN_SECRET_CHARS or text == secret:
            text = text.replace(secret, marker)
    return HF_TOKEN.sub("hf_***", text)
