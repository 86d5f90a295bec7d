"""bench/recovery.py runs from any clone: the scenarios find the clone's own virtualenvs (the
folders `bash .ci/setup` fills, tests/support/require.py LOCAL_FOLDERS) unless the environment
names others, and the bench says what is missing instead of failing inside Ray."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.require import LOCAL_FOLDERS

REPO = Path(__file__).resolve().parents[1]
PRINT_VENVS = (
    "from tests.support import recovery_scenarios as s; print(s.RAY_VENV); print(s.VERL_VENV)"
)


def _venvs(tmp_path: Path, **env: str) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if k not in LOCAL_FOLDERS}
    done = subprocess.run(
        [sys.executable, "-c", PRINT_VENVS], cwd=tmp_path, capture_output=True, text=True,
        env={**clean, "PYTHONPATH": str(REPO), **env}, timeout=120, check=True,
    )  # fmt: skip
    return done.stdout.split()


def test_the_scenarios_default_to_the_clones_own_virtualenvs(tmp_path: Path) -> None:
    assert _venvs(tmp_path) == [
        str(REPO / LOCAL_FOLDERS["VERL_GKE_RAY_VENVS"] / "2.49.0"),
        str(REPO / LOCAL_FOLDERS["VERL_GKE_VERL_VENVS"] / "0.6.1"),
    ]
    named = _venvs(tmp_path, VERL_GKE_RAY_VENVS="/r", VERL_GKE_VERL_VENVS="/v")
    assert named == ["/r/2.49.0", "/v/0.6.1"]


def test_the_bench_names_a_missing_ray_virtualenv_and_the_fix(tmp_path: Path) -> None:
    clean = {k: v for k, v in os.environ.items() if k not in LOCAL_FOLDERS}
    done = subprocess.run(
        [sys.executable, "-m", "bench.recovery", "--json"], cwd=REPO, capture_output=True,
        text=True, env={**clean, "VERL_GKE_RAY_VENVS": str(tmp_path)}, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"no Ray 2.49 virtualenv at {tmp_path / '2.49.0'}" in done.stderr
    assert "bash .ci/setup" in done.stderr
