"""The site `make site` builds, read in Chromium as a reader reads it.

    .venv/bin/python -m pytest -p no:xdist tests/test_site.py

The site is built once for this file (the `make site` command, into a temporary folder), served
on 127.0.0.1 and read in headless Chromium driven by Playwright: the browser tests/test_browser.py
drives ($MEMORYBOOK_BROWSER, by default Debian's /usr/bin/chromium; Playwright's own download is
never used). Each page is loaded once, and every request it makes for another host is
counted. conftest.py runs this file whole on one worker, so the site is built once a run.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from memorybook.config import RECORDING_PATH
from memorybook.recording import cache_key, read_recording
from tests.helpers import LINK, NOTEBOOKS, REPO_ROOT, decode, markdown_outputs
from tests.test_browser import CHROMIUM_ARGS, SHARE_PREFIX, browser_or_skip

pytestmark = pytest.mark.browser

BUILD_SECONDS = 120  # bound on building the site (about 5 s here, warm)
LOAD_SECONDS = 30  # bound on loading one page
NARROW = 390  # px: a phone held upright
VERSION = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))[
    "project"]["version"]
NOTEBOOK_CHARTS = ("03", "04", "08")  # the notebooks whose pages must show their charts


def make_site_command() -> list[str]:
    """The command `make site` runs, as the Makefile has it, with the site's folder to name."""
    makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = makefile.split("\nsite:", 1)[1].split("\n\t", 1)[1].split("\n", 1)[0]
    assert "mkdocs build" in recipe, (
        f"`make site` runs {recipe!r}: tests/test_site.py builds the site as it does and "
        "expects `mkdocs build`; change make_site_command() with the Makefile")
    return [sys.executable, "-m", "mkdocs", "build", *recipe.split("mkdocs build", 1)[1].split()]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("site")
    built = subprocess.run([*make_site_command(), "--site-dir", str(folder)], cwd=REPO_ROOT,
                           capture_output=True, text=True, timeout=BUILD_SECONDS,
                           env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert built.returncode == 0, (
        "`make site` failed; what it printed says which file to fix:\n"
        + built.stdout + built.stderr)
    return folder


@pytest.fixture(scope="module")
def address(site) -> Iterator[str]:
    """The site, served on a free port of 127.0.0.1 while this file's tests run."""
    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=site))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser(address):
    path = browser_or_skip()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@dataclass
class Reading:
    """What one page load showed: the problems it logged, and what the tests read off it."""
    errors: list[str] = field(default_factory=list)
    elsewhere: list[str] = field(default_factory=list)
    facts: dict = field(default_factory=dict)


# Read off each page once it has loaded, images decoded
FACTS = """async () => {
    const images = [...document.querySelectorAll('article img')];
    await Promise.all(images.map((img) => img.decode().catch(() => null)));
    const shown = (node) => { const box = node.getBoundingClientRect();
                              return box.width > 0 && box.height > 0; };
    return {
        text: document.body.innerText,
        footer: document.querySelector('footer') ? document.querySelector('footer').innerText : '',
        charts: images.filter((img) => img.closest('.jp-OutputArea')).map((img) => (
            {width: img.naturalWidth, shown: shown(img)})),
        hrefs: [...document.querySelectorAll('article a[href]')].map((a) => a.href),
        outputs: [...document.querySelectorAll('.jp-OutputArea-output pre')].map((pre) => (
            {text: pre.innerText, shown: shown(pre)})),
    };
}"""


class Reader:
    """One browser tab, `width` px wide, that loads pages in turn (a tab for each costs twice as
    long), noting each request for another host (none reaches one here: no network)."""

    def __init__(self, browser, address: str, width: int = 1280):
        self.here = urlsplit(address).netloc
        self.reading = Reading()
        self.page = browser.new_page(viewport={"width": width, "height": 900})
        self.page.set_default_timeout(LOAD_SECONDS * 1000)
        self.page.on("request", self.requested)
        self.page.on("console", lambda message: self.reading.errors.append(message.text)
                     if message.type == "error" else None)
        self.page.on("pageerror", lambda error: self.reading.errors.append(str(error)))
        self.page.on("response", lambda response: self.reading.errors.append(
            f"{response.status} for {response.url}") if response.status >= 400 else None)

    def requested(self, request) -> None:
        address = urlsplit(request.url)
        if address.scheme not in ("data", "blob") and address.netloc != self.here:
            self.reading.elsewhere.append(request.url)

    def read(self, url: str, script: str = FACTS) -> Reading:
        self.reading = Reading()
        self.page.goto(url, wait_until="load")
        self.reading.facts = self.page.evaluate(script)
        return self.reading

    def close(self) -> None:
        self.page.close()


