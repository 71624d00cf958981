"""How fast is the memory store, and does one customer's recall slow down as others grow?

    pip install -e .                                          # once, so memorybook imports
    python -m benchmarks.store_benchmark                      # SQLite only
    python -m benchmarks.store_benchmark --pg-url postgresql://postgres@127.0.0.1:PORT/db

PostgreSQL is measured when a URL is given with --pg-url or $MEMORYBOOK_TEST_PG_URL
(``tools/postgres_server.sh start DIR`` prints one); the benchmark works in a new
schema there and drops it afterwards. It measures, as the median of several repeats:

* saving one memory (through ``save()``, one transaction each);
* recalling one customer's 10, 100 and 1,000 memories (cap raised with ``max_memories``);
* the same, with retention: a store opened with ``retention=`` recalling a customer whose
  memories all have an expiry date, timed in turns with the recalls without, in the same run;
* the same recalls after 10,000 other customers with 10 memories each were added;
* the size on disk before and after those 100,000 extra rows.

The bulk rows are written straight into the tables, in one transaction, from rows
the store itself checked and encrypted (``sealed_row()``), because 100,000 separate
``save()`` transactions would measure nothing new and take minutes. They bypass the cap of
50 memories a customer; the measuring store is opened with ``max_memories=1000``, so that one
customer holds 1,000.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol

from benchmarks.markdown_table import markdown_table
from memorybook.store import MemoryStore, PostgresMemoryStore, SealedRow, SQLiteMemoryStore

SAVE_REPEATS = 50  # single saves timed; the median is reported
RECALL_REPEATS = 9  # recalls timed per size, after one warm-up
RETENTION_REPEATS = 21  # recalls timed in turns, with and without retention, per size
RECALL_SIZES = (10, 100, 1_000)
OTHER_CUSTOMERS = 10_000
MEMORIES_PER_OTHER_CUSTOMER = 10
RETENTION = timedelta(days=365)
INSERT_ROW_SQL = (
    "INSERT INTO memorybook_memories (customer_digest, ticket_digest, sealed, expires_at)"
    " VALUES (?, ?, ?, ?)"
)


def expiry_micros(expires_at: datetime | None) -> int | None:
    """An expiry date as the memories table stores it (microseconds since 1970 UTC)."""
    if expires_at is None:
        return None
    return (expires_at - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def sample_memory(customer_id: str, ticket_number: int) -> dict:
    """A memory about the size of the cookbook's (about 1 KB of JSON)."""
    return {
        "request": {
            "customer": {"id": customer_id, "company": "Acme Corp"},
            "ticket": {
                "id": f"T-{ticket_number}",
                "received_on": "2026-08-04",
                "subject": "Adding an admin",
                "messages": [
                    {
                        "from": "customer",
                        "text": "Hi, we run your self-hosted edition on Windows Server 2022 in our "
                        "own data centre. How do I add a new admin user? " * 3,
                    }
                ],
            },
        },
        "jev_answered": {
            "Which edition does the customer run?": "Self-hosted, on Windows Server 2022.",
            "Which plan are they on?": "Enterprise contract, signed in March.",
            "Anything to remember about how they write?": "Often writes from a phone.",
        },
    }


def median_ms(action: Callable[[], object], repeats: int, warm_up: bool = True) -> float:
    if warm_up:
        action()
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        timings.append(time.perf_counter() - started)
    return statistics.median(timings) * 1000


class Backend(Protocol):
    """One backend's store, plus a side door for bulk loading and measuring size."""

    name: str

    def open(self, max_memories: int, retention: timedelta | None = None) -> MemoryStore: ...

    def bulk_insert(self, rows: list[SealedRow], expires_at: datetime | None = None) -> None: ...

    def size_bytes(self) -> int: ...


