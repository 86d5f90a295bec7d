"""jobs/verl_log.py against lines in the exact shapes verl and Ray print.

Line shapes: verl/utils/logger/aggregate_logger.py ``concat_dict_to_str`` (``step:N`` then
``key:repr(value)`` joined by " - ", same at v0.6.1 and ddbcdb7); Ray's driver printer
(``ray/_private/worker.py`` ``print_worker_logs``) adds a coloured
``\\x1b[36m(TaskRunner pid=N[, ip=IP])\\x1b[0m `` prefix.
v0.6.1 runs numpy < 2 (plain reprs), ddbcdb7 numpy >= 2 (``np.float64(...)``).
"""

from __future__ import annotations

import math
import pprint

import pytest

from jobs import verl_log
from jobs.verl_log import (
    StepMetrics,
    first_training_step,
    parse_step_line,
    startup_phase,
    training_steps,
)

CYAN, RESET = "\x1b[36m", "\x1b[0m"


def concat_dict_to_str(data: dict[str, object], step: int) -> str:
    """verl's formatting (aggregate_logger.py), restated so the tests produce its exact output."""
    parts = [f"step:{step}"]
    for key, value in data.items():
        if isinstance(value, (int, float)):
            parts.append(f"{key}:{pprint.pformat(value)}")
    return " - ".join(parts)


# v0.6.1 (numpy < 2), TaskRunner actor on a worker node, coloured prefix.
V061_STEP = (
    f"{CYAN}(TaskRunner pid=2417, ip=10.52.3.7){RESET} step:1 - global_seqlen/min:118234 - "
    "actor/entropy:0.5123 - actor/pg_loss:-0.0123 - actor/kl_loss:0.0011 - actor/pg_clipfrac:0.0 - "
    "actor/grad_norm:0.2841 - actor/lr:1e-06 - training/global_step:1 - training/epoch:0 - "
    "critic/score/mean:0.4140625 - critic/score/max:1.0 - critic/score/min:0.0 - "
    "critic/rewards/mean:0.4140625 - response_length/mean:231.5 - response_length/max:1024.0 - "
    "response_length/clip_ratio:0.01 - timing_s/gen:41.2 - timing_s/update_actor:30.9 - "
    "timing_s/step:93.24 - perf/total_num_tokens:412345 - perf/time_per_step:93.24 - "
    "perf/throughput:276.4"
)
# ddbcdb7 (a4x, numpy >= 2): TaskRunnerV1, numpy scalar reprs for reduced metrics.
A4X_STEP = (
    "(TaskRunnerV1 pid=88, ip=10.0.0.2) step:12 - actor/pg_loss:np.float64(-0.0311) - "
    "actor/entropy:np.float64(0.47) - actor/ppo_kl:np.float32(nan) - "
    "training/global_step:12 - training/epoch:np.int64(0) - critic/score/mean:0.62 - "
    "response_length/mean:318.25 - timing_s/step:71.5 - perf/throughput:np.float64(512.0)"
)
VALIDATION_STEP0 = (
    f"{CYAN}(TaskRunner pid=2417){RESET} step:0 - val-core/openai/gsm8k/reward/mean@1:0.3712 - "
    "val-aux/openai/gsm8k/score/mean@1:0.3712"
)


def test_v061_line_with_coloured_prefix_and_ip() -> None:
    metrics = parse_step_line(V061_STEP)
    assert metrics is not None
    assert metrics.step == 1
    assert metrics.get("critic/score/mean") == pytest.approx(0.4140625)
    assert metrics.get("actor/pg_loss") == pytest.approx(-0.0123)
    assert metrics.get("actor/lr") == pytest.approx(1e-06)
    assert metrics.get("perf/throughput") == pytest.approx(276.4)
    assert metrics.get("timing_s/step") == pytest.approx(93.24)
    assert metrics.is_training_step
    assert len(metrics.values) == 22


def test_a4x_line_with_numpy2_reprs() -> None:
    metrics = parse_step_line(A4X_STEP)
    assert metrics is not None
    assert metrics.step == 12
    assert metrics.get("actor/pg_loss") == pytest.approx(-0.0311)
    assert metrics.get("training/epoch") == 0.0
    assert metrics.get("perf/throughput") == 512.0
    assert math.isnan(metrics.values["actor/ppo_kl"])
    assert metrics.first_of(verl_log.SCORE_KEY, verl_log.REWARD_KEY) == ("critic/score/mean", 0.62)


def test_formatting_helper_matches_verl_output_and_parses_back() -> None:
    data = {
        "critic/score/mean": 0.25,
        "actor/pg_loss": -3e-05,
        "perf/max_memory_allocated_gb": 71,
        "actor/is_nan": float("inf"),
        "flag": True,
        "note": "not numeric",  # verl drops it; so must a hand-made line
        "timing_s/step": 10.0,
    }
    line = "(TaskRunner pid=7) " + concat_dict_to_str(data, step=4)
    assert "note" not in line and "actor/pg_loss:-3e-05" in line
    metrics = parse_step_line(line)
    assert metrics == StepMetrics(
        step=4,
        values={
            "critic/score/mean": 0.25,
            "actor/pg_loss": -3e-05,
            "perf/max_memory_allocated_gb": 71.0,
            "actor/is_nan": float("inf"),
            "flag": 1.0,
            "timing_s/step": 10.0,
        },
    )


