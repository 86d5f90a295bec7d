"""Stand-in for verl's examples/data_preprocess/gsm8k.py, committed into a test git repository.

It keeps the parts payloads/data_prep relies on: the argparse output flag (the test rewrites it to
--local_dir for an "old tag"), an import of the checkout's own `verl` package (the pod puts the
checkout on PYTHONPATH) and train/test files in the output folder. The test venv has no parquet
writer (no pyarrow, pandas or fastparquet), so the files only carry parquet's PAR1 magic around a
JSON payload that records how the script was called.
"""

import argparse
import json
import os

import verl

parser = argparse.ArgumentParser()
parser.add_argument("--local_save_dir", required=True)
args = parser.parse_args()
out = os.path.expanduser(vars(args)["local_save_dir"])
for split in ("train", "test"):
    payload = {"split": split, "verl": verl.VERSION, "argv_flag": "--local_save_dir"}
    with open(os.path.join(out, f"{split}.parquet"), "wb") as handle:
        handle.write(b"PAR1" + json.dumps(payload).encode() + b"PAR1")
print("wrote train.parquet and test.parquet to", out)
