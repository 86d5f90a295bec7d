"""Typed stack settings, read from Pulumi config and validated before any resource exists.

Every message names the config key, the value it had and the command that fixes it, because the
reader is about to pay for GPUs by the hour and should not have to read this file to fix a typo.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi.runtime import config as runtime_config
from pydantic import (
    SecretStr,
    ValidationError,
    ValidationInfo,
    model_validator,
)

from config import (
    declared_defaults,
    input_rules,
    known_values,
)
from config import job_wait as job_wait_setting
from config.profiles import (
    Capacity,
)
from config.stack_rules import problems as stack_problems
from config.stack_values import (
    GCP_KEYS,
    NAMESPACE,
    StackValues,
    config_key,
)

# Keys whose committed value in Pulumi.<stack>.yaml is a placeholder the user must replace.
PLACEHOLDER_RE = re.compile(r"^<.+>$")

# Settings whose value is never shown in a message.
SECRET_FIELDS = frozenset({"hf_token", "wandb_api_key"})

# Set by the offline plan (planning/offline_engine.py): placeholders are planned with example
# values.
OFFLINE_PLAN_ENV = "VERL_GKE_OFFLINE_PLAN"


class SettingsError(pulumi.RunError, ValueError):
    """Bad stack configuration; the message lists every problem and its fix.

    A RunError, so `pulumi up` prints the message alone, without a Python traceback.
    """


def is_placeholder(value: object) -> bool:
    return isinstance(value, str) and bool(PLACEHOLDER_RE.match(value))


class StackSettings(StackValues):
    """Everything a stack is built from, checked by the stack's rules (config/stack_rules.py)
    before any resource exists. Field aliases are the `verl-gke:` config keys."""

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> StackSettings:
        accept = (info.context or {}).get(ACCEPT_GPU_NODES)
        problems = [p for p in stack_problems(self, accept) if p]
        if problems:
            raise ValueError("\n".join(problems))
        return self


def report(
    stack: str, what: str, found: tuple[list[str], list[str]], warn: Callable[[str], None]
) -> None:
    """A remote check's (problems, notes) before any resource exists: each note goes to `warn`,
    the problems are raised as one SettingsError that says `what` refused them."""
    problems, notes = found
    for note in notes:
        warn(note)
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise SettingsError(f"stack {stack!r}: {what}, nothing was created:\n{lines}")


# Validation context key: a callable (gpu_nodes -> bool) that says whether the whole stack,
# the GRPO job included, accepts that node count (load_settings builds it from `job_check`).
ACCEPT_GPU_NODES = "accept_gpu_nodes"


# --- reading Pulumi config -------------------------------------------------------------------


@dataclass(frozen=True)
class LoadedSettings:
    settings: StackSettings
    # Placeholders replaced by example values (offline plan only), for the plan to print.
    notices: tuple[str, ...]


# Example values the offline plan uses where the committed stack file still has a placeholder.
_OFFLINE_EXAMPLES = {
    "gcp:project": lambda cfg: "example-project",
    # A zone given as the region (refused by stack_rules._check_region) is the zone meant.
    f"{NAMESPACE}:zone": lambda cfg: _example_zone(cfg.get("gcp:region", "us-central1")),
    f"{NAMESPACE}:reservation": lambda cfg: "example-reservation",
    f"{NAMESPACE}:hfToken": lambda cfg: "hf_offline_plan_placeholder",
    f"{NAMESPACE}:wandbApiKey": lambda cfg: "offline-plan-wandb-key",
}


def _example_zone(region: str) -> str:
    return region if known_values.is_zone(region) else f"{region}-b"


# What the offline plan reads for a value the stack file holds encrypted (`secure: v1:...`, written
# by `pulumi config set --secret`; planning/offline_engine.py): only the Pulumi engine can decrypt
# it, with the stack's secrets provider. The value is set, so it is planned with a stand-in.
ENCRYPTED_VALUE = "[encrypted in the stack file]"
OFFLINE_SECRET_STAND_IN = "offline-plan-secret"


def _plan_encrypted_values(values: dict[str, str], notices: list[str], where: str) -> None:
    """Every encrypted value (hfToken, wandbApiKey, any key set with --secret) counts as set; the
    plan uses a stand-in that passes the key's checks and says so."""
    for key in sorted(k for k, v in values.items() if v == ENCRYPTED_VALUE):
        example = _OFFLINE_EXAMPLES.get(key)
        values[key] = example(values) if example else OFFLINE_SECRET_STAND_IN
        notices.append(
            f"{key} is encrypted in {where} (set with --secret): the offline plan cannot decrypt "
            f"it and plans with a stand-in; pulumi up uses the real value"
        )


