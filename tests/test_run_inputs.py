"""verl-gke:dataset, verl-gke:datasetColumns, verl-gke:reward and verl-gke:verlSource: what the
preflight refuses (key, value and a fix that is itself accepted) and what reaches the data-prep Job
and the Ray job. verl's own code reads the results in tests/test_run_inputs_verl.py."""

from __future__ import annotations

import ast
import http.server
import importlib.util
import inspect
import json
import re
import shlex
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from config import run_inputs
from config.settings import StackSettings, load_settings
from manifests import data_prep, fuse_mounts
from tests.data.run_inputs import rewards
from tests.program import REAL, plan
from training import dataset_access
from training.assembly import training_job
from training.grpo_preflight import dataset_limits
from training.grpo_spec import GrpoPreflightError

ROOT = Path(__file__).resolve().parent.parent
REWARDS = "tests/data/run_inputs/rewards.py"
HUB = {
    "verl-gke:dataset": "example-org/arith",
    "verl-gke:datasetColumns": '{"prompt":"q","answer":"a","instruction":"Answer after ####."}',
    "verl-gke:reward": f"{REWARDS}:exact",
}


def settings(stack: str = "a3u", **config: str) -> StackSettings:
    return load_settings(stack, {**REAL, **config}, offline=False).settings


def problems_of(stack: str = "a3u", **config: str) -> str:
    with pytest.raises(ValueError) as caught:
        settings(stack, **config)
    return str(caught.value)


def fix_config(message: str) -> dict[str, str]:
    """Every `pulumi config set KEY VALUE` the message offers, as config."""
    found = re.findall(r"pulumi config set (\S+) (?:'([^']*)'|(\S+)) -s", message)
    return {key: quoted or bare for key, quoted, bare in found}


# --- reward signature: the ast check agrees with Python's own binding of verl's call -----------

# verl calls the function with these keywords only (get_custom_reward_fn's _call_with_kwargs and
# NaiveRewardManager.__call__, verl/trainer/ppo/reward.py and verl/workers/reward_manager/naive.py,
# v0.6.1 and v0.9.0).
VERL_CALL = {name: None for name in run_inputs.REWARD_ARGS}
FUNCTIONS = [
    name
    for name, value in vars(rewards).items()
    if inspect.isfunction(value) and value.__module__ == rewards.__name__
]


@pytest.mark.parametrize("name", FUNCTIONS)
def test_signature_check_agrees_with_pythons_binding_of_verls_call(name: str) -> None:
    try:
        inspect.signature(getattr(rewards, name)).bind(**VERL_CALL)
        binds = True
    except TypeError:
        binds = False
    problems = run_inputs.reward_problems(f"{REWARDS}:{name}", "a3u")
    assert (not problems) == binds, problems
    if problems:
        assert problems[0].startswith(f"verl-gke:reward = '{REWARDS}:{name}': {REWARDS} line ")


def test_a_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "score.py").write_text("def compute_score(a):\n    return (\n")
    [problem] = run_inputs.reward_problems("score.py:compute_score", "a3u", tmp_path)
    with pytest.raises(SyntaxError) as python:
        ast.parse((tmp_path / "score.py").read_text())
    assert f"score.py line {python.value.lineno}: syntax error" in problem
    assert problem.startswith("verl-gke:reward = 'score.py:compute_score'")


def test_a_missing_function_offers_one_the_file_defines() -> None:
    [problem] = run_inputs.reward_problems(f"{REWARDS}:compute_score", "a3u")
    assert "defines no top-level function compute_score" in problem
    fixed = fix_config(problem)["verl-gke:reward"]
    assert run_inputs.reward_problems(fixed, "a3u") == []


@pytest.mark.parametrize(
    "value", ["exact_match.py", "../outside.py:f", "docs/examples/missing.py:f", "a.txt:f"]
)
def test_a_reward_that_is_no_file_of_the_project_is_refused_with_a_working_fix(value: str) -> None:
    message = problems_of(**{"verl-gke:reward": value})
    assert f"verl-gke:reward = '{value}'" in message
    assert settings(**fix_config(message)).reward == run_inputs.REWARD_EXAMPLE


