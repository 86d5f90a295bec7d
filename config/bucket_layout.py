"""The training bucket's layout: the one owner of every path the pods share under /data.

The data-prep Job writes these folders, the RayCluster mounts the bucket there, the GRPO job reads
and writes them and the job provider lists checkpoints through their gs:// names. Each of those
derives its paths from here (the data-prep script, which cannot import the program, gets them on
its command line; tests/test_prepare_data.py checks that its folder names agree). If two of them
drifted, the job would look where data preparation never wrote, after the GPUs exist.

Pure: no Pulumi, no I/O.
"""

from __future__ import annotations

import hashlib
import posixpath

# Where every pod that reads or writes training data mounts the bucket (GCS FUSE); the bucket's
# root. The only place all Ray workers see the same files.
DATA_MOUNT = "/data"

# verl's source at the stack's ref; the GRPO job imports verl from here (PYTHONPATH).
VERL_CHECKOUT = f"{DATA_MOUNT}/verl"
# Checkpoints live in the bucket under verl/checkpoints (inside the verl checkout as the tutorial
# has it; the data-prep script keeps this folder when it replaces the checkout), but the Ray pods
# reach them through their own mount: metadata TTL 0 and no file cache, so verl's resume marker
# (latest_checkpointed_iteration.txt, rewritten in place) is read fresh on every node, while
# DATA_MOUNT caches metadata for good (manifests/fuse_mounts.py).
CHECKPOINT_PREFIX = "verl/checkpoints"
CHECKPOINT_MOUNT = "/checkpoints"
# One folder per experiment below it (trainer.default_local_dir).
CHECKPOINT_ROOT = CHECKPOINT_MOUNT
# A node-local copy of VERL_CHECKOUT (an emptyDir the Ray pods fill at start): the jobs import
# verl from here, not through GCS FUSE.
VERL_NODE_LOCAL = "/opt/verl-node-local"
# GSM8K as parquet, written by verl's examples/data_preprocess/gsm8k.py.
GSM8K_DIR = f"{DATA_MOUNT}/gsm8k"
GSM8K_TRAIN = f"{GSM8K_DIR}/train.parquet"
GSM8K_TEST = f"{GSM8K_DIR}/test.parquet"
# Hub datasets converted to verl's parquet, one folder per dataset and column mapping
# (config/run_inputs.py), and the run's reward files, one folder per file content.
DATASETS_ROOT = f"{DATA_MOUNT}/datasets"
REWARDS_ROOT = f"{DATA_MOUNT}/rewards"
# The data-prep script's completion markers (one per step).
PREP_MARKERS = f"{DATA_MOUNT}/.prep"
# Hugging Face caches: the data-prep (Kubernetes) Job's download cache, and the HF_HOME of the
# GRPO Ray job (the tutorial's value; it reads the model from the bucket, so it stays nearly empty).
DATA_PREP_HF_HOME = f"{DATA_MOUNT}/.cache/huggingface"
GRPO_HF_HOME = f"{DATA_MOUNT}/huggingface_cache"


def model_folder_name(model_id: str, revision: str | None = None) -> str:
    """The model's folder name in the bucket: the last part of the Hugging Face id
    ("Qwen/Qwen2.5-32B-Instruct" -> "Qwen2.5-32B-Instruct"), and for a pinned commit its first
    12 hex digits ("Qwen3-8B-0123456789ab"), so each commit has its own folder."""
    name = model_id.rstrip("/").rsplit("/", 1)[-1]
    return f"{name}-{revision[:12]}" if revision else name


def model_path(model_id: str, revision: str | None = None) -> str:
    """The model's mounted path: where the data-prep Job puts the model and the GRPO job loads
    it from (its last part is model_folder_name)."""
    return f"{DATA_MOUNT}/{model_folder_name(model_id, revision)}"


def checkpoint_dir(experiment: str) -> str:
    """The experiment's folder: every run of it has its own folder inside (run_checkpoint_dir)."""
    return f"{CHECKPOINT_ROOT}/{experiment}"


