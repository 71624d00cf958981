"""The store tests' fixtures: each test runs against every backend FRESH_STORES lists.

A backend's class here is all that the store tests know of its database and its driver: how to
make a fresh, empty location, reach it directly, read its raw bytes and its schema, and hold its
tables locked. Tests of one backend alone live in its own file (test_sqlite.py, test_postgres.py).

PostgreSQL tests use the server at $MEMORYBOOK_TEST_PG_URL, for example one
started with ``tools/postgres_server.sh start /tmp/memorybook-pg``. Without it
they are skipped, except under CI (``$CI`` set), where they fail.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memorybook.store import MemoryStore, PostgresMemoryStore, SQLiteMemoryStore
from tests.helpers import Backend


class SQLiteBackend(Backend):
    """A new SQLite file."""

    name = "sqlite"
    store_class = SQLiteMemoryStore
    pinned_schema = {
        "sqlite_master": [  # type, name, SQL
            (
                "table",
                "memorybook_counts",
                "CREATE TABLE memorybook_counts ( customer_digest BLOB PRIMARY KEY,"
                " memories INTEGER NOT NULL)",
            ),
            (
                "table",
                "memorybook_history",
                "CREATE TABLE memorybook_history ( id INTEGER PRIMARY KEY AUTOINCREMENT,"
                " customer_digest BLOB NOT NULL, event TEXT NOT NULL, at INTEGER NOT NULL,"
                " sealed_ticket BLOB NOT NULL)",
            ),
            (
                "index",
                "memorybook_history_by_customer",
                "CREATE INDEX memorybook_history_by_customer ON memorybook_history"
                " (customer_digest)",
            ),
            (
                "table",
                "memorybook_memories",
                "CREATE TABLE memorybook_memories ( id INTEGER PRIMARY KEY AUTOINCREMENT,"
                " customer_digest BLOB NOT NULL, ticket_digest BLOB NOT NULL,"
                " sealed BLOB NOT NULL, expires_at INTEGER, sealed_ticket BLOB)",
            ),
            (
                "index",
                "memorybook_memories_by_customer",
                "CREATE INDEX memorybook_memories_by_customer ON memorybook_memories"
                " (customer_digest)",
            ),
            (
                "index",
                "memorybook_memories_by_expiry",
                "CREATE INDEX memorybook_memories_by_expiry ON memorybook_memories"
                " (customer_digest, expires_at) WHERE expires_at IS NOT NULL",
            ),
            (
                "table",
                "memorybook_meta",
                "CREATE TABLE memorybook_meta (name TEXT PRIMARY KEY, value BLOB NOT NULL)",
            ),
            (
                "table",
                "memorybook_pending",
                "CREATE TABLE memorybook_pending ( id INTEGER PRIMARY KEY AUTOINCREMENT,"
                " customer_digest BLOB NOT NULL, owner BLOB NOT NULL, sealed BLOB NOT NULL)",
            ),
            (
                "index",
                "memorybook_pending_by_customer",
                "CREATE INDEX memorybook_pending_by_customer ON memorybook_pending"
                " (customer_digest)",
            ),
            ("index", "sqlite_autoindex_memorybook_counts_1", None),
            ("index", "sqlite_autoindex_memorybook_meta_1", None),
            ("table", "sqlite_sequence", "CREATE TABLE sqlite_sequence(name,seq)"),
        ],
        "journal_mode": "wal",
    }
    # The statements that memorybook-store-1 (before expiry and history) made a store with.
    format_1_tables = (
        "PRAGMA journal_mode = WAL",
        "CREATE TABLE memorybook_meta (name TEXT PRIMARY KEY, value BLOB NOT NULL)",
        "CREATE TABLE memorybook_memories ( id INTEGER PRIMARY KEY AUTOINCREMENT,"
        " customer_digest BLOB NOT NULL, ticket_digest BLOB NOT NULL, sealed BLOB NOT NULL)",
        "CREATE INDEX memorybook_memories_by_customer ON memorybook_memories (customer_digest)",
    )
    # What memorybook-store-2 (expiry and history, no counts) added to those.
    format_2_tables = (
        "ALTER TABLE memorybook_memories ADD COLUMN expires_at INTEGER",
        "CREATE TABLE memorybook_history ( id INTEGER PRIMARY KEY AUTOINCREMENT,"
        " customer_digest BLOB NOT NULL, event TEXT NOT NULL, at INTEGER NOT NULL,"
        " sealed_ticket BLOB NOT NULL)",
        "CREATE INDEX memorybook_history_by_customer ON memorybook_history (customer_digest)",
    )
    # What memorybook-store-3 (counts, pending gates) added to those.
    format_3_tables = (
        "CREATE INDEX memorybook_memories_by_expiry ON memorybook_memories"
        " (customer_digest, expires_at) WHERE expires_at IS NOT NULL",
        "CREATE TABLE memorybook_counts ( customer_digest BLOB PRIMARY KEY,"
        " memories INTEGER NOT NULL)",
        "CREATE TABLE memorybook_pending ( id INTEGER PRIMARY KEY AUTOINCREMENT,"
        " customer_digest BLOB NOT NULL, owner BLOB NOT NULL, sealed BLOB NOT NULL)",
        "CREATE INDEX memorybook_pending_by_customer ON memorybook_pending (customer_digest)",
    )

    @classmethod
    @contextlib.contextmanager
    def fresh(cls, tmp_path: Path) -> Iterator[Backend]:
        path = tmp_path / "memories.sqlite3"
        yield cls(f"sqlite:///{path}", str(path))

    def connect_directly(self) -> tuple[Any, str]:
        return sqlite3.connect(self.location), "?"

    def raw_bytes(self) -> bytes:
        return b"".join(
            Path(self.location + suffix).read_bytes()
            for suffix in ("", "-wal", "-journal")
            if Path(self.location + suffix).exists()
        )

    def schema(self) -> object:
        with contextlib.closing(sqlite3.connect(self.location)) as connection:
            objects = connection.execute(
                "SELECT type, name, sql FROM sqlite_master ORDER BY name"
            ).fetchall()
            [(journal_mode,)] = connection.execute("PRAGMA journal_mode").fetchall()
        return {"sqlite_master": objects, "journal_mode": journal_mode}

    @staticmethod
    def work_of(store: MemoryStore, call: Callable[[], object]) -> int:
        """The steps of SQLite's virtual machine that the call took, on the store's own
        connection: they grow with every row a statement reads."""
        steps = 0

        def count() -> int:
            nonlocal steps
            steps += 1
            return 0  # go on

        connection = store._database.connection  # type: ignore[attr-defined]
        connection.set_progress_handler(count, 1)
        try:
            call()
        finally:
            connection.set_progress_handler(None, 1)
        return steps

    @contextlib.contextmanager
    def hold_the_tables(self, how: str) -> Iterator[None]:
        assert how == "tables", how
        holder = sqlite3.connect(self.location, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        try:
            yield
        finally:
            holder.execute("ROLLBACK")
            holder.close()


POSTGRES_URL_ENV = "MEMORYBOOK_TEST_PG_URL"
# Every table of a store: raw_bytes() reads them all.
TABLES = ("memorybook_meta", "memorybook_memories", "memorybook_history", "memorybook_counts",
          "memorybook_pending")


class PostgresBackend(Backend):
    """A new schema on the server at $MEMORYBOOK_TEST_PG_URL, dropped afterwards."""

    name = "postgresql"
    store_class = PostgresMemoryStore
    pinned_schema = {
        "columns": [  # table, column, type, nullable, identity
            ("memorybook_counts", "customer_digest", "bytea", "NO", None),
            ("memorybook_counts", "memories", "bigint", "NO", None),
            ("memorybook_history", "id", "bigint", "NO", "ALWAYS"),
            ("memorybook_history", "customer_digest", "bytea", "NO", None),
            ("memorybook_history", "event", "text", "NO", None),
            ("memorybook_history", "at", "bigint", "NO", None),
            ("memorybook_history", "sealed_ticket", "bytea", "NO", None),
            ("memorybook_memories", "id", "bigint", "NO", "ALWAYS"),
            ("memorybook_memories", "customer_digest", "bytea", "NO", None),
            ("memorybook_memories", "ticket_digest", "bytea", "NO", None),
            ("memorybook_memories", "sealed", "bytea", "NO", None),
            ("memorybook_memories", "expires_at", "bigint", "YES", None),
            ("memorybook_memories", "sealed_ticket", "bytea", "YES", None),
            ("memorybook_meta", "name", "text", "NO", None),
            ("memorybook_meta", "value", "bytea", "NO", None),
            ("memorybook_pending", "id", "bigint", "NO", "ALWAYS"),
            ("memorybook_pending", "customer_digest", "bytea", "NO", None),
            ("memorybook_pending", "owner", "bytea", "NO", None),
            ("memorybook_pending", "sealed", "bytea", "NO", None),
        ],
        "indexes": [
            "CREATE UNIQUE INDEX memorybook_counts_pkey ON memorybook_counts"
            " USING btree (customer_digest)",
            "CREATE INDEX memorybook_history_by_customer ON memorybook_history"
            " USING btree (customer_digest, id)",
            "CREATE UNIQUE INDEX memorybook_history_pkey ON memorybook_history USING btree (id)",
            "CREATE INDEX memorybook_memories_by_customer ON memorybook_memories"
            " USING btree (customer_digest, id)",
            "CREATE INDEX memorybook_memories_by_expiry ON memorybook_memories"
            " USING btree (customer_digest, expires_at) WHERE (expires_at IS NOT NULL)",
            "CREATE UNIQUE INDEX memorybook_memories_pkey ON memorybook_memories USING btree (id)",
            "CREATE UNIQUE INDEX memorybook_meta_pkey ON memorybook_meta USING btree (name)",
            "CREATE INDEX memorybook_pending_by_customer ON memorybook_pending"
            " USING btree (customer_digest, id)",
            "CREATE UNIQUE INDEX memorybook_pending_pkey ON memorybook_pending USING btree (id)",
        ],
        # The writes' functions: made anew, as this version writes them, by every opening of a
        # store whose functions differ (SqlDatabase.upgrade()), with the format unchanged.
        "functions": [("memorybook_erase", "plpgsql"), ("memorybook_save", "plpgsql"),
                      ("memorybook_sweep", "plpgsql")],
    }
    format_1_tables = (
        "CREATE TABLE memorybook_meta (name TEXT PRIMARY KEY, value BYTEA NOT NULL)",
        "CREATE TABLE memorybook_memories ( id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
        " customer_digest BYTEA NOT NULL, ticket_digest BYTEA NOT NULL, sealed BYTEA NOT NULL)",
        "CREATE INDEX memorybook_memories_by_customer ON memorybook_memories"
        " (customer_digest, id)",
    )
    format_2_tables = (
        "ALTER TABLE memorybook_memories ADD COLUMN expires_at BIGINT",
        "CREATE TABLE memorybook_history ( id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
        " customer_digest BYTEA NOT NULL, event TEXT NOT NULL, at BIGINT NOT NULL,"
        " sealed_ticket BYTEA NOT NULL)",
        "CREATE INDEX memorybook_history_by_customer ON memorybook_history (customer_digest, id)",
    )
    format_3_tables = (
        "CREATE INDEX memorybook_memories_by_expiry ON memorybook_memories"
        " (customer_digest, expires_at) WHERE expires_at IS NOT NULL",
        "CREATE TABLE memorybook_counts ( customer_digest BYTEA PRIMARY KEY,"
        " memories BIGINT NOT NULL)",
        "CREATE TABLE memorybook_pending ( id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
        " customer_digest BYTEA NOT NULL, owner BYTEA NOT NULL, sealed BYTEA NOT NULL)",
        "CREATE INDEX memorybook_pending_by_customer ON memorybook_pending (customer_digest, id)",
    )
    # Deleted rows leave the table's files only once sweep() has run VACUUM FULL.
    erases_without_sweep = False
    # "stopped": the tables' lock holder's server process is stopped with SIGSTOP.
    ways_to_hold_a_lock = (*Backend.ways_to_hold_a_lock, "stopped")

    @staticmethod
    def server_url_or_skip() -> str:
        url = os.environ.get(POSTGRES_URL_ENV)
        if not url:
            reason = (
                f"PostgreSQL tests need ${POSTGRES_URL_ENV}; start a server with "
                "`tools/postgres_server.sh start /tmp/memorybook-pg` and export its URL"
            )
            if os.environ.get("CI"):
                pytest.fail(f"{reason} (CI is set, so this is a failure, not a skip)")
            pytest.skip(reason)
        return url

    @classmethod
    @contextlib.contextmanager
    def fresh(cls, tmp_path: Path) -> Iterator[Backend]:
        admin_url = cls.server_url_or_skip()
        import psycopg

        schema = f"memorybook_test_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f"CREATE SCHEMA {schema}")
        separator = "&" if "?" in admin_url else "?"
        url = f"{admin_url}{separator}options=-csearch_path%3D{schema}"
        try:
            yield cls(url, url)
        finally:
            with psycopg.connect(admin_url, autocommit=True) as admin:
                admin.execute(f"DROP SCHEMA {schema} CASCADE")

    def connect_directly(self) -> tuple[Any, str]:
        import psycopg

        return psycopg.connect(self.url), "%s"

    def raw_bytes(self) -> bytes:
        """Every row as the server returns it, then the files of each table and its TOAST
        table as they are on disk (after a CHECKPOINT writes every page): a deleted row's bytes
        stay in those files until vacuumed."""
        import psycopg

        chunks = []
        with psycopg.connect(self.url, autocommit=True) as connection:
            for table in TABLES:
                for row in connection.execute(f"SELECT t.*, t::text FROM {table} t"):
                    for value in row:
                        chunks.append(value if isinstance(value, bytes) else str(value).encode())
            connection.execute("CHECKPOINT")
            files = connection.execute(
                "SELECT pg_relation_filepath(c.oid), pg_relation_filepath(c.reltoastrelid)"
                " FROM pg_class c WHERE c.oid = ANY(%s::regclass[])",
                (list(TABLES),),
            ).fetchall()
            for path in (path for pair in files for path in pair if path):
                [(content,)] = connection.execute(
                    "SELECT pg_read_binary_file(%s)", (path,)
                ).fetchall()
                chunks.append(bytes(content))
        return b"\n".join(chunks)

    def schema(self) -> object:
        import psycopg

        with psycopg.connect(self.url) as connection:
            [(schema_name,)] = connection.execute("SELECT current_schema()").fetchall()
            columns = connection.execute(
                "SELECT table_name, column_name, data_type, is_nullable, identity_generation"
                " FROM information_schema.columns WHERE table_schema = %s"
                " ORDER BY table_name, ordinal_position",
                (schema_name,),
            ).fetchall()
            indexes = connection.execute(
                "SELECT indexdef FROM pg_indexes WHERE schemaname = %s ORDER BY indexname",
                (schema_name,),
            ).fetchall()
            functions = connection.execute(
                "SELECT routine_name, external_language FROM information_schema.routines"
                " WHERE routine_schema = %s ORDER BY routine_name",
                (schema_name,),
            ).fetchall()
        return {
            "columns": columns,
            "indexes": [text.replace(f"{schema_name}.", "") for (text,) in indexes],
            "functions": [(name, language.lower()) for name, language in functions],
        }

    def wait_for_older_transactions(self, seconds: float = 60) -> None:
        # Other tests share the server's database and may be inside a transaction: until it
        # ends, VACUUM FULL copies the rows deleted since it began into the new table files.
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as connection:
            [(now,)] = connection.execute(
                "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint"
            ).fetchall()
            deadline = time.monotonic() + seconds
            while True:
                [(older,)] = connection.execute(
                    "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND pid <> pg_backend_pid() AND (backend_xmin::text::bigint < %s"
                    " OR backend_xid::text::bigint < %s)",
                    (now, now),
                ).fetchall()
                if not older:
                    return
                if time.monotonic() > deadline:
                    pytest.fail(f"{older} other session(s) kept a transaction open {seconds} s")
                time.sleep(0.05)

    @staticmethod
    def work_of(store: MemoryStore, call: Callable[[], object]) -> int:
        """The rows that the statements of the call's write transaction read from the store's
        tables, as the server counts them for its session (pg_stat_xact_user_tables, whose
        figures are left unflushed inside a transaction), read as it begins and before its
        commit. A save, a statement in a transaction of its own, is run inside one for this."""
        database = store._database  # type: ignore[attr-defined]
        write_transaction = database.write_transaction
        read: list[int] = []

        def rows_read() -> int:
            [(rows,)] = database.run(
                "SELECT COALESCE(SUM(seq_tup_read + COALESCE(idx_tup_fetch, 0)), 0)"
                " FROM pg_stat_xact_user_tables WHERE schemaname = current_schema()"
            )
            return int(rows)

        @contextlib.contextmanager
        def counted(lock_key: bytes) -> Iterator[None]:
            with write_transaction(lock_key):
                before = rows_read()
                yield
                read.append(rows_read() - before)

        def save_counted(lock_key: bytes, parameters: dict) -> tuple[list[tuple], bool]:
            with counted(lock_key):
                return database.run_save(parameters)

        database.write_transaction, database.save_alone = counted, save_counted
        try:
            call()
        finally:
            del database.write_transaction, database.save_alone
        assert len(read) == 1, f"the call made {len(read)} write transactions, not one"
        return read[0]

    @contextlib.contextmanager
    def hold_the_tables(self, how: str) -> Iterator[None]:
        assert how in ("tables", "stopped"), how
        import psycopg

        with psycopg.connect(self.url) as holder:
            holder.execute("LOCK TABLE memorybook_memories IN ACCESS EXCLUSIVE MODE")
            if how == "tables":
                yield
                return
            [(pid,)] = holder.execute("SELECT pg_backend_pid()").fetchall()
            os.kill(pid, signal.SIGSTOP)
            try:
                yield
            finally:
                os.kill(pid, signal.SIGCONT)


# The backends every store test runs on, one line each: a new backend adds its class here.
FRESH_STORES: list[type[Backend]] = [
    SQLiteBackend,
    PostgresBackend,
]
BY_NAME = {fresh_store.name: fresh_store for fresh_store in FRESH_STORES}


@contextlib.contextmanager
def fresh_location(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Backend]:
    """A fresh, empty store location on the backend `name`, with no store URL or keys set."""
    for variable in ("MEMORYBOOK_STORE_KEY", "MEMORYBOOK_STORE_OLD_KEYS", "MEMORYBOOK_STORE_URL"):
        monkeypatch.delenv(variable, raising=False)
    with BY_NAME[name].fresh(tmp_path) as fresh:
        yield fresh


@pytest.fixture(params=list(BY_NAME))
def backend(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Backend]:
    """A fresh, empty store location per test, on each backend."""
    with fresh_location(request.param, tmp_path, monkeypatch) as fresh:
        yield fresh


@pytest.fixture
def store(backend: Backend) -> Iterator[MemoryStore]:
    """A fresh store on each backend."""
    with backend.open() as opened:
        yield opened


@pytest.fixture(
    params=[(fresh_store.name, how) for fresh_store in FRESH_STORES
            for how in fresh_store.ways_to_hold_a_lock],
    ids="-".join,
)
def backend_and_a_way_to_lock_it(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Backend, str]]:
    """A fresh store location, and one way another session can hold a lock its writers need
    (as Backend.hold_a_lock() takes it): on each backend, each of its ways_to_hold_a_lock."""
    name, how = request.param
    with fresh_location(name, tmp_path, monkeypatch) as fresh:
        yield fresh, how


@pytest.fixture
def postgres_server_url() -> str:
    """The shared PostgreSQL server's URL, for PostgreSQL's own tests (or a skip without one)."""
    return PostgresBackend.server_url_or_skip()