# --- dataset and columns ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "columns",
    [
        "{",
        "[1]",
        '{"prompt":"q"}',
        '{"prompt":"q","answer":"a","split":"x"}',
        '{"prompt":1,"answer":"a"}',
    ],
)
def test_a_bad_column_mapping_is_refused_with_a_working_fix(columns: str) -> None:
    message = problems_of(**{**HUB, "verl-gke:datasetColumns": columns})
    assert f"verl-gke:datasetColumns = {columns!r}" in message
    assert settings(**{**HUB, **fix_config(message)}).dataset_columns is not None


def test_a_hub_dataset_without_columns_or_reward_gets_both_in_one_fix() -> None:
    message = problems_of(**{"verl-gke:dataset": "example-org/arith"})
    fix = fix_config(message)
    assert set(fix) == {"verl-gke:datasetColumns", "verl-gke:reward"}
    chosen = settings(**{"verl-gke:dataset": "example-org/arith", **fix})
    assert run_inputs.dataset_of(chosen).kind == "hub"


def test_a_hub_dataset_verl_cannot_score_needs_a_reward() -> None:
    config = {k: v for k, v in HUB.items() if k != "verl-gke:reward"}
    message = problems_of(**config)
    assert "NotImplementedError" in message
    assert settings(**{**config, **fix_config(message)}).reward == run_inputs.REWARD_EXAMPLE


@pytest.mark.parametrize(
    "path", ["./data/math.parquet", "/home/me/math/", "~/math.jsonl", "C:\\data\\math.csv",
             "data/math.parquet"],
)  # fmt: skip
def test_a_local_path_is_refused_with_the_bucket_folder_not_the_tutorial_s_dataset(
    path: str,
) -> None:
    config = {"verl-gke:dataset": path, "verl-gke:datasetColumns": '{"prompt":"problem",'
              '"answer":"answer"}', "verl-gke:reward": f"{REWARDS}:exact"}  # fmt: skip
    message = problems_of(**config)
    assert f"verl-gke:dataset = {path!r}: a path of this machine, which the pods cannot" in message
    assert "openai/gsm8k" not in message and "docs/own-run.md" in message
    bucket = settings().bucket_name
    assert f"gcloud storage cp train.parquet test.parquet gs://{bucket}/math/" in message
    # The fix: that folder, and no column mapping (a bucket folder is already verl's format).
    assert "pulumi config rm verl-gke:datasetColumns -s a3u" in message
    fixed = {**config, **fix_config(message)}
    del fixed["verl-gke:datasetColumns"]
    assert run_inputs.dataset_of(settings(**fixed)).folder == "/data/math"


# openai/gsm8k's columns are question and answer (verl's examples/data_preprocess/gsm8k.py at
# v0.6.1 pops example["question"] and example["answer"] from the "main" configuration).
def test_a_gsm8k_mapping_naming_a_column_it_lacks_is_corrected_not_accepted() -> None:
    config = {
        "verl-gke:dataset": "openai/gsm8k",
        "verl-gke:datasetColumns": '{"prompt":"problem","answer":"answer","subset":"main"}',
        "verl-gke:reward": f"{REWARDS}:exact",
    }
    message = problems_of(**config)
    assert "openai/gsm8k has no column ['problem'] (its columns: question, answer)" in message
    fixed = settings(**{**config, **fix_config(message)})
    assert json.loads(fixed.dataset_columns or "") == {
        "prompt": "question", "answer": "answer", "subset": "main"
    }  # fmt: skip


