"""What a save costs against its floor, and what a sweep costs per expired row against a save.

    python -m benchmarks.store_cost_benchmark                      # SQLite only
    python -m benchmarks.store_cost_benchmark --pg-url postgresql://postgres@127.0.0.1:PORT/db
    python -m benchmarks.store_cost_benchmark --only save --backend PostgreSQL

PostgreSQL is measured when a URL is given with --pg-url or $MEMORYBOOK_TEST_PG_URL
(``tools/postgres_server.sh start DIR`` prints one); each store works in a new schema there,
dropped afterwards. The sweep's part uses only the store's public calls, so that it runs on an
earlier checkout too (from its folder, with this file copied into its benchmarks/).

**A save against its floor.** For a customer holding 10, 100 and 1,000 memories (loaded in bulk
into a store whose ``max_memories`` holds them all, so that no save evicts), with and without a
retention, four calls are timed in turns, each on a store of its own with the same load:

* ``save()``;
* its SQL: what ``save()`` runs (memorybook/store/writes.py ``SAVE``; PostgreSQL: a call of its
  function), on a connection of the benchmark's own, without the call's lock, time limit and
  reconnection check;
* the floor: the cheapest code that keeps a save's promise of checked, encrypted memories and
  their history. It checks and seals the memory as the store does (``sealed_row()``), then
  writes its row and its ``saved`` history row in one transaction, committed as the store
  commits (SQLite: ``BEGIN IMMEDIATE`` on the store's file, in WAL mode with its default
  ``synchronous``; PostgreSQL: one statement on a connection in autocommit). It keeps no count,
  looks for no expired memory and checks no cap, which a save does;
* the floor with the customer's count kept (an upsert in the same transaction).

Each turn runs one of each, starting with the next in turn; the figures are medians, the
ratios those of the medians, and the range that of save() to the floor over five consecutive
blocks of turns.

**A sweep per expired row against a save.** A store of ``--customers`` customers (10,000), each
holding two memories that have expired and two that have not, with a ``saved`` history row for
each and their counts (as that many saves would have left them), loaded in bulk. In each run, on
a fresh load: 60 saves, each for one of 61 more customers holding two memories that have not
expired, whose median is the save; then ``sweep()``, whose time is divided by the rows it
expired; then a second ``sweep()``, which expires nothing and so times alone the sweep's erasure
of deleted rows from the files (SQLite: emptying the write-ahead log; PostgreSQL: ``VACUUM
FULL`` of the store's tables), which grows with the store rather than with what expired.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import itertools
import os
import platform
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks.markdown_table import markdown_table
from benchmarks.store_benchmark import empty_the_log, micros, sample_memory
from memorybook.store import MemoryStore, PostgresMemoryStore, SealedRow, SQLiteMemoryStore

SIZES = (10, 100, 1_000)  # memories the saving customer holds
TTL = timedelta(days=365)
SAVES = 300  # pairs of a save and the floor's, per size, after one warm-up pair
BLOCKS = 5  # the ratio's spread: over this many consecutive blocks of the pairs
START = datetime(2026, 8, 4, 9, 0, tzinfo=UTC)  # the sweep's store's clock
CUSTOMERS = 10_000
EXPIRED_EACH, LIVE_EACH = 2, 2  # each swept customer's memories that expired, and not
SWEEP_SAVES = 60  # saves timed in each sweep run
SWEEP_RUNS = 3
TIMEOUT = 600.0  # a store call's time limit here: a sweep before batches took 12 s and more
# The count a save keeps, as the floor with a count keeps it.
COUNT = ("INSERT INTO memorybook_counts (customer_digest, memories) VALUES (?, 1)"
         " ON CONFLICT (customer_digest) DO UPDATE SET memories = memorybook_counts.memories + 1")


class Subject:
    """One backend: a store opened on a new location, a connection of the benchmark's own to its
    database, and how a floor's save is written there."""

    name: str
    mark: str

    def store(self, **options: Any) -> contextlib.AbstractContextManager[
            tuple[MemoryStore, Any]]:
        raise NotImplementedError

    def floor(self, connection: Any, count: bool = False
              ) -> Callable[[SealedRow, int, int | None], None]:
        """The floor's save of a sealed row (``count``: and the customer's count kept, as an
        upsert in the same transaction)."""
        raise NotImplementedError

    def save_sql(self, connection: Any) -> Callable[[dict[str, object]], None]:
        """A save's own SQL (writes.SAVE) with these parameters, on the benchmark's connection:
        what save() runs, without its call's lock, time limit and reconnection check."""
        raise NotImplementedError

    def transaction(self, connection: Any) -> contextlib.AbstractContextManager[object]:
        """A transaction on the benchmark's own connection (which is in autocommit)."""
        raise NotImplementedError

    def settle(self, connection: Any) -> None:
        """After a bulk load (SQLite: the load's log emptied into the file, untimed)."""


