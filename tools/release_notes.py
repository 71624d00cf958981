"""A release's notes: its section of CHANGELOG.md, once the tag is checked against the version.

    python3 tools/release_notes.py v0.2.0 > notes.md

Run by .github/workflows/release.yml before anything is published, with Python's standard
library alone. It stops, saying why, when the tag is not `v` and pyproject.toml's version, or
when CHANGELOG.md has no section `## [VERSION] - DATE` for it (Keep a Changelog's form).
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def release_notes(tag: str, root: Path = REPO_ROOT) -> str:
    pyproject = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    version = pyproject["project"]["version"]
    if tag != f"v{version}":
        raise ValueError(f"the tag {tag} does not name pyproject.toml's version {version}: tag "
                         f"v{version}, or set the version to release in pyproject.toml")
    changelog = (root / "CHANGELOG.md").read_text(encoding="utf-8")
    found = re.search(rf"^## \[{re.escape(version)}\] - \d{{4}}-\d\d-\d\d\n(.*?)(?=^## |\Z)",
                      changelog, re.MULTILINE | re.DOTALL)
    if not found or not found.group(1).strip():
        raise ValueError(f"CHANGELOG.md has no section `## [{version}] - YYYY-MM-DD` saying "
                         "what the release changes for an app: move [Unreleased]'s entries there")
    return found.group(1).strip() + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        sys.stdout.write(release_notes(argv[0]))
    except ValueError as error:
        print(f"release: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
