"""A GRPO run that learns, through the product's own code path, on one GPU: the plan, the render,
data prep, the job provider in the real `python -m pulumi.dynamic` host, the runner, verl 0.6.1's
trainer, a kill and the resume, the merger and the product's evaluation of the export against its
base model; then peak memory per phase for a Qwen2.5-0.5B geometry beside the estimate.

On the GPU machine (docs/gpu-run.md has the two commands; wheels in .whl, PYTHONPATH=/tmp/site):

    GPU_RUN_COMMIT=<sha> python3 bench/gpu_learn.py --out $OUT/gpu-learn.json --logs $OUT

The task (bench/gpu_learn_task.py): sums of a two-digit and a one-digit number, a small Qwen2
built and warmed up on the machine to answer in the `#### <n>` format, mostly negated; the
reward is the product's `verl-gke:reward` path with docs/examples/exact_match.py. What is not the
product's is what bench/gpu_run.py replaces (vLLM by verl_scripts/gpu_standin, the Hub, GCS), and
the evaluation generates with the Hugging Face backend (VERL_GKE_EVAL_BACKEND=hf) for the same
reason. `--device cpu` goes as far as it can without a GPU (the rows, the tokenizer, a few
warm-up steps, the plan and the render, data prep) and is run by tests/test_gpu_learn.py.
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import gpu_learn_task as task  # noqa: E402
from bench import gpu_run  # noqa: E402
from bench import gpu_run_support as support  # noqa: E402
from payloads.data_prep.prep_common import MODEL_FILES_DIR  # noqa: E402

URN_STACK = "gpu-learn"
# 350 train rows // 32 a batch = 10 steps an epoch (verl's train dataloader drops the last
# partial batch; the rehearsal's record holds verl's own count); two epochs.
EPOCHS = 2
KILL_AFTER_STEP = 7
WARM_UP_STEPS = 1000
# The job's sizes on one GPU: 32 prompts x 8 samples a step, one actor update per step.
JOB = {
    **support.JOB,
    "experimentName": "grpo-learn-sums",
    "trainBatchSize": 32,
    "ppoMiniBatchSize": 32,
    "ppoMicroBatchSizePerGpu": 32,
    "rolloutLogProbMicroBatchSizePerGpu": 32,
    "refLogProbMicroBatchSizePerGpu": 32,
    "rolloutN": 8,
    "maxPromptLength": 64,
    "maxResponseLength": 16,
    "saveFreq": 5,
    "testFreq": 0,
    "totalEpochs": EPOCHS,
    "lr": 3e-4,
    "extraOverrides": [support.SDPA],
}
EVALUATION = {"prompts": task.TEST_PROBLEMS, "samples": 4}
MEMORY_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
MEMORY_JOB = {
    **support.JOB,
    "experimentName": "grpo-memory-0-5b",
    "trainBatchSize": 16,
    "ppoMiniBatchSize": 16,
    "ppoMicroBatchSizePerGpu": 8,
    "rolloutN": 4,
    "maxPromptLength": 64,
    "maxResponseLength": 192,
    "saveFreq": 2,
    "testFreq": 0,
    "extraOverrides": [support.SDPA, "trainer.total_training_steps=2"],
}


def say(text: str) -> None:
    print(f"[gpu_learn {time.strftime('%H:%M:%S')}] {text}", flush=True)


def stack_config(
    job: dict[str, Any], model_id: str, model_config: str | None, export: bool = True
) -> dict[str, str]:
    """The 1-node stack of bench/gpu_run_support.py with the task's own dataset and reward; with
    export false, neither the export nor its evaluation runs."""
    config = support.stack_config(job, own_dataset=True)
    config["verl-gke:model"] = model_id
    if model_config is None:
        config.pop("verl-gke:modelConfig", None)
    else:
        config["verl-gke:modelConfig"] = model_config
    config["verl-gke:dataset"] = task.DATASET
    config["verl-gke:datasetColumns"] = json.dumps(task.COLUMNS)
    config["verl-gke:evaluation"] = json.dumps(EVALUATION)
    config["verl-gke:exportModel"] = "true" if export else "false"
    return config


def plan(
    job: dict[str, Any], model_id: str, model_config: str | None, export: bool = True
) -> tuple[Any, Any]:
    """(StackSettings, TrainingJob) as training.assembly renders them for 1 node x 1 GPU."""
    from config.settings import load_settings
    from training.assembly import training_job

    with support.one_gpu_profile():
        config = stack_config(job, model_id, model_config, export)
        settings = load_settings(support.STACK, config, offline=True).settings
        return settings, training_job(settings)


def build_inputs(work: Path, device: str, warm_up_steps: int) -> tuple[Path, Path, dict[str, Any]]:
    """The rows, the tokenizer and the warmed-up model (the run's base model)."""
    rows, train, test = task.write_rows(work / "src-sums")
    model = work / "model-src"
    tokenizer = task.build_tokenizer(model)
    started = time.monotonic()
    warm = task.warm_up(model, tokenizer, warm_up_steps, device)
    warm["seconds"] = round(time.monotonic() - started, 1)
    warm.update(train_problems=len(train), test_problems=len(test), vocabulary=len(tokenizer))
    say(f"warm-up: {warm}")
    return rows, model, warm


def memory_model(work: Path, tokenizer_from: Path) -> Path:
    """Qwen2.5-0.5B's geometry (training/model_table.py) with random weights, and the task's
    tokenizer (its vocabulary is inside the model's)."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from training.model_table import MODEL_TABLE

    folder = work / "model-0-5b"
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_from)
    config = dict(MODEL_TABLE[MEMORY_MODEL].config)
    config.update(pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(task.SEED)
    Qwen2ForCausalLM(Qwen2Config(**config)).to(torch.bfloat16).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def metric_by_step(texts: list[str], *keys: str) -> dict[int, float]:
    """Each training step's first present key; a step seen in a later attempt (after the resume
    repeats steps past the last checkpoint) takes that attempt's value."""
    from jobs.verl_log import training_steps

    values: dict[int, float] = {}
    for text in texts:
        for step in training_steps(text):
            found = step.first_of(*keys)
            if found is not None:
                values[step.step] = round(found[1], 6)
    return dict(sorted(values.items()))


