"""The checks that refuse, before any GPU is used, what verl could not train on: a parquet
folder not in verl's format (verl-gke:dataset in the bucket), a data_source verl's built-in score
does not know, and prompts so long that verl's filter keeps less than one train batch."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

try:  # imported as payloads.data_prep.prep_checks (the program, tests)
    from . import prep_common as common
except ImportError:  # run from /scripts in the pod: this folder is sys.path[0]
    import prep_common as common

# The columns verl's RLHFDataset and reward managers read from every row (prompt_key "prompt",
# data_source, reward_model.ground_truth; verl/utils/dataset/rl_dataset.py,
# verl/workers/reward_manager/naive.py, v0.6.1 and v0.9.0).
VERL_COLUMNS = ("prompt", "data_source", "reward_model")


def check_dataset(
    folder: Path,
    scored_sources: tuple[str, ...] | None = None,
    scored_prefixes: tuple[str, ...] = (),
) -> None:
    """Refuse a parquet folder verl could not train on, before any GPU is used. With
    scored_sources (no verl-gke:reward): also a data_source verl's default_compute_score would
    raise NotImplementedError for at the first reward."""
    step = "dataset"
    import pyarrow.parquet as pq  # in the verl image (datasets depends on it)

    for name in common.GSM8K_FILES:
        path = folder / name
        if not common.is_nonempty_file(path):
            raise common.StepError(
                f"{path} is missing or empty: verl-gke:dataset's folder must hold "
                f"{' and '.join(common.GSM8K_FILES)} in verl's format"
            )
        schema = pq.read_schema(str(path))
        missing = [c for c in VERL_COLUMNS if c not in schema.names]
        truth = "reward_model" in schema.names and "ground_truth" in str(
            schema.field("reward_model").type
        )
        if missing or not truth:
            raise common.StepError(
                f"{path} lacks verl's columns {missing or ['reward_model.ground_truth']} (it "
                f"has {schema.names}); verl reads prompt (a list of {{role, content}}), "
                "data_source and reward_model.ground_truth from every row"
            )
        check_prompt_type(path, schema.field("prompt").type)
        rows = pq.read_metadata(str(path)).num_rows
        if rows == 0:
            raise common.StepError(f"{path} has no rows")
        if scored_sources is not None:
            check_data_sources(path, scored_sources, scored_prefixes)
        common.log(step, f"{path}: {rows} rows, columns {schema.names}")


def check_prompt_type(path: Path, prompt: object) -> None:
    """verl's RLHFDataset passes each row's prompt to the tokenizer's chat template as a list of
    messages (verl/utils/dataset/rl_dataset.py _build_messages, v0.6.1 and v0.9.0)."""
    import pyarrow as pa

    fields: set[str] = set()
    if pa.types.is_list(prompt) or pa.types.is_large_list(prompt):  # type: ignore[arg-type]
        item = prompt.value_type  # type: ignore[attr-defined]
        if pa.types.is_struct(item):
            fields = {item.field(i).name for i in range(item.num_fields)}
    if not {"role", "content"} <= fields:
        raise common.StepError(
            f"{path}: prompt is {prompt}, but verl reads it as chat messages, a list of "
            '{"role", "content"} structs, e.g. [{"role": "user", "content": "What is 2+3?"}]'
        )


def check_data_sources(path: Path, sources: tuple[str, ...], prefixes: tuple[str, ...]) -> None:
    import pyarrow.parquet as pq

    column = pq.read_table(str(path), columns=["data_source"]).column("data_source")
    values = sorted(column.unique().to_pylist(), key=str)
    known = [v for v in values if isinstance(v, str) and (v in sources or v.startswith(prefixes))]
    unknown = [v for v in values if v not in known]
    if unknown:
        raise common.StepError(
            f"{path}: verl has no built-in score for data_source {unknown[:10]} (verl's "
            "default_compute_score, verl/utils/reward_score/__init__.py, would raise "
            "NotImplementedError at the first reward). Fix: pulumi config set verl-gke:reward "
            "docs/examples/exact_match.py:compute_score (or a reward file of your own, "
            "docs/own-run.md), or write data_source values verl scores "
            f"({', '.join(sources[:4])}, ...)"
        )


LENGTHS_SUMMARY = "prompt-lengths.json"
JOB_SETTING = "verl-gke:job"


def prompt_tokens(tokenizer: object, messages: object) -> int:
    """One prompt's length as verl measures it: the model's chat template with the generation
    prompt, tokenized (RLHFDataset.maybe_filter_out_long_prompts, verl/utils/dataset/rl_dataset.py
    v0.6.1 and v0.9.0; __getitem__ at v0.6.1 and the agent loop at 0.9.0 measure the same text).
    transformers 5 returns a dict by default, 4.x a list; a batch of one is unwrapped as verl's
    normalize_token_ids does (verl/utils/tokenizer/tokenizer.py, 0.9.0)."""
    ids = tokenizer.apply_chat_template(  # type: ignore[attr-defined]
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    if hasattr(ids, "keys"):
        ids = ids["input_ids"]
    ids = list(ids)
    if len(ids) == 1 and isinstance(ids[0], (list, tuple)):
        ids = list(ids[0])
    return len(ids)


def measure_prompts(tokenizer: object, path: Path, limit: int) -> dict[str, int]:
    """rows, over (longer than limit), kept and longest of one parquet file's prompts."""
    import pyarrow.parquet as pq  # in the verl image (datasets depends on it)

    prompts = pq.read_table(str(path), columns=["prompt"]).column("prompt").to_pylist()
    lengths = [prompt_tokens(tokenizer, messages) for messages in prompts]
    over = sum(1 for n in lengths if n > limit)
    rows = len(lengths)
    return {"rows": rows, "over": over, "kept": rows - over, "longest": max(lengths, default=0)}


