"""The modules later notebooks import are exactly the code the earlier notebooks teach."""

import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path

import nbformat

from tests.helpers import REPO_ROOT
from tools.export import exported_modules


def test_exported_modules_match_their_notebooks():
    check = subprocess.run([sys.executable, "-m", "tools.export", "--check"], cwd=REPO_ROOT,
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr


def test_each_generated_module_declares_what_it_exports_and_defines_it():
    for path in exported_modules():
        module = importlib.import_module(f"memorybook.{path.stem}")
        assert module.__all__, f"{path.name} exports nothing"
        missing = [name for name in module.__all__ if not hasattr(module, name)]
        assert not missing, f"{path.name} lists names it does not define: {missing}"


MARKER = re.compile(r"^# (notebooks/\d\d_\w+\.ipynb), cell (\d+)$", re.M)


def test_each_exported_block_names_the_notebook_cell_it_came_from():
    for path, text in exported_modules().items():
        markers = MARKER.findall(text)
        assert markers, (f"{path.name} has no `# notebooks/NN_name.ipynb, cell N` lines: "
                         "tools/export.py (cell_marker) must write one above each exported cell")
        [(notebook_path, _)] = {(name, None) for name, _ in markers}
        cells = nbformat.read(REPO_ROOT / notebook_path, as_version=4).cells
        exported = [index for index, cell in enumerate(cells) if cell.cell_type == "code"
                    and {"export", "pattern"} & set(cell.metadata.get("tags", []))]
        assert [int(index) for _, index in markers] == exported, (
            f"{path.name}: the markers must name each exported cell of {notebook_path}, in order")
        for (_, index), block in zip(markers, MARKER.split(text)[3::3], strict=True):
            cell = cells[int(index)]
            if "app-client" not in cell.metadata.get("tags", []):
                assert block.strip() == cell.source.strip(), (
                    f"{path.name}: the block under `{notebook_path}, cell {index}` is not "
                    "that cell's code")


def test_a_traceback_line_of_a_generated_module_leads_back_to_its_cell():
    module = importlib.import_module("memorybook.memory_system")
    source = Path(module.__file__).read_text(encoding="utf-8").splitlines()
    line = inspect.getsourcelines(module.ask)[1]  # where a traceback through ask() points
    notebook_path, index = next(MARKER.match(text).groups()
                                for text in reversed(source[:line]) if MARKER.match(text))
    cell = nbformat.read(REPO_ROOT / notebook_path, as_version=4).cells[int(index)]
    assert "\ndef ask(" in cell.source, f"{notebook_path}, cell {index} does not define ask()"