def learning_figures(texts: list[str], result: dict[str, Any]) -> None:
    rewards = metric_by_step(texts, "critic/score/mean", "critic/rewards/mean")
    grads = metric_by_step(texts, "actor/grad_norm")
    seconds = metric_by_step(texts, "timing_s/step")
    result["reward_mean_by_step"] = rewards
    result["grad_norm_by_step"] = grads
    result["step_seconds_by_step"] = seconds
    ordered = list(rewards.values())
    if len(ordered) >= 6:
        first, last = statistics.mean(ordered[:3]), statistics.mean(ordered[-3:])
        result["reward_first3_mean"] = round(first, 4)
        result["reward_last3_mean"] = round(last, 4)
        result["reward_rise"] = round(last - first, 4)
    later = [v for step, v in seconds.items() if step > 1]
    if later:
        result["step_seconds_median_after_first"] = round(statistics.median(later), 3)


def evaluation_report(job: Any) -> dict[str, Any] | None:
    """The product's evaluation report, where the runner wrote it (config/bucket_layout.py)."""
    from config.bucket_layout import eval_report_path

    path = Path(eval_report_path(job.spec.experiment_name))
    if not path.is_file():
        return None
    return json.loads(path.read_text())


MODEL_PATH_KEY = "actor_rollout_ref.model.path="


