"""Set-up for every test run, the notebooks nbval executes included.

Tests never call the API: no key reaches the kernels, so every answer must come from the
recording, and a missing one fails its cell. Each kernel notes the cache keys it reads, so that
`tests/test_recording.py` can find entries no notebook uses.
"""

import os
import tempfile
from pathlib import Path

import pytest

NEVER_IN_TESTS = (
    "TYPESAFE_API_KEY", "TYPESAFE_ENDPOINT", "MEMORYBOOK_RECORDING", "MEMORYBOOK_LIVE_IN_CI",
)
for name in NEVER_IN_TESTS:
    os.environ.pop(name, None)

USAGE_LOG = Path(tempfile.mkdtemp(prefix="memorybook-usage-")) / "keys-read.txt"
os.environ["MEMORYBOOK_USAGE_LOG"] = str(USAGE_LOG)

NOTEBOOKS_DIR = Path(__file__).parent / "notebooks"


def pytest_collection_modifyitems(session, config, items):
    """Run the tests that read what the notebooks did after every notebook has run."""
    items.sort(key=lambda item: item.get_closest_marker("after_notebooks") is not None)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "after_notebooks: runs after nbval has executed every notebook"
    )
    config.addinivalue_line("markers", "browser: drives JupyterLab in headless Chromium")


@pytest.fixture
def keys_read_by_notebooks(request) -> set[str]:
    """The cache keys the notebooks read in this session; skipped unless every notebook ran."""
    collected = {Path(str(item.path)) for item in request.session.items}
    notebooks = set(NOTEBOOKS_DIR.glob("*.ipynb"))
    if not notebooks <= collected:
        pytest.skip("needs every notebook executed in the same run: run `make test`")
    if not USAGE_LOG.exists():
        pytest.fail("the notebooks ran but no kernel logged a cache lookup")
    return set(USAGE_LOG.read_text(encoding="utf-8").split())


@pytest.fixture(autouse=True)
def _only_notebooks_log_their_lookups(monkeypatch):
    """Python tests may open recordings too; their lookups must not count as a notebook's."""
    monkeypatch.delenv("MEMORYBOOK_USAGE_LOG", raising=False)