def test_a_gsm8k_mapping_without_a_reward_gets_one_fix_that_is_accepted() -> None:
    # The corrected mapping alone would be refused next: verl's gsm8k score needs the number
    # verl's own preprocessing takes out of the answer column (verl/utils/reward_score/gsm8k.py,
    # v0.6.1), so the fix sets the reward too.
    config = {
        "verl-gke:dataset": "openai/gsm8k",
        "verl-gke:datasetColumns": '{"prompt":"problem","answer":"answer"}',
    }
    message = problems_of(**config)
    assert "openai/gsm8k has no column ['problem']" in message
    fixed = settings(**{**config, **fix_config(message)})
    assert json.loads(fixed.dataset_columns or "") == {"prompt": "question", "answer": "answer"}
    assert fixed.reward == run_inputs.REWARD_EXAMPLE


def test_a_bare_dataset_name_gets_the_id_it_names_and_an_unknown_one_the_form() -> None:
    assert "Fix: pulumi config set verl-gke:dataset 'openai/gsm8k'" in problems_of(
        **{"verl-gke:dataset": "gsm8k"}
    )
    message = problems_of(**{"verl-gke:dataset": "my_math"})
    assert "openai/gsm8k" not in message and "huggingface.co/datasets/OWNER/NAME" in message


# verl's built-in scores for these compare with an answer its own preprocessing takes out of the
# answer column: gsm8k the number after '####' (verl/utils/reward_score/gsm8k.py,
# examples/data_preprocess/gsm8k.py), MATH the boxed answer alone (math_reward.py,
# examples/data_preprocess/math_dataset.py). A raw column scores 0 on every response.
RAW_COLUMNS = {
    "openai/gsm8k": '{"prompt":"question","answer":"answer","subset":"main"}',
    "lighteval/MATH": '{"prompt":"problem","answer":"solution"}',
    "DigitalLearningGmbH/MATH-lighteval": '{"prompt":"problem","answer":"solution"}',
}


@pytest.mark.parametrize("dataset", sorted(RAW_COLUMNS))
def test_a_raw_answer_column_verl_would_score_zero_is_refused_with_working_fixes(
    dataset: str,
) -> None:
    config = {"verl-gke:dataset": dataset, "verl-gke:datasetColumns": RAW_COLUMNS[dataset]}
    message = problems_of(**config)
    assert f"verl-gke:datasetColumns = {RAW_COLUMNS[dataset]!r}" in message
    assert f"verl-gke:dataset = {dataset!r} and no verl-gke:reward" in message
    assert "verl/utils/reward_score/" in message and "score 0" in message
    fixed = settings(**{**config, **fix_config(message)})
    assert fixed.reward == run_inputs.REWARD_EXAMPLE
    if dataset == "openai/gsm8k":
        assert "pulumi config rm verl-gke:datasetColumns" in message
        kept = {k: v for k, v in config.items() if k != "verl-gke:datasetColumns"}
        assert run_inputs.dataset_of(settings(**kept)).kind == "gsm8k"
    else:  # without columns, the fix still carries the reward
        message = problems_of(**{"verl-gke:dataset": dataset})
        fixed = settings(**{"verl-gke:dataset": dataset, **fix_config(message)})
        assert fixed.reward == run_inputs.REWARD_EXAMPLE


def test_math_500s_answer_column_is_the_final_answer_verl_scores() -> None:
    # HuggingFaceH4/MATH-500's `answer` column holds the final answer alone.
    columns = '{"prompt":"problem","answer":"answer","trainSplit":"test"}'
    chosen = settings(
        **{"verl-gke:dataset": "HuggingFaceH4/MATH-500", "verl-gke:datasetColumns": columns}
    )
    assert chosen.reward is None and run_inputs.dataset_of(chosen).kind == "hub"


