"""What `pip install .` gives an app: the package memorybook/ and nothing of the collection's own
tooling (dev/: the kernel set-up and provisioner), so no kernel of the app's changes; and, used
from a folder of its own, a module that replays the recording $MEMORYBOOK_RECORDING names, or
says that it needs that variable."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from memorybook.config import RECORDING_ENV, RECORDING_PATH
from tests.helpers import REPO_ROOT

# A recorded call (C-1042's slow dashboards, plainly routed), asked as an app would ask it.
APP = """\
import memorybook.memory_system as m
print("imported from", m.__file__)
print(m.ask(m.later_state("C-1042", 0), m.ROUTE).answers["team"].choice)
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    uv = Path(sys.executable).with_name("uv")
    built = subprocess.run([str(uv), "build", "--wheel", "--quiet", "--out-dir", str(out),
                            str(REPO_ROOT)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, f"`uv build --wheel` of the checkout failed: {built.stderr}"
    [path] = out.glob("memorybook-*.whl")
    return path


def test_the_wheel_an_app_installs_holds_memorybook_alone(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert top == {"memorybook", wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1]
                   + ".dist-info"}, (
        f"the wheel holds {sorted(top)}: only memorybook/ belongs in it; change "
        "[tool.setuptools.packages.find] in pyproject.toml")
    assert not any(name.endswith("entry_points.txt") for name in names), (
        "the wheel registers entry points: an app's install must register nothing")
    assert "memorybook/memory_system.py" in names and "memorybook/store/__init__.py" in names, (
        "the wheel lacks the generated module or the store: run `make export` and check "
        "pyproject.toml's package list")


def installed_app(wheel: Path, folder: Path) -> Path:
    """A fresh venv outside the checkout with the wheel installed (its dependencies are this
    environment's, by a .pth line, so nothing is downloaded), and an app folder of its own."""
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    uv = Path(sys.executable).with_name("uv")
    subprocess.run([str(uv), "pip", "install", "--quiet", "--no-deps", "--python",
                    str(venv / "bin" / "python"), str(wheel)], check=True, timeout=120)
    [site] = (venv / "lib").glob("python3*/site-packages")
    (site / "the_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    app = folder / "my_app"
    app.mkdir()
    (app / "app.py").write_text(APP, encoding="utf-8")
    return venv / "bin" / "python"


def run_app(python: Path, app: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "app.py"], cwd=app, capture_output=True, text=True,
                          timeout=120, env={"PATH": "/usr/bin:/bin", **env})


def test_installed_it_replays_the_recording_its_variable_names_and_otherwise_says_so(
        wheel, tmp_path):
    python = installed_app(wheel, tmp_path)
    app = tmp_path / "my_app"
    recording = tmp_path / "elsewhere" / "json_cache.json"  # without provenance.json beside it
    recording.parent.mkdir()
    shutil.copyfile(RECORDING_PATH, recording)

    replayed = run_app(python, app, **{RECORDING_ENV: str(recording)})
    assert replayed.returncode == 0, (
        f"installed memorybook did not replay a recorded call from {RECORDING_ENV}; "
        f"memorybook/config.py's paths must not need the checkout:\n{replayed.stderr}")
    assert f"imported from {tmp_path / 'venv'}" in replayed.stdout, (
        f"the app imported another memorybook than the one installed:\n{replayed.stdout}")
    assert replayed.stdout.splitlines()[-1] == "cloud_ops", replayed.stdout

    missing = run_app(python, app)
    last = missing.stderr.strip().splitlines()[-1]
    [site] = (tmp_path / "venv" / "lib").glob("python3*/site-packages")
    assert missing.returncode != 0 and RECORDING_ENV in last and (
        str(site / "json_cache" / "json_cache.json") in last), (
        f"installed without {RECORDING_ENV}, a call must stop with one line naming the variable "
        f"and the path looked for (memorybook/config.py, missing_recording_problem()); got: "
        f"{last}")
    assert "FileNotFoundError" not in missing.stderr, missing.stderr
