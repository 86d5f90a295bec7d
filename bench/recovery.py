"""Recovery scenarios through the real runner against real Ray 2.49 processes on 127.0.0.1.

    python -m bench.recovery --json [--only worker_node_lost,hang]

One JSON object per scenario and line: scenario, outcome (resumed | not_retried | failed),
detected_s (node loss: from the SIGKILL to the supervisor's decision; hang: the silence that was
declared a hang; user stop: from SIGTERM to the runner's exit; runner_killed and
supervisor_killed: from the SIGKILL to the trainer's death), resumed_from_step,
last_checkpoint_step, attempts, causes, person_needed. The scenarios are described in
tests/support/recovery_scenarios.py; one Ray head and two "GPU nodes" serve them all.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.recovery_scenarios import RAY_VENV, SCENARIOS, Cluster, cluster


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument("--only", default=",".join(SCENARIOS))
    parser.add_argument("--keep", type=Path, help="keep the run folders here (logs, stacks)")
    args = parser.parse_args(argv)
    names = [name for name in args.only.split(",") if name]
    unknown = sorted(set(names) - set(SCENARIOS))
    if unknown:
        choices = ", ".join(SCENARIOS)
        parser.error(f"--only {','.join(unknown)}: not a scenario; choose from {choices}")
    if not (RAY_VENV / "bin" / "ray").exists():
        parser.error(
            f"no Ray 2.49 virtualenv at {RAY_VENV}: run `bash .ci/setup` in this clone, or set "
            "VERL_GKE_RAY_VENVS to the folder holding 2.49.0/"
        )
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="recovery-") as folder, cluster() as made:
        run(names, made, args.keep or Path(folder), args.json)
    print(f"# {len(names)} scenarios in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return 0


def run(names: list[str], made: Cluster, folder: Path, as_json: bool) -> None:
    """Each scenario in its own folder under `folder`, on the cluster `made`; prints its figures
    (one JSON object per line with as_json)."""
    for name in names:
        figures = SCENARIOS[name](made, folder / name)
        if as_json:
            print(json.dumps(figures), flush=True)
        else:
            print(" ".join(f"{key}={value}" for key, value in figures.items()), flush=True)


if __name__ == "__main__":
    sys.exit(main())
