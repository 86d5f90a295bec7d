"""payloads/data_prep/prepare_data.py run for real, as the pod runs it, against a local git
repository and a local model folder (no network): first run, skip on re-run, ref/model changes,
interrupted downloads and failures."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from config import bucket_layout as layout
from manifests import data_prep, fuse_mounts
from payloads.data_prep import prep_common, prep_verl
from tests.support.require import verl_python

# Runs the data-prep payload in subprocesses.
pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "payloads" / "data_prep" / "prepare_data.py"
FIXTURES = Path(__file__).resolve().parent / "data_prep_fixtures"
STANDIN = FIXTURES / "gsm8k_standin.py"
FAKE_HUB = FIXTURES / "fake_hub"  # a huggingface_hub module that serves a local folder
MODEL_FOLDER = "Tiny-Model"
SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
GIT_IDENTITY = ["-c", "user.name=test", "-c", "user.email=test@example.com"]
FAILING_GSM8K = (
    "import sys\n"
    "parser_flag = '--local_save_dir'\n"
    "print('ConnectionError: cannot reach openai/gsm8k', file=sys.stderr)\n"
    "sys.exit(3)\n"
)
SILENT_GSM8K = "print('exits 0 without writing anything')\n"


@dataclass(frozen=True)
class VerlRepo:
    path: Path
    old_tag_sha: str  # v0.1.0: gsm8k.py knows only --local_dir
    new_tag_sha: str  # v0.2.0: gsm8k.py takes --local_save_dir
    misleading_tag: str  # 8 hex digits of old_tag_sha, but a tag on new_tag_sha


def git(repo: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", "-C", str(repo), *GIT_IDENTITY, *args], capture_output=True, text=True, check=True
    )
    return result.stdout.strip()


def commit_version(repo: Path, version: str, gsm8k_source: str, tag: str) -> str:
    (repo / "verl").mkdir(exist_ok=True)
    (repo / "verl" / "__init__.py").write_text(f"VERSION = {version!r}\n")
    script = repo / "examples" / "data_preprocess" / "gsm8k.py"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(gsm8k_source)
    link = repo / "examples" / "preprocess"  # verl's tree has symlinks too; they stay links
    if not link.is_symlink():
        link.symlink_to("data_preprocess")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"verl {version}")
    git(repo, "tag", tag)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def verl_repo(tmp_path_factory: pytest.TempPathFactory) -> VerlRepo:
    repo = tmp_path_factory.mktemp("verl-upstream")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "uploadpack.allowFilter", "true")  # as GitHub: partial clones over file://
    new_source = STANDIN.read_text()
    old_source = new_source.replace("local_save_dir", "local_dir")
    assert "--local_save_dir" not in old_source
    old_tag_sha = commit_version(repo, "0.1.0", old_source, "v0.1.0")
    new_tag_sha = commit_version(repo, "0.2.0", new_source, "v0.2.0")
    commit_version(repo, "0.3.0", FAILING_GSM8K, "broken")
    commit_version(repo, "0.4.0", SILENT_GSM8K, "silent")
    git(repo, "tag", old_tag_sha[:8], new_tag_sha)
    return VerlRepo(repo, old_tag_sha, new_tag_sha, misleading_tag=old_tag_sha[:8])


@pytest.fixture()
def model_source(tmp_path: Path) -> Path:
    source = tmp_path / "model-source"
    source.mkdir()
    (source / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    (source / "tokenizer.json").write_text(json.dumps({"version": "1.0"}))
    weight_map = {"embed.weight": SHARDS[0], "lm_head.weight": SHARDS[1]}
    index = {"metadata": {"total_size": 2 * 65536}, "weight_map": weight_map}
    (source / "model.safetensors.index.json").write_text(json.dumps(index))
    for number, shard in enumerate(SHARDS):
        (source / shard).write_bytes(bytes([number + 1]) * 65536)
    return source


def run_prep(
    data: Path,
    repo: Path | str,
    ref: str,
    source: Path | str,
    model: str = "org/tiny-model",
    *extra: str,
    env_extra: dict[str, str] | None = None,
    script: Path = SCRIPT,
) -> subprocess.CompletedProcess[str]:
    python3 = shutil.which("python3")
    assert python3 is not None
    env = {**os.environ, "HF_TOKEN": "hf_dummy", "HF_HOME": str(data.parent / "hf-home")}
    env.update(env_extra or {})
    cmd = [python3, str(script), "--data-root", str(data), "--verl-repo", str(repo)]
    cmd += ["--verl-ref", ref, "--model", model, "--model-folder", MODEL_FOLDER]
    cmd += ["--model-source", str(source), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def step_lines(stdout: str, step: str) -> list[str]:
    return [line for line in stdout.splitlines() if f"[{step}] " in line]


def marker(data: Path, name: str) -> dict[str, object]:
    return json.loads((data / ".prep" / f"{name}.done").read_text())


def verl_markers(data: Path) -> list[str]:
    """The verl step's marker files (every ref's, and the single one of earlier releases)."""
    return sorted(p.name for p in (data / ".prep").glob("verl*.done"))


def verl_marker_file(repo: Path | str, ref: str) -> str:
    return f"{prep_verl.verl_marker_name(str(repo), ref)}.done"


def mtimes(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*")}


def model_files(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in folder.rglob("*")
        if p.is_file() and ".cache" not in p.parts
    }


@pytest.fixture()
def pod_script(tmp_path: Path) -> Path:
    """The ConfigMap's files (manifests/data_prep.py) alone in one flat folder, as the pod's
    /scripts mount holds them: the entry must find every module it imports there."""
    folder = tmp_path / "scripts"
    folder.mkdir()
    for name, text in data_prep.read_scripts().items():
        (folder / name).write_text(text)
    return folder / data_prep.SCRIPT_KEY


def test_help_documents_the_substitution_seams(pod_script: Path) -> None:
    result = subprocess.run(
        ["python3", str(pod_script), "--help"], capture_output=True, text=True, check=True
    )
    for option in ("--data-root", "--verl-repo", "--verl-ref", "--model-folder", "--model-source"):
        assert option in result.stdout


def test_first_run_prepares_everything_and_second_run_skips(
    tmp_path: Path, verl_repo: VerlRepo, model_source: Path, pod_script: Path
) -> None:
    data = tmp_path / "data"
    out = ok(run_prep(data, verl_repo.path, "v0.2.0", model_source, script=pod_script))

    assert git(data / "verl", "rev-parse", "HEAD") == verl_repo.new_tag_sha
    assert (data / "verl" / "verl" / "__init__.py").read_text() == "VERSION = '0.2.0'\n"
    assert os.readlink(data / "verl" / "examples" / "preprocess") == "data_preprocess"
    for split in ("train", "test"):
        content = (data / "gsm8k" / f"{split}.parquet").read_bytes()
        assert content.startswith(b"PAR1") and content.endswith(b"PAR1")
        payload = json.loads(content[4:-4])
        assert payload == {"split": split, "verl": "0.2.0", "argv_flag": "--local_save_dir"}
    assert model_files(data / MODEL_FOLDER) == model_files(model_source)
    assert not (data / f"{MODEL_FOLDER}.partial").exists()
    assert not (data / ".prep" / f"model-{MODEL_FOLDER}.staging.json").exists()

    verl_marker = marker(data, prep_verl.verl_marker_name(str(verl_repo.path), "v0.2.0"))
    assert verl_marker["inputs"] == {"repo": str(verl_repo.path), "ref": "v0.2.0", "dir": "verl"}
    assert verl_marker["outputs"]["commit"] == verl_repo.new_tag_sha  # type: ignore[index]
    gsm8k_marker = marker(data, "gsm8k")
    assert set(gsm8k_marker["outputs"]["bytes"]) == {"train.parquet", "test.parquet"}  # type: ignore[index]
    model_marker = marker(data, f"model-{MODEL_FOLDER}")
    assert model_marker["inputs"] == {
        "model": "org/tiny-model",
        "model_folder": MODEL_FOLDER,
        "source": str(model_source),
    }
    assert model_marker["outputs"]["weight_files"] == 2  # type: ignore[index]
    assert model_marker["outputs"]["files"] == 5  # type: ignore[index]
    for step in ("verl", "gsm8k", "model"):
        assert any(" done in " in line for line in step_lines(out, step)), out

    before = mtimes(data)
    again = ok(run_prep(data, verl_repo.path, "v0.2.0", model_source))
    for step in ("verl", "gsm8k", "model"):
        lines = step_lines(again, step)
        assert len(lines) == 1 and "skipped" in lines[0], again
    assert mtimes(data) == before


def test_old_tag_gets_local_dir_flag_over_a_shallow_clone(
    tmp_path: Path, verl_repo: VerlRepo, model_source: Path
) -> None:
    data = tmp_path / "data"
    # A file:// URL takes git's network code path (a local path would copy the whole repository).
    ok(run_prep(data, f"file://{verl_repo.path}", "v0.1.0", model_source))
    payload = json.loads((data / "gsm8k" / "train.parquet").read_bytes()[4:-4])
    assert payload == {"split": "train", "verl": "0.1.0", "argv_flag": "--local_dir"}
    assert (data / "verl" / ".git" / "shallow").read_text().split() == [verl_repo.old_tag_sha]


@pytest.mark.parametrize(("length", "url"), [(7, False), (40, True)])
def test_commit_sha_ref(
    tmp_path: Path, verl_repo: VerlRepo, model_source: Path, length: int, url: bool
) -> None:
    data = tmp_path / "data"
    ref = verl_repo.old_tag_sha[:length]
    repo = f"file://{verl_repo.path}" if url else verl_repo.path
    ok(run_prep(data, repo, ref, model_source))
    assert git(data / "verl", "rev-parse", "HEAD") == verl_repo.old_tag_sha
    assert (data / "verl" / "verl" / "__init__.py").read_text() == "VERSION = '0.1.0'\n"
    verl_marker = marker(data, prep_verl.verl_marker_name(str(repo), ref))
    assert verl_marker["outputs"]["commit"] == verl_repo.old_tag_sha  # type: ignore[index]


def test_changed_ref_redoes_only_verl_and_keeps_checkpoints(
    tmp_path: Path, verl_repo: VerlRepo, model_source: Path
) -> None:
    data = tmp_path / "data"
    ok(run_prep(data, verl_repo.path, "v0.2.0", model_source))
    assert verl_markers(data) == [verl_marker_file(verl_repo.path, "v0.2.0")]
    (data / ".prep" / "verl.done").write_text("{}")  # the single marker of earlier releases
    checkpoint = data / "verl" / "checkpoints" / "global_step_10" / "actor" / "rank_0.pt"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"weights")
    stale = data / "verl" / "stale-file-from-v0.2.0"
    stale.write_text("x")
    others = {**mtimes(data / "gsm8k"), **mtimes(data / MODEL_FOLDER)}
    gsm8k_marker, model_marker = marker(data, "gsm8k"), marker(data, f"model-{MODEL_FOLDER}")

    out = ok(run_prep(data, verl_repo.path, verl_repo.old_tag_sha[:7], model_source))

    assert " done in " in step_lines(out, "verl")[-1]
    assert "skipped" in step_lines(out, "gsm8k")[0]
    assert "skipped" in step_lines(out, "model")[0]
    assert git(data / "verl", "rev-parse", "HEAD") == verl_repo.old_tag_sha
    assert checkpoint.read_bytes() == b"weights"
    assert not stale.exists()
    assert {**mtimes(data / "gsm8k"), **mtimes(data / MODEL_FOLDER)} == others
    assert marker(data, "gsm8k") == gsm8k_marker
    assert marker(data, f"model-{MODEL_FOLDER}") == model_marker
    # Only the new ref's marker is left: the old ref's name, which a Ray pod of the old ref may
    # hold in its metadata cache, is gone, and a pod of the new ref waits for a name of its own.
    new_ref = verl_repo.old_tag_sha[:7]
    assert verl_marker_file(verl_repo.path, new_ref) != verl_marker_file(verl_repo.path, "v0.2.0")
    assert verl_markers(data) == [verl_marker_file(verl_repo.path, new_ref)]
    verl_marker = marker(data, prep_verl.verl_marker_name(str(verl_repo.path), new_ref))
    assert verl_marker["inputs"] == {"repo": str(verl_repo.path), "ref": new_ref, "dir": "verl"}


def test_two_stacks_checkouts_in_one_bucket_keep_each_others_ref_and_marker(
    tmp_path: Path, verl_repo: VerlRepo, model_source: Path
) -> None:
    """Each stack's checkout has its folder (bucket_layout.verl_checkout) and marker, which the
    stack's Ray pods wait for (fuse_mounts.verl_prep_marker): another stack's data prep at
    another ref replaces neither."""
    data = tmp_path / "data"
    old_ref = verl_repo.old_tag_sha[:7]
    for stack, ref in (("a4", "v0.2.0"), ("a4-dev", old_ref)):
        folder = layout.verl_checkout_folder(stack)
        ok(
            run_prep(
                data, verl_repo.path, ref, model_source, "org/tiny-model", "--verl-dir", folder
            )
        )
    assert git(data / "verl-src" / "a4", "rev-parse", "HEAD") == verl_repo.new_tag_sha
    assert git(data / "verl-src" / "a4-dev", "rev-parse", "HEAD") == verl_repo.old_tag_sha
    for stack, ref in (("a4", "v0.2.0"), ("a4-dev", old_ref)):
        waits_for = fuse_mounts.verl_prep_marker(str(verl_repo.path), ref, stack)
        written = data / waits_for.removeprefix(f"{layout.DATA_MOUNT}/")
        inputs = json.loads(written.read_text())["inputs"]
        assert inputs == {"repo": str(verl_repo.path), "ref": ref, "dir": f"verl-src/{stack}"}
    assert not (data / "verl").exists()


def test_changed_model_redoes_only_model(
    tmp_path: Path, verl_repo: VerlRepo, model_source: Path
) -> None:
    data = tmp_path / "data"
    ok(run_prep(data, verl_repo.path, "v0.2.0", model_source))
    (data / MODEL_FOLDER / "left-over-from-old-model.bin").write_bytes(b"old")

    out = ok(run_prep(data, verl_repo.path, "v0.2.0", model_source, "org/other-model"))

    assert "skipped" in step_lines(out, "verl")[0]
    assert "skipped" in step_lines(out, "gsm8k")[0]
    assert " done in " in step_lines(out, "model")[-1]
    assert model_files(data / MODEL_FOLDER) == model_files(model_source)
    assert marker(data, f"model-{MODEL_FOLDER}")["inputs"]["model"] == "org/other-model"  # type: ignore[index]


def test_interrupted_download_is_resumed(
    tmp_path: Path, verl_repo: VerlRepo, model_source: Path
) -> None:
    data = tmp_path / "data"
    missing = model_source / SHARDS[1]
    saved = missing.read_bytes()
    missing.unlink()

    failed = run_prep(data, verl_repo.path, "v0.2.0", model_source)

    assert failed.returncode == 1
    reason = failed.stderr.strip().splitlines()[-1]
    assert reason.startswith("prepare_data failed at step 'model': ")
    assert SHARDS[1] in reason and "model.safetensors.index.json" in reason
    assert not (data / ".prep" / f"model-{MODEL_FOLDER}.done").exists()
    assert not (data / MODEL_FOLDER).exists()
    staging = data / f"{MODEL_FOLDER}.partial"
    assert (staging / SHARDS[0]).is_file()

    # A kill in the middle of copying the first shard leaves it truncated.
    (staging / SHARDS[0]).write_bytes((model_source / SHARDS[0]).read_bytes()[:1000])
    missing.write_bytes(saved)
    out = ok(run_prep(data, verl_repo.path, "v0.2.0", model_source))

    assert "resuming from" in out
    assert "copied 2 file(s)" in out  # the truncated shard and the missing one, nothing else
    assert model_files(data / MODEL_FOLDER) == model_files(model_source)
    assert marker(data, f"model-{MODEL_FOLDER}")["outputs"]["weight_files"] == 2  # type: ignore[index]
    assert not staging.exists()


def test_interrupted_move_into_place_is_finished(
    tmp_path: Path, verl_repo: VerlRepo, model_source: Path
) -> None:
    data = tmp_path / "data"
    missing = model_source / SHARDS[1]
    saved = missing.read_bytes()
    missing.unlink()
    assert run_prep(data, verl_repo.path, "v0.2.0", model_source).returncode == 1
    # As if a file-by-file move had been cut short: some files already in the final folder.
    staging, final = data / f"{MODEL_FOLDER}.partial", data / MODEL_FOLDER
    final.mkdir()
    for name in ("config.json", SHARDS[0]):
        (staging / name).rename(final / name)
    missing.write_bytes(saved)

    out = ok(run_prep(data, verl_repo.path, "v0.2.0", model_source))

    assert "interrupted move" in out
    assert "copied 1 file(s)" in out  # only the shard that was missing from the source
    assert model_files(final) == model_files(model_source)


def test_final_dir_without_marker_is_not_done(
    tmp_path: Path, verl_repo: VerlRepo, model_source: Path
) -> None:
    data = tmp_path / "data"
    final = data / MODEL_FOLDER
    shutil.copytree(model_source, final)
    (final / SHARDS[1]).write_bytes(b"truncated")
    (final / "unrelated.bin").write_bytes(b"junk")

    out = ok(run_prep(data, verl_repo.path, "v0.2.0", model_source))

    assert f"removing {final}: no completion marker" in out
    assert model_files(final) == model_files(model_source)
    assert (data / ".prep" / f"model-{MODEL_FOLDER}.done").is_file()


def test_gsm8k_failure_names_the_step(
    tmp_path: Path, verl_repo: VerlRepo, model_source: Path
) -> None:
    data = tmp_path / "data"
    termination_log = tmp_path / "termination-log"
    termination_log.write_text("")

    result = run_prep(
        data, verl_repo.path, "broken", model_source, "org/tiny-model",
        "--termination-log", str(termination_log),
    )  # fmt: skip

    assert result.returncode == 1
    reason = result.stderr.strip().splitlines()[-1]
    assert reason.startswith("prepare_data failed at step 'gsm8k': ")
    assert "exited with code 3" in reason and "cannot reach openai/gsm8k" in reason
    assert termination_log.read_text() == reason + "\n"
    assert verl_markers(data) == [verl_marker_file(verl_repo.path, "broken")]
    assert not (data / ".prep" / "gsm8k.done").exists()
    assert not (data / MODEL_FOLDER).exists()  # later steps do not run


def test_unknown_ref_fails_in_verl_step(
    tmp_path: Path, verl_repo: VerlRepo, model_source: Path
) -> None:
    data = tmp_path / "data"
    result = run_prep(data, verl_repo.path, "v9.9.9", model_source)
    assert result.returncode == 1
    reason = result.stderr.strip().splitlines()[-1]
    assert reason.startswith("prepare_data failed at step 'verl': ")
    assert "v9.9.9" in reason
    assert verl_markers(data) == []


def test_sha_ref_shadowed_by_a_tag_fails(
    tmp_path: Path, verl_repo: VerlRepo, model_source: Path
) -> None:
    data = tmp_path / "data"
    result = run_prep(data, verl_repo.path, verl_repo.misleading_tag, model_source)
    assert result.returncode == 1
    reason = result.stderr.strip().splitlines()[-1]
    assert reason.startswith("prepare_data failed at step 'verl': ")
    assert verl_repo.new_tag_sha in reason  # what git checked out instead of the commit
    assert not (data / "verl").exists()


def test_gsm8k_files_from_an_earlier_run_do_not_count(
    tmp_path: Path, verl_repo: VerlRepo, model_source: Path
) -> None:
    data = tmp_path / "data"
    ok(run_prep(data, verl_repo.path, "v0.2.0", model_source))
    (data / ".prep" / "gsm8k.done").unlink()  # as if the step had been interrupted

    result = run_prep(data, verl_repo.path, "silent", model_source)

    assert result.returncode == 1
    reason = result.stderr.strip().splitlines()[-1]
    assert reason.startswith("prepare_data failed at step 'gsm8k': ")
    assert "train.parquet is missing or empty" in reason


def test_failed_redo_leaves_no_marker(
    tmp_path: Path, verl_repo: VerlRepo, model_source: Path
) -> None:
    data = tmp_path / "data"
    ok(run_prep(data, verl_repo.path, "v0.2.0", model_source))
    (data / MODEL_FOLDER / "config.json").unlink()
    (model_source / SHARDS[1]).unlink()

    result = run_prep(data, verl_repo.path, "v0.2.0", model_source)

    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("prepare_data failed at step 'model'")
    assert not (data / ".prep" / f"model-{MODEL_FOLDER}.done").exists()


def fake_hub(hub: Path, model_source: Path, calls: Path) -> dict[str, str]:
    """A Hub of one model, org/tiny-model, served by the stand-in huggingface_hub (FAKE_HUB),
    which records each call in `calls`: the environment data prep runs with."""
    shutil.copytree(model_source, hub / "org" / "tiny-model")
    return {"PYTHONPATH": str(FAKE_HUB), "FAKE_HUB_ROOT": str(hub), "FAKE_HUB_CALLS": str(calls)}


def test_hub_source_goes_through_snapshot_download(
    tmp_path: Path, verl_repo: VerlRepo, model_source: Path
) -> None:
    data, calls = tmp_path / "data", tmp_path / "hub-calls.jsonl"
    hub = tmp_path / "hub"
    env = fake_hub(hub, model_source, calls)
    (hub / "org" / "tiny-model" / SHARDS[1]).unlink()
    # Llama's second copy of the weights for Meta's own loader: never downloaded.
    (hub / "org" / "tiny-model" / "original").mkdir()
    (hub / "org" / "tiny-model" / "original" / "consolidated.00.pth").write_bytes(b"x" * 64)

    failed = run_prep(data, verl_repo.path, "v0.2.0", "hub", env_extra=env)
    assert failed.returncode == 1
    assert SHARDS[1] in failed.stderr.strip().splitlines()[-1]
    shutil.copyfile(model_source / SHARDS[1], hub / "org" / "tiny-model" / SHARDS[1])
    out = ok(run_prep(data, verl_repo.path, "v0.2.0", "hub", env_extra=env))

    assert "HF_TOKEN set" in out
    assert model_files(data / MODEL_FOLDER) == model_files(model_source)
    assert marker(data, f"model-{MODEL_FOLDER}")["inputs"]["source"] == "hub"  # type: ignore[index]
    # The files but the weights first, then the weights, both at the commit the Hub served the
    # first time (the second run finds the files' marker and downloads the weights only).
    from payloads.data_prep.prep_model import FILES_IGNORE_PATTERNS

    commit = hashlib.sha1(b"org/tiny-model").hexdigest()
    weights = {
        "repo_id": "org/tiny-model",
        "revision": commit,
        "token": "hf_dummy",
        "ignore_patterns": ["original/*"],
        "progress_bars_disabled": "1",
    }
    files = {**weights, "ignore_patterns": list(FILES_IGNORE_PATTERNS)}
    got = [json.loads(line) for line in calls.read_text().splitlines()]
    assert got == [files, weights, weights]
    assert marker(data, f"model-files-{MODEL_FOLDER}")["outputs"]["commit"] == commit  # type: ignore[index]
    held = model_files(data / "model-files" / MODEL_FOLDER)
    assert held and not any(name.endswith(".safetensors") for name in held)


def test_model_files_copied_from_the_weights_keep_the_weights_commit(
    tmp_path: Path, verl_repo: VerlRepo, model_source: Path
) -> None:
    """The files step takes the files from a finished weights folder: the commit the weights were
    downloaded at goes with them, so a later weights download (the folder invalidated) fetches
    that commit, not the branch's head at the time."""
    data, calls = tmp_path / "data", tmp_path / "hub-calls.jsonl"
    env = fake_hub(tmp_path / "hub", model_source, calls)
    ok(run_prep(data, verl_repo.path, "v0.2.0", "hub", env_extra=env))
    commit = hashlib.sha1(b"org/tiny-model").hexdigest()
    assert marker(data, f"model-{MODEL_FOLDER}")["outputs"]["commit"] == commit  # type: ignore[index]

    (data / ".prep" / f"model-files-{MODEL_FOLDER}.done").unlink()
    shutil.rmtree(data / "model-files" / MODEL_FOLDER)
    out = ok(run_prep(data, verl_repo.path, "v0.2.0", "hub", env_extra=env))

    assert str(data / MODEL_FOLDER) in "\n".join(step_lines(out, "model-files"))
    assert marker(data, f"model-files-{MODEL_FOLDER}")["outputs"]["commit"] == commit  # type: ignore[index]


