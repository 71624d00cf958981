"""The README's test of an app's own tickets (the `made_up_jev` fixture, memorybook.testing):
copied as printed into a fresh folder, with memorybook installed as an app installs it from a
clone and pytest beside it, nothing else, it passes with no key, no recording and no
MEMORYBOOK_* setting."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT
from tests.test_packaging import UV, wheel  # noqa: F401  the wheel `pip install clone` builds

README = REPO_ROOT / "README.md"


def readme_test_of_an_apps_own_tickets() -> str:
    """The one Python block of README.md's that defines a pytest test."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    tests = [block for block in blocks if re.search(r"^def test_\w+\(", block, re.M)]
    assert len(tests) == 1, (
        f"README.md has {len(tests)} Python blocks defining a test (`def test_...(`), not 1: "
        "its section 'Use it in an app' shows one, testing an app's own tickets on "
        "`made_up_jev`; keep it, and keep it the only one (tests/test_readme_own_tickets.py)")
    return tests[0]


@pytest.fixture(scope="module")
def test_venv(wheel, tmp_path_factory) -> Path:  # noqa: F811
    """A fresh venv outside the checkout holding the wheel, without extras, and pytest (the
    version the lock pins), from the package index or uv's cache."""
    venv = tmp_path_factory.mktemp("app-tests") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    env = {key: value for key, value in os.environ.items()
           if key not in ("VIRTUAL_ENV", "PYTHONPATH")}
    installed = subprocess.run(
        [str(UV), "pip", "install", "--python", str(venv / "bin" / "python"), str(wheel),
         f"pytest=={version('pytest')}"], env=env, capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, (
        f"installing {wheel.name} and pytest in a fresh venv failed (it needs the package "
        f"index, or uv's cache that `make setup` filled):\n{installed.stderr}")
    return venv


def test_the_readmes_test_of_an_apps_own_tickets_passes_in_a_fresh_folder(test_venv, tmp_path):
    code = readme_test_of_an_apps_own_tickets()
    app = tmp_path / "my_app"
    app.mkdir()
    (app / "test_my_app.py").write_text(code, encoding="utf-8")
    ran = subprocess.run([str(test_venv / "bin" / "python"), "-m", "pytest", "-q"], cwd=app,
                         capture_output=True, text=True, timeout=300,
                         env={"PATH": "/usr/bin:/bin"})  # no TYPESAFE_* or MEMORYBOOK_*
    said = ran.stdout.strip().splitlines()[-1] if ran.stdout.strip() else ran.stderr.strip()
    assert ran.returncode == 0 and re.fullmatch(r"1 passed in [\d.]+s", said), (
        f"README.md's test of an app's own tickets, copied into a fresh folder with only "
        f"memorybook (installed from a clone) and pytest, must pass with no key and no "
        f"recording; it ended with {said!r}. Fix the snippet in README.md's section 'Use it in "
        f"an app', or the `made_up_jev` fixture (memorybook/testing.py) or MadeUpJev "
        f"(memorybook/stand_in.py) it uses:\n{ran.stdout[-3000:]}{ran.stderr[-2000:]}")
