"""What `pulumi config set` writes into a stack file, and what Pulumi refuses there before the
program runs. The offline plan's `--set` and the committed stack files both go through here, so a
value is judged the same way whichever way it was given.

Sources (pulumi/pulumi): pkg/cmd/pulumi/config/config_set.go (`config set` stores the typed text as
a plain value; `--secret` encrypts it), sdk/go/common/resource/config/map.go `Map.Set` (a
`--path` key walks or creates maps and lists; a top-level string is replaced; an index may be at
most the list's length; `adjustObjectValue` stores true/false as booleans, a whole number without
a leading zero as an integer, anything else as a string) and sdk/go/common/workspace
(validateStackConfigValue, ValidateConfigValue, InferFullTypeName: a value of the wrong declared
type is refused with "Stack 'S' with configuration key 'K' must be of type 'T'", a declared
secret set in plain text with "... must be encrypted as it's secret").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

# A path segment: a name, `[N]` or `["quoted.name"]` (resource.ParsePropertyPath's forms).
_SEGMENT = re.compile(r'\.?(?:(?P<name>[^.\[\]"]+)|\[(?P<index>[0-9]+)\]|\["(?P<quoted>[^"]*)"\])')


class _Yaml12Loader(yaml.SafeLoader):
    """Booleans as YAML 1.2's core schema has them, as Pulumi reads a stack file
    (gopkg.in/yaml.v3): only true/false; YAML 1.1's yes/no/on/off are text."""


_Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def load_yaml(text: str) -> Any:
    """A stack file read with YAML 1.2's booleans (_Yaml12Loader)."""
    return yaml.load(text, Loader=_Yaml12Loader)


class ConfigSetError(ValueError):
    """`pulumi config set --path` refuses the key (an index past the list's end, a list where a
    map is, a malformed path)."""


@dataclass(frozen=True)
class ConfigSet:
    """One `pulumi config set [--secret] [--path] KEY VALUE`."""

    key: str
    text: str
    path: bool = False
    secret: bool = False

    @property
    def root(self) -> str:
        """The stack file key it writes (`verl-gke:job` for `verl-gke:job.rolloutN`)."""
        return parse_path(self.key)[0] if self.path else self.key


def parse_path(key: str) -> tuple[str, list[str | int]]:
    """(`namespace:first`, the segments after it) of a `--path` key such as
    `verl-gke:job.extraOverrides[0]`."""
    namespace, sep, name = key.partition(":")
    if not sep or not name:
        raise ConfigSetError(f"{key}: expected NAMESPACE:KEY")
    segments: list[str | int] = []
    position = 0
    while position < len(name):
        match = _SEGMENT.match(name, position)
        if match is None or match.end() == position:
            raise ConfigSetError(f"{key}: not a config path (NAME, .FIELD, [INDEX])")
        if match["index"] is not None:
            segments.append(int(match["index"]))
        else:
            segments.append(match["name"] if match["name"] is not None else match["quoted"])
        position = match.end()
    first = segments[0]
    if not isinstance(first, str) or not first:
        raise ConfigSetError(f"{key}: the first path segment must be a name")
    return f"{namespace}:{first}", segments[1:]


def path_value(text: str) -> object:
    """The value `--path` stores for `text` (map.go adjustObjectValue)."""
    if text in ("true", "false"):
        return text == "true"
    if len(text) > 1 and text[0] == "0":
        return text
    return int(text) if re.fullmatch(r"[+-]?[0-9]+", text) else text


def is_path_key(key: str) -> bool:
    """A key naming a field or item (`verl-gke:job.rolloutN`, `verl-gke:authorizedNetworks[0]`),
    which the plan sets as `pulumi config set --path` does."""
    name = key.partition(":")[2]
    return "." in name or "[" in name