def test_a_hub_answer_without_a_commit_stops_before_any_file_is_fetched(
    tmp_path: Path, verl_repo: VerlRepo, model_source: Path
) -> None:
    data, calls = tmp_path / "data", tmp_path / "hub-calls.jsonl"
    env = fake_hub(tmp_path / "hub", model_source, calls)

    failed = run_prep(
        data, verl_repo.path, "v0.2.0", "hub", env_extra={**env, "FAKE_HUB_NO_SHA": "1"}
    )

    assert failed.returncode == 1
    last = failed.stderr.strip().splitlines()[-1]
    assert "gave no commit for org/tiny-model at main" in last
    assert "pulumi config set verl-gke:modelRevision" in last
    assert not calls.exists()  # nothing downloaded at a revision named "None"


def test_a_pinned_revision_is_downloaded_into_a_folder_that_names_it(
    tmp_path: Path, verl_repo: VerlRepo, model_source: Path
) -> None:
    from config.bucket_layout import model_folder_name

    data, calls = tmp_path / "data", tmp_path / "hub-calls.jsonl"
    shutil.copytree(model_source, tmp_path / "hub" / "org" / "tiny-model")
    env = {"PYTHONPATH": str(FAKE_HUB), "FAKE_HUB_ROOT": str(tmp_path / "hub"),
           "FAKE_HUB_CALLS": str(calls)}  # fmt: skip
    commit = "0123456789abcdef" * 2 + "01234567"
    folder = model_folder_name("org/tiny-model", commit)
    assert folder == "tiny-model-0123456789ab"
    python3 = shutil.which("python3")
    assert python3 is not None
    cmd = [python3, str(SCRIPT), "--data-root", str(data), "--verl-repo", str(verl_repo.path),
           "--verl-ref", "v0.2.0", "--model", "org/tiny-model", "--model-folder", folder,
           "--model-revision", commit, "--model-source", "hub"]  # fmt: skip
    run = subprocess.run(
        cmd, capture_output=True, text=True, timeout=120,
        env={**os.environ, "HF_TOKEN": "hf_dummy", **env},
    )  # fmt: skip
    out = ok(run)
    assert f"org/tiny-model at commit {commit}" in out
    # The files but the weights, then the weights: both at the pinned commit.
    calls_made = [json.loads(line) for line in calls.read_text().splitlines()]
    assert [call["revision"] for call in calls_made] == [commit, commit]
    assert model_files(data / folder) == model_files(model_source)
    assert marker(data, f"model-{folder}")["inputs"]["revision"] == commit  # type: ignore[index]
    # A branch name is no pin: the script refuses it before downloading anything.
    branch = subprocess.run(
        [*cmd[:-4], "--model-revision", "main", "--model-source", "hub"],
        capture_output=True, text=True, timeout=120, env={**os.environ, **env},
    )  # fmt: skip
    assert branch.returncode == 2 and "--model-revision must be 40 hex digits" in branch.stderr


