"""The fabric check (payloads/fabric/fabric_check.py): transport classification on NCCL log
lines, the nccl-tests bandwidth arithmetic, pass/fail evaluation, and the whole job through a real
local Ray head with CPU ranks on gloo."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from ray.job_submission import JobStatus, JobSubmissionClient

from config.profiles import PROFILES
from jobs.ray_job import find_tagged_result
from payloads.fabric import fabric_check
from payloads.fabric.fabric_check import (
    DEFAULT_SIZES,
    GIB,
    MIB,
    Transport,
    bus_bandwidth_factor,
    classify_transport,
    evaluate,
    nccl_network,
    parse_size,
    size_result,
    sizes_up_to,
    summarize,
)
from tests.support.ray_head import RayHead

# Captured on two H200s over NVLink (bench/fabric_gpu.py, NCCL 2.28.9, NVLS off): NCCL names the
# Socket network and prints an MNNVL state line although every channel is P2P.
H200_NVLINK = [
    "vm:655:655 [0] NCCL INFO NET/IB : No device found.",
    "vm:655:655 [0] NCCL INFO NET/Socket : Using [0]eth0:192.0.2.2<0>",
    "vm:655:655 [0] NCCL INFO Using network Socket",
    "vm:655:655 [0] NCCL INFO MNNVL busId 0x60 fabric UUID 0.0 cliqueId 0x0 state 3 healthMask 0x0",
    "vm:655:655 [0] NCCL INFO comm 0x17c90630 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 "
    "MNNVL 0",
    "vm:655:655 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
    "vm:655:655 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM",
    "vm:655:655 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 1",
]
# Captured on the same pair with NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1: a TCP fallback.
H200_SOCKET = [
    "vm:600:600 [0] NCCL INFO Using network Socket",
    "vm:600:600 [0] NCCL INFO comm 0x4324eb70 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 "
    "MNNVL 0",
    "vm:600:600 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0",
    "vm:600:600 [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [receive] via NET/Socket/0",
]
# Written in NCCL's format for the fabrics not available here (RoCE with the gIB plugin, IB,
# GB200 multi-node NVLink, PCIe-only GPUs).
GIB_RDMA = [
    "a3u-0:81:81 [0] NCCL INFO Using network gIB",
    "a3u-0:81:81 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
    "a3u-0:81:81 [0] NCCL INFO Channel 00/0 : 15[7] -> 0[0] [receive] via NET/gIB/0/GDRDMA",
]
IB_RDMA = ["h:1:1 [0] NCCL INFO Channel 02/0 : 8[0] -> 0[0] [receive] via NET/IB/2/GDRDMA"]
MNNVL = ["a4x-0:7:7 [0] NCCL INFO Channel 00/0 : 3[3] -> 4[0] via P2P/MNNVL"]
MNNVL_FROM_COMM = [
    "a4x-0:7:7 [0] NCCL INFO comm 0x1 rank 0 nRanks 16 nNodes 4 localRanks 4 localRank 0 MNNVL 1",
    "a4x-0:7:7 [0] NCCL INFO Channel 00/0 : 3[3] -> 4[0] via P2P/CUMEM",
]
SHM = ["pc:9:9 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct"]


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (H200_NVLINK, Transport.NVLINK_P2P),
        (H200_SOCKET, Transport.SOCKET),
        (GIB_RDMA, Transport.RDMA),
        (IB_RDMA, Transport.RDMA),
        (MNNVL, Transport.MNNVL),
        (MNNVL_FROM_COMM, Transport.MNNVL),
        (SHM, Transport.SHM),
        (H200_NVLINK[:5], Transport.UNKNOWN),
        ([], Transport.UNKNOWN),
    ],
    ids=["nvlink", "socket", "gib", "ib", "mnnvl", "mnnvl-comm", "shm", "no-channels", "empty"],
)
def test_classifies_the_transport_from_channel_lines(lines: list[str], expected: Transport) -> None:
    transport, evidence = classify_transport(lines)
    assert transport is expected
    assert len(evidence) <= 3
    if expected is Transport.UNKNOWN:
        assert evidence == []
    else:
        assert all(" via " in line for line in evidence)


def test_the_slowest_transport_names_the_fabric() -> None:
    assert classify_transport(GIB_RDMA + H200_NVLINK)[0] is Transport.RDMA
    assert classify_transport(H200_NVLINK + H200_SOCKET)[0] is Transport.SOCKET


def test_network_plugin_is_read_but_does_not_decide() -> None:
    assert nccl_network(H200_NVLINK) == "Socket"
    assert nccl_network(GIB_RDMA) == "gIB"
    assert nccl_network(SHM) == ""


def test_bus_bandwidth_is_algbw_times_2_n_minus_1_over_n() -> None:
    assert bus_bandwidth_factor(2) == 1.0
    assert bus_bandwidth_factor(8) == 1.75
    assert bus_bandwidth_factor(16) == 1.875
    # The H200 pair's 1 GiB all-reduce took 3270.1 us per call.
    two = size_result(GIB, 3270.1e-6, 2)
    assert two.algbw_gbps == pytest.approx(328.35, abs=0.01)
    assert two.busbw_gbps == two.algbw_gbps
    sixteen = size_result(GIB, 3270.1e-6, 16)
    assert sixteen.busbw_gbps == pytest.approx(328.35 * 1.875, abs=0.02)


def test_summary_takes_the_slowest_rank_per_size() -> None:
    sizes = [MIB, GIB]
    results = summarize(sizes, [[1e-3, 2.0], [3e-3, 1.0]], world_size=2)
    assert [r.seconds for r in results] == [3e-3, 2.0]
    assert results[1].busbw_gbps == pytest.approx(GIB / 2.0 / 1e9)


def test_default_sizes_reach_one_gib() -> None:
    assert DEFAULT_SIZES[0] == MIB
    assert DEFAULT_SIZES[-1] == GIB
    assert sizes_up_to(GIB) == list(DEFAULT_SIZES)
    assert sizes_up_to(parse_size("300KiB"), parse_size("64k")) == [64 * 1024, 256 * 1024, 307200]
    assert parse_size("2GiB") == 2 * GIB
    assert parse_size("1048576") == MIB


def test_thresholds_per_profile() -> None:
    assert PROFILES["a3u"].fabric_min_busbw_gbps == 160.0
    assert PROFILES["a4"].fabric_min_busbw_gbps == 160.0
    assert PROFILES["a4x"].fabric_min_busbw_gbps > PROFILES["a4"].fabric_min_busbw_gbps


def parse_result(log_text: str) -> dict[str, Any] | None:
    # The provider's parser, the one that reads the verdict in production.
    return find_tagged_result(log_text, fabric_check.RESULT_KIND)


def results_at(busbw_gbps: float) -> list[fabric_check.SizeResult]:
    return [size_result(MIB, MIB / 20e9, 2), size_result(GIB, GIB / (busbw_gbps * 1e9), 2)]


def test_evaluation_passes_a_fast_known_fabric() -> None:
    transport, evidence = classify_transport(H200_NVLINK)
    result = evaluate(results_at(328.0), transport, evidence, backend="nccl", world_size=2,
                      nodes=1, min_busbw_gbps=160.0)  # fmt: skip
    assert result.ok
    assert result.reason == ""
    assert result.busbw_gbps == pytest.approx(328.0)
    assert result.avg_busbw_gbps == pytest.approx((20.0 + 328.0) / 2)


def test_evaluation_fails_closed_on_socket_fallback_even_when_fast_enough() -> None:
    transport, evidence = classify_transport(H200_SOCKET)
    result = evaluate(results_at(500.0), transport, evidence, backend="nccl", world_size=2,
                      nodes=2, min_busbw_gbps=1.0)  # fmt: skip
    assert not result.ok
    assert "NET/Socket" in result.reason
    assert result.transport == "socket"


def test_evaluation_fails_under_the_threshold() -> None:
    transport, evidence = classify_transport(GIB_RDMA)
    result = evaluate(results_at(90.0), transport, evidence, backend="nccl", world_size=16,
                      nodes=2, min_busbw_gbps=160.0)  # fmt: skip
    assert not result.ok
    assert "under the threshold 160 GB/s" in result.reason


def test_unknown_transport_fails_unless_allowed() -> None:
    args = {"backend": "nccl", "world_size": 2, "nodes": 1, "min_busbw_gbps": 1.0}
    assert not evaluate(results_at(300.0), Transport.UNKNOWN, [], **args).ok
    assert evaluate(
        results_at(300.0), Transport.UNKNOWN, [], require_known_transport=False, **args
    ).ok


def test_result_is_one_json_line_found_in_a_prefixed_log() -> None:
    transport, evidence = classify_transport(GIB_RDMA)
    result = evaluate(results_at(300.0), transport, evidence, backend="nccl", world_size=16,
                      nodes=2, min_busbw_gbps=160.0, network=nccl_network(GIB_RDMA))  # fmt: skip
    line = result.to_json()
    assert "\n" not in line
    log = "\n".join(["(RankActor pid=12) NCCL INFO ...", line, "job done", '{"other": 1}'])
    parsed = parse_result(log)
    assert parsed is not None
    assert parsed["check"] == "fabric"
    assert parsed["transport"] == "rdma"
    assert parsed["nccl_network"] == "gIB"
    assert parsed["sizes"][-1] == {
        "bytes": GIB, "time_us": pytest.approx(GIB / 300e9 * 1e6, abs=0.1),
        "algbw_gbps": 300.0, "busbw_gbps": 300.0,
    }  # fmt: skip
    assert parse_result("no json here") is None


# -- through a real Ray head ------------------------------------------------------------------


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # The check ships as a single file, as it would to the cluster.
    folder = tmp_path_factory.mktemp("fabric-job")
    shutil.copy(Path(fabric_check.__file__), folder / "fabric_check.py")
    return folder


def run_job(head: RayHead, workdir: Path, *args: str) -> tuple[JobStatus, int | None, str]:
    client = JobSubmissionClient(head.dashboard_url)
    entrypoint = " ".join([sys.executable, "fabric_check.py", *args])
    job = client.submit_job(
        entrypoint=entrypoint,
        # gloo between the ranks over loopback only.
        runtime_env={"working_dir": str(workdir), "env_vars": {"GLOO_SOCKET_IFNAME": "lo"}},
    )
    deadline = time.monotonic() + 180
    while not (status := client.get_job_status(job)).is_terminal():
        assert time.monotonic() < deadline, client.get_job_logs(job)
        time.sleep(0.5)
    return status, client.get_job_info(job).driver_exit_code, client.get_job_logs(job)


GLOO_ARGS = ("--backend", "gloo", "--world-size", "2", "--min-bytes", "64KiB",
             "--max-bytes", "1MiB", "--iters", "3", "--warmup", "1")  # fmt: skip


def test_gloo_ranks_on_a_ray_head_report_bandwidth_as_json(head: RayHead, workdir: Path) -> None:
    status, exit_code, logs = run_job(head, workdir, *GLOO_ARGS, "--min-busbw-gbps", "0.0001")
    result = parse_result(logs)
    assert result is not None, logs
    assert status == JobStatus.SUCCEEDED, logs
    assert exit_code == 0
    assert result["ok"] is True
    assert result["backend"] == "gloo"
    assert result["world_size"] == 2
    assert result["nodes"] == 1
    # No NCCL on CPU: nothing to classify, which gloo is allowed.
    assert result["transport"] == "unknown"
    assert [s["bytes"] for s in result["sizes"]] == [64 * 1024, 256 * 1024, MIB]
    for size in result["sizes"]:
        assert size["busbw_gbps"] > 0
        # Two ranks: busbw equals algbw, and algbw is bytes over time.
        assert size["busbw_gbps"] == size["algbw_gbps"]
        assert size["algbw_gbps"] == pytest.approx(
            size["bytes"] / (size["time_us"] * 1e-6) / 1e9, rel=0.01, abs=0.01
        )
    assert result["busbw_gbps"] == result["sizes"][-1]["busbw_gbps"]


def test_a_busbw_under_the_threshold_fails_the_job(head: RayHead, workdir: Path) -> None:
    status, exit_code, logs = run_job(head, workdir, *GLOO_ARGS, "--min-busbw-gbps", "100000")
    result = parse_result(logs)
    assert result is not None, logs
    assert status == JobStatus.FAILED
    assert exit_code == 1
    assert result["ok"] is False
    assert "under the threshold 100000 GB/s" in result["reason"]


def test_a_cluster_without_gpus_fails_the_nccl_check_with_a_reason(
    head: RayHead, workdir: Path
) -> None:
    # The head has no GPU: NCCL ranks cannot be placed, and that must not pass silently.
    status, exit_code, logs = run_job(
        head, workdir, "--backend", "nccl", "--timeout-s", "5", "--min-busbw-gbps", "1"
    )
    result = parse_result(logs)
    assert result is not None, logs
    assert status == JobStatus.FAILED
    assert exit_code == 2
    assert result["ok"] is False
    assert "needs at least 2 ranks" in result["reason"]
    assert json.loads(json.dumps(result)) == result
