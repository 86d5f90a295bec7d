"""The verl step: verl checked out at --verl-ref into <data-root>/<verl-dir>, and the marker
that the Ray pods' verl copy waits for (manifests/fuse_mounts.py)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

try:  # imported as payloads.data_prep.prep_verl (the program, tests)
    from . import prep_common as common
except ImportError:  # run from /scripts in the pod: this folder is sys.path[0]
    import prep_common as common

VERL_STEP = "verl"
# Training writes trainer.default_local_dir=/data/verl/checkpoints: replacing the source tree for
# a new ref must not delete them.
KEEP_IN_VERL = frozenset({"checkpoints"})


def verl_marker_name(repo: str, ref: str, folder: str = common.VERL_DIR) -> str:
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
    for path in (root / common.PREP_DIR).glob(f"{VERL_STEP}-*.done"):
        inputs = (common.read_json(path) or {}).get("inputs")
        if not isinstance(inputs, dict) or inputs.get("dir", common.VERL_DIR) == folder:
            path.unlink(missing_ok=True)
    common.marker_path(root, VERL_STEP).unlink(missing_ok=True)


def git_env() -> dict[str, str]:
    # A wrong URL or a private repository must fail, not wait for a password nobody will type.
    return {**os.environ, "GIT_TERMINAL_PROMPT": "0"}


def git_output(repo: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, env=git_env()
    )
    if result.returncode != 0:
        raise common.StepError(f"git {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout.strip()


def looks_like_sha(ref: str) -> bool:
    return 7 <= len(ref) <= 40 and all(c in "0123456789abcdef" for c in ref.lower())


def checkout_ref(step: str, repo: str, ref: str, checkout: Path) -> str:
    """Check repo out at ref (tag, branch or commit sha) into checkout; return the commit sha."""
    git = ["git", "-c", "advice.detachedHead=false"]
    env = git_env()
    if not looks_like_sha(ref):
        # Tags and branches: a shallow clone of that one commit.
        common.run_command(
            step, [*git, "clone", "--depth", "1", "--branch", ref, repo, str(checkout)], env
        )
        head = git_output(checkout, "rev-parse", "HEAD")
        wanted = git_output(checkout, "rev-parse", "--verify", f"{ref}^{{commit}}")
        if head != wanted:
            raise common.StepError(f"checked out {head} but {ref!r} is {wanted} in {repo}")
        return head
    # `git clone --branch` accepts only branch and tag names, and servers do not serve abbreviated
    # shas. A blobless clone has the whole commit graph to resolve the sha and downloads file
    # contents only for the commit checked out.
    common.run_command(
        step, [*git, "clone", "--filter=blob:none", "--no-checkout", repo, str(checkout)], env
    )
    common.run_command(step, [*git, "-C", str(checkout), "checkout", "--detach", ref], env)
    head = git_output(checkout, "rev-parse", "HEAD")
    if not head.startswith(ref.lower()):
        # git prefers a tag or branch of the same name over a commit sha.
        raise common.StepError(
            f"{ref!r} resolved to {head}, not to a commit with that sha (a tag?)"
        )
    return head


def replace_tree(source: Path, dest: Path, keep: frozenset[str]) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for entry in dest.iterdir():
        if entry.name not in keep:
            common.remove(entry)
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


def prepare_verl(root: Path, repo: str, ref: str, folder: str = common.VERL_DIR) -> None:
    step = VERL_STEP
    name = verl_marker_name(repo, ref, folder)
    dest = root / folder
    inputs = verl_inputs(repo, ref, folder)
    if common.is_done(root, name, inputs) and (dest / common.GSM8K_SCRIPT).is_file():
        common.log(step, f"skipped: {dest} is already at {ref} ({common.marker_path(root, name)})")
        return
    started = time.monotonic()
    clear_verl_markers(root, folder)
    common.log(step, f"started: {repo} at {ref} -> {dest}")
    # Git works in a local temporary folder (fast, and nothing half-cloned lands on the bucket);
    # only the finished checkout, with its .git, is copied to the volume.
    with tempfile.TemporaryDirectory(prefix="verl-checkout-") as tmp:
        checkout = Path(tmp) / "verl"
        commit = checkout_ref(step, repo, ref, checkout)
        files, size = common.tree_stats(checkout)
        common.log(
            step,
            f"checked out {commit}; copying {files} files ({common.human_size(size)}) to {dest}",
        )
        replace_tree(checkout, dest, KEEP_IN_VERL)
    outputs: dict[str, object] = {"commit": commit, "path": str(dest), "files": files}
    outputs["bytes"] = size
    marker = common.write_marker(root, name, inputs, outputs, started)
    common.log(
        step, f"done in {time.monotonic() - started:.1f}s: {dest} at {commit}; marker {marker}"
    )