class SQLite(Subject):
    name, mark = "SQLite", "?"

    def __init__(self, folder: Path, key: str) -> None:
        self.folder, self.key = folder, key

    @contextlib.contextmanager
    def store(self, **options: Any) -> Iterator[tuple[MemoryStore, Any]]:
        path = self.folder / f"store-{uuid.uuid4().hex[:8]}.sqlite3"
        with SQLiteMemoryStore(path, key=self.key, timeout=TIMEOUT, **options) as store, \
                contextlib.closing(sqlite3.connect(path, isolation_level=None)) as connection:
            yield store, connection
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)

    def floor(self, connection: Any, count: bool = False
              ) -> Callable[[SealedRow, int, int | None], None]:
        def save(row: SealedRow, now: int, ends: int | None) -> None:
            connection.execute("BEGIN IMMEDIATE")
            connection.execute(
                "INSERT INTO memorybook_memories (customer_digest, ticket_digest, sealed,"
                " sealed_ticket, expires_at) VALUES (?, ?, ?, ?, ?)", (*row, ends))
            connection.execute(
                "INSERT INTO memorybook_history (customer_digest, event, at, sealed_ticket)"
                " VALUES (?, 'saved', ?, ?)", (row.customer_digest, now, row.sealed_ticket))
            if count:
                connection.execute(COUNT, (row.customer_digest,))
            connection.execute("COMMIT")
        return save

    def save_sql(self, connection: Any) -> Callable[[dict[str, object]], None]:
        from memorybook.store.writes import SAVE, positional

        def save(parameters: dict[str, object]) -> None:
            connection.execute("BEGIN IMMEDIATE")
            flags: dict[str, object] = {}
            for step in SAVE.steps:
                if step.when is None or flags.get(step.when):
                    for statement in step.statements:
                        rows = connection.execute(
                            *positional(statement.sql, parameters)).fetchall()
                        if statement.sets is not None:
                            flags[statement.sets] = rows[0][0]
            connection.execute("COMMIT")
        return save

    @contextlib.contextmanager
    def transaction(self, connection: Any) -> Iterator[None]:
        connection.execute("BEGIN")
        yield
        connection.execute("COMMIT")

    def settle(self, connection: Any) -> None:
        empty_the_log(connection)


