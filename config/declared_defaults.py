"""The defaults Pulumi.yaml declares for settings whose real default is not one fixed value.

Pulumi applies a declared `default` (any non-null value, the empty string included) to every stack
that lacks the key, and refuses a stack that lacks a key declared without one ("Stack 'a4' is
missing configuration value ...": pulumi/pulumi sdk/go/common/workspace/config.go mergeConfig). It
checks a plain stack value's type on its text (validateStackConfigValue; project.go
ValidateConfigValue), so a `string` key takes any scalar (`pulumi config set` stores a top-level
value as a string; a hand-written YAML number or bool is checked as its text) but refuses an
object (a YAML map, `--path KEY.field`, an ESC object). A setting whose
default the program derives from the stack (its profile, its name, another setting), or that is
optional, is therefore declared as a string whose default, the empty string, means "not set" (a
string: Pulumi's integer and boolean types cannot say "not set", and an explicit 0 GPU nodes must
still be refused). The settings loader drops an empty value of such a key before validation, so
the program's own default applies exactly as if the key were absent.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from pydantic import SecretStr
from pydantic.fields import FieldInfo

from config.profiles import PROFILES

# The declared default of a per-stack or optional key: "not set".
UNSET = ""


def per_stack_aliases(model: Any) -> frozenset[str]:
    """Config keys whose default the settings model derives from the stack (its profile, name)."""
    found: set[str] = {"profile"}
    for name in PROFILES:
        given = {"stack": name, "profile": name, "project": "example-project"}
        found |= set(model._profile_defaults(dict(given))) - set(given)
    return frozenset(found)


def holds_object(field: FieldInfo) -> bool:
    """A setting whose value is a JSON object (the job overrides, the dataset columns): the
    program takes it as JSON text or as an object set with --path, and no Pulumi type takes both
    (`object` refuses text, `string` refuses an object)."""
    extra = field.json_schema_extra
    flagged = isinstance(extra, dict) and extra.get("object") is True
    return flagged or "dict" in str(field.annotation)


def _declarable(field: FieldInfo) -> bool:
    # A secret never gets a project default: Pulumi writes a default as plain text.
    return SecretStr.__name__ not in str(field.annotation) and not holds_object(field)


@cache
def marked_aliases(model: Any) -> frozenset[str]:
    """The keys Pulumi.yaml declares with the UNSET default: per-stack and optional settings."""
    optional = {
        field.alias
        for field in model.model_fields.values()
        if field.alias and field.default is None and field.default_factory is None
    }
    fields = {field.alias: field for field in model.model_fields.values() if field.alias}
    return frozenset(
        alias
        for alias in per_stack_aliases(model) | optional
        if alias in fields and _declarable(fields[alias])
    )


def without_unset(values: Mapping[str, str], namespace: str, model: Any) -> dict[str, str]:
    """`values` (raw config) without the marked keys that hold UNSET, i.e. are not set."""
    prefix = f"{namespace}:"
    marked = marked_aliases(model)
    return {
        key: value
        for key, value in values.items()
        if not (
            key.startswith(prefix)
            and key[len(prefix) :] in marked
            and value == UNSET
        )
    }
