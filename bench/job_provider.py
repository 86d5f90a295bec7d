"""Benchmark of the Ray job provider (prints figures, asserts nothing).

1. Refresh cost of checkpoint discovery for 60 checkpoints x 16 ranks x 3 shard files in a real
   GCS emulator: HTTP requests, bytes received and wall time of jobs.checkpoints (one delimiter
   listing + the tracker) against a naive recursive listing of every object.
2. Submit-to-RUNNING latency on one local Ray head: RayJobProvider.create against
   `ray job submit --no-wait` followed by polling until RUNNING, alternating, same entrypoint.
3. Time to answer with an unreachable dashboard, default deadlines (deadline_reach_s 45 s):
   refresh and destroy against a Ray head stopped by PID (connection refused), a socket that
   accepts and never answers, and the API-server service proxy stand-in (503 with a Running head
   pod: no evidence; the head Service gone: evidence); four concurrent refreshes in one process.
4. The failure tail of a job that prints three 5 MB lines: the old report (the whole log, last
   50 lines) against the capped one, and the bytes each fetch moves.
5. Fault reports through the real `python -m pulumi.dynamic` host (default deadlines unless
   said): refresh through a proxy that holds every response 22 s, 30 s or 50 s; a first-step wait
   whose log endpoints answer 500 while the status answers (deadline_submit_s 60 s instead of
   600 s, to keep the run short); the `up` after a job was stopped and deleted out of band; the
   size of a failed create's error with and without VERL_GKE_DEBUG.

    .venv/bin/python bench/job_provider.py [--runs 5] [--only discovery,submit,faults,tail,reports]
        [--checkpoints 60 --ranks 16]
"""

from __future__ import annotations

import argparse
import os
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from google.auth.credentials import AnonymousCredentials  # noqa: E402
from google.cloud import storage  # noqa: E402

from jobs import dashboard_access, job_logs  # noqa: E402
from jobs.checkpoints import TRACKER_FILE, discover_checkpoints  # noqa: E402
from jobs.dashboard_client import state_api_tail  # noqa: E402
from jobs.job_evidence import gke_cluster_input  # noqa: E402
from jobs.ray_job import JobDeadlines, RayJobArgs, RayJobProvider  # noqa: E402
from tests.job_fixtures.fake_trainer import write_checkpoint  # noqa: E402
from tests.support.dynamic_host import engine_inputs  # noqa: E402
from tests.support.gcs_emulator import GcsEmulator, start_gcs_emulator  # noqa: E402
from tests.support.kube_api import GkeApi, HeadPod, KubeApi, stand_in_token  # noqa: E402
from tests.support.ray_head import start_ray_head  # noqa: E402

CHECKPOINTS, RANKS = 60, 16
PARTS = ("discovery", "submit", "faults", "tail", "reports")
URN = (
    "urn:pulumi:bench::verl-gke::verl-gke:training:GrpoTraining"
    "$pulumi-python:dynamic/jobs:RayJob::grpo-job"
)
FAKE_TRAINER = REPO / "tests" / "job_fixtures" / "fake_trainer.py"


class CountingSession(requests.Session):
    def __init__(self) -> None:
        super().__init__()
        self.requests = 0
        self.bytes = 0

    def request(self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any) -> Any:
        response = super().request(method, url, *args, **kwargs)
        self.requests += 1
        self.bytes += len(response.content)
        return response


def counting_client(gcs: GcsEmulator) -> tuple[storage.Client, CountingSession]:
    session = CountingSession()
    client = storage.Client(
        project="bench",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": gcs.url},
        _http=session,
    )
    return client, session


def naive_discovery(client: storage.Client, bucket: str, folder: str) -> tuple[list[int], int]:
    """What a straightforward implementation does: list every object, derive the steps."""
    steps: set[int] = set()
    tracker = None
    # page_size: real GCS returns at most 1,000 entries per page; the emulator has no cap.
    for blob in client.list_blobs(bucket, prefix=f"{folder}/", page_size=1000):
        relative = blob.name[len(folder) + 1 :]
        head = relative.split("/", 1)[0]
        if head.startswith("global_step_") and head[len("global_step_") :].isdigit():
            steps.add(int(head[len("global_step_") :]))
        if relative == TRACKER_FILE:
            tracker = blob
    latest = int(tracker.download_as_text()) if tracker is not None else -1
    return sorted(steps), latest


