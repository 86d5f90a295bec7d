"""The offline plan command, as the README tells a user to run it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from config.settings import ENCRYPTED_VALUE
from planning.offline_engine import REPO_ROOT, stack_config
from tests.program import COMBINATIONS, REAL, plan
from tools import plan as plan_cli


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tools.plan", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.integration  # runs `python -m tools.plan` as a subprocess
def test_fresh_clone_plan_of_a4x_works_as_written_in_readme() -> None:
    done = run_cli("a4x")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "Plan for stack 'a4x'" in out
    assert "gcp:container/nodePool:NodePool  gpu-pool" in out
    assert "machineType=a4x-highgpu-4g" in out
    assert "guestAccelerators=nvidia-gb200x4" in out
    # Placeholders are planned with example values and said so.
    assert "note: gcp:project is still the placeholder" in out
    assert "kubeconfig: [secret]" in out


@pytest.mark.integration  # runs `python -m tools.plan` as a subprocess
def test_bad_configuration_exits_non_zero_with_the_message() -> None:
    done = run_cli("a4x", "--set", "verl-gke:mode=autopilot")
    assert done.returncode == 2
    assert "verl-gke:mode = 'autopilot'" in done.stderr
    assert "Traceback" not in done.stderr
    assert "Plan for stack" not in done.stdout


def test_strict_rejects_committed_placeholders_like_pulumi_up(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert plan_cli.main(["a3u", "--strict"]) == 2
    err = capsys.readouterr().err
    for key in ("gcp:project", "verl-gke:zone", "verl-gke:reservation", "verl-gke:hfToken"):
        assert key in err


def test_unknown_stack(capsys: pytest.CaptureFixture[str]) -> None:
    assert plan_cli.main(["a5"]) == 2
    assert "no stack file Pulumi.a5.yaml" in capsys.readouterr().err


def test_set_requires_key_value() -> None:
    with pytest.raises(SystemExit):
        plan_cli.main(["a4x", "--set", "gpuNodes"])


@pytest.mark.parametrize("stack", ["a4x", "a4", "a3u"])
def test_every_committed_stack_plans(stack: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert plan_cli.main([stack]) == 0
    assert f"Plan for stack '{stack}'" in capsys.readouterr().out


def test_out_writes_kubernetes_objects(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert plan_cli.main(["a3u", "--out", str(tmp_path)]) == 0
    files = sorted((tmp_path / "a3u").glob("*.yaml"))
    result = capsys.readouterr().out
    assert f"Wrote {len(files)} files" in result
    for path in files:
        body = yaml.safe_load(path.read_text())
        assert isinstance(body, dict)


def test_set_overrides_are_applied(capsys: pytest.CaptureFixture[str]) -> None:
    assert plan_cli.main(["a4x", "--set", "verl-gke:gpuNodes=8"]) == 0
    assert "nodeCount=8 " in capsys.readouterr().out


def test_job_preflight_failure_exits_with_the_rule(capsys: pytest.CaptureFixture[str]) -> None:
    assert plan_cli.main(["a4x", "--set", 'verl-gke:job={"saveFreq": 0}']) == 2
    err = capsys.readouterr().err
    assert "verl-gke:job.saveFreq = 0" in err and "Fix:" in err


def test_every_key_property_is_set_by_some_stack() -> None:
    # A property the program stopped setting (minMasterVersion once) must leave the list, or the
    # plan promises a reviewer a value that never shows.
    recorded = [r for stack, mode in COMBINATIONS for r in plan(stack, mode).resources]
    for type_, paths in plan_cli.KEY_PROPERTIES.items():
        of_type = [r for r in recorded if r.type == type_]
        assert of_type, type_
        for path in paths:
            assert any(plan_cli.lookup(r.inputs, path) is not None for r in of_type), (type_, path)


TOKEN = "hf_abcdefghijklmnopqrstuvwxyz0123456789"
PLAIN_WARNING = "WARNING: verl-gke:hfToken is not a Pulumi secret"


@pytest.mark.parametrize("flag", ["--set", "--set-secret"])
@pytest.mark.parametrize("stack", ["a4x", "a4", "a3u"])
def test_plan_never_prints_or_writes_the_token(
    stack: str, flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = plan_cli.main([stack, flag, f"verl-gke:hfToken={TOKEN}", "--out", str(tmp_path)])
    printed = capsys.readouterr()
    assert TOKEN not in printed.out + printed.err
    if flag == "--set":
        # Pulumi.yaml declares the token `secret: true`: Pulumi refuses it in plain text in the
        # stack file, and `--set` writes it there as `pulumi config set` would.
        assert code == 2
        assert "'verl-gke:hfToken' must be encrypted as it's secret" in printed.err
        assert "Fix: --set-secret verl-gke:hfToken=" in printed.err
        return
    assert code == 0
    files = {p.name: p.read_text() for p in (tmp_path / stack).iterdir()}
    leaks = [name for name, text in files.items() if TOKEN in text]
    assert not leaks
    secret = yaml.safe_load(files["secret-storage-hf-secret.yaml"])
    assert secret["stringData"] == {"hf_token": "<redacted: verl-gke:hfToken>"}
    assert PLAIN_WARNING not in printed.out


def test_plan_error_never_echoes_the_token(capsys: pytest.CaptureFixture[str]) -> None:
    job = '{"extraOverrides": ["+x.y=' + TOKEN + '"]}'
    argv = ["a4", "--set-secret", f"verl-gke:hfToken={TOKEN}", "--set", f"verl-gke:job={job}"]
    assert plan_cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "verl-gke:job.extraOverrides[0] = '+x.y=<redacted: verl-gke:hfToken>'" in err
    assert TOKEN not in err


@pytest.mark.integration  # runs `python -m tools.plan` as a subprocess
@pytest.mark.parametrize("typo", ["verl_gke", "verlgke", "Verl-Gke"])
def test_namespace_typo_exits_2_naming_the_right_key(typo: str) -> None:
    done = run_cli("a4", "--set", f"{typo}:gpuNodes=3")
    assert done.returncode == 2, done.stdout
    assert f"{typo}:gpuNodes: the namespace" in done.stderr
    # Offline, in the form the user typed (tools/plan.py offline_fixes).
    fix = f"Fix: leave out --set {typo}:gpuNodes=..., then --set verl-gke:gpuNodes=3"
    assert fix in done.stderr
    assert "pulumi config" not in done.stderr
    assert "Traceback" not in done.stderr and "Plan for stack" not in done.stdout


# What `pulumi config set --secret` writes into Pulumi.<stack>.yaml (the passphrase or cloud
# secrets provider's ciphertext); the offline plan has no way to decrypt it.
CIPHERTEXT = "v1:2nK4bWZ3Sx0tFMpH:0Jkq1c3YQvQ6z0m6m5b9n6ZkTg=="


def project_with_encrypted_secrets(folder: Path, stack: str) -> Path:
    """A copy of the project whose stack file holds hfToken and wandbApiKey as `secure:` values,
    the rest as a user fills it in (tests/program.py REAL)."""
    for name in ("Pulumi.yaml", "__main__.py"):
        (folder / name).write_text((REPO_ROOT / name).read_text())
    committed = yaml.safe_load((REPO_ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]
    config = {**committed, **REAL}
    config["verl-gke:hfToken"] = {"secure": CIPHERTEXT}
    config["verl-gke:wandbApiKey"] = {"secure": CIPHERTEXT}
    (folder / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": config}))
    return folder


@pytest.mark.parametrize("strict", [False, True])
def test_secrets_set_with_pulumi_config_set_secret_are_planned_as_set(
    strict: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(plan_cli, "PROJECT_DIR", project_with_encrypted_secrets(tmp_path, "a4"))
    assert plan_cli.main(["a4", *(["--strict"] if strict else [])]) == 0
    printed = capsys.readouterr()
    for key in ("verl-gke:hfToken", "verl-gke:wandbApiKey"):
        assert f"note: {key} is encrypted in Pulumi.a4.yaml (set with --secret)" in printed.out
        # Encrypted means it was set with --secret: no plain-text warning.
        assert f"WARNING: {key} is not a Pulumi secret" not in printed.out
    assert CIPHERTEXT not in printed.out + printed.err


def test_the_stack_file_reader_marks_encrypted_values(tmp_path: Path) -> None:
    project = project_with_encrypted_secrets(tmp_path, "a3u")
    config = stack_config("a3u", project)
    assert config["verl-gke:hfToken"] == ENCRYPTED_VALUE
    assert config["gcp:project"] == REAL["gcp:project"]


def test_the_plan_starts_with_the_job_and_ends_with_what_to_run_next(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["a3u", "--set", "verl-gke:job.rolloutN=4", "--set", "gcp:project=acme-ml-prod"]
    assert plan_cli.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("Job: 256 prompts per step x 4 rollouts, prompt 512 + response")
    assert "lr 1e-05" in lines[1]
    nxt = lines[lines.index("Next:") :]
    # Each placeholder the plan filled in, set without a value (the CLI asks for it), then up.
    asked = [line.split("#")[0].split()[-3] for line in nxt if "asks for the value" in line]
    assert asked == ["verl-gke:zone", "verl-gke:reservation", "verl-gke:hfToken"]
    assert "pulumi config set --secret verl-gke:hfToken -s a3u" in nxt[3]
    assert nxt[-2].split("#")[0].strip() == "pulumi up -s a3u"
    assert nxt[-1].split("#")[0].strip() == "python -m tools.run a3u --follow"


@pytest.mark.integration  # runs `python __main__.py` as a subprocess
def test_running_the_program_directly_says_how_it_is_run() -> None:
    done = subprocess.run(
        [sys.executable, "__main__.py"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "pulumi up -s a4x" in done.stderr and "python -m tools.plan a4x" in done.stderr


def test_next_leaves_out_a_placeholder_the_stack_does_not_use(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Spot takes no reservation: its placeholder is ignored, so setting it is no next step.
    assert plan_cli.main(["a3u", "--set", "verl-gke:capacity=spot"]) == 0
    out = capsys.readouterr().out
    assert "verl-gke:reservation is still the placeholder" in out
    assert "pulumi config set verl-gke:reservation" not in out.split("\nNext:\n", 1)[1]


def test_next_offers_authorized_networks_and_the_token_note_says_a_placeholder_was_used(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert plan_cli.main(["a4"]) == 0
    out = capsys.readouterr().out
    nxt = out.split("\nNext:\n", 1)[1]
    step = "pulumi config set --path 'verl-gke:authorizedNetworks[0]' <your-ip>/32 -s a4"
    assert step in nxt and "optional" in nxt.split(step, 1)[1].splitlines()[0]
    assert (
        "note: verl-gke:hfToken is not set; planning with a placeholder token. `pulumi up` "
        "needs the real one: pulumi config set --secret verl-gke:hfToken -s a4"
    ) in out
    assert "planning with '<redacted" not in out
    # Set, the step is not offered.
    argv = ["a4", "--set", "verl-gke:authorizedNetworks[0]=203.0.113.7/32"]
    assert plan_cli.main(argv) == 0
    assert "authorizedNetworks" not in capsys.readouterr().out.split("\nNext:\n", 1)[1]
