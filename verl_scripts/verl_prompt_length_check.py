"""Prompt lengths as the data-prep Job counts them and as verl's RLHFDataset filters and reads them.
Prints one JSON verdict.

Runs inside an isolated verl virtualenv (requirements-verl-*.txt), offline. A word-level tokenizer
with a chat template is saved as a model folder (no download) and loaded back with AutoTokenizer,
as payloads/data_prep/prep_checks.py loads the model's. Rows of 1 to N words straddle the limit.

- verl's ppo_trainer config composed without overrides gives data.filter_overlong_prompts and
  data.truncation as verl ships them; with the program's overrides, as the job passes them.
- payloads/data_prep/prep_checks.prompt_tokens measures every row.
- verl's RLHFDataset, built with the composed data config, keeps rows by its own filter
  (maybe_filter_out_long_prompts). With the parquet reader (0.9.0): through the trainer's
  create_rl_dataset, and the agent loop's measure (verl/utils/tokenizer/chat_template.py
  apply_chat_template + normalize_token_ids) per row; prep_checks.check_prompt_lengths counts the
  same parquet and refuses a train batch larger than the rows kept.
  Without it (0.6.1: requirements-verl-0.6.1.txt has no `datasets`, which rl_dataset.py imports
  only to read parquet): an empty module stands in for `datasets` at import, and the rows reach
  verl's filter and __getitem__ as a list whose filter() applies verl's own predicate; every kept
  row goes through __getitem__ with data.truncation=error, and one longer row shows the error.

stdin:  {"workdir": DIR, "overrides": [...], "max_prompt_length": L, "words": [n, ...]}
stdout: {"verl_version", "ok", "stage", "error", "defaults": {...}, "rendered": {...},
         "ours": [len, ...], "verl_kept": [row, ...], "getitem_ok": n, "over_error": str,
         "agent_loop": [len, ...], "counts": {...}, "refused": str}
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import sys
import traceback
import types
from pathlib import Path
from typing import Any

from payload_file import data_prep
from rehearsal_common import compose

# A preamble and a generation prompt, so the template adds tokens of its own.
CHAT_TEMPLATE = (
    "system : be brief .\n{% for m in messages %}{{ m['role'] }} : {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant :{% endif %}"
)


def _save_tokenizer(folder: Path, words: int) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab_words = ["[UNK]", "[PAD]", "[EOS]", "system", "user", "assistant", ":", ".", "be"]
    vocab_words += ["brief", *(f"w{i}" for i in range(words))]
    model = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab_words)}, "[UNK]"))
    model.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=model, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(str(folder))


def _rows(words: list[int]) -> list[dict[str, Any]]:
    return [
        {
            "data_source": "lengths",
            "prompt": [{"role": "user", "content": " ".join(f"w{i}" for i in range(n))}],
            "reward_model": {"style": "rule", "ground_truth": "1"},
            "extra_info": {"split": "train", "index": row},
        }
        for row, n in enumerate(words)
    ]


def _data_keys(config: Any) -> dict[str, Any]:
    return {k: config.data.get(k) for k in ("filter_overlong_prompts", "truncation")}


def run(request: dict[str, Any], result: dict[str, Any]) -> None:
    from transformers import AutoTokenizer

    work, limit = Path(request["workdir"]), request["max_prompt_length"]
    checks = data_prep("prep_checks")
    result["stage"] = "compose"
    result["defaults"] = _data_keys(compose([]))
    base = [*request["overrides"], f"data.max_prompt_length={limit}"]
    config = compose(base)
    result["rendered"] = _data_keys(config)
    result["stage"] = "measure"
    model = work / "model"
    _save_tokenizer(model, max(request["words"]))
    tokenizer = AutoTokenizer.from_pretrained(str(model))
    rows = _rows(request["words"])
    result["ours"] = [checks.prompt_tokens(tokenizer, row["prompt"]) for row in rows]
    result["stage"] = "verl"
    if importlib.util.find_spec("datasets") is not None:
        _with_parquet(checks, work, base, tokenizer, rows, result)
    else:
        _without_parquet(config, tokenizer, rows, result)
    result["stage"] = None
    result["ok"] = True


def _with_parquet(
    checks: Any, work: Path, base: list[str], tokenizer: Any, rows: list[dict], result: dict
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from verl.trainer.ppo.utils import create_rl_dataset
    from verl.utils.tokenizer import normalize_token_ids
    from verl.utils.tokenizer.chat_template import apply_chat_template

    data = work / "data"
    data.mkdir(parents=True, exist_ok=True)
    for role in ("train", "test"):
        pq.write_table(pa.Table.from_pylist(rows), str(data / f"{role}.parquet"))
    config = compose([*base, f"data.train_files={data}/train.parquet"])
    dataset = create_rl_dataset(config.data.train_files, config.data, tokenizer, None)
    result["verl_kept"] = [dataset[i]["extra_info"]["index"] for i in range(len(dataset))]
    result["agent_loop"] = [
        len(normalize_token_ids(apply_chat_template(tokenizer, row["prompt"]))) for row in rows
    ]
    limit = config.data.max_prompt_length
    limits = argparse.Namespace(
        max_prompt_length=limit, train_batch_size=1, train_batch_step=1, min_train_batch=1
    )
    result["counts"] = checks.check_prompt_lengths(work, data, work / "model", limits)
    result["summary"] = json.loads(
        (work / data_prep("prep_common").PREP_DIR / checks.LENGTHS_SUMMARY).read_text()
    )
    kept = result["counts"]["train"]["kept"]
    too_big = argparse.Namespace(**{**vars(limits), "train_batch_size": kept + 3})
    try:
        checks.check_prompt_lengths(work, data, work / "model", too_big)
    except data_prep("prep_common").StepError as error:
        result["refused"] = str(error)


def _without_parquet(config: Any, tokenizer: Any, rows: list[dict], result: dict) -> None:
    import copy

    class Rows(list):
        """The two things RLHFDataset asks of its dataframe here: filter() and row access."""

        def filter(self, predicate: Any, **_: Any) -> Rows:
            return Rows(row for row in self if predicate(copy.deepcopy(row)))

        def __getitem__(self, item: Any) -> Any:
            return copy.deepcopy(list.__getitem__(self, item))

    # rl_dataset.py names datasets.Dataset in an annotation, evaluated when the class is defined.
    placeholder = types.ModuleType("datasets")
    placeholder.Dataset = Rows  # type: ignore[attr-defined]
    sys.modules.setdefault("datasets", placeholder)
    # The file itself: the package's __init__ also imports the SFT/RM datasets (pandas).
    spec = importlib.util.find_spec("verl.utils")
    assert spec is not None and spec.submodule_search_locations
    path = Path(spec.submodule_search_locations[0]) / "dataset" / "rl_dataset.py"
    loaded = importlib.util.spec_from_file_location("verl_rl_dataset", path)
    assert loaded is not None and loaded.loader is not None
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    RLHFDataset = module.RLHFDataset  # noqa: N806

    class InMemory(RLHFDataset):
        def _download(self, use_origin_parquet: bool = False) -> None:
            pass

        def _read_files_and_tokenize(self) -> None:
            self.dataframe = self.maybe_filter_out_long_prompts(Rows(rows))

    dataset = InMemory([], tokenizer, config.data)
    result["verl_kept"] = [dataset[i]["extra_info"]["index"] for i in range(len(dataset))]
    result["getitem_ok"] = len(dataset)
    unfiltered = InMemory([], tokenizer, {**config.data, "filter_overlong_prompts": False})
    over = [i for i, n in enumerate(result["ours"]) if n > config.data.max_prompt_length]
    try:
        unfiltered[over[0]]
    except Exception as error:  # what verl raises with truncation=error
        result["over_error"] = f"{type(error).__name__}: {error}"


def main() -> int:
    request = json.loads(sys.stdin.read())
    result: dict[str, Any] = {"ok": False, "stage": "import", "error": None}
    try:
        with contextlib.redirect_stdout(sys.stderr):  # verl prints progress; stdout is the verdict
            import verl

            result["verl_version"] = getattr(verl, "__version__", None)
            run(request, result)
    except Exception:
        result["error"] = traceback.format_exc(limit=-6)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
