"""CONTRIBUTING's four everyday changes, each done exactly as it says in a copy of the tree.

A recipe holds when the files it names are the only ones that change and the tests it does not
say will fail still pass afterwards. Each test below edits a fresh copy of the tracked files as a
maintainer following the recipe would (and nothing else), then runs the tests that the change
touches in that copy, with the copy's own `memorybook` and kernel set-up importable.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

from tests.helpers import REPO_ROOT

CONTRIBUTING = (REPO_ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")


def recipe(title: str) -> str:
    """The recipe's paragraph in CONTRIBUTING, e.g. recipe("Add a notebook")."""
    return CONTRIBUTING.split(f"**{title}", 1)[1].split("\n\n", 1)[0]


def copy_of_the_tree(destination: Path) -> Path:
    """Every file git tracks (or would: untracked, not ignored), as it is now."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO_ROOT, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = REPO_ROOT / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    # A repository of its own, as the tests that list tracked files need; nothing committed.
    subprocess.run(["git", "init", "-q"], cwd=destination, check=True)
    subprocess.run(["git", "add", "-A"], cwd=destination, check=True)
    return destination


def changed_files(tree: Path) -> set[str]:
    """The files of the copy that differ from the checkout's, or that it alone holds."""
    changed = set()
    for path in tree.rglob("*"):
        name = path.relative_to(tree).as_posix()
        if not path.is_file() or "__pycache__" in name or name.startswith(".git/"):
            continue
        original = REPO_ROOT / name
        if not original.is_file() or original.read_bytes() != path.read_bytes():
            changed.add(name)
    return changed


