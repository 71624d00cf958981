"""A pytest run outside tools/test.sh removes the usage folder conftest.py made for it."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers import REPO_ROOT


def test_a_plain_pytest_run_leaves_no_usage_folder_behind(tmp_path):
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("MEMORYBOOK_USAGE", "PYTEST_"))}
    env["TMPDIR"] = str(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q",
         "tests/test_recording.py"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(path.name for path in tmp_path.glob("memorybook-usage-*")) == []
