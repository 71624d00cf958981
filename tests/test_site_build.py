"""`make site`'s own rules (tools/site_build.py), without a browser: the reference lists what
`memorybook/__init__.pyi` exports, links to files that are not pages go to the repository, and
the build fails, naming the file, on a broken link, a missing image, a load from another host, a
notebook without a page or a public name without an entry. tests/test_site.py reads the site
itself in Chromium."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

import memorybook
from tests.helpers import NOTEBOOKS, REPO_ROOT
from tools import site_build

REPO = "https://github.com/someone/cookbook"


def config(tmp_path: Path, **extra) -> SimpleNamespace:
    return SimpleNamespace(repo_url=REPO, edit_uri="blob/main/", site_dir=str(tmp_path),
                           extra={"memorybook_version": "9.9.9", **extra})


def test_the_reference_covers_exactly_the_names_the_package_exports():
    listed = [name for name, _ in site_build.public_names()]
    assert sorted(listed) == sorted(memorybook.__all__), (
        "tools/site_build.py's public_names() must read memorybook/__init__.pyi as lazy_loader "
        f"does: it finds {sorted(set(listed) ^ set(memorybook.__all__))} differently")


def test_a_name_added_to_the_stub_gets_its_entry_without_touching_the_site(tmp_path):
    stub = tmp_path / "__init__.pyi"
    stub.write_text("from .jev import Jev as Jev\nfrom .later import (\n    Added as Added,\n)\n"
                    "from . import store as store\n", encoding="utf-8")
    found = site_build.public_names(stub)
    assert found == [("Jev", "memorybook.jev.Jev"), ("Added", "memorybook.later.Added"),
                     ("store", "memorybook.store")]
    original = site_build.public_names
    try:
        site_build.public_names = lambda: found
        page = site_build.reference_page(config(tmp_path, reference_also=["memorybook.testing"]))
    finally:
        site_build.public_names = original
    entries = [line for line in page.splitlines() if line.startswith(":::")]
    assert entries == ["::: memorybook.jev.Jev", "::: memorybook.later.Added",
                       "::: memorybook.store", "::: memorybook.testing"], (
        "reference_page() must write one mkdocstrings entry per exported name, then "
        "mkdocs.yml's reference_also")
    assert "# Reference: memorybook 9.9.9" in page


def test_links_to_files_that_are_not_pages_go_to_the_repository(tmp_path):
    pages = {"README.md", "notebooks/01_memory_system.ipynb"}
    settings = config(tmp_path)
    to = site_build.to_repository
    assert to("README.md", "LICENSE", pages, settings) == f"{REPO}/blob/main/LICENSE"
    assert to("README.md", "examples/ticket_router/", pages, settings) == (
        f"{REPO}/tree/main/examples/ticket_router")
    assert to("notebooks/09_memory_in_a_web_service.ipynb", "../memorybook/jev.py#L1", pages,
              settings) == f"{REPO}/blob/main/memorybook/jev.py#L1"
    for page, target in [("README.md", "notebooks/01_memory_system.ipynb"),  # a page
                         ("README.md", "nowhere.md"),  # nothing: the checks report it
                         ("README.md", "https://example.org/x"), ("README.md", "#guarantees"),
                         ("README.md", "../outside")]:
        assert to(page, target, pages, settings) is None, (page, target)
    assert site_build.notebook_target(
        "notebooks/01_memory_system.ipynb", "02_memory_gate.ipynb#the-gate",
        "notebooks/01_memory_system.html", {"notebooks/02_memory_gate.ipynb":
                                            "notebooks/02_memory_gate.html"}, settings) == (
        "02_memory_gate.html#the-gate"), "a notebook's link to another must go to its page"


def test_a_notebook_page_keeps_no_script_that_loads_from_elsewhere_or_typesets_math():
    content = ('<script src=""></script><script type="text/x-mathjax-config">x</script>'
               '<script src="https://cdn.example/mathjax.js"></script>'
               '<script type="module">await import("https://cdn.example/mermaid.mjs")</script>'
               '<script>copy()</script><p id="a">text</p>')
    page = SimpleNamespace(file=SimpleNamespace(src_uri="notebooks/01_x.ipynb",
                                                url="notebooks/01_x.html"))
    kept = site_build.on_page_content(content, page, config(Path("/nowhere")), [])
    assert kept.endswith('<script>copy()</script><p id="a">text</p>'), kept
    assert "make lab" in kept and f"{REPO}/blob/main/notebooks/01_x.ipynb" in kept


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_the_checks_name_each_broken_link_missing_image_and_remote_load(tmp_path):
    write(tmp_path / "index.html",
          '<a href="other.html">fine</a><a href="other.html#here">fine</a><a href="#top" id="top">'
          '</a><a href="gone.html">x</a><a href="other.html#nowhere">x</a>'
          '<img src="charts/missing.png"><img src="data:image/png;base64,AA==">'
          '<script src="https://cdn.example/lib.js"></script><script src=""></script>'
          '<a href="https://example.org/">an external link: the weekly job checks it</a>')
    write(tmp_path / "other.html", '<h2 id="here">here</h2>')
    write(tmp_path / "assets" / "style.css", '@import url("https://fonts.example/css");')
    problems = site_build.site_problems(tmp_path, {"index.html": "README.md"})
    expected = ["gone.html", "other.html#nowhere", "charts/missing.png",
                "https://cdn.example/lib.js", "empty address", "style.css"]
    for text in expected:
        assert any(text in problem for problem in problems), (
            f"site_problems() does not report {text!r}: {problems}")
    assert all(problem.startswith(("README.md (index.html): ", "assets/style.css"))
               for problem in problems), f"each problem must name its page's file: {problems}"
    assert len(problems) == len(expected), problems


def test_a_notebook_without_a_page_and_a_name_without_an_entry_are_named(tmp_path):
    write(tmp_path / "notebooks" / "01_first.ipynb", "{}")
    write(tmp_path / "notebooks" / "Scratch copy.ipynb", "{}")
    assert site_build.notebook_problems(tmp_path, {"notebooks/01_first.ipynb"}) == [
        'notebooks/Scratch copy.ipynb has no page: name it NN_name.ipynb, the next number '
        '(CONTRIBUTING.md, "Add a notebook")']
    write(tmp_path / "reference.html", '<h3 id="memorybook.jev.Jev">Jev</h3>')
    [problem] = site_build.reference_problems(tmp_path / "reference.html",
                                              ["memorybook.jev.Jev", "memorybook.later.Added"])
    assert problem.startswith("memorybook.later.Added has no entry in the reference")


def test_every_notebook_is_named_as_the_site_takes_it():
    assert [path.name for path in site_build.notebook_paths()] == [
        path.name for path in NOTEBOOKS], "tools/site_build.py and tests/helpers.py disagree"


def test_a_broken_site_fails_the_build_naming_each_file(tmp_path):
    """mkdocs itself runs the hook: a copy of the site's sources, with one notebook, a README
    holding a broken link and a missing image, and a notebook named as no page is."""
    for name in ("mkdocs.yml", "pyproject.toml", "LICENSE", "tools/site_build.py"):
        write(tmp_path / name, (REPO_ROOT / name).read_text(encoding="utf-8"))
    shutil.copytree(REPO_ROOT / "docs", tmp_path / "docs")
    shutil.copytree(REPO_ROOT / "memorybook", tmp_path / "memorybook",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "notebooks").mkdir()
    for name in (NOTEBOOKS[0].name, "draft.ipynb"):
        shutil.copy(NOTEBOOKS[0], tmp_path / "notebooks" / name)
    write(tmp_path / "README.md", f"# Home\n\n[first](notebooks/{NOTEBOOKS[0].name}), "
          "[licence](LICENSE), [gone](nowhere.md)\n\n![a chart](charts/missing.png)\n")
    for name in ("OPERATING.md", "CHANGELOG.md", "CONTRIBUTING.md"):
        write(tmp_path / name, f"# {name}\n")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build"], cwd=tmp_path, capture_output=True,
        text=True, timeout=120, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    said = built.stdout + built.stderr
    assert built.returncode != 0, f"the build passed with a broken link and more:\n{said}"
    for named in ("notebooks/draft.ipynb has no page", "README.md (index.html): a link to "
                  "nowhere.md", "README.md (index.html): an image to charts/missing.png"):
        assert named in said, f"the failed build does not say {named!r}:\n{said}"
    assert "LICENSE" not in said, f"LICENSE must go to the repository, not fail:\n{said}"


@pytest.mark.parametrize("name", ["README.md", "CONTRIBUTING.md", "CHANGELOG.md"])
def test_the_pages_from_the_top_of_the_repository_exist(name):
    assert (REPO_ROOT / name).is_file(), f"the site takes {name} from the repository's top"


def test_the_weekly_link_check_names_each_failing_address_and_its_pages(tmp_path):
    from tools import site_links

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    served = tmp_path / "served"
    write(served / "here.html", "here")
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=served))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        there = f"http://127.0.0.1:{server.server_address[1]}"
        write(tmp_path / "site" / "index.html",
              f'<a href="{there}/here.html#part">ok</a><a href="{there}/gone.html">x</a>'
              '<a href="other.html">within the site: make site checks it</a>')
        write(tmp_path / "site" / "notebooks" / "01.html", f'<a href="{there}/gone.html#a">x</a>')
        assert site_links.broken_links(tmp_path / "site") == [
            f"{there}/gone.html: 404 (on index.html, notebooks/01.html)"]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_addresses_from_the_sites_root_start_at_its_published_path(tmp_path):
    """On GitHub Pages the site lives under /<repository>/ (mkdocs.yml's site_url, which the
    Pages workflow sets): the 404 page's links start there."""
    write(tmp_path / "404.html", '<link rel="stylesheet" href="/cookbook/assets/main.css">'
          '<a href="/cookbook/index.html">home</a><a href="/elsewhere/index.html">x</a>')
    write(tmp_path / "assets" / "main.css", "")
    write(tmp_path / "index.html", "")
    problems = site_build.site_problems(tmp_path, {}, root="/cookbook/")
    assert len(problems) == 1 and "/elsewhere/index.html" in problems[0], problems
