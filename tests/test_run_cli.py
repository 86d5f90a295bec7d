"""`python -m tools.run` against a real local Ray head running stand-in verl jobs.

The jobs (tests/job_fixtures/verl_metrics_job.py) start a Ray actor named TaskRunner that prints
verl's console lines, so the log carries Ray's real ``(TaskRunner pid=N)`` prefix and colours.
Three runs: one finished (5 steps, SUCCEEDED), one still running after 5 steps, one still in
start-up (validation logged, no training step). The tool runs as a subprocess, as a user runs
it; the Pulumi CLI (absent here) is played by a script named `pulumi` first on PATH, and the GKE
API server's service proxy by tests/support/local_proxies.py over TLS with a cluster CA.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from ray.job_submission import JobStatus, JobSubmissionClient

from jobs import dashboard_access, verl_log
from tests.support.local_proxies import make_tls_material, start_service_proxy
from tests.support.ray_head import RayHead, free_port
from tests.support.run_tool import rows, tool
from tools import run as run_tool

# Starts real processes (a Ray head, the provider host, a GCS emulator or subprocesses).
pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent
STAND_IN = REPO / "tests" / "job_fixtures" / "verl_metrics_job.py"
WAIT_S = 180.0
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
FINAL_LINE = "'Final validation metrics: {}'"  # the stand-in's last line with --finish


@dataclass(frozen=True)
class Runs:
    head: RayHead
    finished: str  # 5 steps and the final validation, SUCCEEDED
    running: str  # 5 steps, still RUNNING
    starting: str  # validation step:0 only, still RUNNING


def _submit(jobs: JobSubmissionClient, hold: Path, *args: str) -> str:
    # The head's job agent accepts submissions already (tests/conftest.py waits for it).
    command = [sys.executable, str(STAND_IN), "--hold-file", str(hold), *args]
    return jobs.submit_job(entrypoint=shlex.join(command))


def _wait_for(jobs: JobSubmissionClient, sid: str, text: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while text not in jobs.get_job_logs(sid):
        status = jobs.get_job_status(sid)
        if status in (JobStatus.FAILED, JobStatus.STOPPED) or time.monotonic() > deadline:
            log = jobs.get_job_logs(sid)
            raise AssertionError(f"{sid} {status}: {text!r} never logged:\n{log}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def runs(
    head: RayHead, jobs: JobSubmissionClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Runs]:
    folder = tmp_path_factory.mktemp("holds")
    holds = {name: folder / f"release-{name}" for name in ("finished", "running", "starting")}
    finished = _submit(jobs, holds["finished"], "--steps", "5", "--finish")
    running = _submit(jobs, holds["running"], "--steps", "5")
    starting = _submit(jobs, holds["starting"], "--steps", "0")
    try:
        # Every line is in the log before a job may exit (Ray forwards actor output late).
        _wait_for(jobs, finished, FINAL_LINE)
        _wait_for(jobs, running, "step:5 - ")
        _wait_for(jobs, starting, "step:0 - val-core/")
        holds["finished"].touch()
        deadline = time.monotonic() + WAIT_S
        while jobs.get_job_status(finished) != JobStatus.SUCCEEDED:
            assert time.monotonic() < deadline, jobs.get_job_info(finished)
            time.sleep(0.2)
        yield Runs(head=head, finished=finished, running=running, starting=starting)
    finally:
        for hold in holds.values():
            hold.touch()


def test_status_of_a_finished_run(runs: Runs) -> None:
    result = tool("--dashboard-url", runs.head.dashboard_url, "--submission-id", runs.finished)
    assert result.returncode == 0, result.stderr
    report = rows(result.stdout)
    assert report["run"] == runs.finished
    assert report["status"].startswith("SUCCEEDED after ")
    assert report["step"] == "5 of 435"
    assert report["score"] == "0.7  (critic/score/mean)"
    assert report["response length"] == "280 tokens  (response_length/mean)"
    assert report["throughput"] == "255 tokens/s/GPU  (perf/throughput)"
    assert report["step time"] == "65 s  (timing_s/step)"
    assert report["validation"] == "0.25  (val-core/openai/gsm8k/reward/mean@1)"
    assert report["log read"] == "last 2000 lines"  # the state API tail answered


def test_json_of_a_running_run(runs: Runs) -> None:
    result = tool(
        "--dashboard-url", runs.head.dashboard_url, "--submission-id", runs.running, "--json"
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["status"] == "RUNNING"
    assert report["end_time_ms"] is None and report["elapsed_s"] >= 0
    assert report["phase"] == verl_log.TRAINING
    assert report["step"] == 5
    assert report["latest"]["critic/score/mean"] == 0.7
    assert report["latest"]["actor/pg_loss"] == pytest.approx(-0.055)  # np.float64(...) repr
    assert "note" not in report["latest"]
    assert [s["step"] for s in report["steps"]] == [1, 2, 3, 4, 5]
    assert [s["critic/score/mean"] for s in report["steps"]] == pytest.approx(
        [0.3, 0.4, 0.5, 0.6, 0.7]
    )
    assert [s["response_length/mean"] for s in report["steps"]] == [200, 220, 240, 260, 280]


def test_a_tail_without_a_step_falls_back_to_the_whole_log(runs: Runs) -> None:
    base = ("--dashboard-url", runs.head.dashboard_url, "--submission-id", runs.finished, "--json")
    short = json.loads(tool(*base, "--tail-lines", "3").stdout)
    # Three lines hold step 5 but not the "Total training steps" line from the start.
    assert (short["log_source"], short["step"], short["total_steps"]) == ("last 3 lines", 5, None)
    last_only = json.loads(tool(*base, "--tail-lines", "1").stdout)  # the final validation line
    assert (last_only["log_source"], last_only["step"]) == ("whole log", 5)
    assert last_only["total_steps"] == 435 and last_only["phase"] == verl_log.FINISHED


def test_a_run_in_startup_shows_its_phase_and_refuses_to_plot(runs: Runs, tmp_path: Path) -> None:
    target = tmp_path / "curves.png"
    result = tool(
        "--dashboard-url", runs.head.dashboard_url, "--submission-id", runs.starting,
        "--plot", str(target),
    )  # fmt: skip
    assert result.returncode == 1
    report = rows(result.stdout)
    assert report["status"].startswith("RUNNING for ")
    assert report["step"] == "no training step logged yet (phase: first step)"
    assert report["validation"] == "0.25  (val-core/openai/gsm8k/reward/mean@1)"
    assert "score" not in report
    assert "nothing to plot" in result.stderr
    assert not target.exists()


def test_plot_writes_a_png_of_both_curves(runs: Runs, tmp_path: Path) -> None:
    target = tmp_path / "curves.png"
    result = tool(
        "--dashboard-url", runs.head.dashboard_url, "--submission-id", runs.finished,
        "--plot", str(target),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"plot written to {target}" in result.stdout
    assert rows(result.stdout)["log read"] == "whole log"
    assert target.read_bytes()[:8] == PNG_SIGNATURE
    import matplotlib.image

    pixels = matplotlib.image.imread(target)
    assert pixels.shape[:2] == (600, 800)  # 8 x 6 inches at 100 dpi
    assert len({tuple(p) for p in pixels.reshape(-1, pixels.shape[2])[::97]}) > 5  # not blank


def test_plot_draws_score_validation_and_response_length(runs: Runs) -> None:
    target = run_tool.Target(
        dashboard=dashboard_access.DashboardUrl(runs.head.dashboard_url),
        submission_id=runs.finished,
        stack=None,
    )
    figure = run_tool.plot_run(run_tool.read_run(target, full_log=True))
    score_ax, length_ax = figure.axes
    score, validation = score_ax.lines
    assert list(score.get_xdata()) == [1, 2, 3, 4, 5]
    assert list(score.get_ydata()) == pytest.approx([0.3, 0.4, 0.5, 0.6, 0.7])
    assert (list(validation.get_xdata()), list(validation.get_ydata())) == ([0], [0.25])
    assert list(length_ax.lines[0].get_ydata()) == [200, 220, 240, 260, 280]
    assert length_ax.get_xlabel() == "training step"


def test_unknown_submission_id_names_the_jobs_the_dashboard_knows(runs: Runs) -> None:
    result = tool("--dashboard-url", runs.head.dashboard_url, "--submission-id", "nope")
    assert result.returncode == 1
    assert "knows no job with submission id 'nope'" in result.stderr
    assert runs.finished in result.stderr
    assert result.stdout == ""


def test_unreachable_dashboard_says_what_was_tried() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = tool("--dashboard-url", url, "--submission-id", "x", "--timeout", "1")
    assert result.returncode == 1
    # The message gives the seconds really waited: at least the 1 s asked for, more on a loaded
    # machine (the last attempt's own timeout runs past the deadline).
    said = rf"Ray dashboard at {re.escape(url)} did not answer within (\d+)s"
    waited = re.search(said, result.stderr)
    assert waited is not None and int(waited.group(1)) >= 1, result.stderr
    assert f"Tried the Ray Jobs API at {url} directly" in result.stderr


def test_a_stack_without_the_pulumi_cli_asks_for_flags(tmp_path: Path) -> None:
    result = tool("a4", env={"PATH": str(tmp_path)})
    assert result.returncode == 1
    assert "the Pulumi CLI is not on PATH" in result.stderr
    assert "--dashboard-url" in result.stderr and "--kube-api-endpoint" in result.stderr


# -- the `pulumi stack output` path -------------------------------------------------------------


def fake_pulumi(folder: Path, outputs: dict[str, object], kubeconfig: str | None) -> Path:
    """An executable `pulumi` that prints `outputs` for `stack output --json` and `kubeconfig`
    for `stack output kubeconfig --show-secrets` (None: fails like a locked secrets provider),
    and logs each call's argv and cwd to calls.jsonl."""
    folder.mkdir(parents=True, exist_ok=True)
    calls = folder / "calls.jsonl"
    script = folder / "pulumi"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"with open({str(calls)!r}, 'a') as f:\n"
        "    f.write(json.dumps({'argv': sys.argv[1:], 'cwd': os.getcwd()}) + '\\n')\n"
        f"outputs = json.loads({json.dumps(outputs)!r})\n"
        f"kubeconfig = {kubeconfig!r}\n"
        "if '--json' in sys.argv:\n"
        "    print(json.dumps(outputs, indent=4))\n"
        "elif kubeconfig is None:\n"
        "    print('error: passphrase must be set with PULUMI_CONFIG_PASSPHRASE',\n"
        "          file=sys.stderr)\n"
        "    sys.exit(255)\n"
        "else:\n"
        "    print(kubeconfig)\n"
    )
    script.chmod(0o755)
    return folder


