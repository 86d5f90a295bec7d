"""payloads/prepare_data.py loaded from its file, for the scripts that run inside verl's
virtualenvs: they are started as `python verl_scripts/<script>.py`, so this folder is on
sys.path, and they import nothing else of the project."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def prepare_data() -> Any:
    """The data-prep payload as a module (it is a script shipped alone to the pod, no package)."""
    spec = importlib.util.spec_from_file_location("prepare_data", ROOT / "payloads/prepare_data.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
