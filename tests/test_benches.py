"""Each benchmark under bench/ runs its CPU path here, with small sizes, as a user runs it, so
that a change to the code it drives cannot break it unnoticed.

Elsewhere: bench/gpu_run.py --device cpu (tests/test_gpu_run_cpu.py), bench/critical_path.py
(tests/test_critical_path_model.py), bench/recovery.py's loop (tests/test_recovery.py).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.require import verl_python
from training.model_table import MODEL_TABLE

# Each starts interpreters (torch, a verl virtualenv, the offline engine).
pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run(command: list[str], env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return done.stdout


def test_memory_fit_gpu_runs_a_training_step_on_cpu_and_builds_every_table_model() -> None:
    """--device cpu (gloo) on the tiny model; and the transformers config of every table model,
    which only the table's models go through (the duplicated max_position_embeddings)."""
    python = verl_python("0.9.0")  # torch and transformers, as on the GPU machine
    single = {
        "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()),
    }  # fmt: skip
    probe = (
        "import json, sys; sys.path.insert(0, '.'); "
        "from bench.memory_fit_gpu import model_config, table_arch; "
        "from training.model_table import MODEL_TABLE; "
        "print(json.dumps({m: model_config(table_arch(m).with_layers(1), 64).model_type "
        "for m in MODEL_TABLE}))"
    )
    configs = subprocess.Popen(
        [str(python), "-c", probe], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, cwd=REPO,
    )  # fmt: skip
    out = _run(
        [
            str(python), str(BENCH / "memory_fit_gpu.py"), "--device", "cpu", "--model", "tiny",
            "--seq-len", "32", "--micro-batch-sizes", "1", "--gc", "on", "--micro-batches", "1",
            "--steps", "1",
        ],
        env=single,
    )  # fmt: skip
    case = json.loads(out.strip().splitlines()[-1])
    assert (case["model"], case["seq_len"], case["micro_batch"]) == ("tiny", 32, 1)
    assert case["estimated_train_gib"] > 0 and len(case["step_seconds"]) == 1
    built, err = configs.communicate(timeout=300)
    assert configs.returncode == 0, err[-4000:]
    types = json.loads(built)
    assert sorted(types) == sorted(MODEL_TABLE)
    assert types["Qwen/Qwen3-0.6B"] == "qwen3" and types["google/gemma-3-1b-it"] == "gemma3_text"


def test_fabric_gpu_measures_on_cpu_with_gloo() -> None:
    out = _run(
        [
            sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
            "--master-addr", "127.0.0.1", "--master-port", str(_free_port()),
            str(BENCH / "fabric_gpu.py"), "--device", "cpu", "--max-bytes", "64KiB",
            "--iters", "2", "--warmup", "1", "--rounds", "1",
        ],
        env={"OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    report = json.loads(out.strip().splitlines()[-1])
    assert report["world_size"] == 2 and report["check_result"]["backend"] == "gloo"
    assert report["sizes"][-1]["bytes"] == 64 * 1024
    for row in report["sizes"]:
        assert row["check_busbw_gbps"] > 0 and row["plain_busbw_gbps"] > 0
        assert len(row["check_rounds_us"]) == len(row["plain_rounds_us"]) == 1


def test_plan_speed_times_one_stack() -> None:
    out = _run([sys.executable, str(BENCH / "plan_speed.py"), "--runs", "1", "--stacks", "a3u"])
    rows = [line.split() for line in out.splitlines() if line.startswith("a3u")]
    assert len(rows) == 1
    _, resources, plan_s, baseline_s, ratio = rows[0]
    assert int(resources) > 0 and float(plan_s) > 0 and float(baseline_s) > 0
    assert float(ratio) == pytest.approx(float(plan_s) / float(baseline_s), abs=0.01)


def test_job_provider_discovery_on_a_small_bucket() -> None:
    out = _run(
        [
            sys.executable, str(BENCH / "job_provider.py"), "--only", "discovery", "--runs", "1",
            "--checkpoints", "3", "--ranks", "2",
        ]
    )  # fmt: skip
    assert "3 checkpoints x 2 ranks" in out
    found = [line for line in out.splitlines() if "steps found" in line]
    assert len(found) == 2 and all(line.endswith("steps found 3") for line in found)


def test_job_provider_refuses_an_unknown_part() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / "job_provider.py"), "--only", "discovry"],
        capture_output=True, text=True, cwd=REPO, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and "--only discovry: not a part" in done.stderr


# Two lines of the stand-in's output as Ray forwarded them to the driver log of the 0.5B memory run
# on the H100 (2026-12-07): the log-prob pass is called twice a step (actor, reference).
STANDIN_MEMORY_LINES = """\
\x1b[36m(WorkerDict pid=8535)\x1b[0m verl-gke-gpu-run memory phase=log_prob peak_bytes=7849697792 \
reserved_peak_bytes=7906263040 device_used_bytes=9462218752 process_peak_bytes=9462218752
\x1b[36m(WorkerDict pid=8535)\x1b[0m verl-gke-gpu-run memory phase=log_prob peak_bytes=3823880192 \
reserved_peak_bytes=3938451456 device_used_bytes=5416812544 process_peak_bytes=5416812544
\x1b[36m(WorkerDict pid=8535)\x1b[0m verl-gke-gpu-run memory phase=actor_update \
peak_bytes=10946412544 reserved_peak_bytes=11549016064 device_used_bytes=13104971776 \
process_peak_bytes=13104971776
"""


def test_the_gpu_bench_keeps_each_phase_s_allocator_and_process_peaks() -> None:
    from bench.gpu_run import memory_peaks

    peaks = memory_peaks([STANDIN_MEMORY_LINES])
    assert peaks == {
        "log_prob": {"allocator": 7849697792, "reserved": 7906263040, "process": 9462218752},
        "actor_update": {"allocator": 10946412544, "reserved": 11549016064, "process": 13104971776},
    }