def summary(times: list[float]) -> str:
    return (
        f"median {statistics.median(times) * 1000:8.1f} ms   min {min(times) * 1000:8.1f} ms   "
        f"max {max(times) * 1000:8.1f} ms   (n={len(times)})"
    )


def bench_discovery(runs: int, checkpoints: int = CHECKPOINTS, ranks: int = RANKS) -> None:
    print(f"\n== 1. refresh cost: {checkpoints} checkpoints x {ranks} ranks x 3 shards ==")
    with start_gcs_emulator() as gcs:
        client = gcs.client()
        bucket = client.create_bucket("bench-ckpt")
        started = time.perf_counter()

        def seed(step: int) -> None:
            write_checkpoint(gcs.client().bucket("bench-ckpt"), "run", step, ranks)

        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(seed, range(1, checkpoints)))
        write_checkpoint(bucket, "run", checkpoints, ranks)  # last: the tracker names it
        objects = sum(1 for _ in client.list_blobs("bench-ckpt", prefix="run/"))
        print(f"seeded {objects} objects in {time.perf_counter() - started:.1f}s")

        root = "gs://bench-ckpt/run"
        for label, action in (
            (
                "provider discovery (delimiter)",
                lambda c: discover_checkpoints(root, c, page_size=1000).steps,
            ),
            ("naive recursive listing", lambda c: naive_discovery(c, "bench-ckpt", "run")[0]),
        ):
            times, counts, volumes, found = [], [], [], []
            for _ in range(runs):
                # A fresh client per refresh, as the provider does.
                started = time.perf_counter()
                probe_client, probe = counting_client(gcs)
                found = action(probe_client)
                times.append(time.perf_counter() - started)
                # google-cloud-storage >= 3.16 also fetches bucket metadata once per client in a
                # background thread (tracing attributes); let it land so that it is counted.
                time.sleep(0.2)
                counts.append(probe.requests)
                volumes.append(probe.bytes)
            print(
                f"{label:32s} requests {max(counts):3d}   bytes {max(volumes):9,d}   "
                f"{summary(times)}   steps found {len(found)}"
            )
        print(
            "(requests include one background bucket-metadata GET per new client, made by\n"
            " google-cloud-storage 3.17; the emulator has no page cap, so the naive listing is\n"
            " paged at 1,000 entries as real GCS does)"
        )


def _alternate(runs: int, actions: dict[str, Any], client: Any) -> dict[str, list[float]]:
    """Seconds each action takes to a RUNNING job, the actions taking turns; each job stopped."""
    results: dict[str, list[float]] = {label: [] for label in actions}
    for index in range(runs):
        for label, action in actions.items():
            started = time.perf_counter()
            sid = action(index)
            results[label].append(time.perf_counter() - started)
            client.stop_job(sid)
    return results


