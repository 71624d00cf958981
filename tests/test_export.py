"""The modules later notebooks import are exactly the code the earlier notebooks teach."""

import subprocess
import sys

from tests.helpers import REPO_ROOT


def test_exported_modules_match_their_notebooks():
    check = subprocess.run([sys.executable, "-m", "tools.export", "--check"], cwd=REPO_ROOT,
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr


def test_no_exported_module_is_edited_by_hand():
    modules = ("routing", "gate", "memory", "probes", "reconciliation", "next_steps", "memory_cost")
    for module in modules:
        text = (REPO_ROOT / "memorybook" / f"{module}.py").read_text(encoding="utf-8")
        assert text.startswith('"""Generated from notebooks/')
