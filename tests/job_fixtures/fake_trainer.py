"""Stand-in for `python3 -m verl.trainer.main_ppo`: writes verl's checkpoint layout to GCS.

Run as a Ray job entrypoint by the provider tests. It uses google-cloud-storage's default client,
so the job's runtime_env must carry STORAGE_EMULATOR_HOST (tests) or the pod must have credentials.
Per saved step it writes what verl's FSDP checkpoint manager and trainer write, in verl's order:
actor shards per rank, fsdp_config.json, huggingface/config.json, data.pt, and last the tracker
file latest_checkpointed_iteration.txt (verl/trainer/ppo/ray_trainer.py _save_checkpoint).

    python fake_trainer.py --root gs://bucket/run --steps 3 --save-freq 1 --world-size 2
    python fake_trainer.py ... --fail-at-step 2      # prints a traceback, exits 3
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from google.cloud import storage

SHARD_KINDS = ("model", "optim", "extra_state")


def checkpoint_objects(step: int, world_size: int) -> list[str]:
    """Object names (relative to the run folder) of one verl FSDP checkpoint, in write order."""
    actor = f"global_step_{step}/actor"
    names = [
        f"{actor}/{kind}_world_size_{world_size}_rank_{rank}.pt"
        for rank in range(world_size)
        for kind in SHARD_KINDS
    ]
    names += [
        f"{actor}/fsdp_config.json",
        f"{actor}/huggingface/config.json",
        f"global_step_{step}/data.pt",
    ]
    return names


def write_checkpoint(bucket: storage.Bucket, folder: str, step: int, world_size: int) -> None:
    """Write one checkpoint of `step` under gs://<bucket>/<folder>, then point the tracker at it."""
    base = f"{folder.strip('/')}/" if folder.strip("/") else ""
    for name in checkpoint_objects(step, world_size):
        payload = json.dumps({"step": step, "name": name}).encode()
        bucket.blob(base + name).upload_from_string(payload)
    bucket.blob(base + "latest_checkpointed_iteration.txt").upload_from_string(str(step))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True, help="gs://bucket/folder")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--save-freq", type=int, default=1)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--step-seconds", type=float, default=0.0)
    parser.add_argument("--fail-at-step", type=int, default=0)
    parser.add_argument("--log-lines-per-step", type=int, default=1)
    args = parser.parse_args(argv)

    from google.cloud import storage

    bucket_name, _, folder = args.root.removeprefix("gs://").partition("/")
    bucket = storage.Client().bucket(bucket_name)
    print(f"Total training steps: {args.steps}", flush=True)
    for step in range(1, args.steps + 1):
        for line in range(args.log_lines_per_step):
            print(f"step:{step} - line:{line} - critic/score/mean:{step / 10:.3f}", flush=True)
        if step == args.fail_at_step:
            print("Traceback (most recent call last):", flush=True)
            print(f"RuntimeError: boom at step {step}", flush=True)
            return 3
        time.sleep(args.step_seconds)
        if args.save_freq > 0 and (step % args.save_freq == 0 or step == args.steps):
            write_checkpoint(bucket, folder, step, args.world_size)
            print(f"saved checkpoint global_step_{step}", flush=True)
    print("Final validation metrics: {}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
