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


def test_contributing_is_at_most_1500_words():
    assert len(CONTRIBUTING.split()) <= 1500


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
    assert wrong == []


def test_each_everyday_change_has_its_recipe():
    recipes = CONTRIBUTING.split("## Four everyday changes", 1)[1].split("\n## ", 1)[0]
    for change in ("Change a ticket", "Reword a question", "Add a store backend",
                   "Add a notebook"):
        assert f"**{change}" in recipes, change
