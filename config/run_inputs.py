"""The run's own inputs: the dataset (`verl-gke:dataset`, `verl-gke:datasetColumns`), the reward
function (`verl-gke:reward`) and where verl comes from (`verl-gke:verlSource`).

Each is resolved into a frozen choice the manifests and the job spec read, and checked before
anything exists: every problem names the key, the value and a fix that is itself accepted.

Pure apart from reading the reward file (parsed with `ast`, never imported).
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from config.bucket_layout import (
    CHECKPOINT_PREFIX,
    DATA_MOUNT,
    DATASETS_ROOT,
    GSM8K_TEST,
    GSM8K_TRAIN,
    PREP_MARKERS,
    REWARDS_ROOT,
    VERL_CHECKOUTS,
    model_folder_name,
)


class StackSettings(Protocol):
    """The fields of config.settings.StackSettings read here (that module imports this one)."""

    stack: str
    bucket_name: str
    dataset: str
    dataset_columns: str | None
    reward: str | None
    verl_source: str
    verl_ref: str
    verl_image: str

    @property
    def profile(self) -> _Profile: ...


class _Profile(Protocol):
    verl_ref: str


NAMESPACE = "verl-gke"
DATASET_KEY = f"{NAMESPACE}:dataset"
COLUMNS_KEY = f"{NAMESPACE}:datasetColumns"
REWARD_KEY = f"{NAMESPACE}:reward"
VERL_SOURCE_KEY = f"{NAMESPACE}:verlSource"
VERL_REF_KEY = f"{NAMESPACE}:verlRef"

DEFAULT_DATASET = "openai/gsm8k"
# Where the program's own files are: a reward file path is relative to it (Pulumi runs the
# program with this folder as its working directory).
PROJECT_DIR = Path(__file__).resolve().parent.parent

# data_source values verl's default_compute_score scores without a custom function, by the score
# module each goes to (verl/utils/reward_score/__init__.py; the function is the same at v0.6.1 and
# v0.9.0). Any other data_source raises NotImplementedError at the first reward, after the GPUs are
# up. A Hub dataset's rows carry its id as data_source, so one not scored here needs
# verl-gke:reward. tests/test_run_inputs_verl.py checks this table against verl's own function.
VERL_SCORED: dict[str, tuple[str, ...]] = {
    "gsm8k": ("openai/gsm8k",),
    "math_reward": ("lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval",
                    "HuggingFaceH4/MATH-500"),
    "math_dapo": ("math_dapo", "math", "math_dapo_reasoning"),
    "prime_math": ("numina_aops_forum", "numina_synthetic_math", "numina_amc_aime",
                   "numina_synthetic_amc", "numina_cn_k12", "numina_olympiads"),
    "prime_code": ("codecontests", "apps", "codeforces", "taco"),  # sandbox_fusion if configured
    "geo3k": ("hiyouga/geometry3k",),
    "search_r1_like_qa_em": ("searchR1_nq", "searchR1_triviaqa", "searchR1_popqa",
                             "searchR1_hotpotqa", "searchR1_2wikimultihopqa", "searchR1_musique",
                             "searchR1_bamboogle"),
}  # fmt: skip
# ... and every data_source starting with these (data_source.startswith("aime"): math_dapo).
VERL_SCORED_PREFIXES = ("aime",)
VERL_SCORED_SOURCES = tuple(source for sources in VERL_SCORED.values() for source in sources)


def verl_scores(data_source: str) -> bool:
    """Whether verl's default_compute_score has a score for this data_source."""
    return data_source in VERL_SCORED_SOURCES or data_source.startswith(VERL_SCORED_PREFIXES)


# Built-in scores that compare with an answer taken out of the dataset's answer column by verl's
# own preprocessing: mapped raw through datasetColumns, every response scores 0.
_MATH_WHY = (
    "verl's math score compares the response's last \\boxed{} answer with the ground truth, which "
    "must be the boxed answer alone (verl/utils/reward_score/math_reward.py; verl's "
    "examples/data_preprocess/math_dataset.py extracts it), but the solution column holds the "
    "whole worked solution"
)
EXTRACTED_ANSWER = {
    "openai/gsm8k": (
        "verl's gsm8k score compares the number after '#### ' in the response with the ground "
        "truth (verl/utils/reward_score/gsm8k.py), which verl's examples/data_preprocess/gsm8k.py "
        "takes out of the answer column; the raw answer column (the worked solution) never matches"
    ),
    "lighteval/MATH": _MATH_WHY,
    "DigitalLearningGmbH/MATH-lighteval": _MATH_WHY,
}

