"""CONTRIBUTING.md stays short, and its layout list says what the tree holds.

The list is indented two spaces a level. A folder listed with the files under it must list each
file git tracks there, and no other; a folder listed alone is summed up in its line.
"""

from __future__ import annotations

import re
import subprocess

from tests.helpers import REPO_ROOT

CONTRIBUTING = (REPO_ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
NOTEBOOKS_LINE = "NN_name.ipynb"  # stands for every notebook, however many there are
NOTEBOOK_NAME = re.compile(r"^\d\d_[a-z0-9_]+\.ipynb$")


def layout() -> dict[str, list[str]]:
    """Each listed path, with the names listed directly under it (folders end in '/')."""
    block = CONTRIBUTING.split("## Layout", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    listed: dict[str, list[str]] = {"": []}
    parents: list[str] = []
    for line in block.splitlines():
        if not line.strip() or line.startswith(" " * 24):  # a description carried on
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 2
        name = re.split(r"\s{2,}", line.strip())[0]
        parents = parents[:depth]
        path = "".join(parents) + name
        listed["".join(parents)].append(name)
        if name.endswith("/"):
            listed[path] = []
            parents.append(name)
    return listed


def tracked() -> set[str]:
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                           cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    return {path for path in files.stdout.splitlines() if (REPO_ROOT / path).exists()}


# The Layout block grows by a line with each file, as rule 9 asks; the prose before it is held to
# what it had when the whole page was held to 1,500 words (the Layout block then had 376).
PROSE_WORDS = 1_124


def test_contributing_before_its_layout_is_at_most_1124_words():
    prose = CONTRIBUTING.split("## Layout", 1)[0]
    assert len(prose.split()) <= PROSE_WORDS, (
        f"CONTRIBUTING.md has {len(prose.split())} words before its Layout block, more than "
        f"{PROSE_WORDS}: shorten its prose rather than raise PROSE_WORDS in "
        "tests/test_contributing.py")


def test_the_layout_list_is_the_tree():
    files = tracked()
    wrong = []
    for folder, names in layout().items():
        if not folder or not names:
            continue
        there = {path[len(folder):].split("/")[0] + ("/" if "/" in path[len(folder):] else "")
                 for path in files if path.startswith(folder)}
        named = set()
        for name in names:
            if name == NOTEBOOKS_LINE:
                named |= {entry for entry in there if NOTEBOOK_NAME.match(entry)}
            else:
                named.add(name)
        wrong += [f"{folder}{name}: listed, not in the tree" for name in sorted(named - there)]
        wrong += [f"{folder}{name}: in the tree, not listed" for name in sorted(there - named)]
    for name in layout()[""]:  # top-level entries listed alone must exist
        if not (REPO_ROOT / name).exists():
            wrong.append(f"{name}: listed, not in the tree")
    assert wrong == [], (
        f"CONTRIBUTING.md's Layout block and the tree differ: {wrong}; add a line there for each "
        "file added, remove the line of each file removed (one line a file, indented two spaces "
        "a level)")


def test_each_everyday_change_has_its_recipe():
    recipes = CONTRIBUTING.split("## Everyday changes", 1)[1].split("\n## ", 1)[0]
    for change in ("Change the library", "Change a ticket", "Reword a question",
                   "Add a store backend", "Add an endpoint", "Add a notebook"):
        assert f"**{change}" in recipes, (
            f"CONTRIBUTING.md's 'Everyday changes' lacks the recipe '{change}': "
            "tests/test_recipes.py follows it")


def test_contributing_says_where_the_lesson_ends_and_the_library_starts():
    section = CONTRIBUTING.split("## The lesson and the library", 1)[-1].split("\n## ", 1)[0]
    assert section != CONTRIBUTING and "notebook 1" in section.lower() and (
        "`memorybook/`" in section), (
        "CONTRIBUTING.md needs its section 'The lesson and the library': what notebook 1 is, "
        "what memorybook/ is, and how each is changed")


# A docstring's pointer into the maintainers' or the reader's page: the page's name, a comma and
# the section's title in double quotes
POINTER = re.compile(r'(CONTRIBUTING|README)\.md, "([^"]+)"')


def places(text: str) -> set[str]:
    """What a pointer can name in a page: its headings and the bold words opening a paragraph."""
    headings = re.findall(r"^#+ (.+)$", text, re.M)
    leads = re.findall(r"^\*\*([^*]+?)\.?\*\*", text, re.M)
    return {" ".join(name.split()) for name in headings + leads}


def test_every_pointer_into_contributing_or_the_readme_names_a_section_there():
    pages = {name: places((REPO_ROOT / f"{name}.md").read_text(encoding="utf-8"))
             for name in ("CONTRIBUTING", "README")}
    wrong = []
    for folder in ("memorybook", "dev", "tools", "tests", "benchmarks"):
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            for page, title in POINTER.findall(text):
                title = " ".join(title.split())
                if not any(place.startswith(title) for place in pages[page]):
                    wrong.append(f"{path.relative_to(REPO_ROOT)}: {page}.md, {title!r}")
    assert wrong == [], (
        f"these docstrings point at sections the page does not have: {wrong}; name a heading "
        "or a paragraph's bold opening words that exist there, or add that section")
