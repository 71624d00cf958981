"""The committed notebooks are complete, ordered and clean, so nbval's comparison means something.

nbval skips a cell that was never executed, so a notebook committed without outputs would pass
it; these checks make sure every cell was run, in order, and stored nothing it should not.
"""

import json
import re

import pytest

from tests.helpers import NOTEBOOKS, REPO_ROOT, markdown_outputs


def load(path):
    return json.loads(path.read_text(encoding="utf-8"))


def code_cells(nb):
    return [cell for cell in nb["cells"]
            if cell["cell_type"] == "code" and "".join(cell["source"]).strip()]


by_name = pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])


def test_the_notebooks_are_numbered_from_01_without_a_gap():
    numbers = [p.stem[:2] for p in NOTEBOOKS]
    assert len(NOTEBOOKS) >= 8, f"notebooks/ holds {len(NOTEBOOKS)} numbered notebooks, not 8+"
    assert numbers == [f"{n:02d}" for n in range(1, len(NOTEBOOKS) + 1)], (
        f"notebooks/ is numbered {numbers}: rename the notebooks NN_name.ipynb from 01 up "
        "without a gap (CONTRIBUTING, 'Add a notebook')")


@by_name
def test_every_code_cell_ran_once_in_order(path):
    counts = [cell["execution_count"] for cell in code_cells(load(path))]
    assert counts == list(range(1, len(counts) + 1)), (
        f"{path.name}'s code cells ran as {counts}, not once each in order: run `make run`")


@by_name
def test_no_stored_error_or_stderr(path):
    for number, cell in enumerate(code_cells(load(path)), 1):
        for output in cell["outputs"]:
            assert output["output_type"] != "error", f"code cell {number} stores an error"
            assert output.get("name") != "stderr", f"code cell {number} wrote to stderr"


def as_jupyterlab_opens_it() -> tuple[dict, dict]:
    """The kernelspec and language_info JupyterLab writes into a notebook's metadata as its
    kernel starts: ipykernel's own spec, and the language_info a collection kernel reports,
    ipykernel's without the Python version (dev/memorybook_dev/ipython_kernel_config.py)."""
    from ipykernel.ipkernel import IPythonKernel
    from ipykernel.kernelspec import get_kernel_dict

    spec = get_kernel_dict()
    kernelspec = {"name": "python3", "display_name": spec["display_name"],
                  "language": spec["language"]}
    language_info = {key: value for key, value in IPythonKernel.language_info.items()
                     if key != "version"}
    return kernelspec, language_info


@by_name
def test_metadata_is_what_jupyterlab_writes_on_opening_and_the_same_on_every_python(path):
    metadata = load(path)["metadata"]
    kernelspec, language_info = as_jupyterlab_opens_it()
    assert metadata["kernelspec"] == kernelspec, (
        f"{path.name}: its metadata's kernelspec is {metadata['kernelspec']}, not {kernelspec} "
        "as JupyterLab writes it on opening (so it shows the notebook changed): `make run` "
        "writes tools/execute.py's KERNELSPEC")
    assert "version" not in metadata["language_info"], (
        f"{path.name}: its metadata's language_info holds a Python version, so it differs on "
        "each Python; `make run` stores the kernel's, which has none once `make setup` has "
        "copied dev/memorybook_dev/ipython_kernel_config.py into .venv/etc/ipython")
    assert metadata["language_info"] == language_info, (
        f"{path.name}: its metadata's language_info is {metadata['language_info']}, not "
        f"{language_info} as a collection kernel reports it and JupyterLab writes it on opening "
        "(so it shows the notebook changed): run `make run`")
    for cell in load(path)["cells"]:
        assert "execution" not in cell.get("metadata", {}), "timings stored"


MACHINE_SPECIFIC = [
    (re.compile(r" at 0x[0-9a-f]{6,}"), "a memory address"),
    (re.compile(r"/(tmp|root|home|Users)/"), "a local path"),
    (re.compile(r"Warning|warnings\.warn"), "a warning"),
    (re.compile(r"\b20\d\d-\d\d-\d\d[ T]\d\d:\d\d"), "a timestamp"),
]


@by_name
def test_outputs_hold_nothing_from_the_machine_that_ran_them(path):
    text = json.dumps([cell.get("outputs", []) for cell in load(path)["cells"]])
    assert str(REPO_ROOT) not in text, (
        f"an output of {path.name} holds this checkout's path: print paths relative to it "
        "(memorybook.config.shown_path) and `make run`")
    for pattern, what in MACHINE_SPECIFIC:
        assert not pattern.search(text), f"an output holds {what}: {pattern.search(text)[0]!r}"


@by_name
def test_opens_with_a_title_and_the_result_it_replays(path):
    first = "".join(load(path)["cells"][0]["source"])
    assert re.match(rf"# {int(path.stem[:2])} · \S", first), "title: '# N · what it shows'"
    assert "**Published result of jev-1.14.0 (2026-10-29), replayed" in first or (
        "**Made here:**" in first), (
        f"{path.name}: after its title, the first cell says what it shows, opening "
        "'**Published result of jev-1.14.0 (2026-10-29), replayed here:**' or '**Made here:**' "
        "(CONTRIBUTING, 'Add a notebook')")
    assert "Measured" not in first, "a replay of a rebuilt recording is not a measurement"


@by_name
def test_every_code_cell_follows_a_paragraph(path):
    cells = load(path)["cells"]
    for index, cell in enumerate(cells):
        if cell["cell_type"] == "code":
            before = cells[index - 1]
            assert before["cell_type"] == "markdown", f"code cell at {index} has no prose before it"


@by_name
def test_outputs_are_compared_not_ignored(path):
    for cell in code_cells(load(path)):
        source = "".join(cell["source"])
        assert "NBVAL_IGNORE_OUTPUT" not in source and "NBVAL_SKIP" not in source, (
            f"{path.name}: a cell skips nbval's comparison; make its output deterministic instead")


CODE = re.compile(r"```.*?```|`[^`\n]*`", re.DOTALL)  # fenced blocks and code spans


def dollars_read_as_math(markdown: str) -> list[str]:
    """Each `$` outside code, with the text around it.

    JupyterLab typesets the text between two dollars as a formula, so a price like "$0.049 and
    $0.56" turns into italic math and a table holding prices falls apart. Writing `\\$` does not
    help there (jupyterlab/jupyterlab#8645, and `\\\\$` shows a backslash elsewhere), so the
    collection writes USD instead.
    """
    text = CODE.sub("", markdown)
    return [text[max(0, m.start() - 25):m.end() + 25] for m in re.finditer(r"\$", text)]


@by_name
def test_no_dollar_sign_is_read_as_math(path):
    nb = load(path)
    markdown = ["".join(cell["source"]) for cell in nb["cells"] if cell["cell_type"] == "markdown"]
    markdown += markdown_outputs(nb)
    found = [context for text in markdown for context in dollars_read_as_math(text)]
    assert found == [], f"write USD, not $, in the Markdown of {path.name}: {found}"


def test_the_dollar_check_finds_prices_escaped_or_not_and_leaves_code_alone():
    assert len(dollars_read_as_math(r"costs $0.049 and \$0.56")) == 2
    assert dollars_read_as_math("costs USD 0.049, `$(BIN)` and ```\n$x$\n```") == []