def rehearse(job: Any, model_id: str) -> dict[str, Any]:
    """The rehearsal as the product's Job runs it (manifests/rehearsal.py command: the wrapper,
    verl_scripts/rehearsal.py and the job's exact Hydra overrides), here in the machine's verl;
    the runner then takes the run's length from its record (VERL_GKE_REHEARSAL_RECORD)."""
    import subprocess

    from manifests.rehearsal import command
    from training.rehearsal_context import rehearsal_context

    context = rehearsal_context(job.spec, model_id)
    # The model's files but its weights, where data prep's inputs part wrote them
    # (<data root>/model-files/<model folder>, beside the model folder).
    model = Path(next(o for o in job.hydra_overrides if o.startswith(MODEL_PATH_KEY)).split("=")[1])
    files = str(model.parent / MODEL_FILES_DIR / model.name)
    argv = command(job.rehearsal_record, job.hydra_overrides, context, files)
    argv[1] = str(REPO / "payloads" / "rehearse.py")
    argv[argv.index("--script") + 1] = str(REPO / "verl_scripts" / "rehearsal.py")
    argv[0] = sys.executable
    started = time.monotonic()
    done = subprocess.run(
        argv, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}
    )
    seconds = round(time.monotonic() - started, 1)
    record_path = Path(job.rehearsal_record)
    record = json.loads(record_path.read_text()) if record_path.is_file() else None
    say(f"rehearsal exited {done.returncode} after {seconds}s: {(record or {}).get('ok')}")
    if record is None:
        return {"exit": done.returncode, "seconds": seconds, "stderr": done.stderr[-3000:]}
    keys = ("ok", "versions", "data", "length", "reward", "rollout", "problems", "notes")
    return {"exit": done.returncode, "seconds": seconds, **{k: record.get(k) for k in keys}}


def learning_run(
    work: Path,
    logs: Path,
    result: dict[str, Any],
    kill: bool = True,
    epochs: int = EPOCHS,
    warm_up_steps: int = WARM_UP_STEPS,
) -> Any:
    """The learning job through the provider: first step, kill, resubmission, resume, export,
    evaluation (without `kill`: one attempt to the end). Returns the planned job."""
    from ray.job_submission import JobSubmissionClient

    from tests.support.dynamic_host import start_dynamic_host

    rows, model_src, warm = build_inputs(work, "cuda", warm_up_steps)
    result["warm_up"] = warm
    settings, job = plan({**JOB, "totalEpochs": epochs}, task.MODEL_ID, task.MODEL_CONFIG)
    gpu_run.prepare_data(settings, job.spec, {task.DATASET: rows}, model_src)
    result["entrypoint"] = job.entrypoint
    result["rehearsal"] = rehearse(job, task.MODEL_ID)
    head = gpu_run.start_head(work, {"VERL_GKE_EVAL_BACKEND": "hf"})
    client = JobSubmissionClient(head.dashboard_url)
    texts: list[str] = []
    try:
        with support.gcs_stand_in(job.checkpoint_url, Path(job.spec.default_local_dir)) as gcs:
            host = start_dynamic_host(env={"STORAGE_EMULATOR_HOST": gcs})
            try:
                props = gpu_run.job_props(job, head.dashboard_url, URN_STACK)
                if kill:
                    created, state, seen = gpu_run.first_run(
                        host, client, props, result, logs, KILL_AFTER_STEP, URN_STACK
                    )
                    texts.append(gpu_run.driver_log(client, created.id))
                    _, text = gpu_run.resubmit(
                        host, client, created, state, props, result, URN_STACK
                    )
                    gpu_run.resume_facts(text, result)
                else:
                    seen, text = one_attempt(host, client, props, result)
                texts.append(text)
                (logs / "driver-2.log").write_text(text)
                result["steps"] = sorted(set(seen) | set(gpu_run.steps_in(text)))
            finally:
                (logs / "host.log").write_text("".join(host.output))
                host.stop()
        learning_figures(texts, result)
        result["eval"] = evaluation_report(job)
        export = Path(f"/data/models/{job.spec.experiment_name}")
        gpu_run.stage("export", lambda: gpu_run.check_export(export, result), result)
    finally:
        head.stop()
    return job


