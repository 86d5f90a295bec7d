"""The model export payload (payloads/export/export_model.py) for real: submitted as a Ray job to
a local head, with a stand-in merger (tests/job_fixtures/fake_merger.py) run as a Ray task; and
verl's own merger command line checked against verl's argparse at the pinned releases."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from payloads.export import export_model
from tests.support.ray_head import RayHead, ray_temp_dir
from tests.support.ray_worker import alive_nodes, start_ray_worker, wait_until
from tests.support.require import verl_python

# Starts real processes (a Ray head, the provider host, a GCS emulator or subprocesses).
pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent
PAYLOAD_DIR = REPO / "payloads" / "export"


def checkpoints(root: Path, steps: list[int], latest: int | None) -> Path:
    folder = root / "ckpt"
    for step in steps:
        actor = folder / f"global_step_{step}" / "actor"
        actor.mkdir(parents=True)
        (actor / "fsdp_config.json").write_text('{"world_size": 2}')
    if latest is not None:
        (folder / export_model.LATEST_FILE).write_text(f"{latest}\n")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def submit_export(head: RayHead, ckpt: Path, target: Path, resource: str = "CPU") -> str:
    """Submit the payload as the GRPO entrypoint's tail does; the submission id."""
    from ray.job_submission import JobSubmissionClient

    command = [
        sys.executable, "export_model.py",
        "--checkpoint-dir", str(ckpt), "--target-dir", str(target),
        "--merger-module", "tests.job_fixtures.fake_merger", "--node-resource", resource,
    ]  # fmt: skip
    env = {"PYTHONPATH": str(REPO), "VERL_GKE_EXPORT_WAIT_REPORT_S": "1"}
    return JobSubmissionClient(head.dashboard_url).submit_job(
        entrypoint=shlex.join(command),
        runtime_env={"working_dir": str(PAYLOAD_DIR), "env_vars": env},
    )


def run_export(head: RayHead, ckpt: Path, target: Path) -> tuple[str, str]:
    """Submit the export and wait for its end; (final status, driver log)."""
    return wait_for_end(head, submit_export(head, ckpt, target))


def wait_for_end(head: RayHead, job_id: str) -> tuple[str, str]:
    from ray.job_submission import JobStatus, JobSubmissionClient

    client = JobSubmissionClient(head.dashboard_url)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        status = client.get_job_status(job_id)
        if status in {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}:
            return str(status), client.get_job_logs(job_id)
        time.sleep(0.5)
    raise AssertionError(f"export job {job_id} did not end: {client.get_job_logs(job_id)}")


def test_export_merges_latest_step_writes_marker_and_skips_on_rerun(
    head: RayHead, tmp_path: Path
) -> None:
    ckpt = checkpoints(tmp_path, [10, 20, 30], latest=20)  # 30 is a save still in progress
    target = tmp_path / "models" / "exp"
    status, log = run_export(head, ckpt, target)
    assert status == "SUCCEEDED", log
    merged = json.loads((target / "config.json").read_text())
    assert merged == {"merged_from": str(ckpt / "global_step_20" / "actor")}
    marker = json.loads((target / export_model.MARKER).read_text())
    assert marker["step"] == 20
    assert marker["merger"] == "tests.job_fixtures.fake_merger"
    assert "export: done" in log

    (target / "config.json").unlink()  # a rerun for the same step must not merge again
    status, log = run_export(head, ckpt, target)
    assert status == "SUCCEEDED", log
    assert "already holds step 20; nothing to do" in log
    assert not (target / "config.json").exists()

    (ckpt / export_model.LATEST_FILE).write_text("30\n")  # a resumed run saved a later step
    status, log = run_export(head, ckpt, target)
    assert status == "SUCCEEDED", log
    assert json.loads((target / export_model.MARKER).read_text())["step"] == 30


def test_export_fails_clearly_without_a_checkpoint(head: RayHead, tmp_path: Path) -> None:
    ckpt = checkpoints(tmp_path, [], latest=None)
    status, log = run_export(head, ckpt, tmp_path / "models" / "exp")
    assert status == "FAILED"
    assert f"no checkpoint to export: {ckpt / export_model.LATEST_FILE} does not exist" in log
    assert not (tmp_path / "models" / "exp").exists()