def _drop_unused_reservation_placeholder(values: dict[str, str], notices: list[str]) -> None:
    """The committed stack files carry a reservation placeholder; a stack that asks for capacity
    outside a reservation (verl-gke:capacity flexStart, spot) has no use for it."""
    key = f"{NAMESPACE}:reservation"
    capacity = values.get(f"{NAMESPACE}:capacity")
    if capacity in (None, "", Capacity.RESERVATION.value) or not is_placeholder(values.get(key)):
        return
    notices.append(
        f"{key} is still the placeholder {values.pop(key)!r}; ignored, since "
        f"{NAMESPACE}:capacity = {capacity!r} uses no reservation"
    )


def valid_keys() -> list[str]:
    """Every `verl-gke:` key a user may set."""
    return sorted(
        f"{NAMESPACE}:{field.alias}"
        for name, field in StackSettings.model_fields.items()
        if name not in {"stack", *GCP_KEYS} and field.alias
    )


def object_keys() -> list[str]:
    """The `verl-gke:` keys whose value is an object, the only ones `--path KEY.FIELD` can set:
    Pulumi refuses an object for a key Pulumi.yaml declares a string, integer or boolean ("must
    be of type 'string'": pulumi/pulumi pkg/workspace/config.go validateStackConfigValue)."""
    return sorted(
        f"{NAMESPACE}:{field.alias}"
        for name, field in StackSettings.model_fields.items()
        if name not in {"stack", *GCP_KEYS}
        and field.alias
        and declared_defaults.holds_object(field)
    )


# Rules from layers config may not import, handed in by the composition root: `job_check` raises
# ValueError when the GRPO job cannot run on the settings (training/assembly.training_job), and
# `redact(text, known)` hides every secret-looking value in an error (jobs/secret_scan.redact).
JobCheck = Callable[[StackSettings], object]
Redact = Callable[[str, Mapping[str, str]], str]


def load_settings(
    stack: str,
    config: Mapping[str, str],
    *,
    offline: bool,
    stack_file: str | None = None,
    job_check: JobCheck | None = None,
    redact: Redact | None = None,
    secret_keys: Collection[str] = (),
) -> LoadedSettings:
    """Validate raw Pulumi config (`{"namespace:key": value}`) into StackSettings.

    offline=True (the offline plan) plans placeholders and a missing hfToken with example values
    and reports them as notices; a real deployment rejects them.
    """
    try:
        return _load_settings(stack, config, offline, stack_file, job_check)
    except SettingsError as error:
        if redact is None:
            raise
        known = {
            str(value): f"<redacted: {key}>"
            for key, value in config.items()
            if (_SECRET_KEY_NAME.search(key) or key in secret_keys) and value
        }
        raise SettingsError(redact(str(error), known)) from None


def _load_settings(
    stack: str,
    config: Mapping[str, str],
    offline: bool,
    stack_file: str | None,
    job_check: JobCheck | None,
) -> LoadedSettings:
    where = stack_file or f"Pulumi.{stack}.yaml"
    problems = _unknown_keys(config, stack)
    values = declared_defaults.without_unset(config, NAMESPACE, StackSettings)
    notices: list[str] = []
    _plan_encrypted_values(values, notices, where)
    _drop_unused_reservation_placeholder(values, notices)
    problems += _placeholder_values(values, offline, stack, where, notices)
    for key in GCP_KEYS.values():
        if values.get(key) in (None, ""):
            problems.append(f"{key} is not set. Fix: pulumi config set {key} VALUE -s {stack}")
    if problems:
        raise SettingsError(_format(stack, problems))

    raw: dict[str, Any] = {"stack": stack, "profile": stack}
    for field_name, key in GCP_KEYS.items():
        raw[field_name] = values[key]
    prefix = f"{NAMESPACE}:"
    for key, value in values.items():
        if key.startswith(prefix):
            raw[key[len(prefix) :]] = value
    try:
        settings = StackSettings.model_validate(
            raw, context={ACCEPT_GPU_NODES: _gpu_nodes_acceptor(raw, job_check)}
        )
    except ValidationError as error:
        raise SettingsError(_format(stack, _describe(error, raw, job_check))) from None
    notices.extend(_image_notices(settings))
    notices.extend(_table_notices(settings))
    notices.extend(n for n in [reservation_owner_notice(settings)] if n)
    notices.extend(job_wait_setting.legacy_notices(raw.get("jobWait"), stack))
    return LoadedSettings(settings, tuple(notices))


