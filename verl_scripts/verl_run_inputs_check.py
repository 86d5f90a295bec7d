"""An own run's dataset and reward file, through verl's own code. Prints one JSON verdict.

Runs inside an isolated verl virtualenv (requirements-verl-*.txt), like
verl_scripts/verl_compose_check.py, offline (HF_HUB_OFFLINE=1, HF_DATASETS_OFFLINE=1):

1. payloads/data_prep/prep_dataset.py converts a fixture dataset (a local folder of JSON lines
   standing in for a Hub dataset) into verl's parquet with a column mapping, as the data-prep Job
   does;
2. verl composes its ppo_trainer config with the own run's overrides (data files, reward path and
   name) and builds the training set with the trainer's create_rl_dataset and a tiny tokenizer built
   here (a word-level tokenizers model with a chat template: no download), then collates a batch;
3. verl's get_custom_reward_fn loads the reward file and scores each row: a response ending in the
   row's ground truth scores 1, another answer 0;
4. prep_checks.py's check of a parquet folder accepts the converted files and refuses a parquet
   without reward_model.

stdin:  {"workdir": DIR, "reward_overrides": ["<key>.path=PATH", "<key>.name=NAME"], "dataset": ID,
         "columns": {...}, "rows": {"train": [...], "test": [...]}, "with_dataset": bool}
        (with_dataset false: steps 3 only, on the rows prep_dataset.hub_rows makes; for a verl
        virtualenv without the datasets package)
stdout: {"verl_version": ..., "ok": bool, "stage": ..., "error": ..., "train_rows": n,
         "items": [...],
         "scores": [...], "wrong_scores": [...], "batch_keys": [...], "check_refused": "..."}
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from payload_file import data_prep
from rehearsal_common import compose

CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def _tokenizer(texts: list[str]) -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["[UNK]", "[PAD]", "[EOS]"]
    split = pre_tokenizers.Whitespace()
    words = sorted({word for text in texts for word, _ in split.pre_tokenize_str(text)})
    vocab = {token: i for i, token in enumerate([*specials, *words])}
    model = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    model.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=model, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def run(request: dict[str, Any], result: dict[str, Any]) -> None:
    work = Path(request["workdir"])
    out = work / "data" / "datasets" / "fixture"
    prep_dataset = data_prep("prep_dataset")
    overrides = list(request["reward_overrides"])
    if request["with_dataset"]:
        result["stage"] = "convert"
        source = work / "source"
        source.mkdir(parents=True, exist_ok=True)
        for split, rows in request["rows"].items():
            (source / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        prep_dataset.prepare_hub_dataset(
            work / "data", request["dataset"], request["columns"], out, None, str(source)
        )
        overrides += [f"data.train_files={out}/train.parquet", f"data.val_files={out}/test.parquet"]
    result["stage"] = "compose"
    config = compose([*overrides, "data.max_prompt_length=512"])
    if request["with_dataset"]:
        result["stage"] = "dataset"
        items = _dataset(request, config, result)
    else:  # the rows the data prep writes, without a parquet round trip
        items = [
            prep_dataset.hub_rows(row, i, "train", request["dataset"], request["columns"])
            for i, row in enumerate(request["rows"]["train"])
        ]
    result["stage"] = "reward"
    _rewards(config, items, result)
    if request["with_dataset"]:
        result["stage"] = "check"
        data_prep("prep_checks").check_dataset(out)
        _refused_parquet(work / "bad", out, result)
    result["stage"] = None
    result["ok"] = True


def _dataset(request: dict[str, Any], config: Any, result: dict[str, Any]) -> list[Any]:
    from verl.utils.dataset.rl_dataset import collate_fn

    try:  # verl 0.9.0 moved it out of main_ppo, which imports it from there
        from verl.trainer.ppo.utils import create_rl_dataset
    except ImportError:  # verl 0.6.1
        from verl.trainer.main_ppo import create_rl_dataset

    texts = [str(v) for rows in request["rows"].values() for r in rows for v in r.values()]
    texts.append(request["columns"].get("instruction", ""))
    tokenizer = _tokenizer([*texts, CHAT_TEMPLATE, "user assistant :"])
    dataset = create_rl_dataset(config.data.train_files, config.data, tokenizer, None)
    result["train_rows"] = len(dataset)
    items = [dataset[i] for i in range(len(dataset))]
    result["items"] = [
        {
            "data_source": item["data_source"],
            "ground_truth": item["reward_model"]["ground_truth"],
            "style": item["reward_model"]["style"],
            "extra_info": {k: v for k, v in item["extra_info"].items() if k in ("split", "index")},
            "raw_prompt": [dict(m) for m in item.get("raw_prompt", [])] or None,
            "has_input_ids": "input_ids" in item,
        }
        for item in items
    ]
    result["batch_keys"] = sorted(collate_fn(items[:2]).keys())
    return items


def _rewards(config: Any, items: list[Any], result: dict[str, Any]) -> None:
    from verl.trainer.ppo.reward import get_custom_reward_fn

    score = get_custom_reward_fn(config)
    if score is None:
        raise RuntimeError("get_custom_reward_fn found no reward function under these overrides")
    result["scores"] = [
        score(
            data_source=item["data_source"],
            solution_str=f"Adding up gives {item['reward_model']['ground_truth']}.",
            ground_truth=item["reward_model"]["ground_truth"],
            extra_info=item["extra_info"],
        )
        for item in items
    ]
    result["wrong_scores"] = [
        score(
            data_source=item["data_source"],
            solution_str="The answer is 987654321.",
            ground_truth=item["reward_model"]["ground_truth"],
            extra_info=item["extra_info"],
        )
        for item in items
    ]


def _refused_parquet(folder: Path, good: Path, result: dict[str, Any]) -> None:
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    for name in ("train.parquet", "test.parquet"):
        table = pq.read_table(str(good / name)).drop_columns(["reward_model"])
        pq.write_table(table, str(folder / name))
    try:
        data_prep("prep_checks").check_dataset(folder)
    except data_prep("prep_common").StepError as error:
        result["check_refused"] = str(error)


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    request = json.load(sys.stdin)
    result: dict[str, Any] = {"ok": False, "stage": "import", "error": None}
    try:
        # verl and datasets print progress on stdout: the verdict alone goes there.
        with contextlib.redirect_stdout(sys.stderr):
            import verl

            result["verl_version"] = verl.__version__
            run(request, result)
    except Exception as error:
        result["error"] = f"{type(error).__name__}: {error}"
        result["traceback"] = traceback.format_exc()[-3000:]
    print(json.dumps(result, default=str))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