class PostgreSQL(Subject):
    name, mark = "PostgreSQL", "%s"

    def __init__(self, url: str, key: str) -> None:
        import psycopg

        self.url, self.key, self._psycopg = url, key, psycopg

    @contextlib.contextmanager
    def store(self, **options: Any) -> Iterator[tuple[MemoryStore, Any]]:
        schema = f"memorybook_bench_{uuid.uuid4().hex[:8]}"
        with self._psycopg.connect(self.url, autocommit=True) as admin:
            admin.execute(f"CREATE SCHEMA {schema}")
        separator = "&" if "?" in self.url else "?"
        url = f"{self.url}{separator}options=-csearch_path%3D{schema}"
        try:
            with PostgresMemoryStore(url, key=self.key, timeout=TIMEOUT, **options) as store, \
                    self._psycopg.connect(url, autocommit=True) as connection:
                yield store, connection
        finally:
            with self._psycopg.connect(self.url, autocommit=True) as admin:
                admin.execute(f"DROP SCHEMA {schema} CASCADE")

    def floor(self, connection: Any, count: bool = False
              ) -> Callable[[SealedRow, int, int | None], None]:
        cursor = connection.cursor(binary=True)
        counted = f", counted AS ({COUNT.replace('?', '%b')})" if count else ""
        sql = ("WITH saved AS (INSERT INTO memorybook_memories (customer_digest, ticket_digest,"
               f" sealed, sealed_ticket, expires_at) VALUES (%b, %b, %b, %b, %b)){counted}"
               " INSERT INTO memorybook_history (customer_digest, event, at, sealed_ticket)"
               " VALUES (%b, 'saved', %b, %b)")

        def save(row: SealedRow, now: int, ends: int | None) -> None:
            cursor.execute(sql, (*row, ends, *([row.customer_digest] if count else []),
                                 row.customer_digest, now, row.sealed_ticket))
        return save

    def save_sql(self, connection: Any) -> Callable[[dict[str, object]], None]:
        from memorybook.store.writes import SAVE

        cursor = connection.cursor(binary=True)
        sql = f"SELECT {SAVE.function}({', '.join(['%b'] * (len(SAVE.parameters) + 1))})"

        def save(parameters: dict[str, object]) -> None:  # any lock id: none is held
            cursor.execute(sql, (*(parameters[name] for name in SAVE.parameters), 1)).fetchall()
        return save

    def transaction(self, connection: Any) -> contextlib.AbstractContextManager[object]:
        return connection.transaction()

    def server_version(self) -> str:
        with self._psycopg.connect(self.url) as connection:
            return connection.execute("SHOW server_version").fetchone()[0]


Held = dict[str, list[tuple[SealedRow, int | None]]]  # each customer's rows, with their expiry


def load(subject: Subject, connection: Any, customers: Held, saved_at: int) -> None:
    """Each customer's rows (with their expiry) straight into the tables, with a ``saved``
    history row each and the count that as many saves would have left; then ANALYZE."""
    mark = subject.mark
    with contextlib.closing(connection.cursor()) as cursor:
        with subject.transaction(connection):
            cursor.executemany(
            f"INSERT INTO memorybook_memories ({', '.join(SealedRow._fields)}, expires_at)"
            f" VALUES ({', '.join([mark] * (len(SealedRow._fields) + 1))})",
                [(*row, ends) for rows in customers.values() for row, ends in rows])
            cursor.executemany(
                "INSERT INTO memorybook_history (customer_digest, event, at, sealed_ticket)"
                f" VALUES ({mark}, 'saved', {mark}, {mark})",
                [(row.customer_digest, saved_at, row.sealed_ticket)
                 for rows in customers.values() for row, _ in rows])
            cursor.executemany(
                f"INSERT INTO memorybook_counts (customer_digest, memories)"
                f" VALUES ({mark}, {mark})",
                [(rows[0][0].customer_digest, len(rows)) for rows in customers.values()])
        cursor.execute("ANALYZE")
    subject.settle(connection)


CALLS = ("save()", "its SQL", "floor + count", "floor")