def test_the_scripts_folders_are_the_bucket_layouts() -> None:
    # The script runs alone in the pod and cannot import config/bucket_layout.py; the folders it
    # writes must still be the ones the GRPO job reads (the model folder arrives as --model-folder).
    def under_mount(name: str) -> str:
        return f"{layout.DATA_MOUNT}/{name}"

    assert layout.VERL_CHECKOUTS == under_mount(prep_common.VERL_CHECKOUTS_DIR)
    assert layout.CHECKPOINT_PREFIX.startswith(f"{prep_common.VERL_DIR}/")
    assert layout.GSM8K_DIR == under_mount(prep_common.GSM8K_DIR)
    assert (layout.GSM8K_TRAIN, layout.GSM8K_TEST) == tuple(
        f"{layout.GSM8K_DIR}/{name}" for name in prep_common.GSM8K_FILES
    )
    assert layout.PREP_MARKERS == under_mount(prep_common.PREP_DIR)
    # Replacing the verl checkout for a new ref keeps the checkpoints inside it.
    kept = layout.CHECKPOINT_PREFIX.removeprefix("verl/")
    assert kept in prep_verl.KEEP_IN_VERL
    assert set(layout.rewritten_by_data_prep("Qwen/Qwen2.5-32B-Instruct")) == {
        *(under_mount(name) for name in prep_common.RESERVED_DIRS),
        under_mount("Qwen2.5-32B-Instruct"),
    }


