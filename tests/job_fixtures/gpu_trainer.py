"""Stand-in for verl's trainer on a cluster of "GPU nodes" (Ray nodes started with --num-gpus=1).

As verl 0.6.1 does (verl/single_controller/ray/base.py, RayResourcePool.get_placement_groups):
one placement group per node of bundles {"CPU": max_colocate_count, "GPU": 1}, STRICT_PACK,
waited for with ray.get(pg.ready()) (no timeout), one worker actor per bundle. Each step calls
every worker, then prints verl's console step line (verl/utils/logger/aggregate_logger.py); every
--save-freq steps each worker writes its shard and the driver then writes the tracker, in verl's
layout (verl/trainer/ppo/ray_trainer.py _save_checkpoint). It resumes from the tracker, as verl's
trainer.resume_mode=auto does.

    python gpu_trainer.py --run-dir D --steps 6 --world-size 2 [--hang-at-step 3]

--hang-at-step N: at step N, once (a marker file in the run folder; every attempt with
--hang-every-attempt), stop printing and wait forever, as a trainer stuck in a collective does.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import ray
from ray.util.placement_group import placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

TRACKER = "latest_checkpointed_iteration.txt"


@ray.remote
class Worker:
    def __init__(self, rank: int, world_size: int) -> None:
        self.rank = rank
        self.world_size = world_size

    def step(self, step: int, seconds: float) -> int:
        time.sleep(seconds)
        return os.getpid()

    def save(self, run_dir: str, step: int) -> None:
        actor = Path(run_dir) / f"global_step_{step}" / "actor"
        actor.mkdir(parents=True, exist_ok=True)
        name = f"model_world_size_{self.world_size}_rank_{self.rank}.pt"
        (actor / name).write_text(f"step {step}\n")


def say(line: str) -> None:
    """Print a line; a closed stdout (the runner gone) does not stop training. verl's step lines
    come from its TaskRunner actor through the driver's Ray log thread (verl/trainer/main_ppo.py
    runs fit() in the TaskRunner), so a broken pipe never reaches verl's training loop."""
    try:
        print(line, flush=True)
    except OSError:
        pass


def resume_step(run_dir: Path) -> int:
    try:
        return int((run_dir / TRACKER).read_text().strip())
    except (FileNotFoundError, ValueError):
        return 0


def workers(world_size: int) -> list[ray.actor.ActorHandle]:
    groups = [
        placement_group([{"CPU": 1, "GPU": 1}], strategy="STRICT_PACK") for _ in range(world_size)
    ]
    ray.get([group.ready() for group in groups])
    return [
        Worker.options(
            num_cpus=1,
            num_gpus=1,
            scheduling_strategy=PlacementGroupSchedulingStrategy(group, 0),
        ).remote(rank, world_size)
        for rank, group in enumerate(groups)
    ]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--save-freq", type=int, default=1)
    parser.add_argument("--step-seconds", type=float, default=0.5)
    parser.add_argument("--hang-at-step", type=int, default=0)
    parser.add_argument("--hang-every-attempt", action="store_true")
    args = parser.parse_args()
    ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False)
    start = resume_step(args.run_dir)
    if start:
        say(f"Load from checkpoint folder: {args.run_dir / f'global_step_{start}'}")
    group = workers(args.world_size)
    hang_marker = args.run_dir / "hang-once"
    for step in range(start + 1, args.steps + 1):
        began = time.monotonic()
        if step == args.hang_at_step and (args.hang_every_attempt or not hang_marker.exists()):
            hang_marker.write_text("hung once\n")
            while True:
                time.sleep(3600)
        ray.get([worker.step.remote(step, args.step_seconds) for worker in group])
        if step % args.save_freq == 0 or step == args.steps:
            ray.get([worker.save.remote(str(args.run_dir), step) for worker in group])
            (args.run_dir / TRACKER).write_text(str(step))
        seconds = time.monotonic() - began
        say(
            f"step:{step} - actor/pg_loss:-0.01 - training/global_step:{step} "
            f"- timing_s/step:{seconds:.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
