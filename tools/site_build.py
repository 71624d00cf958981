"""`make site`'s pages and checks: the mkdocs hook that mkdocs.yml names.

The pages come from the files as committed, nothing is run: README.md (the home page), the
notebooks in order (mkdocs-jupyter shows the outputs they hold), OPERATING.md, a reference of the
library made from `memorybook/__init__.pyi` at each build, CHANGELOG.md and CONTRIBUTING.md. A
link to a file that is not a page (LICENSE, a module, examples/) is pointed at that file in the
repository (mkdocs.yml's repo_url and edit_uri). After the build every page is read again, and
the build fails, naming each file and what is wrong, when a link or an image leads nowhere, a
page loads something from another host, a notebook has no page, or a public name has no
reference entry.

The functions below the hook's events take plain values, so that tests/test_site.py can check
them without a build.
"""

from __future__ import annotations

import ast
import html
import logging
import posixpath
import re
import tomllib
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

from markdown.extensions import Extension
from markdown.treeprocessors import Treeprocessor

REPO_ROOT = Path(__file__).resolve().parent.parent
STUB = REPO_ROOT / "memorybook" / "__init__.pyi"
NOTEBOOKS = "notebooks"
NOTEBOOK_NAME = re.compile(r"^\d\d_[a-z0-9_]+\.ipynb$")  # CONTRIBUTING.md, "Add a notebook"
# Pages taken from the top of the repository, after the home page and the notebooks
TOP_PAGES = {"Operating the service": "OPERATING.md", "Reference": "reference.md",
             "Changelog": "CHANGELOG.md", "Contributing": "CONTRIBUTING.md"}
REFERENCE = "reference.md"
# What a page may load, besides pages and files of the site: nothing from another host
LOADING = {("img", "src"), ("script", "src"), ("link", "href"), ("iframe", "src"),
           ("source", "src"), ("video", "src"), ("audio", "src"), ("embed", "src"),
           ("object", "data")}
# A <link> with one of these loads what it names, or connects to its host
LOADING_RELS = {"stylesheet", "icon", "preload", "prefetch", "modulepreload", "manifest",
                "preconnect", "dns-prefetch", "apple-touch-icon", "mask-icon"}
# nbconvert's template puts MathJax (from a CDN, or from src="" when mkdocs-jupyter gives no
# address: the page itself, read as a script) and Mermaid (imported from a CDN) on every notebook
# page. No notebook here has math or a diagram: the site leaves these scripts out, and the checks
# after the build refuse any that loads from elsewhere.
SCRIPT = re.compile(r"<script\b([^>]*)>(.*?)</script>", re.IGNORECASE | re.DOTALL)
REMOTE_IMPORT = re.compile(r"""(?:\bimport\s*\(|\bfrom)\s*["'](?:https?:)?//""")
CSS_FROM_ELSEWHERE = re.compile(r"(?:url\(\s*['\"]?|@import\s+['\"])(?:https?:)?//", re.I)


# --- the hook's events, in the order mkdocs calls them ---


def on_config(config):
    # mkdocs-jupyter says at INFO level which notebook it converts or takes from its cache
    logging.getLogger("mkdocs.plugins.mkdocs_jupyter").setLevel(logging.WARNING)
    version = library_version()
    config.extra["memorybook_version"] = version
    config.copyright = f"This site documents memorybook {version}."
    config.nav = [{"Home": "README.md"},
                  {"Notebooks": [f"{NOTEBOOKS}/{path.name}" for path in notebook_paths()]},
                  *({title: page} for title, page in TOP_PAGES.items())]
    config.markdown_extensions.append(RepositoryLinks())
    _state.clear()
    return config


def is_remote_or_math(script: re.Match) -> bool:
    attributes, body = script.group(1), script.group(2)
    source = re.search(r"""\bsrc\s*=\s*["']([^"']*)["']""", attributes)
    return bool((source and (not source.group(1).strip() or urlsplit(source.group(1)).netloc))
                or "mathjax" in attributes.lower() or REMOTE_IMPORT.search(body))


def _first(priority):  # before mkdocs-jupyter's on_files, which makes notebooks pages
    def mark(event):
        event.mkdocs_priority = priority
        return event
    return mark


