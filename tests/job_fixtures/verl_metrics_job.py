"""Stand-in for `python3 -m verl.trainer.main_ppo` that only prints verl's console output.

Run as a Ray job entrypoint by tests/test_run_cli.py. Like verl, the driver starts a Ray actor
named TaskRunner and the actor prints, so Ray's driver-side printer adds the real
``(TaskRunner pid=N)`` prefix (with its ANSI colours) to every line in the job's log. The actor
prints verl's start-up markers, the pre-training validation line ``step:0 - val-core/...``, then
one ``step:N - ...`` line per training step in verl's format (aggregate_logger.concat_dict_to_str:
``key:pprint.pformat(value)`` joined by " - "; reduced metrics are numpy scalars, as in verl).

    python verl_metrics_job.py --steps 5 --finish --hold-file /tmp/x/release

Ray forwards actor output to the driver asynchronously, so the driver stays alive until the
file given by --hold-file exists: the test creates it once the log shows the last line, and no
line can be lost to an early exit.
"""

from __future__ import annotations

import argparse
import numbers
import os
import pprint
import socket
import time
from pathlib import Path

import numpy as np
import ray

TOTAL_STEPS = 435
LAST_LINE = "'Final validation metrics: {}'"


def concat_dict_to_str(data: dict[str, object], step: int) -> str:
    """verl/utils/logger/aggregate_logger.py's formatting, restated (numbers only, repr)."""
    parts = [f"step:{step}"]
    for key, value in data.items():
        if isinstance(value, numbers.Number):
            parts.append(f"{key}:{pprint.pformat(value)}")
    return " - ".join(parts)


def step_metrics(step: int) -> dict[str, object]:
    """A plausible GRPO step: score rises 0.1 per step from 0.3, response length grows by 20."""
    score = round(0.3 + 0.1 * (step - 1), 4)
    length = 200.0 + 20.0 * (step - 1)
    return {
        "actor/pg_loss": np.mean([-0.01, -0.02 * step]),
        "actor/entropy": np.float64(0.5 - 0.01 * step),
        "actor/lr": 1e-06,
        "training/global_step": step,
        "training/epoch": 0,
        "critic/score/mean": score,
        "critic/score/max": 1.0,
        "critic/score/min": 0.0,
        "critic/rewards/mean": score,
        "response_length/mean": length,
        "response_length/max": 1024.0,
        "response_length/min": 12.0,
        "response_length/clip_ratio": 0.0,
        "timing_s/gen": 20.0 + step,
        "timing_s/step": 60.0 + step,
        "perf/total_num_tokens": 400_000,
        "perf/throughput": 250.0 + step,
        "note": "not a number: verl drops it",
    }


class TaskRunner:
    def run(self, steps: int, finish: bool) -> None:
        print(f"TaskRunner hostname: {socket.gethostname()}, PID: {os.getpid()}", flush=True)
        print("Size of train dataloader: 29, Size of val dataloader: 1", flush=True)
        print(f"Total training steps: {TOTAL_STEPS}", flush=True)
        print("Training from scratch", flush=True)
        val = {"val-core/openai/gsm8k/reward/mean@1": np.float64(0.25)}
        print(f"'Initial validation metrics: {val}'", flush=True)
        print(concat_dict_to_str(val, step=0), flush=True)
        for step in range(1, steps + 1):
            print(concat_dict_to_str(step_metrics(step), step=step), flush=True)
        if finish:
            print(LAST_LINE, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--hold-file", type=Path, required=True)
    parser.add_argument("--finish", action="store_true", help="print the final validation line")
    args = parser.parse_args()
    print(f"ray init kwargs: {{'num_cpus': None, 'steps': {args.steps}}}", flush=True)
    ray.init()
    runner = ray.remote(num_cpus=0)(TaskRunner).remote()
    ray.get(runner.run.remote(args.steps, args.finish))
    while not args.hold_file.exists():
        time.sleep(0.2)
    ray.shutdown()


if __name__ == "__main__":
    main()
