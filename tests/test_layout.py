"""The house rules of the layout (docs/architecture.md): each top-level folder is one place
where code runs or one layer, none holds more than 30 % of the program, the pure layers import
nothing from the Pulumi components, the program never imports the offline tools or the
benchmarks (what the program or the plan runs is product code, a benchmark only prints), there
are no import cycles and no function longer than 60 lines without saying why (benchmarks
included).

What is counted: non-blank lines of the .py files of the program's folders (CODE_FOLDERS: what
runs in the Pulumi program, the dynamic-provider process, the pods, and the offline tools); tests,
benchmarks and __main__.py (the composition root) are not.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Folder -> where its code runs.
CODE_FOLDERS = {
    "components": "the Pulumi program: one ComponentResource per concern",
    "config": "the Pulumi program: settings, the profile table, the bucket layout (pure)",
    "manifests": "the Pulumi program: Kubernetes object bodies (pure functions)",
    "training": "the Pulumi program: the GRPO spec, its rules, the memory fit (pure)",
    "pricing": "the Pulumi program and the offline plan: prices, their sources, how GKE bills",
    "jobs": "the dynamic-provider process: the Ray job provider",
    "payloads": "the pods: scripts shipped into the cluster",
    "tools": "a user's machine: the commands a user runs (the offline plan, the run monitor)",
    "planning": "a user's machine or CI: the plan-time models (offline engine, cost, start-up)",
    "maintenance": "a maintainer's machine: generators of committed files",
    "verl_scripts": "inside verl's isolated virtualenvs: scripts that run verl's own code",
}
NOT_PROGRAM = {"tests", "bench", "docs"}
# Benchmarks run by hand: they may import the program; the program and tools never import them.
BENCH = "bench"
# What only a developer's machine or CI runs; the program (and the pods) never import it.
OFFLINE = ("tools", "planning", "maintenance", "verl_scripts", BENCH)
MAX_SHARE = 0.30
MAX_FUNCTION_LINES = 60
LONG_REASON = "Long because"
# Who may not import whom (prefixes of module names).
FORBIDDEN = {
    "components": OFFLINE,
    "manifests": ("components", *OFFLINE),
    "config": ("components", "manifests", "training", "pricing", "jobs", "payloads", *OFFLINE),
    "training": ("components", "pricing", *OFFLINE),
    # Prices and billing, one owner: read by the program, the plan and tools.run, never the
    # other way round.
    "pricing": ("components", "manifests", "jobs", "payloads", *OFFLINE),
    "jobs": OFFLINE,
    # Shipped alone into pods: nothing of the program is there.
    "payloads": ("components", "config", "manifests", "training", "pricing", "jobs", *OFFLINE),
    "tools": (BENCH, "maintenance", "verl_scripts"),
    "planning": (BENCH, "tools", "maintenance", "verl_scripts"),
    "maintenance": (BENCH, "tools", "verl_scripts"),
    # Run by another interpreter (a verl virtualenv): they import nothing of the project but
    # each other.
    "verl_scripts": (
        "components", "config", "manifests", "training", "pricing", "jobs", "payloads",
        *(folder for folder in OFFLINE if folder != "verl_scripts"),
    ),
}
# The folders from the bottom up (docs/architecture.md): each imports only folders below it.
# The pods' and verl's scripts import nothing of the project; the provider (jobs/) only the pods'
# scripts; manifest bodies are built from values (the spec's reach them as arguments, e.g.
# training/grpo_preflight.dataset_limits); training/ checks the spec and assembles the job from
# settings, the spec and the manifests' names; the components create all of it.
LAYERS = (
    "payloads", "verl_scripts", "config", "jobs", "manifests", "training", "pricing",
    "components", "planning", "maintenance", "tools", BENCH,
)  # fmt: skip
# An import inside a benchmark's function whose line says "# deferred: <why>" runs after both
# modules are loaded, so it cannot close an import-time cycle; the layer rules still count it.
# The program's modules have no such exception: their imports flow one way.
DEFERRED = "# deferred:"


def python_files(folder: str) -> Iterator[Path]:
    yield from sorted((ROOT / folder).rglob("*.py"))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def program_modules() -> dict[str, Path]:
    return {module_name(p): p for folder in CODE_FOLDERS for p in python_files(folder)}


def checked_modules() -> dict[str, Path]:
    """The program's modules and the benchmarks'."""
    return {**program_modules(), **{module_name(p): p for p in python_files(BENCH)}}


def deferred_imports(tree: ast.Module, lines: list[str]) -> set[ast.AST]:
    """Imports inside a function whose line is marked DEFERRED."""
    return {
        node
        for function in ast.walk(tree)
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
        for node in ast.walk(function)
        if isinstance(node, ast.Import | ast.ImportFrom) and DEFERRED in lines[node.lineno - 1]
    }


def imports_of(path: Path, known: dict[str, Path], *, deferred: bool = True) -> set[str]:
    """Project modules `path` imports, at module level or inside functions (deferred=False:
    without the imports marked DEFERRED)."""
    found: set[str] = set()
    source = path.read_text()
    tree = ast.parse(source)
    skip = set() if deferred else deferred_imports(tree, source.splitlines())
    for node in ast.walk(tree):
        if node in skip:
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from pkg import module` imports pkg.module when that is a module of ours.
            names = [f"{node.module}.{alias.name}" for alias in node.names]
            names = [n if n in known else node.module for n in names]
        found.update(n for n in names if n in known)
    return found


def top_level_imports(path: Path) -> set[str]:
    """The first name of every absolute import in `path`."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def unclassified_folders(root: Path) -> set[str]:
    """Top-level folders of `root` holding Python code that the project's own code imports but
    that are neither a code folder nor NOT_PROGRAM. A folder nothing of the project imports (a
    user's reward files, a plan's `--out` folder) is the user's, not the layout's business."""
    declared = set(CODE_FOLDERS) | NOT_PROGRAM
    project_files = [root / "__main__.py", *(p for f in declared for p in (root / f).rglob("*.py"))]
    imported = set().union(*(top_level_imports(p) for p in project_files if p.is_file()))
    local = {
        p.relative_to(root).parts[0]
        for p in root.glob("*/**/*.py")
        if not p.relative_to(root).parts[0].startswith(".")
    }
    return (local & imported) - declared


