"""The README's section for apps: its Python example runs as printed, from a folder of its own,
with no key, on the recording MEMORYBOOK_RECORDING names, and prints what the README says (here
on this checkout's install; tests/test_packaging.py runs it in an app's install)."""

from __future__ import annotations

import os
import subprocess
import sys

from memorybook.config import RECORDING_PATH
from tests.helpers import readme_app_example


def test_the_readmes_app_example_runs_as_printed_from_any_folder_without_a_key(tmp_path):
    code, printed = readme_app_example()
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("TYPESAFE_", "MEMORYBOOK_"))}
    env["MEMORYBOOK_RECORDING"] = str(RECORDING_PATH)
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"README.md's app example failed:\n{done.stderr}"
    assert done.stdout.strip() == printed, (
        f"README.md's app example printed {done.stdout.strip()!r}, not {printed!r}: "
        "update the README or the library")
    assert list(tmp_path.iterdir()) == [], f"the example wrote {list(tmp_path.iterdir())}"
