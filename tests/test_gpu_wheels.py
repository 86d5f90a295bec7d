"""bench/build_gpu_wheels.py without the network: the committed list, its parser, and the
stripping of Ray's wheel (the downloads themselves need an index: docs/gpu-run.md, Command)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from bench import build_gpu_wheels as wheels
from bench import gpu_run_support as support
from config.profiles import PROFILES


def test_the_list_pins_the_ray_and_verl_of_the_stack_the_gpu_run_plans() -> None:
    pins = {wheels.canonical(p.name): p for p in wheels.read_pins(wheels.LIST)}
    profile = PROFILES[support.STACK]
    assert pins["ray"].version == profile.ray_version
    assert f"v{pins['verl'].version}" == profile.verl_ref
    assert sorted(n for n, p in pins.items() if p.sdist) == ["antlr4-python3-runtime", "pylatexenc"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("codetiming>=1.4", "is not 'name==version'"),
        ("codetiming==1.4.0 sdsit", "is not 'name==version'"),
        ("codetiming==1.4.0\nCodeTiming==1.4.0", "listed more than once: codetiming"),
    ],
)
def test_a_line_that_is_not_one_pin_is_refused_with_its_place(
    tmp_path: Path, line: str, message: str
) -> None:
    listed = tmp_path / "wheels.txt"
    listed.write_text(f"# comment\n{line}  # why\n")
    with pytest.raises(SystemExit) as refused:
        wheels.read_pins(listed)
    assert message in str(refused.value) and str(listed) in str(refused.value)


def test_rays_wheel_loses_the_java_worker_and_rllib_and_their_record_lines(
    tmp_path: Path,
) -> None:
    wheel = tmp_path / "ray-2.47.0-cp312-cp312-manylinux2014_x86_64.whl"
    kept = ["ray/__init__.py", "ray/dashboard/head.py", "ray-2.47.0.dist-info/METADATA"]
    dropped = ["ray/jars/ray_dist.jar", "ray/rllib/__init__.py"]
    record = "".join(f"{name},sha256=x,1\n" for name in [*kept, *dropped])
    with zipfile.ZipFile(wheel, "w") as archive:
        for name in [*kept, *dropped]:
            archive.writestr(name, "x")
        archive.writestr("ray-2.47.0.dist-info/RECORD", record)
    assert wheels.strip_ray(wheel) == 2
    with zipfile.ZipFile(wheel) as archive:
        assert sorted(archive.namelist()) == sorted([*kept, "ray-2.47.0.dist-info/RECORD"])
        lines = archive.read("ray-2.47.0.dist-info/RECORD").decode().splitlines()
    assert [line.split(",")[0] for line in lines] == kept
    assert wheels.strip_ray(wheel) == 0  # already stripped: unchanged
