"""The README's section for apps: its Python example runs as printed, from a folder of its own,
with no key, on the recording MEMORYBOOK_RECORDING names, and prints what the README says."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from memorybook.config import RECORDING_PATH
from tests.helpers import REPO_ROOT


def app_section() -> str:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    return readme.split("## Use it in an app", 1)[1].split("\n## ", 1)[0]


def test_the_readmes_app_example_runs_as_printed_from_any_folder_without_a_key(tmp_path):
    section = app_section()
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks, "README.md's section 'Use it in an app' must start with a Python example"
    said = re.search(r"It prints `([^`]+)`", section)
    assert said, "README.md's app section must say what its example prints (It prints `...`)"
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("TYPESAFE_", "MEMORYBOOK_"))}
    env["MEMORYBOOK_RECORDING"] = str(RECORDING_PATH)
    done = subprocess.run([sys.executable, "-c", blocks[0]], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"README.md's app example failed:\n{done.stderr}"
    assert done.stdout.strip() == said.group(1), (
        f"README.md's app example printed {done.stdout.strip()!r}, not {said.group(1)!r}: "
        "update the README or the library")
    assert list(tmp_path.iterdir()) == [], f"the example wrote {list(tmp_path.iterdir())}"
