"""The reader's path, in a real browser: each notebook opened in JupyterLab and run.

    .venv/bin/python -m pytest tests/test_browser.py            # this test alone (or -m browser)
    .venv/bin/python -m pytest tests/test_browser.py -k 06      # one notebook
    .venv/bin/python -m pytest -m "not browser"                 # everything else

One JupyterLab server (tests/jupyterlab_server.py: this environment, 127.0.0.1, a token, no API
key) and one headless Chromium page driven by Playwright serve every notebook: JupyterLab loads
once, in a new workspace, and each notebook is opened in it as a reader opens one. Opened and
left alone until its kernel is idle and JupyterLab has copied the kernel's language_info and
kernelspec into its metadata, a notebook must not count as changed (closing it would ask to save
it). Then, in the same tab and kernel (a reader's next step; one kernel per notebook, not two),
the page clears its outputs, runs all cells and checks that no cell errs, that every
text output equals the committed one (stdout, stderr, text/plain, text/markdown; images only by
their presence), that every chart renders as an image, and that every playground link in a
Markdown output is an anchor whose target decodes to a recorded call (13 of them in notebook 5),
but for those the notebook's metadata counts (`"memorybook": {"links_to_unrecorded_calls": N}`:
notebook 6's capped store, notebook 7's next steps, whose answers were never recorded).
(A second Run All in the same kernel is checked in nbval's kernels: conftest.py's
--run-cells-again.) The kernel is shut down and the tab closed before the next
notebook; a screenshot of each notebook after its run goes to build/browser/.

The browser is the Chromium or Chrome binary that $MEMORYBOOK_BROWSER names, by default Debian's
/usr/bin/chromium (`apt-get install chromium`); Playwright's own browser download is never used.
Without a browser or Playwright the tests are skipped, saying why, except in CI (CI set), where
they fail. JupyterLab does not save the notebooks it runs here (autosave
is off, checkpoints go to a temporary folder); the committed files are compared byte for byte
before and after all the same.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import os
import re
from pathlib import Path

import psutil
import pytest

from memorybook.config import RECORDING_PATH
from memorybook.recording import cache_key, read_recording
from tests.helpers import LINK, NOTEBOOKS, REPO_ROOT, copy_of_the_collection, decode
from tests.jupyterlab_server import jupyterlab_server

pytestmark = pytest.mark.browser

BROWSER_ENV = "MEMORYBOOK_BROWSER"  # the path of a Chromium or Chrome binary
DEFAULT_BROWSER = Path("/usr/bin/chromium")  # Debian's package
CHROMIUM_ARGS = [  # a fresh profile is Playwright's own; nothing may reach for the network
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
SCREENSHOTS = REPO_ROOT / "build" / "browser"
OPEN_SECONDS = 60  # bound on loading JupyterLab with a notebook and its kernel ready
RUN_SECONDS = 120  # bound on one Run All of one notebook
STEP_SECONDS = 15  # bound on the small steps: rendering a cell, shutting a kernel down
SHARE_PREFIX = "https://console.typesafe.ai/playground#share/"
EXPECTED_LINKS = {"05_playground_links": 13}
TEXT_MIMES = ("text/plain", "text/markdown")


def chosen_browser(environ=os.environ, default: Path = DEFAULT_BROWSER) -> tuple[Path | None, str]:
    """The browser binary to drive, or None and why there is none."""
    named = environ.get(BROWSER_ENV)
    if named:
        path = Path(named)
        if path.is_file() and os.access(path, os.X_OK):
            return path, ""
        return None, f"{BROWSER_ENV}={named} is not an executable file"
    if default.is_file() and os.access(default, os.X_OK):
        return default, ""
    return None, (f"no browser: set {BROWSER_ENV} to a Chromium or Chrome binary, or install "
                  f"Debian's chromium ({default})")


def browser_or_skip() -> Path:
    """The browser to drive; without one, or without Playwright, skip (fail under CI)."""
    browser, why = chosen_browser()
    if browser is not None and importlib.util.find_spec("playwright") is None:
        why = "no Playwright in this environment (pip install playwright; no browser download)"
    if why:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(why)
    return browser


@pytest.fixture(scope="module")
def lab_page(tmp_path_factory):
    """One JupyterLab server and one browser page for every notebook; both always stopped.

    The server serves a copy of the collection, so that its notebook 6 keeps its store apart
    from any other run of that notebook at the same time (nbval's, in a parallel test run).
    """
    browser_path = browser_or_skip()
    from playwright.sync_api import Error, sync_playwright

    served = copy_of_the_collection(tmp_path_factory.mktemp("collection"))
    committed = {path: path.read_bytes() for path in (served / "notebooks").glob("*.ipynb")}
    try:
        with jupyterlab_server(served) as lab, sync_playwright() as playwright:
            try:
                browser = playwright.chromium.launch(  # while the server starts
                    executable_path=browser_path, args=CHROMIUM_ARGS, timeout=OPEN_SECONDS * 1000
                )
            except Error as error:
                pytest.fail(f"the browser {browser_path} ({BROWSER_ENV} or the default) did not "
                            f"start: {error.message.splitlines()[0]}", pytrace=False)
            try:
                lab.wait_until_ready()
                assert lab.token not in " ".join(psutil.Process(lab.process.pid).cmdline()), (
                    "JupyterLab's token is on its command line, which every user of the machine "
                    "can read: tests/jupyterlab_server.py must pass it in JUPYTER_TOKEN")
                page = browser.new_page(viewport={"width": 1280, "height": 1024})
                page.set_default_timeout(OPEN_SECONDS * 1000)
                page.add_init_script(WITHIN)
                start_jupyterlab(page, lab)
                yield page
                left = lab.get_json("api/kernels")
                assert left == [], f"{len(left)} kernel(s) still running after the last notebook"
            finally:
                browser.close()
    finally:
        changed = [path for path, data in committed.items() if path.read_bytes() != data]
        for path in changed:
            path.write_bytes(committed[path])
        assert not changed, (
            "JupyterLab wrote to committed notebooks (restored): "
            + ", ".join(path.name for path in changed)
        )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_a_reader_opens_the_notebook_unchanged_and_runs_it_in_jupyterlab(path, lab_page):
    """Both facts on one opening, in one kernel: opening changes nothing, then Run All gives
    the committed outputs. A notebook that opens as changed is still run, so that a failure
    names every problem at once."""
    page = lab_page
    committed = json.loads(path.read_text(encoding="utf-8"))
    try:
        open_notebook(page, path)
        problems = opening_problems(path, metadata_once_the_kernel_is_known(page))
        run_problems = check_run_all(page, path, committed)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=SCREENSHOTS / f"{path.stem}.png")
        if run_problems:
            problems.append(f"{path.name}, Run All:\n"
                            + "\n".join(f"- {p}" for p in run_problems))
        if problems:
            pytest.fail("\n".join(problems), pytrace=False)
    finally:
        close_notebook(page)


def opening_problems(path: Path, opened: dict) -> list[str]:
    """Why the notebook counts as changed as soon as JupyterLab opened it; [] if it does not."""
    if not opened["dirty"]:
        return []
    stored = json.loads(path.read_text(encoding="utf-8"))["metadata"]
    changed = {key: opened["metadata"].get(key) for key in ("kernelspec", "language_info")
               if opened["metadata"].get(key) != stored.get(key)}
    why = (
        f"JupyterLab set {json.dumps(changed)} from the kernel, and the file stores "
        "otherwise. Kernels in notebooks/ report language_info without the Python version "
        "(dev/memorybook_dev/ipython_kernel_config.py, copied by `make setup`), and "
        "`make run` stores it and tools/execute.py's KERNELSPEC"
        if changed else "its kernelspec and language_info are as stored: something else "
        "changed it"
    )
    return [f"{path.name} shows as changed as soon as JupyterLab opens it: {why}"]


def test_memorybook_browser_names_the_browser_and_a_wrong_path_is_named(tmp_path):
    wrapper = tmp_path / "browser"
    wrapper.write_text("#!/bin/sh\n", encoding="utf-8")
    wrapper.chmod(0o755)
    missing = tmp_path / "missing"
    assert chosen_browser({BROWSER_ENV: str(wrapper)}, default=missing) == (wrapper, "")
    assert chosen_browser({}, default=wrapper) == (wrapper, "")
    for environ in ({BROWSER_ENV: str(missing)}, {BROWSER_ENV: str(tmp_path)}, {}):
        browser, why = chosen_browser(environ, default=missing)
        assert browser is None and BROWSER_ENV in why


# --- driving JupyterLab (window.jupyterapp; the open notebook's panel is window.panel) ---

# Every page script below awaits JupyterLab through this, so that nothing waits without bound.
WITHIN = """
window.within = (promise, seconds, what) => Promise.race([
    promise,
    new Promise((_, reject) => setTimeout(
        () => reject(new Error(`${what}: not done within ${seconds} s`)), seconds * 1000)),
]);
"""


def in_page(page, script: str, arg=None):
    """Evaluate `script` in the page; a failure or time-out inside it fails the test."""
    from playwright.sync_api import Error

    try:
        return page.evaluate(script, arg)
    except Error as error:
        pytest.fail(error.message.splitlines()[0], pytrace=False)


def start_jupyterlab(page, lab) -> None:
    """Log in with the token (it sets a cookie), then load JupyterLab once, in a new workspace."""
    page.goto(lab.url(f"api/status?token={lab.token}"))
    page.goto(lab.url("lab/workspaces/browser-test?reset"))
    page.wait_for_function("() => Boolean(window.jupyterapp)")
    in_page(
        page,
        """async (seconds) => {
            await within(window.jupyterapp.restored, seconds, 'JupyterLab start');
            window.jupyterapp.shell.collapseLeft();  // the notebook gets the full width
        }""",
        OPEN_SECONDS,
    )


def open_notebook(page, path: Path) -> None:
    """Open the notebook as a reader does (File > Open); return when its kernel is idle."""
    in_page(
        page,
        """async ([path, seconds]) => {
            const app = window.jupyterapp;
            const open = app.commands.execute('docmanager:open', {path, factory: 'Notebook'});
            const panel = window.panel = await within(open, seconds, 'opening ' + path);
            await within(panel.context.ready, seconds, 'reading ' + path);
            await within(panel.sessionContext.ready, seconds, 'starting a kernel for ' + path);
            const idle = new Promise((resolve) => {
                const check = () => panel.sessionContext.session?.kernel?.status === 'idle'
                    ? resolve() : setTimeout(check, 50);
                check();
            });
            await within(idle, seconds, 'the kernel of ' + path + ' becoming idle');
        }""",
        [path.relative_to(REPO_ROOT).as_posix(), OPEN_SECONDS],
    )


def metadata_once_the_kernel_is_known(page) -> dict:
    """Wait until JupyterLab has put the kernel's language_info and kernelspec into the open
    notebook's metadata (it does so once the kernel answers, whether or not they differ from the
    file's); return that metadata and whether the document now counts as changed."""
    return in_page(
        page,
        """async (seconds) => {
            const panel = window.panel, model = panel.context.model;
            const kernel = panel.sessionContext.session.kernel;
            const [info, spec] = await within(Promise.all([kernel.info, kernel.spec]), seconds,
                                              'the kernel info and spec');
            const same = (a, b) => a && b && typeof a === 'object' && typeof b === 'object'
                ? Object.keys(a).length === Object.keys(b).length
                    && Object.keys(a).every((key) => same(a[key], b[key]))
                : a === b;
            const applied = new Promise((resolve) => {
                const check = () => {
                    const kernelspec = model.getMetadata('kernelspec') || {};
                    const done = same(model.getMetadata('language_info'), info.language_info)
                        && kernelspec.name === kernel.name
                        && kernelspec.display_name === spec.display_name;
                    done ? resolve() : setTimeout(check, 50);
                };
                check();
            });
            await within(applied, seconds, 'JupyterLab applying the kernel metadata');
            return {dirty: model.dirty, metadata: model.toJSON().metadata};
        }""",
        STEP_SECONDS,
    )


def run_all(page) -> dict:
    """Clear every output, Run All; return the notebook as JupyterLab's model then holds it."""
    return in_page(
        page,
        """async (seconds) => {
            const app = window.jupyterapp, panel = window.panel;
            app.shell.activateById(panel.id);  // the notebook commands act on this one
            await app.commands.execute('notebook:clear-all-cell-outputs');
            const left = panel.content.model.toJSON().cells
                .reduce((count, cell) => count + (cell.outputs || []).length, 0);
            if (left) throw new Error(left + ' outputs left after clearing all outputs');
            const run = app.commands.execute('notebook:run-all-cells');
            const ok = await within(run, seconds, 'Run All');
            return {ok, notebook: panel.content.model.toJSON()};
        }""",
        RUN_SECONDS,
    )


def rendered(page, index: int) -> dict:
    """Scroll cell `index` into view; its images' widths, its Markdown links and tables."""
    return in_page(
        page,
        """async ([index, seconds]) => {
            const notebook = window.panel.content;
            const cell = notebook.widgets[index];
            await within(notebook.scrollToCell(cell, 'center'), seconds, 'showing cell ' + index);
            const images = [...cell.node.querySelectorAll('.jp-OutputArea .jp-RenderedImage img')];
            const decoded = Promise.all(images.map((img) => img.decode().catch(() => null)));
            await within(decoded, seconds, 'decoding the images of cell ' + index);
            const markdown = '.jp-OutputArea .jp-RenderedMarkdown';
            const anchors = cell.node.querySelectorAll(markdown + ' a');
            return {
                widths: images.map((img) => img.naturalWidth),
                hrefs: [...anchors].map((a) => a.getAttribute('href')),
                tables: cell.node.querySelectorAll(markdown + ' table').length,
            };
        }""",
        [index, STEP_SECONDS],
    )


def close_notebook(page) -> None:
    """Shut the notebook's kernel down and close its tab without saving."""
    in_page(
        page,
        """async (seconds) => {
            const panel = window.panel;
            window.panel = null;
            if (!panel || panel.isDisposed) return;
            await within(panel.sessionContext.shutdown(), seconds, 'shutting the kernel down');
            panel.context.model.dirty = false;  // closing asks nothing and saves nothing
            panel.close();
        }""",
        STEP_SECONDS,
    )


# --- the checks ---


def check_run_all(page, path: Path, committed: dict) -> list[str]:
    """Run All once and return every way it differs from the committed notebook."""
    result = run_all(page)
    cells = result["notebook"]["cells"]
    errors = errors_of_the_run(committed["cells"], cells)
    if errors:  # later cells did not run: comparing their outputs would only repeat that
        return errors
    if not result["ok"]:
        return ["JupyterLab reported a failed run, yet no cell shows an error"]
    return (
        text_differences(committed["cells"], cells)
        + missing_images(page, committed["cells"])
        + link_problems(page, path, committed["cells"])
        + markdown_problems(page, committed["cells"])
    )


def label(index: int, cell: dict) -> str:
    """A cell as JupyterLab's status bar numbers it (from 1, Markdown cells included)."""
    source = "".join(cell["source"]).strip().splitlines()
    return f"cell {index + 1} ({source[0][:60] if source else 'empty'!r})"


def errors_of_the_run(committed_cells: list[dict], cells: list[dict]) -> list[str]:
    if len(cells) != len(committed_cells):
        return [f"JupyterLab shows {len(cells)} cells, the file has {len(committed_cells)}"]
    problems = []
    for index, cell in enumerate(cells):
        if cell["cell_type"] != "code":
            continue
        for output in cell["outputs"]:
            if output["output_type"] == "error":
                problems.append(
                    f"{label(index, cell)} raised {output['ename']}: {output['evalue']}"
                )
        if cell["execution_count"] is None and not problems:
            problems.append(f"{label(index, cell)} did not run")
    return problems


def text_outputs(outputs: list[dict]) -> list[tuple[str, str]]:
    """What a reader reads in a cell's outputs: streams (merged as JupyterLab shows them),
    the text and Markdown of displays, errors; an image only as being there."""
    shown: list[tuple[str, str]] = []
    for output in outputs:
        kind = output["output_type"]
        if kind == "stream":
            text, name = joined(output["text"]), f"stream {output['name']}"
            if shown and shown[-1][0] == name:
                shown[-1] = (name, shown[-1][1] + text)
            else:
                shown.append((name, text))
        elif kind in ("display_data", "execute_result"):
            data = output["data"]
            shown += [(mime, joined(data[mime])) for mime in TEXT_MIMES if mime in data]
            shown += [("image/png", "(an image)")] if "image/png" in data else []
        elif kind == "error":
            shown.append(("error", f"{output['ename']}: {output['evalue']}"))
    return shown


def joined(text: str | list[str]) -> str:
    return text if isinstance(text, str) else "".join(text)


def text_differences(committed_cells: list[dict], cells: list[dict]) -> list[str]:
    problems = []
    for index, (expected, got) in enumerate(zip(committed_cells, cells, strict=True)):
        if expected["cell_type"] != "code":
            continue
        want, have = text_outputs(expected["outputs"]), text_outputs(got["outputs"])
        if want != have:
            diff = difflib.unified_diff(
                as_lines(want), as_lines(have), "committed", "in JupyterLab", lineterm="", n=1
            )
            problems.append(f"{label(index, expected)} outputs differ:\n" + "\n".join(diff))
    return problems


def as_lines(shown: list[tuple[str, str]]) -> list[str]:
    return [line for kind, text in shown for line in [f"[{kind}]", *text.splitlines()]]


def missing_images(page, committed_cells: list[dict]) -> list[str]:
    problems = []
    for index, cell in enumerate(committed_cells):
        expected = sum(
            "image/png" in output.get("data", {}) for output in cell.get("outputs", [])
        )
        if not expected:
            continue
        widths = rendered(page, index)["widths"]
        shown = sum(width > 0 for width in widths)
        if shown != expected:
            problems.append(
                f"{label(index, cell)}: {expected} image(s) committed, {shown} rendered "
                f"(natural widths {widths})"
            )
    return problems


MARKDOWN_TABLE = re.compile(r"^\|[-:| ]+\|$", re.MULTILINE)  # a table's delimiter row


def markdown_problems(page, committed_cells: list[dict]) -> list[str]:
    """Markdown reads as written: each table output renders as a table, and nothing anywhere in
    the notebook was typeset as a formula (the collection has none; a `$` pair turns a price
    into math). Typesetting is asynchronous, so the second check sees what was typeset by now;
    tests/test_notebooks_committed.py finds every unescaped `$` in the files themselves."""
    problems = []
    for index, cell in enumerate(committed_cells):
        tables = sum(bool(MARKDOWN_TABLE.search(joined(output["data"]["text/markdown"])))
                     for output in cell.get("outputs", [])
                     if "text/markdown" in output.get("data", {}))
        shown = rendered(page, index)["tables"] if tables else 0
        if shown != tables:
            problems.append(f"{label(index, cell)}: {tables} Markdown table(s) committed, "
                            f"{shown} rendered as a table")
    formulas = in_page(page, "() => window.panel.node.querySelectorAll('mjx-container').length")
    if formulas:
        problems.append(f"{formulas} piece(s) of text typeset as math (an unescaped $ pair?)")
    return problems


def link_problems(page, path: Path, committed_cells: list[dict]) -> list[str]:
    """Every playground link of a Markdown output is an anchor to the committed target, and opens
    a recorded call, but for the links to unrecorded calls the notebook's metadata counts."""
    expected, hrefs, committed_targets = 0, [], []
    for index, cell in enumerate(committed_cells):
        markdown = [
            joined(output["data"]["text/markdown"])
            for output in cell.get("outputs", [])
            if "text/markdown" in output.get("data", {})
        ]
        if markdown:
            expected += sum(len(LINK.findall(text)) for text in markdown)
            committed_targets += [target for text in markdown for _, target in LINK.findall(text)]
            hrefs += [href for href in rendered(page, index)["hrefs"]
                      if href and href.startswith(SHARE_PREFIX)]
    expected = EXPECTED_LINKS.get(path.stem, expected)
    problems = []
    if len(hrefs) != expected:
        problems.append(f"{len(hrefs)} playground anchors rendered, {expected} expected")
    if hrefs != committed_targets:
        problems.append("the rendered anchors' targets differ from the committed links")
    recording = read_recording(RECORDING_PATH)
    unrecorded = []
    for number, href in enumerate(hrefs, 1):
        try:
            state, questions, share = decode(href)
            key = cache_key(share["selectedModels"][0], json.dumps(state), json.dumps(questions))
        except (ValueError, KeyError, IndexError, TypeError) as error:
            problems.append(f"playground anchor {number} does not decode: {error!r}")
            continue
        if key not in recording:
            unrecorded.append(f"anchor {number} ({state.get('customer', {}).get('id')}, "
                              f"{state.get('ticket', {}).get('id')})")
    counted = json.loads(path.read_text(encoding="utf-8"))["metadata"].get("memorybook", {})
    if len(unrecorded) != counted.get("links_to_unrecorded_calls", 0):
        problems.append(f"playground links to calls that are not recorded: {unrecorded}")
    return problems
