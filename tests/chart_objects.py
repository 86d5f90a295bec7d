"""What a pinned Helm chart installs with given values, from facts derived from its templates.

tests/data/charts/<chart>-<version>.json holds, per YAML document of the chart at its tag, the
apiVersion, kind, name and the template conditions around it, with the chart's defaults for every
value those conditions read (source repo, tag, commit and the command in the file;
tests/data/charts/derive_chart_objects.py). Here the conditions are evaluated the way Helm's Go
templates would for the handful of forms the charts use (`.Values.a.b`, `not`, `and`, `or`,
`eq`, `.Capabilities.APIVersions.Has`); a form not understood fails loudly, so a chart bump that
brings one is read, not guessed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

CHARTS = Path(__file__).parent / "data" / "charts"
_TOKEN = re.compile(r'\(|\)|"[^"]*"|[^\s()]+')


def chart_facts(chart: str, version: str) -> dict[str, Any] | None:
    path = CHARTS / f"{chart}-{version}.json"
    return json.loads(path.read_text()) if path.exists() else None


def read_versions(chart: str) -> set[str]:
    return {json.loads(p.read_text())["version"] for p in CHARTS.glob(f"{chart}-*.json")}


def _truthy(value: Any) -> bool:
    return value not in (None, False, 0, "", [], {})


def _lookup(values: dict[str, Any], defaults: dict[str, Any], path: str) -> Any:
    node: Any = values
    for key in path.removeprefix(".Values.").split("."):
        if not isinstance(node, dict) or key not in node:
            return defaults.get(path)
        node = node[key]
    return node


class _Evaluator:
    def __init__(
        self, values: dict[str, Any], defaults: dict[str, Any], has: Callable[[str], bool]
    ) -> None:
        self.values, self.defaults, self.has = values, defaults, has

    def run(self, condition: str) -> bool:
        if condition.startswith(("range ", "with ")):
            # range: one object per item (assumed non-empty: the check stays conservative);
            # with X: X must be set.
            word, rest = condition.split(" ", 1)
            return True if word == "range" else _truthy(self.run_expr(rest))
        return _truthy(self.run_expr(condition))

    def run_expr(self, text: str) -> Any:
        tokens = _TOKEN.findall(text)
        value, rest = self._pipeline(tokens)
        assert not rest, f"template condition not understood: {text!r}"
        return value

    def _pipeline(self, tokens: list[str]) -> tuple[Any, list[str]]:
        head, *rest = tokens
        functions = {"not": 1, "and": None, "or": None, "eq": 2, "ne": 2}
        if head == ".Capabilities.APIVersions.Has":
            arg, rest = self._atom(rest)
            return self.has(arg), rest
        if head not in functions:
            return self._atom(tokens)
        args: list[Any] = []
        while rest and rest[0] != ")" and (functions[head] is None or len(args) < functions[head]):
            arg, rest = self._atom(rest)
            args.append(arg)
        result = {
            "not": lambda: not _truthy(args[0]),
            "and": lambda: all(_truthy(a) for a in args),
            "or": lambda: any(_truthy(a) for a in args),
            "eq": lambda: args[0] == args[1],
            "ne": lambda: args[0] != args[1],
        }[head]()
        return result, rest

    def _atom(self, tokens: list[str]) -> tuple[Any, list[str]]:
        head, *rest = tokens
        if head == "(":
            value, rest = self._pipeline(rest)
            assert rest and rest[0] == ")", f"unbalanced template condition: {tokens}"
            return value, rest[1:]
        if head.startswith('"'):
            return head.strip('"'), rest
        if head.startswith(".Values."):
            return _lookup(self.values, self.defaults, head), rest
        if head in ("true", "false"):
            return head == "true", rest
        raise AssertionError(f"template condition not understood: {head!r} in {tokens}")


def installed_objects(
    facts: dict[str, Any], values: dict[str, Any], served: Callable[[str], bool]
) -> set[tuple[str, str]]:
    """(apiVersion, kind) of every object the chart renders with `values` on a cluster that
    serves the group-versions `served` accepts."""
    has = lambda api: served(api.rsplit("/", 1)[0] if api.count("/") == 2 else api)  # noqa: E731
    evaluator = _Evaluator(values, facts["values_defaults"], has)
    objects = set()
    for obj in facts["objects"]:
        if not all(evaluator.run(c) for c in obj["conditions"]):
            continue
        api_version = obj["apiVersion"]
        if "{{" in api_version:
            # The DRA chart's resourceApiVersion helper: `.Values.resourceApiVersion` if set, else
            # the first group-version it lists that the cluster serves (_helpers.tpl).
            assert "resourceApiVersion" in api_version, f"apiVersion not understood: {obj}"
            override = _lookup(values, {}, ".Values.resourceApiVersion")
            candidates = facts["resource_api_version_helper"]
            api_version = override or next((c for c in candidates if served(c)), "")
        objects.add((api_version, obj["kind"]))
    return objects
