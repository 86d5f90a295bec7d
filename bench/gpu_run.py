"""The product's GRPO job on one GPU: verl 0.6.1's real trainer, driven through the real dynamic
provider host, first step, checkpoints, a kill mid-run, the resubmission `pulumi up` makes, the
resume, the export, and peak memory per phase beside training/memory_fit's estimate.

On the GPU machine (docs/gpu-run.md has the whole command; the wheels of
bench/build_gpu_wheels.py in .whl, installed at /tmp/site, PYTHONPATH=/tmp/site):

    python3 bench/gpu_run.py --out $OUT/result.json --logs $OUT

Without a GPU, `--device cpu` runs what needs none (bench/gpu_run_cpu.py).

What is not the product's: vLLM (the rollout is verl_scripts/gpu_standin, registered under
("vllm", "sync") in every Ray worker), the Hub (rows and model are written here), GCS (a stand-in
serves the checkpoint folder), and the sizes one GPU forces (bench/gpu_run_support.py JOB).
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import gpu_run_support as support  # noqa: E402

STANDIN = REPO / "verl_scripts" / "gpu_standin"
TOTAL_STEPS = 5
KILL_AFTER_STEP = 2
URN_STACK = "gpu-run"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
STANDIN_ROLLOUT = (
    "verl_scripts/gpu_standin HfStandInRollout: verl's HFRollout generating with the Hugging "
    "Face model (bf16, sdpa), registered as ('vllm', 'sync'); weights from the actor before "
    "every generation"
)


def say(text: str) -> None:
    print(f"[gpu_run {time.strftime('%H:%M:%S')}] {text}", flush=True)


def job_settings(own_dataset: bool = False) -> dict[str, Any]:
    """verl-gke:job of the bench's two submissions: the GSM8K job (TOTAL_STEPS steps, killed and
    resumed) and the own dataset's (one step)."""
    if own_dataset:
        return {
            **support.JOB,
            "experimentName": "grpo-own-dataset",
            "extraOverrides": [support.SDPA, "trainer.total_training_steps=1"],
        }
    return {
        **support.JOB,
        "extraOverrides": [support.SDPA, f"trainer.total_training_steps={TOTAL_STEPS}"],
    }


def data_prep_argv(settings: Any, spec: Any, data_root: Path | None = None) -> list[str]:
    """The data-prep Jobs' own command (manifests/data_prep.py) less `python3 <script>`, both
    parts in one run (`--part all`: the inputs Job's steps, then the weights Job's): the reward
    file is the repository's (the ConfigMap's copy of verl-gke:reward), and with data_root the
    volume's paths (DATA_MOUNT) lie under that folder instead."""
    from config.bucket_layout import DATA_MOUNT
    from manifests.data_prep import command
    from training.grpo_preflight import dataset_limits

    argv = command(settings, dataset_limits(spec), "all")[2:]
    if "--reward-file" in argv:
        argv[argv.index("--reward-file") + 1] = str(REPO / support.REWARD.partition(":")[0])
    if data_root is None:
        return argv
    return [
        str(data_root) + arg[len(DATA_MOUNT) :]
        if arg == DATA_MOUNT or arg.startswith(DATA_MOUNT + "/")
        else arg
        for arg in argv
    ]


def run_data_prep(argv: list[str], sources: dict[str, Path], model_source: Path) -> None:
    """payloads/data_prep/prepare_data.py's main on argv, with the Hub read (prep_dataset's
    load_hub_dataset, which its dataset step calls) replaced by the folders written here (stdlib
    imports only: also runs in a verl virtualenv, see cpu_data_stage)."""
    from payloads.data_prep import prep_dataset, prepare_data

    hub = prep_dataset.load_hub_dataset

    def local_hub(dataset: str, columns: dict[str, str], token: Any, source: Any = None) -> Any:
        # A folder of JSON lines has no Hub configurations (openai/gsm8k's "main").
        local = {k: v for k, v in columns.items() if k != "subset"}
        return hub(dataset, local, token, str(sources[dataset]))

    prep_dataset.load_hub_dataset = local_hub
    try:
        code = prepare_data.main([*argv, "--model-source", str(model_source)])
    finally:
        prep_dataset.load_hub_dataset = hub
    if code != 0:
        raise RuntimeError(f"prepare_data exited {code}")


