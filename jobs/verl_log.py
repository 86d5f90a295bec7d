"""The one parser of verl's console log (standard library only).

verl's console logger prints one line per logged step (``verl/utils/logger/aggregate_logger.py``,
``concat_dict_to_str``, identical at v0.6.1 and ddbcdb7)::

    step:3 - actor/pg_loss:-0.0123 - critic/score/mean:0.41 - timing_s/step:93.2

Only numeric values are printed, each as ``pprint.pformat(v)`` (= ``repr``), joined by " - ".
The line is printed inside the TaskRunner Ray actor, so in the job's driver log it carries Ray's
actor prefix, ``(TaskRunner pid=1234) `` (v0.6.1) or ``(TaskRunnerV1 pid=1, ip=10.0.0.2) ``
(ddbcdb7, actor on another node than the driver), usually wrapped in ANSI colour codes. Under
numpy >= 2 (ddbcdb7) numpy scalars render as ``np.float64(0.41)``; both forms are accepted.

The job provider (``firstStep`` wait mode) and ``tools/run.py`` both read logs through this
module, so there is one definition of "a training step" and of the start-up phases. It runs
inside the Pulumi dynamic-provider process too, hence no third-party imports.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

# Metric keys verl writes (verl/trainer/ppo/metric_utils.py, same names at both pinned refs).
SCORE_KEY = "critic/score/mean"  # sequence-level reward from the reward function
REWARD_KEY = "critic/rewards/mean"  # token-level reward after the KL penalty
RESPONSE_LENGTH_KEY = "response_length/mean"
THROUGHPUT_KEY = "perf/throughput"  # tokens / s / GPU
STEP_TIME_KEY = "timing_s/step"
GLOBAL_STEP_KEY = "training/global_step"

# Keys only a training step carries; the pre-training validation line (step:0 - val-core/...)
# has neither, so "first training step" never fires on validation.
_TRAINING_MARKER_KEYS = (STEP_TIME_KEY, GLOBAL_STEP_KEY)

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# Ray's driver-side printer: "(<ActorName> pid=<n>[, ip=<ip>]) ". Ray's log deduplication may
# append " [repeated Nx across cluster]"; it is dropped before the last value is parsed.
_STEP_LINE = re.compile(r"^\s*(?:\([^()]*\bpid=\d+[^()]*\)\s+)?step:(\d+)(?: - (.*))?$")
_REPEATED_SUFFIX = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
# numpy >= 2 scalar reprs: np.float64(0.5), np.int64(3), numpy.float32(nan).
_NUMPY_SCALAR = re.compile(r"^(?:np|numpy)\.(?:float|int|uint)\d*\((.*)\)$")


@dataclass(frozen=True)
class StepMetrics:
    """One parsed ``step:N - ...`` line: the step number and its numeric metrics, in order."""

    step: int
    values: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Frozen in depth: callers share these objects (provider state, CLI output).
        object.__setattr__(self, "values", MappingProxyType(dict(self.values)))

    def get(self, key: str, default: float | None = None) -> float | None:
        return self.values.get(key, default)

    def first_of(self, *keys: str) -> tuple[str, float] | None:
        """The first of ``keys`` present, with its value (e.g. score, falling back to reward)."""
        for key in keys:
            if key in self.values:
                return key, self.values[key]
        return None

    @property
    def is_training_step(self) -> bool:
        return any(key in self.values for key in _TRAINING_MARKER_KEYS)


def _parse_number(text: str) -> float | None:
    text = text.strip()
    numpy_scalar = _NUMPY_SCALAR.match(text)
    if numpy_scalar:
        text = numpy_scalar.group(1).strip()
    if text in ("True", "False"):  # bool is a numbers.Number, so verl prints it
        return 1.0 if text == "True" else 0.0
    try:
        value = float(text)  # accepts 1.5, -3e-05, nan, inf, -inf, 3
    except ValueError:
        return None
    return value


def _segments(line: str) -> Iterator[str]:
    # tqdm's progress bar uses "\r" without "\n"; a step line can follow it on one physical line.
    for segment in _ANSI.sub("", line).split("\r"):
        if "step:" in segment:
            yield segment


def parse_step_line(line: str) -> StepMetrics | None:
    """Parse one verl console step line; None for any other line.

    Accepts an optional Ray actor prefix and ANSI colour codes; values that are not numbers
    (they should not occur: verl filters them) are skipped rather than failing the line.
    """
    if "step:" not in line:  # cheap pre-check: logs are mostly vLLM/Ray noise
        return None
    for segment in _segments(line):
        match = _STEP_LINE.match(_REPEATED_SUFFIX.sub("", segment.rstrip("\n")))
        if match is None:
            continue
        values: dict[str, float] = {}
        body = match.group(2) or ""
        for part in body.split(" - ") if body else ():
            key, sep, raw = part.rpartition(":")
            key = key.strip()
            if not sep or not key:
                continue
            value = _parse_number(raw)
            if value is not None:
                values[key] = value
        return StepMetrics(step=int(match.group(1)), values=values)
    return None


def step_lines(log_text: str) -> list[StepMetrics]:
    """Every step line in the log (training and validation-only), in log order."""
    parsed = (parse_step_line(line) for line in log_text.splitlines())
    return [metrics for metrics in parsed if metrics is not None]


def training_steps(log_text: str) -> list[StepMetrics]:
    """The training steps in log order (a step line carrying ``timing_s/step``).

    The pre-training validation line (``step:0 - val-core/...``, or ``step:N`` after a resume)
    is not a training step. A step logged twice is returned twice; callers that want one entry
    per step keep the last.
    """
    return [metrics for metrics in step_lines(log_text) if metrics.is_training_step]


def first_training_step(log_text: str) -> StepMetrics | None:
    for line in log_text.splitlines():
        metrics = parse_step_line(line)
        if metrics is not None and metrics.is_training_step:
            return metrics
    return None


def latest_values(steps: list[StepMetrics]) -> dict[str, float]:
    """Last finite value of every key across ``steps`` (validation keys appear only every
    ``test_freq`` steps, so the latest step alone may lack them)."""
    latest: dict[str, float] = {}
    for metrics in steps:
        for key, value in metrics.values.items():
            if not math.isnan(value):
                latest[key] = value
    return latest


# ---------------------------------------------------------------------------------------------
# Start-up phases. verl prints these markers before its first step (v0.6.1 main_ppo.py,
# ray_trainer.py, fsdp_workers.py; ddbcdb7 v1/trainer_base.py, some only at INFO level).
# startup_phase() returns the furthest phase whose marker occurs, so interleaved output from
# many actors (vLLM keeps logging during validation) cannot move the phase backwards.

NO_OUTPUT = "no output yet"  # the driver has printed nothing
STARTING = "starting"  # Ray driver / TaskRunner up, config printed
LOADING_DATA = "loading data"  # dataloaders built ("Size of train dataloader", total steps)
LOADING_MODEL = "loading model"  # FSDP actor/ref workers load the checkpoint
STARTING_VLLM = "starting vLLM"  # rollout engine initialising (vLLM's own log lines)
LOADING_CHECKPOINT = "loading checkpoint"  # resuming from a saved global_step_N
VALIDATING = "validation before training"  # trainer.val_before_train (default on)
FIRST_STEP = "first step"  # training loop entered, no step logged yet
TRAINING = "training"  # at least one training step logged
FINISHED = "finished"  # final validation printed after the last step

PHASES: tuple[str, ...] = (
    NO_OUTPUT,
    STARTING,
    LOADING_DATA,
    LOADING_MODEL,
    STARTING_VLLM,
    LOADING_CHECKPOINT,
    VALIDATING,
    FIRST_STEP,
    TRAINING,
    FINISHED,
)

_PHASE_MARKERS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (STARTING, re.compile(r"ray init kwargs|TaskRunner hostname|\(TaskRunner(?:V1)? pid=")),
    (LOADING_DATA, re.compile(r"Size of train dataloader|Total training steps:")),
    (
        LOADING_MODEL,
        re.compile(
            r"Model config after override|wrap_policy:|Total steps: \d+, num_warmup_steps"
            r"|create worker group|model engine initialized"
        ),
    ),
    (
        # vLLM's logger format "INFO 11-14 10:00:01 [file.py:12] ...", its engine messages, or
        # verl's "Before building vllm rollout" (INFO level). Heuristic: not a verl contract.
        STARTING_VLLM,
        re.compile(
            r"(?:INFO|WARNING) \d\d-\d\d \d\d:\d\d:\d\d \[[\w.]+:\d+\]|LLM engine|EngineCore"
            r"|building vllm rollout",
            re.IGNORECASE,
        ),
    ),
    (LOADING_CHECKPOINT, re.compile(r"Load from checkpoint folder|Resuming from")),
    (
        VALIDATING,
        re.compile(r"Training from scratch|test_gen_batch meta info|ready to fit"),
    ),
    (FIRST_STEP, re.compile(r"Initial validation metrics|Training Progress")),
    (FINISHED, re.compile(r"Final validation metrics")),
)
_RANK = {phase: rank for rank, phase in enumerate(PHASES)}


def startup_phase(log_text: str) -> str:
    """The furthest start-up phase the log shows; one of :data:`PHASES`."""
    best = NO_OUTPUT if not log_text.strip() else STARTING
    for line in log_text.splitlines():
        if "step:" in line:
            metrics = parse_step_line(line)
            if metrics is not None:
                # A validation-only step line means validation is done: the loop is next.
                phase = TRAINING if metrics.is_training_step else FIRST_STEP
                if _RANK[phase] > _RANK[best]:
                    best = phase
                continue
        for phase, marker in _PHASE_MARKERS:
            if _RANK[phase] > _RANK[best] and marker.search(line):
                best = phase
    return best
