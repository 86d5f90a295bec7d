"""The README's set-up command (`bash .ci/setup`): the CRD schemas it brings and how a missing
prerequisite reads.

.ci/fetch_crds.py takes each CRD of .ci/crds.txt from ../shared/crds when there, else downloads
it by its pinned URL and keeps it only when its sha256 matches. Here the URLs point at a server on
127.0.0.1 in this process.
"""

from __future__ import annotations

import hashlib
import http.server
import importlib.util
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from config.settings import StackSettings
from tests.support import require

ROOT = Path(__file__).resolve().parent.parent
BODY = b"kind: CustomResourceDefinition\n"


def _fetch_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fetch_crds", ROOT / ".ci" / "fetch_crds.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered first: its dataclass looks its module up by name.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


fetch_crds = _fetch_module()


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/a.yaml":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(BODY)))
            self.end_headers()
            self.wfile.write(BODY)

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def _crd(server: str, sha256: str, path: str = "/a.yaml") -> Any:
    return fetch_crds.Crd("a.yaml", sha256, f"{server}{path}")


def test_a_download_whose_sha256_matches_is_kept(server: str, tmp_path: Path) -> None:
    crd = _crd(server, hashlib.sha256(BODY).hexdigest())
    assert fetch_crds.fetch([crd], tmp_path / "no-shared", tmp_path / "crds") == []
    assert (tmp_path / "crds" / "a.yaml").read_bytes() == BODY


def test_a_download_whose_sha256_differs_is_refused_and_not_kept(
    server: str, tmp_path: Path
) -> None:
    problems = fetch_crds.fetch([_crd(server, "0" * 64)], tmp_path, tmp_path / "crds")
    assert len(problems) == 1 and "not the pinned" in problems[0]
    assert list((tmp_path / "crds").iterdir()) == []


def test_an_unreachable_url_is_reported_by_file_and_url(server: str, tmp_path: Path) -> None:
    crd = _crd(server, "0" * 64, path="/gone.yaml")
    problems = fetch_crds.fetch([crd], tmp_path, tmp_path / "crds")
    assert problems == [f"a.yaml: could not download {crd.url}: HTTP Error 404: Not Found"]
    listing = str(_write_list(tmp_path, crd))
    dest = str(tmp_path / "crds")
    assert fetch_crds.main(["--list", listing, "--shared", str(tmp_path), "--dest", dest]) == 1


def test_the_shared_folder_is_used_without_a_download(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "a.yaml").write_bytes(BODY)
    # Port 9 (discard): nothing answers, so a download attempt would be reported.
    crd = fetch_crds.Crd("a.yaml", "0" * 64, "http://127.0.0.1:9/a.yaml")
    assert fetch_crds.fetch([crd], shared, tmp_path / "crds") == []
    assert (tmp_path / "crds" / "a.yaml").read_bytes() == BODY


def _write_list(tmp_path: Path, crd: Any) -> Path:
    listing = tmp_path / "crds.txt"
    listing.write_text(f"# a comment\n{crd.name} {crd.sha256} {crd.url}\n")
    return listing


def test_the_pinned_crds_are_those_of_the_chart_versions_the_stacks_deploy() -> None:
    urls = {crd.name: crd.url for crd in fetch_crds.read_list(ROOT / ".ci" / "crds.txt")}
    defaults = StackSettings.model_fields
    kuberay = defaults["kuberay_chart_version"].default
    dra = defaults["dra_driver_chart_version"].default
    assert f"/ray-project/kuberay/v{kuberay}/" in urls["ray.io_rayclusters.yaml"]
    assert f"/k8s-dra-driver-gpu/v{dra}/" in urls["resource.nvidia.com_computedomains.yaml"]
    # Every CRD the tests validate against is in the list.
    assert set(urls) == {
        "ray.io_rayclusters.yaml",
        "resource.nvidia.com_computedomains.yaml",
        "networking.gke.io_gkenetworkparamsets.yaml",
        "networking.gke.io_networks.yaml",
        "autoscaling.x-k8s.io_provisioningrequests.yaml",
    }


def test_a_missing_prerequisite_names_the_set_up_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(require.CI_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"no CRDs \(`bash \.ci/setup` installs it\)"):
        require.missing("no CRDs")
    monkeypatch.setenv(require.CI_ENV, "true")
    with pytest.raises(pytest.fail.Exception, match=r"bash \.ci/setup.*CI=true: a skip here"):
        require.missing("no CRDs")


def test_the_clone_s_own_folders_are_used_when_no_variable_names_another(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / ".crds").mkdir()
    monkeypatch.delenv("VERL_GKE_CRDS_DIR", raising=False)
    monkeypatch.setenv("VERL_GKE_RAY_VENVS", "/elsewhere")
    monkeypatch.delenv("VERL_GKE_VERL_VENVS", raising=False)
    require.use_local_prerequisites(tmp_path)
    assert os.environ["VERL_GKE_CRDS_DIR"] == str(tmp_path / ".crds")
    assert os.environ["VERL_GKE_RAY_VENVS"] == "/elsewhere"
    assert "VERL_GKE_VERL_VENVS" not in os.environ


def test_each_set_up_step_says_how_far_it_is_and_how_long_it_took() -> None:
    # The step function of .ci/setup, run on two stand-in steps (one failing): numbered headers,
    # each step's duration, and the failed one listed as missing.
    script = (ROOT / ".ci" / "setup").read_text()
    step = script[script.index("steps_total=0") : script.index("\nmain_venv()")]
    program = (
        "missing=()\nstarted=$SECONDS\n"
        + step
        + '\nsteps_total=2\nstep "first" true\nstep "second" false\necho "missing=${missing[*]}"\n'
    )
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=60)
    lines = done.stdout.splitlines()
    assert lines[0] == "== [1/2] first (started at 0 s)"
    assert lines[1] == "   done in 0 s"
    assert lines[2].startswith("== [2/2] second (started at ")
    assert lines[-1] == "missing=second"