def save_against_floor(subject: Subject, size: int, ttl: bool, pairs: int
                       ) -> tuple[dict[str, float], float, float]:
    """For a customer of ``size`` memories: the median of each of CALLS (ms), timed in turns;
    and the lowest and highest ratio of save() to the floor over BLOCKS blocks of turns."""
    options = {"max_memories": 2 * size + pairs + 10, "retention": TTL if ttl else None}
    with contextlib.ExitStack() as opened:
        stores = [opened.enter_context(subject.store(**options)) for _ in CALLS]
        now = micros(datetime.now(UTC))
        ends = now + TTL // timedelta(microseconds=1) if ttl else None
        for store, connection in stores:
            rows = [(store.sealed_row("C-held", sample_memory("C-held", n)), ends)
                    for n in range(size)]
            load(subject, connection, {"C-held": rows}, now)
        numbers = itertools.count(10**6)
        (ours, _), (sql_store, sql_db), (counted, counted_db), (floors, floor_db) = stores
        save_sql = subject.save_sql(sql_db)
        floors_with = {True: subject.floor(counted_db, count=True), False: subject.floor(floor_db)}

        def save() -> None:
            ours.save("C-held", sample_memory("C-held", next(numbers)))

        def sql() -> None:  # as save() checks, seals and passes them
            row = sql_store.sealed_row("C-held", sample_memory("C-held", next(numbers)))
            now = micros(datetime.now(UTC))
            save_sql({"customer": row.customer_digest, "ticket": row.ticket_digest,
                      "sealed": row.sealed, "sealed_ticket": row.sealed_ticket,
                      "expires_at": now + TTL // timedelta(microseconds=1) if ttl else None,
                      "now": now, "max_memories": options["max_memories"], "all_rows": 2**62,
                      "unknown_ticket": b""})

        def floor(count: bool) -> Callable[[], None]:
            store = counted if count else floors

            def call() -> None:
                row = store.sealed_row("C-held", sample_memory("C-held", next(numbers)))
                now = micros(datetime.now(UTC))
                floors_with[count](row, now,
                                   now + TTL // timedelta(microseconds=1) if ttl else None)
            return call

        calls = dict(zip(CALLS, (save, sql, floor(True), floor(False)), strict=True))
        times: dict[str, list[float]] = {name: [] for name in CALLS}
        for turn in range(pairs + 1):
            order = list(calls.items())
            for name, call in order[turn % len(order):] + order[:turn % len(order)]:
                started = time.perf_counter()
                call()
                if turn:
                    times[name].append(time.perf_counter() - started)
    saves, floor_times = times["save()"], times["floor"]
    block = len(saves) // BLOCKS
    ratios = [statistics.median(saves[i:i + block]) / statistics.median(floor_times[i:i + block])
              for i in range(0, block * BLOCKS, block)]
    return ({name: statistics.median(values) * 1000 for name, values in times.items()},
            min(ratios), max(ratios))


def sweep_against_save(subject: Subject, customers: int, sealed: dict[str, list[SealedRow]]
                       ) -> dict[str, float]:
    """One run on a fresh load: the median save, the sweep and the rows it expired, and a
    second sweep that expires nothing (the erasure alone)."""
    now = micros(START)
    expired, live = now - 86_400_000_000, now + TTL // timedelta(microseconds=1)
    with subject.store(retention=TTL, clock=lambda: START) as (store, connection):
        swept = {f"C-{n}": [(row, expired if i < EXPIRED_EACH else live)
                            for i, row in enumerate(sealed[f"C-{n}"])] for n in range(customers)}
        saving = {f"C-saving-{n}": [(row, live) for row in sealed[f"C-saving-{n}"]]
                  for n in range(SWEEP_SAVES + 1)}
        load(subject, connection, {**swept, **saving}, now - 2 * 86_400_000_000)
        numbers = itertools.count(10**6)
        saves = []
        for n in range(SWEEP_SAVES + 1):
            customer = f"C-saving-{n}"
            memory = sample_memory(customer, next(numbers))
            started = time.perf_counter()
            store.save(customer, memory)
            if n:
                saves.append(time.perf_counter() - started)
        started = time.perf_counter()
        rows = store.sweep()
        sweep_seconds = time.perf_counter() - started
        started = time.perf_counter()
        again = store.sweep()
        erase_seconds = time.perf_counter() - started
        assert rows == customers * EXPIRED_EACH and again == 0, (rows, again)
    return {"save": statistics.median(saves), "sweep": sweep_seconds, "rows": rows,
            "erase": erase_seconds}


def sealed_rows(key: str, folder: Path, customers: int) -> dict[str, list[SealedRow]]:
    """Each sweep customer's and saving customer's memories, sealed once for every run (the
    stores share the key)."""
    with SQLiteMemoryStore(folder / "sealing.sqlite3", key=key) as store:
        rows = {f"C-{n}": [store.sealed_row(f"C-{n}", sample_memory(f"C-{n}", t))
                           for t in range(EXPIRED_EACH + LIVE_EACH)] for n in range(customers)}
        rows |= {f"C-saving-{n}": [store.sealed_row(f"C-saving-{n}",
                                                    sample_memory(f"C-saving-{n}", t))
                                   for t in range(LIVE_EACH)] for n in range(SWEEP_SAVES + 1)}
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg-url", default=os.environ.get("MEMORYBOOK_TEST_PG_URL"))
    parser.add_argument("--only", choices=("save", "sweep"))
    parser.add_argument("--backend", choices=("SQLite", "PostgreSQL"), help="measure one alone")
    parser.add_argument("--saves", type=int, default=SAVES, help="pairs timed per size")
    parser.add_argument("--sweeps", type=int, default=SWEEP_RUNS, help="sweep runs per backend")
    parser.add_argument("--customers", type=int, default=CUSTOMERS)
    arguments = parser.parse_args()
    key = base64.urlsafe_b64encode(os.urandom(32)).decode()
    with tempfile.TemporaryDirectory() as folder:
        subjects: list[Subject] = [SQLite(Path(folder), key)]
        versions = f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}"
        if arguments.pg_url:
            postgres = PostgreSQL(arguments.pg_url, key)
            subjects.append(postgres)
            versions += f", PostgreSQL {postgres.server_version()}"
        print(f"{versions}, {os.cpu_count()} CPUs.")
        if not arguments.pg_url:
            print("PostgreSQL skipped: pass --pg-url or set MEMORYBOOK_TEST_PG_URL.")
        subjects = [subject for subject in subjects
                    if arguments.backend in (None, subject.name)]
        if arguments.only != "sweep":
            print(f"\nA save against its floor: medians of {arguments.saves} turns (each "
                  f"turn one of each, in a turning order); ratios to the floor, the ratio of "
                  f"the medians and its range over {BLOCKS} blocks of turns.\n")
            rows = []
            for subject in subjects:
                for ttl in (False, True):
                    for size in SIZES:
                        ms, low, high = save_against_floor(subject, size, ttl, arguments.saves)
                        rows.append([subject.name, "yes" if ttl else "no", f"{size:,}",
                                     f"{ms['save()']:.3f} ms", f"{ms['floor']:.3f} ms",
                                     f"{ms['save()'] / ms['floor']:.2f}x",
                                     f"{low:.2f}x-{high:.2f}x",
                                     f"{ms['its SQL'] / ms['floor']:.2f}x",
                                     f"{ms['floor + count'] / ms['floor']:.2f}x"])
            print(markdown_table(["backend", "retention", "memories held", "save()", "floor",
                                  "save() / floor", "range", "its SQL / floor",
                                  "floor + count / floor"], rows))
        if arguments.only != "save":
            customers = arguments.customers
            print(f"\nA sweep of {customers:,} customers' {customers * EXPIRED_EACH:,} expired "
                  f"memories ({EXPIRED_EACH} each, beside {LIVE_EACH} that have not expired): "
                  f"{arguments.sweeps} runs, each on a fresh load, against the median of "
                  f"{SWEEP_SAVES} saves in the same run (each for one of {SWEEP_SAVES + 1} more "
                  f"customers holding {LIVE_EACH} memories that have not expired).\n")
            sealed = sealed_rows(key, Path(folder), customers)
            rows = []
            for subject in subjects:
                for run in range(1, arguments.sweeps + 1):
                    figures = sweep_against_save(subject, customers, sealed)
                    per_row = figures["sweep"] / figures["rows"]
                    rows.append([subject.name, f"{run}", f"{figures['rows']:,}",
                                 f"{figures['sweep']:.2f} s", f"{figures['erase']:.2f} s",
                                 f"{per_row * 1000:.3f} ms", f"{figures['save'] * 1000:.3f} ms",
                                 f"{per_row / figures['save']:.2f}x"])
            print(markdown_table(["backend", "run", "rows expired", "sweep()",
                                  "a sweep expiring none", "per expired row", "save()",
                                  "per row / save"], rows))


if __name__ == "__main__":
    main()
