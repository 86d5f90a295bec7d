"""The export's evaluation against its base model (payloads/export/evaluate.py).

Rules it encodes:
- the interval is Student's t interval over prompts, mean +- t(0.975, n - 1) s / sqrt(n) with s
  the sample standard deviation, and the difference's is over paired per-prompt differences;
- an export is flagged only when the difference's interval lies wholly below 0;
- the held-out rows are those verl's RLHFDataset keeps (maybe_filter_out_long_prompts drops
  every prompt over data.max_prompt_length, with data.apply_chat_template_kwargs), each with its
  index in the file;
- prompts are rendered as verl's RLHFDataset renders them (rl_dataset.py __getitem__, v0.6.1:
  apply_chat_template(messages, add_generation_prompt=True, tokenize=False,
  **apply_chat_template_kwargs), tokenized without special tokens), sampled with the rollout's
  top_p and top_k, vLLM's answers decoded from their token ids as verl's reward manager decodes
  them, and answers are scored as NaiveRewardManager calls compute_score
  (verl/workers/reward_manager/naive.py), by the function verl's own loader returns
  (get_custom_reward_fn, or default_compute_score by data_source);
- a report for the same export (its marker) and settings is reused; another export's is not;
- vLLM generates each model in its own process (its GPU memory is returned at exit).

The reward loader runs in verl 0.6.1's virtualenv (tests/support/require.py verl_python). The
end to end run, through the GRPO runner, is in tests/test_run_grpo_evaluation.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from config import bucket_layout
from payloads.export import eval_report, evaluate, export_model
from tests.support.require import verl_python

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "payloads" / "export" / "evaluate.py"
# Student's t 0.975 quantiles (R 4.3: qt(0.975, df)), by degrees of freedom.
T975 = {
    1: 12.7062047361747,
    2: 4.30265272974946,
    3: 3.18244630528371,
    7: 2.36462425159278,
    10: 2.22813885198627,
    30: 2.04227245630124,
    100: 1.98397151852355,
}


# --- the statistics -------------------------------------------------------------------------------


@pytest.mark.parametrize(("df", "quantile"), sorted(T975.items()))
def test_the_t_quantile_is_students(df: int, quantile: float) -> None:
    assert eval_report.student_t_quantile(0.975, df) == pytest.approx(quantile, abs=1e-9)


def test_the_t_quantile_for_many_prompts_is_the_asymptotic_expansions() -> None:
    # GSM8K's 1,319 test prompts: df 1318, where the Cornish-Fisher expansion of Abramowitz &
    # Stegun 26.7.5 (four terms) is exact to far below 1e-9.
    z, df = statistics.NormalDist().inv_cdf(0.975), 1318
    terms = [
        (z**3 + z) / 4,
        (5 * z**5 + 16 * z**3 + 3 * z) / 96,
        (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384,
        (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160,
    ]
    expansion = z + sum(term / df ** (i + 1) for i, term in enumerate(terms))
    assert eval_report.student_t_quantile(0.975, df) == pytest.approx(expansion, abs=1e-9)


def test_the_interval_is_students_t_interval_over_prompts() -> None:
    # Per-prompt scores 1, 0, 0, 0: mean 0.25; sample variance (3 x 0.0625 + 0.5625) / 3 = 0.25,
    # s = 0.5; half width t(0.975, 3) x 0.5 / sqrt(4) = t / 4 (the normal's 1.96 / 4 would claim
    # a third less spread than 4 prompts can show).
    interval = eval_report.t_interval([1.0, 0.0, 0.0, 0.0])
    assert interval.mean == 0.25
    assert interval.low == pytest.approx(0.25 - T975[3] / 4, abs=1e-12)
    assert interval.high == pytest.approx(0.25 + T975[3] / 4, abs=1e-12)
    assert eval_report.t_interval([0.5]).low is None  # one prompt has no spread
    assert "t(0.975, n - 1)" in eval_report.INTERVAL_TEXT


def part(greedy: list[float], samples: list[list[float]]) -> dict[str, Any]:
    return {
        "prompts": [
            {"greedy_score": g, "sample_scores": s} for g, s in zip(greedy, samples, strict=True)
        ]
    }


def test_the_difference_is_paired_per_prompt_and_flags_only_beyond_the_interval() -> None:
    base = part([1, 1, 0, 0] * 2, [[1, 1], [1, 0], [0, 0], [1, 0]] * 2)
    # mean@2 per prompt: base 1, .5, 0, .5; trained .5, 0, 0, 0 (twice) -> differences -.5, -.5,
    # 0, -.5 (twice): mean -0.375, s^2 = (6 x 0.125^2 + 2 x 0.375^2) / 7 = 0.375 / 7, half width
    # t(0.975, 7) x s / sqrt(8).
    trained = part([1, 0, 0, 0] * 2, [[1, 0], [0, 0], [0, 0], [0, 0]] * 2)
    summary = eval_report.summarize({"base": base, "trained": trained}, samples=2)
    diff = summary["difference"]["mean_at_k"]
    assert summary["primary"] == "mean_at_k" and summary["prompts"] == 8
    assert diff["mean"] == -0.375
    half = T975[7] * (0.375 / 7) ** 0.5 / 8**0.5
    assert diff["high"] == pytest.approx(-0.375 + half, abs=1e-6)
    assert diff["high"] < 0 and summary["regressed"] is True
    assert summary["base"]["greedy"]["mean"] == 0.5
    assert summary["trained"]["mean_at_k"]["mean"] == 0.125
    # Greedy: differences 0, -1, 0, 0 (twice): mean -0.25, an interval across 0.
    greedy = summary["difference"]["greedy"]
    assert greedy["low"] < 0 < greedy["high"]


def test_a_lower_score_within_the_interval_is_not_flagged() -> None:
    base = part([1, 0, 1, 0], [[1], [0], [1], [1]])
    trained = part([1, 0, 1, 0], [[1], [1], [0], [0]])  # differences 0, 1, -1, -1
    summary = eval_report.summarize({"base": base, "trained": trained}, samples=1)
    diff = summary["difference"]["mean_at_k"]
    assert diff["mean"] == -0.25 and diff["low"] < 0 < diff["high"]
    assert summary["regressed"] is False


def test_the_flag_reads_the_interval_before_it_is_rounded_for_the_report() -> None:
    # A reward below 1e-6 apart: the trained model scores 4e-7 below its base on every prompt,
    # so the difference interval is [-4e-7, -4e-7], wholly below 0; the report rounds it to 6
    # decimals (-0.0), which must not clear the flag.
    base = part([4e-7] * 5, [[4e-7]] * 5)
    trained = part([0.0] * 5, [[0.0]] * 5)
    summary = eval_report.summarize({"base": base, "trained": trained}, samples=1)
    assert summary["difference"]["mean_at_k"]["high"] == 0.0
    assert summary["regressed"] is True


def test_greedy_only_makes_greedy_the_flagged_metric() -> None:
    base = part([1, 1, 1], [[], [], []])
    trained = part([0, 0, 0], [[], [], []])
    summary = eval_report.summarize({"base": base, "trained": trained}, samples=0)
    assert summary["primary"] == "greedy" and "mean_at_k" not in summary["base"]
    assert summary["difference"]["greedy"] == {"mean": -1.0, "low": -1.0, "high": -1.0}
    assert summary["regressed"] is True


def test_the_names_agree_with_the_export_and_the_bucket_layout() -> None:
    assert eval_report.EXPORT_MARKER == export_model.MARKER
    assert eval_report.REPORT_NAME == bucket_layout.EVAL_REPORT_NAME
    assert bucket_layout.eval_report_path("e") == f"/data/models/e/{eval_report.REPORT_NAME}"


def test_a_lora_export_is_refused_not_scored_as_its_base_weights(tmp_path: Path) -> None:
    assert evaluate.LORA_DIR == export_model.LORA_DIR
    trained = tmp_path / "export"
    (trained / export_model.LORA_DIR).mkdir(parents=True)
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--base", "b", "--trained", str(trained), "--data", "d",
         "--max-new-tokens", "8", "--max-prompt-length", "64"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 1
    summary = evaluate.find_summary(proc.stdout)
    assert summary is not None and summary["status"] == "failed"
    assert "is a LoRA export" in summary["reason"]


def test_the_ray_task_asks_for_the_rollouts_gpus() -> None:
    assert evaluate.task_options("GPU", 4) == {"num_cpus": 1, "num_gpus": 4}
    assert evaluate.task_options("CPU", 1) == {"num_cpus": 1}


# --- the reward, through verl's own loader -------------------------------------------------------

REWARD = """
import json, os
def compute_score(data_source, solution_str, ground_truth, extra_info=None, scale=1.0):
    with open(os.environ["REWARD_CALLS"], "a") as calls:
        call = [data_source, solution_str, ground_truth, extra_info, scale]
        calls.write(json.dumps(call) + "\\n")
    return {"score": scale * float(solution_str.strip().endswith(ground_truth)), "acc": 1}
