"""Write the code a notebook teaches into the module the next notebooks import.

A notebook names its module in its metadata (`"memorybook": {"exports_to": "routing"}`); its code
cells tagged `export` are copied, in order, into `memorybook/<module>.py`. The notebook stays the
one place to read and edit that code; the module is generated and never edited by hand.

    python -m tools.export          # rewrite the modules
    python -m tools.export --check  # exit 1, naming the module, if one differs from its notebook
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

REPO_ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO_ROOT / "notebooks"
PACKAGE = REPO_ROOT / "memorybook"


def exported_modules() -> dict[Path, str]:
    """Each generated module's path and the text it must hold."""
    modules = {}
    for notebook_path in sorted(NOTEBOOKS.glob("*.ipynb")):
        notebook = nbformat.read(notebook_path, as_version=4)
        module = notebook.metadata.get("memorybook", {}).get("exports_to")
        if not module:
            continue
        cells = [
            cell.source.strip()
            for cell in notebook.cells
            if cell.cell_type == "code" and "export" in cell.metadata.get("tags", [])
        ]
        header = (
            f'"""Generated from notebooks/{notebook_path.name} by `python -m tools.export`.\n\n'
            f'Edit the notebook\'s cells tagged `export`, not this file."""\n'
        )
        modules[PACKAGE / f"{module}.py"] = header + "\n\n" + "\n\n\n".join(cells) + "\n"
    return modules


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare, write nothing")
    args = parser.parse_args(argv)
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
