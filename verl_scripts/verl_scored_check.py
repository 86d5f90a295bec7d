"""Which data_source values verl scores without a custom reward, through verl's own code. Prints
one JSON verdict.

Runs inside an isolated verl virtualenv (requirements-verl-*.txt), like
verl_scripts/verl_run_inputs_check.py:

1. calls verl's default_compute_score (verl/utils/reward_score/__init__.py) with each data_source
   of the request and records whether it raised NotImplementedError (no score for that source) or
   not (a branch matched: its score ran, whatever it returned or raised);
2. reads the data_source names and prefixes default_compute_score compares with, from its source;
3. with "parquet" (a virtualenv with pyarrow): writes fixture parquet folders and records what
   payloads/data_prep/prep_checks.py's check_dataset says of each, with and without the scored
   sources;
4. scores each "answers" case (data_source, response, ground truth) with default_compute_score.

stdin:  {"workdir": DIR, "sources": [...], "scored_sources": [...], "scored_prefixes": [...],
         "parquet": bool, "answers": [[data_source, solution_str, ground_truth], ...]}
stdout: {"verl_version": ..., "ok": bool, "error": ..., "not_implemented": {source: bool},
         "raised": {source: "ExceptionType"}, "verl_sources": [...], "verl_prefixes": [...],
         "checks": {case: null or "refusal"}, "answer_scores": [float, ...]}
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import json
import sys
import textwrap
import traceback
from pathlib import Path
from typing import Any

from payload_file import data_prep

GOOD_PROMPT = [{"role": "user", "content": "What is 2 + 3?"}]


def _score(sources: list[str], result: dict[str, Any]) -> None:
    from verl.utils.reward_score import default_compute_score

    result["not_implemented"], result["raised"] = {}, {}
    for source in sources:
        try:
            default_compute_score(
                data_source=source, solution_str="#### 5 \\boxed{5}", ground_truth="5"
            )
            result["not_implemented"][source] = False
        except NotImplementedError:
            result["not_implemented"][source] = True
        except Exception as error:  # the branch matched; its score refused the fixture
            result["not_implemented"][source] = False
            result["raised"][source] = type(error).__name__


def _answer_scores(cases: list[list[str]], result: dict[str, Any]) -> None:
    from verl.utils.reward_score import default_compute_score

    result["answer_scores"] = [
        default_compute_score(data_source=source, solution_str=response, ground_truth=truth)
        for source, response, truth in cases
    ]


def _verl_table(result: dict[str, Any]) -> None:
    """The string constants default_compute_score compares data_source with (==, in [...]) and
    the prefixes it passes to data_source.startswith."""
    from verl.utils.reward_score import default_compute_score

    tree = ast.parse(textwrap.dedent(inspect.getsource(default_compute_score)))
    sources: set[str] = set()
    prefixes: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and getattr(node.left, "id", None) == "data_source":
            for value in ast.walk(node.comparators[0]):
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    sources.add(value.value)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "startswith"
            and getattr(node.func.value, "id", None) == "data_source"
        ):
            prefixes.update(a.value for a in node.args if isinstance(a, ast.Constant))
    result["verl_sources"], result["verl_prefixes"] = sorted(sources), sorted(prefixes)


def _write(folder: Path, data_source: str, prompt: Any) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    rows = {
        "data_source": [data_source, "aime2024"],
        "prompt": [prompt, prompt],
        "reward_model": [{"style": "rule", "ground_truth": "5"}] * 2,
    }
    for name in ("train.parquet", "test.parquet"):
        pq.write_table(pa.table(rows), str(folder / name))
    return folder


def _checks(request: dict[str, Any], result: dict[str, Any]) -> None:
    checks, common = data_prep("prep_checks"), data_prep("prep_common")
    work = Path(request["workdir"])
    scored = (tuple(request["scored_sources"]), tuple(request["scored_prefixes"]))
    folders = {
        "known": _write(work / "known", "openai/gsm8k", GOOD_PROMPT),
        "unknown": _write(work / "unknown", "my_source", GOOD_PROMPT),
        "string-prompt": _write(work / "string", "openai/gsm8k", "What is 2 + 3?"),
    }
    cases = {
        "known-scored": (folders["known"], scored),
        "unknown-scored": (folders["unknown"], scored),
        "unknown-reward-set": (folders["unknown"], (None, ())),
        "string-prompt-reward-set": (folders["string-prompt"], (None, ())),
    }
    result["checks"] = {}
    for case, (folder, (sources, prefixes)) in cases.items():
        try:
            checks.check_dataset(folder, sources, prefixes)
            result["checks"][case] = None
        except common.StepError as error:
            result["checks"][case] = str(error)


def main() -> int:
    request = json.load(sys.stdin)
    result: dict[str, Any] = {"ok": False, "error": None}
    try:
        with contextlib.redirect_stdout(sys.stderr):  # the verdict alone goes to stdout
            import verl

            result["verl_version"] = verl.__version__
            _score(request["sources"], result)
            _verl_table(result)
            _answer_scores(request.get("answers", []), result)
            if request["parquet"]:
                _checks(request, result)
        result["ok"] = True
    except Exception as error:
        result["error"] = f"{type(error).__name__}: {error}"
        result["traceback"] = traceback.format_exc()[-3000:]
    print(json.dumps(result, default=str))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
