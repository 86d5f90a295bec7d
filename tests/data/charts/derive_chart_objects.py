"""Derive what a Helm chart installs from its templates at a git tag (no Helm needed).

Run inside a clone of the chart's repository:
    python <this file> <chart dir in the repo> <tag> <repo url> > <chart>-<version>.json

For every YAML document of templates/*.yaml and crds/*.yaml: its apiVersion and kind (as written,
a template expression kept as text), metadata.name as written, and the `if`/`with`/`range`
blocks open around it (their conditions as written, `else` as `not (...)`). The defaults of every
`.Values` path those conditions read come from the chart's values.yaml. Where an apiVersion is
the DRA chart's resourceApiVersion helper, the group-versions the helper tries, in order, are
read from its `define` in templates/_helpers.tpl. Only these derived facts are kept.
"""

import json
import re
import subprocess
import sys
from typing import Any

import yaml

_BLOCK = re.compile(r"^\{\{-?\s*(if|with|range|else|end)\b\s*(.*?)\s*-?\}\}\s*$")
_VALUES = re.compile(r"\.Values((?:\.[A-Za-z0-9_]+)+)")
_HELPER_APIS = re.compile(r'"(resource\.k8s\.io/v[0-9a-z]+)"')


def _git(*args: str) -> str:
    return subprocess.check_output(["git", *args], text=True)


def _objects(path: str, text: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    blocks: list[str] = []
    current: dict[str, Any] | None = None
    in_metadata = False
    for line in text.splitlines():
        block = _BLOCK.match(line.strip()) if line.lstrip().startswith("{{") else None
        if block:
            word, rest = block.groups()
            if word == "end":
                if blocks:
                    blocks.pop()
            elif word == "else":
                if blocks:
                    blocks[-1] = f"not ({blocks[-1]})" + (f" and {rest}" if rest else "")
            else:
                blocks.append(f"{word} {rest}" if word != "if" else rest)
            continue
        if line.startswith("---"):
            current, in_metadata = None, False
        elif line.startswith(("apiVersion:", "kind:")):
            key, value = (part.strip() for part in line.split(":", 1))
            if current is None or key in current:
                current = {"file": path, "conditions": list(blocks)}
                found.append(current)
                in_metadata = False
            current[key] = value
        elif current is not None and line.startswith("metadata:"):
            in_metadata = True
        elif current is not None and in_metadata and re.match(r"^  name:", line):
            current.setdefault("name", line.split(":", 1)[1].strip())
            in_metadata = False
        elif line and not line.startswith((" ", "#", "{{")):
            in_metadata = False
    return found


def _lookup(values: Any, dotted: str) -> Any:
    for key in dotted.strip(".").split("."):
        if not isinstance(values, dict) or key not in values:
            return None
        values = values[key]
    return values


def main(chart_dir: str, tag: str, repo: str) -> None:
    files = _git("ls-tree", "-r", "--name-only", tag, chart_dir).split()
    chart = yaml.safe_load(_git("show", f"{tag}:{chart_dir}/Chart.yaml"))
    values = yaml.safe_load(_git("show", f"{tag}:{chart_dir}/values.yaml")) or {}
    objects: list[dict[str, Any]] = []
    for path in files:
        rel = path[len(chart_dir) + 1 :]
        if rel.startswith(("templates/", "crds/")) and rel.endswith((".yaml", ".yml")):
            objects += _objects(rel, _git("show", f"{tag}:{path}"))
    read = sorted({m for o in objects for c in o["conditions"] for m in _VALUES.findall(c)})
    helpers = _git("show", f"{tag}:{chart_dir}/templates/_helpers.tpl") if (
        f"{chart_dir}/templates/_helpers.tpl" in files) else ""
    helper = r'define "[^"]*resourceApiVersion"'
    define = re.search(f"{helper}(.*?)define|{helper}(.*)", helpers, re.S)
    body = (define.group(1) or define.group(2)) if define else ""
    print(json.dumps({
        "chart": chart["name"], "version": chart["version"], "source": repo, "tag": tag,
        "commit": _git("rev-list", "-n1", tag).strip(),
        "command": f"python tests/data/charts/derive_chart_objects.py {chart_dir} {tag} {repo}",
        "values_defaults": {f".Values{p}": _lookup(values, p) for p in read},
        "resource_api_version_helper": _HELPER_APIS.findall(body),
        "objects": objects,
    }, indent=1))


if __name__ == "__main__":
    main(*sys.argv[1:])
