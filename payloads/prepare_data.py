"""Prepare the shared training volume: verl source, GSM8K parquet files and the model weights.

Runs in the data-preparation Job's pod (the verl image; the script arrives through a ConfigMap)::

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
    model   <data-root>/<model-folder>             the model (at --model-revision, a commit, when
                                                   given), staged in <model-folder>.partial
    lengths <data-root>/.prep/prompt-lengths.json  prompts longer than --max-prompt-length
                                                   counted with the model's chat template (as
                                                   verl measures them); refused when verl would
                                                   keep less than one train batch

Each step writes its marker LAST: <data-root>/.prep/<name>.done (verl-<digest of repo and ref>,
gsm8k, model-<model-folder>), a JSON object {step, inputs, outputs, seconds, finished_at} with the
inputs it was done for and what it produced. A step is skipped only when its marker's inputs equal
the requested ones, so a retried or re-run Job redoes exactly what is missing or stale. Folder
renames are only an optimisation here: /data is GCS FUSE, where they are atomic only with
hierarchical namespace, and the markers (not the presence of a folder) decide what is complete.

Standard library only; huggingface_hub, datasets, pyarrow and transformers (present in the verl
image) are imported by the steps that use them. Python 3.10+. On failure the last line names the
step and the reason, exit status 1.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

# Folder names under --data-root. The program's config/bucket_layout.py owns the layout; this
# script cannot import it (it runs alone in the pod), so tests/test_prepare_data.py checks that
# these names agree with it.
VERL_DIR = "verl"
# The stacks' verl checkouts, <VERL_CHECKOUTS_DIR>/<stack> (--verl-dir).
VERL_CHECKOUTS_DIR = "verl-src"
VERL_STEP = "verl"
GSM8K_DIR = "gsm8k"
PREP_DIR = ".prep"
GSM8K_SCRIPT = Path("examples/data_preprocess/gsm8k.py")
GSM8K_FILES = ("train.parquet", "test.parquet")
# Training writes trainer.default_local_dir=/data/verl/checkpoints: replacing the source tree for
# a new ref must not delete them.
KEEP_IN_VERL = frozenset({"checkpoints"})
PROGRESS_EVERY_S = 60.0
RESERVED_DIRS = frozenset(
    {VERL_DIR, VERL_CHECKOUTS_DIR, GSM8K_DIR, PREP_DIR, "datasets", "rewards"}
)
# The columns verl's RLHFDataset and reward managers read from every row (prompt_key "prompt",
# data_source, reward_model.ground_truth; verl/utils/dataset/rl_dataset.py,
# verl/workers/reward_manager/naive.py, v0.6.1 and v0.9.0).
VERL_COLUMNS = ("prompt", "data_source", "reward_model")
# verl's examples/data_preprocess/gsm8k.py, reproduced for an image without the examples folder.
GSM8K_INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
GSM8K_COLUMNS = {"prompt": "question", "answer": "answer", "subset": "main"}


class StepError(Exception):
    """A step failed for a reason worth one line in the Job's status."""


def log(step: str, message: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} [{step}] {message}", flush=True)


