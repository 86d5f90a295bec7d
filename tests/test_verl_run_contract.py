"""What the GRPO job sends to verl and Ray, run through verl's and Ray's own code.

verl's code runs in the isolated verl virtualenvs (verl_scripts/verl_run_probe.py; see
tests/test_verl_config_compose.py for which release stands for each stack's verl ref):
- the rendered trainer.logger, composed by verl's Hydra config and given to verl's Tracking
  (verl/utils/tracking.py), prints the `step:N` line the job provider's step parser reads,
  whatever loggers the user set;
- the file logger writes where the job says (VERL_FILE_LOGGER_PATH) and opens it with "w", so the
  runner keeps each attempt's file;
- verl's driver runtime env (get_ppo_ray_runtime_env, verl/trainer/constants_ppo.py), computed in
  the job's environment, merges with the job's runtime env under Ray's own merge function
  (ray/runtime_env/runtime_env.py _merge_runtime_env, which ray/_private/worker.py init calls
  and raises ValueError on None);
- the memory model's vLLM max_num_seqs default is verl's rollout config default.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from ray.runtime_env.runtime_env import _merge_runtime_env

from config.profiles import PROFILES, Mode
from jobs import verl_log
from tests.test_verl_config_compose import RELEASE_FOR_REF, STACKS, _overrides, _require_venv
from training.grpo_spec import (
    DRIVER_SET_ENV,
    LOGGER_BACKENDS,
    GrpoSpec,
    apply_overrides,
    default_grpo_spec,
    render_runtime_env,
    resume_identity,
    training_argv,
)
from training.memory_fit import VLLM_MAX_NUM_SEQS_DEFAULT
from training.model_export import runner_job
from training.run_life import checkpoints_to_keep, run_length

# Runs verl's trainer code in the verl virtualenvs and the runner (subprocesses).
pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[1]
PROBE = REPO / "verl_scripts" / "verl_run_probe.py"
RUNNER = REPO / "payloads" / "export" / "run_grpo.py"
RELEASES = sorted(set(RELEASE_FOR_REF.values()))
STEP_1 = {"training/global_step": 1, "timing_s/step": 12.5, "actor/pg_loss": -0.25}
LOGGER_CASES = {"file": ["file"], "file,console": ["file", "console"], "console": ["console"]}
# Where the probes' file loggers write (VERL_FILE_LOGGER_PATH), one file per case.
_SCRATCH = Path(tempfile.mkdtemp(prefix="verl-run-probe-"))


def _python(release: str) -> Path:
    _require_venv(release)
    return Path(os.environ["VERL_GKE_VERL_VENVS"]) / release / "bin" / "python"


def _base_env() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/")}


def _tracking_request(overrides: list[str], metrics: Path) -> dict[str, Any]:
    return {
        "probe": "tracking",
        "overrides": overrides,
        "steps": [{"step": 1, "data": STEP_1}],
        "env": {"VERL_FILE_LOGGER_PATH": str(metrics)},
    }


def _logger_override(spec: GrpoSpec) -> list[str]:
    return [o for o in _overrides(spec) if o.startswith("trainer.logger=")]


def _requests(release: str) -> dict[str, dict[str, Any]]:
    """Every probe this module needs at `release`, by name."""
    requests = {
        f"logger:{name}": _tracking_request(
            _logger_override(_spec(logger=loggers)), _SCRATCH / release / f"{name}.jsonl"
        )
        for name, loggers in LOGGER_CASES.items()
    }
    # `trainer.logger=file` as a user's setting was sent before rendered_loggers.
    requests["raw:file"] = _tracking_request(
        ["trainer.logger=file"], _SCRATCH / release / "raw.jsonl"
    )
    for profile, mode in STACKS:
        if RELEASE_FOR_REF[PROFILES[profile].verl_ref] == release:
            requests[f"driver:{profile}:{mode}"] = _driver_request(_job_runtime_env(profile, mode))
    job_env = _job_runtime_env("a4x", Mode.STANDARD)
    job_env["env_vars"] = {**job_env["env_vars"], "PYTHONHASHSEED": "0"}
    requests["driver:with-PYTHONHASHSEED"] = _driver_request(job_env)
    requests["rollout"] = {"probe": "rollout_defaults"}
    return requests


def _driver_request(job_env: dict[str, Any]) -> dict[str, Any]:
    # verl's driver is the training command, started by the runner in the job's environment.
    return {"probe": "driver_env", "job_runtime_env": job_env, "env": job_env["env_vars"]}


@cache
def _results() -> dict[str, dict[str, Any]]:
    """Each release's probe results by request name: one interpreter per release, run at once
    (importing verl, torch and ray takes a while)."""
    running = {}
    for release in RELEASES:
        python = Path(os.environ.get("VERL_GKE_VERL_VENVS", "/nonexistent")) / release / "bin"
        if not (python / "python").is_file():
            continue
        (_SCRATCH / release).mkdir(parents=True, exist_ok=True)
        names, requests = zip(*_requests(release).items(), strict=True)
        request_file = _SCRATCH / f"{release}-requests.json"
        request_file.write_text(json.dumps({"requests": list(requests)}))
        process = subprocess.Popen(
            [str(python / "python"), str(PROBE), str(request_file)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_base_env(),
            cwd=REPO,
        )
        running[release] = (names, process)
    results = {}
    for release, (names, process) in running.items():
        stdout, stderr = process.communicate(timeout=900)
        assert process.returncode == 0, f"verl {release} probe failed: {stderr[-3000:]}"
        report = json.loads(stdout.strip().splitlines()[-1])
        assert report["verl_version"] == release
        results[release] = dict(zip(names, report["results"], strict=True))
    return results


def _result(release: str, name: str) -> dict[str, Any]:
    _python(release)
    return _results()[release][name]


def _spec(profile: str = "a4", mode: Mode = Mode.STANDARD, **job: Any) -> GrpoSpec:
    p = PROFILES[profile]
    return apply_overrides(default_grpo_spec(p, mode, p.default_gpu_nodes), job)


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("case", sorted(LOGGER_CASES))
def test_every_logger_setting_makes_verl_print_the_step_line_we_parse(
    release: str, case: str
) -> None:
    result = _result(release, f"logger:{case}")
    assert "console" in result["logger"]
    steps = verl_log.training_steps(result["stdout"])
    assert [s.step for s in steps] == [1]
    assert steps[0].values["timing_s/step"] == 12.5
    # The file logger writes where the job's env says (VERL_FILE_LOGGER_PATH).
    if "file" in LOGGER_CASES[case]:
        written = (_SCRATCH / release / f"{case}.jsonl").read_text().splitlines()
        assert json.loads(written[0]) == {"step": 1, "data": STEP_1}


@pytest.mark.parametrize("release", RELEASES)
def test_without_console_verl_prints_no_step_line(release: str) -> None:
    # The rule rendered_loggers exists for: verl's Tracking prints step lines only through its
    # console backend.
    result = _result(release, "raw:file")
    assert result["logger"] in ("file", ["file"])
    assert verl_log.training_steps(result["stdout"]) == []


@pytest.mark.parametrize("release", RELEASES)
def test_logger_backends_are_verls(release: str) -> None:
    # Every backend the program accepts is one verl's Tracking supports (0.9.0 adds rl_insight,
    # which ddbcdb7, the A4X ref, does not have).
    assert set(LOGGER_BACKENDS) <= set(_result(release, "logger:console")["supported"])


def test_the_file_logger_path_is_in_the_run_folder() -> None:
    spec = _spec(logger=["console", "file", "tensorboard"])
    env = render_runtime_env(spec, PROFILES["a4"], Mode.STANDARD)["env_vars"]
    assert env["VERL_FILE_LOGGER_PATH"] == f"{spec.default_local_dir}/metrics.jsonl"
    assert env["TENSORBOARD_DIR"] == f"{spec.default_local_dir}/tensorboard"


def _job_runtime_env(profile: str, mode: Mode) -> dict[str, Any]:
    spec = _spec(profile, mode)
    _, runtime_env = runner_job(
        training_argv(spec),
        render_runtime_env(spec, PROFILES[profile], mode),
        run_dir=spec.default_local_dir,
        identity=resume_identity(spec),
        export_experiment=spec.experiment_name,
        length=run_length(spec),
        keep_checkpoints=checkpoints_to_keep(spec),
    )
    return runtime_env


@pytest.mark.parametrize(("profile", "mode"), STACKS)
def test_ray_merges_the_job_env_with_verls_driver_env(profile: str, mode: Mode) -> None:
    release = RELEASE_FOR_REF[PROFILES[profile].verl_ref]
    job_env = _job_runtime_env(profile, mode)
    driver = _result(release, f"driver:{profile}:{mode}")["driver_runtime_env"]
    merged = _merge_runtime_env(job_env, driver)
    assert merged is not None, f"Ray refuses: job {job_env} and driver {driver} share a key"
    assert merged["env_vars"]["PYTHONPATH"] == job_env["env_vars"]["PYTHONPATH"]


def test_a_key_set_by_both_makes_ray_refuse() -> None:
    # The failure the test above guards against, with verl 0.9.0's driver, which forwards
    # PYTHONHASHSEED when the job sets it.
    job_env = _job_runtime_env("a4x", Mode.STANDARD)
    job_env["env_vars"] = {**job_env["env_vars"], "PYTHONHASHSEED": "0"}
    driver = _result("0.9.0", "driver:with-PYTHONHASHSEED")["driver_runtime_env"]
    assert _merge_runtime_env(job_env, driver) is None


def test_driver_set_keys_are_refused_in_the_job_env() -> None:
    profile = PROFILES["a4x"]
    assert "PYTHONHASHSEED" in DRIVER_SET_ENV[profile.verl_ref]
    nccl = {**profile.nccl_env[Mode.STANDARD], "PYTHONHASHSEED": "0"}
    broken = dataclasses.replace(profile, nccl_env={Mode.STANDARD: nccl})
    with pytest.raises(ValueError, match="PYTHONHASHSEED"):
        render_runtime_env(_spec("a4x"), broken, Mode.STANDARD)


@pytest.mark.parametrize(("ref", "release"), [("v0.6.1", "0.6.1"), ("v0.9.0", "0.9.0")])
def test_max_num_seqs_default_is_verls(ref: str, release: str) -> None:
    # ddbcdb7 (A4X) is not a release: its rollout.yaml says 1024 (verl-project/verl at ddbcdb7,
    # verl/trainer/config/rollout/rollout.yaml), unlike v0.9.0 which stands for it elsewhere.
    assert VLLM_MAX_NUM_SEQS_DEFAULT[ref] == _result(release, "rollout")["max_num_seqs"]


def test_each_attempts_metrics_survive_verls_file_logger(tmp_path: Path) -> None:
    # verl's FileLogger opens VERL_FILE_LOGGER_PATH with "w" (v0.6.1; "wb" at ddbcdb7): two
    # attempts through the runner, each training command being verl's own Tracking, leave both
    # attempts' lines.
    python = _python("0.6.1")
    run_dir = tmp_path / "run"
    metrics = run_dir / "metrics.jsonl"
    for attempt in (1, 2):
        request = _tracking_request(["trainer.logger=[console,file]"], metrics)
        request["steps"] = [{"step": attempt, "data": STEP_1}]
        request_file = tmp_path / f"attempt-{attempt}.json"  # another command each time
        request_file.write_text(json.dumps({"requests": [request]}))
        # A longer run each time: a finished run of the same length is not trained again.
        length = json.dumps({"total_epochs": attempt})
        command = [
            sys.executable, str(RUNNER), "--run-dir", str(run_dir), "--identity", "{}",
            "--length", length, "--", str(python), str(PROBE), str(request_file),
        ]  # fmt: skip
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env=_base_env(),
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
    kept = run_dir / "metrics" / "attempt-001.jsonl"
    assert json.loads(kept.read_text().splitlines()[0])["step"] == 1
    assert json.loads(metrics.read_text().splitlines()[0])["step"] == 2