def calls(folder: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (folder / "calls.jsonl").read_text().splitlines()]


def stack_outputs_for(sid: str) -> dict[str, object]:
    return {
        "profile": "a4",
        "clusterName": "verl-a4",
        "clusterLocation": "us-central1",
        "kubeconfig": "[secret]",
        "namespace": "verl",
        "rayHeadService": "verl-head-svc",
        "jobSubmissionId": sid,
        "jobStatus": "RUNNING",
        # pricing/whole_run.py stack_outputs: a3u on Spot at the table's rates.
        "gpuNodeHourlyUsd": 40.99433,
        "gpuNodes": 2,
        "fixedHourlyUsd": 1.0951,
        "stackHourlyUsd": 83.08376,
        "priceSource": "price table: SkyPilot's GCP catalog v8 of Cloud Billing SKUs, read "
        "2026-12-07",
    }


def test_stack_outputs_give_the_submission_id(runs: Runs, tmp_path: Path) -> None:
    bin_dir = fake_pulumi(tmp_path / "bin", stack_outputs_for(runs.finished), kubeconfig=None)
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    result = tool("a4", "--dashboard-url", runs.head.dashboard_url, env={"PATH": path})
    assert result.returncode == 0, result.stderr
    assert rows(result.stdout)["run"] == runs.finished
    assert rows(result.stdout)["step"] == "5 of 435"
    # The stack's $/h; with a plain dashboard URL the cluster's nodes cannot be read, so the
    # spend is the run's elapsed hours x that rate, said to be the job's time only.
    assert re.fullmatch(
        r"\$83\.08/h for the stack \(2 GPU nodes x \$40\.99; price table: .*\)",
        rows(result.stdout)["cost"],
    ), rows(result.stdout)["cost"]
    spent = re.match(
        r"\$(\d+\.\d\d) so far \(from the Ray job's running time only, (\d+\.\d\d) h x "
        r"the stack's rate .*a plain dashboard URL gives no access to the cluster's nodes\)$",
        rows(result.stdout)["spent"],
    )
    assert spent, rows(result.stdout)["spent"]
    assert float(spent.group(1)) == pytest.approx(float(spent.group(2)) * 83.08376, abs=0.42)
    # One call, secrets hidden, from the project folder (where Pulumi.yaml is).
    assert calls(bin_dir) == [
        {
            "argv": ["stack", "output", "--json", "--show-secrets=false", "-s", "a4"],
            "cwd": str(REPO),
        }
    ]


