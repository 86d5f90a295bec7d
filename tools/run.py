"""Status, curves, follow, stop and resume of a GRPO run from the command line.

    python -m tools.run a4                          # stack a4 (`pulumi stack output`)
    python -m tools.run a4 --plot run.png           # + reward and response-length curves
    python -m tools.run a4 --follow                 # stream the driver log until the run ends
    python -m tools.run stop a4                     # stop the run; `pulumi up` keeps it stopped
    python -m tools.run resume a4                   # undo that; `pulumi up --refresh` resubmits
    python -m tools.run --dashboard-url http://127.0.0.1:8265 --submission-id ID [--json]

Status prints the Ray job's status, its cost (the stack's $/h from the stack outputs `pulumi up`
priced; the spend so far from the GPU nodes' own lifetimes, read from the Kubernetes API, or from
the job's running time where the cluster cannot be read, said so; the measured cost per step and
the projected cost of the steps left: pricing/spend.py), the
current step, the latest score, response length, throughput and step time from verl's console
metric lines (parsed by jobs/verl_log.py, the parser the job provider uses), the start-up phase
while no step has been logged yet, the export's evaluation against its base model once it ran
(payloads/export/evaluate.py's summary line), and for a FAILED run its cause: the end of the
driver log (Ray's FAILED message carries the log's last 20,000 characters after the line "last
available logs (truncated to 20,000 chars):"; the cause is what follows it, not that line). The
exit status says how the run stands (EXIT_CODES).

The dashboard is reached with the job provider's client (jobs/dashboard_client.py): through the
GKE API server's service proxy with a short-lived token from Application Default Credentials and
the cluster CA, or at a plain URL (a local cluster, a port-forward), with Ray's own token when
the head requires one (RAY_AUTH_MODE=token). Connection values come from the stack outputs when
the Pulumi CLI is on PATH; flags override them (tools/run_target.py).

With a stack, status also shows the rehearsal's answers (the stack outputs of
jobs/rehearsal_verdict.py: verl's own count of the run's steps and its save steps, the rows its
dataset keeps, the reward's sample scores, the versions in the training image, any problem).

Logs: status uses the last --tail-lines lines of the driver log (Ray's state API) and falls back
to the whole log (Jobs API) when the tail holds no training step or the state API does not
answer; --plot and --all-steps read the whole log, since every step's line is needed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs import dashboard_access, job_logs, recovery_log, verl_log
from jobs.dashboard_client import Dashboard, DashboardAuthError
from jobs.provider_errors import ProviderRuntimeError
from jobs.verl_log import StepMetrics
from payloads.export import evaluate
from pricing.spend import NodeLife, job_spend, node_spend, step_cost
from tools import run_control
from tools.run_nodes import read_node_lives
from tools.run_target import (
    Rehearsal,
    RunPrice,
    RunToolError,
    Target,
    add_target_arguments,
    job_details,
    kubeconfig_cluster,
    open_dashboard,
    resolve_target,
    stack_outputs,
)
from training import model_evaluation

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["RunToolError", "Target", "kubeconfig_cluster", "resolve_target", "stack_outputs"]

DEFAULT_TAIL_LINES = 2000
DEFAULT_TIMEOUT_S = 15.0
# The exit status of a command whose run is (or ends) in this state; errors of the tool exit 1,
# bad arguments 2 (argparse).
EXIT_CODES = {"FAILED": 3, "STOPPED": 4}
# Ray's FAILED message: "Job entrypoint command failed with exit code N, last available logs
# (truncated to 20,000 chars):\n<the log's last 20,000 characters>" (ray/dashboard/modules/job/
# job_supervisor.py, Ray 2.47-2.60).
RAY_LOG_HEADER = "last available logs (truncated to 20,000 chars):"
CAUSE_LINES = 20

_TOTAL_STEPS = re.compile(r"Total training steps: (\d+)")
_VALIDATION_PREFIXES = ("val-core/", "val-aux/")


# -- what the run did ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RunView:
    submission_id: str
    dashboard: str  # the Jobs API address (no credentials)
    status: str
    message: str
    start_time_ms: int | None
    end_time_ms: int | None
    phase: str
    steps: tuple[StepMetrics, ...]  # one per training step, by step number
    validation: dict[str, float]  # latest value of each val-* key
    validation_points: tuple[tuple[int, float], ...]  # (step, main val score) for the plot
    total_steps: int | None
    log_source: str
    cause: tuple[str, ...] = ()  # a FAILED run's last log lines (failure_cause)
    # The runner's recovery record (jobs/recovery_log.py): attempts, restarts, hang bound.
    recovery: dict[str, Any] | None = None
    # The export's evaluation summary (payloads/export/evaluate.py's last line), once it ran.
    evaluation: dict[str, Any] | None = None
    now_s: float = field(default_factory=time.time)

    @property
    def elapsed_s(self) -> float | None:
        if self.start_time_ms is None:
            return None
        end_s = self.end_time_ms / 1000 if self.end_time_ms else self.now_s
        return max(0.0, end_s - self.start_time_ms / 1000)

    @property
    def latest(self) -> StepMetrics | None:
        return self.steps[-1] if self.steps else None


# -- reading the run ----------------------------------------------------------------------------


def read_run(
    target: Target,
    *,
    tail_lines: int = DEFAULT_TAIL_LINES,
    full_log: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    token_provider: dashboard_access.TokenProvider | None = None,
) -> RunView:
    sid = target.submission_id
    with open_dashboard(target, timeout_s, token_provider) as dashboard:
        info = job_details(dashboard, target)
        log, source = None, ""
        node_id = getattr(info, "driver_node_id", None)
        if not full_log and tail_lines > 0 and node_id:
            log = _log_tail(dashboard, sid, node_id, tail_lines)
            source = f"last {tail_lines} lines"
            if log is not None and not verl_log.training_steps(log):
                log = None  # no step in the tail: the phase needs the whole log
        if log is None:
            log, source = dashboard.whole_log(sid), "whole log"
    return summarize(
        sid,
        dashboard.address,
        str(info.status.value),
        info.message,
        info.start_time,
        info.end_time,
        log,
        source,
    )


def _log_tail(dashboard: Dashboard, sid: str, node_id: str, lines: int) -> str | None:
    """The driver log's last `lines` lines from the state API, or None when it does not give
    them (an empty log: Ray 2.47 answers 500 for one) so the caller reads it whole."""
    try:
        tail = dashboard.log_tail(
            sid, node_id, lines, job_logs.SCAN_LINE_MAX_CHARS, whole_log_fallback=False
        )
    except DashboardAuthError:
        raise
    except ProviderRuntimeError:  # not served, or not answering: the whole log is next
        return None
    return "\n".join(tail)


def failure_cause(message: str, log: str, lines: int = CAUSE_LINES) -> tuple[str, ...]:
    """The last `lines` non-blank lines of the log Ray put in a FAILED message after its
    truncation header, or of the driver log read when the message carries none."""
    _, header, logged = message.partition(RAY_LOG_HEADER)
    text = logged if header and logged.strip() else log
    kept = [line.rstrip() for line in text.splitlines() if line.strip()]
    return tuple(kept[-lines:])


def short_message(message: str) -> str:
    """Ray's message up to its log excerpt (the cause is shown on its own)."""
    head = message.partition(RAY_LOG_HEADER)[0].strip().rstrip(",").strip()
    return head.splitlines()[0][:300] if head else ""