def read(browser, url: str, width: int = 1280, script: str = FACTS) -> Reading:
    """Load `url` alone in a new tab `width` px wide."""
    reader = Reader(browser, url, width)
    try:
        return reader.read(url, script)
    finally:
        reader.close()


@pytest.fixture(scope="module")
def tour(browser, address, site) -> dict[str, Reading]:
    """Every page of the site, each loaded once, by its path in the site."""
    pages = sorted(path.relative_to(site).as_posix() for path in site.rglob("*.html"))
    reader = Reader(browser, address)
    try:
        return {path: reader.read(address + path) for path in pages}
    finally:
        reader.close()


def page_of(notebook: Path) -> str:
    return f"notebooks/{notebook.stem}.html"


def committed(notebook: Path) -> dict:
    return json.loads(notebook.read_text(encoding="utf-8"))


def test_the_site_has_a_page_for_the_readme_each_notebook_and_the_reference(tour):
    wanted = {"index.html", "reference.html", "CHANGELOG.html", "CONTRIBUTING.html",
              "OPERATING.html", *map(page_of, NOTEBOOKS)}
    assert wanted <= set(tour), (
        f"the site lacks {sorted(wanted - set(tour))}: tools/site_build.py's on_files adds "
        "the README, OPERATING, CHANGELOG, CONTRIBUTING and each notebooks/NN_name.ipynb")


def test_every_page_loads_with_no_console_error_and_nothing_from_another_host(tour):
    problems = [f"{path}: {error}" for path, reading in tour.items() for error in reading.errors]
    problems += [f"{path}: asked another host for {url}" for path, reading in tour.items()
                 for url in reading.elsewhere]
    assert problems == [], (
        "pages of the site logged errors or reached for another host (a font, a script, a "
        "counter of stars); mkdocs.yml's theme and tools/site_build.py must keep every page "
        "to its own files:\n" + "\n".join(problems))


def test_notebook_1s_page_shows_its_table_3_of_6_then_6_of_6(tour):
    notebook = NOTEBOOKS[0]
    [table] = [
        "".join(output["text"]) for cell in committed(notebook)["cells"]
        for output in cell.get("outputs", []) if "3/6" in "".join(output.get("text", ""))]
    assert "6/6" in table, f"{notebook.name}'s table no longer prints 6/6: update this test"
    outputs = tour[page_of(notebook)].facts["outputs"]
    shown = [output for output in outputs
             if lines_of(output["text"]) == lines_of(table) and output["shown"]]
    assert shown, (
        f"{page_of(notebook)} does not show the table {notebook.name} prints, ending "
        f"{table.strip().splitlines()[-1]!r}: the page must show the notebook's committed "
        "outputs (mkdocs.yml: mkdocs-jupyter with execute: false)")


def lines_of(text: str) -> list[str]:
    return [line.rstrip() for line in text.strip().splitlines()]


@pytest.mark.parametrize("number", NOTEBOOK_CHARTS)
def test_the_notebooks_page_shows_its_charts(tour, number):
    notebook = next(path for path in NOTEBOOKS if path.name.startswith(number))
    expected = sum("image/png" in output.get("data", {})
                   for cell in committed(notebook)["cells"] for output in cell.get("outputs", []))
    charts = tour[page_of(notebook)].facts["charts"]
    shown = [chart for chart in charts if chart["width"] > 0 and chart["shown"]]
    assert expected and len(shown) == expected, (
        f"{page_of(notebook)} shows {len(shown)} of the {expected} charts {notebook.name} "
        f"holds ({charts}): its images must come with the page (mkdocs-jupyter embeds them)")


def test_every_playground_link_on_the_site_opens_a_recorded_call(tour):
    """Each link decodes to a call; those the recording lacks are the ones the notebook's
    metadata counts (notebooks 6 and 7 link calls never recorded), and no other page has any."""
    recording = read_recording(RECORDING_PATH)
    problems, seen = [], 0
    declared = {page_of(path): committed(path)["metadata"].get("memorybook", {}).get(
        "links_to_unrecorded_calls", 0) for path in NOTEBOOKS}
    for path, reading in tour.items():
        links = [href for href in reading.facts["hrefs"] if href.startswith(SHARE_PREFIX)]
        seen += len(links)
        unrecorded = 0
        for href in links:
            try:
                state, questions, share = decode(href)
                key = cache_key(share["selectedModels"][0], json.dumps(state),
                                json.dumps(questions))
            except (ValueError, KeyError, IndexError, TypeError) as error:
                problems.append(f"{path}: a playground link does not decode ({error!r})")
                continue
            unrecorded += key not in recording
        if unrecorded != declared.get(path, 0):
            problems.append(f"{path}: {unrecorded} playground links to calls the recording "
                            f"lacks, {declared.get(path, 0)} declared")
    committed_links = sum(len(LINK.findall(text)) for path in NOTEBOOKS
                          for text in markdown_outputs(committed(path)))
    assert seen >= committed_links and not problems, (
        f"{seen} playground links on the site ({committed_links} in the notebooks' outputs): "
        + "; ".join(problems))


