"""The modules later notebooks import are exactly the code the earlier notebooks teach."""

import importlib
import subprocess
import sys

from tests.helpers import REPO_ROOT
from tools.export import exported_modules


def test_exported_modules_match_their_notebooks():
    check = subprocess.run([sys.executable, "-m", "tools.export", "--check"], cwd=REPO_ROOT,
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr


def test_each_generated_module_declares_what_it_exports_and_defines_it():
    for path in exported_modules():
        module = importlib.import_module(f"memorybook.{path.stem}")
        assert module.__all__, f"{path.name} exports nothing"
        missing = [name for name in module.__all__ if not hasattr(module, name)]
        assert not missing, f"{path.name} lists names it does not define: {missing}"