def prepare_data(settings: Any, spec: Any, sources: dict[str, Path], model_source: Path) -> None:
    """The data-prep Job's own command, run by payloads/data_prep/prepare_data.py's main on local
    rows."""
    run_data_prep(data_prep_argv(settings, spec), sources, model_source)


def build_inputs(work: Path) -> tuple[dict[str, Path], Path, list[str]]:
    """The rows (GSM8K format, and an own dataset) and the tiny model with its tokenizer."""
    from payloads.data_prep.prep_gsm8k import GSM8K_INSTRUCTION

    gsm = support.write_jsonl(
        work / "src-gsm8k", {"train": support.gsm8k_rows(64), "test": support.gsm8k_rows(16, 64)}
    )
    own_train, own_test = support.own_rows(48, 6), support.own_rows(12, 6)
    own = support.write_jsonl(work / "src-own", {"train": own_train, "test": own_test})
    model = work / "model-src"
    texts = [
        r["question"] + " " + GSM8K_INSTRUCTION + " " + r["answer"] for r in support.gsm8k_rows(80)
    ] + [r["problem"] for r in own_train]
    support.build_tokenizer(texts, model)
    say(f"tiny Qwen2: {support.build_model(model):,} parameters in {model}")
    return {"openai/gsm8k": gsm, support.OWN_DATASET: own}, model, [r["problem"] for r in own_train]


def prompt_lengths(data_root: Path) -> dict[str, Any]:
    """What the data prep's lengths step wrote: per split, rows and prompts longer than the job's
    max_prompt_length, counted with the model's chat template as verl's RLHFDataset filter counts
    them (payloads/data_prep/prep_checks.py check_prompt_lengths)."""
    from payloads.data_prep.prep_checks import LENGTHS_SUMMARY
    from payloads.data_prep.prep_common import PREP_DIR

    return json.loads((data_root / PREP_DIR / LENGTHS_SUMMARY).read_text())


def start_head(work: Path, extra_env: dict[str, str] | None = None) -> Any:
    """A real Ray 2.47 head with one GPU and its Jobs API; every process it starts imports
    verl_scripts/gpu_standin/sitecustomize.py (the stand-in rollout, the memory probe)."""
    from tests.support.ray_head import start_ray_head

    path = os.pathsep.join([str(STANDIN), os.environ.get("PYTHONPATH", "")])
    env = {
        "PYTHONPATH": path,
        "VERL_GKE_STANDIN_ROLLOUT": "1",
        "VERL_GKE_GPU_RUN_MEMORY": "1",
        # Every worker line reaches the driver log as printed (no "[repeated Nx]" folding).
        "RAY_DEDUP_LOGS": "0",
        **(extra_env or {}),
    }
    return start_ray_head(
        Path(tempfile.mkdtemp(prefix="rg", dir="/tmp")),
        num_cpus=8,
        num_gpus=1,
        extra_env=env,
        ready_timeout_s=300,
    )


def job_props(job: Any, dashboard_url: str, prefix: str) -> dict[str, Any]:
    """RayJobArgs as components/grpo_training.py passes them (no GKE cluster here); the env_vars
    less what the machine lacks."""
    from jobs.dashboard_access import url_dashboard
    from jobs.ray_job import RayJobArgs

    env, dropped = support.machine_env(job.runtime_env["env_vars"])
    for line in dropped:
        say(f"runtime env: dropped {line}")
    return RayJobArgs(
        entrypoint=job.entrypoint,
        runtime_env={**job.runtime_env, "env_vars": env},
        dashboard=url_dashboard(dashboard_url),
        checkpoint_root=job.checkpoint_url,
        submission_id_prefix=prefix,
        wait_for="first_step",
    ).to_props()


def driver_log(client: Any, sid: str) -> str:
    try:
        return client.get_job_logs(sid)
    except Exception as error:
        return f"<log unreadable: {error}>"