def summarize(
    submission_id: str,
    dashboard: str,
    status: str,
    message: str | None,
    start_time_ms: int | None,
    end_time_ms: int | None,
    log: str,
    log_source: str,
) -> RunView:
    """Everything the report shows, from the job's details and (part of) its driver log."""
    by_step: dict[int, StepMetrics] = {}
    for metrics in verl_log.training_steps(log):
        by_step[metrics.step] = metrics  # a step logged twice: the last line wins
    all_lines = verl_log.step_lines(log)
    validation = {
        key: value
        for key, value in verl_log.latest_values(all_lines).items()
        if key.startswith(_VALIDATION_PREFIXES)
    }
    points = []
    for metrics in all_lines:
        main = _main_validation_key(metrics.values)
        if main is not None and not math.isnan(metrics.values[main]):
            points.append((metrics.step, metrics.values[main]))
    totals = _TOTAL_STEPS.findall(log)
    return RunView(
        submission_id=submission_id,
        dashboard=dashboard,
        status=status,
        message=(message or "").strip(),
        start_time_ms=start_time_ms,
        end_time_ms=end_time_ms,
        phase=verl_log.startup_phase(log),
        steps=tuple(by_step[step] for step in sorted(by_step)),
        validation=validation,
        validation_points=tuple(points),
        total_steps=int(totals[-1]) if totals else None,
        log_source=log_source,
        cause=failure_cause(message or "", log) if status == "FAILED" else (),
        recovery=recovery_log.latest_record(log),
        evaluation=evaluate.find_summary(log),
    )