def run_checkpoint_dir(experiment: str, world_size: int, resume_identity: str) -> str:
    """trainer.default_local_dir of one run: `<experiment>/w<world size>-<8 hex digits of
    resume_identity>`. verl resumes from the folder's latest_checkpointed_iteration.txt and loads
    `model_world_size_<W>_rank_<r>.pt` (verl/utils/checkpoint/fsdp_checkpoint_manager.py, v0.6.1
    and ddbcdb7), so a run whose checkpoints it cannot load (another world size, model or actor
    sharding: resume_identity says which) gets a new folder and starts from step 0."""
    digest = hashlib.sha256(resume_identity.encode()).hexdigest()[:8]
    return f"{checkpoint_dir(experiment)}/w{world_size}-{digest}"


# What each run folder holds besides verl's own files (payloads/grpo/run_grpo.py writes them).
RUN_IDENTITY_FILE = "verl-gke-run.json"  # the resume identity, written before the first step
TRAINING_DONE_FILE = "training.done"  # training exited 0: its step, identity and command hash
METRICS_FILE = "metrics.jsonl"  # verl's file logger, the attempt running now
METRICS_ATTEMPTS_DIR = "metrics"  # earlier attempts' metrics.jsonl, moved here as attempt-<n>.jsonl
TENSORBOARD_SUBDIR = "tensorboard"  # TENSORBOARD_DIR of the run
RECOVERY_FILE = "recovery.json"  # the training attempts (payloads/export/supervise.py)
STACKS_DIR = "stacks"  # stacks of a hung trainer, stacks/attempt-<n>/ (supervise.py)


# Hugging Face model folders merged from a run's final checkpoint, one per experiment
# (payloads/export/export_model.py writes them; `modelExportPath` is the gs:// name).
MODELS_ROOT = f"{DATA_MOUNT}/models"


def model_export_dir(experiment: str) -> str:
    """Where a finished run's merged Hugging Face model lands."""
    return f"{MODELS_ROOT}/{experiment}"


# The evaluation of an export against its base model, in the export's folder
# (payloads/export/evaluate.py REPORT_NAME writes it): summary and per-prompt results.
EVAL_REPORT_NAME = ".verl-gke-eval.json"


def eval_report_path(experiment: str) -> str:
    """Where the evaluation of the experiment's export lands."""
    return f"{model_export_dir(experiment)}/{EVAL_REPORT_NAME}"


def rewritten_by_data_prep(model_id: str, revision: str | None = None) -> tuple[str, ...]:
    """Folders the data-prep Job replaces when its inputs change (CHECKPOINT_ROOT excepted)."""
    return (
        VERL_CHECKOUT,
        GSM8K_DIR,
        PREP_MARKERS,
        DATASETS_ROOT,
        REWARDS_ROOT,
        model_path(model_id, revision),
    )


def is_shared(path: str) -> bool:
    """Whether an absolute path lies inside a bucket mount (the only places all pods share)."""
    normal = posixpath.normpath(path)
    return normal.startswith(f"{DATA_MOUNT}/") or _under(normal, CHECKPOINT_MOUNT)


def _under(path: str, mount: str) -> bool:
    return path == mount or path.startswith(f"{mount}/")


def bucket_url(bucket: str, mounted_path: str) -> str:
    """gs:// URL of a path under a mount (DATA_MOUNT is the bucket's root, CHECKPOINT_MOUNT its
    CHECKPOINT_PREFIX)."""
    if _under(mounted_path, CHECKPOINT_MOUNT):
        return f"gs://{bucket}/{CHECKPOINT_PREFIX}{mounted_path[len(CHECKPOINT_MOUNT) :]}"
    if not _under(mounted_path, DATA_MOUNT):
        raise ValueError(
            f"{mounted_path!r} is not under the bucket mounts {DATA_MOUNT} or {CHECKPOINT_MOUNT}"
        )
    return f"gs://{bucket}{mounted_path[len(DATA_MOUNT) :]}"