def steps_in(text: str) -> list[int]:
    from jobs.verl_log import training_steps

    return [m.step for m in training_steps(text)]


def kill_trainer() -> int:
    """SIGKILL the `python3 -m verl.trainer.main_ppo` process, the Ray driver (found by its
    command line; run_grpo.py, its parent, also names the module, after `--`)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[1:3] == [b"-m", b"verl.trainer.main_ppo"]:
            os.kill(int(entry.name), signal.SIGKILL)
            return int(entry.name)
    raise RuntimeError("no verl.trainer.main_ppo process to kill")


def wait_until(predicate: Any, timeout_s: float, every_s: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every_s)
    return False


def create(host: Any, props: dict[str, Any], urn_stack: str = URN_STACK) -> tuple[Any, float]:
    from jobs.ray_job import RayJobProvider
    from tests.support.dynamic_host import engine_inputs, grpo_job_urn

    urn = grpo_job_urn(urn_stack)
    checked = host.check(urn, None, engine_inputs(props, RayJobProvider()))
    started = time.monotonic()
    created = host.create(urn, checked.inputs)
    return created, time.monotonic() - started


def refresh(host: Any, sid: str, outputs: Any, urn_stack: str = URN_STACK) -> dict[str, Any]:
    from tests.support.dynamic_host import from_wire, grpo_job_urn

    return from_wire(host.read(grpo_job_urn(urn_stack), sid, outputs).properties)


def first_run(
    host: Any,
    client: Any,
    props: dict[str, Any],
    result: dict[str, Any],
    logs: Path,
    kill_after: int = KILL_AFTER_STEP,
    urn_stack: str = URN_STACK,
) -> Any:
    """Create (wait_for first_step), let verl save, kill the trainer once step `kill_after` is
    logged, refresh."""
    from tests.support.dynamic_host import from_wire

    created, seconds = create(host, props, urn_stack)
    outs = from_wire(created.properties)
    step = (outs.get("first_step") or {}).get("step")
    result["first_step"] = {
        "step": int(step) if step is not None else None,
        "seconds_from_submit": round(seconds, 1),
        "seen_by": "jobs.verl_log (RayJobProvider.create, wait_for first_step)",
    }
    say(f"create returned after {seconds:.1f}s: {created.id} first_step={outs.get('first_step')}")
    wait_until(lambda: max(steps_in(driver_log(client, created.id)) or [0]) >= kill_after, 300)
    pid = kill_trainer()
    seen = steps_in(driver_log(client, created.id))
    result["stopped_at_step"] = max(seen or [0])
    say(f"killed main_ppo pid {pid} after step {result['stopped_at_step']} (steps seen {seen})")
    wait_until(lambda: client.get_job_status(created.id).is_terminal(), 120)
    (logs / "driver-1.log").write_text(driver_log(client, created.id))
    state = refresh(host, created.id, created.properties, urn_stack)
    say(
        f"refresh: status={state.get('status')} checkpoints={state.get('checkpoints')} "
        f"latest={state.get('latest_step')}"
    )
    result["refresh_after_kill"] = {
        k: state.get(k) for k in ("status", "checkpoints", "latest_step", "message")
    }
    return created, state, seen


def resubmit(
    host: Any,
    client: Any,
    created: Any,
    state: dict[str, Any],
    props: dict[str, Any],
    result: dict[str, Any],
    urn_stack: str = URN_STACK,
) -> tuple[str, str]:
    """What the next `pulumi up` does with a FAILED job: diff says replace, delete, create."""
    from jobs.ray_job import RayJobProvider
    from tests.support.dynamic_host import engine_inputs, from_wire, grpo_job_urn, wire

    urn = grpo_job_urn(urn_stack)
    news = host.check(urn, None, engine_inputs(props, RayJobProvider())).inputs
    diff = host.diff(urn, created.id, wire(state), news)
    say(
        f"diff: changes={diff.changes} replaces={list(diff.replaces)} "
        f"delete_before_replace={diff.deleteBeforeReplace}"
    )
    host.delete(urn, created.id, wire(state))
    second, seconds = create(host, props, urn_stack)
    say(f"resubmitted as {second.id}; create returned after {seconds:.1f}s")
    wait_until(lambda: client.get_job_status(second.id).is_terminal(), 420, every_s=2)
    final = refresh(host, second.id, second.properties, urn_stack)
    text = driver_log(client, second.id)
    result["final_status"] = final["status"]
    result["checkpoints"] = final["checkpoints"]
    result["latest_checkpoint"] = final["latest_checkpoint"]
    result["resubmission"] = {
        "submission_id": second.id,
        "diff_replaces": list(diff.replaces),
        "first_step": from_wire(second.properties).get("first_step"),
    }
    return second.id, text


def resume_facts(text: str, result: dict[str, Any]) -> None:
    lines = [
        ln
        for ln in text.splitlines()
        if "Resuming from" in ln or "Load from checkpoint folder" in ln or "Found checkpoint" in ln
    ]
    result["resume_lines"] = [ln.strip()[:300] for ln in lines[:4]]
    resumed = [ln for ln in lines if "Resuming from" in ln]
    step = None
    if resumed and "global_step_" in resumed[0]:
        step = int(resumed[0].rsplit("global_step_", 1)[1].split()[0].strip("/'\""))
    result["resumed_from_step"] = step
    steps = steps_in(text)
    result["steps_after_resume"] = steps
    result["final_step"] = max(steps) if steps else None
    from jobs.verl_log import training_steps

    verl_peaks = [m.values.get("perf/max_memory_allocated_gb") for m in training_steps(text)]
    result["verl_perf_max_memory_allocated_gb"] = [v for v in verl_peaks if v is not None]


def check_export(path: Path, result: dict[str, Any]) -> None:
    """Load the merged folder with transformers and generate a few tokens on the GPU."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    entry: dict[str, Any] = {"path": str(path), "files": sorted(p.name for p in path.iterdir())}
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.bfloat16).cuda()
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 3 + 4?"}],
        add_generation_prompt=True,
        return_tensors="pt",
    )
    out = model.generate(prompt.cuda(), max_new_tokens=8, do_sample=False)
    entry["loaded"] = type(model).__name__
    entry["generated"] = tokenizer.decode(out[0, prompt.shape[1] :])
    entry["generated_tokens"] = int(out.shape[1] - prompt.shape[1])
    result["export"] = entry