def _main_validation_key(values: Any) -> str | None:
    # verl: f"val-core/{data_source}/{var}/{metric}", e.g. val-core/openai/gsm8k/reward/mean@1
    candidates = sorted(k for k in values if k.startswith("val-core/") and "/mean@" in k)
    return candidates[0] if candidates else None


# -- output -------------------------------------------------------------------------------------

FIELDS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    # label, keys in order of preference, unit
    ("score", (verl_log.SCORE_KEY, verl_log.REWARD_KEY), ""),
    ("response length", (verl_log.RESPONSE_LENGTH_KEY,), "tokens"),
    ("throughput", (verl_log.THROUGHPUT_KEY,), "tokens/s/GPU"),
    ("step time", (verl_log.STEP_TIME_KEY,), "s"),
)


def format_duration(seconds: float) -> str:
    total = round(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m {secs:02d}s"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def _number(value: float) -> str:
    if not math.isfinite(value):
        return str(value)
    return f"{value:.4g}" if abs(value) < 1e5 else f"{value:,.0f}"


def rehearsal_rows(rehearsal: Rehearsal) -> list[tuple[str, str]]:
    """The rehearsal's answers (verl's own code in the training image, before the GPUs)."""
    rows = []
    if rehearsal.steps is not None:
        saves = ", ".join(str(s) for s in rehearsal.save_steps or []) or "none"
        rows.append(("run length", f"{rehearsal.steps} steps (verl's count); saves at {saves}"))
    data = rehearsal.rows or {}
    kept = [
        f"{split} {data.get(f'{split}_rows_kept')} of {data.get(f'{split}_rows')}"
        for split in ("train", "val")
        if data.get(f"{split}_rows") is not None
    ]
    if kept:
        rows.append(("rows kept", ", ".join(kept)))
    for sample in rehearsal.reward_samples or []:
        rows.append(
            (
                "reward sample",
                f"row {sample.get('row')}: right answer {sample.get('score_correct')}, wrong "
                f"answer {sample.get('score_wrong')} (ground truth {sample.get('ground_truth')!r})",
            )
        )
    if rehearsal.versions:
        found = ", ".join(f"{k} {v}" for k, v in sorted(rehearsal.versions.items()) if v)
        rows.append(("image versions", found))
    rows.extend(("rehearsal problem", problem) for problem in rehearsal.problems)
    rows.append(("rehearsal record", rehearsal.record))
    return rows


def render_text(
    view: RunView,
    price: RunPrice | None = None,
    rehearsal: Rehearsal | None = None,
    nodes: tuple[list[NodeLife] | None, str] | None = None,
) -> str:
    rows: list[tuple[str, str]] = [("run", view.submission_id)]
    status = view.status
    if view.elapsed_s is not None:
        verb = "after" if view.end_time_ms else "for"
        status += f" {verb} {format_duration(view.elapsed_s)}"
    rows.append(("status", status))
    rows.extend(cost_rows(view, price, *(nodes or (None, ""))))
    latest = view.latest
    total = view.total_steps or (rehearsal.steps if rehearsal is not None else None)
    if latest is None:
        rows.append(("step", f"no training step logged yet (phase: {view.phase})"))
    else:
        of = f" of {total}" if total else ""
        rows.append(("step", f"{latest.step}{of}"))
        for label, keys, unit in FIELDS:
            found = latest.first_of(*keys)
            if found is not None:
                key, value = found
                rows.append((label, f"{_number(value)} {unit}".rstrip() + f"  ({key})"))
    for key in sorted(view.validation):
        if key.startswith("val-core/"):
            rows.append(("validation", f"{_number(view.validation[key])}  ({key})"))
    if view.message and view.status in ("FAILED", "STOPPED"):
        rows.append(("message", short_message(view.message)))
    if view.recovery is not None:
        rows.extend(recovery_log.describe(view.recovery))
    if rehearsal is not None:
        rows.extend(rehearsal_rows(rehearsal))
    rows.extend(model_evaluation.result_rows(view.evaluation))
    rows.append(("dashboard", view.dashboard))
    rows.append(("log read", view.log_source))
    width = max(len(label) for label, _ in rows)
    text = "\n".join(f"{label:<{width}}  {value}" for label, value in rows)
    if view.cause:
        text += f"\ncause (the driver log's last {len(view.cause)} lines):\n"
        text += "\n".join(f"  {line}" for line in view.cause)
    return text


def cost_rows(
    view: RunView,
    price: RunPrice | None,
    lives: list[NodeLife] | None = None,
    why_no_nodes: str = "",
) -> list[tuple[str, str]]:
    """The stack's rate; the spend so far from the GPU nodes' lifetimes (pricing/spend.py), or
    from the Ray job's running time where the cluster's nodes could not be read, said so; the
    measured cost per step and the projected cost of the remaining steps."""
    if price is None:
        return []
    if price.stack_hourly_usd is None:
        return [("cost", f"no price for the GPU nodes ({price.source})")]
    bound, stack = price.bound, price.stack_hourly_usd
    head = f"{bound}${stack:,.2f}/h for the stack"
    if price.gpu_node_hourly_usd is not None:
        head += (
            f" ({price.gpu_nodes} GPU nodes x ${price.gpu_node_hourly_usd:,.2f}; {price.source})"
        )
    rows = [("cost", head)]
    if lives is not None:
        spent = node_spend(lives, view.now_s, price.gpu_node_hourly_usd, price.fixed_hourly_usd)
    elif view.elapsed_s is not None:
        spent = job_spend(view.elapsed_s, stack)
        spent = dataclasses.replace(spent, how=f"{spent.how}; {why_no_nodes}".rstrip("; "))
    else:
        spent = None
    if spent is not None and spent.usd is not None:
        rows.append(("spent", f"{bound}${spent.usd:,.2f} so far ({spent.how})"))
    per_step = step_cost((m.get(verl_log.STEP_TIME_KEY) or 0.0 for m in view.steps), stack)
    if per_step is not None:
        rows.append(
            (
                "cost per step",
                f"{bound}${per_step:,.2f} (measured: the mean {verl_log.STEP_TIME_KEY} of "
                f"{len(view.steps)} steps x the stack's rate)",
            )
        )
        latest, total = view.latest, view.total_steps
        if latest is not None and total and view.status in ("RUNNING", "PENDING"):
            left = max(0, total - latest.step)
            rows.append(
                (
                    "to finish",
                    f"{bound}${left * per_step:,.2f} for the {left} steps left (training only: "
                    "the export, evaluation and idle tail come on top, see python -m tools.plan)",
                )
            )
    return rows


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None  # JSON has no NaN / Infinity


def to_json(view: RunView, rehearsal: Rehearsal | None = None) -> dict[str, Any]:
    latest = view.latest
    return {
        "rehearsal": None if rehearsal is None else dataclasses.asdict(rehearsal),
        "submission_id": view.submission_id,
        "dashboard": view.dashboard,
        "status": view.status,
        "message": view.message,
        "start_time_ms": view.start_time_ms,
        "end_time_ms": view.end_time_ms,
        "elapsed_s": view.elapsed_s,
        "phase": view.phase,
        "step": latest.step if latest else None,
        "total_steps": view.total_steps,
        "latest": {k: _finite(v) for k, v in latest.values.items()} if latest else {},
        "validation": {k: _finite(v) for k, v in view.validation.items()},
        "steps": [
            {
                "step": metrics.step,
                **{
                    key: _finite(value)
                    for label, keys, _ in FIELDS
                    if (found := metrics.first_of(*keys)) is not None
                    for key, value in [found]
                },
            }
            for metrics in view.steps
        ],
        "log_source": view.log_source,
        "cause": list(view.cause),
        "recovery": view.recovery,
        "evaluation": view.evaluation,
    }


def _series(steps: Sequence[StepMetrics], key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for metrics in steps:
        value = metrics.get(key)
        if value is not None and math.isfinite(value):
            xs.append(metrics.step)
            ys.append(value)
    return xs, ys


def plot_run(view: RunView) -> Figure:
    """Two stacked panels over the training step: the mean score (with the validation score as
    points) and the mean response length. No min-max bands: with GSM8K's 0/1 reward the score's
    min and max are 0 and 1 at every step, and the longest response is the length cap."""
    import matplotlib

    matplotlib.use("Agg")  # no display on a laptop shell over ssh or in CI
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 6), dpi=100, layout="constrained")
    score_ax, length_ax = figure.subplots(2, 1, sharex=True)
    score_key = (
        verl_log.SCORE_KEY
        if any(verl_log.SCORE_KEY in m.values for m in view.steps)
        else verl_log.REWARD_KEY
    )
    for ax, key, label in (
        (score_ax, score_key, "score"),
        (length_ax, verl_log.RESPONSE_LENGTH_KEY, "response length (tokens)"),
    ):
        xs, ys = _series(view.steps, key)
        ax.plot(xs, ys, marker="o", markersize=3, label=key)
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best", fontsize="small")
    if view.validation_points:
        vx, vy = zip(*view.validation_points, strict=True)
        main = _main_validation_key(view.validation) or "validation"
        score_ax.plot(vx, vy, "s", color="tab:green", label=main)
        score_ax.legend(loc="best", fontsize="small")
    length_ax.set_xlabel("training step")
    score_ax.set_title(f"{view.submission_id} ({view.status})", fontsize="medium")
    return figure


