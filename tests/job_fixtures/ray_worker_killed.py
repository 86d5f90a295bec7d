"""A trainer whose Ray worker is killed by SIGKILL mid-step, as the kernel's OOM killer does: an
actor on the cluster at RAY_ADDRESS is asked for its pid, SIGKILLed (the tests run every node on
this machine), then called again; Ray raises its own error for the dead worker and this driver
exits with it, as verl's driver does.

    python ray_worker_killed.py
"""

from __future__ import annotations

import os
import signal
import time

import ray


@ray.remote(num_cpus=0)
class Worker:
    def pid(self) -> int:
        return os.getpid()

    def step(self) -> int:
        return 1


def main() -> None:
    ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False)
    worker = Worker.remote()
    pid = ray.get(worker.pid.remote())
    print("step:1 - training/global_step:1 - timing_s/step:0.1", flush=True)
    os.kill(pid, signal.SIGKILL)
    time.sleep(1)
    ray.get(worker.step.remote())  # raises Ray's error for the killed worker


if __name__ == "__main__":
    main()