def bench_submit(runs: int) -> None:
    print("\n== 2. submit-to-RUNNING latency on one local Ray head ==")
    with (
        start_gcs_emulator() as gcs,
        start_ray_head(Path(tempfile.mkdtemp(prefix="rjb", dir="/tmp"))) as head,
    ):
        from ray.job_submission import JobStatus, JobSubmissionClient

        os.environ["STORAGE_EMULATOR_HOST"] = gcs.url
        gcs.client().create_bucket("bench-submit")
        client = JobSubmissionClient(head.dashboard_url)
        # Warm-up: the first submission waits for the job agent to register.
        warm = client.submit_job(entrypoint="true")
        while not client.get_job_status(warm).is_terminal():
            time.sleep(0.1)

        provider = RayJobProvider()
        deadlines = JobDeadlines(startup_grace_s=0.0, poll_interval_s=0.05)
        ray_cli = str(Path(sys.executable).with_name("ray"))

        def entrypoint(tag: str) -> str:
            return shlex.join(
                [sys.executable, str(FAKE_TRAINER), "--root", f"gs://bench-submit/{tag}",
                 "--steps", "100000", "--step-seconds", "0.5", "--save-freq", "0"]
            )  # fmt: skip

        def via_provider(index: int) -> str:
            props = RayJobArgs(
                entrypoint=entrypoint(f"provider-{index}"),
                runtime_env={"env_vars": {"STORAGE_EMULATOR_HOST": gcs.url}},
                dashboard=dashboard_access.url_dashboard(head.dashboard_url),
                checkpoint_root=f"gs://bench-submit/provider-{index}",
                submission_id_prefix="bench",
                wait_for="running",
                deadlines=deadlines,
            ).to_props()
            return provider.create(props).id

        def via_cli(index: int) -> str:
            sid = f"bench-cli-{index}-{os.getpid()}"
            env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS",)}
            subprocess.run(
                [ray_cli, "job", "submit", "--address", head.dashboard_url, "--submission-id",
                 sid, "--no-wait", "--runtime-env-json",
                 f'{{"env_vars": {{"STORAGE_EMULATOR_HOST": "{gcs.url}"}}}}',
                 "--", *shlex.split(entrypoint(f"cli-{index}"))],
                check=True, capture_output=True, env=env,
            )  # fmt: skip
            while client.get_job_status(sid) != JobStatus.RUNNING:
                time.sleep(0.05)
            return sid

        results = _alternate(
            runs, {"provider create": via_provider, "ray job submit --no-wait": via_cli}, client
        )
        for label, times in results.items():
            print(f"{label:28s} {summary(times)}")
        print("(both measured to the first observed RUNNING; the CLI figure includes polling")
        print(" with JobSubmissionClient every 50 ms, the provider polls every 50 ms too)")


STARTUP_JOB = REPO / "tests" / "job_fixtures" / "startup_job.py"


def _timed(label: str, action: Any) -> float:
    started = time.perf_counter()
    try:
        outcome = action()
    except Exception as exc:  # the figure is the time to the answer, whatever it is
        outcome = f"raised {type(exc).__name__}: {str(exc).splitlines()[0][:110]}"
    elapsed = time.perf_counter() - started
    print(f"{label:58s} {elapsed:6.1f} s   {str(outcome)[:120]}")
    return elapsed


def _state(dashboard: dict[str, Any], run: str) -> dict[str, Any]:
    props = RayJobArgs(
        entrypoint=shlex.join([sys.executable, str(STARTUP_JOB), "--run", run,
                               "--hold-seconds", "600"]),
        runtime_env={},
        dashboard=dashboard,
        checkpoint_root=None,
        submission_id_prefix="bench-faults",
        wait_for="running",
    ).to_props()  # fmt: skip
    return props


