"""Fabric check: all-reduce bus bandwidth and the transport NCCL chose, on every GPU of the cluster.

Runs as a Ray job before GRPO. One rank per GPU of every GPU worker (a placement group of
one-GPU bundles, packed so ranks of a node are neighbours), NCCL all-reduce over message sizes
up to 1 GiB, bus bandwidth computed as nccl-tests does (busbw = algbw x 2(n-1)/n, the time being
the slowest rank's), and the transport read from NCCL's INFO log. It fails closed: a socket
fallback, an unknown transport or a busbw under the threshold exits non-zero. The result is one
JSON line on stdout (`"check": "fabric"`); the job provider's `find_tagged_result`
(jobs/ray_job.py), the one parser of that format, finds it in the job log.

    python fabric_check.py --min-busbw-gbps 160              # in the Ray job (RAY_ADDRESS set)
    python fabric_check.py --backend gloo --max-bytes 1MiB --min-busbw-gbps 0  # CPU, tests

The measurement core (timed loop, busbw, classification, evaluation) needs only torch and is
backend-agnostic: bench/fabric_gpu.py runs it under torchrun, the tests with gloo on CPU. Only
`run_on_ray` and `main` need Ray. The file has no project imports so it can be shipped alone.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

GIB = 1 << 30
MIB = 1 << 20
RESULT_KIND = "fabric"

# 1 MiB to 1 GiB by factors of 4: the small sizes show latency, the large ones the fabric's
# bandwidth, which is what the threshold is checked against (the largest size).
DEFAULT_SIZES: tuple[int, ...] = tuple(1 << s for s in range(20, 31, 2))
DEFAULT_ITERS = 20
DEFAULT_WARMUP = 5

class Transport(StrEnum):
    SOCKET = "socket"  # NET/Socket: TCP through the host network stack
    RDMA = "rdma"  # NET/IB or the gIB plugin, GPUDirect RDMA when "GDRDMA" shows
    MNNVL = "mnnvl"  # multi-node NVLink (GB200 NVL72 through IMEX)
    NVLINK_P2P = "nvlink-p2p"  # intra-node GPU peer-to-peer (NVLink, or PCIe on other machines)
    SHM = "shm"  # intra-node through host shared memory: GPUs without peer access
    UNKNOWN = "unknown"  # no NCCL INFO connection line was captured


# Looked for in NCCL's channel connection lines ("Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM"),
# worst first: when several appear (NVLink inside a node, RDMA between nodes) the slowest one
# bounds the collective and names the fabric. Only these lines count: NCCL also prints
# "Using network Socket" on a single node whose channels are all P2P (seen on an H200 pair), and
# "MNNVL ... state" lines on machines without multi-node NVLink.
_VIA_MARKERS: tuple[tuple[Transport, tuple[str, ...]], ...] = (
    (Transport.SOCKET, ("via NET/Socket",)),
    (Transport.RDMA, ("via NET/gIB", "via NET/IB", "GDRDMA")),
    (Transport.MNNVL, ("via P2P/MNNVL",)),
    (Transport.NVLINK_P2P, ("via P2P/", "via NVLS")),
    (Transport.SHM, ("via SHM/",)),
)
# "comm 0x... rank 0 nRanks 16 nNodes 4 localRanks 4 localRank 0 MNNVL 1": P2P channels of a
# communicator that spans nodes with MNNVL on are multi-node NVLink.
_COMM_LINE = re.compile(r"\bnNodes (\d+)\b.*\bMNNVL (\d+)")
_NETWORK_LINE = re.compile(r"Using network (\S+)")


def classify_transport(lines: Iterable[str]) -> tuple[Transport, list[str]]:
    """The transport NCCL used, from its INFO log lines, and up to 3 lines that show it."""
    found: dict[Transport, list[str]] = {}
    multi_node_nvlink = False
    for line in lines:
        comm = _COMM_LINE.search(line)
        if comm and int(comm.group(1)) > 1 and int(comm.group(2)) > 0:
            multi_node_nvlink = True
        if " via " not in line:
            continue
        for transport, markers in _VIA_MARKERS:
            if any(marker in line for marker in markers):
                found.setdefault(transport, []).append(line.strip())
                break
    if multi_node_nvlink and Transport.NVLINK_P2P in found:
        found.setdefault(Transport.MNNVL, []).extend(found.pop(Transport.NVLINK_P2P))
    for transport, _ in _VIA_MARKERS:
        if transport in found:
            return transport, found[transport][:3]
    return Transport.UNKNOWN, []


def nccl_network(lines: Iterable[str]) -> str:
    """The network plugin NCCL picked ("IB", "gIB", "Socket"), or "" if not logged. Informative
    only: NCCL picks one even when every channel is intra-node."""
    for line in lines:
        match = _NETWORK_LINE.search(line)
        if match:
            return match.group(1)
    return ""


def bus_bandwidth_factor(world_size: int) -> float:
    """nccl-tests' all-reduce correction: each rank sends and receives 2(n-1)/n of the data."""
    return 2.0 * (world_size - 1) / world_size