def _exact_match() -> object:
    spec = importlib.util.spec_from_file_location(
        "exact_match", ROOT / "docs/examples/exact_match.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("truth", "right", "wrong"),
    [
        ("She sold 48/2 = 24 clips.\n#### 1,072", "So #### 1072", "#### 1070"),
        ("Thus $x = \\boxed{\\frac{1}{2}}$.", "\\boxed{\\frac{1}{2}}", "\\boxed{\\frac{1}{3}}"),
        ("4.5", "Half of 9 is 4.5.", "Half of 9 is 4."),
    ],
)
def test_the_offered_reward_scores_a_raw_gsm8k_or_math_answer_column(
    truth: str, right: str, wrong: str
) -> None:
    # The fix offered above for a raw GSM8K answer or MATH solution column must not score 0.
    score = _exact_match().compute_score  # type: ignore[attr-defined]
    assert score("d", right, truth) == 1.0 and score("d", wrong, truth) == 0.0


def test_a_parquet_folder_without_a_reward_sends_verls_scored_sources_to_data_prep() -> None:
    folder = f"gs://{settings().bucket_name}/mine"
    command = _data_prep_command(settings(**{"verl-gke:dataset": folder}))
    flag = dict(zip(command, [*command[1:], ""], strict=True))
    assert flag["--scored-sources"].split(",") == list(run_inputs.VERL_SCORED_SOURCES)
    assert flag["--scored-prefixes"].split(",") == list(run_inputs.VERL_SCORED_PREFIXES)
    with_reward = _data_prep_command(
        settings(**{"verl-gke:dataset": folder, "verl-gke:reward": run_inputs.REWARD_EXAMPLE})
    )
    assert "--scored-sources" not in with_reward and "--check-dataset" in with_reward


def test_columns_without_a_hub_dataset_are_refused() -> None:
    bucket = settings().bucket_name
    config = {"verl-gke:dataset": f"gs://{bucket}/mine", "verl-gke:datasetColumns": HUB[
        "verl-gke:datasetColumns"]}  # fmt: skip
    message = problems_of(**config)
    assert (
        "verl-gke:datasetColumns = " in message and "pulumi config rm verl-gke:dataset" in message
    )
    assert run_inputs.dataset_of(settings(**{"verl-gke:dataset": config["verl-gke:dataset"]}))


@pytest.mark.parametrize(
    "folder", ["gs://another-bucket/x", "gs://{bucket}/verl/x", "gs://{bucket}/../x"]
)
def test_a_parquet_folder_must_be_a_plain_folder_of_the_stacks_bucket(folder: str) -> None:
    value = folder.format(bucket=settings().bucket_name)
    message = problems_of(**{"verl-gke:dataset": value})
    assert f"verl-gke:dataset = {value!r}" in message
    assert run_inputs.dataset_of(settings(**fix_config(message))).kind == "bucket"


def test_image_verl_and_a_verl_ref_are_refused_together() -> None:
    message = problems_of(**{"verl-gke:verlSource": "image", "verl-gke:verlRef": "v0.5.0"})
    assert (
        "verl-gke:verlRef = 'v0.5.0'" in message and "pulumi config rm verl-gke:verlRef" in message
    )
    assert settings(**{"verl-gke:verlSource": "image"}).verl_source == "image"


# --- what reaches the data-prep Job and the Ray job ---------------------------------------------


def _data_prep_command(s: StackSettings) -> list[str]:
    return data_prep.command(s, dataset_limits(training_job(s).spec))


def _argv(s: StackSettings) -> dict[str, str]:
    args = shlex.split(training_job(s).entrypoint.split(" -- ", 1)[1])
    return dict(a.split("=", 1) for a in args if "=" in a)