@_first(100)
def on_files(files, config):
    from mkdocs.structure.files import File

    for name in ["README.md", *TOP_PAGES.values()]:
        if name == REFERENCE:
            files.append(File.generated(config, REFERENCE, content=reference_page(config)))
        else:
            files.append(File(name, str(REPO_ROOT), config.site_dir, config.use_directory_urls))
    for path in notebook_paths():
        files.append(File(f"{NOTEBOOKS}/{path.name}", str(REPO_ROOT), config.site_dir,
                          config.use_directory_urls))
    _state["sources"] = {file.src_uri for file in files}
    return files


def on_page_markdown(markdown, page, config, files):
    _state["page"] = page.file.src_uri  # for RepositoryLinks, while this page is rendered
    return markdown


def on_page_content(content, page, config, files):
    source = page.file.src_uri
    if not source.endswith(".ipynb"):
        return content
    content = SCRIPT.sub(lambda found: "" if is_remote_or_math(found) else found.group(0),
                         content)
    page.toc = table_of_contents(content)
    content = HREF_OR_SRC.sub(
        lambda found: found.group(1) + html.escape(
            notebook_target(source, html.unescape(found.group(2)), page.file.url,
                            {file.src_uri: file.url for file in files}, config)
            or html.unescape(found.group(2))) + '"', content)
    return notebook_banner(source, config) + content


def on_post_page(output, page, config):
    _state.setdefault("written", {})[page.file.dest_uri] = page.file.src_uri
    return output


def on_post_build(config):
    from mkdocs.exceptions import PluginError

    site = Path(config.site_dir)
    root = urlsplit(config.site_url or "/").path or "/"
    problems = site_problems(site, _state.get("written", {}), root)
    problems += notebook_problems(REPO_ROOT, _state.get("sources", set()))
    problems += reference_problems(site / "reference.html", reference_targets(config))
    if problems:
        raise PluginError("make site: the site is not right:\n" + "\n".join(
            f"  - {problem}" for problem in problems))


_state: dict = {}


# --- the pages ---


def library_version() -> str:
    """The version pyproject.toml gives memorybook, the one place it is set."""
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return pyproject["project"]["version"]


def notebook_paths() -> list[Path]:
    return sorted(path for path in (REPO_ROOT / NOTEBOOKS).glob("*.ipynb")
                  if NOTEBOOK_NAME.match(path.name))


