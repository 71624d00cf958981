"""`make setup` builds .venv on the Python that PYTHON names, or stops with one message saying
what it found, what it needs and what to do; a failed set-up leaves no .venv behind. `make lock`
writes the committed lock and requirements.txt again, the extras the dev group asks for included.

Each test runs the real Makefile in a scratch folder that holds only what set-up reads.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT
from tools.check_python import needed, version_problem

SET_UP_READS = ("Makefile", "pyproject.toml", "requirements.txt", "uv.lock",
                "tools/check_python.py", "dev/pyproject.toml",
                *(str(path.relative_to(REPO_ROOT))
                  for path in sorted((REPO_ROOT / "dev" / "memorybook_dev").glob("*.py"))))


@pytest.fixture
def collection(tmp_path: Path) -> Path:
    for name in SET_UP_READS:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / name, tmp_path / name)
    return tmp_path


def make(folder: Path, *arguments: str, **env: str) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if key != "PYTHON"}
    return subprocess.run(["make", "--no-print-directory", "-C", str(folder), *arguments],
                          env={**environment, **env}, capture_output=True, text=True, timeout=120)


def requiring(folder: Path, requires_python: str) -> None:
    pyproject = folder / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8")
    lowest, _ = needed(text)
    old = f'requires-python = ">={".".join(map(str, lowest))}"'
    assert old in text
    pyproject.write_text(text.replace(old, f'requires-python = "{requires_python}"'),
                         encoding="utf-8")


@pytest.mark.parametrize(("version", "problem"), [
    ((3, 10, 13), "needs Python 3.11 or later"),
    ((2, 7, 18), "needs Python 3.11 or later"),
    ((3, 11, 0), None),
    ((3, 13, 0), None),
    ((3, 15, 1), None),
])
def test_the_oldest_python_allowed_is_the_lowest_bound(version, problem):
    found = version_problem(version, (3, 11), None)
    assert found is None if problem is None else problem in found


def test_an_upper_bound_is_named_with_the_lower_one():
    assert version_problem((3, 12, 1), (3, 11), (3, 12)).startswith(
        "this collection needs Python 3.11 or later, below 3.12")
    assert version_problem((3, 11, 9), (3, 11), (3, 12)) is None


def test_the_project_admits_every_python_from_3_11_to_3_13():
    lowest, excluded = needed((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    for version in ((3, 11, 0), (3, 11, 2), (3, 12, 0), (3, 13, 0)):
        assert version_problem(version, lowest, excluded) is None, version


def test_a_python_that_requires_python_refuses_stops_set_up_before_anything_is_made(collection):
    requiring(collection, ">=3.99")
    result = make(collection, "setup", f"PYTHON={sys.executable}")
    assert result.returncode != 0
    [message] = [line for line in result.stderr.splitlines() if line.startswith("make setup:")]
    assert f"PYTHON={sys.executable} is CPython {platform.python_version()}" in message
    assert "needs Python 3.99 or later" in message and "make setup PYTHON=" in message
    assert not (collection / ".venv").exists()


def test_a_python_that_is_not_a_command_is_named(collection):
    result = make(collection, "setup", "PYTHON=no-such-python3.12")
    assert result.returncode != 0
    assert "PYTHON=no-such-python3.12 is not a command here" in result.stderr
    assert not (collection / ".venv").exists()


def test_a_python_command_that_does_not_start_python_is_named_after_its_own_message(collection):
    # As a version manager's shim answers for a version it has installed but not enabled.
    shim = collection / "shims" / "python3.13"
    shim.parent.mkdir()
    shim.write_text("#!/bin/sh\necho 'shim: python3.13: command not found' >&2\nexit 127\n")
    shim.chmod(0o755)
    path = f"{shim.parent}{os.pathsep}{os.environ['PATH']}"
    for target in ("setup", "run"):
        result = make(collection, target, "PYTHON=python3.13", PATH=path)
        assert result.returncode != 0, target
        said = result.stderr.splitlines()
        assert "shim: python3.13: command not found" in said[0], said
        assert any("make setup: PYTHON=python3.13 is a command that did not start Python "
                   "(exit 127" in line and "full path" in line for line in said), (
            f"`make {target} PYTHON=<a failing shim>` must add, after the shim's own words, the "
            f"Makefile's line saying what to do (CHECK_PYTHON in the Makefile):\n{result.stderr}")
    assert not (collection / ".venv").exists()


def test_a_named_python_other_than_the_one_of_venv_stops_every_target(collection):
    fake_python = collection / ".venv" / "bin" / "python"
    fake_python.parent.mkdir(parents=True)
    fake_python.write_text("#!/bin/sh\necho 3.11.0\necho /opt/another-python\n")
    fake_python.chmod(0o755)
    named = f"PYTHON={sys.executable}"
    for target in ("setup", "run"):
        result = make(collection, target, named)
        assert result.returncode != 0, target
        assert f"{named} is CPython" in result.stderr
        assert ".venv was made from Python 3.11.0 (/opt/another-python)" in result.stderr
        assert "Run `make clean`" in result.stderr
    assert fake_python.exists(), "a .venv that was set up is the reader's to remove"


def test_a_failed_set_up_leaves_no_venv_behind(collection):
    # No package index and no pip configuration: the uv wheel cannot be found.
    offline = {"PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": ""}
    result = make(collection, "setup", f"PYTHON={sys.executable}", **offline)
    assert result.returncode != 0
    assert "uv" in result.stderr
    assert not (collection / ".venv").exists()


def test_make_lock_writes_the_same_lock_and_requirements_txt_again(collection):
    # `make lock` in a copy of what it reads, with this .venv's uv: the dev group asks for this
    # project with its extras, which uv pip compile must take from the folder, not the index.
    for name in ("README.md", "LICENSE"):
        shutil.copy(REPO_ROOT / name, collection / name)
    shutil.copytree(REPO_ROOT / "memorybook", collection / "memorybook",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (collection / ".venv" / "bin").mkdir(parents=True)
    (collection / ".venv" / "bin" / "uv").symlink_to(Path(sys.executable).with_name("uv"))
    result = make(collection, "lock")
    assert result.returncode == 0, (
        f"`make lock` failed (it needs the package index); see LOCK_FOR_PIP in the Makefile:\n"
        f"{result.stderr}")
    assert (collection / "uv.lock").read_bytes() == (REPO_ROOT / "uv.lock").read_bytes(), (
        "`make lock` changes uv.lock: run it and commit the result")

    def pins(path: Path) -> list[str]:  # hashes aside: the index may add a wheel to a version
        return [line for line in path.read_text(encoding="utf-8").splitlines()
                if not line.strip().startswith(("--hash=", "#"))]

    assert pins(collection / "requirements.txt") == pins(REPO_ROOT / "requirements.txt"), (
        "`make lock` writes another requirements.txt than the committed one: run it and commit "
        "the result")