def smaller_batch(kept: int, step: int, smallest: int) -> int | None:
    """The largest train batch <= kept that is a multiple of step and >= smallest, if any."""
    batch = kept // step * step
    return batch if batch >= max(smallest, 1) else None


def length_problem(counts: dict[str, dict[str, int]], limits: argparse.Namespace) -> str | None:
    """Why verl could not build its dataloaders from the rows its filter keeps, with a fix."""
    train, test, limit = counts["train"], counts["test"], limits.max_prompt_length
    raise_limit = (
        f"pulumi config set --path {JOB_SETTING}.maxPromptLength "
        f"{max(train['longest'], test['longest'])} (keeps every row; the preview checks the "
        "memory fit again)"
    )
    if train["kept"] < limits.train_batch_size:
        batch = smaller_batch(train["kept"], limits.train_batch_step, limits.min_train_batch)
        lower = (
            f", or pulumi config set --path {JOB_SETTING}.trainBatchSize {batch}"
            if batch is not None
            else ""
        )
        return (
            f"train.parquet: {train['kept']} of {train['rows']} rows have prompts of at most "
            f"{JOB_SETTING}.maxPromptLength = {limit} tokens ({train['over']} longer, the longest "
            f"{train['longest']}), fewer than one batch of {JOB_SETTING}.trainBatchSize = "
            f"{limits.train_batch_size}: verl drops the longer ones (data.filter_overlong_prompts)"
            f" and its trainer refuses an empty train dataloader. Fix: {raise_limit}{lower}"
        )
    if test["kept"] == 0:
        return (
            f"test.parquet: none of its {test['rows']} rows has a prompt of at most "
            f"{JOB_SETTING}.maxPromptLength = {limit} tokens (the longest {test['longest']}): "
            f"verl drops them and its trainer refuses an empty validation dataloader. "
            f"Fix: {raise_limit}"
        )
    return None


def check_prompt_lengths(
    root: Path, data: Path, model_dir: Path, limits: argparse.Namespace
) -> dict[str, dict[str, int]]:
    """Count the prompts verl will drop as longer than data.max_prompt_length, with the model's
    own tokenizer and chat template; write the counts to <root>/.prep/prompt-lengths.json and
    refuse a dataset verl could not train on."""
    step = "lengths"
    from transformers import AutoTokenizer  # in the verl image

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    limit = limits.max_prompt_length
    roles = ("train", "test")
    counts = {r: measure_prompts(tokenizer, data / f"{r}.parquet", limit) for r in roles}
    for role, c in counts.items():
        common.log(
            step,
            f"{data / role}.parquet: {c['rows']} rows, {c['over']} prompts longer than "
            f"{limit} tokens (verl drops them), longest {c['longest']}",
        )
    summary = {"data": str(data), "model": str(model_dir), "max_prompt_length": limit, **counts}
    path = root / common.PREP_DIR / LENGTHS_SUMMARY
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    problem = length_problem(counts, limits)
    if problem is not None:
        raise common.StepError(problem)
    return counts
