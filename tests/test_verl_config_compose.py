"""Every stack's GRPO command composes against verl's own Hydra config, and verl's own checks accept
it, at the verl release the stack runs.

The overrides are the ones the Ray job runs (`render_entrypoint`, split as the job's shell splits
it). tools/verl_compose_check.py composes them against the packaged `ppo_trainer` config of a real
verl wheel, as `main_ppo` does, then runs verl's `validate_config` and the worker-side config
dataclasses. It runs in an isolated virtualenv per verl release (requirements-verl-<version>.txt),
which .ci/run builds under .venv-verl/<version> and names in VERL_GKE_VERL_VENVS.

Which release stands for a stack's verl ref:
- v0.6.1 (A4, A3 Ultra) is a release: verl 0.6.1 from PyPI. Issue 8 also asks that all five jobs
  pass verl 0.6.1's checks, so the A4X job is composed there too.
- ddbcdb7 (A4X) is a commit on verl's main (2026-07-09, "[veomni] fix: use default moe param
  handler (#6993)"; `git describe`: v0.8.0-164-gddbcdb79f). Its nearest release is v0.9.0: v0.9.0
  contains it (134 commits later, against 164 since v0.8.0), its version file already reads
  0.9.0.dev, it declares v0.9.0's numpy>=2 floor, and its config has v0.9.0's `trainer.use_v1`
  switch, which v0.8.0 lacks. By changed lines of the generated ppo_trainer.yaml v0.8.0 is a
  little closer (64 against 83). Checked once by hand: the five jobs also compose and validate
  against the commit's own config code, and against v0.8.0.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from config.profiles import PROFILES, Mode
from tests.support.require import missing
from training.grpo_spec import (
    GrpoPreflightError,
    GrpoSpec,
    apply_overrides,
    default_grpo_spec,
    preflight,
    render_entrypoint,
)

VENVS_ENV = "VERL_GKE_VERL_VENVS"
REPO = Path(__file__).resolve().parents[1]
CHECK_SCRIPT = REPO / "tools" / "verl_compose_check.py"

# A profile's verl ref -> the PyPI release whose packaged config stands for it (module docstring).
RELEASE_FOR_REF = {"v0.6.1": "0.6.1", "ddbcdb7": "0.9.0"}
# Issue 8: every job also composes and validates against verl v0.6.1.
BASELINE_RELEASE = "0.6.1"
# Keys whose composed type may differ from the type of verl's default, and why.
TYPE_CHANGES_ALLOWED = {
    # The tutorial passes one backend; verl's Tracking wraps a string in a list.
    "trainer.logger": ("list", "str"),
}
STACKS = [(p.name, m) for p in PROFILES.values() for m in p.modes]
ALL_RELEASES = sorted({BASELINE_RELEASE, *RELEASE_FOR_REF.values()})


def _spec(profile: str, mode: Mode, **job: Any) -> GrpoSpec:
    p = PROFILES[profile]
    return apply_overrides(default_grpo_spec(p, mode, p.default_gpu_nodes), job)


def _overrides(spec: GrpoSpec) -> list[str]:
    """main_ppo's arguments as the Ray job's shell hands them over."""
    args = shlex.split(render_entrypoint(spec))
    assert args[:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    return args[3:]


def _releases(profile: str) -> list[str]:
    # A ref missing from RELEASE_FOR_REF fails test_every_profile_ref_has_a_release.
    release = RELEASE_FOR_REF.get(PROFILES[profile].verl_ref)
    return sorted({BASELINE_RELEASE, *([release] if release else [])})


def _cases(release: str) -> dict[str, list[str]]:
    """Every job that must pass at `release`, plus the negative cases."""
    cases = {f"{p}:{m}": _overrides(_spec(p, m)) for p, m in STACKS if release in _releases(p)}
    cases["misspelled-key"] = [*_overrides(_spec("a4", Mode.STANDARD)), "trainer.nnode=2"]
    cases["batch-does-not-split"] = _overrides(_unsplittable_batch())
    return cases


def _unsplittable_batch() -> GrpoSpec:
    # 3 nodes x 8 GPUs: 256 prompts x 8 responses = 2048 does not split over 24 GPUs.
    return _spec("a4", Mode.STANDARD, nnodes=3)


def _require_venv(release: str) -> None:
    root = os.environ.get(VENVS_ENV)
    if not root:
        reason = (
            f"{VENVS_ENV} is unset: the verl config compose check needs the isolated verl "
            f"virtualenvs that .ci/run builds (.venv-verl/<version> from "
            f"requirements-verl-<version>.txt)"
        )
        missing(reason)
    python = Path(root) / release / "bin" / "python"
    if not python.is_file():
        pytest.fail(
            f"{VENVS_ENV}={root} has no virtualenv for verl {release} ({python} is missing); "
            f"build it as .ci/run does: python3 -m venv {Path(root) / release} && {python} -m "
            f"pip install -r requirements-verl-{release}.txt && {python} -m pip install "
            f"--no-deps verl=={release}"
        )


@cache
def _reports() -> dict[str, dict[str, Any] | str]:
    """Each release's report, or why it gave none. The check scripts of all releases run at
    once, one interpreter each: importing verl (torch, ray, transformers) takes seconds."""
    root = Path(os.environ[VENVS_ENV])
    running = {}
    for release in ALL_RELEASES:
        python = root / release / "bin" / "python"
        if python.is_file():
            # The request goes in as a file: each script reads all of stdin before it imports
            # verl, so a pipe fed one process after another would serialise them.
            request = tempfile.TemporaryFile("w+")
            json.dump({"cases": _cases(release)}, request)
            request.seek(0)
            running[release] = subprocess.Popen(
                [str(python), str(CHECK_SCRIPT)],
                stdin=request,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=REPO,
            )
            request.close()  # the child holds its own descriptor
    reports: dict[str, dict[str, Any] | str] = {}
    for release, process in running.items():
        stdout, stderr = process.communicate()
        # 1 means a case was rejected (the negative cases are); anything else is no verdict.
        if process.returncode in (0, 1):
            reports[release] = json.loads(stdout)
        else:
            reports[release] = f"exit {process.returncode}:\n{stderr[-4000:]}"
    return reports


def _verdict(release: str, case: str) -> dict[str, Any]:
    _require_venv(release)
    report = _reports()[release]
    assert not isinstance(report, str), f"{CHECK_SCRIPT.name} under verl {release}: {report}"
    assert report["verl_version"] == release, "the virtualenv holds another verl release"
    return report["results"][case]


def test_every_profile_ref_has_a_release() -> None:
    refs = {p.verl_ref for p in PROFILES.values()}
    missing = refs - set(RELEASE_FOR_REF)
    assert not missing, (
        f"verl refs {sorted(missing)} have no release to compose against: add the nearest "
        f"release to RELEASE_FOR_REF and a requirements-verl-<version>.txt for it"
    )
    # .ci/run builds one virtualenv per requirements-verl-<release>.txt.
    built = {
        p.name[len("requirements-verl-") : -len(".txt")]
        for p in REPO.glob("requirements-verl-*.txt")
    }
    assert set(ALL_RELEASES) <= built


@pytest.mark.parametrize(
    ("profile", "mode", "release"),
    [(p, m, r) for p, m in STACKS for r in _releases(p)],
    ids=lambda v: str(v),
)
def test_job_composes_and_validates(profile: str, mode: Mode, release: str) -> None:
    verdict = _verdict(release, f"{profile}:{mode}")
    assert verdict["ok"], f"verl {release} rejects the {profile} {mode} job: {verdict['error']}"
    overrides = _overrides(_spec(profile, mode))
    assert set(verdict["values"]) == {o.split("=", 1)[0] for o in overrides}
    for key, value in verdict["values"].items():
        default, composed = value["default_type"], value["type"]
        if default in ("NoneType", composed) or TYPE_CHANGES_ALLOWED.get(key) == (
            default,
            composed,
        ):
            continue
        pytest.fail(f"{key}: verl {release}'s default is a {default}, the job passes a {composed}")


@pytest.mark.parametrize("release", ALL_RELEASES)
def test_a_misspelled_key_is_rejected_by_compose(release: str) -> None:
    verdict = _verdict(release, "misspelled-key")
    assert not verdict["ok"]
    assert verdict["stage"] == "compose"
    assert "trainer.nnode" in verdict["error"]


@pytest.mark.parametrize("release", ALL_RELEASES)
def test_verl_and_our_preflight_both_reject_a_batch_that_does_not_split(release: str) -> None:
    verdict = _verdict(release, "batch-does-not-split")
    assert not verdict["ok"]
    assert verdict["stage"] == "validate"
    assert "real_train_batch_size (2048)" in verdict["error"]
    # Our preflight refuses the same job on 3 provisioned nodes before any resource exists.
    with pytest.raises(GrpoPreflightError, match="trainBatchSize"):
        preflight(_unsplittable_batch(), gpus_per_node_provisioned=8, gpu_nodes_provisioned=3)


def test_the_check_script_refuses_a_malformed_request() -> None:
    # Runs under the project's interpreter: input is checked before verl is imported.
    done = subprocess.run(
        [sys.executable, str(CHECK_SCRIPT)],
        input=json.dumps({"cases": {"x": "trainer.nnodes=2"}}),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "'cases' must map names to lists of override strings" in done.stderr