def test_the_hub_filter_leaves_out_llamas_original_copy_and_keeps_the_model() -> None:
    """huggingface_hub's own filter (utils/_paths.py filter_repo_objects, which snapshot_download
    applies; 0.36.2 in the verl 0.6.1 virtualenv) on meta-llama/Llama-3.1-8B-Instruct's files."""
    from payloads.data_prep.prep_model import HUB_IGNORE_PATTERNS

    python = verl_python("0.6.1")
    files = [
        "config.json", "generation_config.json", "model-00001-of-00004.safetensors",
        "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json",
        "original/consolidated.00.pth", "original/params.json", "original/tokenizer.model",
    ]  # fmt: skip
    probe = (
        "import json, sys; from huggingface_hub.utils import filter_repo_objects; "
        "print(json.dumps(list(filter_repo_objects(json.loads(sys.argv[1]), "
        "ignore_patterns=json.loads(sys.argv[2])))))"
    )
    done = subprocess.run(
        [str(python), "-c", probe, json.dumps(files), json.dumps(list(HUB_IGNORE_PATTERNS))],
        capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip
    assert json.loads(done.stdout) == [f for f in files if not f.startswith("original/")]


def test_the_inputs_part_holds_what_the_rehearsal_reads_and_no_weight(
    tmp_path: Path, verl_repo: VerlRepo, model_source: Path
) -> None:
    """--part inputs (the data-prep Job the rehearsal waits for) leaves the model's files but its
    weights in model-files/<folder> and no model folder; --part weights (the model-download Job)
    then downloads the weights alone; a later inputs part copies the files from the weights."""
    data = tmp_path / "data"
    ok(run_prep(data, verl_repo.path, "v0.2.0", model_source, "org/tiny-model", "--part", "inputs"))
    files = data / "model-files" / MODEL_FOLDER
    held = model_files(files)
    assert held == {
        name: content
        for name, content in model_files(model_source).items()
        if not name.endswith(".safetensors")
    }
    assert "config.json" in held and not (data / MODEL_FOLDER).exists()
    assert (data / "gsm8k" / "train.parquet").is_file()

    weights = ok(
        run_prep(
            data, verl_repo.path, "v0.2.0", model_source, "org/tiny-model", "--part", "weights"
        )
    )
    assert model_files(data / MODEL_FOLDER) == model_files(model_source)
    assert not step_lines(weights, "verl") and not step_lines(weights, "model-files")

    # Files lost, weights kept: the inputs part copies them from the weights' own folder.
    shutil.rmtree(files)
    (data / ".prep" / f"model-files-{MODEL_FOLDER}.done").unlink()
    again = ok(
        run_prep(data, verl_repo.path, "v0.2.0", model_source, "org/tiny-model", "--part", "inputs")
    )
    assert model_files(files) == held
    assert marker(data, f"model-files-{MODEL_FOLDER}")["outputs"]["from"] == str(
        data / MODEL_FOLDER
    )  # type: ignore[index]
    assert not step_lines(again, "model")
