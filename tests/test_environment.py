"""The lock agrees with pyproject.toml, .venv holds exactly the lock, and requirements.txt is the
same lock for plain pip.

pyproject.toml declares the direct requirements; `make lock` resolves them into uv.lock and
writes requirements.txt from it; `make setup` installs uv.lock exactly. uv checks the first and
the last of these itself (`uv lock --check`, `uv sync --check`); the rest is checked here. An app
installs memorybook/ with the extras it needs (tests/test_packaging.py); the collection gets them
all, through its dev group.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.helpers import REPO_ROOT

UV = Path(sys.executable).parent / "uv"
PIP_LOCK = REPO_ROOT / "requirements.txt"
# A pinned line of requirements.txt: name, extras, version, markers
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[([^\]]*)\])?==([^\s;\\]+)(?:\s*;([^\\]*))?")


def uv(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(UV), *arguments, "--offline", "--no-python-downloads"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)


def test_uv_lock_agrees_with_pyproject():
    result = uv("lock", "--check")
    assert result.returncode == 0, f"{result.stderr}\nrun `make lock`"


def test_the_environment_holds_exactly_the_lock():
    result = uv("sync", "--check", "--locked")
    assert result.returncode == 0, f"{result.stderr}\nrun `make setup`"


def applying_here(lines: list[str]) -> dict[str, tuple[str, set[str], int]]:
    """The pins of a requirements file that apply here: name -> (version, extras, hash count)."""
    pins: dict[str, tuple[str, set[str], int]] = {}
    name = None
    for line in lines:
        pin = PIN.match(line)
        if pin:
            applies = not pin.group(4) or Requirement(f"x; {pin.group(4)}").marker.evaluate()
            name = canonicalize_name(pin.group(1)) if applies else None
            if name:
                extras = {extra.strip() for extra in (pin.group(2) or "").split(",") if extra}
                pins[name] = (pin.group(3), extras, 0)
        elif name and line.strip().startswith("--hash=sha256:"):
            version, extras, hashes = pins[name]
            pins[name] = (version, extras, hashes + 1)
    return pins


def test_requirements_txt_pins_what_uv_lock_pins_here_each_with_its_hashes():
    # The default groups (dev), as requirements.txt holds them: not the benchmark group
    # (LangGraph's stores, for benchmarks/store_benchmark.py), which `make setup` leaves out too.
    exported = uv("export", "--frozen", "--no-emit-project", "--no-hashes",
                  "--no-header", "--no-annotate")
    assert exported.returncode == 0, exported.stderr
    locked = {name: pin[0] for name, pin in applying_here(exported.stdout.splitlines()).items()}
    pins = applying_here(PIP_LOCK.read_text(encoding="utf-8").splitlines())
    assert {name: pin[0] for name, pin in pins.items()} == locked, "run `make lock`"
    assert [name for name, (_, _, hashes) in pins.items() if not hashes] == []


def test_requirements_txt_pins_each_distribution_with_the_extras_asked_of_it():
    # pip (pypa/pip#9644) refuses a hashed lock when a distribution asks for `name[extra]` and
    # the lock pins `name` below its newest version without the extra: jupyter-events asks for
    # jsonschema[format-nongpl], held below 4.24 on purpose (pyproject.toml).
    pins = applying_here(PIP_LOCK.read_text(encoding="utf-8").splitlines())
    asked: dict[str, set[str]] = {}
    for name, (_, extras, _) in pins.items():
        needs = [Requirement(need) for need in importlib.metadata.requires(name) or []]
        for extra in ("", *extras):
            for need in needs:
                if not need.marker or need.marker.evaluate({"extra": extra}):
                    asked.setdefault(canonicalize_name(need.name), set()).update(need.extras)
    missing = {name: extras - pins[name][1] for name, extras in asked.items()
               if extras - pins[name][1]}
    assert missing == {}, "run `make lock` (it keeps extras: --no-strip-extras)"


def test_the_collection_installs_and_pins_what_every_extra_asks_for():
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    extras = pyproject["project"]["optional-dependencies"]
    asked = {canonicalize_name(Requirement(need).name)
             for needs in extras.values() for need in needs}
    assert asked, "pyproject.toml declares no extras: the service and postgres ones are gone"
    pins = applying_here(PIP_LOCK.read_text(encoding="utf-8").splitlines())
    assert sorted(asked - pins.keys()) == [], (
        "requirements.txt lacks what an extra asks for: the dev group in pyproject.toml must "
        f"ask for memorybook[{','.join(extras)}]; then `make lock`")
    not_installed = []
    for name in sorted(asked):
        try:
            importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            not_installed.append(name)
    assert not_installed == [], (
        f".venv lacks {not_installed}, asked for by memorybook's extras: the dev group in "
        f"pyproject.toml must ask for memorybook[{','.join(extras)}]; then `make lock` and "
        "`make setup`")


def test_the_editable_installs_put_no_folder_of_the_tree_on_every_import_path():
    # A .pth line naming a folder puts it on sys.path of every process of the venv: the tree's
    # root would make its tests/, tools/ and conftest.py importable from anywhere, shadowing an
    # app's own; dev/ its files beside memorybook_dev. Each package is mapped alone instead.
    site = Path(sysconfig.get_paths()["purelib"])
    folders = [(pth.name, line.strip()) for pth in sorted(site.glob("*.pth"))
               for line in pth.read_text(encoding="utf-8").splitlines()
               if line.strip() and not line.startswith(("#", "import ", "import\t"))]
    ours = [(name, folder) for name, folder in folders
            if Path(folder).resolve() in (REPO_ROOT, REPO_ROOT / "dev")]
    assert not ours, (
        f"{ours}: an editable install puts a folder of the tree on every import path; keep "
        "dev-mode-exact = true under [tool.hatch.build.targets.wheel] in pyproject.toml and "
        "dev/pyproject.toml, then `make setup`")
