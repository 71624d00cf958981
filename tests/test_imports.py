"""Importing the package does nothing: no data file opened, no client started, no hook installed.

The notebooks and tools import notebook 1's module for its code; what it needs (the recording, the
client) is made at the first call. So a test of a pure function can import it in-process.
"""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import REPO_ROOT

EVERY_MODULE = sorted(
    ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts).removesuffix(".__init__")
    for path in (REPO_ROOT / "memorybook").rglob("*.py"))

WATCH = """
import builtins, io, os, pathlib, sys
opened = []
real_open, real_io_open = builtins.open, io.open
def noting(file, *args, **kwargs):
    opened.append(str(file))
    return real_open(file, *args, **kwargs)
builtins.open = io.open = noting
import {modules}
ours = [name for name in opened if name.startswith({root!r}) and "/.venv/" not in name]
print("opened:", ours)
import typesafe_sdk
made = [name for name in dir(sys.modules["memorybook.memory_system"])
        if isinstance(getattr(sys.modules["memorybook.memory_system"], name),
                      typesafe_sdk.TypeSafeClient)]
print("clients:", made)
try:
    from IPython import get_ipython
    print("shell:", get_ipython())
except ImportError:
    print("shell: None")
print("excepthook replaced:", sys.excepthook is not sys.__excepthook__)
"""


def test_importing_every_module_opens_no_file_of_ours_and_starts_no_client():
    code = WATCH.format(modules=", ".join(EVERY_MODULE), root=str(REPO_ROOT))
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "opened: []", "clients: []", "shell: None", "excepthook replaced: False"]


def test_the_model_is_pinned_once():
    found = subprocess.run(["git", "grep", "-n", "-E", r'(^|")\s*TYPESAFE_MODEL\s*=', "--",
                            "*.py", "*.ipynb"], cwd=REPO_ROOT, capture_output=True, text=True)
    places = [line.split(":")[0] for line in found.stdout.splitlines()]
    assert places == ["memorybook/memory_system.py", "notebooks/01_memory_system.ipynb"]