def public_names(stub: Path = STUB) -> list[tuple[str, str]]:
    """Each name `memorybook` exports and the object it is, as `__init__.pyi` lists them
    (lazy_loader reads the same file): [("Jev", "memorybook.jev.Jev"), ...]."""
    names = []
    for node in ast.parse(stub.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            module = "memorybook" + (f".{node.module}" if node.module else "")
            names += [(alias.asname or alias.name, f"{module}.{alias.name}")
                      for alias in node.names]
    return names


def reference_targets(config) -> list[str]:
    """Every object the reference must have an entry for: the public names, then the others
    mkdocs.yml's `extra: reference_also` lists."""
    return [path for _, path in public_names()] + list(config.extra.get("reference_also", []))


def reference_page(config) -> str:
    """The reference in Markdown: an mkdocstrings entry for each public name, grouped by the
    module that defines it, then what mkdocs.yml adds (the service, its settings, the fixture)."""
    version = config.extra["memorybook_version"]
    lines = [
        f"# Reference: memorybook {version}", "",
        f"What an app imports from `memorybook` {version}, written from the docstrings: each name "
        "that `memorybook/__init__.pyi` lists (importing one loads its module), grouped by the "
        "module that defines it; then the web service's app factory and settings, and the "
        "pytest fixtures of `memorybook.testing`. The [home page](README.md)'s \"Use it in an "
        "app\" shows them at work.", "",
    ]
    module = None
    for _, path in public_names():
        if path.rsplit(".", 1)[0] != module:
            module = path.rsplit(".", 1)[0]
            lines += [f"## `{module}`", ""]
        lines += [f"::: {path}", ""]
    lines += ["## Beside the names it exports", ""]
    for path in config.extra.get("reference_also", []):
        lines += [f"::: {path}", "    options:", "      show_root_full_path: true", ""]
    return "\n".join(lines)


class _Headings(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.found: list[dict] = []
        self.inside: dict | None = None
        self.skipping = 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if re.fullmatch(r"h[1-6]", tag) and attrs.get("id"):
            self.inside = {"level": int(tag[1]), "id": attrs["id"], "name": "", "children": []}
        elif self.inside is not None and tag == "a" and "anchor-link" in attrs.get("class", ""):
            self.skipping += 1

    def handle_endtag(self, tag):
        if tag == "a" and self.skipping:
            self.skipping -= 1
        elif self.inside is not None and re.fullmatch(r"h[1-6]", tag):
            self.inside["name"] = html.escape(" ".join(self.inside["name"].split()))
            self.found.append(self.inside)
            self.inside = None

    def handle_data(self, data):
        if self.inside is not None and not self.skipping:
            self.inside["name"] += data


def table_of_contents(content: str):
    """A notebook page's contents, from the headings its HTML holds, with their own anchors.

    mkdocs-jupyter makes the table from another rendering of the notebook, whose anchors can
    differ (a heading starting with code: `ask()`, awaited)."""
    from mkdocs.structure.toc import get_toc

    parser = _Headings()
    parser.feed(content)
    tops: list[dict] = []
    open_ones: list[dict] = []
    for heading in parser.found:
        while open_ones and open_ones[-1]["level"] >= heading["level"]:
            open_ones.pop()
        (open_ones[-1]["children"] if open_ones else tops).append(heading)
        open_ones.append(heading)
    return get_toc(tops)


def notebook_banner(source: str, config) -> str:
    link = repository_url(config, source, folder=False)
    return (
        '<div class="admonition note notebook-source"><p class="admonition-title">'
        f'This page is <a href="{html.escape(link)}"><code>{html.escape(source)}</code></a> as '
        "committed</p><p>Its outputs are the ones the notebook holds, which <code>make test</code>"
        " checks against a fresh run; nothing was run to make this page. To run it yourself: "
        "clone the repository, then <code>make lab</code> (JupyterLab on the notebooks, "
        "replaying the recording, no key needed).</p></div>\n")


# --- links to files that are not pages ---


def repository_url(config, path: str, *, folder: bool) -> str:
    """Where the repository shows the file (or folder) at `path`."""
    where = config.edit_uri or "blob/main/"
    if folder:
        where = where.replace("blob/", "tree/", 1)
    return f"{config.repo_url.rstrip('/')}/{where.strip('/')}/{path}"


def source_path(page_source: str, target: str) -> tuple[str, str] | None:
    """A relative link's file, as a path in the repository, and its #fragment; None for an
    address, an anchor in the page, or a path climbing out of the repository."""
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not parts.path or parts.path.startswith("/"):
        return None
    path = posixpath.normpath(posixpath.join(posixpath.dirname(page_source),
                                             unquote(parts.path)))
    if path == ".." or path.startswith("../"):
        return None
    return path, (f"#{parts.fragment}" if parts.fragment else "")


def to_repository(page_source: str, target: str, sources: set[str], config,
                  root: Path = REPO_ROOT) -> str | None:
    """A link to a file or folder of the repository that is no page of the site: its address
    in the repository. None otherwise (a page, a file that does not exist: the checks say)."""
    found = source_path(page_source, target)
    if found is None or found[0] in sources or not (root / found[0]).exists():
        return None
    path, fragment = found
    return repository_url(config, path, folder=(root / path).is_dir()) + fragment


def notebook_target(page_source: str, target: str, page_url: str, urls: dict[str, str],
                    config) -> str | None:
    """What a link in a notebook's HTML becomes: another page's address for a page's file
    (`02_memory_gate.ipynb`), the repository's for another file; None to leave it."""
    found = source_path(page_source, target)
    if found is not None and found[0] in urls:
        return posixpath.relpath(urls[found[0]], posixpath.dirname(page_url) or ".") + found[1]
    return to_repository(page_source, target, set(urls), config)


HREF_OR_SRC = re.compile(r'(\s(?:href|src)=")([^"]*)"')


class _Rewrite(Treeprocessor):
    def run(self, root):
        page, config = _state.get("page"), _state.get("config")
        if page is None or config is None:
            return
        for element in root.iter("a"):
            moved = to_repository(page, element.get("href", ""), _state["sources"], config)
            if moved:
                element.set("href", moved)


class RepositoryLinks(Extension):
    """In the Markdown pages, a link to a file of the repository that is not a page goes to the
    repository, before mkdocs checks the links it is left with."""

    def extendMarkdown(self, md):  # noqa: N802 - Python-Markdown's name
        # before mkdocs's own "relpath" (priority 0), which reports links to unknown files
        md.treeprocessors.register(_Rewrite(md), "memorybook_repository_links", 1)


def on_pre_build(config):
    _state["config"] = config


# --- the checks after the build ---


class _PageParser(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.refs: list[tuple[str, str, str]] = []
        self.in_script = False

    def handle_starttag(self, tag, attrs):
        self.in_script = tag == "script"
        if tag == "link" and not LOADING_RELS & set((dict(attrs).get("rel") or "").split()):
            tag = "a"  # rel="canonical", "next"...: an address, nothing loaded
        for name, value in attrs:
            if name in ("id", "name") and value:
                self.ids.add(value)
            if value is not None and ((tag, name) in LOADING or (tag, name) == ("a", "href")):
                self.refs.append((tag, name, value))

    def handle_endtag(self, tag):
        self.in_script = False

    def handle_data(self, data):
        if self.in_script and REMOTE_IMPORT.search(data):
            self.refs.append(("script", "import", "//" + data.split("//", 1)[1][:80]))


def read_page(path: Path) -> _PageParser:
    parser = _PageParser()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def site_problems(site: Path, sources: dict[str, str], root: str = "/") -> list[str]:
    """What is wrong with the built site: links and images leading nowhere (anchors included),
    and anything a page or a style sheet loads from another host. Each problem names the page's
    source (`sources`: the site's path of each page -> its file) and the link. An address
    starting with / starts at `root`, the path of the site's address (mkdocs.yml's site_url)."""
    problems = []
    pages = {path: read_page(path) for path in sorted(site.rglob("*.html"))}
    for path, page in pages.items():
        where = path.relative_to(site).as_posix()
        named = f"{sources[where]} ({where})" if where in sources else where
        for tag, _, value in page.refs:
            problem = ref_problem(site, path, pages, tag, value.strip(), root)
            if problem:
                problems.append(f"{named}: {problem}")
    for sheet in sorted(site.rglob("*.css")):
        if CSS_FROM_ELSEWHERE.search(sheet.read_text(encoding="utf-8", errors="replace")):
            problems.append(f"{sheet.relative_to(site)}: loads a style or font from another host")
    return problems


def ref_problem(site: Path, page: Path, pages: dict, tag: str, value: str,
                root: str = "/") -> str | None:
    parts = urlsplit(value)
    loads = tag != "a"
    if parts.scheme in ("data", "mailto", "tel", "blob"):
        return None
    if parts.scheme or parts.netloc:
        return (f"<{tag}> loads {value} from another host: the site must load nothing from "
                "elsewhere (ship the file with the site, or leave it out)") if loads else None
    if loads and not value:
        return f'<{tag}> with an empty address, which loads the page itself'
    if not parts.path:  # #anchor in the page itself
        return anchor_problem(pages.get(page), parts.fragment, value, page.name)
    path = unquote(parts.path)
    if path.startswith("/"):
        base, path = site, (path[len(root):] if path.startswith(root) else "/nowhere" + path)
    else:
        base = page.parent
    target = (base / path.lstrip("/")).resolve()
    if target.is_dir():
        target = target / "index.html"
    if site.resolve() not in target.parents or not target.is_file():
        what = "an image" if tag == "img" else ("a file it loads" if loads else "a link")
        return (f"{what} to {value}, which is neither a page nor a file of the site (nor, "
                "for a link, a file of the repository)")
    if parts.fragment and target.suffix == ".html":
        return anchor_problem(pages.get(target), parts.fragment, value, target.name)
    return None


def anchor_problem(page, fragment: str, value: str, name: str) -> str | None:
    if not fragment or page is None or unquote(fragment) in page.ids:
        return None
    return f"a link to {value}: {name} has no anchor #{fragment}"


def notebook_problems(root: Path, sources: set[str]) -> list[str]:
    """Each notebook in notebooks/ must be a page: one not named NN_name.ipynb is not."""
    return [f"{NOTEBOOKS}/{path.name} has no page: name it NN_name.ipynb, the next number "
            "(CONTRIBUTING.md, \"Add a notebook\")"
            for path in sorted((root / NOTEBOOKS).glob("*.ipynb"))
            if f"{NOTEBOOKS}/{path.name}" not in sources]


def reference_problems(reference: Path, targets: list[str]) -> list[str]:
    """Each object the reference must document has its entry: an anchor named by its path."""
    if not reference.is_file():
        return [f"{reference.name} was not written: the reference is missing"]
    ids = read_page(reference).ids
    return [f"{target} has no entry in the reference ({reference.name}): check its line in "
            "memorybook/__init__.pyi (or mkdocs.yml's reference_also) names where it is "
            "defined" for target in targets if target not in ids]
