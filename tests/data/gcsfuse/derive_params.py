"""Derive the facts tests/test_gcsfuse_options.py reads from gcsfuse's own sources.

Run inside a clone of github.com/GoogleCloudPlatform/gcsfuse:
    python <this file> v3.2.7 v3.3.0 v3.4.0 v3.4.4 v3.5.6 v3.5.9 v3.6.0 v3.8.2 v3.11.2 > params.json

Per tag: every flag of cfg/params.yaml as [config-path, type, high-performance tuning value or
null], and whether cmd/root.go hands ApplyOptimizations a pflag-only "is set" check
(`pflagAsIsValueSet`), under which a config-file value is overridden by the machine-type tuning
(gcsfuse docs/troubleshooting.md, "configuration file ... do not seem to take effect").
Only derived facts are kept, no text of gcsfuse.
"""

import json
import subprocess
import sys

import yaml


def _show(tag: str, path: str) -> str:
    return subprocess.check_output(["git", "show", f"{tag}:{path}"], text=True)


def _version(tag: str) -> dict[str, object]:
    doc = yaml.safe_load(_show(tag, "cfg/params.yaml"))
    groups = doc.get("machine-type-groups", {}) if isinstance(doc, dict) else {}
    params = {}
    for p in doc["params"] if isinstance(doc, dict) else doc:
        if not p.get("flag-name"):
            continue
        tuning = (p.get("optimizations") or {}).get("machine-based-optimization") or []
        value = [o["value"] for o in tuning if o["group"] == "high-performance"]
        params[p["flag-name"]] = [p.get("config-path"), p["type"], value[0] if value else None]
    return {
        "commit": subprocess.check_output(["git", "rev-list", "-n1", tag], text=True).strip(),
        "tuning_checks_flags_only": "pflagAsIsValueSet{" in _show(tag, "cmd/root.go"),
        # Empty before v3.4.0, where the group was Go code (cfg/optimize.go), not params.yaml.
        "high_performance_machine_types": groups.get("high-performance", []),
        "params": params,
    }


def main(tags: list[str]) -> None:
    lines = [
        "{",
        ' "source": "github.com/GoogleCloudPlatform/gcsfuse cfg/params.yaml, cmd/root.go",',
        f' "command": "python tests/data/gcsfuse/derive_params.py {" ".join(tags)}",',
        ' "versions": {',
    ]
    for i, tag in enumerate(tags):
        v = _version(tag)
        keys = ("commit", "tuning_checks_flags_only", "high_performance_machine_types")
        head = {k: v[k] for k in keys}
        lines.append(f'  "{tag}": {json.dumps(head)[:-1]}, "params": {{')
        items = sorted(v["params"].items())  # type: ignore[union-attr]
        for j, (name, facts) in enumerate(items):
            comma = "," if j < len(items) - 1 else ""
            lines.append(f"   {json.dumps(name)}: {json.dumps(facts)}{comma}")
        lines.append("  }}" + ("," if i < len(tags) - 1 else ""))
    lines += [" }", "}"]
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1:])
