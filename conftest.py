"""Set-up for every test run, the notebooks nbval executes included.

Tests never call the API: no key reaches the kernels, so every answer must come from the
recording, and a missing one fails its cell. Each kernel notes the cache keys it reads, so that
`tests/test_recording.py` can find entries no notebook uses.

`make test` (tools/test.sh) runs pytest twice: every test but the `after_notebooks` ones on
xdist workers, then those alone. The kernels' log and the list of notebooks that ran live in one
folder, $MEMORYBOOK_USAGE_DIR, inherited by the workers and by the second run, so that the checks
see what every worker's kernels did. tools/test.sh makes it for both runs; a run without it (say
`pytest --nbval notebooks`) gets one made here, and removes it when it ends.
"""

import os
import shutil
import signal
import tempfile
import threading
from pathlib import Path

import pytest

from memorybook_dev.kernels import use_unix_socket_kernels

# The checks the tests share (tests/helpers.py) explain their failures as the tests' own do.
pytest.register_assert_rewrite("tests.helpers")

# Every kernel of a test run (nbval's, nbclient's, nbconvert's, the browser test's JupyterLab)
# talks over Unix sockets of its own: over TCP, parallel workers starting kernels and servers at
# the same time can take a port a kernel was about to bind (memorybook_dev/kernels.py).
use_unix_socket_kernels()

NEVER_IN_TESTS = (
    "TYPESAFE_API_KEY", "TYPESAFE_ENDPOINT", "MEMORYBOOK_RECORDING", "MEMORYBOOK_LIVE_IN_CI",
)
for name in NEVER_IN_TESTS:
    os.environ.pop(name, None)

USAGE_DIR_ENV = "MEMORYBOOK_USAGE_DIR"
MADE_THE_USAGE_DIR = not os.environ.get(USAGE_DIR_ENV)  # the run's first process; it removes it
if MADE_THE_USAGE_DIR:
    os.environ[USAGE_DIR_ENV] = tempfile.mkdtemp(prefix="memorybook-usage-")
USAGE_DIR = Path(os.environ[USAGE_DIR_ENV])
USAGE_LOG = USAGE_DIR / "keys-read.txt"
NOTEBOOKS_FINISHED = USAGE_DIR / "notebooks-finished.txt"
os.environ["MEMORYBOOK_USAGE_LOG"] = str(USAGE_LOG)

NOTEBOOKS_DIR = Path(__file__).parent / "notebooks"
LAST_CELLS = pytest.StashKey[set]()  # the last cell of each collected notebook
CELLS_OF = pytest.StashKey[dict]()  # each collected notebook's cells, in order


def is_notebook_cell(item: pytest.Item) -> bool:
    return item.path.suffix == ".ipynb"


def pytest_addoption(parser):
    parser.addoption(
        "--run-cells-again", action="store_true",
        help="as a reader does: run each notebook cell a second time right after nbval's run, "
             "and the whole notebook again after its last cell, in the same kernel; every run "
             "must give the committed outputs (`make test` passes this)")


def pytest_collection_modifyitems(session, config, items):
    """Run the tests that read what the notebooks did after every notebook has run."""
    items.sort(key=lambda item: item.get_closest_marker("after_notebooks") is not None)
    cells_by_notebook: dict[Path, list[pytest.Item]] = {}
    for item in items:
        if is_notebook_cell(item):
            cells_by_notebook.setdefault(item.path, []).append(item)
    session.stash[LAST_CELLS] = {cells[-1] for cells in cells_by_notebook.values()}
    session.stash[CELLS_OF] = cells_by_notebook


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """With --run-cells-again, nbval's run of a cell is followed by a reader's second run of it,
    and the notebook's last cell by a second Run All, each compared with the committed outputs.

    nbval's own `runtest()` executes a cell in the notebook's kernel and compares what it shows;
    calling it again is running the cell again in the same kernel.
    """
    result = yield
    if is_notebook_cell(item) and item.config.getoption("run_cells_again"):
        run_again(item, "run a second time in a row")
        if item in item.session.stash[LAST_CELLS]:
            for cell in item.session.stash[CELLS_OF][item.path]:
                run_again(cell, "in a second Run All, in the same kernel")
    return result


def run_again(cell: pytest.Item, how: str) -> None:
    from nbval.plugin import NbCellError

    try:
        cell.runtest()
    except NbCellError as error:
        error.args = (f"{error.args[0]} ({how})", *error.args[1:])
        raise


def pytest_runtest_teardown(item, nextitem):
    """Note each notebook whose last cell has run, whichever process ran it."""
    if item in item.session.stash.get(LAST_CELLS, set()):
        with NOTEBOOKS_FINISHED.open("a", encoding="utf-8") as finished:
            finished.write(f"{item.path.name}\n")


