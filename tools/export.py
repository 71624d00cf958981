"""Write the code a notebook teaches into the module the next notebooks import.

A notebook names its module in its metadata (`"memorybook": {"exports_to": "memory_system"}`);
its code cells tagged `pattern` or `export` are copied, in order, into `memorybook/<module>.py`,
each under a comment naming its notebook and cell (`# notebooks/01_memory_system.ipynb, cell 12`,
the index counted from 0 as nbdev does), so that a traceback's line leads back to the cell. The
notebook stays the one place to read and edit that code; the module is generated and never edited
by hand.

Cells tagged `pattern` are the code an app copies: in reading order, they form one script that
imports nothing from this repository (`--pattern` prints it). Cells tagged `export` are what the
collection adds around them (its replaying client, the example data, demo helpers).

    python -m tools.export            # rewrite the modules
    python -m tools.export --check    # exit 1, naming the module, if one differs from its notebook
    python -m tools.export --pattern  # print the pattern cells as one script, and an example
"""

from __future__ import annotations

import argparse
import ast
import pprint
import sys
import textwrap
from pathlib import Path

import nbformat

REPO_ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO_ROOT / "notebooks"
PACKAGE = REPO_ROOT / "memorybook"


EXPORTED_TAGS = {"pattern", "export"}

# A cell tagged `app-client` builds the app's client and cache (notebook 1). The module gets the
# collection's own in its place, under the same names: replay only without a key and always in
# CI, misses explained, the recording ($MEMORYBOOK_RECORDING or the committed one) checked as it
# is read, live calls within $MEMORYBOOK_TIMEOUT_SECONDS.
APP_CLIENT_TAG = "app-client"
COLLECTION_CLIENT = """\
# The collection's client and cache, in place of the app's (tools/export.py says why). Both are
# made at their first use: importing this module opens no file and starts no client.
from memorybook.recording import open_recording
from memorybook.transport import ClientOnFirstUse

client = ClientOnFirstUse()
json_cache = open_recording()  # $MEMORYBOOK_RECORDING, else the committed file"""


def tagged_cells(notebook: nbformat.NotebookNode, tags: set[str]) -> list[str]:
    """The sources of a notebook's code cells that carry any of these tags, in order."""
    return [cell.source.strip() for cell in notebook.cells
            if cell.cell_type == "code" and tags & set(cell.metadata.get("tags", []))]


def cell_marker(notebook_path: Path, index: int) -> str:
    """The comment above each exported block, naming the cell it came from, as nbdev's exports
    do: the notebook and the cell's index, counted from 0 over every cell, Markdown included."""
    return f"# {notebook_path.relative_to(REPO_ROOT)}, cell {index}"


def module_cells(notebook: nbformat.NotebookNode, notebook_path: Path) -> list[str]:
    """The code a notebook's module holds: its exported cells, each under its cell's marker,
    the app's client swapped."""
    return [cell_marker(notebook_path, index) + "\n" + (
                COLLECTION_CLIENT if APP_CLIENT_TAG in cell.metadata.get("tags", [])
                else cell.source.strip())
            for index, cell in enumerate(notebook.cells)
            if cell.cell_type == "code" and EXPORTED_TAGS & set(cell.metadata.get("tags", []))]


def notebooks() -> list[tuple[Path, nbformat.NotebookNode]]:
    return [(path, nbformat.read(path, as_version=4)) for path in sorted(NOTEBOOKS.glob("*.ipynb"))]


def pattern_script() -> str:
    """The cells tagged `pattern`, across the notebooks in reading order, as one script."""
    cells = [source for _, notebook in notebooks()
             for source in tagged_cells(notebook, {"pattern"})]
    return "\n\n\n".join(cells) + "\n"


def pattern_example() -> str:
    """What `make pattern` ends with: the wrapper called on notebook 1's first earlier ticket,
    whose answers the recording holds, so that it runs as printed beside it with no key."""
    from memorybook.memory_system import EARLIER

    state = pprint.pformat(EARLIER[0], width=88, sort_dicts=False)  # the cache key's order
    return (
        "\n\n# An example: notebook 1's first earlier ticket. Beside its recording (in\n"
        "# json_cache/json_cache.json) it runs with no key and prints the team Jev chose.\n"
        f"state = {textwrap.indent(state, '        ').lstrip()}\n"
        'print(ask_with_memory(state, ROUTE).answers["team"].choice)\n'
    )


def public_names(code: str) -> list[str]:
    """What the code defines at its top level for others to import: functions, classes and
    assigned names, in order, without the underscored ones and without what it imports."""
    names = []
    for node in ast.parse(code).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [target.id for target in targets if isinstance(target, ast.Name)]
    return [name for name in dict.fromkeys(names) if not name.startswith("_")]


def names_list(names: list[str]) -> str:
    """The names as the body of a Python list, wrapped to the line length ruff checks."""
    quoted = ", ".join(f'"{name}"' for name in names) + ","
    return textwrap.fill(quoted, width=100, initial_indent="    ", subsequent_indent="    ")


def exported_modules() -> dict[Path, str]:
    """Each generated module's path and the text it must hold."""
    modules = {}
    for notebook_path, notebook in notebooks():
        module = notebook.metadata.get("memorybook", {}).get("exports_to")
        if not module:
            continue
        code = "\n\n\n".join(module_cells(notebook, notebook_path))
        # The notebook imports next to where a name is first used, so that a reader sees where
        # it comes from, and the module keeps that order; the app's client cell, which the module
        # replaces, leaves imports unused.
        swapped = any(APP_CLIENT_TAG in cell.metadata.get("tags", []) for cell in notebook.cells)
        ignored = "E402, I001, F401" if swapped else "E402, I001"
        header = (
            f'"""Generated from notebooks/{notebook_path.name} by `python -m tools.export`.\n\n'
            f'Edit the notebook\'s cells tagged `pattern` or `export`, not this file."""\n'
            f"# ruff: noqa: {ignored}\n\n"
            f"__all__ = [\n{names_list(public_names(code))}\n]\n"
        )
        modules[PACKAGE / f"{module}.py"] = header + "\n\n" + code + "\n"
    return modules


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare, write nothing")
    parser.add_argument("--pattern", action="store_true",
                        help="print the cells tagged `pattern` as one script; write nothing")
    args = parser.parse_args(argv)
    if args.pattern:
        print(pattern_script() + pattern_example(), end="")
        return 0
    stale = []
    for path, text in exported_modules().items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(path.relative_to(REPO_ROOT))
        if not args.check:
            path.write_text(text, encoding="utf-8")
    if args.check and stale:
        names = ", ".join(map(str, stale))
        print(f"Out of date with their notebooks: {names}. Run `make export`.", file=sys.stderr)
        return 1
    for path in stale:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
