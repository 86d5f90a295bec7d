"""Stand-in for `python -m verl.model_merger merge` in the export tests: same command line,
writes a tiny "model" naming its source instead of merging shards. A source folder holding a file
named FAIL makes it fail the way a real merge error would (traceback-ish output, exit 1)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="operation", required=True)
    merge = sub.add_parser("merge")
    merge.add_argument("--backend", required=True, choices=["fsdp", "megatron"])
    merge.add_argument("--local_dir", required=True)
    merge.add_argument("--target_dir", required=True)
    args = parser.parse_args()
    source = Path(args.local_dir)
    if (source / "FAIL").exists():
        print("Traceback (most recent call last):\nRuntimeError: shard 3 is truncated")
        return 1
    target = Path(args.target_dir)
    target.mkdir(parents=True, exist_ok=True)
    (target / "config.json").write_text(json.dumps({"merged_from": str(source)}))
    count = len(list((target.parent).glob("*")))
    print(f"Saved merged model to {target} ({count})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