# verl's custom reward call: compute_score(data_source=..., solution_str=..., ground_truth=...,
# extra_info=..., **reward_kwargs), all by keyword (NaiveRewardManager.__call__ through
# get_custom_reward_fn's _call_with_kwargs, verl/trainer/ppo/reward.py v0.6.1 and v0.9.0).
REWARD_ARGS = ("data_source", "solution_str", "ground_truth", "extra_info")

# Where verl's config holds the custom reward function. v0.6.1 reads the top-level
# custom_reward_function (verl/trainer/ppo/reward.py get_custom_reward_fn). v0.9.0 and ddbcdb7
# (the A4X ref) read reward.custom_reward_function, and the top-level key is legacy: only the
# fully-async entrypoint migrates it (verl/experimental/reward_loop/reward_loop.py
# migrate_legacy_reward_impl), so main_ppo would ignore a function passed there. v0.9.0 is listed
# for a stack whose profile pins v0.6.1 but whose verlRef is set to v0.9.0.
REWARD_CONFIG_KEY = {
    "v0.6.1": "custom_reward_function",
    "v0.9.0": "reward.custom_reward_function",
    "ddbcdb7": "reward.custom_reward_function",
}


# A release tag from 0.9.0 on reads the reward key 0.9.0 reads (reward/reward.yaml in the 0.9.0
# wheel); v0.7.0 and the 0.8.0.dev main of 2026-01 still read the top-level key
# (verl/trainer/ppo/reward.py get_custom_reward_fn at those commits).
_RELEASE_TAG = re.compile(r"v(\d+)\.(\d+)\.(\d+)")
_NESTED_REWARD_SINCE = (0, 9, 0)


def reward_config_key(verl_ref: str, profile_ref: str) -> str:
    """REWARD_CONFIG_KEY at the stack's ref; a later release tag: 0.9.0's key; any other ref
    (a commit, an 0.8 tag): the profile's ref's key."""
    if verl_ref in REWARD_CONFIG_KEY:
        return REWARD_CONFIG_KEY[verl_ref]
    tag = _RELEASE_TAG.fullmatch(verl_ref)
    if tag and tuple(int(n) for n in tag.groups()) >= _NESTED_REWARD_SINCE:
        return REWARD_CONFIG_KEY["v0.9.0"]
    return REWARD_CONFIG_KEY[profile_ref]


VerlSource = Literal["checkout", "image"]
VERL_SOURCES: tuple[str, ...] = ("checkout", "image")

_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")
_GS_FOLDER = re.compile(r"gs://(?P<bucket>[a-z0-9][a-z0-9._-]{1,220})/(?P<folder>[A-Za-z0-9_./-]+)")
_COLUMN = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_REWARD = re.compile(r"(?P<file>[A-Za-z0-9_./-]+\.py):(?P<function>[A-Za-z_][A-Za-z0-9_]*)")
COLUMN_KEYS = ("prompt", "answer", "trainSplit", "testSplit", "subset", "instruction")
# A path of the user's machine (absolute, ./ ../ ~, a Windows drive, or a data file's name): the
# pods cannot read it.
_LOCAL_PATH = re.compile(
    r"(?:/|~|\.{1,2}/|[A-Za-z]:[\\/]).*|.*\.(?:parquet|jsonl?|csv|arrow|txt)/?", re.IGNORECASE
)
# The columns of Hub datasets known without the network, by the role each plays. openai/gsm8k
# (configurations main and socratic): question and answer, the two verl's
# examples/data_preprocess/gsm8k.py (v0.6.1) pops from each row. Other datasets' columns are
# checked by the data-prep Job, which fails naming the columns the split has
# (payloads/data_prep/prep_dataset.py prepare_hub_dataset).
KNOWN_COLUMNS: dict[str, dict[str, str]] = {
    "openai/gsm8k": {"prompt": "question", "answer": "answer"}
}
COLUMNS_EXAMPLE = '{"prompt":"question","answer":"answer"}'
# A reward file the repository carries, so a fix that names it is accepted as it stands.
REWARD_EXAMPLE = "docs/examples/exact_match.py:compute_score"


