"""The rehearsal Job's wrapper (payloads/rehearse.py) for real: a subprocess running a stand-in for
verl_scripts/rehearsal.py that writes a record in the contract's shape (/work/briefs/record.md)
and exits as the real one does (0 ok, 1 a problem found)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from payloads import rehearse

WRAPPER = Path(rehearse.__file__)

# Stand-in: writes argv's --out record from the JSON in the environment (or nothing when it is
# empty) and exits with the given status; echoes the overrides it got.
STANDIN = """
import json, os, sys
args = sys.argv[1:]
out = args[args.index("--out") + 1]
overrides = args[args.index("--") + 1:]
print("overrides:", overrides, flush=True)
if "--context" in args:
    print("context:", args[args.index("--context") + 1], flush=True)
record = os.environ["STANDIN_RECORD"]
if record:
    with open(out, "w") as f:
        f.write(record)
sys.exit(int(os.environ["STANDIN_EXIT"]))
"""

PROBLEM = {
    "setting": "verl-gke:job.extraOverrides",
    "value": "actor_rollout_ref.rollout.max_model_len=65536",
    "message": "ValueError: max_model_len (65536) exceeds the model's max_position_embeddings",
    "fix": "pulumi config set --path verl-gke:job.extraOverrides[0] ...",
}


def wrap(
    tmp_path: Path, record: dict | None, code: int, context: str | None = None
) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    script = tmp_path / "rehearsal.py"
    script.write_text(STANDIN)
    out = tmp_path / "rehearsals" / "a4" / "exp" / "abc.json"
    log = tmp_path / "termination-log"
    log.write_text("")
    env = {
        "STANDIN_RECORD": json.dumps(record) if record is not None else "",
        "STANDIN_EXIT": str(code),
    }
    command = [
        sys.executable, str(WRAPPER), "--script", str(script), "--out", str(out),
        "--termination-log", str(log),
        *(["--context", context] if context is not None else []),
        "--", "data.train_files=/data/t.parquet", "a.b=1",
    ]  # fmt: skip
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=60, check=False, env={**env, "PATH": ""}
    )
    return done, out, log


def test_an_ok_record_passes(tmp_path: Path) -> None:
    done, out, log = wrap(tmp_path, {"schema": 1, "ok": True, "problems": []}, 0)
    assert done.returncode == 0, done.stderr
    assert "overrides: ['data.train_files=/data/t.parquet', 'a.b=1']" in done.stdout
    assert json.loads(out.read_text())["ok"] is True
    assert log.read_text() == ""


def test_the_context_reaches_the_script_before_the_overrides(tmp_path: Path) -> None:
    """The Job's --context (manifests/rehearsal.py) is what makes the script's problems name the
    stack's settings: the wrapper passes it on."""
    context = '{"settings": {"a.b": "verl-gke:job.extraOverrides[0]"}}'
    done, _, _ = wrap(tmp_path, {"schema": 1, "ok": True, "problems": []}, 0, context=context)
    assert done.returncode == 0, done.stderr
    assert f"context: {context}" in done.stdout
    assert "overrides: ['data.train_files=/data/t.parquet', 'a.b=1']" in done.stdout


def test_problems_are_kept_in_the_record_and_the_termination_message(tmp_path: Path) -> None:
    """The Job completes (pulumi up judges the record: jobs/rehearsal_verdict.py); the problems
    are also in the pod's termination message for `kubectl describe`."""
    record = {"schema": 1, "ok": False, "problems": [PROBLEM]}
    done, out, log = wrap(tmp_path, record, 1)
    assert done.returncode == 0
    assert json.loads(out.read_text()) == record
    message = log.read_text()
    assert message.startswith("rehearsal found problems:")
    line = (
        "verl-gke:job.extraOverrides = actor_rollout_ref.rollout.max_model_len=65536: "
        "ValueError: max_model_len (65536) exceeds the model's max_position_embeddings. "
        "Fix: pulumi config set --path verl-gke:job.extraOverrides[0] ..."
    )
    assert line in message.splitlines()
    assert "Traceback" not in done.stderr


def test_a_rehearsal_that_dies_without_a_record_is_retried_not_judged(tmp_path: Path) -> None:
    # An old record of the same command must not answer for this run.
    stale = tmp_path / "rehearsals" / "a4" / "exp" / "abc.json"
    stale.parent.mkdir(parents=True)
    stale.write_text(json.dumps({"ok": True, "problems": []}))
    done, out, log = wrap(tmp_path, None, 9)
    assert done.returncode == 9  # a failed pod: the Job's backoff retries it
    assert not out.exists()
    assert "exited 9 without writing" in log.read_text()


def test_an_exit_status_the_record_contradicts_is_not_a_pass(tmp_path: Path) -> None:
    done, _, _ = wrap(tmp_path, {"schema": 1, "ok": True, "problems": []}, 2)
    assert done.returncode == 2


def test_ok_false_without_problems_is_still_said(tmp_path: Path) -> None:
    done, _, log = wrap(tmp_path, {"schema": 1, "ok": False, "problems": []}, 1)
    assert done.returncode == 0
    assert "without naming a problem" in log.read_text()


def test_a_long_message_fits_the_termination_message_limit(tmp_path: Path) -> None:
    problems = [{**PROBLEM, "message": "x" * 500} for _ in range(20)]
    message = rehearse.termination_message(
        [rehearse.problem_line(p) for p in problems], tmp_path / "r.json"
    )
    assert len(message.encode()) <= rehearse.TERMINATION_MESSAGE_BYTES
    assert message.endswith("...")


@pytest.mark.parametrize(
    ("problem", "line"),
    [
        ({"setting": "s", "value": None, "message": "m."}, "s: m."),
        ({"message": "m", "fix": "f"}, "the job: m. Fix: f"),
    ],
)
def test_problem_lines_name_what_they_have(problem: dict, line: str) -> None:
    assert rehearse.problem_line(problem) == line