def memory_peaks(texts: list[str]) -> dict[str, dict[str, int]]:
    """Per phase, the max over calls of each figure the stand-in prints
    (verl_scripts/gpu_standin/standin_memory.py): the allocator's peak, its reserved peak and the
    process's peak (reserved peak + what lies outside the allocator, from cudaMemGetInfo)."""
    from verl_scripts.gpu_standin.standin_memory import MEMORY_TAG

    pattern = re.compile(
        re.escape(MEMORY_TAG) + r" phase=(\w+) peak_bytes=(\d+) reserved_peak_bytes=(\d+)"
        r" device_used_bytes=\d+ process_peak_bytes=(\d+)"
    )
    peaks: dict[str, dict[str, int]] = {}
    for text in texts:
        for phase, *values in pattern.findall(text):
            seen = peaks.setdefault(phase, {"allocator": 0, "reserved": 0, "process": 0})
            for key, value in zip(("allocator", "reserved", "process"), values, strict=True):
                seen[key] = max(seen[key], int(value))
    return peaks


def memory_figures(texts: list[str], job: Any, result: dict[str, Any]) -> None:
    """The stand-in's per-phase peaks beside memory_fit's estimate: the allocator's peak beside
    the estimate less its CUDA-context item, the process's peak beside the whole estimate."""
    gib = 1024**3
    result["memory"] = {
        phase: {
            "measured_gib": round(peak["allocator"] / gib, 4),
            "measured_reserved_gib": round(peak["reserved"] / gib, 4),
            "measured_process_gib": round(peak["process"] / gib, 4),
            "estimated_gib": round(job.memory.phase(phase).total_gib, 4),
            # What torch's allocator can see: the estimate less its CUDA context item.
            "estimated_allocator_gib": round(
                sum(
                    i.gib
                    for i in job.memory.phase(phase).items
                    if not i.label.startswith("overhead: CUDA context")
                ),
                4,
            ),
            "estimate_items_gib": {i.label: round(i.gib, 4) for i in job.memory.phase(phase).items},
        }
        for phase, peak in sorted(memory_peaks(texts).items())
    }
    result["memory_how"] = (
        "torch.cuda.max_memory_allocated after reset_peak_memory_stats around verl's "
        "DataParallelPPOActor.compute_log_prob (actor and reference), update_policy and "
        "_optimizer_step in the Ray worker (verl_scripts/gpu_standin), max over all calls"
    )