def _placeholder_values(
    values: dict[str, Any], offline: bool, stack: str, where: str, notices: list[str]
) -> list[str]:
    """Offline, a placeholder or a missing token is replaced by an example (said in `notices`);
    in `pulumi up` each is a problem with its fix."""
    problems: list[str] = []
    for key, example in _OFFLINE_EXAMPLES.items():
        value = values.get(key)
        missing_token = key.endswith(":hfToken") and value in (None, "")
        if not (is_placeholder(value) or missing_token):
            continue
        if offline:
            values[key] = example(values)
            state = "not set" if missing_token else f"still the placeholder {value!r}"
            if _SECRET_KEY_NAME.search(key):
                notices.append(
                    f"{key} is {state}; planning with a placeholder token. `pulumi up` needs "
                    f"the real one: pulumi config set --secret {key} -s {stack}"
                )
            else:
                notices.append(f"{key} is {state}; planning with {values[key]!r}")
        elif missing_token:
            problems.append(
                f"{key} is not set: the data-prep Job downloads the model with it. Fix: "
                f"pulumi config set --secret {key} hf_... -s {stack}"
            )
        else:
            # A secret kept inside the template's brackets is still a secret: never echo it.
            shown = "<secret>" if _SECRET_KEY_NAME.search(key) else repr(value)
            flag = "--secret " if _SECRET_KEY_NAME.search(key) else ""
            problems.append(
                f"{key} = {shown} is still the placeholder from {where}. Fix: "
                f"pulumi config set {flag}{key} YOUR_VALUE -s {stack} (or edit {where})"
            )
    return problems


def _gpu_nodes_acceptor(raw: dict[str, Any], job_check: JobCheck | None) -> Callable[[int], bool]:
    def accept(nodes: int) -> bool:
        try:
            settings = StackSettings.model_validate({**raw, "gpuNodes": nodes})
            if job_check is not None:
                job_check(settings)
        except (ValidationError, ValueError):
            return False
        return True

    return accept


def reservation_owner(settings: StackSettings) -> str | None:
    """The project that owns verl-gke:reservation when it is another project's
    (`projects/P/reservations/NAME`); None for one of the stack's own project."""
    match = re.match(r"projects/([^/]+)/reservations/([^/]+)", settings.reservation or "")
    return match[1] if match and match[1] != settings.project else None


def reservation_owner_notice(settings: StackSettings) -> str | None:
    # Compute Engine "Shared reservations": a project consumes another project's reservation only
    # when the owner shares it with that project (shareSettings: shareType SPECIFIC_PROJECTS and
    # the consumer in projectMap); GKE then fails to create nodes from an unshared one.
    owner = reservation_owner(settings)
    if owner is None:
        return None
    name = (settings.reservation or "").split("/")[3]
    return (
        f"{config_key('reservation')} = {settings.reservation!r} belongs to project {owner!r}: "
        f"the GPU nodes can use it only if {owner} shares it with {settings.project} (a shared "
        f"reservation). Check: gcloud compute reservations describe {name} --project={owner} "
        f"--zone={settings.zone} --format='yaml(shareSettings)' lists {settings.project} under "
        f"projectMap"
    )