def one_attempt(
    host: Any, client: Any, props: dict[str, Any], result: dict[str, Any]
) -> tuple[list[int], str]:
    """Create (wait_for first_step), then the job to its end; the final Read."""
    from tests.support.dynamic_host import from_wire

    created, seconds = gpu_run.create(host, props, URN_STACK)
    step = (from_wire(created.properties).get("first_step") or {}).get("step")
    result["first_step"] = {"step": step, "seconds_from_submit": round(seconds, 1)}
    gpu_run.wait_until(lambda: client.get_job_status(created.id).is_terminal(), 600, every_s=2)
    final = gpu_run.refresh(host, created.id, created.properties, URN_STACK)
    result.update(
        final_status=final["status"],
        checkpoints=final["checkpoints"],
        latest_checkpoint=final["latest_checkpoint"],
    )
    return [], gpu_run.driver_log(client, created.id)


def memory_run(work: Path, logs: Path, result: dict[str, Any]) -> None:
    """Qwen2.5-0.5B's geometry for MEMORY_STEPS steps: per phase, the allocator's peak and the
    process's peak beside training/memory_fit's estimate."""
    from ray.job_submission import JobSubmissionClient

    model = memory_model(work, work / "model-src")
    settings, job = plan(MEMORY_JOB, MEMORY_MODEL, None, export=False)
    gpu_run.prepare_data(settings, job.spec, {task.DATASET: work / "src-sums"}, model)
    head = gpu_run.start_head(work, {"VERL_GKE_GPU_RUN_MEMORY": "1"})
    client = JobSubmissionClient(head.dashboard_url)
    try:
        env, _ = support.machine_env(job.runtime_env["env_vars"])
        sid = client.submit_job(
            entrypoint=job.entrypoint,
            runtime_env={**job.runtime_env, "env_vars": env},
            submission_id="gpu-learn-memory",
        )
        gpu_run.wait_until(lambda: client.get_job_status(sid).is_terminal(), 400, every_s=2)
        text = gpu_run.driver_log(client, sid)
        (logs / "driver-memory.log").write_text(text)
        result["memory_job_status"] = str(client.get_job_status(sid))
    finally:
        head.stop()
    gpu_run.memory_figures([text], job, result)
    result["memory_model"] = {"geometry": MEMORY_MODEL, "weights": "random", "job": MEMORY_JOB}


def cpu_path(work: Path, verl_061: Path, verl_090: Path) -> dict[str, Any]:
    """What runs without a GPU: both jobs planned, rendered and checked by the provider in the
    real dynamic host; their overrides composed and validated by verl 0.6.1's config code; in
    verl 0.9.0's virtualenv (datasets, pyarrow, transformers) the task's rows, tokenizer, a few
    warm-up steps on CPU and the data-prep Job's own command on them."""
    from bench.gpu_run_cpu import COMPOSE_CHECK, DASHBOARD, last_json, start, verl_overrides
    from jobs.ray_job import RayJobProvider
    from tests.support.dynamic_host import engine_inputs, grpo_job_urn, start_dynamic_host

    started = time.monotonic()
    work.mkdir(parents=True, exist_ok=True)
    jobs = {
        "learn": plan(JOB, task.MODEL_ID, task.MODEL_CONFIG),
        "memory": plan(MEMORY_JOB, MEMORY_MODEL, None, export=False),
    }
    report: dict[str, Any] = {"device": "cpu", "plan": {}}
    host = start_dynamic_host()
    try:
        for name, (_, job) in jobs.items():
            props = gpu_run.job_props(job, DASHBOARD, f"{URN_STACK}-{name}")
            checked = host.check(
                grpo_job_urn(URN_STACK), None, engine_inputs(props, RayJobProvider())
            )
            report["plan"][name] = {
                "entrypoint": job.entrypoint,
                "overrides": verl_overrides(job.entrypoint),
                "evaluation": job.evaluation is not None and job.evaluation.prompts,
                "check_failures": [f"{f.property}: {f.reason}" for f in checked.failures],
            }
    finally:
        host.stop()
    settings, job = jobs["learn"]
    argv = gpu_run.data_prep_argv(settings, job.spec, work / "data")
    running = {
        "data": start(
            verl_090,
            [str(REPO / "bench" / "gpu_learn_task.py")],
            {"work": str(work), "argv": argv, "warm_up_steps": 3},
            {},
        ),
        "compose": start(
            verl_061,
            [str(COMPOSE_CHECK)],
            {"cases": {n: r["overrides"] for n, r in report["plan"].items()}},
            {},
        ),
    }
    for name, process in running.items():
        report[name] = last_json(process, name)
    report["seconds"] = round(time.monotonic() - started, 1)
    return report


