"""The rehearsal's files, as the rehearsal Job ships them (manifests/rehearsal.py, a ConfigMap
mounted flat at /scripts) and as the record's path names them (training/assembly.py
rehearsal_record): verl_scripts/rehearsal.py, the modules of its steps beside it
(`rehearsal_*.py`) and its wrapper payloads/rehearse.py. One owner, below both, so a changed
script is a new ConfigMap and a new record path alike.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

SCRIPT_KEY = "rehearsal.py"
WRAPPER_KEY = "rehearse.py"
# The modules of the rehearsal's steps, beside the script (verl_scripts/rehearsal_*.py).
STEP_MODULES = "rehearsal_"
_ROOT = Path(__file__).resolve().parent.parent
SCRIPT_FILE = _ROOT / "verl_scripts" / SCRIPT_KEY
WRAPPER_FILE = _ROOT / "payloads" / WRAPPER_KEY


class MissingScriptError(FileNotFoundError):
    pass


def read_scripts(script: Path = SCRIPT_FILE, wrapper: Path = WRAPPER_FILE) -> dict[str, str]:
    """The files by ConfigMap key: the rehearsal, the modules of its steps (imported by plain
    name from the script's folder, /scripts in the pod) and its wrapper."""
    files = {}
    for key, path in ((SCRIPT_KEY, script), (WRAPPER_KEY, wrapper)):
        try:
            files[key] = path.read_text()
        except FileNotFoundError:
            committed = (SCRIPT_FILE if key == SCRIPT_KEY else WRAPPER_FILE).relative_to(_ROOT)
            raise MissingScriptError(
                f"{path} is missing: the rehearsal Job ships it to the cluster as a ConfigMap. "
                f"Restore it from git (git checkout -- {committed})."
            ) from None
    for module in sorted(script.parent.glob(f"{STEP_MODULES}*.py")):
        files[module.name] = module.read_text()
    return files


def scripts_digest(files: dict[str, str]) -> str:
    """10 hex digits of every file's name and text."""
    content = "\0".join(f"{key}\0{files[key]}" for key in sorted(files))
    return hashlib.sha256(content.encode()).hexdigest()[:10]
