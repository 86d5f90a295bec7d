"""Merge a finished verl run's latest FSDP checkpoint into a Hugging Face model folder.

    python export_model.py --checkpoint-dir /data/verl/checkpoints/<experiment> \
        --target-dir /data/models/<experiment>

Runs as the last command of the GRPO job's entrypoint, after verl's trainer exited 0, on the Ray
head (the job driver). The merge itself (`python -m verl.model_merger merge --backend fsdp
--local_dir <ckpt>/global_step_N/actor --target_dir <target>`, verl's own merger) runs as a Ray
task on a GPU worker node: it holds every fp32 shard in host RAM at once (about 200-256 GiB for a
32B model), more than the x86 head's CPU node has, and the worker nodes have TBs. No second GPU
job: the task asks Ray for one CPU and one GPU, resources only a GPU worker offers. A request by
resources is demand the autoscaler acts on (a worker group scaled to zero gets a node back);
a task pinned to a node by NodeAffinitySchedulingStrategy is not (Ray's autoscaler counts
resource demands, and a node that is gone can satisfy no affinity).

Idempotent: a marker file written last in the target folder names the step it was merged from;
a rerun for the same step does nothing. Stdlib and ray only: this file is all the head gets.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# verl writes this last when it saves a checkpoint (fsdp checkpoint manager): the latest
# complete global_step_N folder.
LATEST_FILE = "latest_checkpointed_iteration.txt"
# Written last in the target folder: a folder without it is an export that did not finish.
MARKER = ".verl-gke-export.json"
# Where verl's merger puts a LoRA run's adapter (base_model_merger.py save_lora_adapter).
LORA_DIR = "lora_adapter"
DEFAULT_MERGER = "verl.model_merger"
# Lines of the merger's output kept for an error message.
TAIL_LINES = 40
# How often a merge waiting for its node says so.
WAIT_REPORT_S = float(os.environ.get("VERL_GKE_EXPORT_WAIT_REPORT_S", "60"))


class ExportError(RuntimeError):
    """The export cannot run or failed; the message says what and where."""


def latest_step(checkpoint_dir: Path) -> tuple[int, Path]:
    """(N, <checkpoint_dir>/global_step_N/actor) of the latest complete checkpoint."""
    latest = checkpoint_dir / LATEST_FILE
    if not latest.is_file():
        raise ExportError(
            f"no checkpoint to export: {latest} does not exist (verl writes it after each "
            "checkpoint; is trainer.save_freq > 0 and trainer.default_local_dir this folder?)"
        )
    text = latest.read_text().strip()
    if not text.isdigit():
        raise ExportError(f"{latest} holds {text!r}, not a step number")
    step = int(text)
    actor = checkpoint_dir / f"global_step_{step}" / "actor"
    if not actor.is_dir():
        raise ExportError(f"{latest} names step {step}, but {actor} does not exist")
    return step, actor


def read_marker(target_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((target_dir / MARKER).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def merge_argv(merger: str, actor_dir: Path, target_dir: Path) -> list[str]:
    """The merger's command line (verl docs/advance/checkpoint.rst, v0.6.1 and later)."""
    return [
        sys.executable, "-m", merger, "merge",
        "--backend", "fsdp",
        "--local_dir", str(actor_dir),
        "--target_dir", str(target_dir),
    ]  # fmt: skip


def run_merger(argv: list[str]) -> dict[str, Any]:
    """Run the merger here (a Ray task); its output goes to this process's log, its tail
    comes back."""
    import ray

    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    output = (proc.stdout + proc.stderr).splitlines()
    print("\n".join(output), flush=True)
    return {
        "returncode": proc.returncode,
        "tail": output[-TAIL_LINES:],
        "seconds": round(time.monotonic() - started, 1),
        "node": os.uname().nodename,
        "ray_node_id": ray.get_runtime_context().get_node_id(),
    }


def task_options(resource: str) -> dict[str, Any]:
    """What the merge task asks Ray for: one CPU, and one unit of `resource` (GPU on the cluster;
    Ray takes CPU and GPU only as num_cpus / num_gpus, never in `resources`)."""
    if resource == "CPU":
        return {"num_cpus": 1}
    if resource == "GPU":
        return {"num_cpus": 1, "num_gpus": 1}
    return {"num_cpus": 1, "resources": {resource: 1}}


def merge_on_node(argv: list[str], resource: str) -> dict[str, Any]:
    """Run the merger as a Ray task on a node that offers `resource`; while none does (the
    workers scaled to zero), wait and say so: the request is what brings one back."""
    import ray

    ray.init(address=os.environ.get("RAY_ADDRESS", "auto"))
    task = ray.remote(run_merger).options(**task_options(resource))
    ref = task.remote(argv)
    started = time.monotonic()
    while not ray.wait([ref], timeout=WAIT_REPORT_S)[0]:
        print(
            f"export: waiting {time.monotonic() - started:.0f} s for a Ray node with one free "
            f"{resource} and CPU (a worker group scaled to zero is brought back by this "
            "request; `kubectl get pods` shows the new worker)",
            flush=True,
        )
    return ray.get(ref)


