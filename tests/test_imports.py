"""Importing the package does nothing: no data file opened, no client started, no hook installed.

An app, the notebooks and the tools import memorybook for its code; what a call needs (the
recording, the client) is made at the first call. So a test of a pure function can import it
in-process. And no module of the package imports, even later, one that imports it back.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from importlib.util import resolve_name

from tests.helpers import REPO_ROOT

MODULE_FILES = {
    ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts).removesuffix(".__init__"): path
    for path in (REPO_ROOT / "memorybook").rglob("*.py")}
EVERY_MODULE = sorted(MODULE_FILES)

WATCH = """
import builtins, io, os, pathlib, sys
opened = []
real_open, real_io_open = builtins.open, io.open
def noting(file, *args, **kwargs):
    opened.append(str(file))
    return real_open(file, *args, **kwargs)
builtins.open = io.open = noting
import {modules}
ours = [name for name in opened if name.startswith({root!r}) and "/.venv/" not in name]
print("opened:", ours)
import typesafe_sdk
made = [f"{{module}}.{{name}}" for module in list(sys.modules) if module.startswith("memorybook")
        for name, value in vars(sys.modules[module]).items()
        if isinstance(value, (typesafe_sdk.TypeSafeClient, typesafe_sdk.AsyncTypeSafeClient))]
print("clients:", made)
try:
    from IPython import get_ipython
    print("shell:", get_ipython())
except ImportError:
    print("shell: None")
print("excepthook replaced:", sys.excepthook is not sys.__excepthook__)
"""


def test_importing_every_module_opens_no_file_of_ours_and_starts_no_client():
    code = WATCH.format(modules=", ".join(EVERY_MODULE), root=str(REPO_ROOT))
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "opened: []", "clients: []", "shell: None", "excepthook replaced: False"], (
        "importing memorybook's modules must open no file of ours, make no client and touch no "
        f"shell or hook (make them at first use instead): {result.stdout}")


def test_the_model_is_pinned_once():
    found = subprocess.run(["git", "grep", "-n", "-E", r'(^|")\s*TYPESAFE_MODEL\s*=', "--",
                            "*.py", "*.ipynb"], cwd=REPO_ROOT, capture_output=True, text=True)
    places = [line.split(":")[0] for line in found.stdout.splitlines()]
    assert places == ["memorybook/config.py", "notebooks/01_memory_system.ipynb"], (
        f"TYPESAFE_MODEL is assigned in {places}: the library pins it in memorybook/config.py "
        "and notebook 1, the page, in its settings cell; import it from memorybook elsewhere")


def imports_within_the_package() -> dict[str, set[str]]:
    """Each module of memorybook/, and the modules of it that it imports, deferred imports too.

    `from X import name` runs X (a package's __init__ if X is one), and module X.name too when
    name is one. That a submodule's import runs its package's __init__ first is not counted: every
    package whose __init__ imports its modules would be a cycle.
    """
    graph: dict[str, set[str]] = {}
    for name, path in MODULE_FILES.items():
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                package = name if path.name == "__init__.py" else name.rpartition(".")[0]
                source = resolve_name("." * node.level + (node.module or ""), package)
                imported.add(source)
                imported.update(f"{source}.{alias.name}" for alias in node.names)
        graph[name] = {module for module in imported if module in MODULE_FILES and module != name}
    return graph


def a_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of `graph` (module -> the modules it imports), as a path, or []."""
    on_the_path: list[str] = []
    finished: set[str] = set()

    def visit(module: str) -> list[str]:
        on_the_path.append(module)
        for imported in sorted(graph[module]):
            if imported in on_the_path:
                return [*on_the_path[on_the_path.index(imported):], imported]
            if imported not in finished and (cycle := visit(imported)):
                return cycle
        finished.add(on_the_path.pop())
        return []

    for module in sorted(graph):
        if module not in finished and (cycle := visit(module)):
            return cycle
    return []


def test_no_module_of_the_package_imports_one_that_imports_it_back():
    graph = imports_within_the_package()
    assert "memorybook.store.schema" in graph["memorybook.store.database"], (
        "tests/test_imports.py no longer finds the package's imports: fix "
        "imports_within_the_package()")
    cycle = a_cycle(graph)
    assert cycle == [], " -> ".join(cycle)