class SQLiteBackend:
    name = "SQLite"

    def __init__(self, folder: Path, key: str) -> None:
        self.path = folder / "memories.sqlite3"
        self.key = key

    def open(self, max_memories: int, retention: timedelta | None = None) -> SQLiteMemoryStore:
        return SQLiteMemoryStore(
            self.path, key=self.key, max_memories=max_memories, retention=retention
        )

    def bulk_insert(self, rows: list[SealedRow], expires_at: datetime | None = None) -> None:
        connection = sqlite3.connect(self.path, isolation_level=None)
        connection.execute("BEGIN IMMEDIATE")
        ends = expiry_micros(expires_at)
        connection.executemany(INSERT_ROW_SQL, [(*row, ends) for row in rows])
        connection.execute("COMMIT")
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        connection.close()

    def size_bytes(self) -> int:
        return sum(
            Path(f"{self.path}{suffix}").stat().st_size
            for suffix in ("", "-wal")
            if Path(f"{self.path}{suffix}").exists()
        )


class PostgresBackend:
    name = "PostgreSQL"

    def __init__(self, url: str, key: str) -> None:
        import psycopg

        self.admin = psycopg.connect(url, autocommit=True)
        self.schema = f"memorybook_bench_{uuid.uuid4().hex[:8]}"
        self.admin.execute(f"CREATE SCHEMA {self.schema}")
        self.admin.execute(f"SET search_path TO {self.schema}")
        separator = "&" if "?" in url else "?"
        self.url = f"{url}{separator}options=-csearch_path%3D{self.schema}"
        self.key = key

    def open(self, max_memories: int, retention: timedelta | None = None) -> PostgresMemoryStore:
        return PostgresMemoryStore(
            self.url, key=self.key, max_memories=max_memories, retention=retention
        )

    def bulk_insert(self, rows: list[SealedRow], expires_at: datetime | None = None) -> None:
        ends = expiry_micros(expires_at)
        with self.admin.transaction(), self.admin.cursor() as cursor:
            copy_sql = (
                "COPY memorybook_memories (customer_digest, ticket_digest, sealed, expires_at)"
                " FROM STDIN"
            )
            with cursor.copy(copy_sql) as copy:
                for row in rows:
                    copy.write_row((*row, ends))
        self.admin.execute("ANALYZE memorybook_memories")

    def size_bytes(self) -> int:
        [(size,)] = self.admin.execute(
            "SELECT pg_total_relation_size('memorybook_memories')"
            " + pg_total_relation_size('memorybook_meta')"
            " + pg_total_relation_size('memorybook_history')"
        ).fetchall()
        return int(size)

    def server_version(self) -> str:
        return self.admin.execute("SHOW server_version").fetchone()[0]

    def drop(self) -> None:
        self.admin.execute(f"DROP SCHEMA {self.schema} CASCADE")
        self.admin.close()


def time_recall(store: MemoryStore, customer_id: str) -> str:
    return f"{median_ms(lambda: store.recall(customer_id), RECALL_REPEATS):.2f} ms"


def paired_medians_ms(
    first: Callable[[], object], second: Callable[[], object], repeats: int
) -> tuple[float, float]:
    """Both actions' medians, timed in turns (after a warm-up of each), so drift hits both."""
    first(), second()
    timings: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for action, times in ((first, timings[0]), (second, timings[1])):
            started = time.perf_counter()
            action()
            times.append(time.perf_counter() - started)
    return statistics.median(timings[0]) * 1000, statistics.median(timings[1]) * 1000


