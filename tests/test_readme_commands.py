"""Every shell command of the README's code blocks, as typed.

What runs here: each block's syntax (`bash -n`); the install lines through pip's own option and
requirements-file parsers (the install itself needs the package index, which this suite does not
reach; the `pip install --upgrade pip` before it is what makes the hashed install work with the
pip that `venv` brings on Python 3.11 and 3.12, as .ci/setup does); the `pulumi config set` lines
written into the stack file as the CLI writes them and judged by Pulumi.yaml's declared types
(planning/pulumi_config.py; CI has no Pulumi CLI); `pulumi up` as the offline plan with --strict on
the stack those commands made; `python -m tools.plan` run; `python -m tools.run` through its own
argument parser. A command of the cloud or another tool (gcloud, hf, vllm, pulumi destroy) is
syntax-checked only, and named in CLOUD_ONLY so that no new kind of command passes unnoticed.
The same `pulumi config set` check runs over every doc page.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from pip._internal.commands import create_command
from pip._internal.network.session import PipSession
from pip._internal.req.req_file import parse_requirements

from maintenance import settings_examples
from planning import pulumi_config
from planning.offline_engine import REPO_ROOT, _declarations
from planning.pulumi_config import ConfigSet
from tools import plan as plan_cli
from tools import run as run_cli

README = REPO_ROOT / "README.md"
DOCS = sorted((REPO_ROOT / "docs").glob("*.md"))
# What the user types where the CLI asks for a value (`pulumi config set KEY` without one reads
# it from the console, pkg/cmd/pulumi/config/config_set.go): a token the rules accept.
ASKED = {"verl-gke:hfToken": "hf_" + "a" * 34}
# First words of commands that need the cloud or a tool outside this project.
CLOUD_ONLY = {"gcloud", "hf", "vllm", "P=my-project;", "HASH=$(gcloud", "MODEL=$(pulumi", "for"}
# `pulumi` subcommands that need the CLI and a backend, and no equivalent offline.
PULUMI_CLI_ONLY = {("stack", "init"), ("destroy",), ("stack", "output")}


def _blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, re.S)


def _commands(block: str) -> list[str]:
    """The block's commands (`a && b` as two), continuations joined, comments and loop bodies
    left out."""
    lines, depth = [], 0
    for line in block.replace("\\\n", " ").splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if depth == 0:
            lines.extend(part.strip() for part in stripped.split(" && "))
        depth += stripped.startswith("for ") - (stripped == "done")
    return lines


def _config_set(words: list[str], require_stack: bool = True) -> tuple[str, ConfigSet]:
    """(stack, the set) of `pulumi config set [--secret] [--path] KEY VALUE [-s STACK]`."""
    flags = {w for w in words if w in ("--secret", "--path")}
    rest = [w for w in words[3:] if w not in flags]
    assert "-s" in rest or not require_stack, f"{words}: name the stack with -s"
    index = rest.index("-s") if "-s" in rest else len(rest)
    stack = rest[index + 1] if "-s" in rest else "STACK"
    given = [w for i, w in enumerate(rest) if i not in (index, index + 1)]
    key, value = given if len(given) == 2 else (given[0], ASKED[given[0]])
    change = ConfigSet(key, value, path="--path" in flags, secret="--secret" in flags)
    return stack, change


def _as_plan_args(changes: list[ConfigSet]) -> list[str]:
    return [
        arg
        for change in changes
        for arg in ("--set-secret" if change.secret else "--set", f"{change.key}={change.text}")
    ]


def _check_pip_install(words: list[str], upgraded: bool) -> None:
    argv = words[words.index("install") + 1 :]
    options, args = create_command("install").parse_args(argv)
    assert args == (["pip"] if options.upgrade else []), f"{words}: stray arguments {args}"
    if options.require_hashes:
        # pip 23.2.1 (the venv default of Python 3.11/3.12) refuses hashed lines that the current
        # pip takes: the README upgrades pip first, as .ci/setup does.
        assert upgraded, f"{words}: upgrade pip first (python -m pip install --upgrade pip)"
        for requirements in options.requirements:
            parsed = list(parse_requirements(str(REPO_ROOT / requirements), PipSession()))
            unhashed = [r.requirement for r in parsed if not (r.options or {}).get("hashes")]
            assert parsed and not unhashed, unhashed


def _run_block(block: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """Run or check each command of one block; returns what each command was judged by."""
    judged: list[str] = []
    config: dict[str, list[ConfigSet]] = {}
    upgraded = False
    for line in _commands(block):
        unquoted = re.sub(r"'[^']*'|\"[^\"]*\"", "''", line).split(" #", 1)[0]
        assert not re.search(r"<\w", unquoted), f"{line}: an unquoted <...> is a redirection"
        words = shlex.split(line, comments=True)
        first = words[0]
        if first in CLOUD_ONLY:
            judged.append(f"syntax only: {line}")
            continue
        if first == "source":
            assert words[1] == ".venv/bin/activate", line  # made by `python3 -m venv .venv`
            continue
        if first == "bash":
            assert (REPO_ROOT / words[1]).is_file(), line
            continue
        if first == "pulumi":
            sub = tuple(words[1:3])
            if sub == ("config", "set"):
                stack, change = _config_set(words)
                config.setdefault(stack, []).append(change)
                judged.append(f"Pulumi's types: {line}")
            elif words[1] == "up":
                stack = words[words.index("-s") + 1]
                code = plan_cli.main([stack, "--strict", *_as_plan_args(config.get(stack, []))])
                assert code == 0, capsys.readouterr().err
                judged.append(f"strict plan: {line}")
            else:
                assert sub in PULUMI_CLI_ONLY or sub[:1] in PULUMI_CLI_ONLY, line
                judged.append(f"needs the Pulumi CLI: {line}")
            continue
        assert first in ("python", "python3", ".venv/bin/python"), line
        module = words[words.index("-m") + 1]
        if module == "venv":
            continue
        if module == "pip":
            if "--upgrade" in words and words[-1] == "pip":
                upgraded = True
            _check_pip_install(words, upgraded)
            judged.append(f"pip's parser: {line}")
        elif module == "tools.plan":
            stack = words[words.index("-m") + 2]
            args = words[words.index("-m") + 2 :]
            assert plan_cli.main([*args, *_as_plan_args(config.get(stack, []))]) == 0, (
                capsys.readouterr().err
            )
            judged.append(f"plan: {line}")
        elif module == "tools.run":
            args = words[words.index("-m") + 2 :]
            command = args.pop(0) if args[0] in run_cli.COMMANDS else "status"
            run_cli.build_parser(command).parse_args(args)
            judged.append(f"tools.run's parser: {line}")
        else:
            assert module == "pytest", line  # the suite itself
    return judged


@pytest.mark.parametrize("index", range(len(_blocks(README.read_text()))))
def test_each_readme_block_runs_as_typed(index: int, capsys: pytest.CaptureFixture[str]) -> None:
    block = _blocks(README.read_text())[index]
    syntax = subprocess.run(["bash", "-n"], input=block, text=True, capture_output=True)
    assert syntax.returncode == 0, syntax.stderr
    _run_block(block, capsys)


def test_the_quick_start_s_commands_reach_the_strict_plan() -> None:
    quick = README.read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    (block,) = _blocks(quick)
    words = [shlex.split(line, comments=True) for line in _commands(block)]
    assert words[0][:3] == ["python3", "-m", "venv"]
    assert words[1][-1] == "pip" and "--upgrade" in words[1], "then it upgrades pip"
    assert ["pulumi", "up", "-s", "a4x"] == words[-2][:4]
    assert "--follow" in words[-1]


def _doc_config_sets(path: Path) -> list[str]:
    text = path.read_text()
    found = []
    for block in [*_blocks(text), *re.findall(r"`(pulumi config set [^`]+)`", text)]:
        for line in _commands(block):
            if line.startswith("pulumi config set ") and not line.endswith("\\"):
                found.append(line)
    return found


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.name)
def test_every_documented_config_set_stores_a_value_of_the_declared_type(path: Path) -> None:
    declarations = _declarations(REPO_ROOT)
    for line in _doc_config_sets(path):
        unquoted = re.sub(r"'[^']*'|\"[^\"]*\"", "''", line)
        assert not re.search(r"<\w", unquoted), f"{path.name}: {line}: <...> unquoted"
        words = shlex.split(line, comments=True)
        positional = [w for w in words[3:] if not w.startswith("-")]
        if any(w in ("KEY", "VALUE") for w in words) or len(positional) < 2:
            continue  # the command's form, not a value
        stack, change = _config_set(words, require_stack=False)
        values: dict[str, object] = {}
        pulumi_config.apply(values, change)
        secret = {change.root} if change.secret else set()
        problems = pulumi_config.type_problems(stack, declarations, values, secret)
        assert not problems, (path.name, line, problems)


def test_the_real_output_of_docs_settings_md_is_the_plan_s_own() -> None:
    # maintenance/settings_examples.py runs each example through the plan; a drifted block fails.
    # The plan run in this process (the generator runs `python -m tools.plan`: the same main).
    def plan_here(argv: tuple[str, ...]) -> tuple[int, str]:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = plan_cli.main(list(argv))
        return code, err.getvalue()

    text = settings_examples.SETTINGS_MD.read_text()
    rendered = settings_examples.render(text, plan_here)
    assert rendered == text, "run python -m maintenance.settings_examples"


def test_the_readme_is_the_one_read_a_newcomer_needs() -> None:
    # Issue 38: at most 350 lines, the rest one link away in docs/; every link resolves.
    text = README.read_text()
    assert len(text.splitlines()) <= 350
    for target in re.findall(r"\]\(((?:docs|config)/[^)#]+)", text):
        assert (REPO_ROOT / target).exists(), target
