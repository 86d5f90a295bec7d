"""`verl-gke:job.extraOverrides` checked against verl's own config for the stack's verl ref,
before anything is created: what `main_ppo` would refuse at job start, after the GPU nodes and
the model load have been paid for.

The key paths come from training/verl_keys/<ref>.txt, written by maintenance/verl_config_keys.py
from verl's own composed `ppo_trainer` config at that ref; tests/test_verl_config_compose.py
regenerates the release files in that release's virtualenv, and runs cases refused here through
verl's own compose and `validate_config`.

Hydra's override rules (hydra-core 1.3, the version verl pins; verl composes its config in
struct mode, so no key may be added silently):
- `key=value` sets a key that exists; Hydra refuses a key the config lacks.
- `+key=value` adds a key the config lacks; Hydra refuses one that exists ("Could not append").
- `++key=value` sets the key whether or not it exists.
An added key must also survive verl: a section with `_target_` becomes a dataclass
(omega_conf_to_dataclass, verl/utils/config.py), which refuses a field it does not declare.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path

from training.grpo_spec import CONFIG_KEY, GrpoSpec, hydra_overrides, modelled_keys, setting_of

KEYS_DIR = Path(__file__).resolve().parent / "verl_keys"
# A verl ref -> its key file: a release's from the release's wheel; ddbcdb7 (the A4X ref, a commit
# on verl's main between v0.8.0 and v0.9.0, not on PyPI) from the commit's own config folder.
KEY_FILE_FOR_REF: Mapping[str, str] = {"v0.6.1": "0.6.1", "ddbcdb7": "ddbcdb7"}
_EXTRA = f"{CONFIG_KEY}.extraOverrides"
_OVERRIDE = re.compile(r"(?P<plus>\+{0,2})(?P<key>[^=+][^=]*)=(?P<value>.*)")

# Pairs verl refuses together (a deprecated global micro-batch and its per-GPU successor), the
# key that switches the check off when true, and the key that must be true for verl to check the
# pair at all (None: always checked). Same code at v0.6.1, v0.9.0 and ddbcdb7; a pair whose keys
# a ref lacks is refused as unknown keys instead.
EXCLUSIVE_PAIRS: tuple[tuple[str, str, str, str | None], ...] = (
    # FSDPActorConfig.__post_init__ (verl/workers/config/actor.py), run by validate_config.
    (
        "actor_rollout_ref.actor.ppo_micro_batch_size",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
        "actor_rollout_ref.actor.use_dynamic_bsz",
        None,
    ),
    # validate_config's check_mutually_exclusive (verl/utils/config.py); the ref pair is checked
    # when a reference policy is used, which GRPO with KL always does (the preflight asks for it).
    (
        "actor_rollout_ref.rollout.log_prob_micro_batch_size",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
        "actor_rollout_ref.actor.use_dynamic_bsz",
        None,
    ),
    (
        "actor_rollout_ref.ref.log_prob_micro_batch_size",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
        "actor_rollout_ref.actor.use_dynamic_bsz",
        None,
    ),
    # CriticConfig.__post_init__ (verl/workers/config/critic.py), when validate_config builds
    # the critic: need_critic (verl/trainer/ppo/utils.py) is critic.enable when it is set.
    (
        "critic.ppo_micro_batch_size",
        "critic.ppo_micro_batch_size_per_gpu",
        "critic.use_dynamic_bsz",
        "critic.enable",
    ),
    # validate_config's check_mutually_exclusive, when reward_model.enable (v0.6.1).
    (
        "reward_model.micro_batch_size",
        "reward_model.micro_batch_size_per_gpu",
        "reward_model.use_dynamic_bsz",
        "reward_model.enable",
    ),
)


@cache
def config_keys(release: str) -> Mapping[str, str]:
    """Key path -> kind (dict, dataclass, value) of verl `release`'s composed config."""
    lines = (KEYS_DIR / f"{release}.txt").read_text().splitlines()
    rows = (line.split(" ") for line in lines if line and not line.startswith("#"))
    return {path: kind for path, kind in rows}


