"""What every step of the data-prep payload shares: the folder names under --data-root, the
one-line failure (StepError), the log, the completion markers and running a command.

Standard library only (payloads/data_prep/prepare_data.py says how the modules are shipped).
"""

from __future__ import annotations

import collections
import json
import shutil
import subprocess
import time
from pathlib import Path

# Folder names under --data-root. The program's config/bucket_layout.py owns the layout; this
# payload cannot import it (it runs alone in the pod), so tests/test_prepare_data.py checks that
# these names agree with it.
VERL_DIR = "verl"
# The stacks' verl checkouts, <VERL_CHECKOUTS_DIR>/<stack> (--verl-dir).
VERL_CHECKOUTS_DIR = "verl-src"
GSM8K_DIR = "gsm8k"
PREP_DIR = ".prep"
# The model's files but its weights, <MODEL_FILES_DIR>/<model-folder> (the inputs part).
MODEL_FILES_DIR = "model-files"
GSM8K_SCRIPT = Path("examples/data_preprocess/gsm8k.py")
GSM8K_FILES = ("train.parquet", "test.parquet")
RESERVED_DIRS = frozenset(
    {VERL_DIR, VERL_CHECKOUTS_DIR, GSM8K_DIR, PREP_DIR, MODEL_FILES_DIR, "datasets", "rewards"}
)


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


def parquet_done(root: Path, step: str, inputs: dict[str, str], out: Path) -> bool:
    """Whether the step's marker holds these inputs and out has both parquet files (logged as
    skipped)."""
    if is_done(root, step, inputs) and all(is_nonempty_file(out / f) for f in GSM8K_FILES):
        log(step, f"skipped: {out} already has {', '.join(GSM8K_FILES)}")
        return True
    return False


def clear_marker(root: Path, name: str) -> None:
    # Before touching a step's outputs, so that an interruption can never leave a marker that
    # vouches for half-rewritten files.
    marker_path(root, name).unlink(missing_ok=True)


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
