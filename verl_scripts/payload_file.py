"""The data-prep payload's modules (payloads/data_prep), for the scripts that run inside verl's
virtualenvs: they are started as `python verl_scripts/<script>.py`, so this folder is on
sys.path, and they import nothing else of the project."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA_PREP = ROOT / "payloads" / "data_prep"


def data_prep(module: str) -> Any:
    """One module of the data-prep payload (e.g. "prep_checks"), imported as the pod imports it:
    by plain name, its folder first on sys.path (the ConfigMap mounts the folder's modules flat
    at /scripts, the entry's folder)."""
    if str(DATA_PREP) not in sys.path:
        sys.path.insert(0, str(DATA_PREP))
    return importlib.import_module(module)