def gke_kubeconfig(endpoint: str, ca_b64: str) -> str:
    """The shape components/gke_cluster.py exports (JSON, exec plugin, no credential)."""
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "gke_verl-a4",
                    "cluster": {
                        "server": f"https://{endpoint}",
                        "certificate-authority-data": ca_b64,
                    },
                }
            ],
            "users": [
                {
                    "name": "gke_verl-a4",
                    "user": {"exec": {"command": "gke-gcloud-auth-plugin"}},
                }
            ],
        },
        indent=2,
    )


def test_stack_outputs_lead_through_the_service_proxy_over_tls(
    runs: Runs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tls = make_tls_material(tmp_path / "tls")
    proxy = start_service_proxy(runs.head.dashboard_url, "sesame", "verl", "verl-head-svc", tls=tls)
    try:
        ca = base64.b64encode(tls.ca_pem).decode()
        kubeconfig = gke_kubeconfig(proxy.endpoint, ca)
        bin_dir = fake_pulumi(tmp_path / "bin", stack_outputs_for(runs.running), kubeconfig)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

        target = run_tool.resolve_target(run_tool.build_parser().parse_args(["a4"]))
        assert target.submission_id == runs.running
        assert target.dashboard == dashboard_access.KubeServiceProxy(
            kube_api_endpoint=f"https://{proxy.endpoint}",
            cluster_ca_certificate=ca,
            namespace="verl",
            service="verl-head-svc",
        )
        # The kubeconfig (a secret output holding no credential) is the only value read shown.
        assert [c["argv"] for c in calls(bin_dir)] == [
            ["stack", "output", "--json", "--show-secrets=false", "-s", "a4"],
            ["stack", "output", "kubeconfig", "--show-secrets", "-s", "a4"],
        ]

        view = run_tool.read_run(target, token_provider=lambda: "sesame")
        assert (view.status, view.latest.step if view.latest else None) == ("RUNNING", 5)
        assert view.log_source == "last 2000 lines"  # the state API answers through the proxy
        assert proxy.forwarded >= 2 and proxy.rejected == 0

        with pytest.raises(run_tool.RunToolError, match="refused the credentials"):
            run_tool.read_run(target, token_provider=lambda: "guess")
    finally:
        proxy.stop()


def test_a_locked_kubeconfig_output_asks_for_the_endpoint_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = fake_pulumi(tmp_path / "bin", stack_outputs_for("a4-abc"), kubeconfig=None)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(run_tool.RunToolError) as failure:
        run_tool.resolve_target(run_tool.build_parser().parse_args(["a4"]))
    text = str(failure.value)
    assert "exit 255" in text and "PULUMI_CONFIG_PASSPHRASE" in text
    assert "--kube-api-endpoint and --cluster-ca" in text
    assert "gcloud container clusters describe verl-a4 --location=us-central1" in text


def test_flags_alone_need_no_pulumi_cli(tmp_path: Path) -> None:
    args = run_tool.build_parser().parse_args(
        ["a4", "--kube-api-endpoint", "34.1.2.3", "--cluster-ca", "", "--namespace", "verl",
         "--head-service", "svc", "--submission-id", "a4-abc"]
    )  # fmt: skip
    target = run_tool.resolve_target(args, run=lambda *a, **k: pytest.fail("pulumi was run"))
    assert dashboard_access.dashboard_address(target.dashboard) == (
        "https://34.1.2.3/api/v1/namespaces/verl/services/svc:dashboard/proxy"
    )
