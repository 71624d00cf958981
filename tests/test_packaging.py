"""What `pip install .` gives an app: the package memorybook/ and nothing of the collection's own
tooling (dev/: the kernel set-up and provisioner), so no kernel of the app's changes."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from tests.helpers import REPO_ROOT


def test_the_wheel_an_app_installs_holds_memorybook_alone(tmp_path):
    uv = Path(sys.executable).with_name("uv")
    built = subprocess.run([str(uv), "build", "--wheel", "--quiet", "--out-dir", str(tmp_path),
                            str(REPO_ROOT)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    [wheel] = tmp_path.glob("memorybook-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert top == {"memorybook", wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1]
                   + ".dist-info"}, sorted(top)
    assert not any(name.endswith("entry_points.txt") for name in names), "it registers nothing"
    assert "memorybook/memory_system.py" in names and "memorybook/store/__init__.py" in names
