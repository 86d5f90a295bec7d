"""Every GCS FUSE mount option we set is one gcsfuse accepts, and is the value gcsfuse uses.

Rules of the receiving systems, from their sources (facts derived into
tests/data/gcsfuse/params.json by tests/data/gcsfuse/derive_params.py):
- The CSI driver turns a mount option with ':' and no '=' into a config-file key (the part
  before the last ':', its levels split at ':'), and any other option into the flag
  `--name[=value]` (gcs-fuse-csi-driver pkg/sidecar_mounter/sidecar_mounter_config.go
  prepareMountArgs at 5fcdc04a); `read_ahead_kb=` is the driver's own (pkg/util/util.go) and
  never reaches gcsfuse.
- gcsfuse knows the flags and config paths of its cfg/params.yaml, and rejects a config file
  key it does not know (cmd/root.go: mapstructure ErrorUnused).
- On a machine of the "high-performance" group (A3 Ultra, A4, A4X) gcsfuse tunes some settings
  (cfg/params.yaml `machine-based-optimization`, e.g. metadata TTL -1). In v3.4.0 to v3.5.9 the
  tuning asks only whether the *flag* was set (cmd/root.go `pflagAsIsValueSet`), so a value from
  the config file is overridden (gcsfuse docs/troubleshooting.md names v3.4.0-v3.5.6; the 3.5
  maintenance tags v3.5.7-v3.5.9 keep the same code). From v3.6.0 config-file values are kept.
The versions: those the GCS FUSE CSI driver's releases ship (cmd/sidecar_mounter/gcsfuse_binary
at its tags v1.17.12 ... v1.24.x: v3.2.7 ... v3.11.2, the 3.5 line still in v1.21.30, v3.8.2 the
most often shipped), a GKE patch's driver version being GKE's to choose, so each line is checked
(first and last of the lines where the rules change).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from config.profiles import PROFILES
from tests.program import COMBINATIONS, plan

PV = "kubernetes:core/v1:PersistentVolume"
GCSFUSE_DRIVER = "gcsfuse.csi.storage.gke.io"
FACTS = json.loads((Path(__file__).parent / "data" / "gcsfuse" / "params.json").read_text())
VERSIONS: dict[str, Any] = FACTS["versions"]
# Options the CSI driver consumes itself (pkg/util/util.go readAheadKBMountFlag).
DRIVER_OPTIONS = ("read_ahead_kb",)


def parse_option(option: str) -> tuple[str, str, str]:
    """("flag" | "config", the flag name or the dotted config path, the value), as the driver
    splits it (sidecar_mounter_config.go prepareMountArgs)."""
    if "=" not in option and ":" in option and "https" not in option:
        key, value = option.rsplit(":", 1)
        return "config", key.replace(":", "."), value
    name, _, value = option.partition("=")
    return "flag", name, value


def _param(version: dict[str, Any], form: str, key: str) -> tuple[str, list[Any]] | None:
    params: dict[str, list[Any]] = version["params"]
    if form == "flag":
        return (key, params[key]) if key in params else None
    found = [(flag, facts) for flag, facts in params.items() if facts[0] == key]
    return found[0] if found else None


def _valid(kind: str, form: str, value: str) -> bool:
    if kind == "bool":
        return value in ("true", "false") or (form == "flag" and value == "")
    if kind == "int":
        # -1 means unlimited / no TTL; below -1 is refused (cfg/validate.go, params.yaml usage).
        return value.lstrip("-").isdigit() and int(value) >= -1
    return value != ""


def effective(options: list[str], version: dict[str, Any], machine: str) -> dict[str, str]:
    """The value gcsfuse runs with, per flag we set: a flag wins; a config-file value is replaced
    by the machine-type tuning where that version lets it (see the module docstring)."""
    tuned = machine in version["high_performance_machine_types"]
    values: dict[str, str] = {}
    for option in options:
        form, key, value = parse_option(option)
        if key in DRIVER_OPTIONS:
            continue
        found = _param(version, form, key)
        assert found, f"{option!r}: no such gcsfuse {form} at this version"
        flag, (_, kind, tuning) = found
        overridden = form == "config" and tuned and version["tuning_checks_flags_only"]
        if overridden and tuning is not None:
            values[flag] = str(tuning).lower()
        else:
            values[flag] = "true" if kind == "bool" and value == "" else value
    return values


def _gcsfuse_pvs(stack: str, mode: str) -> dict[str, list[str]]:
    return {
        pv.inputs["metadata"]["name"]: list(pv.inputs["spec"]["mountOptions"])
        for pv in plan(stack, mode).of_type(PV)
        if pv.inputs["spec"]["csi"]["driver"] == GCSFUSE_DRIVER
    }


@pytest.mark.parametrize("tag", sorted(VERSIONS))
@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_every_mount_option_exists_in_gcsfuse_with_a_valid_value(
    stack: str, mode: str, tag: str
) -> None:
    version = VERSIONS[tag]
    for name, options in _gcsfuse_pvs(stack, mode).items():
        for option in options:
            form, key, value = parse_option(option)
            if key in DRIVER_OPTIONS:
                continue
            found = _param(version, form, key)
            assert found, f"{name}: {option!r} is no gcsfuse {tag} {form}"
            assert _valid(found[1][1], form, value), f"{name}: {option!r} ({found[1][1]}) at {tag}"


@pytest.mark.parametrize("tag", sorted(VERSIONS))
@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_machine_type_tuning_overrides_no_option_we_set(stack: str, mode: str, tag: str) -> None:
    """What the mount says is what gcsfuse runs with on the stack's GPU machine, at every version;
    in particular the checkpoint mount never caches metadata (verl rewrites its resume marker in
    place), which a config-file `metadata-cache:ttl-secs:0` does not give on v3.4.0-v3.5.9."""
    version = VERSIONS[tag]
    machine = PROFILES[stack].machine_type
    for name, options in _gcsfuse_pvs(stack, mode).items():
        written = effective(options, {**version, "high_performance_machine_types": []}, machine)
        assert effective(options, version, machine) == written, (name, tag)
        if name == "training-checkpoints-pv":
            assert written["metadata-cache-ttl-secs"] == "0"
            assert written["metadata-cache-negative-ttl-secs"] == "0"


def test_the_stacks_gpu_machines_are_tuned_by_the_affected_versions() -> None:
    """The rule above matters here: gcsfuse v3.5.9 tunes all three stacks' machine types, and
    overrides config-file values there."""
    version = VERSIONS["v3.5.9"]
    assert version["tuning_checks_flags_only"]
    assert not VERSIONS["v3.6.0"]["tuning_checks_flags_only"]
    for profile in ("a4x", "a4", "a3u"):
        assert PROFILES[profile].machine_type in version["high_performance_machine_types"]
    assert version["params"]["metadata-cache-ttl-secs"] == ["metadata-cache.ttl-secs", "int", -1]


def test_a_config_file_ttl_on_the_checkpoint_mount_is_overridden() -> None:
    """The mutation the rule exists for: the config-file form of ttl 0 becomes -1 on A4X."""
    options = ["implicit-dirs", "metadata-cache:ttl-secs:0"]
    values = effective(options, VERSIONS["v3.5.9"], "a4x-highgpu-4g")
    assert values["metadata-cache-ttl-secs"] == "-1"
    values = effective(options, VERSIONS["v3.6.0"], "a4x-highgpu-4g")
    assert values["metadata-cache-ttl-secs"] == "0"


# What gcsfuse runs with where neither our option nor its machine-type tuning sets a value.
UNTUNED = "gcsfuse's untuned default"


def _streaming_block_budget(options: list[str], version: dict[str, Any], machine: str) -> str:
    """write-global-max-blocks as gcsfuse runs it: our value if set, else the high-performance
    tuning where this version puts the machine in that group, else gcsfuse's default."""
    values = effective(options, version, machine)
    if "write-global-max-blocks" in values:
        return values["write-global-max-blocks"]
    tuning = version["params"]["write-global-max-blocks"][2]
    tuned = machine in version["high_performance_machine_types"] and tuning is not None
    return str(tuning) if tuned else UNTUNED


