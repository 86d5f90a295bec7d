"""Offline stand-in for huggingface_hub, put first on PYTHONPATH by test_prepare_data.py.

snapshot_download takes the real function's keyword names (checked against huggingface_hub
2.4.0; revision: _snapshot_download.py of 0.36.2, in the verl 0.6.1 virtualenv), leaves out
files matching ignore_patterns as the real one does, "downloads"
$FAKE_HUB_ROOT/<repo_id> into local_dir skipping files already there with the right size (as the
real one skips finished files), and appends what it was called with to $FAKE_HUB_CALLS as one
JSON line. model_info answers a commit: the revision when it is one, else a digest of the
repository's id (the real one: hf_api.py ModelInfo.sha, the commit the revision points to).
"""

import fnmatch
import hashlib
import json
import os
import re
import shutil
import types
from pathlib import Path


def snapshot_download(
    *,
    repo_id: str,
    revision: str | None = None,
    local_dir: str,
    token: str | None = None,
    ignore_patterns: list[str] | None = None,
) -> str:
    call = {
        "repo_id": repo_id,
        "revision": revision,
        "token": token,
        "ignore_patterns": ignore_patterns,
        "progress_bars_disabled": os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS"),
    }
    with open(os.environ["FAKE_HUB_CALLS"], "a") as calls:
        calls.write(json.dumps(call) + "\n")
    source = Path(os.environ["FAKE_HUB_ROOT"]) / repo_id
    if not source.is_dir():
        raise FileNotFoundError(f"404 Client Error: repository {repo_id} not found")
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        # The real filter (utils/_paths.py filter_repo_objects): fnmatch on the repo path.
        if any(
            fnmatch.fnmatch(path.relative_to(source).as_posix(), i) for i in ignore_patterns or ()
        ):
            continue
        target = Path(local_dir) / path.relative_to(source)
        if not (target.is_file() and target.stat().st_size == path.stat().st_size):
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    return local_dir


def model_info(repo_id: str, *, revision: str | None = None, token: str | None = None) -> object:
    if revision is not None and re.fullmatch(r"[0-9a-f]{40}", revision):
        return types.SimpleNamespace(id=repo_id, sha=revision)
    if not (Path(os.environ["FAKE_HUB_ROOT"]) / repo_id).is_dir():
        raise FileNotFoundError(f"404 Client Error: repository {repo_id} not found")
    if os.environ.get("FAKE_HUB_NO_SHA"):  # ModelInfo.sha is Optional in the real one
        return types.SimpleNamespace(id=repo_id, sha=None)
    return types.SimpleNamespace(id=repo_id, sha=hashlib.sha1(repo_id.encode()).hexdigest())