def bench_faults() -> None:
    print("\n== 3. answer time with an unreachable dashboard (default deadlines: reach 45 s) ==")
    head = start_ray_head(Path(tempfile.mkdtemp(prefix="rjf", dir="/tmp")))
    provider = RayJobProvider(token_provider=stand_in_token)
    try:
        created = provider.create(
            _state(dashboard_access.url_dashboard(head.dashboard_url), "stopped")
        )
        outs = created.outs or {}
    finally:
        head.stop()
    _timed("refresh, Ray head stopped by PID (refused)",
           lambda: provider.read(created.id, outs).outs["status"])  # type: ignore[index]  # fmt: skip
    _timed("destroy, Ray head stopped by PID (refused)", lambda: provider.delete(created.id, outs))

    silent = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)  # accepts (kernel backlog), never answers
    silent_url = f"http://127.0.0.1:{silent.getsockname()[1]}"
    state = {**_state(dashboard_access.url_dashboard(silent_url), "silent"), "status": "RUNNING"}
    _timed("refresh, dashboard accepts and never answers",
           lambda: provider.read("bench-silent", state).outs["status"])  # type: ignore[index]  # fmt: skip
    with ThreadPoolExecutor(max_workers=4) as pool:
        started = time.perf_counter()
        list(pool.map(lambda i: provider.read(f"bench-silent-{i}", state), range(4)))
        print(f"{'4 concurrent refreshes, same silent dashboard, one process':58s} "
              f"{time.perf_counter() - started:6.1f} s   (wall time of all four)")  # fmt: skip
    silent.close()

    with KubeApi("verl", "h200-ray-head-svc", "h200-ray", dashboard_port=None,
                 head_pods=[HeadPod("h200-ray-head-x7k2p")]) as kube:  # fmt: skip
        dashboard = dashboard_access.kube_proxy_dashboard(
            kube.endpoint, "", "verl", "h200-ray-head-svc"
        )
        state = {**_state(dashboard, "kube"), "status": "RUNNING"}
        _timed("destroy via service proxy: 503, head pod Running (no proof)",
               lambda: provider.delete("bench-kube", state))  # fmt: skip
        kube.service_exists = False
        _timed("destroy via service proxy: head Service gone (proof)",
               lambda: provider.delete("bench-kube", state))  # fmt: skip
    # A deleted GKE cluster: its endpoint takes connections nowhere (here: accepts, never
    # answers), so the Kubernetes API cannot tell; the GKE API's 404 is the proof.
    black_hole = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    black_hole.bind(("127.0.0.1", 0))
    black_hole.listen(64)
    with GkeApi("proj", "us-central1", "verl-h200", cluster_exists=False) as gke:
        dashboard = dashboard_access.kube_proxy_dashboard(
            f"http://127.0.0.1:{black_hole.getsockname()[1]}", "", "verl", "h200-ray-head-svc"
        )
        cluster = {**gke_cluster_input("proj", "us-central1", "verl-h200"),
                   "api_endpoint": gke.endpoint}  # fmt: skip
        state = {**_state(dashboard, "gke"), "gke_cluster": cluster, "status": "RUNNING"}
        _timed("destroy, cluster endpoint silent, GKE API 404 (proof)",
               lambda: provider.delete("bench-gke", state))  # fmt: skip
    black_hole.close()
    print("(before this change: a refresh retried for deadline_submit_s = 600 s and then failed;")
    print(" a destroy gave up after 600 s and dropped the job without evidence)")


def bench_tail() -> None:
    print("\n== 4. failure tail of a job printing three 5 MB lines ==")
    from ray.job_submission import JobSubmissionClient

    with start_ray_head(Path(tempfile.mkdtemp(prefix="rjt", dir="/tmp"))) as head:
        props = RayJobArgs(
            entrypoint=shlex.join([sys.executable, str(STARTUP_JOB), "--long-lines", "3",
                                   "--fail-before-step"]),
            runtime_env={},
            dashboard=dashboard_access.url_dashboard(head.dashboard_url),
            checkpoint_root=None,
            submission_id_prefix="bench-tail",
            wait_for="first_step",
        ).to_props()  # fmt: skip
        started = time.perf_counter()
        try:
            RayJobProvider().create(props)
            message = ""
        except RuntimeError as exc:
            message = str(exc)
        elapsed = time.perf_counter() - started
        client = JobSubmissionClient(head.dashboard_url)
        sid = next(j.submission_id for j in client.list_jobs() if j.submission_id)
        whole = client.get_job_logs(sid)
        old_tail = "\n".join(whole.rstrip("\n").splitlines()[-50:])
        info = client.get_job_info(sid)
        # The provider's own read (Ray's state API, each line cut while streaming).
        tail = state_api_tail(client, sid, info.driver_node_id, 50, job_logs.TAIL_LINE_MAX_CHARS)
        print(f"old report (last 50 whole lines)   {len(old_tail):>12,d} chars")
        print(f"capped report (the error message)  {len(message):>12,d} chars   "
              f"create failed after {elapsed:.1f} s")  # fmt: skip
        print(f"whole log (Jobs API /logs)         {len(whole):>12,d} chars fetched")
        print(f"state API tail, lines=50           {sum(map(len, tail)):>12,d} chars kept "
              "(streamed and cut while reading)")  # fmt: skip


def _host_create(host: Any, props: dict[str, Any]) -> str:
    """Create through the host: the id, or the first line of the error and its size."""
    import grpc

    checked = host.check(URN, None, engine_inputs(props, RayJobProvider()))
    try:
        return f"created {host.create(URN, checked.inputs).id}"
    except grpc.RpcError as exc:
        details = exc.details() or ""
        return (
            f"error ({len(details):,d} chars, {details.count(chr(10)) + 1} lines): "
            + (details.splitlines()[0][:90])
        )


