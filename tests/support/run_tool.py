"""`python -m tools.run` as a user runs it: a subprocess in the project folder, and its text
report read back as label -> value."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# What would point the tool at another head or give it credentials the test did not choose
# (Ray's own address and token-auth variables: ray/_private/authentication, Ray 2.49+).
FOREIGN_ENV = ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
TOOL_TIMEOUT_S = 180


def tool(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -m tools.run *args` with this environment less FOREIGN_ENV, plus env."""
    environment = {k: v for k, v in os.environ.items() if k not in FOREIGN_ENV}
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "tools.run", *args],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=TOOL_TIMEOUT_S,
        check=False,
    )


def rows(stdout: str) -> dict[str, str]:
    """The text report as label -> value (labels are left-aligned, two spaces before values)."""
    table: dict[str, str] = {}
    for line in stdout.splitlines():
        label, _, value = line.partition("  ")
        table.setdefault(label.strip(), value.strip())
    return table