@pytest.mark.parametrize(("stack", "mode"), COMBINATIONS)
def test_streaming_writes_get_one_block_budget_at_every_shipped_version(
    stack: str, mode: str
) -> None:
    """A mount with streaming writes draws blocks from write-global-max-blocks and, once they are
    spent, stages files on the sidecar's disk (gcsfuse internal/fs/inode/file.go,
    CantAllocateAnyBlockError). gcsfuse sizes that budget by machine type, and A4 / A4X enter the
    high-performance group only in v3.5 (cfg/params.yaml machine-type-groups): the budget a
    mount gets must not depend on which gcsfuse GKE's driver ships."""
    machine = PROFILES[stack].machine_type
    for name, options in _gcsfuse_pvs(stack, mode).items():
        if "write:enable-streaming-writes:true" not in options:
            continue
        budgets = {_streaming_block_budget(options, VERSIONS[tag], machine) for tag in VERSIONS}
        assert len(budgets) == 1 and UNTUNED not in budgets, (name, budgets)


def test_a4_and_a4x_get_the_untuned_budget_from_older_gcsfuse() -> None:
    """The case the rule above exists for: without the option, A4X gets gcsfuse's default at
    v3.4.4 and the tuned 1600 at v3.5.9."""
    options = ["implicit-dirs", "write:enable-streaming-writes:true"]
    for machine in (PROFILES["a4x"].machine_type, PROFILES["a4"].machine_type):
        assert _streaming_block_budget(options, VERSIONS["v3.4.4"], machine) == UNTUNED
        assert _streaming_block_budget(options, VERSIONS["v3.5.9"], machine) == "1600"