def measure(
    backend: Backend, rows_for: Callable[[str, int], list[SealedRow]], other_rows: list[SealedRow]
) -> dict[str, str]:
    """Run every measurement on one backend; return figures keyed by row label."""
    figures: dict[str, str] = {}
    with (
        backend.open(max_memories=max(RECALL_SIZES)) as store,
        backend.open(max_memories=max(RECALL_SIZES), retention=RETENTION) as expiring,
    ):
        save_number = iter(range(10**6))

        def save_one() -> None:
            store.save("C-save", sample_memory("C-save", next(save_number)))

        figures["save one memory"] = f"{median_ms(save_one, SAVE_REPEATS):.2f} ms"
        ends = datetime.now(UTC) + RETENTION
        for size in RECALL_SIZES:
            backend.bulk_insert(rows_for(f"C-recall-{size}", size))
            backend.bulk_insert(rows_for(f"C-expiring-{size}", size), expires_at=ends)
        before_size = backend.size_bytes()
        for size in RECALL_SIZES:
            assert len(store.recall(f"C-recall-{size}")) == size
            assert len(expiring.recall(f"C-expiring-{size}")) == size
            without, with_retention = paired_medians_ms(
                lambda size=size: store.recall(f"C-recall-{size}"),
                lambda size=size: expiring.recall(f"C-expiring-{size}"),
                RETENTION_REPEATS,
            )
            figures[f"recall {size:,} memories"] = f"{without:.2f} ms"
            figures[f"recall {size:,} memories, with retention"] = (
                f"{with_retention:.2f} ms ({with_retention / without:.2f}x)"
            )
        backend.bulk_insert(other_rows)
        for size in RECALL_SIZES:
            label = f"recall {size:,} memories, {OTHER_CUSTOMERS:,} other customers in store"
            figures[label] = time_recall(store, f"C-recall-{size}")
    rows_before = SAVE_REPEATS + 1 + 2 * sum(RECALL_SIZES)
    rows_after = rows_before + OTHER_CUSTOMERS * MEMORIES_PER_OTHER_CUSTOMER
    figures[f"size on disk, {rows_before:,} memories"] = f"{before_size / 1e6:.1f} MB"
    figures[f"size on disk, {rows_after:,} memories"] = f"{backend.size_bytes() / 1e6:.1f} MB"
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg-url", default=os.environ.get("MEMORYBOOK_TEST_PG_URL"))
    arguments = parser.parse_args()
    key = base64.urlsafe_b64encode(os.urandom(32)).decode()

    with tempfile.TemporaryDirectory() as folder:
        backends: list[Backend] = [SQLiteBackend(Path(folder), key)]
        postgres: PostgresBackend | None = None
        if arguments.pg_url:
            postgres = PostgresBackend(arguments.pg_url, key)
            backends.append(postgres)
        try:
            with backends[0].open(max_memories=1) as encrypting_store:
                started = time.perf_counter()
                other_rows = [
                    encrypting_store.sealed_row(f"C-other-{c}", sample_memory(f"C-other-{c}", n))
                    for c in range(OTHER_CUSTOMERS)
                    for n in range(MEMORIES_PER_OTHER_CUSTOMER)
                ]
                encrypt_seconds = time.perf_counter() - started

                def rows_for(customer_id: str, count: int) -> list[SealedRow]:
                    return [
                        encrypting_store.sealed_row(customer_id, sample_memory(customer_id, n))
                        for n in range(count)
                    ]

                results = {b.name: measure(b, rows_for, other_rows) for b in backends}
        finally:
            if postgres is not None:
                versions = f", PostgreSQL {postgres.server_version()}"
                postgres.drop()
            else:
                versions = ""

    memory_bytes = len(json.dumps(sample_memory("C-1042", 1)))
    print(
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}{versions}, "
        f"{os.cpu_count()} CPUs; memories of about {memory_bytes:,} bytes of JSON; "
        f"medians of {SAVE_REPEATS} saves and {RECALL_REPEATS} recalls "
        f"({RETENTION_REPEATS} in turns with and without retention); "
        f"encrypting {len(other_rows):,} memories took {encrypt_seconds:.1f} s."
    )
    if postgres is None:
        print("PostgreSQL skipped: pass --pg-url or set MEMORYBOOK_TEST_PG_URL.")
    else:
        print(
            "PostgreSQL saves commit without waiting for disk if the server runs with "
            "fsync=off, as tools/postgres_server.sh's test server does."
        )
    print()
    names = [b.name for b in backends]
    rows = [[label, *(results[n][label] for n in names)] for label in results[names[0]]]
    print(markdown_table(["measure", *names], rows))


if __name__ == "__main__":
    main()
