"""The router's tests take Jev's answers from the router's own recording (memorybook.testing)."""

from pathlib import Path

import pytest

from memorybook.testing import jev  # noqa: F401  replays jev_recording; records with a key


@pytest.fixture(scope="session")
def jev_recording() -> Path:
    """The router's own recording, committed beside its tests."""
    return Path(__file__).parent / "recording.json"
