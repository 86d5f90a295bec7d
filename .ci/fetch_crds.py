"""Puts the CRD schemas of .ci/crds.txt into a folder for the custom-resource tests.

Each file comes from the shared folder when it holds it (../shared/crds beside the clone), else
from its pinned URL, kept only when its sha256 matches the list. Prints one line per file and,
for each file it could not get, why; exits 1 when any is missing. Standard library only: it runs
before any virtualenv exists.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

DOWNLOAD_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Crd:
    name: str
    sha256: str
    url: str


def read_list(path: Path) -> list[Crd]:
    crds = []
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, sha256, url = line.split()
            crds.append(Crd(name, sha256, url))
    return crds


def download(crd: Crd, dest: Path) -> str | None:
    """Writes the file when its sha256 matches; returns why not otherwise."""
    try:
        with urllib.request.urlopen(crd.url, timeout=DOWNLOAD_TIMEOUT_S) as response:
            body = response.read()
    except (urllib.error.URLError, OSError) as error:
        return f"could not download {crd.url}: {error}"
    digest = hashlib.sha256(body).hexdigest()
    if digest != crd.sha256:
        return f"{crd.url} has sha256 {digest}, not the pinned {crd.sha256}: not kept"
    partial = dest / f".{crd.name}.partial"
    partial.write_bytes(body)
    partial.replace(dest / crd.name)
    return None


def fetch(crds: list[Crd], shared: Path, dest: Path) -> list[str]:
    """Every file into `dest`; returns one line per file that is missing there."""
    dest.mkdir(parents=True, exist_ok=True)
    problems = []
    for crd in crds:
        source = shared / crd.name
        if source.is_file():
            shutil.copyfile(source, dest / crd.name)
            digest = hashlib.sha256(source.read_bytes()).hexdigest()
            note = "" if digest == crd.sha256 else f" (not the pinned file: {crd.url})"
            print(f"{crd.name}: from {source}{note}")
            continue
        problem = download(crd, dest)
        if problem is None:
            print(f"{crd.name}: downloaded, sha256 {crd.sha256}")
        else:
            problems.append(f"{crd.name}: {problem}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--list", type=Path, default=Path(".ci/crds.txt"))
    parser.add_argument("--shared", type=Path, default=Path("../shared/crds"))
    parser.add_argument("--dest", type=Path, default=Path(".crds"))
    args = parser.parse_args(argv)
    problems = fetch(read_list(args.list), args.shared, args.dest)
    for problem in problems:
        print(f"missing CRD {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
