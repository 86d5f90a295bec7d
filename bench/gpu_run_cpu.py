"""bench/gpu_run.py's CPU path (`--device cpu`): everything of the GPU run that needs no GPU.

    .venv/bin/python bench/gpu_run.py --device cpu --out cpu.json [--work DIR]

1. Plan and render: the same two jobs (the GSM8K job and the own dataset's) planned by
   training.assembly for 1 node x 1 GPU, their RayJobArgs as the bench submits them, and the
   provider's Check through the real `python -m pulumi.dynamic` host.
2. Data prep on local rows: the same rows, tiny Qwen2 and tokenizer as on the GPU machine, and
   the data-prep Job's own command run by payloads/data_prep/prepare_data.py's main (the bench's
   run_data_prep), with the volume under the work folder. It needs datasets, pyarrow and
   transformers, which the program's virtualenv lacks: it runs in verl 0.9.0's
   (`python bench/gpu_run_cpu.py` with its request on stdin).
3. The job's Hydra overrides composed and validated by verl 0.6.1's own config code
   (verl_scripts/verl_compose_check.py), rollout.name vllm included.
4. The stand-in rollout against verl 0.6.1's rollout contract
   (verl_scripts/standin_contract_check.py), switched on and off.

Stages 2-4 run at once, each in its own verl interpreter. Writes one JSON report; asserts
nothing (tests/test_gpu_run_cpu.py does).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import gpu_run_support as support  # noqa: E402

STANDIN = REPO / "verl_scripts" / "gpu_standin"
COMPOSE_CHECK = REPO / "verl_scripts" / "verl_compose_check.py"
CONTRACT_CHECK = REPO / "verl_scripts" / "standin_contract_check.py"
# Placeholder address: Check validates the inputs and never calls the dashboard.
DASHBOARD = "http://127.0.0.1:8265"


def verl_overrides(entrypoint: str) -> list[str]:
    """The Hydra overrides of the rendered entrypoint: after `-- python3 -m verl.trainer.main_ppo`
    (payloads/export/run_grpo.py runs what follows `--`)."""
    argv = shlex.split(entrypoint)
    return argv[argv.index("--") + 4 :]


def plan_and_check(work: Path) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """Both jobs planned and rendered; the provider's Check in the real dynamic host. Returns
    (the report's plan part, the data-prep argv of each job)."""
    from bench import gpu_run
    from jobs.ray_job import RayJobProvider
    from tests.support.dynamic_host import engine_inputs, grpo_job_urn, start_dynamic_host

    jobs = {
        "gsm8k": support.plan(gpu_run.job_settings()),
        "own": support.plan(gpu_run.job_settings(own_dataset=True), own_dataset=True),
    }
    report: dict[str, Any] = {}
    argv: dict[str, list[str]] = {}
    host = start_dynamic_host()
    try:
        for name, (settings, job) in jobs.items():
            props = gpu_run.job_props(job, DASHBOARD, f"{gpu_run.URN_STACK}-{name}")
            checked = host.check(
                grpo_job_urn(gpu_run.URN_STACK), None, engine_inputs(props, RayJobProvider())
            )
            report[name] = {
                "entrypoint": job.entrypoint,
                "overrides": verl_overrides(job.entrypoint),
                "max_prompt_length": job.spec.max_prompt_length,
                "check_failures": [f"{f.property}: {f.reason}" for f in checked.failures],
            }
            argv[name] = gpu_run.data_prep_argv(settings, job.spec, work / "data")
    finally:
        host.stop()
    return report, argv


def start(python: Path, args: list[str], request: Any, env: dict[str, str]) -> subprocess.Popen:
    """`python args...` from the repository root with `request` (JSON) on stdin, as a file so
    that the process does not wait for its pipe to be fed."""
    import tempfile

    with tempfile.TemporaryFile("w+") as stdin:
        json.dump(request, stdin)
        stdin.seek(0)
        return subprocess.Popen(
            [str(python), *args],
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env={**os.environ, **env},
        )


def last_json(process: subprocess.Popen, name: str) -> Any:
    """The JSON of the process's last stdout line; its stderr tail when it failed."""
    out, err = process.communicate()
    answer = None
    for text in (out, *out.strip().splitlines()[-1:]):  # the whole output, else its last line
        try:
            answer = json.loads(text)
            break
        except json.JSONDecodeError:
            continue
    if process.returncode not in (0, 1) or answer is None:
        return {"failed": f"{name} exited {process.returncode}: {err[-3000:]}"}
    return answer


def run_cpu(work: Path, verl_061: Path, verl_090: Path) -> dict[str, Any]:
    """The four stages; the report holds what each returned."""
    started = time.monotonic()
    work.mkdir(parents=True, exist_ok=True)
    plan, argv = plan_and_check(work)
    seconds = {"plan_and_check": round(time.monotonic() - started, 1)}
    cases = {f"gpu-run-{name}": job["overrides"] for name, job in plan.items()}
    switched_on = {"VERL_GKE_STANDIN_ROLLOUT": "1", "VERL_GKE_GPU_RUN_MEMORY": "1"}
    running = {
        "data": start(
            verl_090,
            [str(Path(__file__))],
            {"work": str(work), "argv": argv},
            {},
        ),
        "compose": start(verl_061, [str(COMPOSE_CHECK)], {"cases": cases}, {}),
        "standin_on": start(
            verl_061, [str(CONTRACT_CHECK)], {}, {"PYTHONPATH": str(STANDIN), **switched_on}
        ),
        "standin_off": start(verl_061, [str(CONTRACT_CHECK)], {}, {"PYTHONPATH": str(STANDIN)}),
    }
    report: dict[str, Any] = {"device": "cpu", "plan": plan}
    for name, process in running.items():
        report[name] = last_json(process, name)
        seconds[name] = round(time.monotonic() - started, 1)  # since the start, stages overlap
    report["seconds"] = seconds
    return report


def data_stage(request: dict[str, Any]) -> dict[str, Any]:
    """In a verl virtualenv: the inputs the GPU run builds, the data prep of each job on them,
    and what it wrote (its step markers, its prompt lengths)."""
    from bench import gpu_run
    from payloads.data_prep.prep_common import PREP_DIR

    sources, model, _ = gpu_run.build_inputs(Path(request["work"]))
    report: dict[str, Any] = {}
    for name, argv in request["argv"].items():
        gpu_run.run_data_prep(argv, sources, model)
        root = Path(argv[argv.index("--data-root") + 1])
        report[name] = {
            "markers": {
                path.stem: json.loads(path.read_text())
                for path in sorted((root / PREP_DIR).glob("*.done"))
            },
            "prompt_lengths": gpu_run.prompt_lengths(root),
        }
    return report


if __name__ == "__main__":
    print(json.dumps(data_stage(json.load(sys.stdin)), default=str))
