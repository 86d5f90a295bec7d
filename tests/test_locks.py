"""The hash locks agree with the edited requirements files, and CI installs them in pip's
hash-checking mode (pip "Secure installs": with --require-hashes every requirement must be
pinned with == and carry at least one --hash, or pip refuses the whole install). torch alone
is installed by version (requirements-torch.txt): the same version is a different wheel on
PyPI (CUDA build) and on a CPU wheel mirror (`+cpu` local version, PEP 440), so no hash in a
lock holds on both."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import Specifier
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
LOCKS = {"requirements.txt": "requirements.lock", "requirements-dev.txt": "requirements-dev.lock"}
TORCH = "requirements-torch.txt"
# A lock entry: `name==version \` then `--hash=sha256:...` lines, then pip-compile's `# via`.
_ENTRY = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>\S+?)(?: \\)?$")
_HASH = re.compile(r"^\s+--hash=sha256:[0-9a-f]{64}(?: \\)?$")


def _pins(path: Path) -> dict[str, Specifier]:
    """Every pin of a requirements file, following `-r` includes."""
    found: dict[str, Specifier] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r "):
            found.update(_pins(path.parent / line[3:].strip()))
        elif line:
            requirement = Requirement(line)
            (specifier,) = requirement.specifier
            assert specifier.operator == "==", f"{path.name}: {line} is not pinned with =="
            found[canonicalize_name(requirement.name)] = specifier
    return found


def _lock(path: Path) -> tuple[dict[str, str], dict[str, int], set[str]]:
    """(version, hash count and the names `# via -r` a requirements file) of each lock entry."""
    versions: dict[str, str] = {}
    hashes: dict[str, int] = {}
    direct: set[str] = set()
    current = ""
    for line in path.read_text().splitlines():
        entry = _ENTRY.match(line)
        if entry:
            current = canonicalize_name(entry["name"])
            versions[current], hashes[current] = entry["version"], 0
        elif _HASH.match(line):
            hashes[current] += 1
        elif re.match(r"^\s+#\s+(via )?-r requirements", line):
            direct.add(current)
        else:
            assert not line.strip() or line.lstrip().startswith("#"), f"{path.name}: {line!r}"
    return versions, hashes, direct


@pytest.mark.parametrize(("source", "lock"), LOCKS.items())
def test_lock_pins_exactly_the_edited_requirements(source: str, lock: str) -> None:
    pins = _pins(ROOT / source)
    versions, _, direct = _lock(ROOT / lock)
    # A pin of the .txt is locked at a version it admits, and nothing the lock takes straight
    # from a .txt is gone from it.
    for name, specifier in pins.items():
        assert name in versions, f"{lock} lacks {name}: regenerate it (docs/development.md)"
        assert specifier.contains(versions[name], prereleases=True), (name, versions[name])
    assert direct == set(pins), f"{lock} and {source} list different packages"


@pytest.mark.parametrize("lock", LOCKS.values())
def test_every_locked_package_has_a_hash_and_no_index_is_recorded(lock: str) -> None:
    text = (ROOT / lock).read_text()
    _, hashes, _ = _lock(ROOT / lock)
    assert hashes and all(count > 0 for count in hashes.values()), lock
    assert not re.search(r"--(extra-)?index-url|--find-links|-f |https?://|file://", text)


def test_the_dev_lock_installs_the_runtime_lock_versions() -> None:
    # CI tests the versions `pulumi up` installs from requirements.lock.
    runtime, _, _ = _lock(ROOT / "requirements.lock")
    dev, _, _ = _lock(ROOT / "requirements-dev.lock")
    assert {name: dev.get(name) for name in runtime} == runtime


def test_torch_is_outside_the_locks_and_installed_by_version_after_them() -> None:
    # A hash pins one wheel file; torch's wheel for a version differs per machine (see above).
    pins = _pins(ROOT / TORCH)
    assert set(pins) == {"torch"}, f"{TORCH} is for torch alone: {sorted(pins)}"
    for lock in LOCKS.values():
        versions, _, _ = _lock(ROOT / lock)
        held = sorted(n for n in versions if n in pins or n.startswith("nvidia-"))
        assert not held, f"{lock} locks {held}: they belong in {TORCH} only"
    for source in LOCKS:
        assert "torch" not in _pins(ROOT / source), f"{source} pins torch: it belongs in {TORCH}"
    # .ci/setup (which .ci/run calls) chains its install commands with `&&`.
    setup = (ROOT / ".ci" / "setup").read_text().splitlines()
    lines = [line.strip().removesuffix(" &&") for line in setup]
    pip = ".venv/bin/python -m pip install --quiet"
    locked = lines.index(f"{pip} --require-hashes -r requirements-dev.lock")
    by_version = f"{pip} -r {TORCH}"
    assert by_version in lines, f".ci/setup does not install {TORCH}"
    assert lines.index(by_version) > locked, f".ci/setup installs {TORCH} before the lock"
    # `==X` without a local label admits both builds, `X` and `X+cpu` (PEP 440, version
    # matching); a pin with `+cpu` would find nothing on PyPI.
    (specifier,) = pins.values()
    assert "+" not in specifier.version, f"{TORCH}: pin torch without a local build label"


def test_ci_installs_the_locks_in_hash_checking_mode() -> None:
    ci = (ROOT / ".ci" / "setup").read_text() + (ROOT / ".ci" / "run").read_text()
    workflow = (ROOT / ".github" / "workflows" / "pull-request.yml").read_text()
    assert "pip install --quiet --require-hashes -r requirements-dev.lock" in ci
    assert "pip install --require-hashes -r requirements.lock" in workflow
    assert not re.search(r"pip install[^\n]*-r requirements(-dev)?\.txt", ci + workflow)
    # The locks are resolved for the Python CI runs (pip-compile records it in the header).
    (python,) = set(re.findall(r'python-version: "([0-9.]+)"', workflow))
    for lock in LOCKS.values():
        assert f"pip-compile with Python {python}\n" in (ROOT / lock).read_text()
