"""Tests that need something the machine may lack (a CRD folder, a virtualenv, a tool).

Locally such a test is skipped with the reason; in CI (the environment variable CI is "true", as
GitHub Actions sets it and .ci/run exports it) it fails with the same reason, so that a missing
prerequisite can never turn a CI run green by skipping the check.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

CI_ENV = "CI"


def in_ci() -> bool:
    return os.environ.get(CI_ENV) == "true"


def missing(reason: str) -> NoReturn:
    """Skip the calling test (locally) or fail it (CI), saying what is missing and how to get it."""
    if in_ci():
        pytest.fail(f"{reason}; CI must provide it ({CI_ENV}=true: a skip here is a failure)")
    pytest.skip(reason)


def require(condition: object, reason: str) -> None:
    """Carry on when `condition` holds; otherwise `missing(reason)`."""
    if not condition:
        missing(reason)