def test_each_notebooks_page_links_its_source_and_says_how_to_run_it(tour):
    repo_url = yaml.load((REPO_ROOT / "mkdocs.yml").read_text(encoding="utf-8"),
                         Loader=yaml.BaseLoader)["repo_url"]
    repo_url = os.environ.get("SITE_REPO_URL") or repo_url[-1]  # !ENV [name, default]
    wrong = []
    for notebook in NOTEBOOKS:
        facts = tour[page_of(notebook)].facts
        source = f"{repo_url}/blob/main/notebooks/{notebook.name}"
        if source not in facts["hrefs"] or "make lab" not in facts["text"]:
            wrong.append(page_of(notebook))
    assert wrong == [], (
        f"{wrong} lack a link to their notebook in the repository or the words `make lab`: "
        "tools/site_build.py's notebook_banner() puts both at the top of each notebook's page")


def test_every_page_says_which_version_of_the_library_it_documents(tour):
    missing = [path for path, reading in tour.items()
               if f"memorybook {VERSION}" not in reading.facts["footer"]]
    assert missing == [], (
        f"{missing} do not say `memorybook {VERSION}` (pyproject.toml's version) in their "
        "footer: tools/site_build.py's on_config sets it as the site's copyright line")


def test_search_finds_gate(browser, address):
    script = """async (seconds) => {
        document.querySelector('label[for="__search"]').click();
        const input = document.querySelector('input[data-md-component="search-query"]');
        input.focus();
        input.value = 'gate';
        input.dispatchEvent(new Event('input', {bubbles: true}));
        const until = Date.now() + seconds * 1000;
        let found = [];
        while (Date.now() < until) {
            found = [...document.querySelectorAll('.md-search-result__item a')];
            if (found.length) break;
            await new Promise((resolve) => setTimeout(resolve, 100));
        }
        return found.map((a) => ({href: a.href, text: a.innerText}));
    }"""
    reading = read(browser, address + "index.html",
                   script=f"() => ({script})({LOAD_SECONDS})")
    hits = reading.facts
    assert hits and any("gate" in hit["text"].lower() for hit in hits), (
        f"searching the site for 'gate' found {hits}: Material's search plugin (mkdocs.yml "
        "plugins: search) must index the pages")
    assert not reading.errors and not reading.elsewhere, reading.errors + reading.elsewhere


def test_at_390_px_notebook_1s_page_does_not_scroll_sideways(browser, address):
    script = """() => {
        const page = document.scrollingElement;
        const wide = [...document.querySelectorAll('article *')].filter((node) => {
            const box = node.getBoundingClientRect();
            return box.right > window.innerWidth + 1 && !node.closest('pre, .highlight-ipynb, '
                + '.jp-OutputArea-output, table, .md-typeset__scrollwrap');
        }).slice(0, 5).map((node) => node.tagName + '.' + node.className);
        const table = [...document.querySelectorAll('.jp-OutputArea-output pre')]
            .find((pre) => pre.innerText.includes('3/6'));
        const style = table ? getComputedStyle(table) : {};
        return {scroll: page.scrollWidth, width: window.innerWidth, wide,
                table: table && {whiteSpace: style.whiteSpace, overflow: style.overflowX,
                                 scrolls: table.scrollWidth > table.clientWidth}};
    }"""
    reading = read(browser, address + page_of(NOTEBOOKS[0]), width=NARROW, script=script)
    facts = reading.facts
    assert facts["scroll"] <= facts["width"], (
        f"{page_of(NOTEBOOKS[0])} at {NARROW} px is {facts['scroll']} px wide and scrolls "
        f"sideways; too wide: {facts['wide']}. Code and outputs may scroll inside their own "
        "box, the page must not (tools/site_build.py, mkdocs.yml's theme)")
    assert facts["table"] == {"whiteSpace": "pre", "overflow": "auto", "scrolls": True}, (
        f"at {NARROW} px, notebook 1's table must keep its lines and scroll inside its box, not "
        f"wrap: {facts['table']} (docs/stylesheets/notebooks.css)")
    assert not reading.errors, reading.errors


def test_the_reference_has_an_entry_for_every_public_name(site):
    from tools.site_build import public_names

    html = (site / "reference.html").read_text(encoding="utf-8")
    missing = [name for name, path in public_names() if f'id="{path}"' not in html]
    assert public_names() and missing == [], (
        f"reference.html has no entry for {missing}: tools/site_build.py writes one for each "
        "name memorybook/__init__.pyi lists")
    assert re.search(rf"Reference: memorybook {re.escape(VERSION)}", html)
