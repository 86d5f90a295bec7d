"""Build the GPU machine's wheel set (bench/gpu_wheels.txt) into .whl/.

    .venv/bin/python bench/build_gpu_wheels.py            # -> .whl/, prints the total size

Wheels are downloaded for CPython 3.12 on manylinux x86_64 (the GPU machine's python3 is 3.12.3
and reaches no network), `sdist` lines are built here with `pip wheel --no-deps` (pure Python),
and Ray's wheel loses ray/jars/ (the Java worker) and ray/rllib/ with their RECORD lines: whole,
it is 68.9 MB, over the 64 MiB a device call carries, and verl uses neither. Wheels already in
the folder at the pinned version are kept; any other wheel there is removed, so `.whl/*.whl` is
exactly the list. Exits non-zero, naming the package, when a download or build fails.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LIST = REPO / "bench" / "gpu_wheels.txt"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
# Folders of Ray's wheel that verl 0.6.1 never loads (Java worker, RLlib).
RAY_DROPPED = ("ray/jars/", "ray/rllib/")
LINE = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s#]+)(?P<sdist>\s+sdist)?$"
)


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    sdist: bool

    @property
    def key(self) -> tuple[str, str]:
        return canonical(self.name), self.version

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


def canonical(name: str) -> str:
    """PEP 503 normalised name (wheel file names use '_' where the index uses '-')."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(path: Path) -> list[Pin]:
    pins: list[Pin] = []
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        text = raw.split("#", 1)[0].strip()
        if not text:
            continue
        match = LINE.match(text)
        if match is None:
            raise SystemExit(
                f"{path}:{number}: {text!r} is not 'name==version' (optionally followed by "
                "'sdist'); write e.g. 'codetiming==1.4.0'"
            )
        pins.append(Pin(match["name"], match["version"], bool(match["sdist"])))
    names = [canonical(p.name) for p in pins]
    doubled = sorted({n for n in names if names.count(n) > 1})
    if doubled:
        raise SystemExit(f"{path}: listed more than once: {', '.join(doubled)}; keep one line each")
    return pins


def wheel_key(path: Path) -> tuple[str, str]:
    """(canonical name, version) of a wheel file name (PEP 427: name-version-...-.whl)."""
    name, version = path.name.split("-")[:2]
    return canonical(name), version


def pip(args: list[str], what: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        errors = [
            ln for ln in done.stderr.splitlines() if "ERROR" in ln
        ] or done.stderr.splitlines()
        detail = "\n  ".join(errors[-8:])
        raise SystemExit(f"{what} failed (pip exited {done.returncode}):\n  {detail}")


def download(pins: list[Pin], folder: Path, python_version: str) -> None:
    """One `pip download` for all binary pins: wheels only, for the GPU machine's interpreter."""
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    pip(
        [
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            python_version,
            "--implementation",
            "cp",
            *platforms,
            "--dest",
            str(folder),
            *(p.requirement for p in pins),
        ],
        f"downloading {', '.join(p.requirement for p in pins)}",
    )


def build_sdist(pin: Pin, folder: Path) -> None:
    pip(
        ["wheel", "--quiet", "--no-deps", "--wheel-dir", str(folder), pin.requirement],
        f"building {pin.requirement} from its sdist",
    )
    built = [w for w in folder.glob("*.whl") if wheel_key(w) == pin.key]
    if not built or not built[0].name.endswith("-py3-none-any.whl"):
        raise SystemExit(f"{pin.requirement}: expected a pure-Python wheel, got {built}")


def strip_ray(wheel: Path) -> int:
    """Rewrite Ray's wheel without RAY_DROPPED and their RECORD lines; returns entries dropped."""
    with zipfile.ZipFile(wheel) as source:
        infos = source.infolist()
        dropped = [i for i in infos if i.filename.startswith(RAY_DROPPED)]
        if not dropped:
            return 0
        stripped = wheel.with_suffix(".stripped")
        with zipfile.ZipFile(stripped, "w", zipfile.ZIP_DEFLATED) as target:
            for info in infos:
                if info.filename.startswith(RAY_DROPPED):
                    continue
                data = source.read(info)
                if info.filename.endswith(".dist-info/RECORD"):
                    lines = data.decode().splitlines(keepends=True)
                    data = "".join(ln for ln in lines if not ln.startswith(RAY_DROPPED)).encode()
                target.writestr(info, data)
    stripped.replace(wheel)
    return len(dropped)


def build(dest: Path, python_version: str, pins: list[Pin]) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    wanted = {p.key for p in pins}
    for old in dest.glob("*.whl"):
        if wheel_key(old) not in wanted:
            print(f"removing {old.name} (not in {LIST.name})")
            old.unlink()
    present = {wheel_key(w) for w in dest.glob("*.whl")}
    missing = [p for p in pins if p.key not in present]
    with tempfile.TemporaryDirectory(prefix="gpu-wheels-") as scratch:
        work = Path(scratch)
        binary = [p for p in missing if not p.sdist]
        if binary:
            print(f"downloading {len(binary)} wheels for CPython {python_version} ...", flush=True)
            download(binary, work, python_version)
        for pin in (p for p in missing if p.sdist):
            print(f"building {pin.requirement} from its sdist ...", flush=True)
            build_sdist(pin, work)
        for wheel in work.glob("*.whl"):
            if canonical(wheel_key(wheel)[0]) == "ray":
                print(f"ray: dropped {strip_ray(wheel)} entries under {', '.join(RAY_DROPPED)}")
            shutil.move(wheel, dest / wheel.name)
    wheels = sorted(dest.glob("*.whl"))
    have = {wheel_key(w) for w in wheels}
    absent = [p.requirement for p in pins if p.key not in have]
    if absent:
        raise SystemExit(f"no wheel in {dest} for: {', '.join(absent)}")
    for wheel in wheels:
        if wheel_key(wheel)[0] == "ray" and strip_ray(wheel):
            print(f"ray: stripped {wheel.name} (it was whole)")
    return wheels


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=REPO / ".whl", help="default: .whl/")
    parser.add_argument(
        "--python-version",
        default="3.12",
        help="the interpreter the wheels are for (the GPU machine's: 3.12)",
    )
    parser.add_argument("--list", type=Path, default=LIST, help="default: bench/gpu_wheels.txt")
    args = parser.parse_args(argv)
    wheels = build(args.dest, args.python_version, read_pins(args.list))
    total = sum(w.stat().st_size for w in wheels)
    print(f"{len(wheels)} wheels in {args.dest}: {total / 1e6:.1f} MB ({total / 2**20:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