def extra_override_problems(spec: GrpoSpec, verl_ref: str) -> list[str]:
    """Every extraOverrides item verl `verl_ref` would refuse at job start, with a fix. Refs with
    no key file (a verlRef set by hand) are not checked."""
    release = KEY_FILE_FOR_REF.get(verl_ref)
    if release is None or not spec.extra_overrides:
        return []
    keys = config_keys(release)
    problems = []
    for index, override in enumerate(spec.extra_overrides):
        match = _OVERRIDE.fullmatch(override)
        if match is None:  # GrpoSpec refuses it already
            continue
        if match["key"].startswith("hydra."):
            continue  # Hydra's own settings (hydra.run.dir, ...), not verl's config
        where = f"{_EXTRA}[{index}] = {override!r}"
        why = _key_problem(match["plus"], match["key"], match["value"], keys, release)
        if why:
            problems.append(f"{where}: {why}")
    return problems + _exclusive_pair_problems(spec, release)


def _key_problem(
    plus: str, key: str, value: str, keys: Mapping[str, str], release: str
) -> str | None:
    if key in keys:
        if plus == "+":
            return (
                f"{key} is already in verl {release}'s config, and Hydra refuses to add ('+') a "
                f"key that exists. Fix: '{key}={value}'"
            )
        return None
    if not plus:
        return (
            f"verl {release}'s config has no key {key}, and Hydra refuses to set a key the "
            f"config lacks. Fix: {_closest(key, value, keys)}"
        )
    parent = _nearest_existing(key, keys)
    kind = keys.get(parent, "dict")  # "" is the root: a plain mapping
    if kind == "dict":
        return None
    if kind == "value":
        return (
            f"{key} would be added under {parent}, which holds a value, not a group of keys: "
            f"Hydra would replace the value with a group, which verl then reads as a value. "
            f"Fix: remove it ({parent} itself is set as '{parent}=<value>')"
        )
    return (
        f"{key} would be added under {parent}, a section verl turns into a dataclass (it has "
        f"_target_), which refuses a field it does not declare. Fix: {_closest(key, value, keys)}"
    )


def _nearest_existing(key: str, keys: Mapping[str, str]) -> str:
    parts = key.split(".")
    for end in range(len(parts) - 1, 0, -1):
        if ".".join(parts[:end]) in keys:
            return ".".join(parts[:end])
    return ""


def _closest(key: str, value: str, keys: Mapping[str, str]) -> str:
    """A fix that is itself accepted: the nearest existing key, through its verl-gke:job setting
    when the program sets it; otherwise removing the item."""
    close = difflib.get_close_matches(key, list(keys), n=1, cutoff=0.8)
    if not close:
        return f"remove it (no key of verl's config is close to {key})"
    owner = modelled_keys().get(close[0])
    if owner is not None:
        return f"did you mean {close[0]}? It is set by {setting_of(owner)}: set that instead"
    return f"did you mean {close[0]}? Use '{close[0]}={value}'"


def _exclusive_pair_problems(spec: GrpoSpec, release: str) -> list[str]:
    # The job's final values: the program's overrides, then extraOverrides (Hydra: last wins),
    # each with its extraOverrides index (None: the program's).
    given: dict[str, tuple[int | None, str, str]] = {}
    program = hydra_overrides(spec)[: len(hydra_overrides(spec)) - len(spec.extra_overrides)]
    numbered = [(None, o) for o in program] + list(enumerate(spec.extra_overrides))
    for index, override in numbered:
        match = _OVERRIDE.fullmatch(override)
        if match is not None:
            given[match["key"]] = (index, match["value"].strip(), override)
    problems = []
    for deprecated, per_gpu, off_switch, on_switch in EXCLUSIVE_PAIRS:
        if _is_true(given.get(off_switch, (None, "", ""))[1]):
            continue
        if on_switch is not None and not _is_true(given.get(on_switch, (None, "", ""))[1]):
            continue
        (index, value, override), other = (
            given.get(deprecated, (None, "null", "")),
            given.get(per_gpu),
        )
        if _is_null(value) or other is None or _is_null(other[1]):
            continue
        owner = modelled_keys().get(per_gpu)
        setter = setting_of(owner) if owner else f"{per_gpu}={other[1]}"
        problems.append(
            f"{_EXTRA}[{index}] = {override!r}: verl {release} refuses a job that sets "
            f"both {deprecated} (deprecated) and {per_gpu} ({other[1]}). Fix: remove it; the "
            f"micro-batch is set per GPU by {setter}"
        )
    return problems


def _is_null(value: str) -> bool:
    return value.lower() == "null"


def _is_true(value: str) -> bool:
    return value.lower() == "true"
