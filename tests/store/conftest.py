"""The store tests' fixtures: each test runs against SQLite and PostgreSQL alike.

PostgreSQL tests use the server at $MEMORYBOOK_TEST_PG_URL, for example one
started with ``tools/postgres_server.sh start /tmp/memorybook-pg``. Without it
they are skipped, except under CI (``$CI`` set), where they fail.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from memorybook.store import MemoryStore, PostgresMemoryStore, SQLiteMemoryStore
from tests.store.support import Backend, new_key, postgres_url_or_skip


def with_search_path(url: str, schema: str) -> str:
    separator = "&" if "?" in url else "?"
    return f"{url}{separator}options=-csearch_path%3D{schema}"


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Backend]:
    """A fresh, empty store location per test: a new SQLite file or a new PostgreSQL schema."""
    monkeypatch.delenv("MEMORYBOOK_STORE_KEY", raising=False)
    monkeypatch.delenv("MEMORYBOOK_STORE_URL", raising=False)
    if request.param == "sqlite":
        path = tmp_path / "memories.sqlite3"
        yield Backend("sqlite", f"sqlite:///{path}", str(path), SQLiteMemoryStore, new_key())
        return
    admin_url = postgres_url_or_skip()
    import psycopg

    schema = f"memorybook_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    url = with_search_path(admin_url, schema)
    try:
        yield Backend("postgresql", url, url, PostgresMemoryStore, new_key())
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture
def store(backend: Backend) -> Iterator[MemoryStore]:
    """A fresh store on each backend."""
    with backend.open() as opened:
        yield opened