def _table_notices(settings: StackSettings) -> list[str]:
    """Values the program's tables do not list but that may exist (a region or zone missing
    from the public table, a chart released after the table was read): warned, not refused."""
    found = [
        known_values.location_notice(settings.region, settings.zone),
        known_values.chart_version_notice(
            config_key("kuberay_chart_version"),
            settings.kuberay_chart_version,
            known_values.KUBERAY_CHART_VERSIONS,
        ),
        known_values.chart_version_notice(
            config_key("dra_driver_chart_version"),
            settings.dra_driver_chart_version,
            known_values.DRA_DRIVER_CHART_VERSIONS,
        ),
    ]
    return [notice for notice in found if notice]


def _image_notices(settings: StackSettings) -> list[str]:
    """An x86-only image on arm64 nodes fails only once the GPU nodes pull it ("exec format
    error"). arm64 builds say so in their tag, so flag an arm64 stack's image whose tag does not."""
    if settings.profile.arch != "arm64":
        return []
    tag = settings.verl_image.rsplit("/", 1)[-1]
    if "arm64" in tag or "aarch64" in tag:
        return []
    return [
        f"{config_key('verl_image')} = {settings.verl_image!r}: {settings.profile.name} nodes "
        f"are arm64 and the tag names neither arm64 nor aarch64; make sure the image is built "
        f"for arm64 (the default is {settings.profile.verl_image})"
    ]


def _unknown_keys(config: Mapping[str, str], stack: str) -> list[str]:
    known = valid_keys()
    problems = []
    for key in sorted(config):
        if input_rules.near_miss_namespace(key, NAMESPACE):
            # Pulumi hands such a key to the program, which would silently ignore it.
            meant = f"{NAMESPACE}:{key.split(':', 1)[1]}"
            secret = bool(_SECRET_KEY_NAME.search(key))
            value = "VALUE" if secret or " " in str(config[key]) else str(config[key])
            problems.append(
                f"{key}: the namespace {key.split(':', 1)[0]!r} is not {NAMESPACE!r}, so this "
                f"setting would be ignored. Fix: pulumi config rm {key} -s {stack}, then "
                f"pulumi config set {'--secret ' if secret else ''}{meant} {value} -s {stack} "
                f"(or rename the key in the stack file)"
            )
            continue
        if not key.startswith(f"{NAMESPACE}:") or key in known:
            continue
        flat = input_rules.flat_object_key(key, str(config[key]), stack, object_keys())
        if flat:
            problems.append(flat)
            continue
        value = str(config[key]) if " " not in str(config[key]) else None
        hint = input_rules.unknown_key_hint(key, stack, known, value)
        problems.append(f"{key} is not a setting of this program: {hint}")
    return problems


def _describe(error: ValidationError, raw: dict[str, Any], job_check: JobCheck | None) -> list[str]:
    problems = []
    for item in error.errors():
        if not item["loc"]:
            # Cross-field rules already phrase key, value and fix.
            problems.extend(str(item["ctx"]["error"]).split("\n"))
            continue
        field_alias = str(item["loc"][0])
        name = next(
            (n for n, f in StackSettings.model_fields.items() if f.alias == field_alias),
            field_alias,
        )
        key = config_key(name)
        if item["type"] == "missing":
            problems.append(f"{key} is required. Fix: pulumi config set {key} VALUE")
            continue
        shown = "<secret>" if name in SECRET_FIELDS else repr(item["input"])
        message = str(item["msg"]).removeprefix("Value error, ")
        fix = _type_error_fix(item, field_alias, key, raw, job_check)
        problems.append(f"{key} = {shown}: {message}.{f' Fix: {fix}' if fix else ''}")
    return problems


def _type_error_fix(
    item: Any, alias: str, key: str, raw: dict[str, Any], job_check: JobCheck | None
) -> str | None:
    """The first value, most likely meant first, that the field accepts with the rest of `raw`:
    the nearest allowed choice, the violated bound, the number meant, then the default."""
    candidates = input_rules.type_error_candidates(
        item["type"], item["input"], item.get("ctx"), minutes=alias.endswith("Minutes")
    )
    # Booleans get their default, never a guess (deleteBucketOnDestroy=2 must not become true).
    candidates += _default_candidates(alias, raw)
    stack = raw.get("stack", "STACK")
    switch = input_rules.boolean_meant(item["input"]) if alias == "evaluation" else None
    if switch is not None:
        # `evaluation=false`: the object's switch, which --path sets.
        whole = json.dumps({"enabled": switch == "true"})
        if _field_accepts(raw, alias, key, whole, job_check):
            return f"pulumi config set --path {key}.enabled {switch} -s {stack}"
    for candidate in candidates:
        if _field_accepts(raw, alias, key, candidate, job_check):
            return f"pulumi config set {key} {candidate} -s {stack}"
    if _field_accepts(raw, alias, key, None, job_check):
        return f"pulumi config rm {key} -s {stack} (the default applies)"
    return None


