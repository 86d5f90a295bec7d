"""The fabric check's measurement core next to a plain all-reduce loop, on the same GPUs.

Ray is not needed: torchrun starts one process per GPU, each runs
payloads/fabric/fabric_check.py's core (measure_all_reduce, summarize, classify_transport,
evaluate) and a plain loop timed with CUDA events (warm-up, then `iters`
torch.distributed.all_reduce calls between two events, slowest rank), alternating for a few
rounds at the same sizes. Rank 0 prints one JSON line with both
busbw figures per size and their ratio.

    NCCL_NVLS_ENABLE=0 torchrun --nproc-per-node 2 bench/fabric_gpu.py --out fabric.json

`--device cpu` runs it with gloo (no CUDA events: wall clock) to smoke-test the script.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from payloads.fabric.fabric_check import (
    DEFAULT_ITERS,
    DEFAULT_WARMUP,
    Transport,
    bus_bandwidth_factor,
    classify_transport,
    configure_nccl_logging,
    evaluate,
    measure_all_reduce,
    nccl_network,
    parse_size,
    read_nccl_log,
    sizes_up_to,
    summarize,
)


def plain_loop_seconds(size_bytes: int, iters: int, warmup: int, device: torch.device) -> float:
    tensor = torch.ones(size_bytes // 4, dtype=torch.float32, device=device)
    for _ in range(warmup):
        dist.all_reduce(tensor)
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(iters):
            dist.all_reduce(tensor)
        end.record()
        end.synchronize()
        seconds = start.elapsed_time(end) / 1e3 / iters
    else:
        begin = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(tensor)
        seconds = (time.perf_counter() - begin) / iters
    slowest = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return float(slowest.item())


def gather_seconds(seconds: list[float], device: torch.device) -> list[list[float]]:
    mine = torch.tensor(seconds, dtype=torch.float64, device=device)
    everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    return [t.tolist() for t in everyone]


def worst_transport(local: Transport, device: torch.device) -> Transport:
    # Transport values in classify_transport's precedence order (worst first): keep the lowest.
    order = list(Transport)
    index = torch.tensor([order.index(local)], device=device)
    dist.all_reduce(index, op=dist.ReduceOp.MIN)
    return order[int(index.item())]


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-bytes", default="1GiB")
    parser.add_argument("--iters", type=int, default=DEFAULT_ITERS)
    parser.add_argument("--warmup", type=int, default=DEFAULT_WARMUP)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--log-dir", default="/tmp/fabric-bench-nccl")
    parser.add_argument("--min-busbw-gbps", type=float, default=160.0, help="a3u's floor")
    parser.add_argument("--out", default="")
    return parser.parse_args()


def _device(args: argparse.Namespace) -> torch.device:
    """The process group's device (one GPU per rank, NCCL; or the CPU, gloo)."""
    if args.device == "cuda":
        configure_nccl_logging(args.log_dir)
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    return device


def _rows(
    sizes: list[int],
    check_rounds: list[list[float]],
    plain_rounds: list[list[float]],
    check_best: list[float],
    plain_best: list[float],
) -> list[dict[str, object]]:
    """Per message size: the check's and the plain loop's bus bandwidth and every round."""
    factor = bus_bandwidth_factor(dist.get_world_size())
    rows = []
    for i, size in enumerate(sizes):
        check_bus = size / check_best[i] / 1e9 * factor
        plain_bus = size / plain_best[i] / 1e9 * factor
        rows.append(
            {
                "bytes": size,
                "check_busbw_gbps": round(check_bus, 2),
                "plain_busbw_gbps": round(plain_bus, 2),
                "ratio": round(check_bus / plain_bus, 4),
                "check_rounds_us": [round(r[i] * 1e6, 1) for r in check_rounds],
                "plain_rounds_us": [round(r[i] * 1e6, 1) for r in plain_rounds],
            }
        )
    return rows


def main() -> None:
    args = _arguments()
    device = _device(args)
    world = dist.get_world_size()
    sizes = sizes_up_to(parse_size(args.max_bytes))

    check_rounds: list[list[float]] = []
    plain_rounds: list[list[float]] = []
    for _ in range(args.rounds):
        per_rank = gather_seconds(
            measure_all_reduce(sizes, args.iters, args.warmup, device), device
        )
        check_rounds.append([r.seconds for r in summarize(sizes, per_rank, world)])
        plain_rounds.append(
            [plain_loop_seconds(size, args.iters, args.warmup, device) for size in sizes]
        )

    lines = read_nccl_log(args.log_dir) if args.device == "cuda" else []
    local_transport, evidence = classify_transport(lines)
    transport = worst_transport(local_transport, device)
    line_count = torch.tensor([len(lines)], device=device)
    dist.all_reduce(line_count)

    # Best round of each, as nccl-tests users quote the steady figure.
    check_best = [min(r[i] for r in check_rounds) for i in range(len(sizes))]
    plain_best = [min(r[i] for r in plain_rounds) for i in range(len(sizes))]
    result = evaluate(
        summarize(sizes, [check_best], world),
        transport,
        evidence,
        backend=dist.get_backend(),
        world_size=world,
        nodes=1,
        min_busbw_gbps=args.min_busbw_gbps,
        require_known_transport=args.device == "cuda",
        network=nccl_network(lines),
    )
    rows = _rows(sizes, check_rounds, plain_rounds, check_best, plain_best)
    if dist.get_rank() == 0:
        report = {
            "world_size": world,
            "iters": args.iters,
            "warmup": args.warmup,
            "rounds": args.rounds,
            "torch": torch.__version__,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())) if args.device == "cuda" else "",
            "nvls_enable": os.environ.get("NCCL_NVLS_ENABLE", ""),
            "check_result": json.loads(result.to_json()),
            "sizes": rows,
            "nccl_info_lines_all_ranks": int(line_count.item()),
            "rank0_transport": local_transport.value,
        }
        text = json.dumps(report)
        print(text, flush=True)
        if args.out:
            Path(args.out).write_text(text + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