@dataclass(frozen=True)
class SizeResult:
    size_bytes: int
    seconds: float  # per all-reduce, slowest rank
    algbw_gbps: float
    busbw_gbps: float


def size_result(size_bytes: int, seconds: float, world_size: int) -> SizeResult:
    algbw = size_bytes / seconds / 1e9
    return SizeResult(size_bytes, seconds, algbw, algbw * bus_bandwidth_factor(world_size))


def summarize(
    sizes: Sequence[int], per_rank_seconds: Sequence[Sequence[float]], world_size: int
) -> list[SizeResult]:
    """Per size, the slowest rank's time (nccl-tests reduces its timings with MAX)."""
    results = []
    for i, size in enumerate(sizes):
        seconds = max(rank[i] for rank in per_rank_seconds)
        results.append(size_result(size, seconds, world_size))
    return results


def time_all_reduce(
    size_bytes: int, iters: int, warmup: int, device: Any, dtype: Any = None
) -> float:
    """Seconds per all-reduce of size_bytes on this rank: `iters` back-to-back launches after a
    barrier, timed with CUDA events on a GPU (wall clock on CPU). Needs an initialised group."""
    import torch
    import torch.distributed as dist

    dtype = dtype or torch.float32
    element = torch.tensor([], dtype=dtype).element_size()
    tensor = torch.ones(max(1, size_bytes // element), dtype=dtype, device=device)
    on_gpu = tensor.device.type == "cuda"
    for _ in range(warmup):
        dist.all_reduce(tensor)
    if on_gpu:
        torch.cuda.synchronize()
    dist.barrier()
    if on_gpu:
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            dist.all_reduce(tensor)
        end.record()
        end.synchronize()
        elapsed = start.elapsed_time(end) / 1e3
    else:
        begin = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(tensor)
        elapsed = time.perf_counter() - begin
    del tensor
    return elapsed / iters


def measure_all_reduce(
    sizes: Sequence[int], iters: int, warmup: int, device: Any, dtype: Any = None
) -> list[float]:
    return [time_all_reduce(size, iters, warmup, device, dtype) for size in sizes]


@dataclass(frozen=True)
class FabricResult:
    ok: bool
    reason: str
    backend: str
    world_size: int
    nodes: int
    transport: str
    transport_evidence: list[str]
    busbw_gbps: float  # at the largest size
    avg_busbw_gbps: float  # over all sizes, as nccl-tests' "Avg bus bandwidth"
    min_busbw_gbps: float
    sizes: list[SizeResult]
    check: str = RESULT_KIND
    error: str = ""
    hosts: list[str] = field(default_factory=list)
    nccl_network: str = ""

    def to_json(self) -> str:
        body = asdict(self)
        for key in ("busbw_gbps", "avg_busbw_gbps"):
            body[key] = round(body[key], 2)
        body["sizes"] = [
            {
                "bytes": s.size_bytes,
                "time_us": round(s.seconds * 1e6, 1),
                "algbw_gbps": round(s.algbw_gbps, 2),
                "busbw_gbps": round(s.busbw_gbps, 2),
            }
            for s in self.sizes
        ]
        return json.dumps(body, sort_keys=True)


def evaluate(
    sizes: list[SizeResult],
    transport: Transport,
    evidence: list[str],
    *,
    backend: str,
    world_size: int,
    nodes: int,
    min_busbw_gbps: float,
    require_known_transport: bool = True,
    hosts: Sequence[str] = (),
    network: str = "",
) -> FabricResult:
    """Pass/fail with the reason: socket fallback, unknown transport (when required), too low
    busbw at the largest size."""
    largest = max(sizes, key=lambda s: s.size_bytes)
    avg = sum(s.busbw_gbps for s in sizes) / len(sizes)
    reasons = []
    if transport is Transport.SOCKET:
        reasons.append(
            "NCCL fell back to TCP sockets (NET/Socket): the RDMA/NVLink fabric is not in use; "
            "check the NCCL plugin environment and the RDMA/DRA network attachments"
        )
    elif transport is Transport.UNKNOWN and require_known_transport:
        reasons.append(
            "no NCCL INFO connection line was captured, so the transport cannot be verified"
        )
    if largest.busbw_gbps < min_busbw_gbps:
        reasons.append(
            f"all-reduce busbw {largest.busbw_gbps:.1f} GB/s at {largest.size_bytes} bytes is "
            f"under the threshold {min_busbw_gbps:g} GB/s"
        )
    return FabricResult(
        ok=not reasons,
        reason="; ".join(reasons),
        backend=backend,
        world_size=world_size,
        nodes=nodes,
        transport=transport.value,
        transport_evidence=evidence,
        busbw_gbps=largest.busbw_gbps,
        avg_busbw_gbps=avg,
        min_busbw_gbps=min_busbw_gbps,
        sizes=sizes,
        hosts=list(hosts),
        nccl_network=network,
    )


def failed_result(error: str, backend: str, min_busbw_gbps: float) -> FabricResult:
    return FabricResult(
        ok=False,
        reason=f"the fabric check could not run: {error}",
        backend=backend,
        world_size=0,
        nodes=0,
        transport=Transport.UNKNOWN.value,
        transport_evidence=[],
        busbw_gbps=0.0,
        avg_busbw_gbps=0.0,
        min_busbw_gbps=min_busbw_gbps,
        sizes=[],
        error=error,
    )


# --- one rank --------------------------------------------------------------------------------


def configure_nccl_logging(log_dir: str) -> None:
    """NCCL INFO lines go to a file per process, where this rank reads them back. Must run
    before the first NCCL call of the process."""
    Path(log_dir).mkdir(parents=True, exist_ok=True)
    os.environ["NCCL_DEBUG"] = "INFO"
    os.environ["NCCL_DEBUG_FILE"] = str(Path(log_dir) / "nccl.%h.%p.log")


def read_nccl_log(log_dir: str, pid: int | None = None) -> list[str]:
    pid = os.getpid() if pid is None else pid
    lines: list[str] = []
    for path in sorted(Path(log_dir).glob(f"nccl.*.{pid}.log")):
        lines.extend(path.read_text(errors="replace").splitlines())
    return lines


def run_rank(
    rank: int,
    world_size: int,
    init_method: str,
    backend: str,
    sizes: Sequence[int],
    iters: int,
    warmup: int,
    log_dir: str,
) -> dict[str, Any]:
    """Join the group, time every size, leave; returns this rank's timings and NCCL lines."""
    import torch
    import torch.distributed as dist

    if backend == "nccl":
        configure_nccl_logging(log_dir)
        # Ray gives an actor only its own GPU (CUDA_VISIBLE_DEVICES), so it is device 0.
        device = torch.device("cuda", 0)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size)
    try:
        seconds = measure_all_reduce(sizes, iters, warmup, device)
    finally:
        dist.destroy_process_group()
    return {
        "rank": rank,
        "host": socket.gethostname(),
        "seconds": seconds,
        "nccl_lines": read_nccl_log(log_dir) if backend == "nccl" else [],
    }


def aggregate(
    rank_results: Sequence[Mapping[str, Any]],
    sizes: Sequence[int],
    backend: str,
    min_busbw_gbps: float,
    require_known_transport: bool,
) -> FabricResult:
    world = len(rank_results)
    timings = [r["seconds"] for r in rank_results]
    lines = [line for r in rank_results for line in r["nccl_lines"]]
    transport, evidence = classify_transport(lines)
    hosts = sorted({str(r["host"]) for r in rank_results})
    return evaluate(
        summarize(sizes, timings, world),
        transport,
        evidence,
        backend=backend,
        world_size=world,
        nodes=len(hosts),
        min_busbw_gbps=min_busbw_gbps,
        require_known_transport=require_known_transport,
        hosts=hosts,
        network=nccl_network(lines),
    )


# --- Ray -------------------------------------------------------------------------------------


class _RankActor:
    def address(self) -> tuple[str, int]:
        import ray

        ip = ray.util.get_node_ip_address()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((ip, 0))
            return ip, int(sock.getsockname()[1])

    def run(self, *args: Any) -> dict[str, Any]:
        return run_rank(*args)


def run_on_ray(
    *,
    backend: str = "nccl",
    world_size: int | None = None,
    sizes: Sequence[int] = DEFAULT_SIZES,
    iters: int = DEFAULT_ITERS,
    warmup: int = DEFAULT_WARMUP,
    min_busbw_gbps: float,
    cpus_per_rank: float = 1.0,
    require_known_transport: bool | None = None,
    timeout_s: float = 900.0,
) -> FabricResult:
    """Connects to the Ray cluster (RAY_ADDRESS inside a job), places one rank per GPU (or
    `world_size` CPU ranks for gloo) and returns the evaluated result.

    Long because placement, rank start-up, the timeout and the cleanup of the placement group share
    one try/finally."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    if not ray.is_initialized():
        ray.init(log_to_driver=False)
    gpus = 1 if backend == "nccl" else 0
    if world_size is None:
        if backend != "nccl":
            raise ValueError("world_size is required for a CPU backend (e.g. --world-size 2)")
        world_size = int(ray.cluster_resources().get("GPU", 0))
    if world_size < 2:
        raise ValueError(
            f"the fabric check needs at least 2 ranks; the cluster offers {world_size} "
            f"({'GPUs' if gpus else 'ranks asked'})"
        )
    bundle = {"CPU": cpus_per_rank, **({"GPU": 1} if gpus else {})}
    group = placement_group([dict(bundle) for _ in range(world_size)], strategy="PACK")
    ready, _ = ray.wait([group.ready()], timeout=timeout_s)
    if not ready:
        remove_placement_group(group)
        raise TimeoutError(
            f"placement group of {world_size} x {bundle} not ready after {timeout_s:.0f}s"
        )
    actor_cls = ray.remote(_RankActor)
    actors = [
        actor_cls.options(
            num_cpus=cpus_per_rank,
            num_gpus=gpus,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=group, placement_group_bundle_index=i
            ),
        ).remote()
        for i in range(world_size)
    ]
    try:
        addresses = ray.get([actor.address.remote() for actor in actors], timeout=timeout_s)
        # Ranks of one node get neighbouring numbers, as torchrun and mpirun would number them.
        order = sorted(range(world_size), key=lambda i: (addresses[i][0], i))
        actors = [actors[i] for i in order]
        ip, port = addresses[order[0]]
        init_method = f"tcp://{ip}:{port}"
        log_dir = tempfile.mkdtemp(prefix="fabric-nccl-")
        refs = [
            actor.run.remote(rank, world_size, init_method, backend, list(sizes), iters,
                             warmup, log_dir)
            for rank, actor in enumerate(actors)
        ]  # fmt: skip
        rank_results = ray.get(refs, timeout=timeout_s)
    finally:
        for actor in actors:
            ray.kill(actor)
        remove_placement_group(group)
    if require_known_transport is None:
        require_known_transport = backend == "nccl"
    return aggregate(rank_results, sizes, backend, min_busbw_gbps, require_known_transport)


def parse_size(text: str) -> int:
    units = {"gib": GIB, "mib": MIB, "kib": 1 << 10, "g": GIB, "m": MIB, "k": 1 << 10}
    lowered = text.strip().lower()
    for suffix, factor in units.items():
        if lowered.endswith(suffix):
            return int(float(lowered[: -len(suffix)]) * factor)
    return int(lowered)


def sizes_up_to(max_bytes: int, min_bytes: int = MIB) -> list[int]:
    sizes = []
    size = min(min_bytes, max_bytes)
    while size < max_bytes:
        sizes.append(size)
        size *= 4
    sizes.append(max_bytes)
    return sizes


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="NCCL all-reduce fabric check (Ray job)")
    parser.add_argument("--backend", default="nccl", choices=("nccl", "gloo"))
    parser.add_argument(
        "--min-busbw-gbps",
        type=float,
        required=True,
        help="fail under this busbw (GB/s) at the largest size (the program passes the "
        "profile's pass mark from config/profiles.py)",
    )
    parser.add_argument("--max-bytes", default="1GiB")
    parser.add_argument("--min-bytes", default="1MiB")
    parser.add_argument("--iters", type=int, default=DEFAULT_ITERS)
    parser.add_argument("--warmup", type=int, default=DEFAULT_WARMUP)
    parser.add_argument(
        "--world-size", type=int, default=None, help="ranks; default: every GPU of the cluster"
    )
    parser.add_argument("--cpus-per-rank", type=float, default=1.0)
    parser.add_argument("--allow-unknown-transport", action="store_true")
    parser.add_argument("--timeout-s", type=float, default=900.0)
    args = parser.parse_args(argv)  # fmt: skip

    threshold: float = args.min_busbw_gbps
    try:
        result = run_on_ray(
            backend=args.backend,
            world_size=args.world_size,
            sizes=sizes_up_to(parse_size(args.max_bytes), parse_size(args.min_bytes)),
            iters=args.iters,
            warmup=args.warmup,
            min_busbw_gbps=threshold,
            cpus_per_rank=args.cpus_per_rank,
            require_known_transport=False if args.allow_unknown_transport else None,
            timeout_s=args.timeout_s,
        )
    except Exception as exc:  # any failure must still end in one JSON line and a non-zero exit
        result = failed_result(f"{type(exc).__name__}: {exc}", args.backend, threshold)
        print(result.to_json(), flush=True)
        return 2
    print(result.to_json(), flush=True)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