# The values vLLM's --max-lora-rank accepts (vllm/config/lora.py MaxLoRARanks, vLLM 0.11: a
# Literal the CLI turns into choices); any other value, e.g. a LoRA rank of 4 or 48, is refused.
VLLM_MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def vllm_max_lora_rank(rank: object) -> int | str:
    """The smallest --max-lora-rank vLLM accepts that serves an adapter of rank `rank` (the
    rank itself where it is no int or above every choice, for the user to see)."""
    if not isinstance(rank, int):
        return str(rank)
    return next((m for m in VLLM_MAX_LORA_RANKS if m >= rank), rank)


def lora_contents(target_dir: Path, lora_alpha: int | None) -> dict[str, Any]:
    """What the folder holds and how to serve it. For a LoRA run verl's merger writes the frozen
    base weights as the model and the trained adapter to lora_adapter/ with lora_alpha 0
    (save_lora_adapter in verl/model_merger/base_model_merger.py v0.6.1; 0.9.0 takes the alpha
    from lora_train_meta.json when the checkpoint has one): the adapter is what was trained, so
    its alpha is set to the run's (PEFT scales the adapter by lora_alpha / r)."""
    config_path = target_dir / LORA_DIR / "adapter_config.json"
    if not config_path.is_file():
        return {"contents": "model", "serve": f"vllm serve {target_dir}"}
    config = json.loads(config_path.read_text())
    if lora_alpha is not None:
        config["lora_alpha"] = lora_alpha
        config_path.write_text(json.dumps(config, indent=4) + "\n")
    if not config.get("lora_alpha"):
        raise ExportError(
            f"{config_path} has lora_alpha {config.get('lora_alpha')!r} and this run passed "
            "none: the adapter would be scaled by 0. Set lora_alpha in it to the run's "
            "actor_rollout_ref.model.lora_alpha"
        )
    adapter = target_dir / LORA_DIR
    rank = config.get("r")
    return {
        "contents": "the untrained base model + the trained LoRA adapter (lora_adapter/)",
        "lora_alpha": config["lora_alpha"],
        "lora_rank": rank,
        # vLLM's LoRA serving: --enable-lora, --lora-modules name=path, --max-lora-rank >= r.
        "serve": (
            f"vllm serve {target_dir} --enable-lora --lora-modules trained={adapter} "
            f"--max-lora-rank {vllm_max_lora_rank(rank)}"
        ),
    }


def export(
    checkpoint_dir: Path,
    target_dir: Path,
    *,
    merger: str,
    node_resource: str,
    lora_alpha: int | None = None,
) -> dict[str, Any]:
    step, actor = latest_step(checkpoint_dir)
    marker = read_marker(target_dir)
    if marker and marker.get("step") == step and marker.get("source") == str(actor):
        print(f"export: {target_dir} already holds step {step}; nothing to do", flush=True)
        return {**marker, "skipped": True}
    target_dir.mkdir(parents=True, exist_ok=True)
    # A stale marker would vouch for a half-rewritten folder if this merge dies.
    (target_dir / MARKER).unlink(missing_ok=True)
    print(f"export: step {step} from {actor} -> {target_dir}", flush=True)
    result = merge_on_node(merge_argv(merger, actor, target_dir), node_resource)
    if result["returncode"] != 0:
        tail = "\n".join(result["tail"])
        raise ExportError(
            f"the merger exited {result['returncode']} on {result['node']} "
            f"(step {step}, {actor}); its last lines:\n{tail}"
        )
    record = {
        "step": step,
        "source": str(actor),
        "merger": merger,
        "node": result["node"],
        "ray_node_id": result["ray_node_id"],
        "seconds": result["seconds"],
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **lora_contents(target_dir, lora_alpha),
    }
    (target_dir / MARKER).write_text(json.dumps(record, indent=1) + "\n")
    print(
        f"export: done in {result['seconds']} s: {target_dir} holds {record['contents']}; "
        f"serve it with: {record['serve']}",
        flush=True,
    )
    return {**record, "skipped": False}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint-dir", type=Path, required=True)
    parser.add_argument("--target-dir", type=Path, required=True)
    # Tests only: a stand-in merger module, and a node resource a local head has.
    parser.add_argument("--merger-module", default=DEFAULT_MERGER)
    parser.add_argument("--node-resource", default="GPU")
    # A LoRA run's actor_rollout_ref.model.lora_alpha (verl's merger does not know it).
    parser.add_argument("--lora-alpha", type=int)
    args = parser.parse_args(argv)
    try:
        export(
            args.checkpoint_dir,
            args.target_dir,
            merger=args.merger_module,
            node_resource=args.node_resource,
            lora_alpha=args.lora_alpha,
        )
    except ExportError as error:
        print(f"export failed: {error}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