"""

LOAD_AND_SCORE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import eval_scoring
row = {"data_source": "own", "reward_model": {"ground_truth": "7"}, "extra_info": {"index": 3}}
custom = eval_scoring.load_reward(sys.argv[2], "compute_score", {"scale": 2.0})
builtin = eval_scoring.load_reward(None, "compute_score", {})
gsm8k = {**row, "data_source": "openai/gsm8k"}
print(json.dumps([
    eval_scoring.score(custom, row, "so 7"), eval_scoring.score(custom, row, "8"),
    eval_scoring.score(builtin, gsm8k, "#### 7"), eval_scoring.score(builtin, gsm8k, "7"),
]))
"""


def test_the_reward_is_the_function_verls_loader_returns(tmp_path: Path) -> None:
    python = verl_python("0.6.1")
    reward = tmp_path / "reward.py"
    reward.write_text(REWARD)
    calls = tmp_path / "calls.jsonl"
    env = {**os.environ, "REWARD_CALLS": str(calls)}
    proc = subprocess.run(
        [str(python), "-c", LOAD_AND_SCORE, str(SCRIPT.parent), str(reward)],
        capture_output=True, text=True, env=env, timeout=180, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    # reward_kwargs reach the function (get_custom_reward_fn's partial); a dict's "score" counts;
    # verl's gsm8k scorer reads the answer after "####" (verl/utils/reward_score/gsm8k.py).
    assert json.loads(proc.stdout.splitlines()[-1]) == [2.0, 0.0, 1.0, 0.0]
    first = json.loads(calls.read_text().splitlines()[0])
    # NaiveRewardManager's extra_info: the row's, with num_turns and rollout_reward_scores.
    assert first == [
        "own",
        "so 7",
        "7",
        {"index": 3, "num_turns": None, "rollout_reward_scores": {}},
        2.0,
    ]


# --- reuse ----------------------------------------------------------------------------------------

SETTINGS = eval_report.EvalSettings(
    data="/data/t.parquet",
    prompts=None,
    samples=4,
    temperature=1.0,
    max_new_tokens=512,
    max_prompt_length=256,
    reward_file=None,
    reward_name="compute_score",
)
MARKER = {"step": 5, "source": "/ckpt/global_step_5/actor", "finished_at": "t5", "node": "n"}


def write_report(path: Path, **changes: Any) -> None:
    report = {
        "status": "ok",
        "export": eval_report.marker_key(MARKER),
        "settings": dataclasses.asdict(SETTINGS),
        "models": {"base": "/data/M", "trained": "/data/models/e"},
        **changes,
    }
    path.write_text(json.dumps(report))


@pytest.mark.parametrize(
    ("changes", "marker", "settings", "reused"),
    [
        ({}, MARKER, SETTINGS, True),
        # the export was merged again (a retried run that trained further): another marker
        ({}, {**MARKER, "step": 6, "finished_at": "t6"}, SETTINGS, False),
        ({}, {**MARKER, "finished_at": "t5-again"}, SETTINGS, False),
        ({}, MARKER, dataclasses.replace(SETTINGS, samples=8), False),
        # other held-out rows (verl keeps other prompts), other sampling, another rendering
        ({}, MARKER, dataclasses.replace(SETTINGS, max_prompt_length=512), False),
        ({}, MARKER, dataclasses.replace(SETTINGS, top_p=0.9), False),
        ({}, MARKER, dataclasses.replace(SETTINGS, top_k=20), False),
        (
            {},
            MARKER,
            dataclasses.replace(
                SETTINGS,
                chat_template_overrides=["+data.apply_chat_template_kwargs.enable_thinking=False"],
            ),
            False,
        ),
        ({"status": "failed"}, MARKER, SETTINGS, False),
        ({}, None, SETTINGS, False),  # no finished export: nothing to vouch for
    ],
)
def test_a_report_is_reused_only_for_the_same_export_and_settings(
    tmp_path: Path,
    changes: dict[str, Any],
    marker: dict[str, Any] | None,
    settings: eval_report.EvalSettings,
    reused: bool,
) -> None:
    out = tmp_path / "report.json"
    write_report(out, **changes)
    found = eval_report.reusable(out, marker, settings, "/data/M", "/data/models/e")
    assert (found is not None) is reused


def test_bad_arguments_are_refused_before_anything_runs() -> None:
    for argv, says in (
        (["--samples", "-1"], "--samples -1"),
        (["--prompts", "0"], "--prompts 0"),
        (["--temperature", "0"], "sampling needs a temperature above 0"),
        (["--top-p", "0"], "--top-p 0.0"),
        (["--top-k", "-2"], "--top-k -2"),
        (["--max-prompt-length", "0"], "--max-prompt-length"),
        (["--chat-template-overrides", '{"a": 1}'], "not a JSON list of strings"),
    ):
        proc = subprocess.run(
            [sys.executable, str(SCRIPT), "--base", "b", "--trained", "t", "--data", "d",
             "--max-new-tokens", "8", "--max-prompt-length", "64", *argv],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert proc.returncode == 2 and says in proc.stderr


def test_vllm_generates_each_model_in_its_own_process() -> None:
    assert evaluate.child_groups("vllm") == [("base",), ("trained",)]
    assert evaluate.child_groups("hf") == [("base", "trained")]


def test_the_summary_line_is_the_last_tagged_json_line() -> None:
    text = 'noise\n(_run_on_worker pid=1) {"check": "verl-gke-eval", "status": "x"}\n'
    assert evaluate.find_summary(text) is None  # a worker's prefixed line is not the driver's
    text += '{"check": "verl-gke-eval", "status": "ok"}\nlast words\n'
    assert evaluate.find_summary(text) == {"check": "verl-gke-eval", "status": "ok"}


# --- the hf backend, with transformers 4.57.1 as on the GPU machine --------------------------

HF_RUN = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[1] + "/payloads/export")
import torch
import eval_backends
import eval_scoring
from tests.support import tiny_model
from transformers import AutoModelForCausalLM, AutoTokenizer
folder = tiny_model.build(Path(sys.argv[2]), seed=8)
# An instruct model's sampling defaults, saved by transformers >= 4.50 as verl's merger saves an
# export: generate() falls back to them for every field left at GenerationConfig's default
# (transformers 4.57.1 generation/utils.py _prepare_generation_config) unless told not to.
config = json.loads((folder / "generation_config.json").read_text())
config.update(do_sample=True, temperature=50.0, top_p=0.3, top_k=3, repetition_penalty=5.0)
(folder / "generation_config.json").write_text(json.dumps(config))
tokenizer = AutoTokenizer.from_pretrained(folder)
rows = [{"prompt": [{"role": "user", "content": text}]}
        for text in ("what is 1 plus 2 ?", "what", "the answer is 7 plus 8 plus 9 ?")]
ids = eval_scoring.render_prompts(tokenizer, rows)
request = eval_backends.GenerationRequest(ids, 3, 0.9, 12, 0, 1)
generator = eval_backends.HfGenerator(str(folder), tokenizer, request)
first, again = generator.generate(request), generator.generate(request)

# Greedy by hand, one prompt at a time, no padding: argmax until EOS or the token budget.
model = AutoModelForCausalLM.from_pretrained(folder)
eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
by_hand = []
for prompt in ids:
    tokens = list(prompt)
    for _ in range(12):
        with torch.no_grad():
            logits = model(torch.tensor([tokens])).logits[0, -1]
        token = int(logits.argmax())
        if token == eos:
            break
        tokens.append(token)
    by_hand.append(tokenizer.decode(tokens[len(prompt):], skip_special_tokens=True))
print(json.dumps({
    "greedy": [a.greedy for a in first], "by_hand": by_hand,
    "samples": [len(a.samples) for a in first], "same": first == again,
    "rendered": tokenizer.decode(ids[1]),
}))
"""


def test_the_hf_backend_generates_as_the_model_does(tmp_path: Path) -> None:
    """Batched with left padding, prompts of different lengths: each greedy answer is the one
    the model gives that prompt alone, whatever sampling defaults the model's
    generation_config.json holds; k samples each, reproducible from the seed."""
    proc = subprocess.run(
        [str(verl_python("0.6.1")), "-c", HF_RUN, str(REPO), str(tmp_path / "model")],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.splitlines()[-1])
    assert found["greedy"] == found["by_hand"]
    # (seed 8: every answer ends at EOS within the budget, of different lengths per prompt)
    assert all(found["greedy"]) and len(set(found["greedy"])) > 1
    assert found["samples"] == [3, 3, 3] and found["same"] is True
    assert found["rendered"].split() == [
        "<|im_start|>", "user", "what", "<|im_end|>", "<|im_start|>", "assistant",
    ]  # fmt: skip


def test_the_hf_backend_samples_with_the_rollouts_top_k(tmp_path: Path) -> None:
    """top_k 1 leaves one token to sample from: every sample is the greedy answer, however hot
    the temperature (with top_k off, temperature 50 samples differ from it)."""
    script = HF_TOP_K.replace("__TOP_K__", "1")
    proc = subprocess.run(
        [str(verl_python("0.6.1")), "-c", script, str(REPO), str(tmp_path / "model")],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.splitlines()[-1])
    assert all(samples == [greedy] * 4 for greedy, samples in found)
    off = subprocess.run(
        [str(verl_python("0.6.1")), "-c", HF_TOP_K.replace("__TOP_K__", "-1"), str(REPO),
         str(tmp_path / "model-off")],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert off.returncode == 0, off.stderr[-3000:]
    found = json.loads(off.stdout.splitlines()[-1])
    assert any(samples != [greedy] * 4 for greedy, samples in found)


HF_TOP_K = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[1] + "/payloads/export")
import eval_backends
import eval_scoring
from tests.support import tiny_model
from transformers import AutoTokenizer
folder = tiny_model.build(Path(sys.argv[2]), seed=8)
tokenizer = AutoTokenizer.from_pretrained(folder)
rows = [{"prompt": [{"role": "user", "content": text}]} for text in ("what is 1 plus 2 ?", "what")]
ids = eval_scoring.render_prompts(tokenizer, rows)
request = eval_backends.GenerationRequest(ids, 4, 50.0, 12, 0, 1, top_p=1.0, top_k=__TOP_K__)
answers = eval_backends.HfGenerator(str(folder), tokenizer, request).generate(request)
print(json.dumps([[a.greedy, a.samples] for a in answers]))
"""

VLLM_RUN = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[1] + "/payloads/export")
sys.path.insert(0, sys.argv[1] + "/tests/support/stand_in_vllm")
import eval_backends
import eval_scoring
from tests.support import tiny_model
tokenizer = tiny_model.build_tokenizer(Path(sys.argv[2]))
rows = [{"prompt": [{"role": "user", "content": "what is 1 plus 2 ?"}]}]
ids = eval_scoring.render_prompts(tokenizer, rows)
request = eval_backends.GenerationRequest(ids, 2, 0.8, 12, 5, 1, top_p=0.9, top_k=20)
answers = eval_backends.VllmGenerator(sys.argv[2], tokenizer, request).generate(request)
expected = tokenizer.decode(list(reversed(ids[0])), skip_special_tokens=True)
print(json.dumps({"answers": [[a.greedy, a.samples] for a in answers], "expected": expected}))
"""


def test_the_vllm_backend_decodes_token_ids_and_samples_as_the_rollout(tmp_path: Path) -> None:
    """With a stand-in for vLLM's API (tests/support/stand_in_vllm: vLLM needs a GPU): the
    answers are the token ids decoded with skip_special_tokens=True, as verl's reward manager
    decodes the response (verl/workers/reward_manager/naive.py), not vLLM's own text; the
    samples get the rollout's top_p and top_k; no progress bar in the job's log."""
    calls = tmp_path / "calls.jsonl"
    proc = subprocess.run(
        [str(verl_python("0.6.1")), "-c", VLLM_RUN, str(REPO), str(tmp_path / "model")],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "STAND_IN_VLLM_CALLS": str(calls)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.splitlines()[-1])
    expected = found["expected"]
    assert "<|im_start|>" not in expected and "what" in expected
    assert found["answers"] == [[expected, [expected, expected]]]
    recorded = [json.loads(line) for line in calls.read_text().splitlines()]
    generate = [call for call in recorded if call["call"] == "generate"]
    assert [call["use_tqdm"] for call in generate] == [False, False]
    assert generate[0]["params"]["temperature"] == 0.0
    sampled = generate[1]["params"]
    assert (sampled["n"], sampled["temperature"], sampled["top_p"], sampled["top_k"]) == (
        2, 0.8, 0.9, 20,
    )  # fmt: skip
    # The seed is the engine's, as verl's rollout sets it (vllm_rollout_spmd.py: LLM(seed=...),
    # SamplingParams from the config's keys except "seed"): one per-request seed would give every
    # prompt the same random stream (vLLM's per-request generator).
    assert "seed" not in sampled and "seed" not in generate[0]["params"]
    assert [call["seed"] for call in recorded if call["call"] == "LLM"] == [5]


# --- the held-out rows, through verl's own RLHFDataset ---------------------------------------

HELD_OUT = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[1] + "/payloads/export")
import pyarrow as pa, pyarrow.parquet as pq
import eval_report
import eval_scoring
from tests.support import tiny_model
root = Path(sys.argv[2])
tokenizer = tiny_model.build_tokenizer(root / "model")
# Qwen3's switch, as its chat template reads it: enable_thinking=False adds to the prompt.
tokenizer.chat_template = tiny_model.CHAT_TEMPLATE.replace(
    "<|im_start|>assistant\\n{% endif %}",
    "<|im_start|>assistant\\n{% if enable_thinking is defined and enable_thinking is false %}"
    "the answer is {% endif %}{% endif %}",
)
# Rendered lengths: <|im_start|> user ... <|im_end|> <|im_start|> assistant: 5 + the words.
texts = ["what", "what is 1 plus 2 plus 3 plus 4 ?", "what is 1 plus 2 ?", "what is 12 ?", "what"]
rows = [
    {"data_source": "own", "prompt": [{"role": "user", "content": text}],
     "reward_model": {"ground_truth": "1"}, "extra_info": {"index": i}}
    for i, text in enumerate(texts)
]
pq.write_table(pa.Table.from_pylist(rows), root / "test.parquet")
found = {}
no_thinking = ["+data.apply_chat_template_kwargs.enable_thinking=False"]
for name, overrides in (("plain", []), ("no_thinking", no_thinking)):
    settings = eval_report.EvalSettings(
        data=str(root / "test.parquet"), prompts=3, samples=0, temperature=1.0,
        max_new_tokens=8, max_prompt_length=11, reward_file=None, reward_name="compute_score",
        chat_template_overrides=overrides,
    )
    held = eval_scoring.held_out_rows(settings, tokenizer, eval_scoring.verl_data_config(settings))
    ids = eval_scoring.render_prompts(tokenizer, held.rows, held.chat_template_kwargs)
    found[name] = {
        "indices": held.indices, "total": held.total, "dropped": held.dropped,
        "kwargs": held.chat_template_kwargs, "lengths": [len(x) for x in ids],
        "contents": [row["prompt"][0]["content"] for row in held.rows],
        "last": tokenizer.decode(ids[0]).split()[-3:],
    }
print(json.dumps(found))
"""


def test_the_held_out_rows_are_those_verls_dataset_keeps(tmp_path: Path) -> None:
    """verl's RLHFDataset with max_prompt_length 11 drops the 15-token prompt (row 1) and keeps
    the one of exactly 11 (row 2); --prompts 3 takes the first three kept, each with its row's
    index; data.apply_chat_template_kwargs from the job's overrides (Qwen3's enable_thinking)
    renders every prompt 3 tokens longer, so two more rows are over."""
    proc = subprocess.run(
        [str(verl_python("0.9.0")), "-c", HELD_OUT, str(REPO), str(tmp_path)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.splitlines()[-1])
    plain, no_thinking = found["plain"], found["no_thinking"]
    assert plain["indices"] == [0, 2, 3] and plain["total"] == 5 and plain["dropped"] == 1
    assert plain["lengths"] == [6, 11, 10] and plain["kwargs"] == {}
    assert plain["contents"] == ["what", "what is 1 plus 2 ?", "what is 12 ?"]
    assert no_thinking["kwargs"] == {"enable_thinking": False}
    assert no_thinking["indices"] == [0, 4] and no_thinking["dropped"] == 3
    assert no_thinking["lengths"] == [9, 9]
    assert no_thinking["last"] == ["the", "answer", "is"]