# Files whose tests share one costly module-scoped fixture: each runs whole on one worker, like a
# notebook, so that the fixture is made once, not once on each worker that gets one of its tests.
RUN_WHOLE = {
    "tests/test_browser.py",  # one JupyterLab and one Chromium for every notebook
    "tests/test_packaging.py",  # one wheel built, one app's venv installed
    "tests/test_service_contract.py",  # one service started
    "tests/test_site.py",  # the site built once, one Chromium
}


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook, absent under `-p no:xdist`
def pytest_xdist_make_scheduler(config, log):
    """How `make test` shares the work between its xdist workers.

    A notebook's cells share one kernel, so a notebook goes whole to one worker, in order; so does
    each file in RUN_WHOLE. Every other test is a unit of its own, so that a long file (the
    live-mode tests) is spread over the workers instead of holding one up. (`--dist loadgroup`
    would say the same with markers, but pytest-xdist 3.8 does not group under pytest 9.)
    """
    from xdist.scheduler import LoadScopeScheduling

    class NotebooksWhole(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return path if path.endswith(".ipynb") or path in RUN_WHOLE else nodeid

    return NotebooksWhole(config, log)


def pytest_unconfigure(config):
    """The process that made the usage folder removes it once its run (and its workers) ended."""
    if MADE_THE_USAGE_DIR:
        shutil.rmtree(USAGE_DIR, ignore_errors=True)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "after_notebooks: runs after nbval has executed every notebook"
    )
    config.addinivalue_line("markers",
                            "browser: drives JupyterLab or the site in headless Chromium")
    # Ctrl-C stops a test process even where it started with SIGINT ignored, as tools/test.sh's
    # background runs do; SIGTERM stops it the same way (terminated()).
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, terminated)


_TERMINATED = threading.Event()


def terminated(signum, frame):
    """SIGTERM (a CI job cancelled, `kill`) ends a test process as Ctrl-C does: the tests' `with`
    blocks and fixtures then stop the servers and kernels they started and remove their files.
    By default, Python would die at once and leave them running.

    Only the first one: a process often gets two (its process group's, and tools/test.sh's), and a
    second KeyboardInterrupt would cut that clean-up short.
    """
    if not _TERMINATED.is_set():
        _TERMINATED.set()
        raise KeyboardInterrupt


def pytest_ignore_collect(collection_path, config):
    """The after-notebooks run (`-m after_notebooks`) collects only the files holding such tests.

    Collecting the rest (parsing every notebook, importing Playwright) would only deselect it.
    """
    if config.getoption("markexpr") != "after_notebooks" or not collection_path.is_file():
        return None
    if collection_path.suffix == ".ipynb":
        return True
    if collection_path.suffix == ".py" and collection_path.name.startswith("test_"):
        return "after_notebooks" not in collection_path.read_text(encoding="utf-8")
    return None


@pytest.fixture
def keys_read_by_notebooks(request) -> set[str]:
    """The cache keys the notebooks read in this run; skipped unless every notebook ran."""
    notebooks = {path.name for path in NOTEBOOKS_DIR.glob("*.ipynb")}
    finished = (set(NOTEBOOKS_FINISHED.read_text(encoding="utf-8").split())
                if NOTEBOOKS_FINISHED.exists() else set())
    if not notebooks <= finished:
        pytest.skip("needs every notebook executed in the same run: run `make test`")
    if not USAGE_LOG.exists():
        pytest.fail("the notebooks ran but no kernel logged a cache lookup")
    return set(USAGE_LOG.read_text(encoding="utf-8").split())


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Only the notebooks' kernels note their lookups: $MEMORYBOOK_USAGE_LOG is set while a
    notebook's cell is set up (its kernel, started then, inherits it) and unset for every other
    test before its fixtures are made. Python tests open recordings too, and a Jev reads its
    settings when it is made: a session-scoped one (memorybook.testing's `jev`, the example
    app's tests) would otherwise note its lookups as a notebook's."""
    if is_notebook_cell(item):
        os.environ["MEMORYBOOK_USAGE_LOG"] = str(USAGE_LOG)
    else:
        os.environ.pop("MEMORYBOOK_USAGE_LOG", None)


@pytest.fixture(autouse=True)
def _each_test_runs_as_an_app(monkeypatch):
    """A test that calls a tool's main() in process marks it as the collection's
    (memorybook.replay.mark_as_the_collection()); the next test starts as an app's process again,
    unless it asks otherwise (tests/helpers.py, fresh_jev(in_the_collection=True))."""
    monkeypatch.setattr("memorybook.replay.in_the_collection", False)