def _reports_props(url: str, run: str, wait_for: str, *args: str, **deadlines: float) -> Any:
    return RayJobArgs(
        entrypoint=shlex.join([sys.executable, str(STARTUP_JOB), "--run", run, *args]),
        runtime_env={},
        dashboard=dashboard_access.url_dashboard(url),
        checkpoint_root=None,
        submission_id_prefix="bench-reports",
        wait_for=wait_for,
        deadlines=JobDeadlines(**deadlines),
    ).to_props()


def bench_reports() -> None:
    print("\n== 5. fault reports through the real dynamic host ==")
    from ray.job_submission import JobSubmissionClient

    from tests.support.dynamic_host import from_wire, start_dynamic_host, wire
    from tests.support.local_proxies import start_fault_proxy

    head = start_ray_head(Path(tempfile.mkdtemp(prefix="rjb", dir="/tmp")))
    host = start_dynamic_host()
    client = JobSubmissionClient(head.dashboard_url)
    try:
        props = _reports_props(head.dashboard_url, "slow", "running", "--hold-seconds", "900")
        checked = host.check(URN, None, engine_inputs(props, RayJobProvider()))
        created = host.create(URN, checked.inputs)
        for delay in (22.0, 30.0, 50.0):
            proxy = start_fault_proxy(head.dashboard_url, delay_s=delay)
            outs = {**from_wire(created.properties),
                    "dashboard": dashboard_access.url_dashboard(proxy.endpoint)}  # fmt: skip
            _timed(f"refresh, every response held {delay:.0f} s (reach 45 s)",
                   lambda o=outs: from_wire(host.read(URN, created.id, wire(o)).properties)[
                       "status"])  # fmt: skip
            proxy.stop()
        client.stop_job(created.id)

        proxy = start_fault_proxy(
            head.dashboard_url, fail_paths=r"^/api/v0/logs/|^/api/jobs/[^/]+/logs"
        )
        props = _reports_props(proxy.endpoint, "no-log", "first_step", "--hold-seconds", "900",
                               submit_s=60.0)  # fmt: skip
        _timed(
            "first_step wait, log endpoints 500, status answers", lambda: _host_create(host, props)
        )
        proxy.stop()
        for job in client.list_jobs():
            if job.submission_id and not job.status.is_terminal():
                client.stop_job(job.submission_id)

        props = _reports_props(head.dashboard_url, "deleted", "running", "--hold-seconds", "900")
        first = _host_create(host, props)
        sid = first.split()[-1]
        client.stop_job(sid)
        while not client.get_job_status(sid).is_terminal():
            time.sleep(0.2)
        client.delete_job(sid)
        _timed(
            f"up after {sid} was stopped + deleted out of band", lambda: _host_create(host, props)
        )

        props = _reports_props(head.dashboard_url, "fails", "first_step", "--fail-before-step")
        _timed("failed create, error as the engine gets it", lambda: _host_create(host, props))
        host.stop()
        host = start_dynamic_host(env={"VERL_GKE_DEBUG": "1"})
        props = _reports_props(
            head.dashboard_url, "fails-debug", "first_step", "--fail-before-step"
        )
        _timed("same with VERL_GKE_DEBUG=1", lambda: _host_create(host, props))
    finally:
        host.stop()
        head.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", default=",".join(PARTS))
    parser.add_argument("--checkpoints", type=int, default=CHECKPOINTS, help="1. discovery")
    parser.add_argument("--ranks", type=int, default=RANKS, help="1. discovery")
    args = parser.parse_args()
    parts = set(args.only.split(","))
    unknown = sorted(parts - set(PARTS))
    if unknown:
        parser.error(f"--only {','.join(unknown)}: not a part; choose from {','.join(PARTS)}")
    if "discovery" in parts:
        bench_discovery(args.runs, args.checkpoints, args.ranks)
    if "submit" in parts:
        bench_submit(args.runs)
    if "faults" in parts:
        bench_faults()
    if "tail" in parts:
        bench_tail()
    if "reports" in parts:
        bench_reports()


if __name__ == "__main__":
    main()