@pytest.mark.parametrize("stack", ["a3u", "a4x"])
def test_an_own_run_reaches_the_job_and_the_data_prep_job(stack: str) -> None:
    s = settings(stack, **HUB)
    dataset, reward = run_inputs.dataset_of(s), run_inputs.reward_of(s)
    assert reward is not None
    args = _argv(s)
    assert args["data.train_files"] == f"{dataset.folder}/train.parquet"
    assert args["data.val_files"] == f"{dataset.folder}/test.parquet"
    key = run_inputs.REWARD_CONFIG_KEY[s.profile.verl_ref]
    assert args[f"{key}.path"] == reward.mounted_path and args[f"{key}.name"] == "exact"
    command = _data_prep_command(s)
    flag = dict(zip(command, [*command[1:], ""], strict=True))
    assert flag["--dataset"] == "example-org/arith"
    assert json.loads(flag["--dataset-columns"])["prompt"] == "q"
    assert flag["--dataset-dir"] == dataset.folder
    assert flag["--reward-dest"] == reward.mounted_path
    configmap = data_prep.script_configmap(s, {"prepare_data.py": "script"})
    assert configmap["data"][data_prep.REWARD_KEY] == (ROOT / REWARDS).read_text()
    job = data_prep.data_prep_job(
        s, dataset_limits(training_job(s).spec), {"prepare_data.py": "script"}, "cpu-pool"
    )
    volumes = job["spec"]["template"]["spec"]["volumes"]
    assert {"name": configmap["metadata"]["name"]} in [v.get("configMap") for v in volumes]


def test_a_changed_reward_file_is_a_new_job_and_a_new_data_prep_job(tmp_path: Path) -> None:
    # The Ray job's submission id hashes the entrypoint (jobs/job_inputs.py), where the mounted
    # path is; the data-prep Job's ConfigMap name follows the file's content.
    source = inspect.getsource(rewards.exact)
    chosen, names = [], []
    for text in (source, source.replace("float", "int")):
        (tmp_path / "score.py").write_text(text)
        chosen.append(run_inputs.reward_choice("score.py:exact", tmp_path).mounted_path)
        names.append(data_prep.script_configmap_name(data_prep.read_scripts(), text))
    assert chosen[0] != chosen[1] and names[0] != names[1]


def test_extra_overrides_cannot_bypass_the_reward_setting() -> None:
    job = json.dumps({"extraOverrides": ["custom_reward_function.path=/data/x.py"]})
    with pytest.raises(GrpoPreflightError) as caught:
        training_job(settings(**{"verl-gke:job": job}))
    assert "verl-gke:reward" in str(caught.value)


def test_a_parquet_folder_is_read_in_place_and_checked_by_data_prep() -> None:
    bucket = settings().bucket_name
    s = settings(**{"verl-gke:dataset": f"gs://{bucket}/my/set"})
    assert _argv(s)["data.train_files"] == "/data/my/set/train.parquet"
    command = _data_prep_command(s)
    assert command[command.index("--check-dataset") + 1] == "/data/my/set"


def test_image_verl_drops_the_checkout_everywhere() -> None:
    s = settings(**{"verl-gke:verlSource": "image"})
    job = training_job(s)
    assert "PYTHONPATH" not in job.runtime_env["env_vars"]
    assert fuse_mounts.verl_copy_containers(s) == []
    command = _data_prep_command(s)
    assert "--verl-from-image" in command and "--verl-ref" not in command
    assert any("verlRef is not used" in line for line in run_inputs.plan_lines(s))


def test_the_tutorials_run_has_no_run_input_arguments() -> None:
    s = settings()
    assert data_prep.run_input_args(s) == []
    assert "PYTHONPATH" in training_job(s).runtime_env["env_vars"]
    assert not any("custom_reward_function" in a for a in _argv(s))


# --- the Hub's access check (during pulumi up) --------------------------------------------------


