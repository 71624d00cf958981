"""How long a cold set-up takes: `make setup` (uv) against a plain `pip install`, side by side.

    python -m benchmarks.setup_benchmark [--repeats 3]

Each repeat, in a fresh temporary folder with empty download caches (PIP_CACHE_DIR and
UV_CACHE_DIR point at new empty folders), times:
  - plain pip: `python3 -m venv venv && venv/bin/pip install -r requirements.txt`;
  - `make setup` in a copy of the files it reads (the Makefile, both locks, pyproject.toml and
    what it names, memorybook/): a venv, uv from requirements.txt, `uv sync --locked` of uv.lock
    and the editable project.
Both download every distribution from the package index: the machine's pip configuration (extra
local indexes, find-links) is set aside so that neither reads from this disk. The two alternate,
so that a busy moment on a shared machine does not fall on one side only. Prints the medians and
their ratio. Not a test: timings on a shared machine are noisy.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.markdown_table import timings_table

REPO_ROOT = Path(__file__).resolve().parent.parent
SETUP_INPUTS = ["Makefile", "requirements.txt", "uv.lock", "pyproject.toml", "README.md", "LICENSE",
                "memorybook"]
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


def plain_pip(scratch: Path) -> float:
    venv = scratch / "venv"
    return timed([[HOST_PYTHON, "-m", "venv", str(venv)],
                  [str(venv / "bin" / "pip"), "install", "--quiet", "-r",
                   str(REPO_ROOT / "requirements.txt")]], scratch, cold_env(scratch))


def make_setup(scratch: Path) -> float:
    project = scratch / "project"
    project.mkdir()
    for name in SETUP_INPUTS:
        source = REPO_ROOT / name
        if source.is_dir():
            shutil.copytree(source, project / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, project / name)
    env = {**cold_env(scratch), "PYTHON": HOST_PYTHON}
    return timed([["make", "--quiet", "setup"]], project, env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    runs: dict[str, list[float]] = {"plain pip": [], "make setup": []}
    for repeat in range(args.repeats):
        order = [("plain pip", plain_pip), ("make setup", make_setup)]
        for name, measure in order if repeat % 2 == 0 else reversed(order):
            with tempfile.TemporaryDirectory(prefix="memorybook-setup-") as scratch:
                seconds = measure(Path(scratch))
            runs[name].append(seconds)
            print(f"  run {repeat + 1}, {name}: {seconds:.1f} s", file=sys.stderr)
    medians = {name: statistics.median(times) for name, times in runs.items()}
    results = {
        "plain pip: `python3 -m venv` + `pip install -r requirements.txt`": medians["plain pip"],
        "`make setup`: venv, uv, `uv sync --locked` (lock + project)": medians["make setup"],
    }
    print(f"{platform.python_version()} on {os.cpu_count()} cores, {platform.machine()}; "
          f"cold caches; medians of {args.repeats} runs each\n")
    print(timings_table(results, medians["plain pip"], "plain pip"))
    print(f"\nmake setup / plain pip = {medians['make setup'] / medians['plain pip']:.2f}")


if __name__ == "__main__":
    main()
