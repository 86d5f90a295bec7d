"""Score the exported model against its base model on a held-out set, with the run's own reward.

    python evaluate.py --base /data/Qwen2.5-0.5B-Instruct --trained /data/models/<experiment> \
        --data /data/gsm8k/test.parquet [--reward-file /data/rewards/<sha>/reward.py \
        --reward-name compute_score] [--prompts 200] [--samples 4] [--temperature 1.0] \
        --max-new-tokens 1024 --max-prompt-length 512 [--top-p 1] [--top-k -1] \
        [--chat-template-overrides '["+data.apply_chat_template_kwargs.enable_thinking=False"]'] \
        [--tensor-parallel 1] [--seed 0] [--out /data/models/<experiment>/.verl-gke-eval.json] \
        [--on-node GPU]

    # one GPU without vLLM (transformers generates), e.g. a small model and an own dataset:
    VERL_GKE_EVAL_BACKEND=hf python payloads/export/evaluate.py --base base/ --trained export/ \
        --data test.parquet --reward-file reward.py --reward-name compute_score --prompts 200 \
        --samples 4 --max-new-tokens 256 --max-prompt-length 512 --out report.json

Exit status 0 with a report, 1 when the evaluation failed (the report and the last line say
why), 2 for bad arguments. The GRPO job's runner (run_grpo.py) runs it after the export with
--trained <export folder> --on-node GPU and the flags training/model_evaluation.py renders.

Both models answer the first --prompts rows (all when left out) of --data, a parquet in verl's
format (`prompt`: chat messages, `data_source`, `reward_model.ground_truth`, `extra_info`), that
verl's validation dataset keeps: verl's own RLHFDataset (verl/utils/dataset/rl_dataset.py) with
the `data` config composed from verl's ppo_trainer and data.max_prompt_length =
--max-prompt-length and the job's data.apply_chat_template_kwargs overrides
(--chat-template-overrides), its maybe_filter_out_long_prompts dropping every prompt longer than
max_prompt_length as every job does (data.filter_overlong_prompts=True). The report keeps each
row's index in the file and says how many rows were dropped. Each prompt is rendered as
RLHFDataset renders it (__getitem__, v0.6.1: tokenizer.apply_chat_template(messages,
add_generation_prompt=True, tokenize=False, **apply_chat_template_kwargs), then tokenized with
add_special_tokens=False), and answered once greedily and --samples times at --temperature,
--top-p and --top-k (the rollout's; -1: off), at most --max-new-tokens tokens each (the job's
data.max_response_length). Each answer's token ids, decoded with skip_special_tokens=True as
verl's reward manager decodes them, are scored as verl's NaiveRewardManager scores
it (verl/workers/reward_manager/naive.py: compute_score(data_source=, solution_str=,
ground_truth=, extra_info=); a dict's "score"), by the function verl would load: with
--reward-file, verl.trainer.ppo.reward.get_custom_reward_fn (custom_reward_function.path/name,
--reward-kwargs as its reward_kwargs); without, verl.utils.reward_score.default_compute_score,
which picks the scorer by data_source.

Metrics, per model: greedy pass@1 (the mean over prompts of the greedy answer's score) and
mean@k (the mean over prompts of the mean score of the k sampled answers), and trained - base
for both. Interval: 95 % Student's t interval over prompts, mean +- t(0.975, n - 1) * s / sqrt(n),
with s the sample standard deviation (n - 1) of the per-prompt values (t's quantile from the
series of Abramowitz & Stegun 26.7.3-4, by bisection); for the difference, of the paired
per-prompt differences trained_i - base_i (which removes the prompts' own difficulty from the
spread). The evaluation is flagged `regressed` when the primary metric's difference interval
lies wholly below 0 (mean@k; greedy pass@1 when --samples is 0).

The report (--out; default <trained>/.verl-gke-eval.json) holds the summary and every prompt's
scores and greedy answers. A report whose export marker (<trained>/.verl-gke-export.json, written
by export_model.py) and settings match is reused, not recomputed; a failed evaluation writes a
report with status "failed" and its reason, and exits 1; the exported model is never touched (a
LoRA export, whose weights are the base model's, is refused). The last line printed is the
summary (the report without its per-prompt rows) as one JSON object with "check":
"verl-gke-eval"; children write their results to <out>.parts/ and it is removed after.

Where generation runs: with --on-node RESOURCE (the GRPO job's runner passes GPU) the evaluation
runs as a Ray task asking for --tensor-parallel units of RESOURCE (like export_model.py's merge:
resource demand brings a scaled-down worker back); without it, here. Generation runs in child
processes (this file with --generate ROLE=FOLDER): with vLLM one per model, so the first
engine's GPU memory is returned before the second loads; the parent is standard library only.

Generation backend (VERL_GKE_EVAL_BACKEND): "vllm" (default; vllm.LLM with tensor parallel
--tensor-parallel, SamplingParams(n=k)), "hf" (transformers generate: where vLLM is not
installed; VERL_GKE_EVAL_HF_BATCH prompts per batch, default 16, each with its k samples), or
"<module>:<factory>" (a factory with the same signature as the two built in: tests use a
scripted one). --seed seeds the sampling (vLLM's engine seed, LLM(seed=), as verl's rollout
sets it; torch's for hf). Stdlib at module level: vllm, transformers, torch, hydra, datasets and
verl are imported only in the child that generates.

This file is the CLI and the parent; its parts, beside it in the job's working_dir: the report and
its statistics (eval_report.py), the backends (eval_backends.py), one model's rows, prompts and
scores (eval_scoring.py, the child).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

try:  # imported as payloads.export.evaluate (the program, tests)
    from . import eval_backends, eval_report, eval_scoring
except ImportError:  # run as a script: this folder is sys.path[0]
    import eval_backends
    import eval_report
    import eval_scoring


# export_model.LORA_DIR: where a LoRA export keeps the trained adapter.
LORA_DIR = "lora_adapter"
# Tests only: the python a Ray worker runs the evaluation with (default: the worker's own).
WORKER_PYTHON_ENV = "VERL_GKE_EVAL_WORKER_PYTHON"
ROLES = ("base", "trained")
TAIL_LINES = 40
WAIT_REPORT_S = float(os.environ.get("VERL_GKE_EVAL_WAIT_REPORT_S", "60"))


def child_groups(backend: str) -> list[tuple[str, ...]]:
    """The roles each child process generates: vLLM one model per process (the process's exit
    returns all of the engine's GPU memory before the next model loads), others both in one."""
    return [(role,) for role in ROLES] if backend == "vllm" else [ROLES]


def child_argv(args: argparse.Namespace, roles: tuple[str, ...], parts_dir: Path) -> list[str]:
    models = [f"{role}={args.base if role == 'base' else args.trained}" for role in roles]
    argv = [sys.executable, str(Path(__file__).resolve()), "--parts-dir", str(parts_dir)]
    for model in models:
        argv += ["--generate", model]
    return [*argv, *settings_argv(args)]


def settings_argv(args: argparse.Namespace) -> list[str]:
    argv = [
        "--data", args.data, "--samples", str(args.samples),
        "--temperature", str(args.temperature), "--max-new-tokens", str(args.max_new_tokens),
        "--max-prompt-length", str(args.max_prompt_length),
        "--top-p", str(args.top_p), "--top-k", str(args.top_k),
        "--chat-template-overrides", json.dumps(args.chat_template_overrides),
        "--reward-name", args.reward_name, "--reward-kwargs", json.dumps(args.reward_kwargs),
        "--seed", str(args.seed), "--tensor-parallel", str(args.tensor_parallel),
    ]  # fmt: skip
    if args.prompts is not None:
        argv += ["--prompts", str(args.prompts)]
    if args.reward_file:
        argv += ["--reward-file", args.reward_file]
    return argv


def settings_of(args: argparse.Namespace) -> eval_report.EvalSettings:
    return eval_report.EvalSettings(
        data=args.data,
        prompts=args.prompts,
        samples=args.samples,
        temperature=args.temperature,
        max_new_tokens=args.max_new_tokens,
        max_prompt_length=args.max_prompt_length,
        reward_file=args.reward_file,
        reward_name=args.reward_name,
        reward_kwargs=args.reward_kwargs,
        seed=args.seed,
        top_p=args.top_p,
        top_k=args.top_k,
        chat_template_overrides=list(args.chat_template_overrides),
    )


def run_streaming(argv: list[str]) -> tuple[int, list[str], dict[str, Any] | None]:
    """Run `argv`, printing its output (stdout and stderr) as it comes: (exit status, its last
    TAIL_LINES lines, its summary line if it printed one)."""
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    summary = None
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            print(line, end="", flush=True)
            tail.append(line.rstrip("\n"))
            summary = find_summary(line) or summary
    return proc.returncode, list(tail), summary


def run_child(roles: tuple[str, ...], argv: list[str]) -> None:
    returncode, tail, _ = run_streaming(argv)
    if returncode != 0:
        lines = "\n".join(tail)
        raise eval_report.EvaluationError(
            f"the generation of {' and '.join(roles)} exited {returncode}; its last lines:\n{lines}"
        )


def read_parts(parts_dir: Path) -> dict[str, dict[str, Any]]:
    """Each model's scored part, as its child wrote it."""
    parts: dict[str, dict[str, Any]] = {}
    for role in ROLES:
        loaded = eval_report.read_json(parts_dir / f"{role}.json")
        if loaded is None:
            raise eval_report.EvaluationError(
                f"the {role} model's generation wrote no results to {parts_dir}"
            )
        parts[role] = loaded
    return parts


def evaluate_here(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Both models, one child process each, then the report at `out`."""
    started = time.monotonic()
    settings = settings_of(args)
    parts_dir = out.with_name(f"{out.name}.parts")
    for role in ROLES:
        (parts_dir / f"{role}.json").unlink(missing_ok=True)
    for roles in child_groups(
        os.environ.get(eval_backends.BACKEND_ENV, eval_backends.DEFAULT_BACKEND)
    ):
        run_child(roles, child_argv(args, roles, parts_dir))
    parts = read_parts(parts_dir)
    indices = {role: [row["index"] for row in parts[role]["prompts"]] for role in ROLES}
    if indices["base"] != indices["trained"]:
        raise eval_report.EvaluationError(
            "the two models' tokenizers kept different rows under max_prompt_length "
            f"{args.max_prompt_length} (base: {len(indices['base'])}, trained: "
            f"{len(indices['trained'])}); the trained model's tokenizer is not its base model's"
        )
    summary = eval_report.summarize(parts, args.samples)
    per_prompt = [
        {
            "index": b["index"],
            "data_source": b["data_source"],
            "ground_truth": b["ground_truth"],
            **{
                role: {k: row[k] for k in ("greedy_score", "sample_scores", "greedy_answer")}
                for role, row in (("base", b), ("trained", t))
            },
        }
        for b, t in zip(parts["base"]["prompts"], parts["trained"]["prompts"], strict=True)
    ]
    report = {
        "status": "ok",
        "export": eval_report.export_key(args.trained),
        "models": {"base": args.base, "trained": args.trained},
        "settings": asdict(settings),
        "backend": parts["trained"]["backend"],
        "interval": eval_report.INTERVAL_TEXT,
        "held_out": parts["base"]["held_out"],
        **summary,
        "seconds": {
            "base": parts["base"]["seconds"],
            "trained": parts["trained"]["seconds"],
            "total": round(time.monotonic() - started, 1),
        },
        "report": str(out),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "per_prompt": per_prompt,
    }
    eval_report.write_json(out, report)
    for role in ROLES:
        (parts_dir / f"{role}.json").unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        parts_dir.rmdir()
    return report


def task_options(resource: str, count: int) -> dict[str, Any]:
    """One CPU and `count` units of `resource` (export_model.task_options with a count)."""
    if resource == "CPU":
        return {"num_cpus": count}
    if resource == "GPU":
        return {"num_cpus": 1, "num_gpus": count}
    return {"num_cpus": 1, "resources": {resource: count}}


def _run_on_worker(script: str, argv: list[str]) -> dict[str, Any]:
    """The Ray task: this file's CLI, run here (the job's working_dir is the task's cwd)."""
    here = Path("evaluate.py")
    path = str(here.resolve()) if here.is_file() else script
    python = os.environ.get(WORKER_PYTHON_ENV) or sys.executable
    returncode, tail, summary = run_streaming([python, path, *argv])
    return {
        "returncode": returncode,
        "tail": tail,
        "node": os.uname().nodename,
        "summary": summary,
    }


def find_summary(output: str) -> dict[str, Any] | None:
    """The last printed line that is this CLI's summary (see main)."""
    for line in reversed(output.splitlines()):
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict) and value.get("check") == eval_report.RESULT_TAG:
                return value
    return None


def evaluate_on_node(argv: list[str], resource: str, count: int) -> dict[str, Any]:
    """Run this CLI (without --on-node) as a Ray task on a node offering `count` `resource`;
    while none does, wait and say so: the request is what brings a worker back."""
    import ray

    ray.init(address=os.environ.get("RAY_ADDRESS", "auto"))
    task = ray.remote(_run_on_worker).options(**task_options(resource, count))
    ref = task.remote(str(Path(__file__).resolve()), argv)
    started = time.monotonic()
    while not ray.wait([ref], timeout=WAIT_REPORT_S)[0]:
        print(
            f"evaluate: waiting {time.monotonic() - started:.0f} s for a Ray node with {count} "
            f"free {resource} (a worker group scaled to zero is brought back by this request)",
            flush=True,
        )
    return ray.get(ref)


def failed_report(args: argparse.Namespace, out: Path, reason: str) -> dict[str, Any]:
    return {
        "status": "failed",
        "reason": reason,
        "export": eval_report.export_key(args.trained),
        "models": {"base": args.base, "trained": args.trained},
        "settings": asdict(settings_of(args)),
        "report": str(out),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def evaluate(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    """The report: reused when it matches this export and settings, else computed (here or on a
    Ray node). A failure is a report with status "failed" and its reason."""
    out = Path(args.out) if args.out else Path(args.trained) / eval_report.REPORT_NAME
    marker = eval_report.read_json(Path(args.trained) / eval_report.EXPORT_MARKER)
    adapter = Path(args.trained) / LORA_DIR
    if adapter.is_dir():
        return failed_report(
            args,
            out,
            f"{args.trained} is a LoRA export: its weights are the untrained base model and the "
            f"training is in {adapter}, which this evaluation does not load",
        )
    reused = eval_report.reusable(out, marker, settings_of(args), args.base, args.trained)
    if reused is not None:
        print(f"evaluate: {out} already holds this export's evaluation; reused", flush=True)
        return {**reused, "reused": True}
    try:
        if args.on_node:
            local = _without_on_node(argv)
            result = evaluate_on_node(local, args.on_node, args.tensor_parallel)
            # The worker's summary line, not the report file: the head's bucket mount may cache
            # the file's metadata from before the worker wrote it (manifests/fuse_mounts.py).
            summary = result["summary"]
            if result["returncode"] != 0 or summary is None or summary.get("status") != "ok":
                reason = (summary or {}).get("reason") or "\n".join(result["tail"])
                raise eval_report.EvaluationError(
                    f"the evaluation on {result['node']} failed: {reason}"
                )
            return {k: v for k, v in summary.items() if k != "check"}
        return evaluate_here(args, out)
    except Exception as error:  # the export stays; the report says why
        report = failed_report(args, out, f"{type(error).__name__}: {error}")
        try:
            eval_report.write_json(out, report)
        except OSError as write_error:
            report["reason"] += f" (and the report could not be written: {write_error})"
        return report


def _without_on_node(argv: list[str]) -> list[str]:
    out, skip = [], False
    for item in argv:
        if skip:
            skip = False
            continue
        if item == "--on-node":
            skip = True
            continue
        if item.startswith("--on-node="):
            continue
        out.append(item)
    return out


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", help="the base model's folder (the job's model path)")
    p.add_argument("--trained", help="the exported model's folder")
    p.add_argument("--data", required=True, help="held-out parquet in verl's format")
    p.add_argument("--prompts", type=int, help="the first N rows (default: all)")
    p.add_argument("--samples", type=int, default=4, help="k sampled answers per prompt")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--max-new-tokens", type=int, required=True)
    p.add_argument(
        "--max-prompt-length",
        type=int,
        required=True,
        help="the job's data.max_prompt_length: longer prompts are dropped, as verl drops them",
    )
    p.add_argument("--top-p", type=float, default=1.0, help="of the sampled answers (rollout's)")
    p.add_argument("--top-k", type=int, default=-1, help="of the sampled answers; -1: off")
    p.add_argument(
        "--chat-template-overrides",
        type=_string_list,
        default=[],
        help="JSON list of the job's data.apply_chat_template_kwargs Hydra overrides",
    )
    p.add_argument("--reward-file", help="verl custom_reward_function.path (default: verl's)")
    p.add_argument("--reward-name", default="compute_score")
    p.add_argument("--reward-kwargs", type=json.loads, default={})
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tensor-parallel", type=int, default=1)
    p.add_argument("--out", help=f"the report (default: <trained>/{eval_report.REPORT_NAME})")
    p.add_argument("--on-node", help="run as a Ray task on a node with this resource (GPU)")
    # A child's part: ROLE=FOLDER of each model it generates, and where their results go.
    p.add_argument("--generate", action="append", default=[], help=argparse.SUPPRESS)
    p.add_argument("--parts-dir", help=argparse.SUPPRESS)
    return p


def check_arguments(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if not args.generate and not (args.base and args.trained):
        p.error("--base and --trained are required")
    if args.prompts is not None and args.prompts < 1:
        p.error(f"--prompts {args.prompts}: give at least 1, or leave it out for all rows")
    if args.samples < 0:
        p.error(f"--samples {args.samples}: give 0 (greedy only) or more")
    if args.samples > 0 and not args.temperature > 0:
        p.error(f"--temperature {args.temperature}: sampling needs a temperature above 0")
    if args.max_new_tokens < 1 or args.tensor_parallel < 1 or args.max_prompt_length < 1:
        p.error("--max-new-tokens, --max-prompt-length and --tensor-parallel must be at least 1")
    if not 0 < args.top_p <= 1:
        p.error(f"--top-p {args.top_p}: give a value above 0 and at most 1 (1: off)")
    if args.top_k < -1:
        p.error(f"--top-k {args.top_k}: give -1 (off) or a count of at least 1")


def _string_list(text: str) -> list[str]:
    value = json.loads(text)
    if not (isinstance(value, list) and all(isinstance(item, str) for item in value)):
        raise argparse.ArgumentTypeError(f"{text!r}: not a JSON list of strings")
    return value


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = parser()
    args = p.parse_args(argv)
    check_arguments(p, args)
    if args.generate:
        models = dict(item.split("=", 1) for item in args.generate)
        eval_scoring.generate_and_score(
            models, settings_of(args), args.tensor_parallel, Path(args.parts_dir)
        )
        return 0
    report = evaluate(args, argv)
    summary = eval_report.summary_of(report)
    if report["status"] != "ok":
        print(f"evaluate: failed: {report['reason']}", file=sys.stderr, flush=True)
    else:
        print(describe(summary), flush=True)
    print(json.dumps(summary, separators=(",", ":")), flush=True)
    return 0 if report["status"] == "ok" else 1


def describe(summary: dict[str, Any]) -> str:
    metric = summary["primary"]
    base, trained = summary["base"][metric], summary["trained"][metric]
    diff = summary["difference"][metric]
    line = (
        f"evaluate: {summary['prompts']} prompts, {metric}: base {base['mean']:.4f}, "
        f"trained {trained['mean']:.4f}, trained - base {diff['mean']:+.4f} "
        f"(95 % interval {diff['low']}..{diff['high']})"
    )
    if summary["regressed"]:
        line += "; the trained model scores BELOW its base beyond the interval"
    return line


if __name__ == "__main__":
    sys.exit(main())