@dataclass(frozen=True)
class DatasetColumns:
    prompt: str
    answer: str
    train_split: str = "train"
    test_split: str = "test"
    subset: str | None = None  # the Hub dataset's configuration (`name` of load_dataset)
    instruction: str | None = None  # appended to each prompt after one space

    def as_json(self) -> str:
        values = {
            "prompt": self.prompt,
            "answer": self.answer,
            "trainSplit": self.train_split,
            "testSplit": self.test_split,
            "subset": self.subset,
            "instruction": self.instruction,
        }
        kept = {key: value for key, value in values.items() if value is not None}
        return json.dumps(kept, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class DatasetChoice:
    """kind: gsm8k (verl's own preprocessing), hub (a Hub dataset through a column mapping) or
    bucket (parquet already in verl's format in a folder of the stack's bucket)."""

    kind: Literal["gsm8k", "hub", "bucket"]
    dataset: str
    folder: str  # mounted folder holding train.parquet and test.parquet
    columns: DatasetColumns | None = None

    @property
    def train_files(self) -> str:
        return GSM8K_TRAIN if self.kind == "gsm8k" else f"{self.folder}/train.parquet"

    @property
    def val_files(self) -> str:
        return GSM8K_TEST if self.kind == "gsm8k" else f"{self.folder}/test.parquet"


@dataclass(frozen=True)
class RewardChoice:
    file: str  # relative to PROJECT_DIR
    function: str
    sha256: str
    line: int

    @property
    def mounted_path(self) -> str:
        """custom_reward_function.path: the copy the data-prep Job writes; the name follows the
        content, so a changed file is a changed job (the submission id hashes the entrypoint)."""
        return f"{REWARDS_ROOT}/{self.sha256[:16]}/{Path(self.file).name}"

    def source(self, project_dir: Path = PROJECT_DIR) -> str:
        return (project_dir / self.file).read_text()


# --- parsing ------------------------------------------------------------------------------------


# One `role:column` or `role=column` pair of a mapping typed without JSON's braces and quotes.
_COLUMN_PAIR = re.compile(
    r"""\s*["']?(?P<role>\w+)["']?\s*[:=]\s*["']?(?P<column>[^"',]+?)["']?\s*"""
)


def _columns_meant(text: str) -> str:
    """The mapping a refused `verl-gke:datasetColumns` most likely meant, as JSON text: the
    user's own pairs (JSON, or `prompt:problem,answer:answer`), a role it lacks from
    COLUMNS_EXAMPLE; COLUMNS_EXAMPLE itself where the pairs are still refused."""
    pairs: dict[str, str] = {}
    with contextlib.suppress(json.JSONDecodeError):
        raw = json.loads(text)
        if isinstance(raw, dict):
            pairs = {str(k): v for k, v in raw.items() if isinstance(v, str)}
    if not pairs:
        for part in text.strip().strip("{}").split(","):
            match = _COLUMN_PAIR.fullmatch(part)
            if match is None:
                return COLUMNS_EXAMPLE
            pairs[match["role"]] = match["column"]
    meant = json.dumps({**json.loads(COLUMNS_EXAMPLE), **pairs}, separators=(",", ":"))
    return meant if parse_columns(meant)[0] is not None else COLUMNS_EXAMPLE


def parse_columns(text: str) -> tuple[DatasetColumns | None, str | None]:
    """(columns, None) or (None, why) for the JSON text of verl-gke:datasetColumns."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as error:
        return None, f"not JSON ({error.msg} at character {error.pos})"
    if not isinstance(raw, dict):
        return None, "not a JSON object"
    unknown = sorted(set(raw) - set(COLUMN_KEYS))
    if unknown:
        return None, f"unknown key(s) {unknown}; the keys are {list(COLUMN_KEYS)}"
    missing = [key for key in ("prompt", "answer") if key not in raw]
    if missing:
        return None, f"missing {missing}: prompt and answer name the dataset's columns"
    for key, value in raw.items():
        if not isinstance(value, str) or not value.strip():
            return None, f"{key} must be a non-empty string, got {value!r}"
        if key != "instruction" and not _COLUMN.fullmatch(value):
            return None, f"{key} = {value!r} is not a column, split or subset name"
    return (
        DatasetColumns(
            prompt=raw["prompt"],
            answer=raw["answer"],
            train_split=raw.get("trainSplit", "train"),
            test_split=raw.get("testSplit", "test"),
            subset=raw.get("subset"),
            instruction=raw.get("instruction"),
        ),
        None,
    )


def dataset_choice(dataset: str, columns_text: str | None) -> DatasetChoice:
    """The dataset the stack's settings name (valid settings: dataset_problems is empty)."""
    gs = _GS_FOLDER.fullmatch(dataset)
    if gs is not None:
        return DatasetChoice("bucket", dataset, f"{DATA_MOUNT}/{gs['folder'].strip('/')}")
    if dataset == DEFAULT_DATASET and columns_text is None:
        return DatasetChoice("gsm8k", dataset, GSM8K_TRAIN.rsplit("/", 1)[0])
    columns, _ = parse_columns(columns_text or "")
    assert columns is not None
    digest = hashlib.sha256(f"{dataset}\n{columns.as_json()}".encode()).hexdigest()[:8]
    folder = f"{DATASETS_ROOT}/{model_folder_name(dataset)}-{digest}"
    return DatasetChoice("hub", dataset, folder, columns)


def reward_choice(reward: str, project_dir: Path = PROJECT_DIR) -> RewardChoice:
    """The reward setting's file and function (valid settings: reward_problems is empty)."""
    match = _REWARD.fullmatch(reward)
    assert match is not None
    data = (project_dir / match["file"]).read_bytes()
    tree = ast.parse(data)
    node = _function(tree, match["function"])
    assert node is not None
    return RewardChoice(
        match["file"], match["function"], hashlib.sha256(data).hexdigest(), node.lineno
    )


# --- checks ---------------------------------------------------------------------------------


def _fix(key: str, value: str, stack: str) -> str:
    return f"pulumi config set {key} '{value}' -s {stack}"


def dataset_problems(
    dataset: str, columns_text: str | None, reward: str | None, bucket: str, stack: str
) -> list[str]:
    gs = _GS_FOLDER.fullmatch(dataset)
    if dataset.startswith("gs://"):
        return _bucket_dataset_problems(dataset, gs, columns_text, bucket, stack)
    if _LOCAL_PATH.fullmatch(dataset):
        return [_local_path_problem(dataset, columns_text, bucket, stack)]
    if not _HUB_ID.fullmatch(dataset):
        return [_not_an_id_problem(dataset, bucket, stack)]
    if columns_text is None:
        if dataset == DEFAULT_DATASET:
            return []
        also = ""
        if reward is None and (not verl_scores(dataset) or dataset in EXTRACTED_ANSWER):
            why = "expects an extracted answer" if verl_scores(dataset) else "has none for it"
            also = f" and {_fix(REWARD_KEY, REWARD_EXAMPLE, stack)} (verl's built-in score {why})"
        return [
            f"{DATASET_KEY} = {dataset!r}: the data-prep Job needs to know which columns hold "
            f"the prompt and the answer. Fix: {_fix(COLUMNS_KEY, COLUMNS_EXAMPLE, stack)} "
            f"(your column names){also}"
        ]
    columns, why = parse_columns(columns_text)
    if columns is None:
        meant = _columns_meant(columns_text)
        return [
            f"{COLUMNS_KEY} = {columns_text!r}: {why}. Fix: "
            f"{_fix(COLUMNS_KEY, meant, stack)} (your column names; optional keys "
            'trainSplit, testSplit, subset, instruction, e.g. "subset":"main")'
        ]
    if (unknown := _unknown_columns(dataset, columns_text, reward, stack)) is not None:
        return [unknown]
    if reward is None and not verl_scores(dataset):
        hub_ids = [source for source in VERL_SCORED_SOURCES if "/" in source]
        return [
            f"{DATASET_KEY} = {dataset!r}: verl has no built-in score for this data_source "
            f"(among Hub ids it scores {hub_ids}; verl/utils/reward_score/__init__.py "
            f"default_compute_score), so the first reward would raise NotImplementedError. Fix: "
            f"{_fix(REWARD_KEY, REWARD_EXAMPLE, stack)} "
            "(a file of this project with that function; docs/own-run.md)"
        ]
    if reward is None and dataset in EXTRACTED_ANSWER:
        return [_extracted_answer_problem(dataset, columns_text, stack)]
    return []


def _reserved_folders() -> set[str]:
    """The bucket's top-level folders the program writes."""
    return {
        p.removeprefix(f"{DATA_MOUNT}/").split("/")[0]
        for p in (
            f"{DATA_MOUNT}/{CHECKPOINT_PREFIX}",
            VERL_CHECKOUTS,
            PREP_MARKERS,
            GSM8K_TRAIN,
            DATASETS_ROOT,
            REWARDS_ROOT,
        )
    }


def _local_path_problem(dataset: str, columns_text: str | None, bucket: str, stack: str) -> str:
    name = re.split(r"[/\\]", dataset.rstrip("/\\"))[-1]  # a POSIX or a Windows path
    stem = re.sub(r"[^A-Za-z0-9_-]+", "-", Path(name).stem).strip("-")
    folder = stem if stem and stem not in _reserved_folders() else "my-dataset"
    rm = f" and pulumi config rm {COLUMNS_KEY} -s {stack}" if columns_text is not None else ""
    return (
        f"{DATASET_KEY} = {dataset!r}: a path of this machine, which the pods cannot read; the "
        f"dataset is a Hugging Face dataset id (its columns named by {COLUMNS_KEY}) or a "
        f"gs://{bucket}/FOLDER holding train.parquet and test.parquet in verl's format. Fix: "
        "write your rows in verl's format (docs/own-run.md, \"A dataset already in verl's "
        f'format"), copy them with `gcloud storage cp train.parquet test.parquet '
        f"gs://{bucket}/{folder}/`, then "
        f"{_fix(DATASET_KEY, f'gs://{bucket}/{folder}', stack)}{rm}; or push them to the Hub as "
        f"a dataset your token reads and set {DATASET_KEY} to its id"
    )


def _not_an_id_problem(dataset: str, bucket: str, stack: str) -> str:
    # A near spelling of a dataset the program knows is the fix; otherwise the form to use.
    known = [DEFAULT_DATASET, *(s for s in VERL_SCORED_SOURCES if "/" in s)]
    by_name = {hub_id.split("/")[1].lower(): hub_id for hub_id in known}
    near = [by_name[dataset.lower()]] if dataset.lower() in by_name else []
    near = near or difflib.get_close_matches(dataset, known, n=1, cutoff=0.6)
    fix = (
        _fix(DATASET_KEY, near[0], stack)
        if near
        else f"the full id from the dataset's page (huggingface.co/datasets/OWNER/NAME) or the "
        f"bucket folder: {_fix(DATASET_KEY, 'OWNER/NAME', stack)}"
    )
    return (
        f"{DATASET_KEY} = {dataset!r}: neither a Hugging Face dataset id (owner/name) nor a "
        f"gs://{bucket}/FOLDER folder. Fix: {fix}"
    )


def _unknown_columns(dataset: str, columns_text: str, reward: str | None, stack: str) -> str | None:
    """A mapping naming a column the dataset lacks, where its columns are known offline. The fix
    also sets the reward where the corrected mapping alone would be refused for lacking one
    (_extracted_answer_problem), so following it once is enough."""
    known = KNOWN_COLUMNS.get(dataset)
    if known is None:
        return None
    raw = json.loads(columns_text)
    wrong = sorted({raw[role] for role in known if raw[role] not in known.values()})
    if not wrong:
        return None
    corrected = json.dumps({**raw, **known}, separators=(",", ":"))
    reward_fix = ""
    if reward is None and dataset in EXTRACTED_ANSWER:
        reward_fix = (
            f" and {_fix(REWARD_KEY, REWARD_EXAMPLE, stack)} (with a mapping, verl's built-in "
            "score would compare with the raw answer column)"
        )
    return (
        f"{COLUMNS_KEY} = {columns_text!r}: {dataset} has no column {wrong} (its columns: "
        f"{', '.join(known.values())}). Fix: {_fix(COLUMNS_KEY, corrected, stack)}{reward_fix}"
    )


def _extracted_answer_problem(dataset: str, columns_text: str, stack: str) -> str:
    fix = _fix(REWARD_KEY, REWARD_EXAMPLE, stack)
    if dataset == DEFAULT_DATASET:
        fix = f"pulumi config rm {COLUMNS_KEY} -s {stack} (verl's own preprocessing), or {fix}"
    return (
        f"{COLUMNS_KEY} = {columns_text!r} with {DATASET_KEY} = {dataset!r} and no {REWARD_KEY}: "
        f"{EXTRACTED_ANSWER[dataset]}, so every response would score 0. Fix: {fix} (it takes the "
        "final answer out of the response and out of the ground truth; or your own file, "
        "docs/own-run.md)"
    )


def _bucket_dataset_problems(
    dataset: str, gs: re.Match[str] | None, columns_text: str | None, bucket: str, stack: str
) -> list[str]:
    example = f"gs://{bucket}/my-dataset"
    if gs is None or gs["bucket"] != bucket:
        return [
            f"{DATASET_KEY} = {dataset!r}: a parquet folder must be in the stack's bucket, "
            f"the only one the pods mount ({DATA_MOUNT}), as gs://{bucket}/FOLDER. Fix: copy "
            f"train.parquet and test.parquet there and {_fix(DATASET_KEY, example, stack)}"
        ]
    folder = gs["folder"].strip("/")
    parts = folder.split("/")
    reserved = _reserved_folders()
    if any(part in ("", ".", "..") for part in parts) or parts[0] in reserved:
        return [
            f"{DATASET_KEY} = {dataset!r}: the folder must be a plain path outside the folders "
            f"the program writes ({sorted(reserved)}). Fix: {_fix(DATASET_KEY, example, stack)}"
        ]
    if columns_text is not None:
        return [
            f"{COLUMNS_KEY} = {columns_text!r}: a column mapping applies to a Hugging Face "
            f"dataset; {dataset} must already be in verl's format (prompt, data_source, "
            f"reward_model.ground_truth). Fix: pulumi config rm {COLUMNS_KEY} -s {stack}"
        ]
    return []


def reward_problems(reward: str | None, stack: str, project_dir: Path = PROJECT_DIR) -> list[str]:
    if reward is None:
        return []
    fix = _fix(REWARD_KEY, REWARD_EXAMPLE, stack)
    match = _REWARD.fullmatch(reward)
    if match is None:
        found = _reward_in_file(reward.rstrip(":"), project_dir)
        if found is not None:
            fix = f"pulumi config set {REWARD_KEY} '{found}' -s {stack}"
        return [f"{REWARD_KEY} = {reward!r}: not FILE.py:FUNCTION. Fix: {fix}"]
    path = (project_dir / match["file"]).resolve()
    where = f"{REWARD_KEY} = {reward!r}"
    if not path.is_relative_to(project_dir) or not path.is_file():
        found = _reward_elsewhere(match["file"], match["function"], project_dir)
        if found is not None:
            fix = f"pulumi config set {REWARD_KEY} '{found}' -s {stack}"
        else:
            fix = (
                f"create {match['file']} there with `def {match['function']}(data_source, "
                "solution_str, ground_truth, extra_info=None, **kwargs)` (docs/own-run.md), or "
                f"use the example: {fix}"
            )
        return [
            f"{where}: {match['file']} is not a file of this project ({project_dir}); the path "
            f"is relative to the folder of Pulumi.yaml. Fix: {fix}"
        ]
    try:
        tree = ast.parse(path.read_bytes(), filename=match["file"])
    except SyntaxError as error:
        return [
            f"{where}: {match['file']} line {error.lineno}: syntax error ({error.msg}). Fix: "
            f"correct line {error.lineno} (python3 -m py_compile {match['file']} shows it)"
        ]
    node = _function(tree, match["function"])
    if node is None:
        return [_missing_function(where, match["file"], match["function"], tree, stack)]
    why = signature_problem(node)
    if why is None:
        return []
    return [
        f"{where}: {match['file']} line {node.lineno}: {why}. Fix: define it as "
        f"`def {node.name}(data_source, solution_str, ground_truth, extra_info=None, "
        "**kwargs)`"
    ]


def _missing_function(where: str, file: str, function: str, tree: ast.Module, stack: str) -> str:
    """The reward file has no such function: the fix names the one verl can call with its reward
    keywords that is closest in spelling to the one typed."""
    defined = sorted(
        n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
    )
    callable_ = [
        name
        for name in dict.fromkeys(defined)
        if (bound := _function(tree, name)) is not None and signature_problem(bound) is None
    ]
    ranked = difflib.get_close_matches(function, callable_, n=1, cutoff=0) or ["compute_score"]
    return (
        f"{where}: {file} defines no top-level function {function} (it defines {defined}). "
        f"Fix: pulumi config set {REWARD_KEY} '{file}:{ranked[0]}' -s {stack}"
        + ("" if callable_ else " after adding that function")
    )


def _reward_elsewhere(file: str, function: str, project_dir: Path) -> str | None:
    """The project's reward file of the same name in the examples' folder, `FILE.py:FUNCTION`,
    for a reward whose path was typed without its folder (`exact_match.py:compute_score`)."""
    example_dir = Path(REWARD_EXAMPLE.split(":", 1)[0]).parent
    candidate = example_dir / Path(file).name
    if candidate.as_posix() == file or not (project_dir / candidate).is_file():
        return None
    return f"{candidate.as_posix()}:{function}"


def _reward_in_file(file: str, project_dir: Path) -> str | None:
    """`FILE.py:FUNCTION` for a reward given as its file alone: the file's top-level function that
    verl can call with its reward keywords (compute_score first, as verl's default name), None
    when the file is no project file or defines none."""
    path = (project_dir / file).resolve()
    if not file.endswith(".py") or not path.is_relative_to(project_dir) or not path.is_file():
        return None
    try:
        tree = ast.parse(path.read_bytes(), filename=file)
    except SyntaxError:
        return None
    callable_ = [
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and signature_problem(node) is None
    ]
    if not callable_:
        return None
    name = "compute_score" if "compute_score" in callable_ else callable_[0]
    return f"{file}:{name}"


def _function(tree: ast.Module, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    found = None
    for node in tree.body:  # the last definition wins, as at import
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            found = node
    return found


def signature_problem(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """Why verl's keyword call (REWARD_ARGS) would fail on this function, or None."""
    args = node.args
    by_keyword = [a.arg for a in (*args.args, *args.kwonlyargs)]
    missing = [name for name in REWARD_ARGS if name not in by_keyword]
    if missing and args.kwarg is None:
        return (
            f"{node.name} does not accept {missing}: verl calls it with the keywords "
            f"{', '.join(REWARD_ARGS)}"
        )
    positional_only = [a.arg for a in args.posonlyargs if a.arg in REWARD_ARGS]
    if positional_only:
        return f"{positional_only} are positional-only, but verl passes them by keyword"
    positional = [*args.posonlyargs, *args.args]
    defaulted = {a.arg for a in positional[len(positional) - len(args.defaults) :]}
    keyword = zip(args.kwonlyargs, args.kw_defaults, strict=True)
    defaulted |= {a.arg for a, default in keyword if default is not None}
    required = [
        a.arg
        for a in (*positional, *args.kwonlyargs)
        if a.arg not in REWARD_ARGS and a.arg not in defaulted
    ]
    if required:
        return f"{node.name} requires {required}, which verl never passes"
    return None


def verl_source_problems(
    verl_source: str, verl_ref: str, profile_ref: str, stack: str
) -> list[str]:
    if verl_source not in VERL_SOURCES:
        return [
            f"{VERL_SOURCE_KEY} = {verl_source!r}: not one of {list(VERL_SOURCES)}. Fix: "
            f"{_fix(VERL_SOURCE_KEY, 'checkout', stack)}"
        ]
    if verl_source == "image" and verl_ref != profile_ref:
        return [
            f"{VERL_REF_KEY} = {verl_ref!r}: with {VERL_SOURCE_KEY}=image the image's own verl "
            f"runs and no checkout is made, so verlRef would mean nothing. Fix: pulumi config "
            f"rm {VERL_REF_KEY} -s {stack} (or {_fix(VERL_SOURCE_KEY, 'checkout', stack)})"
        ]
    return []


def problems(s: StackSettings) -> list[str]:
    """Every problem of the run's own inputs (StackSettings registers this)."""
    return [
        *dataset_problems(s.dataset, s.dataset_columns, s.reward, s.bucket_name, s.stack),
        *reward_problems(s.reward, s.stack),
        *verl_source_problems(s.verl_source, s.verl_ref, s.profile.verl_ref, s.stack),
    ]


def dataset_of(s: StackSettings) -> DatasetChoice:
    return dataset_choice(s.dataset, s.dataset_columns)


def reward_of(s: StackSettings) -> RewardChoice | None:
    return reward_choice(s.reward) if s.reward is not None else None


# openai/gsm8k's `main` configuration: 7,473 train and 1,319 test rows (the dataset card,
# huggingface.co/datasets/openai/gsm8k).
GSM8K_ROWS = {"train": 7473, "test": 1319}


def plan_lines(s: StackSettings) -> list[str]:
    """The run's dataset, reward and verl, for the plan."""
    dataset = dataset_of(s)
    reward = reward_of(s)
    if dataset.kind == "gsm8k":
        how = "verl's examples/data_preprocess/gsm8k.py" + (
            f" at {s.verl_ref}" if s.verl_source == "checkout" else " rows, written by the Job"
        )
        shown = (
            f"openai/gsm8k ({how}): train {GSM8K_ROWS['train']:,} rows, "
            f"test {GSM8K_ROWS['test']:,} rows -> {dataset.folder}"
        )
    elif dataset.kind == "hub":
        assert dataset.columns is not None
        c = dataset.columns
        shown = (
            f"{dataset.dataset} (Hub; prompt column {c.prompt!r}, answer column {c.answer!r}, "
            f"splits {c.train_split}/{c.test_split}"
            + (f", subset {c.subset}" if c.subset else "")
            + (", instruction appended" if c.instruction else "")
            + f") -> {dataset.folder}; split sizes, columns and access (gated?) are checked "
            "by the data-prep Job with verl-gke:hfToken, not offline"
        )
    else:
        shown = (
            f"{dataset.dataset} -> {dataset.folder}/{{train,test}}.parquet in verl's format; "
            "the data-prep Job checks their columns before any GPU is used"
        )
    lines = ["Run inputs:", f"  dataset: {shown}"]
    if reward is None:
        lines.append(
            f"  reward: verl's built-in score for data_source {dataset.dataset!r} "
            "(verl/utils/reward_score default_compute_score)"
            if dataset.kind != "bucket"
            else "  reward: verl's built-in score for each row's data_source "
            "(verl/utils/reward_score default_compute_score)"
        )
    else:
        lines.append(
            f"  reward: {reward.file}:{reward.function} (line {reward.line}, sha256 "
            f"{reward.sha256[:16]}) -> "
            f"{reward_config_key(s.verl_ref, s.profile.verl_ref)}.path={reward.mounted_path}"
        )
    if s.verl_source == "image":
        lines.append(
            f"  verl: the image's own ({VERL_SOURCE_KEY}=image; {s.verl_image} must carry verl: "
            f"python3 -c 'import verl' in it); verlRef is not used, and verl's config checks "
            f"assume {s.profile.verl_ref}, the profile's release"
        )
    else:
        lines.append(f"  verl: volcengine/verl at {s.verl_ref}, first on PYTHONPATH")
    return lines