class _Hub(http.server.BaseHTTPRequestHandler):
    """The Hub's auth-check answers: 200, or 401/403/404 with the X-Error-Code header
    huggingface_hub reads (utils/_http.py hf_raise_for_status: GatedRepo, RepoNotFound), and the
    401 with X-Error-Message "Invalid credentials in Authorization header" it reads as a refused
    token rather than a missing repository (same function, 0.36.2 and 1.33.0)."""

    answers: dict[str, tuple[int, str | None]] = {
        "/api/datasets/open/set/auth-check": (200, None),
        "/api/datasets/gated/set/auth-check": (403, "GatedRepo"),
        "/api/datasets/private/set/auth-check": (401, "RepoNotFound"),
    }
    seen: list[str | None] = []

    def do_GET(self) -> None:
        status, code = self.answers.get(self.path, (404, "RepoNotFound"))
        _Hub.seen.append(self.headers.get("Authorization"))
        if self.headers.get("Authorization") == "Bearer hf_unknown":
            status, code = 401, None
        self.send_response(status)
        if code:
            self.send_header("X-Error-Code", code)
        if status == 401 and code is None:
            self.send_header("X-Error-Message", "Invalid credentials in Authorization header")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def hub() -> Iterator[str]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.mark.parametrize(
    ("dataset", "refused"),
    [("open/set", None), ("gated/set", "accept them at"), ("private/set", "no dataset"),
     ("missing/set", "no dataset")],
)  # fmt: skip
def test_the_hub_access_check_refuses_gated_and_unknown_datasets(
    hub: str, dataset: str, refused: str | None
) -> None:
    problems, notes = dataset_access.access_problems(dataset, "hf_x", "a3u", hub=hub)
    assert _Hub.seen[-1] == "Bearer hf_x"
    if refused is None:
        assert problems == [] and notes == []
    else:
        [problem] = problems
        assert problem.startswith(f"verl-gke:dataset = '{dataset}'") and refused in problem
        assert f"{hub}/datasets/{dataset}" in problem or "openai/gsm8k" in problem


def test_a_token_the_hub_refuses_is_named_as_the_token_not_the_dataset(hub: str) -> None:
    # The fix must not be another dataset id: openai/gsm8k is refused the same way.
    for dataset in ("open/set", "openai/gsm8k"):
        [problem], _ = dataset_access.access_problems(dataset, "hf_unknown", "a3u", hub=hub)
        assert problem.startswith("verl-gke:hfToken: the Hub refuses the token")
        assert "pulumi config set --secret verl-gke:hfToken" in problem
        assert "verl-gke:dataset" not in problem


def test_pulumi_up_stops_on_a_refused_dataset_before_any_resource() -> None:
    # __main__.py calls check_stack_access outside a preview, before the first resource.
    from config.settings import SettingsError

    def gated(url: str, token: str) -> tuple[int, str | None, str | None]:
        return 403, "GatedRepo", None

    warned: list[str] = []
    with pytest.raises(SettingsError) as caught:
        dataset_access.check_stack_access(settings(**HUB), warned.append, get=gated)
    assert "verl-gke:dataset = 'example-org/arith'" in str(caught.value)
    dataset_access.check_stack_access(
        settings(**HUB), warned.append, get=lambda u, t: (200, None, None)
    )
    assert warned == []


def test_an_unreachable_hub_leaves_access_unchecked() -> None:
    def down(url: str, token: str) -> tuple[int, str | None, str | None]:
        raise OSError("connection refused")

    problems, notes = dataset_access.access_problems("a/b", "hf_x", "a3u", get=down)
    assert problems == [] and "unchecked" in notes[0]


# --- payloads/data_prep: the steps the Job runs ------------------------------------------------


def _steps(*args: str) -> list[str]:
    from payloads.data_prep import prepare_data

    base = ["--data-root", "/tmp/d", "--model", "o/m", "--model-folder", "m"]
    parsed = prepare_data.parse_args([*base, *args])
    return [name for name, _ in prepare_data.run_steps(parsed, Path("/tmp/d"), "hub", None)]


