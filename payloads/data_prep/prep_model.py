"""The model's two steps. model-files (the inputs part): every file of the model but its weights
(config, tokenizer, chat template, remote code) into <data-root>/model-files/<model-folder>,
which the prompt-length check and the rehearsal read. model (the weights part): the whole model
downloaded from the Hub (or copied from --model-source) into a staging folder, verified, then
moved to <data-root>/<model-folder>, at the commit the model-files step took."""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

try:  # imported as payloads.data_prep.prep_model (the program, tests)
    from . import prep_common as common
except ImportError:  # run from /scripts in the pod: this folder is sys.path[0]
    import prep_common as common

PROGRESS_EVERY_S = 60.0


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
    record = root / common.PREP_DIR / f"{name}.staging.json"
    if common.read_json(record) == inputs:
        if final.exists():
            # Our own move into place was interrupted: its files had passed verification.
            common.log(step, f"moving {final} back into {staging} (interrupted move, no marker)")
            move_tree(final, staging)
        if staging.exists():
            staged = common.human_size(common.tree_stats(staging)[1])
            common.log(step, f"resuming from {staging} ({staged} staged)")
    else:
        # Whatever is there belongs to another model or source, or to a writer we know nothing
        # about (e.g. a manual download): without a marker it counts as absent.
        for path in (staging, final):
            if path.exists():
                common.log(step, f"removing {path}: no completion marker for {inputs['model']}")
                common.remove(path)
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps(inputs, sort_keys=True) + "\n")


@contextmanager
def progress_log(step: str, folder: Path) -> Iterator[None]:
    """Log the staged size every PROGRESS_EVERY_S while a long copy or download runs."""
    stop = threading.Event()

    def report() -> None:
        while not stop.wait(PROGRESS_EVERY_S):
            try:
                size = common.tree_stats(folder)[1]
            except OSError:  # a file renamed while we walked (e.g. .incomplete -> final name)
                continue
            common.log(step, f"in progress: {common.human_size(size)} in {folder}")

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


# The weight files of a Hub repository, by the formats transformers, vLLM and verl load
# (safetensors, PyTorch .bin/.pt/.pth/.ckpt, TF .h5, Flax .msgpack, ONNX, GGUF, ...): left out of
# the model-files step, whose folder the rehearsal reads in place of the model (it loads the
# tokenizer and AutoConfig only: verl_scripts/rehearsal.py load_model).
WEIGHT_PATTERNS = (
    "*.safetensors", "*.bin", "*.pt", "*.pth", "*.ckpt", "*.h5", "*.msgpack", "*.onnx",
    "*.gguf", "*.tflite", "*.ot", "*.npz",
)  # fmt: skip
FILES_IGNORE_PATTERNS = (*HUB_IGNORE_PATTERNS, *WEIGHT_PATTERNS)


def is_weight(relative: str) -> bool:
    """Whether a repository path is left out of the model-files folder (huggingface_hub's own
    fnmatch on the repository path, as snapshot_download's ignore_patterns)."""
    return any(fnmatch.fnmatch(relative, pattern) for pattern in FILES_IGNORE_PATTERNS)


def download_from_hub(
    step: str,
    model: str,
    staging: Path,
    token: str | None,
    revision: str | None = None,
    ignore: tuple[str, ...] = HUB_IGNORE_PATTERNS,
) -> None:
    # Progress bars make megabytes of carriage returns in pod logs; progress_log reports instead.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from huggingface_hub import snapshot_download  # in the image; tests use a local source

    token_state = "set" if token else "unset"
    at = f"commit {revision}" if revision else "branch main"
    common.log(
        step, f"downloading {model} at {at} from the Hugging Face Hub (HF_TOKEN {token_state})"
    )
    # With local_dir, huggingface_hub keeps per-file metadata in <local_dir>/.cache/huggingface:
    # finished files are not fetched again and .incomplete ones resume, so keeping the staging
    # folder between attempts makes a retried Job continue where it stopped.
    snapshot_download(
        repo_id=model,
        revision=revision,  # None: the default branch (main)
        local_dir=str(staging),
        token=token,
        ignore_patterns=list(ignore),
    )


def copy_from_directory(step: str, source: Path, staging: Path, weights: bool = True) -> None:
    """Copy source's files (without weights: no weight file, nor huggingface_hub's .cache)."""
    if not source.is_dir():
        raise common.StepError(f"--model-source {source} is not a directory")
    files = sorted(
        p
        for p in source.rglob("*")
        if p.is_file()
        and (
            weights
            or not (
                is_weight(p.relative_to(source).as_posix())
                or p.relative_to(source).parts[0] == ".cache"
            )
        )
    )
    copied = 0
    for path in files:
        target = staging / path.relative_to(source)
        # Same size means copied by an earlier attempt; a copy cut short has a different size.
        if target.is_file() and target.stat().st_size == path.stat().st_size:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        copied += 1
    common.log(step, f"copied {copied} file(s) from {source}, {len(files) - copied} already staged")


def verify_model(folder: Path) -> int:
    """Raise unless config.json and every weight file the index lists are present; return shards."""
    if not common.is_nonempty_file(folder / "config.json"):
        raise common.StepError(f"config.json is missing or empty in {folder}")
    indexes = sorted(folder.glob("*.index.json"))
    shards: set[str] = set()
    for index in indexes:
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
            shards.update(weight_map.values())
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise common.StepError(f"{index} has no readable weight_map ({error})") from error
        for shard in sorted(set(weight_map.values())):
            if not common.is_nonempty_file(folder / shard):
                raise common.StepError(f"shard {shard} listed in {index.name} is missing or empty")
    if not indexes:  # a single-file model
        single = [p.name for p in folder.glob("*.safetensors") if common.is_nonempty_file(p)]
        if not single:
            raise common.StepError(f"{folder} has neither a *.index.json nor a *.safetensors file")
        shards.update(single)
    return len(shards)