def own_dataset_run(
    host: Any, client: Any, head_url: str, result: dict[str, Any], logs: Path
) -> None:
    """The own dataset's job as the product renders it (one step), with its over-long prompts."""
    import grpc

    _, job = support.plan(job_settings(own_dataset=True), own_dataset=True)
    props = job_props(job, head_url, f"{URN_STACK}-own")
    entry = result["own_dataset"]
    entry["job_overrides_filter"] = "data.filter_overlong_prompts=True" in job.entrypoint
    try:
        created, seconds = create(host, props)
        wait_until(lambda: client.get_job_status(created.id).is_terminal(), 240, every_s=2)
        text = driver_log(client, created.id)
        (logs / "driver-own.log").write_text(text)
        entry["final_status"] = str(client.get_job_status(created.id))
        entry["outcome"] = f"first step after {seconds:.1f}s ({created.id})"
    except grpc.RpcError as error:
        entry["outcome"] = f"create failed: {(error.details() or '')[:1500]}"
        text = ""
    filtered = [
        ANSI.sub("", ln).strip()[:300]
        for ln in text.splitlines()
        if "dataset len" in ln or "Filtering prompts" in ln
    ]
    entry["verl_filter_lines"] = filtered[:4]
    say(f"own dataset: {entry}")


def stage(name: str, action: Any, result: dict[str, Any]) -> None:
    """Run one independent part; a failure is recorded and the next part still runs."""
    try:
        action()
    except Exception as error:
        result.setdefault("errors", {})[name] = f"{type(error).__name__}: {error}"[:2000]
        say(f"{name} failed: {error}")


def facts(result: dict[str, Any]) -> None:
    import ray
    import verl

    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
    )
    # The device machine gets the working tree without .git: the caller names the commit.
    commit = os.environ.get("GPU_RUN_COMMIT")
    result.update(
        device=smi.stdout.strip() or smi.stderr.strip(),
        commit=commit or None,
        verl=verl.__version__,
        ray=ray.__version__,
    )


def run(work: Path, logs: Path, result: dict[str, Any]) -> None:
    """Long because it is the run's one sequence: data, plan, head, host, the two submissions, the
    export check, the memory figures and the own dataset; each figure lands in `result`."""
    from ray.job_submission import JobSubmissionClient

    from config.bucket_layout import DATA_MOUNT
    from tests.support.dynamic_host import start_dynamic_host

    facts(result)
    sources, model_src, _ = build_inputs(work)
    settings, job = support.plan(job_settings())
    own_settings, own_job = support.plan(job_settings(own_dataset=True), own_dataset=True)
    prepare_data(settings, job.spec, sources, model_src)
    prepare_data(own_settings, own_job.spec, sources, model_src)
    lengths = prompt_lengths(Path(DATA_MOUNT))["train"]
    result["own_dataset"] = {
        "rows": lengths["rows"],
        "over_long": lengths["over"],
        "max_prompt_length": own_job.spec.max_prompt_length,
    }
    result["rollout"] = STANDIN_ROLLOUT
    result["entrypoint"] = job.entrypoint
    head = start_head(work)
    client = JobSubmissionClient(head.dashboard_url)
    texts: list[str] = []
    try:
        with support.gcs_stand_in(job.checkpoint_url, Path(job.spec.default_local_dir)) as gcs:
            host = start_dynamic_host(env={"STORAGE_EMULATOR_HOST": gcs})
            try:
                props = job_props(job, head.dashboard_url, URN_STACK)
                created, state, seen = first_run(host, client, props, result, logs)
                texts.append(driver_log(client, created.id))
                _, text = resubmit(host, client, created, state, props, result)
                texts.append(text)
                (logs / "driver-2.log").write_text(text)
                resume_facts(text, result)
                result["steps"] = sorted(set(seen) | set(steps_in(text)))
                result["export_url"] = job.model_export_url
                export = Path(f"/data/models/{job.spec.experiment_name}")
                stage("memory", lambda: memory_figures(texts, job, result), result)
                stage("export", lambda: check_export(export, result), result)
                stage(
                    "own_dataset",
                    lambda: own_dataset_run(host, client, head.dashboard_url, result, logs),
                    result,
                )
            finally:
                (logs / "host.log").write_text("".join(host.output))
                host.stop()
    finally:
        head.stop()


