"""Prepare the shared training volume: verl source, GSM8K parquet files and the model weights.

Runs in the data-preparation Job's pod (the verl image; this folder arrives through a ConfigMap)::

    python3 /scripts/prepare_data.py --data-root /data --verl-ref v0.6.1 \\
        --model Qwen/Qwen2.5-32B-Instruct --model-folder Qwen2.5-32B-Instruct

Steps, cheapest first so that a broken ref or dataset fails before a long download:

    verl    <data-root>/<verl-dir>                 verl checked out at --verl-ref, one folder per
                                                   stack (none with --verl-from-image: the
                                                   image's verl runs)
    reward  --reward-dest                          a copy of --reward-file (only when given;
                                                   the rehearsal loads it in the training image)
    gsm8k   <data-root>/gsm8k/{train,test}.parquet by verl's examples/data_preprocess/gsm8k.py
                                                   (with --verl-from-image: the same rows,
                                                   written by hub_rows below)
    or dataset --dataset-dir/{train,test}.parquet  a Hub dataset through --dataset-columns
    or dataset --check-dataset                     parquet already in verl's format, checked
    model-files <data-root>/model-files/<model-folder>  the model's files but its weights
                                                   (config, tokenizer, chat template), at
                                                   --model-revision or the commit the Hub serves
    lengths <data-root>/.prep/prompt-lengths.json  prompts longer than --max-prompt-length
                                                   counted with the model's chat template (as
                                                   verl measures them); refused when verl would
                                                   keep less than one train batch
    model   <data-root>/<model-folder>             the model at the model-files step's commit,
                                                   staged in <model-folder>.partial

--part inputs runs every step but the last (what the rehearsal reads: it starts, and the GPU nodes
after it, while --part weights downloads the weights); --part all (the default) runs them all.

Each step writes its marker LAST: <data-root>/.prep/<name>.done (verl-<digest of repo and ref>,
gsm8k, model-<model-folder>), a JSON object {step, inputs, outputs, seconds, finished_at} with the
inputs it was done for and what it produced. A step is skipped only when its marker's inputs equal
the requested ones, so a retried or re-run Job redoes exactly what is missing or stale. Folder
renames are only an optimisation here: /data is GCS FUSE, where they are atomic only with
hierarchical namespace, and the markers (not the presence of a folder) decide what is complete.

Standard library only; huggingface_hub, datasets, pyarrow and transformers (present in the verl
image) are imported by the steps that use them. Python 3.10+. On failure the last line names the
step and the reason, exit status 1.

This file is the command line and the order of the steps; each step is a module of this folder:
prep_verl (verl), prep_dataset (reward, a Hub dataset), prep_gsm8k (gsm8k), prep_checks (a parquet
folder, lengths), prep_model (model), and prep_common what they share. The ConfigMap carries every
module of the folder as one key (manifests/data_prep.py read_scripts), mounted flat at /scripts:
there they import each other by plain name (the script's folder is sys.path[0]), in the program
and the tests by package path (payloads.data_prep.<module>).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

try:  # imported as payloads.data_prep.prepare_data (the program, tests)
    from . import prep_checks, prep_dataset, prep_gsm8k, prep_model, prep_verl
    from . import prep_common as common
except ImportError:  # run from /scripts in the pod: this folder is sys.path[0]
    import prep_checks
    import prep_common as common
    import prep_dataset
    import prep_gsm8k
    import prep_model
    import prep_verl

# --part: what the rehearsal reads, the weights, or both (manifests/data_prep.py: two Jobs).
PARTS = ("inputs", "weights", "all")


def commit_arg(value: str) -> str:
    # A commit id as huggingface_hub tells one (file_download.py REGEX_COMMIT_HASH, 0.36.2).
    if not re.fullmatch(r"[0-9a-f]{40}", value):
        raise argparse.ArgumentTypeError(f"--model-revision must be 40 hex digits, got {value!r}")
    return value


def model_folder_arg(value: str) -> str:
    if (
        not value
        or value in common.RESERVED_DIRS
        or Path(value).name != value
        or value in {".", ".."}
    ):
        raise argparse.ArgumentTypeError(
            f"--model-folder must be one folder name other than "
            f"{sorted(common.RESERVED_DIRS)}, got {value!r}; for example 'Qwen2.5-32B-Instruct'"
        )
    return value


def comma_list(value: str) -> tuple[str, ...]:
    return tuple(v for v in value.split(",") if v)


def add_run_input_args(parser: argparse.ArgumentParser) -> None:
    """verl from the image, the dataset and the reward file (none for the tutorial's run)."""
    parser.add_argument(
        "--verl-from-image",
        action="store_true",
        help="no verl checkout: the job runs the image's own verl; GSM8K is converted here",
    )
    parser.add_argument("--dataset", help="Hugging Face dataset id converted with the columns")
    parser.add_argument(
        "--dataset-columns",
        type=json.loads,
        help='JSON {"prompt": COL, "answer": COL, "trainSplit", "testSplit", "subset", '
        '"instruction"} (with --dataset)',
    )
    parser.add_argument("--dataset-dir", type=Path, help="where --dataset's parquet goes")
    parser.add_argument(
        "--check-dataset", type=Path, help="folder of train/test parquet in verl's format"
    )
    parser.add_argument(
        "--scored-sources",
        type=comma_list,
        help="with --check-dataset: the data_source values verl's built-in score knows, "
        "comma-separated (no verl-gke:reward); any other is refused",
    )
    parser.add_argument(
        "--scored-prefixes",
        type=comma_list,
        default=(),
        help="with --scored-sources: data_source prefixes verl's built-in score also knows",
    )
    parser.add_argument("--reward-file", type=Path, help="the reward file to copy")
    parser.add_argument("--reward-dest", type=Path, help="where verl reads --reward-file")


def add_length_args(parser: argparse.ArgumentParser) -> None:
    """The job's prompt limit and train batch (verl-gke:job), for the prompt-length step."""
    parser.add_argument(
        "--max-prompt-length",
        type=int,
        help="data.max_prompt_length: prompts longer than this (tokens, chat template applied) "
        "are counted; verl drops them",
    )
    parser.add_argument(
        "--train-batch-size", type=int, help="data.train_batch_size (with --max-prompt-length)"
    )
    parser.add_argument(
        "--train-batch-step",
        type=int,
        default=1,
        help="an accepted trainBatchSize is a multiple of this (offered as a fix)",
    )
    parser.add_argument(
        "--min-train-batch",
        type=int,
        default=1,
        help="an accepted trainBatchSize is at least this (ppoMiniBatchSize)",
    )


def add_model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model", required=True, help="Hugging Face model id, e.g. Qwen/Qwen2.5-32B-Instruct"
    )
    parser.add_argument(
        "--model-folder",
        type=model_folder_arg,
        required=True,
        help="folder under --data-root for the model, e.g. Qwen2.5-32B-Instruct",
    )
    parser.add_argument(
        "--model-revision",
        type=commit_arg,
        default=None,
        help="the Hub commit (40 hex digits) of --model to download (default: branch main)",
    )
    parser.add_argument(
        "--model-source",
        default="hub",
        help="'hub' (default) to download --model from the Hugging Face Hub, or "
        "a local directory to copy it from through the same staging, "
        "verification and marker path (tests)",
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Prepare verl source, GSM8K and the model on the training volume. Each step "
        "is skipped when <data-root>/.prep holds its completion marker for the same inputs. "
        "Reads the Hugging Face token from HF_TOKEN.",
    )
    parser.add_argument(
        "--data-root", type=Path, required=True, help="root of the shared volume, e.g. /data"
    )
    parser.add_argument(
        "--verl-repo",
        default="https://github.com/volcengine/verl.git",
        help="git URL or local path of the verl repository (tests pass a local repository)",
    )
    parser.add_argument(
        "--verl-ref",
        help="tag, branch or commit sha to check out; 7 to 40 hex digits are taken as a "
        "(full or abbreviated) commit sha (required unless --verl-from-image)",
    )
    parser.add_argument(
        "--verl-dir",
        default=common.VERL_DIR,
        help=f"the checkout's folder under --data-root, e.g. {common.VERL_CHECKOUTS_DIR}/<stack>",
    )
    parser.add_argument(
        "--part",
        choices=PARTS,
        default="all",
        help="inputs: verl, the reward, the dataset, the model's files but its weights and the "
        "prompt lengths; weights: the model's weights; all: both, in that order",
    )
    add_run_input_args(parser)
    add_length_args(parser)
    add_model_args(parser)
    parser.add_argument(
        "--termination-log",
        type=Path,
        default=Path("/dev/termination-log"),
        help="file that receives the failure reason, written only if it already "
        "exists (Kubernetes creates /dev/termination-log)",
    )
    args = parser.parse_args(argv)
    if args.verl_ref is None and not args.verl_from_image:
        parser.error("--verl-ref is required unless --verl-from-image")
    if (args.dataset is None) != (args.dataset_columns is None) or (args.dataset is None) != (
        args.dataset_dir is None
    ):
        parser.error("--dataset, --dataset-columns and --dataset-dir go together")
    if (args.reward_file is None) != (args.reward_dest is None):
        parser.error("--reward-file and --reward-dest go together")
    if (args.max_prompt_length is None) != (args.train_batch_size is None):
        parser.error("--max-prompt-length and --train-batch-size go together")
    return args