def apply(values: dict[str, Any], change: ConfigSet) -> None:
    """Write `change` into `values` (a stack file's `config:` mapping) as the CLI would."""
    if not change.path:
        values[change.key] = change.text
        return
    root_key, segments = parse_path(change.key)
    if not segments:
        values[root_key] = change.text
        return
    current = values.get(root_key)
    # Map.Set: a top-level string is overwritten by the structure the path builds.
    container: Any = current if isinstance(current, dict | list) else None
    holder: dict[str, Any] = {"root": container}
    parent: Any = holder
    parent_key: str | int = "root"
    for depth, segment in enumerate(segments):
        node = parent.get(parent_key) if isinstance(parent, dict) else parent[parent_key]
        if node is None:
            node = [] if isinstance(segment, int) else {}
            parent[parent_key] = node
        if isinstance(segment, int):
            if not isinstance(node, list):
                raise ConfigSetError(f"{change.key}: an array was expected for index {segment}")
            if segment > len(node):
                following = _key_text(root_key, [*segments[:depth], len(node)])
                raise ConfigSetError(
                    f"{change.key}: array index out of range (the list has {len(node)} "
                    f"item(s); the next is {following})"
                )
            if segment == len(node):
                node.append(None)
        elif not isinstance(node, dict):
            raise ConfigSetError(f"{change.key}: a map was expected for key {segment!r}")
        parent, parent_key = node, segment
    parent[parent_key] = path_value(change.text)
    values[root_key] = holder["root"]


def _key_text(root_key: str, segments: list[str | int]) -> str:
    return root_key + "".join(
        f"[{segment}]" if isinstance(segment, int) else f".{segment}" for segment in segments
    )


def full_type_name(declaration: Mapping[str, Any]) -> str:
    """InferFullTypeName: `string`, `integer`, `boolean`, `array<string>`, ..."""
    items = declaration.get("items")
    if declaration.get("type") == "array" and isinstance(items, Mapping):
        return f"array<{full_type_name(items)}>"
    return str(declaration.get("type"))


def type_accepts(declaration: Mapping[str, Any], value: Any, top: bool = True) -> bool:
    """ValidateConfigValue: a top-level scalar is checked as its text (a stack value that is no
    object is a string, a YAML number or bool kept as text); the items of a list keep their JSON
    types (`--path 'KEY[0]' 10` stores the integer 10, which `array<string>` refuses)."""
    if top and not isinstance(value, dict | list):
        value = scalar_text(value)
    type_name = declaration.get("type")
    if type_name == "string":
        return isinstance(value, str)
    if type_name == "integer":
        if isinstance(value, bool):
            return False
        if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
            return True
        # strconv.Atoi: an optional sign, then digits.
        return isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]+", value) is not None
    if type_name == "boolean":
        return isinstance(value, bool) or value in ("true", "false")
    if type_name == "object":
        return isinstance(value, dict)
    items = declaration.get("items")
    if not (type_name == "array" and isinstance(value, list) and isinstance(items, Mapping)):
        return False
    return all(type_accepts(items, item, top=False) for item in value)


def scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def is_encrypted(value: Any) -> bool:
    """A value `pulumi config set --secret` wrote: `secure: <ciphertext>`."""
    return isinstance(value, dict) and set(value) == {"secure"}


# fix(key, declaration, value) -> the command that stores what the user meant, or None.
TypeFix = Callable[[str, Mapping[str, Any], Any], str | None]


def type_problems(
    stack: str,
    declarations: Mapping[str, Any],
    values: Mapping[str, Any],
    secret_keys: Collection[str] = (),
    fix: TypeFix | None = None,
) -> list[str]:
    """Pulumi's check of each stack value against its Pulumi.yaml declaration, in Pulumi's words,
    each with `fix`'s command where it has one."""
    problems = []
    for key, declaration in declarations.items():
        value = values.get(key)
        if value is None or not isinstance(declaration, dict) or "type" not in declaration:
            continue
        encrypted = is_encrypted(value) or key in secret_keys
        where = f"Stack '{stack}' with configuration key '{key}'"
        if declaration.get("secret") and not encrypted:
            problem = f"{where} must be encrypted as it's secret"
        elif not encrypted and not type_accepts(declaration, value):
            problem = (
                f"{where} must be of type '{full_type_name(declaration)}' (Pulumi refuses it "
                f"before the program runs)"
            )
        else:
            continue
        command = fix(key, declaration, value) if fix else None
        problems.append(f"{problem}. Fix: {command}" if command else problem)
    return problems
