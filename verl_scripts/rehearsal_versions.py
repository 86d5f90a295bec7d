"""Step 7 of the rehearsal: the environment's packages against verl's (and vLLM's) declared
requirements, read from the verl that runs.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import sys
from pathlib import Path
from typing import Any

from rehearsal_common import problem_entry

# Packages whose installed version is held against verl's (and vLLM's) declared requirements.
CHECKED_PACKAGES = ("vllm", "transformers", "torch", "tensordict", "numpy", "torchdata")


def installed(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _requires(package: str) -> list[str]:
    """The distribution's Requires-Dist lines; none when it is not installed."""
    try:
        return importlib.metadata.requires(package) or []
    except importlib.metadata.PackageNotFoundError:
        return []


def versions_and_requirements(
    config: Any, offline: bool, record: dict[str, Any], problems: list[dict[str, Any]]
) -> None:
    from packaging.requirements import Requirement

    record["versions"] = {p: installed(p) for p in ("verl", "vllm", "transformers", "torch")}
    imported = imported_verl_version()
    record["verl"] = record["versions"]["verl"] = imported
    rollout = str(config.actor_rollout_ref.rollout.name) if config is not None else "vllm"
    declared = [*_verl_requirements(imported, rollout, record["notes"])]
    declared += [("vllm", r, {"extra": ""}) for r in _requires("vllm")]
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for owner, text, environment in declared:
        requirement = Requirement(text)
        name = requirement.name.lower()
        if name not in CHECKED_PACKAGES:
            continue
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue
        if environment["extra"] and requirement.marker is None:
            continue  # a base requirement, already taken
        found = installed(name)
        ok = None if found is None else requirement.specifier.contains(found, prereleases=True)
        row = {"package": name, "required": str(requirement.specifier) or "any", "found": found}
        rows[(name, row["required"])] = {**row, "by": owner, "ok": ok}
    record["requirements"] = list(rows.values())
    for row in record["requirements"]:
        required = f"{row['by']} requires {row['package']}{row['required']}"
        if row["ok"] is False:
            problems.append(
                problem_entry(
                    "verl-gke:verlImage",
                    f"{row['package']}=={row['found']}",
                    f"{required}; the image has {row['found']} (importlib.metadata)",
                    f"an image with {row['package']}{row['required']}: pulumi config set "
                    "verl-gke:verlImage <that image>",
                )
            )
        elif row["found"] is None:
            message = f"{required}; {row['package']} is not installed here"
            if offline:
                record["notes"].append(message + " (a local verl virtualenv, not the image)")
            else:
                problems.append(
                    problem_entry(
                        "verl-gke:verlImage",
                        None,
                        message,
                        f"an image with {row['package']}{row['required']}: pulumi config set "
                        "verl-gke:verlImage <that image>",
                    )
                )


def _verl_requirements(
    imported: str | None, rollout: str, notes: list[str]
) -> list[tuple[str, str, dict[str, str]]]:
    """verl's base requirements and its extra for the rollout engine (verl's setup.py
    extras_require has one per engine, "vllm" and "sglang" at v0.6.1 and v0.9.0), as declared by
    the verl that runs: a source tree (verlSource=checkout: a checkout on PYTHONPATH, without
    installed metadata) is asked through its own packaging (source_tree_requires); otherwise the
    installed distribution, when it is the verl that runs."""
    root = verl_source_tree()
    if root is not None:
        requires, why_not = source_tree_requires(root)
        if requires is None:
            notes.append(f"verl's declared requirements were not checked: {why_not}")
            return []
        notes.append(
            f"verl's declared requirements: `setup.py egg_info` on a copy of {root}'s "
            "packaging files (the verl that runs is that source tree)"
        )
    elif installed("verl") == imported:
        requires = _requires("verl")
    else:
        notes.append(
            f"verl's declared requirements were not checked: the verl that runs ({imported}, "
            f"verl.__version__) has neither installed metadata of its own (the installed verl "
            f"distribution: {installed('verl')}) nor a setup.py beside it; vLLM's own "
            "requirements were checked"
        )
        return []
    return [("verl", r, {"extra": ""}) for r in requires] + [
        ("verl", r, {"extra": rollout}) for r in requires
    ]


def verl_source_tree() -> Path | None:
    """The folder holding the imported verl package when it is a source tree (a setup.py or
    pyproject.toml beside the package, as in a git checkout); None for an installed verl."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations))).resolve().parent
    if (root / "setup.py").is_file() or (root / "pyproject.toml").is_file():
        return root
    return None


def source_tree_requires(root: Path) -> tuple[list[str] | None, str]:
    """The Requires-Dist lines of a verl source tree, as pip would read them: setuptools'
    `egg_info` command, run on a temporary copy of the tree's top-level files (setup.py,
    pyproject.toml, README.md, requirements*.txt) and verl/version/ (verl's setup.py reads
    verl/version/version and README.md, at v0.6.1 and v0.9.0), since the checkout is read-only
    in the pods. Returns (lines, "") or (None, why not)."""
    import shutil
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="verl-packaging-") as temporary:
        copy, egg_base = Path(temporary) / "source", Path(temporary) / "egg-info"
        copy.mkdir()
        egg_base.mkdir()
        for entry in root.iterdir():
            if entry.is_file():
                shutil.copy2(entry, copy / entry.name)
        if (root / "verl" / "version").is_dir():
            shutil.copytree(root / "verl" / "version", copy / "verl" / "version")
        # A pyproject.toml-only tree: setuptools' setup() reads it.
        setup = (
            ["setup.py"]
            if (copy / "setup.py").is_file()
            else ["-c", "import setuptools as s; s.setup()"]
        )
        done = subprocess.run(
            [sys.executable, *setup, "--quiet", "egg_info", "--egg-base", str(egg_base)],
            cwd=copy,
            capture_output=True,
            text=True,
            timeout=300,
        )
        found = sorted(egg_base.glob("*.egg-info"))
        if done.returncode != 0 or not found:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            return None, f"`setup.py egg_info` on a copy of {root} failed: {tail}"
        # importlib.metadata reads an egg-info's requires.txt as Requires-Dist lines.
        return list(importlib.metadata.PathDistribution(found[0]).requires or []), ""


def imported_verl_version() -> str | None:
    """The version of the verl `import verl` finds (its verl/version/version file)."""
    try:
        import verl
    except ImportError:
        return None
    return str(getattr(verl, "__version__", None) or "") or None