# -- command line -------------------------------------------------------------------------------

COMMANDS = ("status", "stop", "resume")
EPILOG = """commands (the first argument; default: status):
  status   the run's status, step, metrics, a FAILED run's cause; --follow streams the driver log
           until the run ends, with its start-up phases and steps (like `ray job logs --follow`)
  stop     stop the run and record that the user stopped it: `pulumi up` (also with --refresh)
           then keeps it stopped instead of resubmitting it. `python -m tools.run stop --help`
  resume   remove that record: the next `pulumi up --refresh` resubmits the run under its next
           -r<N> id, resuming from its latest checkpoint. `python -m tools.run resume --help`

exit status: 0 the run is pending, running or succeeded (stop/resume: done); 1 an error of this
tool (the message says what to fix); 2 bad arguments; 3 the run FAILED; 4 the run is STOPPED
(status, --follow)."""


def build_parser(command: str = "status") -> argparse.ArgumentParser:
    """The parser of one command; `status` (the default command) documents them all."""
    if command == "status":
        parser = argparse.ArgumentParser(
            prog="python -m tools.run",
            description="Status, latest metrics and curves of the stack's GRPO run.",
            epilog=EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
    else:
        parser = argparse.ArgumentParser(
            prog=f"python -m tools.run {command}",
            description=run_control.DESCRIPTIONS[command],
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
    add_target_arguments(parser)
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help="seconds to keep retrying an unreachable dashboard",
    )
    if command != "status":
        return parser
    parser.add_argument("--plot", type=Path, metavar="FILE.png", help="write the curves to a PNG")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument(
        "--tail-lines",
        type=int,
        default=DEFAULT_TAIL_LINES,
        help="lines of the log end to read for the status (0: the whole log)",
    )
    parser.add_argument(
        "--all-steps", action="store_true", help="read the whole log (every step in --json)"
    )
    parser.add_argument(
        "--follow",
        action="store_true",
        help="stream the driver log until the run ends, with phase and step lines "
        "(prefixed '==> '), then print the status",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    command = arguments.pop(0) if arguments and arguments[0] in COMMANDS else "status"
    args = build_parser(command).parse_args(arguments)
    try:
        target = resolve_target(args)
        if command != "status":
            return run_control.control(command, target, args.timeout)
        if args.follow:
            run_control.follow(target, args.timeout)
        view = read_run(
            target,
            tail_lines=args.tail_lines,
            full_log=bool(args.plot) or args.all_steps,
            timeout_s=args.timeout,
        )
    except RunToolError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(to_json(view, target.rehearsal), indent=2))
    else:
        nodes = read_node_lives(target.dashboard) if target.price is not None else None
        print(render_text(view, target.price, target.rehearsal, nodes))
    if args.plot:
        if not view.steps:
            print(
                f"error: no training step logged yet (phase: {view.phase}); nothing to plot",
                file=sys.stderr,
            )
            return 1
        plot_run(view).savefig(args.plot)
        if not args.json:
            print(f"plot written to {args.plot}")
    return EXIT_CODES.get(view.status, 0)


if __name__ == "__main__":
    sys.exit(main())
