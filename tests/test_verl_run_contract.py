"""What the GRPO job sends to verl and Ray, run through verl's and Ray's own code.

verl's code runs in the isolated verl virtualenvs (tools/verl_run_probe.py; see
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

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ray.runtime_env.runtime_env import _merge_runtime_env

from config.profiles import PROFILES, Mode
from jobs import verl_log
from payloads.export import run_grpo
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

REPO = Path(__file__).resolve().parents[1]
PROBE = REPO / "tools" / "verl_run_probe.py"
RELEASES = sorted(set(RELEASE_FOR_REF.values()))
STEP_1 = {"training/global_step": 1, "timing_s/step": 12.5, "actor/pg_loss": -0.25}


def _probe(release: str, request: dict[str, Any], env: dict[str, str] | None = None) -> Any:
    _require_venv(release)
    python = Path(os.environ["VERL_GKE_VERL_VENVS"]) / release / "bin" / "python"
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/")}
    done = subprocess.run(
        [str(python), str(PROBE)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        env={**base, **(env or {})},
        cwd=REPO,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _spec(profile: str = "a4", mode: Mode = Mode.STANDARD, **job: Any) -> GrpoSpec:
    p = PROFILES[profile]
    return apply_overrides(default_grpo_spec(p, mode, p.default_gpu_nodes), job)


def _tracking(release: str, spec: GrpoSpec, metrics: Path) -> dict[str, Any]:
    request = {
        "probe": "tracking",
        "overrides": [o for o in _overrides(spec) if o.startswith("trainer.logger=")],
        "steps": [{"step": 1, "data": STEP_1}],
    }
    return _probe(release, request, {"VERL_FILE_LOGGER_PATH": str(metrics)})


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("loggers", [["file"], ["file", "console"], ["console"]])
def test_every_logger_setting_makes_verl_print_the_step_line_we_parse(
    release: str, loggers: list[str], tmp_path: Path
) -> None:
    result = _tracking(release, _spec(logger=loggers), tmp_path / "metrics.jsonl")
    assert "console" in result["logger"]
    steps = verl_log.training_steps(result["stdout"])
    assert [s.step for s in steps] == [1]
    assert steps[0].values["timing_s/step"] == 12.5


@pytest.mark.parametrize("release", RELEASES)
def test_without_console_verl_prints_no_step_line(release: str, tmp_path: Path) -> None:
    # The rule rendered_loggers exists for: verl's Tracking prints step lines only through its
    # console backend. `trainer.logger=file` as a user would have sent it.
    request = {"probe": "tracking", "overrides": ["trainer.logger=file"], "steps": [
        {"step": 1, "data": STEP_1}
    ]}  # fmt: skip
    result = _probe(release, request, {"VERL_FILE_LOGGER_PATH": str(tmp_path / "m.jsonl")})
    assert verl_log.training_steps(result["stdout"]) == []


@pytest.mark.parametrize("release", RELEASES)
def test_logger_backends_are_verls(release: str, tmp_path: Path) -> None:
    result = _tracking(release, _spec(logger=["console"]), tmp_path / "m.jsonl")
    assert sorted(LOGGER_BACKENDS) == sorted(result["supported"])


@pytest.mark.parametrize("release", RELEASES)
def test_each_attempts_metrics_are_kept(release: str, tmp_path: Path) -> None:
    # verl's file logger opens VERL_FILE_LOGGER_PATH with "w"; the runner moves the previous
    # attempt's file aside before training, so two attempts leave two files.
    spec = _spec(logger=["console", "file"])
    env_path = render_runtime_env(spec, PROFILES["a4"], Mode.STANDARD)["env_vars"]
    assert env_path["VERL_FILE_LOGGER_PATH"] == f"{spec.default_local_dir}/metrics.jsonl"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    metrics = run_dir / run_grpo.METRICS_FILE
    _tracking(release, spec, metrics)
    assert run_grpo.keep_previous_metrics(run_dir) == run_dir / "metrics" / "attempt-001.jsonl"
    _tracking(release, spec, metrics)
    for path in (run_dir / "metrics" / "attempt-001.jsonl", metrics):
        assert json.loads(path.read_text().splitlines()[0])["step"] == 1


def _job_runtime_env(profile: str, mode: Mode) -> dict[str, Any]:
    spec = _spec(profile, mode)
    _, runtime_env = runner_job(
        training_argv(spec),
        render_runtime_env(spec, PROFILES[profile], mode),
        run_dir=spec.default_local_dir,
        identity=resume_identity(spec),
        export_experiment=spec.experiment_name,
    )
    return runtime_env


def _driver_env(release: str, job_env: dict[str, Any]) -> dict[str, Any]:
    # verl's driver is the training command, started by the runner with the job's environment.
    request = {"probe": "driver_env", "job_runtime_env": job_env}
    return _probe(release, request, job_env["env_vars"])["driver_runtime_env"]


@pytest.mark.parametrize(("profile", "mode"), STACKS)
def test_ray_merges_the_job_env_with_verls_driver_env(profile: str, mode: Mode) -> None:
    release = RELEASE_FOR_REF[PROFILES[profile].verl_ref]
    job_env = _job_runtime_env(profile, mode)
    driver = _driver_env(release, job_env)
    merged = _merge_runtime_env(job_env, driver)
    assert merged is not None, f"Ray refuses: job {job_env} and driver {driver} share a key"
    assert merged["env_vars"]["PYTHONPATH"] == job_env["env_vars"]["PYTHONPATH"]


def test_a_key_set_by_both_makes_ray_refuse() -> None:
    # The failure the test above guards against, with verl 0.9.0's driver, which forwards
    # PYTHONHASHSEED when the job sets it.
    job_env = _job_runtime_env("a4x", Mode.STANDARD)
    job_env["env_vars"] = {**job_env["env_vars"], "PYTHONHASHSEED": "0"}
    assert _merge_runtime_env(job_env, _driver_env("0.9.0", job_env)) is None


def test_driver_set_keys_are_refused_in_the_job_env(monkeypatch: pytest.MonkeyPatch) -> None:
    profile = PROFILES["a4x"]
    assert "PYTHONHASHSEED" in DRIVER_SET_ENV[profile.verl_ref]
    env = dict(profile.nccl_env[Mode.STANDARD])
    env["PYTHONHASHSEED"] = "0"
    monkeypatch.setitem(profile.nccl_env, Mode.STANDARD, env)
    with pytest.raises(ValueError, match="PYTHONHASHSEED"):
        render_runtime_env(_spec("a4x"), profile, Mode.STANDARD)


@pytest.mark.parametrize(("ref", "release"), [("v0.6.1", "0.6.1"), ("v0.9.0", "0.9.0")])
def test_max_num_seqs_default_is_verls(ref: str, release: str) -> None:
    # ddbcdb7 (A4X) is not a release: its rollout.yaml says 1024 (verl-project/verl at ddbcdb7,
    # verl/trainer/config/rollout/rollout.yaml), unlike v0.9.0 which stands for it elsewhere.
    result = _probe(release, {"probe": "rollout_defaults"})
    assert VLLM_MAX_NUM_SEQS_DEFAULT[ref] == result["max_num_seqs"]