def test_the_tutorials_steps_are_unchanged_and_image_verl_makes_no_checkout() -> None:
    # The model's files but its weights (what the rehearsal reads) before the weights.
    assert _steps("--verl-ref", "v0.6.1") == ["verl", "gsm8k", "model-files", "model"]
    assert _steps("--verl-from-image") == ["dataset", "model-files", "model"]
    assert _steps("--verl-from-image", "--reward-file", "/s/r.py", "--reward-dest", "/d/r.py") == [
        "reward", "dataset", "model-files", "model"]  # fmt: skip
    # The data-prep Jobs' parts: the weights Job runs the weights alone.
    assert _steps("--verl-ref", "v0.6.1", "--part", "inputs") == ["verl", "gsm8k", "model-files"]
    assert _steps("--verl-ref", "v0.6.1", "--part", "weights") == ["model"]


@pytest.mark.parametrize(
    "args",
    [[], ["--verl-ref", "v1", "--dataset", "a/b"], ["--verl-ref", "v1", "--reward-file", "/r.py"]],
)
def test_incomplete_run_input_arguments_are_refused(args: list[str]) -> None:
    with pytest.raises(SystemExit):
        _steps(*args)


def test_the_reward_file_reaches_the_path_the_command_names(tmp_path: Path) -> None:
    # A configMap volume projects each key as a file of that name under the mountPath
    # (Kubernetes, "Configure a Pod to Use a ConfigMap"): the command's --reward-file is that file.
    from payloads.data_prep import prep_dataset

    s = settings(**HUB)
    job = data_prep.data_prep_job(
        s, dataset_limits(training_job(s).spec), {"prepare_data.py": "script"}, "cpu-pool"
    )
    container = job["spec"]["template"]["spec"]["containers"][0]
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "script"]
    configmap = data_prep.script_configmap(s, {"prepare_data.py": "script"})
    command = container["command"]
    assert command[command.index("--reward-file") + 1] == (
        f"{mount['mountPath']}/{next(k for k in configmap['data'] if k.endswith('reward.py'))}"
    )
    source = tmp_path / "reward.py"
    source.write_text(configmap["data"][data_prep.REWARD_KEY])
    dest = tmp_path / command[command.index("--reward-dest") + 1].lstrip("/")
    for _ in range(2):  # a retried Job finds it done
        prep_dataset.copy_reward(source, dest)
    assert dest.read_text() == (ROOT / REWARDS).read_text()


def test_gsm8k_rows_from_the_image_follow_verls_gsm8k_preprocessing() -> None:
    # verl's examples/data_preprocess/gsm8k.py: the question plus its instruction as one user
    # message, ability "math", the number after "#### " without commas as the ground truth, and
    # extra_info {split, index, answer, question}.
    from payloads.data_prep import prep_dataset, prep_gsm8k

    columns = {**prep_gsm8k.GSM8K_COLUMNS, "instruction": prep_gsm8k.GSM8K_INSTRUCTION,
               "answerFormat": "gsm8k"}  # fmt: skip
    example = {"question": "Q?", "answer": "work\n#### 1,234"}
    row = prep_dataset.hub_rows(example, 7, "test", "openai/gsm8k", columns)
    assert row == {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "user", "content": f"Q? {prep_gsm8k.GSM8K_INSTRUCTION}"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "1234"},
        "extra_info": {"split": "test", "index": 7, "answer": "work\n#### 1,234", "question": "Q?"},
    }


@pytest.mark.parametrize("verl_source", ["checkout", "image"])
def test_ray_pods_copy_the_checkout_only_when_verl_comes_from_it(verl_source: str) -> None:
    # The copy waits for data prep's verl marker, which an image run never writes: it would
    # hold every Ray pod in Init for good.
    result = plan("a3u", "standard", **{"verl-gke__verlSource": verl_source})
    [cluster] = [r.inputs for r in result.resources if r.type == "kubernetes:ray.io/v1:RayCluster"]
    spec = cluster["spec"]
    pods = [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
    copies = [
        c["name"]
        for pod in pods
        for c in pod["template"]["spec"].get("initContainers", [])
        if c["name"] == fuse_mounts.VERL_COPY_CONTAINER
    ]
    assert len(copies) == (len(pods) if verl_source == "checkout" else 0)