def test_every_top_level_code_folder_is_classified() -> None:
    assert not unclassified_folders(ROOT)


def test_a_user_s_own_folder_is_not_the_layout_s_business(tmp_path: Path) -> None:
    for name, text in {
        "components/a.py": "from newlayer import thing\n",
        "newlayer/thing.py": "",
        "rewards/score.py": "def compute_score() -> float:\n    return 1.0\n",
        "plan-out/payloads/export_model.py": "",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    # The reward folder and the plan output are not imported; a new layer the program imports is.
    assert unclassified_folders(tmp_path) == {"newlayer"}


def test_no_folder_holds_more_than_30_percent_of_the_program() -> None:
    lines = {
        folder: sum(
            1 for p in python_files(folder) for line in p.read_text().splitlines() if line.strip()
        )
        for folder in CODE_FOLDERS
    }
    total = sum(lines.values())
    too_big = {f: f"{n / total:.0%}" for f, n in lines.items() if n > MAX_SHARE * total}
    assert not too_big, f"{too_big} of {total} lines"


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layers_import_only_what_they_may(layer: str) -> None:
    known = checked_modules()
    bad = {
        f"{module} imports {imported}"
        for module, path in known.items()
        if module.split(".")[0] == layer
        for imported in imports_of(path, known)
        if imported.split(".")[0] in FORBIDDEN[layer]
    }
    assert not bad, sorted(bad)


def test_the_composition_root_imports_no_offline_code() -> None:
    known = checked_modules()
    bad = {m for m in imports_of(ROOT / "__main__.py", known) if m.split(".")[0] in OFFLINE}
    assert not bad, sorted(bad)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_import_reader_finds_imports_inside_functions(tmp_path: Path) -> None:
    known = checked_modules()
    module = tmp_path / "m.py"
    module.write_text(
        "def f() -> None:\n"
        "    from bench.critical_path import main\n"
        "    from config import stack_rules  # deferred: an example\n"
    )
    assert imports_of(module, known) == {"bench.critical_path", "config.stack_rules"}
    assert imports_of(module, known, deferred=False) == {"bench.critical_path"}


def test_no_import_cycles() -> None:
    known = checked_modules()
    graph = {}
    for module, path in known.items():
        counted = imports_of(path, known, deferred=module.split(".")[0] != BENCH)
        # A package's __init__ importing its own modules is not a cycle of concern.
        graph[module] = {m for m in counted if m != module}
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def upward_imports(edges: Iterable[tuple[str, str]]) -> list[str]:
    """`importer -> imported` for each import of a folder's module from its own layer's folder
    or one above it (LAYERS), between different folders."""
    layer = {folder: rank for rank, folder in enumerate(LAYERS)}
    return sorted(
        f"{importer} -> {imported}"
        for importer, imported in edges
        if (low := importer.split(".")[0]) != (high := imported.split(".")[0])
        and layer[high] >= layer[low]
    )


def test_every_code_folder_has_a_layer() -> None:
    assert sorted(LAYERS) == sorted({*CODE_FOLDERS, BENCH})


def test_the_layer_check_finds_an_arrow_back_up() -> None:
    edges = {("manifests.a", "training.b"), ("training.c", "manifests.d"), ("config.e", "config.f")}
    assert upward_imports(edges) == ["manifests.a -> training.b"]


def test_folders_import_only_the_layers_below_them() -> None:
    known = checked_modules()
    edges = {
        (module, imported) for module, path in known.items() for imported in imports_of(path, known)
    }
    assert not upward_imports(edges)


def long_functions() -> Iterator[str]:
    sources = [ROOT / "__main__.py", *checked_modules().values()]
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            assert node.end_lineno is not None
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES and LONG_REASON not in (ast.get_docstring(node) or ""):
                yield f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({length} lines)"


def test_no_long_function_without_a_reason() -> None:
    assert not list(long_functions())
