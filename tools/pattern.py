"""Print notebook 1's memory pattern as one script an app can copy (`make pattern`).

Notebook 1's code cells tagged `pattern` are the technique: the settings, the client and the
cache, the routing question, ask(), the gate and the wrapper. In reading order they import
nothing from this repository and call nothing, so importing the script runs no request and
prints nothing. The cells tagged `example` (the tickets, the probe table, the six messages with
and without memory) follow under `if __name__ == "__main__":`, so that `python <script>` run
beside the recording (json_cache/json_cache.json) prints the page's headline with no key. Its
header says how an app's tests put a stand-in of their own in place of `ask`, in one line.

    python -m tools.pattern > memory_pattern.py
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import nbformat

NOTEBOOK_1 = Path(__file__).resolve().parent.parent / "notebooks" / "01_memory_system.ipynb"

HEADER = """\
# The memory pattern of notebooks/01_memory_system.ipynb, printed by `make pattern`.
# Import it for its functions, or run it beside json_cache/json_cache.json (no key needed)
# to replay the published run: 3/6 expected routes without memory, 6/6 with memory.
# Without a key, a call the cache lacks raises NotInCacheError and nothing is sent. To answer
# without key or cache (in your tests), replace `ask` in one line with a function of
# (state, questions) returning a SystemOneResponse (model, usage and answers all set);
# the wrapper and the gate then ask it:
#     memory_pattern.ask = my_stand_in
"""
STAND_IN_LINE = "memory_pattern.ask = my_stand_in"  # the header's one line, as a reader types it


def tagged_cells(tag: str) -> list[str]:
    """The sources of notebook 1's code cells tagged `tag`, in reading order."""
    notebook = nbformat.read(NOTEBOOK_1, as_version=4)
    return [cell.source.strip() for cell in notebook.cells
            if cell.cell_type == "code" and tag in cell.metadata.get("tags", [])]


def pattern_code() -> str:
    """The cells tagged `pattern`, as one module: what an app copies."""
    return "\n\n\n".join(tagged_cells("pattern")) + "\n"


def pattern_script() -> str:
    """The pattern, then the example cells under `if __name__ == "__main__":`."""
    # A blank line printed between the cells' outputs, as the notebook shows them apart
    example = "\n    print()\n\n".join(
        textwrap.indent(source, "    ") for source in tagged_cells("example"))
    return f'{HEADER}\n{pattern_code()}\n\nif __name__ == "__main__":\n{example}\n'


def main() -> int:
    print(pattern_script(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
