"""The lock agrees with pyproject.toml, .venv holds exactly the lock, and requirements.txt is the
same lock for plain pip.

pyproject.toml declares the direct requirements; `make lock` resolves them into uv.lock and
writes requirements.txt from it; `make setup` installs uv.lock exactly. uv checks the first and
the last of these itself (`uv lock --check`, `uv sync --check`); the rest is checked here.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.helpers import REPO_ROOT

UV = Path(sys.executable).parent / "uv"
PIP_LOCK = REPO_ROOT / "requirements.txt"
PROJECT = "memorybook"
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


def pins_for_this_python() -> dict[str, tuple[str, set[str], int]]:
    """requirements.txt's pins that apply here: name -> (version, extras, number of hashes)."""
    pins: dict[str, tuple[str, set[str], int]] = {}
    name = None
    for line in PIP_LOCK.read_text(encoding="utf-8").splitlines():
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


def installed() -> dict[str, importlib.metadata.Distribution]:
    return {canonicalize_name(dist.metadata["Name"]): dist
            for dist in importlib.metadata.distributions()
            if canonicalize_name(dist.metadata["Name"]) != PROJECT}


def test_requirements_txt_pins_what_the_lock_installs_here_each_with_its_hashes():
    pins = pins_for_this_python()
    assert {name: pin[0] for name, pin in pins.items()} == {
        name: dist.version for name, dist in installed().items()}, "run `make lock`"
    assert [name for name, (_, _, hashes) in pins.items() if not hashes] == []


def test_requirements_txt_pins_each_distribution_with_the_extras_asked_of_it():
    # pip (pypa/pip#9644) refuses a hashed lock when a distribution asks for `name[extra]` and
    # the lock pins `name` below its newest version without the extra: jupyter-events asks for
    # jsonschema[format-nongpl], held below 4.24 on purpose (pyproject.toml).
    pins = pins_for_this_python()
    asked: dict[str, set[str]] = {}
    for name, dist in installed().items():
        for extra in ("", *pins[name][1]):
            for need in map(Requirement, dist.requires or []):
                if not need.marker or need.marker.evaluate({"extra": extra}):
                    asked.setdefault(canonicalize_name(need.name), set()).update(need.extras)
    missing = {name: extras - pins[name][1] for name, extras in asked.items()
               if extras - pins[name][1]}
    assert missing == {}, "run `make lock` (it keeps extras: --no-strip-extras)"
