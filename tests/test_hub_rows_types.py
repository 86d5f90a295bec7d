"""A Hub dataset whose answer column holds whole numbers and then a fraction converts, through
the `datasets` release of the verl 0.9.0 virtualenv (datasets 5.2.0, requirements-verl-0.9.0.txt).

datasets' Dataset.map writes its output with an ArrowWriter that fixes each column's type from the
first batch it writes (1,000 rows by default, datasets/arrow_dataset.py map, arrow_writer.py), so a
value of another type later in the column fails with ArrowInvalid. The answer column loads as
floats (5.0 ... 4.5); the ground truth says 5, not 5.0, and 4.5.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.require import verl_python

# Runs the data-prep payload in a verl virtualenv's interpreter.
pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent
RELEASE = "0.9.0"
WHOLE = 1500  # more than one writer batch of whole numbers before the fraction
CONVERT = """
import json, sys
from pathlib import Path
sys.path.insert(0, "payloads/data_prep")  # as the pod imports it, by plain name
import prep_dataset as prep
work = Path(sys.argv[1])
out = work / "out"
prep.prepare_hub_dataset(work / "root", "example-org/mixed", {"prompt": "q", "answer": "a"},
                         out, None, str(work / "source"))
import datasets, pyarrow.parquet as pq
rows = pq.read_table(str(out / "train.parquet")).to_pylist()
print(json.dumps({"datasets": datasets.__version__, "rows": len(rows),
                  "truths": [r["reward_model"]["ground_truth"] for r in rows],
                  "answers": [r["extra_info"]["answer"] for r in rows]}))
"""


def test_whole_numbers_then_a_fraction_convert(tmp_path: Path) -> None:
    python = verl_python(RELEASE)
    answers = [float(i) for i in range(WHOLE)] + [4.5]
    source = tmp_path / "source"
    source.mkdir()
    for split, values in (("train", answers), ("test", answers[:2])):
        lines = [json.dumps({"q": f"question {i}", "a": a}) for i, a in enumerate(values)]
        (source / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    env["HF_HOME"] = str(tmp_path / "hf")
    done = subprocess.run(
        [str(python), "-c", CONVERT, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["datasets"] == "5.2.0"
    assert result["rows"] == WHOLE + 1
    assert result["truths"][:3] == ["0", "1", "2"] and result["truths"][-1] == "4.5"
    assert result["answers"][-1] == 4.5 and result["answers"][7] == 7.0
