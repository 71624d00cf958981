"""The store tests' fixtures: each test runs against SQLite and PostgreSQL alike.

PostgreSQL tests use the server at $MEMORYBOOK_TEST_PG_URL, for example one
started with ``tools/postgres_server.sh start /tmp/memorybook-pg``. Without it
they are skipped, except under CI (``$CI`` set), where they fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memorybook.store import MemoryStore
from tests.helpers import Backend, fresh_postgres_store, fresh_sqlite_store

# The backend fixture's parameters: each backend's name (as tests pick one with `indirect`) and
# how to make a fresh, empty store location on it.
FRESH_STORES = {"sqlite": fresh_sqlite_store, "postgresql": fresh_postgres_store}


@pytest.fixture(params=list(FRESH_STORES))
def backend(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Backend]:
    """A fresh, empty store location per test, on each backend."""
    monkeypatch.delenv("MEMORYBOOK_STORE_KEY", raising=False)
    monkeypatch.delenv("MEMORYBOOK_STORE_URL", raising=False)
    with FRESH_STORES[request.param](tmp_path) as fresh:
        yield fresh


@pytest.fixture
def store(backend: Backend) -> Iterator[MemoryStore]:
    """A fresh store on each backend."""
    with backend.open() as opened:
        yield opened
