"""The rehearsal Job's entrypoint: runs verl_scripts/rehearsal.py and keeps its record.

    python3 /scripts/rehearse.py --script /scripts/rehearsal.py --out /data/rehearsals/... \\
        [--context JSON] [--model-files DIR] -- key=value ...   (the GRPO job's Hydra overrides)

rehearsal.py writes one JSON record (docs/rehearsal.md: "ok", "problems" with setting,
value, message and fix) and exits 1 when it found a problem. This wrapper
- removes the record of an earlier rehearsal of the same command first, so a rehearsal that dies
  before writing is never judged by an old record;
- exits 0 once a record is written, ok or not: `pulumi up` judges the record
  (jobs/rehearsal_verdict.py) and fails with its problems as a message; the problems also go to
  the pod's termination message for `kubectl describe`;
- when the script dies without a record (an image without verl, a killed pod) says so and exits
  with the script's status, which the Job retries (backoffLimit).

Stdlib only: it runs in the training image before anything of the program is there.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

# Kubernetes keeps at most 4096 bytes of a termination message (core/v1 Container
# terminationMessagePath: "Message written is intended to be brief final status ... will be
# truncated by the node if greater than 4096 bytes").
TERMINATION_MESSAGE_BYTES = 4096


def problem_line(problem: dict[str, Any]) -> str:
    """One problem as the user acts on it: the setting and value, verl's message, the fix."""
    setting = problem.get("setting") or "the job"
    value = problem.get("value")
    head = f"{setting} = {value}" if value not in (None, "") else str(setting)
    message = str(problem.get("message") or "no message").rstrip(".")
    fix = problem.get("fix")
    return f"{head}: {message}." + (f" Fix: {fix}" if fix else "")


def verdict(record: dict[str, Any]) -> list[str]:
    """The problem lines of a record; none when it is ok."""
    problems = record.get("problems") or []
    lines = [problem_line(p) for p in problems if isinstance(p, dict)]
    if not lines and record.get("ok") is not True:
        lines = ["the rehearsal reported ok=false without naming a problem: read its record"]
    return lines


def termination_message(lines: list[str], record_path: Path) -> str:
    text = "\n".join(["rehearsal found problems:", *lines, f"record: {record_path}"])
    data = text.encode()
    if len(data) <= TERMINATION_MESSAGE_BYTES:
        return text
    return data[: TERMINATION_MESSAGE_BYTES - 4].decode(errors="ignore") + "\n..."


def _read_record(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--script", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    # Passed on to the script: the settings its problems and fixes name.
    parser.add_argument("--context", default=None)
    # Passed on: the model's files but its weights (data prep's inputs Job).
    parser.add_argument("--model-files", default=None)
    parser.add_argument("--termination-log", type=Path, default=Path("/dev/termination-log"))
    parser.add_argument("overrides", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    overrides = args.overrides[1:] if args.overrides[:1] == ["--"] else args.overrides
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.unlink(missing_ok=True)
    passed = ["--context", args.context] if args.context is not None else []
    if args.model_files is not None:
        passed += ["--model-files", args.model_files]
    command = [sys.executable, str(args.script), "--out", str(args.out), *passed, "--", *overrides]
    returncode = subprocess.run(command, check=False).returncode
    record = _read_record(args.out)
    if record is None:
        line = (
            f"rehearse: {args.script.name} exited {returncode} without writing {args.out}: "
            "see the pod's log (kubectl logs -l job-name=rehearsal-job)"
        )
        print(line, file=sys.stderr, flush=True)
        if args.termination_log.is_file():
            args.termination_log.write_text(line + "\n")
        return returncode or 1
    lines = verdict(record)
    if not lines and returncode != 0:
        print(f"rehearse: {args.script.name} exited {returncode}", file=sys.stderr, flush=True)
        return returncode
    if not lines:
        print(f"rehearse: ok, record {args.out}", flush=True)
        return 0
    message = termination_message(lines, args.out)
    print(message, file=sys.stderr, flush=True)
    if args.termination_log.is_file():
        args.termination_log.write_text(message + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