def data_step(args: argparse.Namespace, root: Path, token: str | None) -> Callable[[], None]:
    if args.dataset is not None:
        return lambda: prep_dataset.prepare_hub_dataset(
            root, args.dataset, args.dataset_columns, args.dataset_dir, token
        )
    if args.check_dataset is not None:
        return lambda: prep_checks.check_dataset(
            args.check_dataset, args.scored_sources, args.scored_prefixes
        )
    if args.verl_from_image:
        columns = {
            **prep_gsm8k.GSM8K_COLUMNS,
            "instruction": prep_gsm8k.GSM8K_INSTRUCTION,
            "answerFormat": "gsm8k",
        }
        return lambda: prep_dataset.prepare_hub_dataset(
            root, "openai/gsm8k", columns, root / common.GSM8K_DIR, token
        )
    return lambda: prep_gsm8k.prepare_gsm8k(root, root / args.verl_dir)


def data_folder(args: argparse.Namespace, root: Path) -> Path:
    """Where the data step leaves train.parquet and test.parquet."""
    if args.dataset is not None:
        return Path(args.dataset_dir)
    if args.check_dataset is not None:
        return Path(args.check_dataset)
    return root / common.GSM8K_DIR


def run_steps(
    args: argparse.Namespace, root: Path, source: str, token: str | None
) -> list[tuple[str, Callable[[], object]]]:
    steps: list[tuple[str, Callable[[], object]]] = []
    if args.part in ("inputs", "all"):
        steps += input_steps(args, root, source, token)
    if args.part in ("weights", "all"):
        steps.append(
            (
                "model",
                lambda: prep_model.prepare_model(
                    root, args.model, args.model_folder, source, token, args.model_revision
                ),
            )
        )
    return steps