def run_in(tree: Path, *command: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """A command in the copy, importing the copy's memorybook and kernel set-up."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("TYPESAFE_API_KEY", "MEMORYBOOK_RECORDING", "MEMORYBOOK_USAGE_LOG",
                          "MEMORYBOOK_USAGE_DIR")}  # the copy's run makes its own
    env["PYTHONPATH"] = os.pathsep.join([str(tree), str(tree / "dev")])
    return subprocess.run([sys.executable, *command], cwd=tree, env=env, capture_output=True,
                          text=True, timeout=timeout)


def pytest_in(tree: Path, *arguments: str) -> subprocess.CompletedProcess:
    return run_in(tree, "-m", "pytest", "-p", "no:xdist", "-q", *arguments)


def failed_files(result: subprocess.CompletedProcess) -> set[str]:
    return set(re.findall(r"^(?:FAILED|ERROR) (tests/[^:\s]+)", result.stdout, re.M))


NOTEBOOK_1 = "notebooks/01_memory_system.ipynb"


def edit_notebook_1(tree: Path, old: str, new: str) -> None:
    path = tree / NOTEBOOK_1
    notebook = nbformat.read(path, as_version=4)
    [cell] = [cell for cell in notebook.cells if old in cell.source]
    cell.source = cell.source.replace(old, new)
    nbformat.write(notebook, path)


def edit_in_both(tree: Path, module: str, old: str, new: str, recipe_text: str,
                 what: str) -> set[str]:
    """The same edit in notebook 1 (the page, which imports nothing from this repository) and
    in the library module that holds the same code; the recipe must name both files.
    Returns the files edited."""
    for name in (NOTEBOOK_1, module):
        assert name in recipe_text or name.rsplit("/", 1)[1] in recipe_text, (
            f"CONTRIBUTING's recipe edits `{what}`, which is in {NOTEBOOK_1} and in {module}: "
            f"name both there ({name} is not named)")
    edit_notebook_1(tree, old, new)
    replace_once(tree / module, old, new)
    return {NOTEBOOK_1, module}


REWORDED_TEST = "test_a_reworded_question_is_never_given_the_published_answers"


def not_among(named: set[str], *files: str) -> list[str]:
    """The files a recipe's check runs: those it does not name as allowed to fail."""
    return [name for name in files if name not in named]


def recipe_checks(tree: Path, *names: str) -> list[str]:
    """A recipe's checks: these test files, each of which the tree must hold."""
    missing = [name for name in names if not (tree / name).is_file()]
    assert not missing, f"tests/test_recipes.py runs {missing}, which the tree lacks: rename them"
    return list(names)


# A notebook written as "Add a notebook" says: the next number, its title cell, the first code
# cell's check, a paragraph before each code cell.
NEW_NOTEBOOK_CELLS = [
    ("markdown", "# {n} · A new subject: how many customers the example has\n\n"
                 "**Made here:** a count of the example's customers."),
    ("code", 'from importlib.util import find_spec\n\n'
             'if find_spec("memorybook") is None:  # this notebook opened outside its collection\n'
             '    raise ModuleNotFoundError(\n'
             '        "No module memorybook: in a clone of the Jev memory cookbook, "\n'
             '        "run `make setup` and `make lab` (or `pip install -e .`).")\n\n'
             'from memorybook.example import CUSTOMERS'),
    ("markdown", "The customers of the official example:"),
    ("code", 'print(f"{len(CUSTOMERS)} customers")'),
]


def test_adding_a_notebook_as_the_recipe_says_changes_only_it_and_the_readme(tmp_path):
    text = recipe("Add a notebook")
    assert "README" in text and "Layout" not in text.split("exports_to")[0], (
        "CONTRIBUTING's 'Add a notebook' names the README's table and no Layout line for the "
        "notebook itself; this test follows it as written")
    tree = copy_of_the_tree(tmp_path / "tree")
    existing = sorted((tree / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    n = len(existing) + 1
    name = f"{n:02d}_a_new_subject.ipynb"
    notebook = nbformat.v4.new_notebook(metadata={
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"}, "memorybook": {}})
    for kind, source in NEW_NOTEBOOK_CELLS:
        make = nbformat.v4.new_markdown_cell if kind == "markdown" else nbformat.v4.new_code_cell
        notebook.cells.append(make(source.replace("{n}", str(n))))
    for index, cell in enumerate(notebook.cells):
        cell.id = f"new-{index:02d}"
    nbformat.write(notebook, tree / "notebooks" / name)
    readme = tree / "README.md"
    rows = readme.read_text(encoding="utf-8").splitlines(keepends=True)
    last_row = max(i for i, row in enumerate(rows) if re.match(r"\| \d+ \| \[", row))
    rows.insert(last_row + 1, f"| {n} | [a new subject](notebooks/{name}) | how many customers |\n")
    readme.write_text("".join(rows), encoding="utf-8")

    ran = run_in(tree, "-m", "tools.execute", f"notebooks/{name}")  # `make run`, for it
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert changed_files(tree) == {f"notebooks/{name}", "README.md"}, changed_files(tree)

    # What runs notebook 1 alone (its printed script, its cells in a folder of their own) gives
    # here what it gives in the checkout: the new notebook leaves notebook 1 as it is.
    checks = recipe_checks(tree, "tests/test_contributing.py", "tests/test_notebooks_committed.py",
                           "tests/test_reader_page.py", "tests/test_app_folder.py")
    checked = pytest_in(
        tree, *checks, "-k", f"not (alone_beside or alone_names or with_a_key or without_a_key "
              f"or opened_alone or pattern_cells_alone) or {name[:2]}]", f"notebooks/{name}")
    assert checked.returncode == 0, (
        f"after adding {name} as CONTRIBUTING's 'Add a notebook' says, these failed: "
        f"{sorted(failed_files(checked))}. Either the recipe misses a step (write it there) "
        f"or a test finds notebooks by a fixed list (make it find them by name):\n"
        f"{checked.stdout[-3000:]}")


def test_rewording_a_question_as_the_recipe_says_leaves_the_structure_tests_passing(tmp_path):
    text = recipe("Reword a question")
    assert "`GATE`" in text, (
        "CONTRIBUTING's 'Reword a question' edits GATE; this test follows it as written")
    tree = copy_of_the_tree(tmp_path / "tree")
    edited = edit_in_both(tree, "memorybook/memory.py",
                          "does the thread state a lasting fact about the",
                          "does the thread state a durable fact about the", text, "GATE")
    assert changed_files(tree) == edited, changed_files(tree)

    rebuilt = run_in(tree, "-m", "tools.build_recording")
    assert rebuilt.returncode == 1 and "asks something other than the official page" in (
        rebuilt.stderr), f"`make recording` must refuse the reworded gate: {rebuilt.stderr}"
    published = set(re.findall(r"`(tests/[^`]+\.py)`", recipe("Change a ticket")))
    # A file of the published figures may fail here whatever it finds, so only the others run,
    # and the one test of test_recording.py that never may.
    checks = recipe_checks(tree, *not_among(published, "tests/test_pattern.py",
                                            "tests/test_lesson_and_library.py",
                                            "tests/test_contributing.py",
                                            "tests/test_recording.py"))
    checked = pytest_in(tree, *checks, f"tests/test_recording.py::{REWORDED_TEST}")
    assert checked.returncode in (0, 1), (  # 4: no such test; renamed? rename it above
        f"the checks after rewording the gate did not run: {checked.stdout[-2000:]}"
        f"{checked.stderr[-2000:]}")
    assert failed_files(checked) <= published and not re.search(
        r"FAILED tests/test_recording.py::test_a_reworded", checked.stdout), (
        "after rewording the gate as CONTRIBUTING says, only the tests of the published "
        f"figures 'Change a ticket' names ({sorted(published)}) may fail, and never the "
        f"reworded-question test:\n{checked.stdout[-3000:]}")


def test_changing_a_ticket_as_the_recipe_says_fails_only_the_tests_it_names(tmp_path):
    text = recipe("Change a ticket")
    named = set(re.findall(r"`(tests/[^`]+\.py)`", text))
    assert "`DATA`" in text and named, (
        "CONTRIBUTING's 'Change a ticket' edits DATA and names the tests that then fail")
    tree = copy_of_the_tree(tmp_path / "tree")
    edited = edit_in_both(tree, "memorybook/example.py",
                          "Where \"\n                 \"can I download last month's invoice?",
                          "Where \"\n                 \"can I download March's invoice?",
                          text, "DATA")
    assert changed_files(tree) == edited, changed_files(tree)

    # A file the recipe names may fail whatever it finds, so only the others run, and one it
    # names that must fail on a changed ticket: test_reader_page.py, which runs the page's code.
    checks = recipe_checks(tree, *not_among(named, "tests/test_pattern.py",
                                            "tests/test_lesson_and_library.py",
                                            "tests/test_contributing.py",
                                            "tests/test_recording.py",
                                            "tests/test_published_figures.py"),
                           "tests/test_reader_page.py")
    checked = pytest_in(tree, *checks, "-k", "not notebooks_read_every_entry")
    assert failed_files(checked) and failed_files(checked) <= named, (
        f"after changing a ticket (without a key to record it), the tests that fail must be "
        f"among those CONTRIBUTING's 'Change a ticket' names ({sorted(named)}); these failed: "
        f"{sorted(failed_files(checked))}. Name them there, or make them not depend on the "
        f"ticket:\n{checked.stdout[-3000:]}")


# A backend as "Add a store backend" says: its module, its BACKENDS line, its test class and
# FRESH_STORES line, its Layout line. SQLite again, under a URL scheme of its own.
BACKEND_MODULE = '''"""SQLite under a URL scheme of its own, lite:///path: the recipe's example."""

from __future__ import annotations

from typing import Any

from memorybook.store.sqlite import SQLiteMemoryStore


class LiteMemoryStore(SQLiteMemoryStore):
    @classmethod
    def from_url(cls, url: str, **options: Any) -> LiteMemoryStore:
        return cls(url.removeprefix("lite:///"), **options)
'''
BACKEND_TEST_CLASS = '''

class LiteBackend(SQLiteBackend):
    """A new SQLite file, opened as lite:///."""

    name = "lite"
    store_class = LiteMemoryStore

    @classmethod
    @contextlib.contextmanager
    def fresh(cls, tmp_path: Path) -> Iterator[Backend]:
        path = tmp_path / "memories.sqlite3"
        yield cls(f"lite:///{path}", str(path))

'''


def replace_once(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{path}: {old!r} is not there once"
    path.write_text(text.replace(old, new), encoding="utf-8")


def test_adding_a_store_backend_as_the_recipe_says_runs_the_store_tests_on_it(tmp_path):
    text = recipe("Add a store backend")
    for step in ("BACKENDS", "FRESH_STORES", "Layout"):
        assert step in text, f"CONTRIBUTING's 'Add a store backend' lacks the step {step}"
    tree = copy_of_the_tree(tmp_path / "tree")
    store = tree / "memorybook" / "store"
    (store / "lite.py").write_text(BACKEND_MODULE, encoding="utf-8")
    replace_once(store / "opening.py", "BACKENDS: dict[str, type[EncryptedStore]] = {\n",
                 "BACKENDS: dict[str, type[EncryptedStore]] = {\n    \"lite\": LiteMemoryStore,\n")
    replace_once(store / "opening.py", "from memorybook.store.sqlite import",
                 "from memorybook.store.lite import LiteMemoryStore\n"
                 "from memorybook.store.sqlite import")
    conftest = tree / "tests" / "store" / "conftest.py"
    replace_once(conftest, "from tests.helpers import Backend\n",
                 "from memorybook.store.lite import LiteMemoryStore\n"
                 "from tests.helpers import Backend\n")
    replace_once(conftest, "\nFRESH_STORES: list[type[Backend]] = [\n    SQLiteBackend,\n",
                 BACKEND_TEST_CLASS + "FRESH_STORES: list[type[Backend]] = [\n    SQLiteBackend,\n"
                 "    LiteBackend,\n")
    sqlite_line = "    sqlite.py           the SQLite backend\n"
    replace_once(tree / "CONTRIBUTING.md", sqlite_line,
                 sqlite_line + "    lite.py             SQLite again\n")
    assert changed_files(tree) == {"memorybook/store/lite.py", "memorybook/store/opening.py",
                                   "tests/store/conftest.py", "CONTRIBUTING.md"}

    structure = pytest_in(tree, "tests/test_contributing.py", "tests/test_imports.py")
    on_it = pytest_in(tree, "tests/store/test_base.py", "-k", "lite and not sqlite")
    assert structure.returncode == 0 and on_it.returncode == 0 and re.search(
        r"^\d+ passed", on_it.stdout.splitlines()[-1]), (
        "after adding a backend as CONTRIBUTING's 'Add a store backend' says, the store tests "
        "must run on it and the structure tests pass; write the missing step there:\n"
        f"{structure.stdout[-2000:]}{on_it.stdout[-2000:]}")
