"""Stand-in for verl's start-up, for the job provider's wait-mode and failure-tail tests.

Prints verl's start-up marker lines as the driver log shows them (verl's TaskRunner actor output
behind Ray's coloured ``(TaskRunner pid=N)`` prefix), then, unless told to fail first, one
training step line in verl's console format (``step:1 - key:value - ...`` with
``timing_s/step``), then keeps running or exits.

    python startup_job.py --startup-seconds 1 --hold-seconds 60     # first step, keeps running
    python startup_job.py --fail-before-step                         # dies while loading
    python startup_job.py --steps 2                                  # finishes (SUCCEEDED)
    python startup_job.py --hold-seconds 3 --fail-after-steps        # fails after its first step
    python startup_job.py --long-lines 3 --long-line-bytes 5000000 --fail-before-step
    python startup_job.py --release-file F --fail-after-steps        # step 1 once F exists
    python startup_job.py --hold-file F --fail-after-steps           # after step 1, until F

A file the test creates decides when the job moves on, so that what the job does is ordered
with what the test saw, not with a timer that a loaded machine can outrun.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

PREFIX = "\x1b[36m(TaskRunner pid=4242)\x1b[0m "


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--startup-seconds", type=float, default=0.5)
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--step-seconds", type=float, default=0.2)
    parser.add_argument("--hold-seconds", type=float, default=0.0)
    parser.add_argument("--fail-before-step", action="store_true")
    parser.add_argument("--fail-after-steps", action="store_true", help="after --hold-seconds")
    parser.add_argument("--long-lines", type=int, default=0)
    parser.add_argument("--long-line-bytes", type=int, default=5_000_000)
    parser.add_argument("--run", default="", help="ignored: makes each test's job spec unique")
    parser.add_argument("--release-file", type=Path, help="print the steps once this exists")
    parser.add_argument("--hold-file", type=Path, help="after the steps, hold until this exists")
    args = parser.parse_args(argv)

    print("ray init kwargs: {'num_cpus': None, 'runtime_env': {...}}", flush=True)
    print(f"{PREFIX}TaskRunner hostname: head-0, PID: 4242", flush=True)
    print(f"{PREFIX}Size of train dataloader: 58, Size of val dataloader: 1", flush=True)
    print(f"{PREFIX}Total training steps: {args.steps}", flush=True)
    for index in range(args.long_lines):
        # e.g. a pprint of a tensor or of the resolved config on one line
        sys.stdout.write(f"{PREFIX}long line {index}: " + "x" * args.long_line_bytes + "\n")
        sys.stdout.flush()
    time.sleep(args.startup_seconds / 2)
    print(f"{PREFIX}Model config after override: Qwen2Config {{...}}", flush=True)
    time.sleep(args.startup_seconds / 2)
    if args.fail_before_step:
        print(f"{PREFIX}Traceback (most recent call last):", flush=True)
        print(f"{PREFIX}torch.OutOfMemoryError: CUDA out of memory (stand-in)", flush=True)
        return 7
    print(f"{PREFIX}step:0 - val-core/openai/gsm8k/reward/mean@1:0.12", flush=True)
    _wait_for(args.release_file)
    for step in range(1, args.steps + 1):
        time.sleep(args.step_seconds)
        print(
            f"{PREFIX}step:{step} - actor/pg_loss:np.float64(-0.0123) - "
            f"critic/score/mean:{0.1 * step:.2f} - response_length/mean:312.5 - "
            f"perf/throughput:1534.2 - timing_s/step:{41.5 + step} - "
            f"training/global_step:{step}",
            flush=True,
        )
    time.sleep(args.hold_seconds)
    _wait_for(args.hold_file)
    if args.fail_after_steps:
        print(f"{PREFIX}Traceback (most recent call last):", flush=True)
        print(f"{PREFIX}RuntimeError: NCCL watchdog timeout (stand-in)", flush=True)
        return 9
    print(f"{PREFIX}Final validation metrics: {{}}", flush=True)
    return 0


def _wait_for(path: Path | None, limit_s: float = 600.0) -> None:
    deadline = time.monotonic() + limit_s
    while path is not None and not path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
