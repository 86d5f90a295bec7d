"""The dataset step: a Hub dataset (verl-gke:dataset, or GSM8K with --verl-from-image) converted
to verl's format through its columns; and the reward step: --reward-file copied where verl reads
it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

try:  # imported as payloads.data_prep.prep_dataset (the program, tests)
    from . import prep_common as common
    from . import prep_gsm8k
except ImportError:  # run from /scripts in the pod: this folder is sys.path[0]
    import prep_common as common
    import prep_gsm8k


def hub_rows(
    example: dict[str, object], idx: int, split: str, dataset: str, columns: dict[str, str]
) -> dict[str, object]:
    """One row in verl's RL format, as verl's examples/data_preprocess/gsm8k.py writes them: a
    chat prompt, data_source (the key verl's default score dispatches on), reward_model's
    ground truth and extra_info (split, index, the raw answer and question)."""
    question = str(example[columns["prompt"]])
    answer = example[columns["answer"]]
    instruction = columns.get("instruction")
    gsm8k = dataset == "openai/gsm8k" and columns.get("answerFormat") == "gsm8k"
    row: dict[str, object] = {
        "data_source": dataset,
        "prompt": [
            {"role": "user", "content": f"{question} {instruction}" if instruction else question}
        ],
    }
    if gsm8k:
        row["ability"] = "math"
    # A column mixing 5 and 4.5 loads as floats; the source said 5, not 5.0, so the ground truth
    # (a string) says 5. extra_info keeps the value as loaded: turning it into an int would
    # change the column's type from row to row, and the parquet writer fixes a column's type from
    # its first batch of rows (1,000 by default), so a later 4.5 fails with ArrowInvalid
    # (datasets 5.2.0 Dataset.map, arrow_writer.py).
    shown = int(answer) if isinstance(answer, float) and answer.is_integer() else answer
    truth = prep_gsm8k.gsm8k_solution(str(shown)) if gsm8k else str(shown)
    row["reward_model"] = {"style": "rule", "ground_truth": truth}
    row["extra_info"] = {"split": split, "index": idx, "answer": answer, "question": question}
    return row


def load_hub_dataset(
    dataset: str, columns: dict[str, str], token: str | None, source: str | None = None
) -> object:
    import datasets  # in the verl image

    try:  # tests pass a local folder as source; data_source stays the dataset's id
        return datasets.load_dataset(source or dataset, columns.get("subset"), token=token)
    except Exception as error:  # the Hub's refusals come as several exception types
        raise common.StepError(
            f"could not load the dataset {dataset!r} ({type(error).__name__}: {error}). If it "
            f"is gated, accept its terms at https://huggingface.co/datasets/{dataset} with the "
            'account of verl-gke:hfToken; if it has subsets, name one as "subset" in '
            "verl-gke:datasetColumns"
        ) from error


def prepare_hub_dataset(
    root: Path,
    dataset: str,
    columns: dict[str, str],
    out: Path,
    token: str | None,
    source: str | None = None,
) -> None:
    step = "dataset"
    inputs = {"dataset": dataset, "columns": json.dumps(columns, sort_keys=True), "out": str(out)}
    if common.parquet_done(root, step, inputs, out):
        return
    started = time.monotonic()
    common.clear_marker(root, step)
    loaded = load_hub_dataset(dataset, columns, token, source)
    splits = {"train": columns.get("trainSplit", "train"), "test": columns.get("testSplit", "test")}
    available = sorted(loaded.keys())  # type: ignore[attr-defined]
    for name in splits.values():
        if name not in available:
            raise common.StepError(
                f"{dataset} has no split {name!r} (it has {available}); name them as "
                f'"trainSplit"/"testSplit" in verl-gke:datasetColumns'
            )
    out.mkdir(parents=True, exist_ok=True)
    sizes: dict[str, object] = {}
    for role, name in splits.items():
        part = loaded[name]  # type: ignore[index]
        missing = [c for c in (columns["prompt"], columns["answer"]) if c not in part.column_names]
        if missing:
            raise common.StepError(
                f"{dataset} split {name!r} has no column {missing} (it has "
                f'{part.column_names}); fix "prompt"/"answer" in verl-gke:datasetColumns'
            )
        rows = part.map(
            lambda example, idx, split=role: hub_rows(example, idx, split, dataset, columns),
            with_indices=True,
            remove_columns=part.column_names,
        )
        rows.to_parquet(str(out / f"{role}.parquet"))
        sizes[f"{role}.parquet"] = len(rows)
    marker = common.write_marker(root, step, inputs, {"path": str(out), "rows": sizes}, started)
    common.log(step, f"done in {time.monotonic() - started:.1f}s: {sizes} rows; marker {marker}")


def copy_reward(source: Path, dest: Path) -> None:
    """Copy the reward file to its content-named place (a changed file has another name)."""
    step = "reward"
    data = source.read_bytes()
    if dest.is_file() and dest.read_bytes() == data:
        common.log(step, f"skipped: {dest} is already this file")
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".partial")
    partial.write_bytes(data)
    os.replace(partial, dest)
    common.log(step, f"copied {source} ({len(data)} bytes) to {dest}")