def human_size(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    value = float(size)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            break
    return f"{value:.1f} {unit}"


def tree_stats(folder: Path, exclude: frozenset[str] = frozenset()) -> tuple[int, int]:
    """(file count, total bytes) under folder, skipping top-level entries named in exclude."""
    count = size = 0
    for path in folder.rglob("*"):
        if path.relative_to(folder).parts[0] in exclude or not path.is_file():
            continue
        count += 1
        size += path.stat().st_size
    return count, size


def is_nonempty_file(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 0


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


# --- completion markers -------------------------------------------------------------------------


def marker_path(root: Path, name: str) -> Path:
    return root / PREP_DIR / f"{name}.done"


def read_json(path: Path) -> dict[str, object] | None:
    # A marker cut short by a crash is unreadable, which counts as "not done".
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_done(root: Path, name: str, inputs: dict[str, str]) -> bool:
    marker = read_json(marker_path(root, name))
    return marker is not None and marker.get("inputs") == inputs


def write_marker(
    root: Path, name: str, inputs: dict[str, str], outputs: dict[str, object], started: float
) -> Path:
    path = marker_path(root, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    marker = {
        "step": name,
        "inputs": inputs,
        "outputs": outputs,
        "seconds": round(time.monotonic() - started, 1),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    path.write_text(json.dumps(marker, indent=2, sort_keys=True) + "\n")
    return path


def clear_marker(root: Path, name: str) -> None:
    # Before touching a step's outputs, so that an interruption can never leave a marker that
    # vouches for half-rewritten files.
    marker_path(root, name).unlink(missing_ok=True)


def verl_marker_name(repo: str, ref: str, folder: str = VERL_DIR) -> str:
    """The verl step's marker name: one per repo, ref and checkout folder (each stack has its
    own, so a stack's data prep never clears another's marker). A Ray pod's verl copy waits for the
    name of its own ref (manifests/fuse_mounts.py). Its data mount keeps a file it has seen in
    its metadata cache for good, but never a file it found absent (manifests/storage.py:
    metadata-cache-ttl-secs=-1, metadata-cache-negative-ttl-secs=0; Cloud Storage FUSE "Stat
    caching"). Under one name for every ref, a pod that read the old ref's marker before data
    prep replaced it would see the old one until the pod ends; a name it has never seen is
    looked up in the bucket on every try."""
    digest = hashlib.sha256(f"{repo}@{ref} in {folder}".encode()).hexdigest()[:12]
    return f"{VERL_STEP}-{digest}"


def verl_inputs(repo: str, ref: str, folder: str) -> dict[str, str]:
    """The verl marker's inputs (manifests/fuse_mounts.py reads them before a pod copies)."""
    return {"repo": repo, "ref": ref, "dir": folder}


def clear_verl_markers(root: Path, folder: str) -> None:
    """Every ref's marker of the checkout in `folder` (a marker without "dir" is of <root>/verl,
    as written before checkouts had one folder per stack), and the single verl.done of releases
    before verl_marker_name; other folders' markers stay."""
    for path in (root / PREP_DIR).glob(f"{VERL_STEP}-*.done"):
        inputs = (read_json(path) or {}).get("inputs")
        if not isinstance(inputs, dict) or inputs.get("dir", VERL_DIR) == folder:
            path.unlink(missing_ok=True)
    marker_path(root, VERL_STEP).unlink(missing_ok=True)


# --- commands -----------------------------------------------------------------------------------


def run_command(
    step: str, cmd: list[str], env: dict[str, str] | None = None, check: bool = True
) -> int:
    """Run cmd, streaming its output into the log; on failure (check) raise with its last line."""
    log(step, "$ " + " ".join(cmd))
    last_lines: collections.deque[str] = collections.deque(maxlen=1)
    with subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            print("    " + line.rstrip(), flush=True)
            if line.strip():
                last_lines.append(line.strip())
    if check and proc.returncode != 0:
        last = f": {last_lines[0]}" if last_lines else ""
        raise StepError(f"`{' '.join(cmd[:3])} ...` exited with code {proc.returncode}{last}")
    return proc.returncode


def git_env() -> dict[str, str]:
    # A wrong URL or a private repository must fail, not wait for a password nobody will type.
    return {**os.environ, "GIT_TERMINAL_PROMPT": "0"}


def git_output(repo: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, env=git_env()
    )
    if result.returncode != 0:
        raise StepError(f"git {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout.strip()


# --- step 1: verl source ------------------------------------------------------------------------


def looks_like_sha(ref: str) -> bool:
    return 7 <= len(ref) <= 40 and all(c in "0123456789abcdef" for c in ref.lower())


def checkout_ref(step: str, repo: str, ref: str, checkout: Path) -> str:
    """Check repo out at ref (tag, branch or commit sha) into checkout; return the commit sha."""
    git = ["git", "-c", "advice.detachedHead=false"]
    env = git_env()
    if not looks_like_sha(ref):
        # Tags and branches: a shallow clone of that one commit.
        run_command(
            step, [*git, "clone", "--depth", "1", "--branch", ref, repo, str(checkout)], env
        )
        head = git_output(checkout, "rev-parse", "HEAD")
        wanted = git_output(checkout, "rev-parse", "--verify", f"{ref}^{{commit}}")
        if head != wanted:
            raise StepError(f"checked out {head} but {ref!r} is {wanted} in {repo}")
        return head
    # `git clone --branch` accepts only branch and tag names, and servers do not serve abbreviated
    # shas. A blobless clone has the whole commit graph to resolve the sha and downloads file
    # contents only for the commit checked out.
    run_command(
        step, [*git, "clone", "--filter=blob:none", "--no-checkout", repo, str(checkout)], env
    )
    run_command(step, [*git, "-C", str(checkout), "checkout", "--detach", ref], env)
    head = git_output(checkout, "rev-parse", "HEAD")
    if not head.startswith(ref.lower()):
        # git prefers a tag or branch of the same name over a commit sha.
        raise StepError(f"{ref!r} resolved to {head}, not to a commit with that sha (a tag?)")
    return head


def replace_tree(source: Path, dest: Path, keep: frozenset[str]) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for entry in dest.iterdir():
        if entry.name not in keep:
            remove(entry)
    # Contents and symlinks only: shutil.copytree also copies modes and times, and GCS FUSE may
    # refuse chmod (its modes come from mount options).
    for path in sorted(source.rglob("*")):
        target = dest / path.relative_to(source)
        if path.is_symlink():
            target.symlink_to(os.readlink(path))
        elif path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            shutil.copyfile(path, target)


def prepare_verl(root: Path, repo: str, ref: str, folder: str = VERL_DIR) -> None:
    step = VERL_STEP
    name = verl_marker_name(repo, ref, folder)
    dest = root / folder
    inputs = verl_inputs(repo, ref, folder)
    if is_done(root, name, inputs) and (dest / GSM8K_SCRIPT).is_file():
        log(step, f"skipped: {dest} is already at {ref} ({marker_path(root, name)})")
        return
    started = time.monotonic()
    clear_verl_markers(root, folder)
    log(step, f"started: {repo} at {ref} -> {dest}")
    # Git works in a local temporary folder (fast, and nothing half-cloned lands on the bucket);
    # only the finished checkout, with its .git, is copied to the volume.
    with tempfile.TemporaryDirectory(prefix="verl-checkout-") as tmp:
        checkout = Path(tmp) / "verl"
        commit = checkout_ref(step, repo, ref, checkout)
        files, size = tree_stats(checkout)
        log(step, f"checked out {commit}; copying {files} files ({human_size(size)}) to {dest}")
        replace_tree(checkout, dest, KEEP_IN_VERL)
    outputs: dict[str, object] = {"commit": commit, "path": str(dest), "files": files}
    outputs["bytes"] = size
    marker = write_marker(root, name, inputs, outputs, started)
    log(step, f"done in {time.monotonic() - started:.1f}s: {dest} at {commit}; marker {marker}")


# --- step 2: GSM8K ------------------------------------------------------------------------------


def gsm8k_output_flag(script: Path) -> str:
    # verl renamed the output flag of gsm8k.py: recent versions take --local_save_dir (keeping
    # --local_dir as a deprecated alias), older tags know only --local_dir. Reading the argparse
    # text avoids importing the script, which loads datasets and verl at import time.
    return "--local_save_dir" if "--local_save_dir" in script.read_text() else "--local_dir"


def prepare_gsm8k(root: Path, verl: Path) -> None:
    step = "gsm8k"
    out = root / GSM8K_DIR
    # The rows do not depend on the verl version, so a new --verl-ref does not redo this step.
    inputs = {"dataset": "openai/gsm8k", "output_dir": str(out)}
    if is_done(root, step, inputs) and all(is_nonempty_file(out / f) for f in GSM8K_FILES):
        log(step, f"skipped: {out} already has {', '.join(GSM8K_FILES)}")
        return
    started = time.monotonic()
    clear_marker(root, step)
    script = verl / GSM8K_SCRIPT
    if not script.is_file():
        raise StepError(f"{script} not found in the verl checkout")
    log(step, f"started: {script} -> {out}")
    out.mkdir(parents=True, exist_ok=True)
    for name in GSM8K_FILES:  # a file left by an earlier attempt must not pass the check below
        (out / name).unlink(missing_ok=True)
    # The image uninstalls its own verl; the script imports verl, so use the checkout's source.
    pythonpath = os.pathsep.join(p for p in (str(verl), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": pythonpath}
    run_command(step, [sys.executable, str(script), gsm8k_output_flag(script), str(out)], env)
    sizes: dict[str, object] = {}
    for name in GSM8K_FILES:
        if not is_nonempty_file(out / name):
            raise StepError(f"{script.name} exited 0 but {out / name} is missing or empty")
        sizes[name] = (out / name).stat().st_size
    marker = write_marker(root, step, inputs, {"path": str(out), "bytes": sizes}, started)
    log(step, f"done in {time.monotonic() - started:.1f}s: {sizes}; marker {marker}")


# --- step 2b: a Hub dataset or a parquet folder -----------------------------------------------


def gsm8k_solution(answer: str) -> str:
    """The final answer after `#### `, commas dropped (verl's gsm8k.py extract_solution)."""
    found = re.search("#### (\\-?[0-9\\.\\,]+)", answer)
    if found is None:
        raise StepError(f"a GSM8K answer has no '#### <number>' line: {answer[-80:]!r}")
    return found.group(0).split("#### ")[1].replace(",", "")


def hub_rows(
    example: dict[str, object], idx: int, split: str, dataset: str, columns: dict[str, str]
) -> dict[str, object]:
    """One row in verl's RL format, as verl's examples/data_preprocess/gsm8k.py writes them: a
    chat prompt, data_source (the key verl's default score dispatches on), reward_model's
    ground truth and extra_info (split, index, the raw answer and question)."""
    question = str(example[columns["prompt"]])
    answer = example[columns["answer"]]
    instruction = columns.get("instruction")
    gsm8k = dataset == "openai/gsm8k" and columns.get("answerFormat") == "gsm8k"
    row: dict[str, object] = {
        "data_source": dataset,
        "prompt": [
            {"role": "user", "content": f"{question} {instruction}" if instruction else question}
        ],
    }
    if gsm8k:
        row["ability"] = "math"
    # A column mixing 5 and 4.5 loads as floats; the source said 5, not 5.0, so the ground truth
    # (a string) says 5. extra_info keeps the value as loaded: turning it into an int would
    # change the column's type from row to row, and the parquet writer fixes a column's type from
    # its first batch of rows (1,000 by default), so a later 4.5 fails with ArrowInvalid
    # (datasets 5.2.0 Dataset.map, arrow_writer.py).
    shown = int(answer) if isinstance(answer, float) and answer.is_integer() else answer
    truth = gsm8k_solution(str(shown)) if gsm8k else str(shown)
    row["reward_model"] = {"style": "rule", "ground_truth": truth}
    row["extra_info"] = {"split": split, "index": idx, "answer": answer, "question": question}
    return row


def load_hub_dataset(
    dataset: str, columns: dict[str, str], token: str | None, source: str | None = None
) -> object:
    import datasets  # in the verl image

    try:  # tests pass a local folder as source; data_source stays the dataset's id
        return datasets.load_dataset(source or dataset, columns.get("subset"), token=token)
    except Exception as error:  # the Hub's refusals come as several exception types
        raise StepError(
            f"could not load the dataset {dataset!r} ({type(error).__name__}: {error}). If it "
            f"is gated, accept its terms at https://huggingface.co/datasets/{dataset} with the "
            'account of verl-gke:hfToken; if it has subsets, name one as "subset" in '
            "verl-gke:datasetColumns"
        ) from error


def prepare_hub_dataset(
    root: Path,
    dataset: str,
    columns: dict[str, str],
    out: Path,
    token: str | None,
    source: str | None = None,
) -> None:
    step = "dataset"
    inputs = {"dataset": dataset, "columns": json.dumps(columns, sort_keys=True), "out": str(out)}
    if is_done(root, step, inputs) and all(is_nonempty_file(out / f) for f in GSM8K_FILES):
        log(step, f"skipped: {out} already has {', '.join(GSM8K_FILES)}")
        return
    started = time.monotonic()
    clear_marker(root, step)
    loaded = load_hub_dataset(dataset, columns, token, source)
    splits = {"train": columns.get("trainSplit", "train"), "test": columns.get("testSplit", "test")}
    available = sorted(loaded.keys())  # type: ignore[attr-defined]
    for name in splits.values():
        if name not in available:
            raise StepError(
                f"{dataset} has no split {name!r} (it has {available}); name them as "
                f'"trainSplit"/"testSplit" in verl-gke:datasetColumns'
            )
    out.mkdir(parents=True, exist_ok=True)
    sizes: dict[str, object] = {}
    for role, name in splits.items():
        part = loaded[name]  # type: ignore[index]
        missing = [c for c in (columns["prompt"], columns["answer"]) if c not in part.column_names]
        if missing:
            raise StepError(
                f"{dataset} split {name!r} has no column {missing} (it has "
                f'{part.column_names}); fix "prompt"/"answer" in verl-gke:datasetColumns'
            )
        rows = part.map(
            lambda example, idx, split=role: hub_rows(example, idx, split, dataset, columns),
            with_indices=True,
            remove_columns=part.column_names,
        )
        rows.to_parquet(str(out / f"{role}.parquet"))
        sizes[f"{role}.parquet"] = len(rows)
    marker = write_marker(root, step, inputs, {"path": str(out), "rows": sizes}, started)
    log(step, f"done in {time.monotonic() - started:.1f}s: {sizes} rows; marker {marker}")


def check_dataset(
    folder: Path,
    scored_sources: tuple[str, ...] | None = None,
    scored_prefixes: tuple[str, ...] = (),
) -> None:
    """Refuse a parquet folder verl could not train on, before any GPU is used. With
    scored_sources (no verl-gke:reward): also a data_source verl's default_compute_score would
    raise NotImplementedError for at the first reward."""
    step = "dataset"
    import pyarrow.parquet as pq  # in the verl image (datasets depends on it)

    for name in GSM8K_FILES:
        path = folder / name
        if not is_nonempty_file(path):
            raise StepError(
                f"{path} is missing or empty: verl-gke:dataset's folder must hold "
                f"{' and '.join(GSM8K_FILES)} in verl's format"
            )
        schema = pq.read_schema(str(path))
        missing = [c for c in VERL_COLUMNS if c not in schema.names]
        truth = "reward_model" in schema.names and "ground_truth" in str(
            schema.field("reward_model").type
        )
        if missing or not truth:
            raise StepError(
                f"{path} lacks verl's columns {missing or ['reward_model.ground_truth']} (it "
                f"has {schema.names}); verl reads prompt (a list of {{role, content}}), "
                "data_source and reward_model.ground_truth from every row"
            )
        check_prompt_type(path, schema.field("prompt").type)
        rows = pq.read_metadata(str(path)).num_rows
        if rows == 0:
            raise StepError(f"{path} has no rows")
        if scored_sources is not None:
            check_data_sources(path, scored_sources, scored_prefixes)
        log(step, f"{path}: {rows} rows, columns {schema.names}")


def check_prompt_type(path: Path, prompt: object) -> None:
    """verl's RLHFDataset passes each row's prompt to the tokenizer's chat template as a list of
    messages (verl/utils/dataset/rl_dataset.py _build_messages, v0.6.1 and v0.9.0)."""
    import pyarrow as pa

    fields: set[str] = set()
    if pa.types.is_list(prompt) or pa.types.is_large_list(prompt):  # type: ignore[arg-type]
        item = prompt.value_type  # type: ignore[attr-defined]
        if pa.types.is_struct(item):
            fields = {item.field(i).name for i in range(item.num_fields)}
    if not {"role", "content"} <= fields:
        raise StepError(
            f"{path}: prompt is {prompt}, but verl reads it as chat messages, a list of "
            '{"role", "content"} structs, e.g. [{"role": "user", "content": "What is 2+3?"}]'
        )


def check_data_sources(path: Path, sources: tuple[str, ...], prefixes: tuple[str, ...]) -> None:
    import pyarrow.parquet as pq

    column = pq.read_table(str(path), columns=["data_source"]).column("data_source")
    values = sorted(column.unique().to_pylist(), key=str)
    known = [v for v in values if isinstance(v, str) and (v in sources or v.startswith(prefixes))]
    unknown = [v for v in values if v not in known]
    if unknown:
        raise StepError(
            f"{path}: verl has no built-in score for data_source {unknown[:10]} (verl's "
            "default_compute_score, verl/utils/reward_score/__init__.py, would raise "
            "NotImplementedError at the first reward). Fix: pulumi config set verl-gke:reward "
            "docs/examples/exact_match.py:compute_score (or a reward file of your own, "
            "docs/own-run.md), or write data_source values verl scores "
            f"({', '.join(sources[:4])}, ...)"
        )


def copy_reward(source: Path, dest: Path) -> None:
    """Copy the reward file to its content-named place (a changed file has another name)."""
    step = "reward"
    data = source.read_bytes()
    if dest.is_file() and dest.read_bytes() == data:
        log(step, f"skipped: {dest} is already this file")
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".partial")
    partial.write_bytes(data)
    os.replace(partial, dest)
    log(step, f"copied {source} ({len(data)} bytes) to {dest}")


# --- step 3: model ------------------------------------------------------------------------------


def move_tree(source: Path, dest: Path) -> None:
    """Move source's files under dest (files already at dest win), then delete source."""
    if not dest.exists():
        try:
            os.rename(source, dest)  # one call on a local disk or a bucket with HNS
            return
        except OSError:
            pass  # GCS FUSE without HNS refuses folder renames: go file by file
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        target = dest / path.relative_to(source)
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(path, target)
    shutil.rmtree(source)


def reset_or_resume(
    step: str, root: Path, name: str, inputs: dict[str, str], staging: Path, final: Path
) -> None:
    """Keep staged files only if staged for these inputs; never trust an unmarked final folder."""
    record = root / PREP_DIR / f"{name}.staging.json"
    if read_json(record) == inputs:
        if final.exists():
            # Our own move into place was interrupted: its files had passed verification.
            log(step, f"moving {final} back into {staging} (interrupted move, no marker)")
            move_tree(final, staging)
        if staging.exists():
            log(step, f"resuming from {staging} ({human_size(tree_stats(staging)[1])} staged)")
    else:
        # Whatever is there belongs to another model or source, or to a writer we know nothing
        # about (e.g. a manual download): without a marker it counts as absent.
        for path in (staging, final):
            if path.exists():
                log(step, f"removing {path}: no completion marker for {inputs['model']}")
                remove(path)
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps(inputs, sort_keys=True) + "\n")


@contextmanager
def progress_log(step: str, folder: Path) -> Iterator[None]:
    """Log the staged size every PROGRESS_EVERY_S while a long copy or download runs."""
    stop = threading.Event()

    def report() -> None:
        while not stop.wait(PROGRESS_EVERY_S):
            try:
                size = tree_stats(folder)[1]
            except OSError:  # a file renamed while we walked (e.g. .incomplete -> final name)
                continue
            log(step, f"in progress: {human_size(size)} in {folder}")

    thread = threading.Thread(target=report, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


# Meta's Llama repositories carry a second copy of the weights for Meta's own loader under
# original/ (consolidated.*.pth, params.json; e.g. meta-llama/Llama-3.1-70B-Instruct, ~140 GB);
# transformers, verl and vLLM read the safetensors at the repository's root. snapshot_download
# skips files matching ignore_patterns (fnmatch on the repository path: huggingface_hub
# utils/_paths.py filter_repo_objects).
HUB_IGNORE_PATTERNS = ("original/*",)


def download_from_hub(
    step: str, model: str, staging: Path, token: str | None, revision: str | None = None
) -> None:
    # Progress bars make megabytes of carriage returns in pod logs; progress_log reports instead.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from huggingface_hub import snapshot_download  # in the image; tests use a local source

    token_state = "set" if token else "unset"
    at = f"commit {revision}" if revision else "branch main"
    log(step, f"downloading {model} at {at} from the Hugging Face Hub (HF_TOKEN {token_state})")
    # With local_dir, huggingface_hub keeps per-file metadata in <local_dir>/.cache/huggingface:
    # finished files are not fetched again and .incomplete ones resume, so keeping the staging
    # folder between attempts makes a retried Job continue where it stopped.
    snapshot_download(
        repo_id=model,
        revision=revision,  # None: the default branch (main)
        local_dir=str(staging),
        token=token,
        ignore_patterns=list(HUB_IGNORE_PATTERNS),
    )


def copy_from_directory(step: str, source: Path, staging: Path) -> None:
    if not source.is_dir():
        raise StepError(f"--model-source {source} is not a directory")
    files = sorted(p for p in source.rglob("*") if p.is_file())
    copied = 0
    for path in files:
        target = staging / path.relative_to(source)
        # Same size means copied by an earlier attempt; a copy cut short has a different size.
        if target.is_file() and target.stat().st_size == path.stat().st_size:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        copied += 1
    log(step, f"copied {copied} file(s) from {source}, {len(files) - copied} already staged")


def verify_model(folder: Path) -> int:
    """Raise unless config.json and every weight file the index lists are present; return shards."""
    if not is_nonempty_file(folder / "config.json"):
        raise StepError(f"config.json is missing or empty in {folder}")
    indexes = sorted(folder.glob("*.index.json"))
    shards: set[str] = set()
    for index in indexes:
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
            shards.update(weight_map.values())
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise StepError(f"{index} has no readable weight_map ({error})") from error
        for shard in sorted(set(weight_map.values())):
            if not is_nonempty_file(folder / shard):
                raise StepError(f"shard {shard} listed in {index.name} is missing or empty")
    if not indexes:  # a single-file model
        single = [p.name for p in folder.glob("*.safetensors") if is_nonempty_file(p)]
        if not single:
            raise StepError(f"{folder} has neither a *.index.json nor a *.safetensors file")
        shards.update(single)
    return len(shards)


def prepare_model(
    root: Path,
    model: str,
    model_folder: str,
    source: str,
    token: str | None,
    revision: str | None = None,
) -> None:
    step = "model"
    name = f"model-{model_folder}"
    final = root / model_folder
    staging = root / f"{model_folder}.partial"
    inputs = {"model": model, "model_folder": model_folder, "source": source}
    if revision:
        inputs["revision"] = revision
    if is_done(root, name, inputs) and (final / "config.json").is_file():
        log(step, f"skipped: {final} already holds {model} ({marker_path(root, name)})")
        return
    started = time.monotonic()
    clear_marker(root, name)
    log(step, f"started: {model} from {source} -> {final} (staging {staging})")
    reset_or_resume(step, root, name, inputs, staging, final)
    staging.mkdir(parents=True, exist_ok=True)
    with progress_log(step, staging):
        if source == "hub":
            download_from_hub(step, model, staging, token, revision)
        else:
            copy_from_directory(step, Path(source), staging)
    shards = verify_model(staging)
    files, size = tree_stats(staging, exclude=frozenset({".cache"}))
    log(step, f"verified {shards} weight file(s), {files} files, {human_size(size)}; moving")
    move_tree(staging, final)
    outputs: dict[str, object] = {
        "path": str(final),
        "files": files,
        "bytes": size,
        "weight_files": shards,
    }
    marker = write_marker(root, name, inputs, outputs, started)
    (root / PREP_DIR / f"{name}.staging.json").unlink(missing_ok=True)
    log(step, f"done in {time.monotonic() - started:.1f}s: {final}; marker {marker}")


# --- step 4: prompt lengths ---------------------------------------------------------------------

LENGTHS_SUMMARY = "prompt-lengths.json"
JOB_SETTING = "verl-gke:job"


def prompt_tokens(tokenizer: object, messages: object) -> int:
    """One prompt's length as verl measures it: the model's chat template with the generation
    prompt, tokenized (RLHFDataset.maybe_filter_out_long_prompts, verl/utils/dataset/rl_dataset.py
    v0.6.1 and v0.9.0; __getitem__ at v0.6.1 and the agent loop at 0.9.0 measure the same text).
    transformers 5 returns a dict by default, 4.x a list; a batch of one is unwrapped as verl's
    normalize_token_ids does (verl/utils/tokenizer/tokenizer.py, 0.9.0)."""
    ids = tokenizer.apply_chat_template(  # type: ignore[attr-defined]
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    if hasattr(ids, "keys"):
        ids = ids["input_ids"]
    ids = list(ids)
    if len(ids) == 1 and isinstance(ids[0], (list, tuple)):
        ids = list(ids[0])
    return len(ids)


def measure_prompts(tokenizer: object, path: Path, limit: int) -> dict[str, int]:
    """rows, over (longer than limit), kept and longest of one parquet file's prompts."""
    import pyarrow.parquet as pq  # in the verl image (datasets depends on it)

    prompts = pq.read_table(str(path), columns=["prompt"]).column("prompt").to_pylist()
    lengths = [prompt_tokens(tokenizer, messages) for messages in prompts]
    over = sum(1 for n in lengths if n > limit)
    rows = len(lengths)
    return {"rows": rows, "over": over, "kept": rows - over, "longest": max(lengths, default=0)}


def smaller_batch(kept: int, step: int, smallest: int) -> int | None:
    """The largest train batch <= kept that is a multiple of step and >= smallest, if any."""
    batch = kept // step * step
    return batch if batch >= max(smallest, 1) else None


def length_problem(counts: dict[str, dict[str, int]], limits: argparse.Namespace) -> str | None:
    """Why verl could not build its dataloaders from the rows its filter keeps, with a fix."""
    train, test, limit = counts["train"], counts["test"], limits.max_prompt_length
    raise_limit = (
        f"pulumi config set --path {JOB_SETTING}.maxPromptLength "
        f"{max(train['longest'], test['longest'])} (keeps every row; the preview checks the "
        "memory fit again)"
    )
    if train["kept"] < limits.train_batch_size:
        batch = smaller_batch(train["kept"], limits.train_batch_step, limits.min_train_batch)
        lower = (
            f", or pulumi config set --path {JOB_SETTING}.trainBatchSize {batch}"
            if batch is not None
            else ""
        )
        return (
            f"train.parquet: {train['kept']} of {train['rows']} rows have prompts of at most "
            f"{JOB_SETTING}.maxPromptLength = {limit} tokens ({train['over']} longer, the longest "
            f"{train['longest']}), fewer than one batch of {JOB_SETTING}.trainBatchSize = "
            f"{limits.train_batch_size}: verl drops the longer ones (data.filter_overlong_prompts)"
            f" and its trainer refuses an empty train dataloader. Fix: {raise_limit}{lower}"
        )
    if test["kept"] == 0:
        return (
            f"test.parquet: none of its {test['rows']} rows has a prompt of at most "
            f"{JOB_SETTING}.maxPromptLength = {limit} tokens (the longest {test['longest']}): "
            f"verl drops them and its trainer refuses an empty validation dataloader. "
            f"Fix: {raise_limit}"
        )
    return None


def check_prompt_lengths(
    root: Path, data: Path, model_dir: Path, limits: argparse.Namespace
) -> dict[str, dict[str, int]]:
    """Count the prompts verl will drop as longer than data.max_prompt_length, with the model's
    own tokenizer and chat template; write the counts to <root>/.prep/prompt-lengths.json and
    refuse a dataset verl could not train on."""
    step = "lengths"
    from transformers import AutoTokenizer  # in the verl image

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    limit = limits.max_prompt_length
    roles = ("train", "test")
    counts = {r: measure_prompts(tokenizer, data / f"{r}.parquet", limit) for r in roles}
    for role, c in counts.items():
        log(
            step,
            f"{data / role}.parquet: {c['rows']} rows, {c['over']} prompts longer than "
            f"{limit} tokens (verl drops them), longest {c['longest']}",
        )
    summary = {"data": str(data), "model": str(model_dir), "max_prompt_length": limit, **counts}
    path = root / PREP_DIR / LENGTHS_SUMMARY
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    problem = length_problem(counts, limits)
    if problem is not None:
        raise StepError(problem)
    return counts


# --- command line -------------------------------------------------------------------------------


def commit_arg(value: str) -> str:
    # A commit id as huggingface_hub tells one (file_download.py REGEX_COMMIT_HASH, 0.36.2).
    if not re.fullmatch(r"[0-9a-f]{40}", value):
        raise argparse.ArgumentTypeError(f"--model-revision must be 40 hex digits, got {value!r}")
    return value


def model_folder_arg(value: str) -> str:
    if not value or value in RESERVED_DIRS or Path(value).name != value or value in {".", ".."}:
        raise argparse.ArgumentTypeError(
            f"--model-folder must be one folder name other than {sorted(RESERVED_DIRS)}, got "
            f"{value!r}; for example 'Qwen2.5-32B-Instruct'"
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
        default=VERL_DIR,
        help=f"the checkout's folder under --data-root, e.g. {VERL_CHECKOUTS_DIR}/<stack>",
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
        return lambda: prepare_hub_dataset(
            root, args.dataset, args.dataset_columns, args.dataset_dir, token
        )
    if args.check_dataset is not None:
        return lambda: check_dataset(args.check_dataset, args.scored_sources, args.scored_prefixes)
    if args.verl_from_image:
        columns = {**GSM8K_COLUMNS, "instruction": GSM8K_INSTRUCTION, "answerFormat": "gsm8k"}
        return lambda: prepare_hub_dataset(root, "openai/gsm8k", columns, root / GSM8K_DIR, token)
    return lambda: prepare_gsm8k(root, root / args.verl_dir)


def data_folder(args: argparse.Namespace, root: Path) -> Path:
    """Where the data step leaves train.parquet and test.parquet."""
    if args.dataset is not None:
        return Path(args.dataset_dir)
    if args.check_dataset is not None:
        return Path(args.check_dataset)
    return root / GSM8K_DIR


def run_steps(
    args: argparse.Namespace, root: Path, source: str, token: str | None
) -> list[tuple[str, Callable[[], None]]]:
    steps: list[tuple[str, Callable[[], None]]] = []
    if not args.verl_from_image:
        steps.append(
            (VERL_STEP, lambda: prepare_verl(root, args.verl_repo, args.verl_ref, args.verl_dir))
        )
    if args.reward_file is not None:
        steps.append(("reward", lambda: copy_reward(args.reward_file, args.reward_dest)))
    default = args.dataset is None and args.check_dataset is None and not args.verl_from_image
    steps.append(("gsm8k" if default else "dataset", data_step(args, root, token)))
    steps.append(
        (
            "model",
            lambda: prepare_model(
                root, args.model, args.model_folder, source, token, args.model_revision
            ),
        )
    )
    if args.max_prompt_length is not None:  # needs the dataset and the model's tokenizer
        data, model_dir = data_folder(args, root), root / args.model_folder
        steps.append(("lengths", lambda: check_prompt_lengths(root, data, model_dir, args)))
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
            if isinstance(error, StepError):
                reason = str(error)
            line = f"prepare_data failed at step '{name}': {reason}"
            print(line, file=sys.stderr, flush=True)
            if args.termination_log.is_file():
                args.termination_log.write_text(line + "\n")
            return 1
    log("all", f"data prepared in {time.monotonic() - started:.1f}s under {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