def model_inputs(
    model: str, model_folder: str, source: str, revision: str | None
) -> dict[str, str]:
    """What both model steps were done for (their markers' inputs)."""
    inputs = {"model": model, "model_folder": model_folder, "source": source}
    if revision:
        inputs["revision"] = revision
    return inputs


def files_marker_name(model_folder: str) -> str:
    return f"model-files-{model_folder}"


def resolve_commit(model: str, revision: str | None, token: str | None) -> str:
    """The commit the Hub serves for `revision` (None: branch main) now: the weights are
    downloaded at the same commit as the files the rehearsal checked."""
    from huggingface_hub import model_info  # in the image; tests use a local stand-in

    # ModelInfo.sha is Optional (huggingface_hub hf_api.py ModelInfo, 0.36.2 and 1.33.0).
    sha = model_info(model, revision=revision, token=token).sha
    if not sha:
        raise common.StepError(
            f"the Hub gave no commit for {model} at {revision or 'main'}: the weights could not be "
            "pinned to the files the rehearsal checked. Fix: pulumi config set "
            "verl-gke:modelRevision <40-hex commit of the model>"
        )
    return sha


def files_commit(root: Path, model_folder: str, inputs: dict[str, str]) -> str | None:
    """The commit the model-files step downloaded for these inputs, if it recorded one."""
    return recorded_commit(root, files_marker_name(model_folder), inputs)


def recorded_commit(root: Path, marker_name: str, inputs: dict[str, str]) -> str | None:
    """The commit a model step's marker recorded for these inputs, if any."""
    marker = common.read_json(common.marker_path(root, marker_name))
    if marker is None or marker.get("inputs") != inputs:
        return None
    outputs = marker.get("outputs")
    commit = outputs.get("commit") if isinstance(outputs, dict) else None
    return commit if isinstance(commit, str) else None


def prepare_model_files(
    root: Path,
    model: str,
    model_folder: str,
    source: str,
    token: str | None,
    revision: str | None = None,
) -> Path:
    """The model's files but its weights, into <root>/model-files/<model_folder>: from the
    weights' own folder when the model step is done for these inputs (the same files), else from
    the Hub at the commit it serves now (recorded for the model step), else --model-source."""
    step = "model-files"
    name = files_marker_name(model_folder)
    dest = root / common.MODEL_FILES_DIR / model_folder
    inputs = model_inputs(model, model_folder, source, revision)
    if common.is_done(root, name, inputs) and (dest / "config.json").is_file():
        common.log(step, f"skipped: {dest} already holds {model}'s files")
        return dest
    started = time.monotonic()
    common.clear_marker(root, name)
    if dest.exists():
        common.remove(dest)
    dest.mkdir(parents=True)
    weights = root / model_folder
    commit: str | None = None
    if (
        common.is_done(root, f"model-{model_folder}", inputs)
        and (weights / "config.json").is_file()
    ):
        origin = str(weights)
        # The weights' commit goes on with their files: a later weights download takes it.
        commit = recorded_commit(root, f"model-{model_folder}", inputs)
        copy_from_directory(step, weights, dest, weights=False)
    elif source == "hub":
        commit = revision or resolve_commit(model, revision, token)
        origin = f"the Hub at commit {commit}"
        download_from_hub(step, model, dest, token, commit, FILES_IGNORE_PATTERNS)
    else:
        origin = source
        copy_from_directory(step, Path(source), dest, weights=False)
    if not common.is_nonempty_file(dest / "config.json"):
        raise common.StepError(f"config.json is missing or empty in {dest} (from {origin})")
    files = common.tree_stats(dest, exclude=frozenset({".cache"}))[0]
    outputs: dict[str, object] = {"path": str(dest), "files": files, "from": origin}
    if commit is not None:
        outputs["commit"] = commit
    common.write_marker(root, name, inputs, outputs, started)
    common.log(step, f"done: {files} files (no weights) from {origin} in {dest}")
    return dest


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
    inputs = model_inputs(model, model_folder, source, revision)
    if common.is_done(root, name, inputs) and (final / "config.json").is_file():
        common.log(
            step, f"skipped: {final} already holds {model} ({common.marker_path(root, name)})"
        )
        return
    started = time.monotonic()
    common.clear_marker(root, name)
    common.log(step, f"started: {model} from {source} -> {final} (staging {staging})")
    reset_or_resume(step, root, name, inputs, staging, final)
    staging.mkdir(parents=True, exist_ok=True)
    at: str | None = None
    with progress_log(step, staging):
        if source == "hub":
            # The files the rehearsal checked came from this commit (model-files step).
            at = revision or files_commit(root, model_folder, inputs)
            download_from_hub(step, model, staging, token, at)
        else:
            copy_from_directory(step, Path(source), staging)
    shards = verify_model(staging)
    files, size = common.tree_stats(staging, exclude=frozenset({".cache"}))
    common.log(
        step, f"verified {shards} weight file(s), {files} files, {common.human_size(size)}; moving"
    )
    move_tree(staging, final)
    outputs: dict[str, object] = {
        "path": str(final),
        "files": files,
        "bytes": size,
        "weight_files": shards,
    }
    if source == "hub" and at is not None:
        outputs["commit"] = at
    marker = common.write_marker(root, name, inputs, outputs, started)
    (root / common.PREP_DIR / f"{name}.staging.json").unlink(missing_ok=True)
    common.log(step, f"done in {time.monotonic() - started:.1f}s: {final}; marker {marker}")
