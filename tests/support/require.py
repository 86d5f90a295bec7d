"""Tests that need something the machine may lack (a CRD folder, a virtualenv, a tool).

Locally such a test is skipped with the reason; in CI (the environment variable CI is "true", as
GitHub Actions sets it and .ci/run exports it) it fails with the same reason, so that a missing
prerequisite can never turn a CI run green by skipping the check. Every such prerequisite is one
that `bash .ci/setup` (the README's set-up command) installs into the clone, where the tests find
it unless the environment variable names another place (`use_local_prerequisites`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import pytest

CI_ENV = "CI"
SETUP_COMMAND = "bash .ci/setup"
# The environment variable each prerequisite is read from -> the folder of the clone .ci/setup
# fills with it.
LOCAL_FOLDERS = {
    "VERL_GKE_CRDS_DIR": ".crds",
    "VERL_GKE_VERL_VENVS": ".venv-verl",
    "VERL_GKE_RAY_VENVS": ".venv-ray",
}


def use_local_prerequisites(root: Path) -> None:
    """Points each unset variable of LOCAL_FOLDERS at its folder in the clone, when it exists."""
    for variable, folder in LOCAL_FOLDERS.items():
        if not os.environ.get(variable) and (root / folder).is_dir():
            os.environ[variable] = str(root / folder)


def in_ci() -> bool:
    return os.environ.get(CI_ENV) == "true"


def missing(reason: str) -> NoReturn:
    """Skip the calling test (locally) or fail it (CI), saying what is missing and how to get it."""
    reason = f"{reason} (`{SETUP_COMMAND}` installs it)"
    if in_ci():
        pytest.fail(f"{reason}; CI must provide it ({CI_ENV}=true: a skip here is a failure)")
    pytest.skip(reason)


def require(condition: object, reason: str) -> None:
    """Carry on when `condition` holds; otherwise `missing(reason)`."""
    if not condition:
        missing(reason)


VERL_VENVS_ENV = "VERL_GKE_VERL_VENVS"


def verl_python(release: str) -> Path:
    """The python of verl `release`'s virtualenv, <VERL_GKE_VERL_VENVS>/<release>/bin/python."""
    venvs = os.environ.get(VERL_VENVS_ENV)
    require(venvs, f"{VERL_VENVS_ENV} is unset: no verl {release} virtualenv")
    python = Path(str(venvs)) / release / "bin" / "python"
    require(python.is_file(), f"no verl {release} virtualenv: {python} is missing")
    return python


def verl_installed(release: str, pattern: str) -> Path:
    """The first path matching `pattern` (e.g. "verl/trainer", "verl-*.dist-info") in the
    site-packages of verl `release`'s virtualenv."""
    venv = verl_python(release).parent.parent
    found = sorted(venv.glob(f"lib/python3*/site-packages/{pattern}"))
    require(found, f"no {pattern} in the verl {release} virtualenv {venv}")
    return found[0]
