"""What `pulumi config set` stores and what Pulumi's declared types refuse
(planning/pulumi_config.py), against the rules of pulumi/pulumi's own code:
sdk/go/common/resource/config/map.go (Map.Set, adjustObjectValue) and sdk/go/common/workspace
(ValidateConfigValue, InferFullTypeName)."""

from __future__ import annotations

from typing import Any

import pytest

from planning.pulumi_config import (
    ConfigSet,
    ConfigSetError,
    apply,
    full_type_name,
    load_yaml,
    parse_path,
    type_accepts,
    type_problems,
)


@pytest.mark.parametrize(
    ("text", "stored"),
    [
        ("true", True),
        ("false", False),
        ("True", "True"),  # only the lowercase words are booleans
        ("42", 42),
        ("-3", -3),
        ("010", "010"),  # a leading zero keeps the text
        ("0", 0),
        ("0.5", "0.5"),  # strconv.Atoi: no fractions
        ('["a"]', '["a"]'),  # no JSON parsing
    ],
)
def test_a_path_set_stores_what_adjust_object_value_makes_of_the_text(
    text: str, stored: object
) -> None:
    values: dict[str, Any] = {}
    apply(values, ConfigSet("verl-gke:job.x", text, path=True))
    assert values["verl-gke:job"] == {"x": stored}


def test_a_plain_set_stores_the_text_and_a_path_set_replaces_a_top_level_string() -> None:
    values: dict[str, Any] = {}
    apply(values, ConfigSet("verl-gke:job", '{"a": 1}'))
    assert values["verl-gke:job"] == '{"a": 1}'
    apply(values, ConfigSet("verl-gke:job.b", "2", path=True))
    assert values["verl-gke:job"] == {"b": 2}


def test_list_items_are_appended_at_the_end_and_not_past_it() -> None:
    values: dict[str, Any] = {"verl-gke:authorizedNetworks": ["a"]}
    apply(values, ConfigSet("verl-gke:authorizedNetworks[1]", "b", path=True))
    apply(values, ConfigSet("verl-gke:authorizedNetworks[0]", "c", path=True))
    assert values["verl-gke:authorizedNetworks"] == ["c", "b"]
    with pytest.raises(ConfigSetError, match=r"the next is verl-gke:authorizedNetworks\[2\]"):
        apply(values, ConfigSet("verl-gke:authorizedNetworks[3]", "d", path=True))
    with pytest.raises(ConfigSetError, match="an array was expected for index 0"):
        apply({"verl-gke:job": {"x": "s"}}, ConfigSet("verl-gke:job.x[0]", "1", path=True))


def test_paths_parse_names_indices_and_quoted_names() -> None:
    assert parse_path('verl-gke:job["a.b"][2].c') == ("verl-gke:job", ["a.b", 2, "c"])


ARRAY = {"type": "array", "items": {"type": "string"}}


@pytest.mark.parametrize(
    ("declaration", "value", "accepted"),
    [
        ({"type": "boolean"}, "yes", False),
        ({"type": "boolean"}, True, True),
        ({"type": "boolean"}, "true", True),
        ({"type": "integer"}, "2h", False),
        ({"type": "integer"}, 4, True),  # a YAML number is kept as text, "4"
        ({"type": "string"}, 4, True),
        ({"type": "string"}, {"a": 1}, False),
        (ARRAY, "203.0.113.7/32", False),
        (ARRAY, ["203.0.113.7/32"], True),
        (ARRAY, [10], False),  # an item keeps its JSON type
    ],
)
def test_declared_types_accept_what_validate_config_value_accepts(
    declaration: dict[str, Any], value: object, accepted: bool
) -> None:
    assert type_accepts(declaration, value) is accepted


def test_refusals_read_as_pulumi_s() -> None:
    assert full_type_name(ARRAY) == "array<string>"
    problems = type_problems(
        "a4x",
        {
            "verl-gke:authorizedNetworks": ARRAY,
            "verl-gke:hfToken": {"type": "string", "secret": True},
        },
        {"verl-gke:authorizedNetworks": "203.0.113.7/32", "verl-gke:hfToken": "hf_x"},
    )
    assert problems == [
        "Stack 'a4x' with configuration key 'verl-gke:authorizedNetworks' must be of type "
        "'array<string>' (Pulumi refuses it before the program runs)",
        "Stack 'a4x' with configuration key 'verl-gke:hfToken' must be encrypted as it's secret",
    ]


def test_stack_files_read_yes_as_text_as_yaml_1_2_does() -> None:
    assert load_yaml("a: yes\nb: true\nc: on\n") == {"a": "yes", "b": True, "c": "on"}