def plain(value: Any) -> Any:
    """value with Ray's colour codes removed from every string in it."""
    if isinstance(value, str):
        return ANSI.sub("", value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def own_outcome(own: dict[str, Any]) -> str | None:
    """What happened to the own dataset's job, from the lines and status seen."""
    kept = [ln.rsplit(":", 1)[1].strip() for ln in own.get("verl_filter_lines") or []
            if "filter dataset len" in ln]  # fmt: skip
    if not own.get("outcome"):
        return None
    parts = [own["outcome"]]
    if kept:
        parts.insert(0, f"verl's filter kept {kept[0]} of {own.get('rows')} rows")
    if own.get("final_status"):
        parts.append(f"job {own['final_status']}")
    return "; ".join(parts)


def evidence(result: dict[str, Any]) -> dict[str, Any]:
    """The issue's fields first (figures seen in this run only), then the details."""
    result = plain(result)
    listed = [int(url.rsplit("global_step_", 1)[1]) for url in result.get("checkpoints") or []]
    keys = ("device", "commit", "verl", "ray", "rollout", "steps", "first_step")
    head: dict[str, Any] = {k: result.get(k) for k in keys}
    head["checkpoints"] = listed
    for key in ("stopped_at_step", "resumed_from_step", "final_step"):
        head[key] = result.get(key)
    export = result.get("export") or {}
    head["export"] = {k: export.get(k) for k in ("path", "loaded", "generated")}
    shown = (
        "measured_gib",
        "estimated_allocator_gib",
        "measured_process_gib",
        "estimated_gib",
    )
    head["memory"] = {
        phase: {k: v[k] for k in shown} for phase, v in (result.get("memory") or {}).items()
    }
    own = result.get("own_dataset") or {}
    head["own_dataset"] = {k: own.get(k) for k in ("rows", "over_long")}
    head["own_dataset"]["outcome"] = own_outcome(own)
    return {**head, "details": result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the result JSON")
    parser.add_argument("--logs", type=Path, help="folder for the driver logs (cuda)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/gpu-run"))
    parser.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="cpu: plan, render, data prep, verl's compose and the stand-in's contract only "
        "(bench/gpu_run_cpu.py)",
    )
    venvs = REPO / ".venv-verl"
    parser.add_argument("--verl-061", type=Path, default=venvs / "0.6.1" / "bin" / "python")
    parser.add_argument("--verl-090", type=Path, default=venvs / "0.9.0" / "bin" / "python")
    args = parser.parse_args()
    if args.device == "cpu":
        from bench.gpu_run_cpu import run_cpu  # deferred: gpu_run_cpu imports this module

        report = run_cpu(args.work, args.verl_061, args.verl_090)
        args.out.write_text(json.dumps(report, indent=1, default=str) + "\n")
        return
    if args.logs is None:
        parser.error("--logs is required with --device cuda")
    args.logs.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "steps_total": TOTAL_STEPS}
    started = time.monotonic()
    try:
        run(args.work, args.logs, result)
    except BaseException as error:
        result["error"] = f"{type(error).__name__}: {error}"[:3000]
        raise
    finally:
        result["wall_s"] = round(time.monotonic() - started, 1)
        args.out.write_text(json.dumps(evidence(result), indent=1, default=str) + "\n")
        say(f"result: {json.dumps(result, default=str)[:4000]}")


if __name__ == "__main__":
    main()
