"""How long a cold set-up takes: `make setup` (uv) against a plain `pip install`, side by side;
and what an app's install weighs against the collection's.

    python -m benchmarks.setup_benchmark [--repeats 3]

Each repeat, in a fresh temporary folder with empty download caches (PIP_CACHE_DIR and
UV_CACHE_DIR point at new empty folders), times:
  - plain pip: `python3 -m venv venv && venv/bin/pip install -r requirements.txt`;
  - `make setup` in a copy of the files it reads (the Makefile, both locks, pyproject.toml and
    what it names, tools/check_python.py, memorybook/, dev/): a venv, uv from requirements.txt,
    `uv sync --locked` of uv.lock and the editable project;
  - an app's install: `python3 -m venv venv && venv/bin/pip install "<copy>[service,postgres]"`
    run from a folder of its own, where <copy> is a copy of the project (pyproject.toml,
    README.md, LICENSE, memorybook/): what `pip install "memorybook[service,postgres]"` gives.
All three download every distribution from the package index: the machine's pip configuration
(extra local indexes, find-links) is set aside so that none reads from this disk. Each repeat
starts with the next of the three, so that a busy moment on a shared machine does not fall on
one side only. Prints the medians and the ratio of the first two, then the site-packages of the
two plain pip venvs: megabytes on disk as `du -sm` counts them (the .pyc files pip writes
included) and distributions, with how many of the notebook stack's are among them. Not a test:
timings on a shared machine are noisy (tests/test_packaging.py checks the app's install).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from benchmarks.markdown_table import markdown_table, timings_table

REPO_ROOT = Path(__file__).resolve().parent.parent
SETUP_INPUTS = ["Makefile", "requirements.txt", "uv.lock", "pyproject.toml", "README.md", "LICENSE",
                "tools/check_python.py", "memorybook", "dev"]
# What pip builds the package an app installs from
PACKAGE_INPUTS = ["pyproject.toml", "README.md", "LICENSE", "memorybook"]
APP_EXTRAS = "service,postgres"
# What only the collection needs (tests/test_packaging.py names the same)
NOTEBOOK_STACK = {"jupyterlab", "notebook", "ipykernel", "ipython", "matplotlib", "nbformat",
                  "nbclient", "nbconvert", "jupyter-server", "jupyter-client", "asgi-lifespan"}
HOST_PYTHON = shutil.which("python3") or sys.executable


def cold_env(scratch: Path) -> dict[str, str]:
    """The environment with empty caches and without this machine's pip configuration."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PIP_", "UV_", "VIRTUAL_ENV"))}
    for cache in ("pip-cache", "uv-cache"):
        (scratch / cache).mkdir()
    return {**env, "PIP_CACHE_DIR": str(scratch / "pip-cache"),
            "UV_CACHE_DIR": str(scratch / "uv-cache"), "PIP_CONFIG_FILE": os.devnull,
            "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def timed(commands: list[list[str]], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    for command in commands:
        subprocess.run(command, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


class Installed(NamedTuple):
    """What a plain pip install left in its venv's site-packages."""

    megabytes: float
    distributions: set[str]


def installed(venv: Path) -> Installed:
    [site] = (venv / "lib").glob("python3*/site-packages")
    # What `du -sm` counts: every file's and folder's blocks, each file once, in MiB
    blocks = {(found.st_dev, found.st_ino): found.st_blocks
              for found in (path.lstat() for path in [site, *site.rglob("*")])}
    listed = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import importlib.metadata as m; "
         "print('\\n'.join(d.metadata['Name'] for d in m.distributions()))"],
        capture_output=True, text=True, check=True)
    return Installed(sum(blocks.values()) * 512 / 2**20,
                     {canonicalize(name) for name in listed.stdout.split()})


def canonicalize(name: str) -> str:
    """A distribution's name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def copy_of(names: list[str], destination: Path) -> Path:
    for name in names:
        source = REPO_ROOT / name
        (destination / name).parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, destination / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(source, destination / name)
    return destination


def plain_pip(scratch: Path, sizes: dict[str, Installed]) -> float:
    venv = scratch / "venv"
    seconds = timed([[HOST_PYTHON, "-m", "venv", str(venv)],
                     [str(venv / "bin" / "pip"), "install", "--quiet", "-r",
                      str(REPO_ROOT / "requirements.txt")]], scratch, cold_env(scratch))
    sizes["plain pip"] = installed(venv)
    return seconds


def make_setup(scratch: Path, sizes: dict[str, Installed]) -> float:
    project = copy_of(SETUP_INPUTS, scratch / "project")
    env = {**cold_env(scratch), "PYTHON": HOST_PYTHON}
    return timed([["make", "--quiet", "setup"]], project, env)


def app_install(scratch: Path, sizes: dict[str, Installed]) -> float:
    project = copy_of(PACKAGE_INPUTS, scratch / "project")
    app = scratch / "app"
    app.mkdir()
    venv = app / "venv"
    seconds = timed([[HOST_PYTHON, "-m", "venv", str(venv)],
                     [str(venv / "bin" / "pip"), "install", "--quiet",
                      f"{project}[{APP_EXTRAS}]"]], app, cold_env(scratch))
    sizes["app install"] = installed(venv)
    return seconds


def sizes_table(sizes: dict[str, Installed]) -> str:
    rows = [[what, f"{found.megabytes:.0f} MB", str(len(found.distributions)),
             f"{len(found.distributions & NOTEBOOK_STACK)} of {len(NOTEBOOK_STACK)}"]
            for what, found in sizes.items()]
    return markdown_table(["site-packages of", "size", "distributions", "notebook stack"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    order = [("plain pip", plain_pip), ("make setup", make_setup), ("app install", app_install)]
    runs: dict[str, list[float]] = {name: [] for name, _ in order}
    sizes: dict[str, Installed] = {}
    for repeat in range(args.repeats):
        for name, measure in order[repeat % len(order):] + order[:repeat % len(order)]:
            with tempfile.TemporaryDirectory(prefix="memorybook-setup-") as scratch:
                seconds = measure(Path(scratch), sizes)
            runs[name].append(seconds)
            print(f"  run {repeat + 1}, {name}: {seconds:.1f} s", file=sys.stderr)
    medians = {name: statistics.median(times) for name, times in runs.items()}
    results = {
        "plain pip: `python3 -m venv` + `pip install -r requirements.txt`": medians["plain pip"],
        "`make setup`: venv, uv, `uv sync --locked` (lock + project)": medians["make setup"],
        f"an app: `python3 -m venv` + `pip install \"memorybook[{APP_EXTRAS}]\"`":
            medians["app install"],
    }
    print(f"{platform.python_version()} on {os.cpu_count()} cores, {platform.machine()}; "
          f"cold caches; medians of {args.repeats} runs each\n")
    print(timings_table(results, medians["plain pip"], "plain pip"))
    print(f"\nmake setup / plain pip = {medians['make setup'] / medians['plain pip']:.2f}\n")
    print(sizes_table({"the collection (`pip install -r requirements.txt`)": sizes["plain pip"],
                       f"an app (`pip install \"memorybook[{APP_EXTRAS}]\"`)":
                           sizes["app install"]}))


if __name__ == "__main__":
    main()
