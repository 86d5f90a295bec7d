"""The gsm8k step: GSM8K written by verl's own examples/data_preprocess/gsm8k.py from the
checkout, and the parts of that script reproduced where the image has no examples folder."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

try:  # imported as payloads.data_prep.prep_gsm8k (the program, tests)
    from . import prep_common as common
except ImportError:  # run from /scripts in the pod: this folder is sys.path[0]
    import prep_common as common

# verl's examples/data_preprocess/gsm8k.py, reproduced for an image without the examples folder.
GSM8K_INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
GSM8K_COLUMNS = {"prompt": "question", "answer": "answer", "subset": "main"}


def gsm8k_output_flag(script: Path) -> str:
    # verl renamed the output flag of gsm8k.py: recent versions take --local_save_dir (keeping
    # --local_dir as a deprecated alias), older tags know only --local_dir. Reading the argparse
    # text avoids importing the script, which loads datasets and verl at import time.
    return "--local_save_dir" if "--local_save_dir" in script.read_text() else "--local_dir"


def prepare_gsm8k(root: Path, verl: Path) -> None:
    step = "gsm8k"
    out = root / common.GSM8K_DIR
    # The rows do not depend on the verl version, so a new --verl-ref does not redo this step.
    inputs = {"dataset": "openai/gsm8k", "output_dir": str(out)}
    if common.parquet_done(root, step, inputs, out):
        return
    started = time.monotonic()
    common.clear_marker(root, step)
    script = verl / common.GSM8K_SCRIPT
    if not script.is_file():
        raise common.StepError(f"{script} not found in the verl checkout")
    common.log(step, f"started: {script} -> {out}")
    out.mkdir(parents=True, exist_ok=True)
    for (
        name
    ) in common.GSM8K_FILES:  # a file left by an earlier attempt must not pass the check below
        (out / name).unlink(missing_ok=True)
    # The image uninstalls its own verl; the script imports verl, so use the checkout's source.
    pythonpath = os.pathsep.join(p for p in (str(verl), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": pythonpath}
    common.run_command(
        step, [sys.executable, str(script), gsm8k_output_flag(script), str(out)], env
    )
    sizes: dict[str, object] = {}
    for name in common.GSM8K_FILES:
        if not common.is_nonempty_file(out / name):
            raise common.StepError(f"{script.name} exited 0 but {out / name} is missing or empty")
        sizes[name] = (out / name).stat().st_size
    marker = common.write_marker(root, step, inputs, {"path": str(out), "bytes": sizes}, started)
    common.log(step, f"done in {time.monotonic() - started:.1f}s: {sizes}; marker {marker}")


def gsm8k_solution(answer: str) -> str:
    """The final answer after `#### `, commas dropped (verl's gsm8k.py extract_solution)."""
    found = re.search("#### (\\-?[0-9\\.\\,]+)", answer)
    if found is None:
        raise common.StepError(f"a GSM8K answer has no '#### <number>' line: {answer[-80:]!r}")
    return found.group(0).split("#### ")[1].replace(",", "")
