"""Pulumi.yaml's config declarations and template agree with the settings model and with what
Pulumi does with them (pulumi/pulumi sdk/go/common/workspace/config.go mergeConfig and
project.go Validate / ValidateConfigValue)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from config.declared_defaults import marked_aliases
from config.settings import (
    GCP_KEYS,
    NAMESPACE,
    SECRET_FIELDS,
    SettingsError,
    StackSettings,
    config_key,
    load_settings,
    valid_keys,
)
from maintenance import project_config
from planning.offline_engine import REPO_ROOT, StackConfigError, stack_config
from planning.offline_engine import project_config as engine_project_config

PROJECT = yaml.safe_load((REPO_ROOT / "Pulumi.yaml").read_text())
DECLARED = {k: v for k, v in PROJECT["config"].items() if k.startswith(f"{NAMESPACE}:")}
STACKS = ("a4x", "a4", "a3u")
SECRET_KEYS = {config_key(name) for name in SECRET_FIELDS}
MARKED_KEYS = {f"{NAMESPACE}:{alias}" for alias in marked_aliases(StackSettings)}


def _pulumi_accepts(type_name: str, items: dict[str, Any] | None, value: Any) -> bool:
    """ValidateConfigValue: integers may be whole-number strings, booleans "true"/"false"."""
    if type_name == "string":
        return isinstance(value, str)
    if type_name == "integer":
        if isinstance(value, str):
            return value.lstrip("-").isdigit()
        return isinstance(value, int) and not isinstance(value, bool)
    if type_name == "boolean":
        return isinstance(value, bool) or value in ("true", "false")
    if type_name == "array" and isinstance(value, list) and items:
        return all(_pulumi_accepts(items["type"], items.get("items"), v) for v in value)
    return False


def _stack_value_accepted(declaration: dict[str, Any], value: Any) -> bool:
    """validateStackConfigValue (pulumi/pulumi pkg/workspace/config.go): a scalar stack value is
    checked as its text (config.Value keeps a YAML number or bool as text: object.MarshalString),
    an object or list (a YAML map, `--path`, an ESC object) as the parsed structure."""
    if not isinstance(value, (dict, list)):
        value = json.dumps(value) if isinstance(value, (bool, int, float)) else str(value)
    if declaration["type"] == "object":
        return isinstance(value, dict)
    return _pulumi_accepts(declaration["type"], declaration.get("items"), value)


def test_pulumi_yaml_is_generated_from_the_settings() -> None:
    text = (REPO_ROOT / "Pulumi.yaml").read_text()
    assert project_config.render(text) == text, "run: python -m maintenance.project_config"


def test_declarations_pass_pulumis_project_validation() -> None:
    for key, declaration in PROJECT["config"].items():
        if not key.startswith(f"{NAMESPACE}:"):
            # Another namespace's key carries a `value` only (no type, no default).
            assert set(declaration) == {"value"}, key
            continue
        assert declaration["type"] in {"string", "integer", "boolean", "array"}, key
        assert declaration["type"] != "array" or "items" in declaration, key
        assert declaration.get("description"), key
        if "default" in declaration:
            assert _pulumi_accepts(
                declaration["type"], declaration.get("items"), declaration["default"]
            )


def test_every_setting_is_declared_or_listed_with_its_reason() -> None:
    declared, undeclared = project_config.declarations()
    assert set(declared) == set(DECLARED)
    assert set(declared) | set(undeclared) == set(valid_keys())
    text = (REPO_ROOT / "Pulumi.yaml").read_text()
    assert all(f"#   {key}: " in text for key in undeclared)


def _stack_config_without_project_defaults(stack: str) -> dict[str, str]:
    defaults = engine_project_config()
    stack_file = yaml.safe_load((REPO_ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]
    return {k: v for k, v in stack_config(stack).items() if k in stack_file or k not in defaults}


@pytest.mark.parametrize("stack", STACKS)
def test_project_defaults_never_change_a_stacks_settings(stack: str) -> None:
    # A default Pulumi applies to a stack lacking the key must be the model's own default.
    with_defaults = load_settings(stack, stack_config(stack), offline=True).settings
    without = load_settings(stack, _stack_config_without_project_defaults(stack), offline=True)
    assert with_defaults == without.settings


@pytest.mark.parametrize("stack", STACKS)
def test_keys_declared_without_default_are_the_ones_the_program_requires(stack: str) -> None:
    # Pulumi refuses a stack lacking such a key ("is missing configuration value"); the program
    # must refuse it too, or the declaration would make an optional setting required.
    required = [key for key, d in DECLARED.items() if "default" not in d]
    assert required
    config = {**stack_config(stack), "verl-gke:hfToken": "hf_x", "gcp:project": "acme-ml-prod"}
    config["verl-gke:zone"] = "us-central1-b"
    config["verl-gke:reservation"] = "gpu-res"
    load_settings(stack, config, offline=False)
    for key in required:
        with pytest.raises(SettingsError, match=key.split(":")[1]):
            load_settings(stack, {k: v for k, v in config.items() if k != key}, offline=False)


def test_secrets_are_declared_secret_and_have_no_default() -> None:
    # A project default is applied as plain text, never encrypted (createConfigValue).
    for key in SECRET_KEYS & set(DECLARED):
        assert DECLARED[key].get("secret") is True
        assert "default" not in DECLARED[key]
    template = PROJECT["template"]["config"]
    assert all(template[key].get("secret") is True for key in SECRET_KEYS & set(template))
    assert "verl-gke:hfToken" in template


def test_template_asks_only_for_keys_the_program_reads() -> None:
    readable = set(valid_keys()) | set(GCP_KEYS.values())
    assert set(PROJECT["template"]["config"]) <= readable
    assert {"gcp:project", "verl-gke:zone", "verl-gke:hfToken"} <= set(
        PROJECT["template"]["config"]
    )


@pytest.mark.parametrize("stack", STACKS)
def test_committed_stack_values_have_the_declared_types(stack: str) -> None:
    # Pulumi checks a stack's value against the declared type before the program runs.
    values = yaml.safe_load((REPO_ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]
    for key, value in values.items():
        if key in DECLARED and not (isinstance(value, dict) and "secure" in value):
            assert _stack_value_accepted(DECLARED[key], value), key


def test_a_stack_value_is_type_checked_as_its_text() -> None:
    # A hand-written YAML number or bool passes a `string` declaration; a map does not.
    declared = DECLARED["verl-gke:gpuNodes"]
    assert _stack_value_accepted(declared, 4) and _stack_value_accepted(declared, True)
    assert not _stack_value_accepted(declared, {"prompt": "q"})


@pytest.mark.parametrize("key", sorted(valid_keys()))
def test_a_path_fix_is_one_pulumi_accepts(key: str) -> None:
    # A key typed as `KEY.field` without --path is answered with `--path KEY.field`, which makes
    # KEY an object; Pulumi refuses that before the program runs where KEY is declared a string,
    # integer, boolean or array (validateStackConfigValue), so the fix is offered only for a key
    # that may hold an object.
    config = {**stack_config("a4"), "gcp:project": "acme-ml-prod", f"{key}.field": "v"}
    with pytest.raises(SettingsError) as refused:
        load_settings("a4", config, offline=True)
    if f"--path {key}.field" in str(refused.value) and key in DECLARED:
        assert _stack_value_accepted(DECLARED[key], {"field": "v"}), str(refused.value)


def test_offline_engine_applies_project_defaults_like_pulumi(tmp_path: Any) -> None:
    # mergeConfig: a default fills a key the stack lacks; the stack's own value wins; structured
    # values reach the program as JSON text, scalars as their text.
    (tmp_path / "Pulumi.yaml").write_text((REPO_ROOT / "Pulumi.yaml").read_text())
    (tmp_path / "Pulumi.s.yaml").write_text("config:\n  verl-gke:cpuNodes: 3\n")
    config = stack_config("s", tmp_path)
    assert config["verl-gke:cpuNodes"] == "3"
    assert config["verl-gke:cpuMaxNodes"] == "5"
    assert config["verl-gke:authorizedNetworks"] == "[]"
    assert config["verl-gke:exportModel"] == "true"
    assert "verl-gke:zone" not in config and "verl-gke:hfToken" not in config


@pytest.mark.parametrize("stack", STACKS)
def test_an_explicit_empty_value_is_the_stacks_own_default(stack: str) -> None:
    # Pulumi cannot tell its declared default (empty) from a value set empty, so an empty value
    # set in the stack file must mean the program's own default too.
    config = _stack_config_without_project_defaults(stack)
    baseline = load_settings(stack, config, offline=True).settings
    unset_keys = MARKED_KEYS - set(config)
    emptied = load_settings(stack, {**config, **dict.fromkeys(unset_keys, "")}, offline=True)
    assert unset_keys and emptied.settings == baseline


def test_the_declarations_cover_nine_in_ten_settings() -> None:
    declared, undeclared = project_config.declarations()
    assert len(declared) >= 0.9 * (len(declared) + len(undeclared)), sorted(undeclared)
    assert all(DECLARED[key]["default"] == "" for key in MARKED_KEYS)


def test_an_explicit_zero_gpu_nodes_is_still_refused() -> None:
    # gpuNodes is declared as a string with an empty default, so 0 is a value, not "unset".
    config = {**stack_config("a4"), "gcp:project": "acme-ml-prod", "verl-gke:gpuNodes": "0"}
    with pytest.raises(SettingsError, match="gpuNodes"):
        load_settings("a4", config, offline=True)


@pytest.mark.parametrize(
    ("key", "as_object"),
    [
        ("verl-gke:job", {"ppoMicroBatchSizePerGpu": 4}),
        ("verl-gke:datasetColumns", {"prompt": "problem", "answer": "answer"}),
    ],
)
def test_an_object_setting_is_accepted_as_json_text_and_as_an_object(
    key: str, as_object: dict[str, Any]
) -> None:
    # The program takes these as JSON text (`pulumi config set KEY '{...}'`) or as an object (a
    # YAML map in the stack file, `--path KEY.FIELD`); Pulumi hands both to it as JSON text.
    stack = {**stack_config("a3u"), "gcp:project": "acme-ml-prod"}
    if key == "verl-gke:datasetColumns":
        stack["verl-gke:dataset"] = "acme/arith"
        stack["verl-gke:reward"] = "docs/examples/exact_match.py:compute_score"
    for value in (json.dumps(as_object), as_object):
        declaration = DECLARED.get(key)
        assert declaration is None or _stack_value_accepted(declaration, value), (key, value)
        text = value if isinstance(value, str) else json.dumps(value)
        load_settings("a3u", {**stack, key: text}, offline=True)


@pytest.mark.parametrize(
    ("line", "refused"),
    [
        ('verl-gke:gpuNodes: 4', None),  # a YAML number is kept as text: a string passes
        ("verl-gke:imageStreaming: true", None),
        ("verl-gke:gpuNodes: {count: 4}", "must be of type 'string'"),
        ("verl-gke:cpuNodes: two", "must be of type 'integer'"),
        ("verl-gke:hfToken: hf_plain", "must be encrypted as it's secret"),
        ("verl-gke:datasetColumns: {prompt: q, answer: a}", None),  # undeclared: any value
    ],
)
def test_the_offline_engine_refuses_what_pulumi_refuses_before_the_program(
    tmp_path: Any, line: str, refused: str | None
) -> None:
    # pulumi/pulumi pkg/workspace/config.go validateStackConfigValue, before the program runs.
    (tmp_path / "Pulumi.yaml").write_text((REPO_ROOT / "Pulumi.yaml").read_text())
    (tmp_path / "Pulumi.a3u.yaml").write_text(f"config:\n  {line}\n")
    if refused is None:
        stack_config("a3u", tmp_path)
        return
    with pytest.raises(StackConfigError, match=re.escape(refused)):
        stack_config("a3u", tmp_path)