def test_plain_line_without_prefix_and_non_numeric_values_skipped() -> None:
    metrics = parse_step_line("step:3 - a:1.5 - b:hello - c:np.float64(oops) - d:2")
    assert metrics is not None
    assert dict(metrics.values) == {"a": 1.5, "d": 2.0}
    assert not metrics.is_training_step


def test_ray_dedup_suffix_and_tqdm_carriage_return() -> None:
    line = (
        "Training Progress:   0%|          | 0/5 [00:00<?, ?it/s]\r"
        "(TaskRunner pid=1) step:2 - timing_s/step:9.5 - critic/score/mean:0.5 "
        "[repeated 2x across cluster]"
    )
    metrics = parse_step_line(line)
    assert metrics is not None
    assert metrics.step == 2
    assert metrics.get("critic/score/mean") == 0.5


@pytest.mark.parametrize(
    "line",
    [
        "",
        "(TaskRunner pid=1) Training from scratch",
        "(TaskRunner pid=1) Total training steps: 435",
        "  'trainer': {'total_training_steps': None, 'step:': 3},",  # config pprint, not a step
        "(WorkerDict pid=9) warmup step:3 - lr:0.1",  # step: not at the line start
        "step:abc - a:1",
        "stepper:3 - a:1",
    ],
)
def test_other_lines_are_not_step_lines(line: str) -> None:
    assert parse_step_line(line) is None


def test_validation_step0_is_not_a_training_step() -> None:
    metrics = parse_step_line(VALIDATION_STEP0)
    assert metrics is not None
    assert metrics.step == 0
    assert not metrics.is_training_step
    assert first_training_step(VALIDATION_STEP0) is None
    assert training_steps(VALIDATION_STEP0) == []


V061_LOG = "\n".join(
    [
        "ray init kwargs: {'num_cpus': None, 'runtime_env': {...}}",
        f"{CYAN}(TaskRunner pid=2417){RESET} TaskRunner hostname: ray-head-x, PID: 2417",
        "(TaskRunner pid=2417) Size of train dataloader: 29, Size of val dataloader: 1",
        "(TaskRunner pid=2417) Total training steps: 435",
        "(WorkerDict pid=3001, ip=10.52.3.7) Model config after override: Qwen2Config {",
        "(WorkerDict pid=3001, ip=10.52.3.7) INFO 11-14 10:00:01 [model_runner.py:1051] Loading",
        "(TaskRunner pid=2417) Training from scratch",
        "(TaskRunner pid=2417) test_gen_batch meta info: {'eos_token_id': 151645}",
        "(TaskRunner pid=2417) 'Initial validation metrics: {...}'",
        VALIDATION_STEP0,
        "Training Progress:   0%|          | 0/435 [00:00<?, ?it/s]",
        V061_STEP,
        V061_STEP.replace("step:1 -", "step:2 -").replace(
            "critic/score/mean:0.4140625", "critic/score/mean:0.5"
        ),
    ]
)


def test_training_steps_in_order_skipping_validation() -> None:
    steps = training_steps(V061_LOG)
    assert [s.step for s in steps] == [1, 2]
    assert [s.get("critic/score/mean") for s in steps] == [pytest.approx(0.4140625), 0.5]
    first = first_training_step(V061_LOG)
    assert first is not None and first.step == 1
    assert verl_log.latest_values(steps)["critic/score/mean"] == 0.5


@pytest.mark.parametrize(
    ("last_line_index", "phase"),
    [
        (0, verl_log.STARTING),
        (3, verl_log.LOADING_DATA),
        (4, verl_log.LOADING_MODEL),
        (5, verl_log.STARTING_VLLM),
        (6, verl_log.VALIDATING),
        (8, verl_log.FIRST_STEP),
        (9, verl_log.FIRST_STEP),
        (10, verl_log.FIRST_STEP),
        (11, verl_log.TRAINING),
    ],
)
def test_startup_phase_follows_v061_markers(last_line_index: int, phase: str) -> None:
    prefix = "\n".join(V061_LOG.splitlines()[: last_line_index + 1])
    assert startup_phase(prefix) == phase


def test_startup_phase_edge_cases() -> None:
    assert startup_phase("") == verl_log.NO_OUTPUT
    assert startup_phase("   \n") == verl_log.NO_OUTPUT
    resumed = "(TaskRunner pid=1) Load from checkpoint folder: /data/ckpt/global_step_40"
    assert startup_phase(resumed) == verl_log.LOADING_CHECKPOINT
    # vLLM keeps logging during validation: the phase never moves backwards.
    later_noise = (
        "(TaskRunner pid=1) Training from scratch\n"
        "(WorkerDict pid=2) INFO 11-14 10:00:09 [a.py:1] x"
    )
    assert startup_phase(later_noise) == verl_log.VALIDATING
    assert startup_phase(V061_LOG + "\n(TaskRunner pid=1) 'Final validation metrics: {}'") == (
        verl_log.FINISHED
    )
    assert set(verl_log.PHASES) >= {startup_phase(V061_LOG), verl_log.NO_OUTPUT}


def test_step_metrics_is_immutable() -> None:
    metrics = StepMetrics(step=1, values={"a": 1.0})
    with pytest.raises(TypeError):
        metrics.values["a"] = 2.0  # type: ignore[index]