def input_steps(
    args: argparse.Namespace, root: Path, source: str, token: str | None
) -> list[tuple[str, Callable[[], object]]]:
    """Everything the rehearsal reads: verl, the reward, the dataset, the model's files."""
    steps: list[tuple[str, Callable[[], object]]] = []
    if not args.verl_from_image:
        steps.append(
            (
                prep_verl.VERL_STEP,
                lambda: prep_verl.prepare_verl(root, args.verl_repo, args.verl_ref, args.verl_dir),
            )
        )
    if args.reward_file is not None:
        steps.append(
            ("reward", lambda: prep_dataset.copy_reward(args.reward_file, args.reward_dest))
        )
    default = args.dataset is None and args.check_dataset is None and not args.verl_from_image
    steps.append(("gsm8k" if default else "dataset", data_step(args, root, token)))
    steps.append(
        (
            "model-files",
            lambda: prep_model.prepare_model_files(
                root, args.model, args.model_folder, source, token, args.model_revision
            ),
        )
    )
    if args.max_prompt_length is not None:  # needs the dataset and the model's tokenizer
        data = data_folder(args, root)
        model_dir = root / common.MODEL_FILES_DIR / args.model_folder
        steps.append(
            ("lengths", lambda: prep_checks.check_prompt_lengths(root, data, model_dir, args))
        )
    return steps


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    root: Path = args.data_root.resolve()
    source = args.model_source
    if source != "hub":
        source = str(Path(source).resolve())
    token = os.environ.get("HF_TOKEN") or None
    steps = run_steps(args, root, source, token)
    started = time.monotonic()
    root.mkdir(parents=True, exist_ok=True)
    for name, run in steps:
        try:
            run()
        except Exception as error:  # every failure becomes one line that names the step
            reason = f"{type(error).__name__}: {error}"
            if isinstance(error, common.StepError):
                reason = str(error)
            line = f"prepare_data failed at step '{name}': {reason}"
            print(line, file=sys.stderr, flush=True)
            if args.termination_log.is_file():
                args.termination_log.write_text(line + "\n")
            return 1
    common.log("all", f"data prepared in {time.monotonic() - started:.1f}s under {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