def evidence(result: dict[str, Any]) -> dict[str, Any]:
    """The issue's fields first (figures seen in this run only), then the details."""
    result = gpu_run.plain(result)
    keys = (
        "device",
        "commit",
        "verl",
        "ray",
        "rollout",
        "rehearsal",
        "reward_mean_by_step",
        "reward_first3_mean",
        "reward_last3_mean",
        "reward_rise",
        "grad_norm_by_step",
        "step_seconds_by_step",
        "step_seconds_median_after_first",
        "first_step",
        "stopped_at_step",
        "resumed_from_step",
        "final_step",
        "checkpoints",
        "eval",
        "memory",
    )
    head = {k: result.get(k) for k in keys}
    return {**head, "details": {k: v for k, v in result.items() if k not in head}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the result JSON")
    parser.add_argument("--logs", type=Path, help="folder for the driver logs (GPU path)")
    parser.add_argument("--work", type=Path)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument(
        "--only", choices=("learn", "memory"), help="one of the two runs (default: both)"
    )
    parser.add_argument("--no-kill", action="store_true", help="one attempt, no kill and resume")
    parser.add_argument("--epochs", type=int, default=EPOCHS, help="10 steps an epoch")
    parser.add_argument("--warm-up-steps", type=int, default=WARM_UP_STEPS)
    venvs = REPO / ".venv-verl"
    parser.add_argument("--verl-061", type=Path, default=venvs / "0.6.1" / "bin" / "python")
    parser.add_argument("--verl-090", type=Path, default=venvs / "0.9.0" / "bin" / "python")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="gpu-learn-"))
    if args.device == "cpu":
        report = cpu_path(work, args.verl_061, args.verl_090)
        args.out.write_text(json.dumps(report, indent=1, default=str) + "\n")
        return
    result: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "epochs": args.epochs}
    started = time.monotonic()
    try:
        logs = args.logs or work / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        gpu_run.facts(result)
        result["rollout"] = gpu_run.STANDIN_ROLLOUT
        # A time limit's SIGTERM still writes what was seen (the finally below).
        signal.signal(signal.SIGTERM, lambda *_: sys.exit("stopped by SIGTERM"))
        if args.only != "memory":
            learning_run(work, logs, result, not args.no_kill, args.epochs, args.warm_up_steps)
        if args.only != "learn":
            if args.only == "memory":  # the rows and the tokenizer the 0.5B model takes
                task.write_rows(work / "src-sums")
                task.build_tokenizer(work / "model-src")
            gpu_run.stage("memory", lambda: memory_run(work, logs, result), result)
    except BaseException as error:
        result["error"] = f"{type(error).__name__}: {error}"[:3000]
        raise
    finally:
        result["wall_s"] = round(time.monotonic() - started, 1)
        args.out.write_text(json.dumps(evidence(result), indent=1, default=str) + "\n")
        say(f"result: {json.dumps(result, default=str)[:4000]}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
