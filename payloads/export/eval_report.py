"""The evaluation's settings and report (payloads/export/evaluate.py): the Student's t interval
over prompts, the two models' summary, and the report file, reused when it was computed for
the same export and settings. Standard library only."""

from __future__ import annotations

import functools
import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPORT_NAME = ".verl-gke-eval.json"
# export_model.MARKER (tests/test_evaluate.py checks they agree).
EXPORT_MARKER = ".verl-gke-export.json"
RESULT_TAG = "verl-gke-eval"
# 95 % two-sided interval: the 0.975 quantile of Student's t with n - 1 degrees of freedom.
CONFIDENCE = 0.95


class EvaluationError(RuntimeError):
    """The evaluation cannot run or failed; the message says what and where."""


@dataclass(frozen=True)
class EvalSettings:
    """What decides the result: a report with other settings is not reused."""

    data: str
    prompts: int | None
    samples: int
    temperature: float
    max_new_tokens: int
    max_prompt_length: int
    reward_file: str | None
    reward_name: str
    reward_kwargs: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    top_p: float = 1.0
    top_k: int = -1
    # The job's Hydra overrides of data.apply_chat_template_kwargs (from extraOverrides).
    chat_template_overrides: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float | None
    high: float | None
    n: int


def student_t_central(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with `df` degrees of freedom (t >= 0): the finite series of
    Abramowitz & Stegun, Handbook of Mathematical Functions, 26.7.3 (df odd) and 26.7.4 (df
    even), with theta = arctan(t / sqrt(df))."""
    theta = math.atan(t / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    if df % 2 == 1:
        # 2/pi (theta + sin cos (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ... up to cos^(df-3)))
        total, term = 0.0, 1.0
        for k in range(1, (df - 1) // 2 + 1):
            total += term
            term *= 2 * k / (2 * k + 1) * c2
        series = math.sin(theta) * math.cos(theta) * total if df > 1 else 0.0
        return 2 / math.pi * (theta + series)
    # sin (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ... up to cos^(df-2))
    total, term = 0.0, 1.0
    for k in range(1, df // 2 + 1):
        total += term
        term *= (2 * k - 1) / (2 * k) * c2
    return math.sin(theta) * total


@functools.cache
def student_t_quantile(p: float, df: int) -> float:
    """The p quantile (p > 0.5) of Student's t with `df` degrees of freedom: bisection on
    student_t_central, to double precision."""
    if df < 1 or not 0.5 < p < 1:
        raise ValueError(f"student_t_quantile({p}, {df}): needs df >= 1 and 0.5 < p < 1")
    central = 2 * p - 1
    low, high = 0.0, 1.0
    while student_t_central(high, df) < central:
        low, high = high, high * 2
    for _ in range(200):
        middle = (low + high) / 2
        if middle in (low, high):
            break
        if student_t_central(middle, df) < central:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def t_interval(values: Sequence[float]) -> Interval:
    """mean +- t(0.975, n - 1) * s / sqrt(n), s the sample standard deviation; no bounds for
    n < 2."""
    n = len(values)
    if n == 0:
        raise EvaluationError("no prompts were scored")
    mean = statistics.fmean(values)
    if n < 2:
        return Interval(mean, None, None, n)
    quantile = student_t_quantile(1 - (1 - CONFIDENCE) / 2, n - 1)
    half = quantile * statistics.stdev(values) / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


def _rounded(interval: Interval) -> dict[str, Any]:
    def r(x: float | None) -> float | None:
        return None if x is None else round(x, 6)

    return {"mean": r(interval.mean), "low": r(interval.low), "high": r(interval.high)}


def summarize(parts: dict[str, dict[str, Any]], samples: int) -> dict[str, Any]:
    """Per-model metrics and the paired difference from the two models' per-prompt scores."""
    base, trained = parts["base"]["prompts"], parts["trained"]["prompts"]
    if len(base) != len(trained):
        raise EvaluationError(f"base answered {len(base)} prompts, trained {len(trained)}")
    metrics = ["greedy"] + (["mean_at_k"] if samples > 0 else [])

    def value(row: dict[str, Any], metric: str) -> float:
        if metric == "greedy":
            return float(row["greedy_score"])
        return statistics.fmean(row["sample_scores"])

    out: dict[str, Any] = {"prompts": len(base), "primary": metrics[-1]}
    for role, rows in (("base", base), ("trained", trained)):
        out[role] = {m: _rounded(t_interval([value(r, m) for r in rows])) for m in metrics}
    differences = {
        m: t_interval([value(t, m) - value(b, m) for b, t in zip(base, trained, strict=True)])
        for m in metrics
    }
    out["difference"] = {m: _rounded(interval) for m, interval in differences.items()}
    # The flag reads the interval itself, not its 6-decimal rounding for the report.
    high = differences[out["primary"]].high
    out["regressed"] = high is not None and high < 0
    return out


INTERVAL_TEXT = (
    "95 % Student's t interval over prompts: mean +- t(0.975, n - 1) s / sqrt(n) of the "
    "per-prompt scores "
    "(greedy: the greedy answer's score; mean_at_k: the mean of the k samples' scores); for the "
    "difference, of the paired per-prompt differences trained - base"
)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


def marker_key(marker: dict[str, Any] | None) -> dict[str, Any] | None:
    """What names one export: the step and checkpoint it was merged from, and when."""
    if marker is None:
        return None
    return {k: marker.get(k) for k in ("step", "source", "finished_at")}


def export_key(trained: str) -> dict[str, Any] | None:
    """marker_key of the export marker in the exported model's folder."""
    return marker_key(read_json(Path(trained) / EXPORT_MARKER))


def reusable(
    out: Path, marker: dict[str, Any] | None, settings: EvalSettings, base: str, trained: str
) -> dict[str, Any] | None:
    """The report at `out` when it was computed for this export, these models and settings."""
    report = read_json(out)
    if report is None or report.get("status") != "ok" or marker is None:
        return None
    same = (
        report.get("export") == marker_key(marker)
        and report.get("settings") == asdict(settings)
        and report.get("models") == {"base": base, "trained": trained}
    )
    return report if same else None


def summary_of(report: dict[str, Any]) -> dict[str, Any]:
    """The report without its per-prompt rows: the printed result line."""
    return {"check": RESULT_TAG, **{k: v for k, v in report.items() if k != "per_prompt"}}


def write_json(path: Path, value: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f"{path.name}.tmp")
    temporary.write_text(json.dumps(value, indent=1) + "\n")
    temporary.replace(path)
