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

# verl's source at the stack's ref, one folder per stack (verl_checkout): two stacks that share a
# bucket may run different refs. The Ray pods copy it to VERL_NODE_LOCAL and import it there.
VERL_CHECKOUTS = f"{DATA_MOUNT}/verl-src"
# Checkpoints live in the bucket under verl/checkpoints (inside the verl checkout as the tutorial
# has it, which data prep wrote at /data/verl for every stack before checkouts had one folder per
# stack, keeping this folder when it replaced the checkout), but the Ray pods reach them through
# their own mount: metadata TTL 0 and no file cache, so verl's resume marker
# (latest_checkpointed_iteration.txt, rewritten in place) is read fresh on every node, while
# DATA_MOUNT caches metadata for good (manifests/fuse_mounts.py).
CHECKPOINT_PREFIX = "verl/checkpoints"
CHECKPOINT_MOUNT = "/checkpoints"
# One folder per experiment below it (trainer.default_local_dir).
CHECKPOINT_ROOT = CHECKPOINT_MOUNT
# A node-local copy of the stack's verl_checkout (an emptyDir the Ray pods fill at start): the
# jobs import verl from here, not through GCS FUSE.
VERL_NODE_LOCAL = "/opt/verl-node-local"
# GSM8K as parquet, written by verl's examples/data_preprocess/gsm8k.py.
GSM8K_DIR = f"{DATA_MOUNT}/gsm8k"
GSM8K_TRAIN = f"{GSM8K_DIR}/train.parquet"
GSM8K_TEST = f"{GSM8K_DIR}/test.parquet"
# Hub datasets converted to verl's parquet, one folder per dataset and column mapping
# (config/run_inputs.py), and the run's reward files, one folder per file content.
DATASETS_ROOT = f"{DATA_MOUNT}/datasets"
REWARDS_ROOT = f"{DATA_MOUNT}/rewards"
# The model's own files but its weights (config, tokenizer, chat template, remote code), one
# folder per model folder (model_files_path): data prep's inputs Job writes them before the
# weights, so the rehearsal and the prompt-length check start without waiting for the download.
MODEL_FILES_ROOT = f"{DATA_MOUNT}/model-files"
# The rehearsal's records (verl_scripts/rehearsal.py --out), one per stack, experiment and
# training command (rehearsal_record_path).
REHEARSALS_ROOT = f"{DATA_MOUNT}/rehearsals"
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


def model_files_path(model_id: str, revision: str | None = None) -> str:
    """The model's files but its weights (MODEL_FILES_ROOT), of the same commit as
    model_path's weights."""
    return f"{MODEL_FILES_ROOT}/{model_folder_name(model_id, revision)}"


def verl_checkout_folder(stack: str) -> str:
    """The stack's verl checkout below DATA_MOUNT (data prep's --verl-dir)."""
    return f"{VERL_CHECKOUTS.removeprefix(DATA_MOUNT + '/')}/{stack}"


def verl_checkout(stack: str) -> str:
    """The stack's verl checkout, written by data prep and copied by the Ray pods."""
    return f"{DATA_MOUNT}/{verl_checkout_folder(stack)}"


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


def rehearsal_record_path(stack: str, experiment: str, command_digest: str) -> str:
    """The rehearsal's record of one training command: `rehearsals/<stack>/<experiment>/<12 hex
    digits of the command>.json`. The stack keeps two stacks of one bucket apart; the command's
    digest (its Hydra overrides and what runs verl) means a record found there answers for
    exactly this command, and a changed command is rehearsed again."""
    for name, value in (("stack", stack), ("experiment", experiment)):
        if not value or "/" in value or value in {".", ".."}:
            raise ValueError(f"{name} {value!r} must be one folder name (no '/')")
    return f"{REHEARSALS_ROOT}/{stack}/{experiment}/{command_digest[:12]}.json"


# What each run folder holds besides verl's own files (payloads/grpo/run_grpo.py writes them).
RUN_IDENTITY_FILE = "verl-gke-run.json"  # the resume identity, written before the first step
TRAINING_DONE_FILE = "training.done"  # training exited 0: its step, identity and command hash
METRICS_FILE = "metrics.jsonl"  # verl's file logger, the attempt running now
METRICS_ATTEMPTS_DIR = "metrics"  # earlier attempts' metrics.jsonl, moved here as attempt-<n>.jsonl
TENSORBOARD_SUBDIR = "tensorboard"  # TENSORBOARD_DIR of the run
RECOVERY_FILE = "recovery.json"  # the training attempts (payloads/export/supervise.py)
STACKS_DIR = "stacks"  # stacks of a hung trainer, stacks/attempt-<n>/ (supervise.py)
LEASE_FILE = "trainer.lease"  # the runner and trainer training here (trainer_lease.py)


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
    """Folders the data-prep Job owns and replaces when its inputs change: every stack's
    checkout (VERL_CHECKOUTS) and the data, and verl/ (the bucket folder of the checkpoints,
    the one checkout of every stack before VERL_CHECKOUTS, which data prep of an earlier layout
    replaced around them); no model folder may take one of these names."""
    return (
        f"{DATA_MOUNT}/verl",
        VERL_CHECKOUTS,
        GSM8K_DIR,
        PREP_MARKERS,
        DATASETS_ROOT,
        REWARDS_ROOT,
        MODEL_FILES_ROOT,
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