def _default_candidates(alias: str, raw: dict[str, Any]) -> list[str]:
    rest = {k: v for k, v in raw.items() if k != alias}
    try:
        defaults = StackSettings._profile_defaults(rest)
    except ValueError:
        defaults = {}
    name = next((n for n, f in StackSettings.model_fields.items() if f.alias == alias), "")
    field = StackSettings.model_fields.get(name)
    default = None if field is None or field.is_required() else field.get_default()
    found = [defaults.get(alias), {} if name == "job" else default]
    return [
        json.dumps(v)
        if isinstance(v, dict)
        else str(v).lower()
        if isinstance(v, bool)
        else str(getattr(v, "value", v))
        for v in found
        if v is not None and not isinstance(v, SecretStr)
    ]


def _field_accepts(
    raw: dict[str, Any], alias: str, key: str, value: str | None, job_check: JobCheck | None
) -> bool:
    """No rule refuses `value` (None: the key removed) for `alias`; when the rest of `raw` is
    valid too, the GRPO job accepts the result as well."""
    data = {k: v for k, v in raw.items() if k != alias} if value is None else {**raw, alias: value}
    try:
        settings = StackSettings.model_validate(data)
        if job_check is not None:
            job_check(settings)
    except ValidationError as error:
        for item in error.errors():
            if item["loc"] and item["loc"][0] == alias:
                return False
            lines = str((item.get("ctx") or {}).get("error", "")).split("\n")
            if not item["loc"] and any(line.startswith(f"{key} ") for line in lines):
                return False
    except ValueError:  # the GRPO job refuses the settings
        return False
    return True


def _format(stack: str, problems: list[str]) -> str:
    lines = "\n".join(f"  - {p}" for p in problems)
    return f"stack {stack!r}: invalid configuration, nothing was created:\n{lines}"


def settings_from_pulumi(
    job_check: JobCheck | None = None, redact: Redact | None = None
) -> LoadedSettings:
    """Read this stack's config from the Pulumi runtime (real engine or the offline plan);
    `job_check` and `redact` as in load_settings."""
    raw = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    offline = os.environ.get(OFFLINE_PLAN_ENV) == "1"
    # The engine lists the keys set with --secret (PULUMI_CONFIG_SECRET_KEYS, or in-process).
    secret = set(runtime_config.get_config_secret_keys_env())
    secret |= {key for key in raw if runtime_config.is_config_secret(key)}
    loaded = load_settings(
        pulumi.get_stack(),
        raw,
        offline=offline,
        job_check=job_check,
        redact=redact,
        secret_keys=secret,
    )
    return LoadedSettings(
        loaded.settings, (*plain_secret_notices(raw, secret, pulumi.get_stack()), *loaded.notices)
    )


# Config keys that hold a secret, by name (hfToken, wandbApiKey, ...).
_SECRET_KEY_NAME = re.compile(r"(token|secret|password|apikey|api_key)$", re.IGNORECASE)


def plain_secret_notices(config: Mapping[str, str], secret_keys: set[str], stack: str) -> list[str]:
    """A loud warning per secret-named key that was not set with --secret: its value sits in
    plain text in Pulumi.<stack>.yaml (and in any copy of it)."""
    return [
        f"WARNING: {key} is not a Pulumi secret: its value is stored in plain text in "
        f"Pulumi.{stack}.yaml. Fix: pulumi config set --secret {key} VALUE -s {stack}"
        for key in sorted(config)
        if key.startswith(f"{NAMESPACE}:")
        and _SECRET_KEY_NAME.search(key)
        and key not in secret_keys
        and config[key] not in (None, "")
        and not is_placeholder(config[key])
    ]
