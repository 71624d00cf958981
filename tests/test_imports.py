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

import pytest

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
# A stub is code, not data: memorybook/__init__.pyi is how the package learns where its names live.
ours = [name for name in opened if name.startswith({root!r}) and "/.venv/" not in name
        and not name.endswith(".pyi")]
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


def test_an_app_that_uses_only_the_store_loads_neither_the_sdk_nor_the_client():
    # What a fresh interpreter loads is the subject, hence the process.
    code = ("import sys; from memorybook.store import open_store, SQLiteMemoryStore; "
            "print(sorted({name.split('.')[0] for name in sys.modules} & "
            "{'typesafe_sdk', 'httpx2', 'pydantic', 'cooksafe'}), "
            "sorted(name for name in sys.modules if name.startswith('memorybook.')"
            " and not name.startswith(('memorybook.store', 'memorybook.errors',"
            " 'memorybook.settings'))))")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["[]", "[]"], (
        "`from memorybook.store import open_store` loaded these (SDK and client packages, then "
        f"memorybook's modules beyond the store and its settings): {result.stdout.strip()}. The "
        "store must not need them: keep memorybook/__init__.py lazy (names listed in "
        "__init__.pyi), memorybook/settings.py on the standard library alone, and import them "
        "inside memorybook/store/ only where a call needs them")


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


# -- no module imports another's private names -----------------------------------------------

SCANNED = ("memorybook", "tools", "dev", "benchmarks")  # what must keep to public names
OUR_PACKAGES = ("memorybook", "memorybook_dev", "tools", "benchmarks", "tests")


def module_name(path) -> str:
    """The name a file of this repository is imported by (dev/ holds memorybook_dev)."""
    root = REPO_ROOT / "dev" if path.is_relative_to(REPO_ROOT / "dev") else REPO_ROOT
    return ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")


OUR_MODULES = {module_name(path) for folder in (*SCANNED, "tests")
               for path in (REPO_ROOT / folder).rglob("*.py")}


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def is_ours(module: str | None) -> bool:
    return module is not None and module.split(".")[0] in OUR_PACKAGES


def private_names_used(source: str, module: str, is_package: bool = False) -> list[str]:
    """Where the code of `module` imports an underscored name of another module of this
    repository (`from x import _y`), or reads one off such a module (`x._y`)."""
    package = module if is_package else module.rpartition(".")[0]
    tree = ast.parse(source)
    modules: dict[str, str] = {}  # a name bound to one of our modules -> that module
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source_module = resolve_name("." * node.level + (node.module or ""), package)
            if not is_ours(source_module):
                continue
            for alias in node.names:
                if f"{source_module}.{alias.name}" in OUR_MODULES:
                    modules[alias.asname or alias.name] = f"{source_module}.{alias.name}"
                if is_private(alias.name) and source_module != module:
                    found.append(f"line {node.lineno}: from {source_module} import {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if is_ours(alias.name):
                    name = alias.asname or alias.name.split(".")[0]
                    modules[name] = alias.name if alias.asname else name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            parts, value = [], node.value
            while isinstance(value, ast.Attribute):
                parts.insert(0, value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in modules:
                owner = ".".join([modules[value.id], *parts])
                if owner in OUR_MODULES and owner != module:
                    found.append(f"line {node.lineno}: {owner}.{node.attr}")
    return found


def test_the_private_name_check_finds_both_kinds_of_use():
    source = ("from memorybook.recording.commit import CommitError, _sha256\n"
              "from ..recording import file as f\n"
              "import memorybook.recording.disk\n"
              "f._same_json(1, 2)\n"
              "memorybook.recording.disk._lock(None)\n"
              "from tools.record.run import __doc__, _STOPPED\n")
    assert private_names_used(source, "memorybook.store.example") == [
        "line 1: from memorybook.recording.commit import _sha256",
        "line 6: from tools.record.run import _STOPPED",
        "line 4: memorybook.recording.file._same_json",
        "line 5: memorybook.recording.disk._lock",
    ], "tests/test_imports.py's private_names_used() no longer finds what it looks for"


def test_no_module_imports_another_modules_private_names():
    used = {}
    for folder in SCANNED:
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            found = private_names_used(path.read_text(encoding="utf-8"), module_name(path),
                                       path.name == "__init__.py")
            if found:
                used[str(path.relative_to(REPO_ROOT))] = found
    assert used == {}, (
        "modules use another module's underscored names; give what they need a public name in "
        "a module named for its job (as memorybook/recording/disk.py's writers_lock), or keep "
        f"it in one module: {used}")


def test_every_error_memorybook_exports_derives_from_memorybook_error():
    import memorybook

    errors = {name: getattr(memorybook, name) for name in memorybook.__all__
              if isinstance(getattr(memorybook, name), type)
              and issubclass(getattr(memorybook, name), Exception)}
    strays = sorted(name for name, error in errors.items()
                    if not issubclass(error, memorybook.MemorybookError))
    assert len(errors) > 10 and not strays, (
        f"{strays} do not derive from MemorybookError, which memorybook/errors.py promises an app "
        "can catch them all by: add it to their bases")


def test_the_packages_docstring_lists_every_parameter_of_what_it_lists():
    import importlib
    import inspect
    import re

    import memorybook

    # Each entry starts a line of the docstring, its parameters maybe over several lines
    listed = re.findall(r"^    ((?:service\.)?\w+)\(([^()]*)\)", memorybook.__doc__, re.M)
    assert {name for name, _ in listed} >= {"Jev", "ask_with_memory", "open_store", "InFlight",
                                             "service.create_app"}, listed
    for name, parameters in listed:
        module, _, attribute = name.rpartition(".")
        found = getattr(importlib.import_module(f"memorybook.{module}" if module else
                                                "memorybook"), attribute)
        names = [part.split("=")[0].strip().lstrip("*") for part in parameters.split(",")
                 if part.strip()]
        expected = list(inspect.signature(found).parameters)
        assert [n for n in names if n] == expected, (
            f"memorybook/__init__.py's docstring lists {name}({parameters}); list its parameters "
            f"as they are defined: {expected}")


def test_the_service_or_a_postgresql_store_without_its_extra_names_the_extra(monkeypatch):
    import base64
    import importlib
    import os
    import sys

    from memorybook.store import MemoryStoreError, open_store

    monkeypatch.setitem(sys.modules, "fastapi", None)  # as in an install without the extra
    monkeypatch.setitem(sys.modules, "psycopg", None)
    monkeypatch.delitem(sys.modules, "memorybook.service", raising=False)
    with pytest.raises(ModuleNotFoundError) as service:
        importlib.import_module("memorybook.service")
    key = base64.urlsafe_b64encode(os.urandom(32)).decode()
    with pytest.raises(MemoryStoreError) as store:
        open_store("postgresql://u@127.0.0.1:9/memories", key=key)
    for error, extra, where in ((service, "service", "memorybook/service/__init__.py's imports"),
                                (store, "postgres", "memorybook/store/postgres.py")):
        assert f"memorybook[{extra}]" in str(error.value), (
            f"without the `{extra}` extra, {where} must say to install it: {error.value}")