def test_failed_merge_fails_the_job_with_its_last_lines_and_no_marker(
    head: RayHead, tmp_path: Path
) -> None:
    ckpt = checkpoints(tmp_path, [5], latest=5)
    (ckpt / "global_step_5" / "actor" / "FAIL").write_text("")
    target = tmp_path / "models" / "exp"
    status, log = run_export(head, ckpt, target)
    assert status == "FAILED"
    assert "the merger exited 1" in log
    assert "RuntimeError: shard 3 is truncated" in log
    assert not (target / export_model.MARKER).exists()


# -- the export after the workers scaled to zero ------------------------------------------------


def test_export_waits_for_a_gpu_node_and_runs_on_the_one_that_returns(
    head: RayHead, tmp_path: Path
) -> None:
    """The only GPU node leaves (stopped by PID, as a scaled-down worker goes); the export asks
    for a GPU, waits, and runs once a GPU node joins again. Pinned to the node that left
    (NodeAffinitySchedulingStrategy soft=False) it could never run."""
    from ray.job_submission import JobSubmissionClient

    ckpt = checkpoints(tmp_path, [4], latest=4)
    target = tmp_path / "models" / "exp"
    with ray_temp_dir("rw") as first_dir, ray_temp_dir("rw") as second_dir:
        first = start_ray_worker(head, first_dir, num_gpus=1)
        second = None
        try:
            wait_until("joined", lambda: len(alive_nodes(head, "GPU")) == 1)
            first.stop()
            wait_until("gone", lambda: not alive_nodes(head, "GPU"))
            job_id = submit_export(head, ckpt, target, resource="GPU")
            client = JobSubmissionClient(head.dashboard_url)
            wait_until("waiting", lambda: "export: waiting" in client.get_job_logs(job_id))
            assert not target.joinpath("config.json").exists()
            second = start_ray_worker(head, second_dir, num_gpus=1)
            status, log = wait_for_end(head, job_id)
            returned = alive_nodes(head, "GPU")
        finally:
            for worker in (first, second):
                if worker is not None:
                    worker.stop()
            # The session's head is left as it was found: no GPU node alive.
            wait_until("gone again", lambda: not alive_nodes(head, "GPU"))
    assert status == "SUCCEEDED", log
    marker = json.loads((target / export_model.MARKER).read_text())
    assert marker["step"] == 4
    assert [marker["ray_node_id"]] == returned


# -- verl's real merger CLI ------------------------------------------------------------------

@pytest.mark.parametrize("release", ["0.6.1", "0.9.0"])
def test_verl_merger_argparse_accepts_the_payload_argv(release: str, tmp_path: Path) -> None:
    """verl's parse_args, taken from the installed release's source and run in its venv (its
    module imports accelerate/torch, which the compose venvs do not install; argparse is all the
    command line needs)."""
    python = verl_python(release)
    argv = export_model.merge_argv("verl.model_merger", tmp_path / "actor", tmp_path / "out")
    assert argv[1:3] == ["-m", "verl.model_merger"]
    probe = """
import ast, importlib.util, json, pathlib, sys
spec = importlib.util.find_spec("verl")
source = pathlib.Path(spec.submodule_search_locations[0], "model_merger", "base_model_merger.py")
tree = ast.parse(source.read_text())
fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "parse_args")
namespace = {"argparse": __import__("argparse")}
exec(compile(ast.Module(body=[fn], type_ignores=[]), str(source), "exec"), namespace)
sys.argv = ["verl.model_merger"] + json.loads(sys.argv[1])
print(json.dumps(vars(namespace["parse_args"]())))
"""
    done = subprocess.run(
        [str(python), "-c", probe, json.dumps(argv[3:])],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    parsed = json.loads(done.stdout)
    assert parsed["operation"] == "merge"
    assert parsed["backend"] == "fsdp"
    assert parsed["local_dir"] == str(tmp_path / "actor")
    assert parsed["target_dir"] == str(tmp_path / "out")
    # And verl's argparse is what is parsed: a wrong flag is refused.
    bad = subprocess.run(
        [str(python), "-c", probe, json.dumps(["merge", "--backend", "fsdp", "--target-dir", "x"])],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert bad.returncode != 0
    assert "unrecognized arguments: --target-dir" in bad.stderr
