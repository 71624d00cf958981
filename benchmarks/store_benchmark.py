"""The memory store beside LangGraph's stores: put, recall and erasing a customer, ours/theirs.

    python -m benchmarks.store_benchmark                      # SQLite only
    python -m benchmarks.store_benchmark --pg-url postgresql://postgres@127.0.0.1:PORT/db
    python -m benchmarks.store_benchmark --profile            # where each operation's time goes

LangGraph's stores are an optional benchmark dependency, installed into .venv by
``.venv/bin/uv sync --inexact --group benchmark`` (pip: ``pip install
langgraph-checkpoint-sqlite langgraph-checkpoint-postgres``); without them the benchmark says so
in one line and measures ours alone. PostgreSQL is measured when a URL is given with --pg-url or
$MEMORYBOOK_TEST_PG_URL (``tools/postgres_server.sh start DIR`` prints one); each store works in
a new schema there, dropped afterwards.

For each backend (SQLite, PostgreSQL), with and without a time to live, and for a customer
holding 10, 100, 1,000 and 10,000 memories, it times, as medians of several runs in one process,
ours and theirs in turns (a call of ours, a call of theirs, and again):

* put: saving one more memory for that customer (``save()``; their ``put()``);
* recall: reading all of that customer's memories (``recall()``; their ``search()`` of the
  customer's namespace, with a limit that lets every item through);
* erase: deleting every memory of the customer (``forget_customer()``; they have no call for it,
  so their ``search()`` of the namespace and a ``batch()`` deleting each item it found).

Each customer's memories are loaded in bulk before the timed calls: ours written straight into
the tables from rows the store itself checked and sealed (``sealed_row()``), with the count a
save keeps; theirs with one ``batch()`` of puts. On SQLite, each load ends, for both stores,
by emptying the write-ahead log into the database file (untimed), so that no timed call copies
the load's pages. The store is opened with a cap above the largest size. Like ours, their
SQLite store runs in WAL mode; with a time to live, theirs omits expired items and does not
refresh them on reads, as ours does. It also prints what a save costs for a customer holding
2,000 memories against one holding 10, and for a customer at the cap (each save evicting the
oldest memory) against one below it.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import cProfile
import itertools
import json
import os
import platform
import pstats
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from benchmarks.markdown_table import markdown_table
from memorybook.store import (
    MemoryStore,
    PostgresMemoryStore,
    SealedRow,
    SQLiteMemoryStore,
)

SIZES = (10, 100, 1_000, 10_000)  # memories the measured customer holds
TTL = timedelta(days=365)
CAP = 2 * max(SIZES)  # the store's max_memories: no put evicts
PUTS = 60  # puts timed per size, after one warm-up
RECALLS = {10: 25, 100: 15, 1_000: 7, 10_000: 3}  # recalls timed per size
ERASURES = {10: 15, 100: 9, 1_000: 5, 10_000: 3}  # erasures timed per size, each of a reload
FLAT_SAVES = 60  # saves timed in turns for customers of 10 and of 2,000 memories
AT_THE_CAP = 100  # the cap of the store where a save evicts (the default is 50)
INSTALL = ".venv/bin/uv sync --inexact --group benchmark"


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


def medians_in_turns(actions: list[Callable[[], object]], repeats: int,
                     before: list[Callable[[], object]] | None = None) -> list[float]:
    """The median time of each action, in milliseconds, timed in turns (one of each, then again)
    ``repeats`` times after one warm-up, so that what the machine does meanwhile weighs on all
    alike; ``before[i]`` runs, untimed, ahead of each run of ``actions[i]``."""
    timings: list[list[float]] = [[] for _ in actions]
    for run in range(repeats + 1):
        for number, action in enumerate(actions):
            if before is not None:
                before[number]()
            started = time.perf_counter()
            action()
            if run:
                timings[number].append(time.perf_counter() - started)
    return [statistics.median(times) * 1000 for times in timings]


def micros(moment: datetime) -> int:
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


class Subject(Protocol):
    """One store under measure, with a customer loaded in bulk."""

    def load(self, customer_id: str, count: int) -> None: ...

    def put(self, customer_id: str, number: int) -> None: ...

    def recall(self, customer_id: str) -> int: ...

    def erase(self, customer_id: str) -> None: ...


class Ours:
    """memorybook's store, loaded through a connection of the benchmark's own, opened once (a
    connection made and closed for each load would leave its server process ending while the
    call after it runs, as theirs, loaded through their store, does not)."""

    def __init__(self, store: MemoryStore, loader: Any, mark: str, ttl: bool,
                 settle: Callable[[], object] = lambda: None) -> None:
        self.store, self._loader, self._mark, self._settle = store, loader, mark, settle
        self._ends = micros(datetime.now(UTC) + TTL) if ttl else None
        self._sealed: dict[tuple[str, int], list[SealedRow]] = {}

    def load(self, customer_id: str, count: int) -> None:
        key = (customer_id, count)
        first_load = key not in self._sealed
        if first_load:  # sealed once, loaded again after each erasure
            self._sealed[key] = [self.store.sealed_row(customer_id, sample_memory(customer_id, n))
                                 for n in range(count)]
        rows = self._sealed[key]
        mark, connection = self._mark, self._loader
        connection.cursor().executemany(
            f"INSERT INTO memorybook_memories ({', '.join(SealedRow._fields)}, expires_at)"
            f" VALUES ({', '.join([mark] * (len(SealedRow._fields) + 1))})",
            [(*row, self._ends) for row in rows],
        )
        connection.execute(  # the count that as many saves would have left
            "INSERT INTO memorybook_counts (customer_digest, memories)"
            f" VALUES ({mark}, {mark}) ON CONFLICT (customer_digest)"
            " DO UPDATE SET memories = memorybook_counts.memories + excluded.memories",
            (rows[0].customer_digest, count),
        )
        connection.commit()
        if first_load:  # the planner learns what the tables hold, once, as in long use
            connection.execute("ANALYZE")
            connection.commit()
        self._settle()

    def put(self, customer_id: str, number: int) -> None:
        self.store.save(customer_id, sample_memory(customer_id, number))

    def recall(self, customer_id: str) -> int:
        return len(self.store.recall(customer_id))

    def erase(self, customer_id: str) -> None:
        self.store.forget_customer(customer_id)


class Theirs:
    """LangGraph's store: a customer is a namespace, a memory an item keyed by its ticket."""

    def __init__(self, store: Any, ttl: bool, settle: Callable[[], object] = lambda: None
                 ) -> None:
        from langgraph.store.base import PutOp

        self.store, self._put_op, self._settle = store, PutOp, settle
        self._ttl = TTL / timedelta(minutes=1) if ttl else None

    def load(self, customer_id: str, count: int) -> None:
        self.store.batch([
            self._put_op(("memories", customer_id), f"T-{n}", sample_memory(customer_id, n),
                         ttl=self._ttl)
            for n in range(count)
        ])
        self._settle()

    def put(self, customer_id: str, number: int) -> None:
        self.store.put(("memories", customer_id), f"T-{number}",
                       sample_memory(customer_id, number), ttl=self._ttl)

    def recall(self, customer_id: str) -> int:
        return len(self.store.search(("memories", customer_id), limit=CAP))

    def erase(self, customer_id: str) -> None:
        namespace = ("memories", customer_id)
        items = self.store.search(namespace, limit=CAP)
        self.store.batch([self._put_op(namespace, item.key, None) for item in items])


def their_ttl(ttl: bool) -> dict | None:
    if not ttl:
        return None
    return {"default_ttl": TTL / timedelta(minutes=1), "refresh_on_read": False,
            "omit_expired": True}


class Backend(Protocol):
    name: str

    def ours(self, ttl: bool, cap: int = CAP) -> contextlib.AbstractContextManager[Ours]: ...

    def theirs(self, ttl: bool) -> contextlib.AbstractContextManager[Theirs]: ...


class SQLiteBackend:
    name = "SQLite"

    def __init__(self, folder: Path, key: str) -> None:
        self.folder, self.key = folder, key

    @contextlib.contextmanager
    def ours(self, ttl: bool, cap: int = CAP) -> Iterator[Ours]:
        path = self.folder / f"ours-{uuid.uuid4().hex[:8]}.sqlite3"
        with SQLiteMemoryStore(path, key=self.key, max_memories=cap,
                               retention=TTL if ttl else None) as store, contextlib.closing(
                sqlite3.connect(path)) as loader:
            yield Ours(store, loader, "?", ttl, settle=lambda: empty_the_log(loader))

    @contextlib.contextmanager
    def theirs(self, ttl: bool) -> Iterator[Theirs]:
        from langgraph.store.sqlite import SqliteStore

        path = self.folder / f"theirs-{uuid.uuid4().hex[:8]}.sqlite3"
        with SqliteStore.from_conn_string(str(path), ttl=their_ttl(ttl)) as store:
            store.conn.execute("PRAGMA journal_mode = WAL")
            store.setup()
            yield Theirs(store, ttl, settle=lambda: empty_the_log(store.conn))


def empty_the_log(connection: sqlite3.Connection) -> None:
    """Copy a SQLite store's write-ahead log into its database file and empty it, after a load.

    An erasure of ours empties the log (so that no copy of the erased rows stays in it), and
    would otherwise copy every page of the load into the file as well: work that their store
    does too, only later, once its log reaches SQLite's 1,000 pages. Emptied after each load,
    for both stores, the log holds only what the timed calls write."""
    [(busy, _, _)] = connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    assert not busy, "a reader kept the log from being emptied"


class PostgresBackend:
    name = "PostgreSQL"

    def __init__(self, url: str, key: str) -> None:
        import psycopg

        self.url, self.key, self._psycopg = url, key, psycopg

    @contextlib.contextmanager
    def schema(self) -> Iterator[str]:
        """A new schema, dropped afterwards; the URL that works in it."""
        name = f"memorybook_bench_{uuid.uuid4().hex[:8]}"
        with self._psycopg.connect(self.url, autocommit=True) as admin:
            admin.execute(f"CREATE SCHEMA {name}")
        separator = "&" if "?" in self.url else "?"
        try:
            yield f"{self.url}{separator}options=-csearch_path%3D{name}"
        finally:
            with self._psycopg.connect(self.url, autocommit=True) as admin:
                admin.execute(f"DROP SCHEMA {name} CASCADE")

    @contextlib.contextmanager
    def ours(self, ttl: bool, cap: int = CAP) -> Iterator[Ours]:
        with self.schema() as url, PostgresMemoryStore(
            url, key=self.key, max_memories=cap, retention=TTL if ttl else None
        ) as store, self._psycopg.connect(url) as loader:
            yield Ours(store, loader, "%s", ttl)

    @contextlib.contextmanager
    def theirs(self, ttl: bool) -> Iterator[Theirs]:
        from langgraph.store.postgres import PostgresStore

        with self.schema() as url, PostgresStore.from_conn_string(
            url, ttl=their_ttl(ttl)
        ) as store:
            store.setup()
            yield Theirs(store, ttl)

    def server_version(self) -> str:
        with self._psycopg.connect(self.url) as connection:
            return connection.execute("SHOW server_version").fetchone()[0]


def measure(subjects: list[Subject], size: int) -> list[dict[str, float]]:
    """Put, recall and erase for a customer of ``size`` memories in each store, timed in turns:
    milliseconds, medians, a dict for each store."""
    customer = f"C-{size}"
    for subject in subjects:
        subject.load(customer, size)
    numbers = [iter(range(size, size + PUTS + 1)) for _ in subjects]
    put = medians_in_turns([lambda s=subject, n=n: s.put(customer, next(n))
                            for subject, n in zip(subjects, numbers, strict=True)], PUTS)
    assert all(subject.recall(customer) == size + PUTS + 1 for subject in subjects)
    recall = medians_in_turns([lambda s=subject: s.recall(customer) for subject in subjects],
                              RECALLS[size])
    for subject in subjects:
        subject.erase(customer)
    erase = medians_in_turns([lambda s=subject: s.erase(customer) for subject in subjects],
                             ERASURES[size],
                             before=[lambda s=subject: s.load(customer, size)
                                     for subject in subjects])
    assert all(subject.recall(customer) == 0 for subject in subjects)
    return [{"put": put[number], "recall": recall[number], "erase": erase[number]}
            for number in range(len(subjects))]


def flat_save(backend: Backend) -> tuple[float, float]:
    """Our median save for a customer of 10 memories and for one of 2,000, with a retention,
    timed in turns."""
    with backend.ours(ttl=True) as ours:
        for size in (10, 2_000):
            ours.load(f"C-flat-{size}", size)
        timings: dict[int, list[float]] = {10: [], 2_000: []}
        for number in range(FLAT_SAVES + 1):
            for size, times in timings.items():
                started = time.perf_counter()
                ours.put(f"C-flat-{size}", 10**6 + number)
                if number:
                    times.append(time.perf_counter() - started)
    return tuple(statistics.median(timings[size]) * 1000 for size in (10, 2_000))


def save_at_the_cap(backend: Backend) -> tuple[float, float]:
    """Our median save for a customer below the cap and for one at it (each such save evicts
    the customer's oldest memory), without a retention, timed in turns. Each customer is in a
    store of its own: the at-the-cap store is what a store is once every customer saving is at
    the cap, and a store's save pays for what the save before it left (SQLite: an emptied log)."""
    with backend.ours(ttl=False, cap=AT_THE_CAP) as below, \
            backend.ours(ttl=False, cap=AT_THE_CAP) as at:
        below.load("C-below", 10)  # 10 + FLAT_SAVES + 1 stays below the cap
        at.load("C-at", AT_THE_CAP)
        numbers = itertools.count(10**6)

        def save(subject: Ours, customer: str, evicts: int) -> None:
            evicted = subject.store.save(customer, sample_memory(customer, next(numbers)))
            assert len(evicted) == evicts

        below_ms, at_ms = medians_in_turns([lambda: save(below, "C-below", 0),
                                            lambda: save(at, "C-at", 1)], FLAT_SAVES)
    return below_ms, at_ms


def compare(backend: Backend, with_langgraph: bool) -> list[list[str]]:
    """The table rows of one backend: per time to live and size, ours, theirs and the ratio."""
    rows = []
    for ttl in (False, True):
        for size in SIZES:
            with contextlib.ExitStack() as stores:
                subjects: list[Subject] = [stores.enter_context(backend.ours(ttl))]
                if with_langgraph:
                    subjects.append(stores.enter_context(backend.theirs(ttl)))
                mine, *others = measure(subjects, size)
            theirs = others[0] if others else None
            for operation in ("put", "recall", "erase"):
                shown = [f"{mine[operation]:.2f} ms"]
                if theirs is not None:
                    shown += [f"{theirs[operation]:.2f} ms",
                              f"{mine[operation] / theirs[operation]:.2f}x"]
                rows.append([backend.name, "yes" if ttl else "no", f"{size:,}", operation,
                             *shown])
    return rows


# Where the time of our calls goes, by the functions cProfile sees spend it.
COST_OF = {
    "validation": ("validation.py",),
    "encryption": ("encryption.py", "aead.AESGCM", "hmac", "_hashlib", "openssl"),
    "json": ("json/", "json.", "_json"),
    "SQL": ("sqlite3.Connection", "sqlite3.Cursor", "psycopg", "select.select",
            "postgres.py", "sqlite.py", "database.py", "writes.py", "socket"),
}


def profile(backend: Backend, size: int = 1_000) -> list[list[str]]:
    """Our put, recall and erase for a customer of ``size`` memories under cProfile: the share
    of each kind of work in the time of the call (own time of the functions of each kind)."""
    rows = []
    with backend.ours(ttl=True) as ours:
        customer = f"C-profiled-{size}"
        ours.load(customer, size)
        numbers = iter(range(size, size + 10**6))
        calls = {
            "put": (lambda: ours.put(customer, next(numbers)), 200, None),
            "recall": (lambda: ours.recall(customer), 20, None),
            "erase": (lambda: ours.erase(customer), 10, lambda: ours.load(customer, size)),
        }
        for operation, (call, repeats, before) in calls.items():
            profiler = cProfile.Profile()
            for _ in range(repeats):
                if before is not None:
                    before()
                profiler.enable()
                call()
                profiler.disable()
            stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
            total = sum(own for (_, _, own, _, _) in stats.values())
            shares = dict.fromkeys(COST_OF, 0.0)
            for (file, _, function), (_, _, own, _, _) in stats.items():
                where = f"{file}:{function}"
                for kind, signs in COST_OF.items():
                    if any(sign in where for sign in signs):
                        shares[kind] += own
                        break
            other = total - sum(shares.values())
            rows.append([backend.name, operation, f"{total / repeats * 1000:.2f} ms",
                         *(f"{share / total:.0%}" for share in [*shares.values(), other])])
    return rows


def langgraph_installed() -> bool:
    try:
        import langgraph.store.postgres  # noqa: F401
        import langgraph.store.sqlite  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg-url", default=os.environ.get("MEMORYBOOK_TEST_PG_URL"))
    parser.add_argument("--profile", action="store_true",
                        help="print where our calls spend their time, and measure nothing else")
    arguments = parser.parse_args()
    key = base64.urlsafe_b64encode(os.urandom(32)).decode()
    with_langgraph = langgraph_installed()
    with tempfile.TemporaryDirectory() as folder:
        backends: list[Any] = [SQLiteBackend(Path(folder), key)]
        if arguments.pg_url:
            backends.append(PostgresBackend(arguments.pg_url, key))
        versions = f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}"
        if arguments.pg_url:
            versions += f", PostgreSQL {backends[1].server_version()}"
        print(f"{versions}, {os.cpu_count()} CPUs; memories of about "
              f"{len(json.dumps(sample_memory('C-1042', 1))):,} bytes of JSON.")
        if not arguments.pg_url:
            print("PostgreSQL skipped: pass --pg-url or set MEMORYBOOK_TEST_PG_URL.")
        if arguments.profile:
            rows = [row for backend in backends for row in profile(backend)]
            print(markdown_table(["backend", "call (1,000 memories)", "mean", *COST_OF,
                                  "other"], rows))
            return
        if not with_langgraph:
            print(f"LangGraph's stores skipped: not installed (`{INSTALL}`).")
        print(f"Medians of {PUTS} puts, {min(RECALLS.values())} to {max(RECALLS.values())} "
              f"recalls and {min(ERASURES.values())} to {max(ERASURES.values())} erasures "
              f"per size{'; ratio: ours / theirs' if with_langgraph else ''}.")
        flat = []
        for backend in backends:
            few, many = flat_save(backend)
            flat.append([backend.name, f"{few:.2f} ms", f"{many:.2f} ms", f"{many / few:.2f}x"])
        print()
        print(markdown_table(["backend", "save, customer of 10", "of 2,000", "ratio"], flat))
        capped = []
        for backend in backends:
            below, at = save_at_the_cap(backend)
            capped.append([backend.name, f"{below:.2f} ms", f"{at:.2f} ms", f"{at / below:.2f}x"])
        print()
        print(markdown_table(["backend", "save below the cap", "at the cap (evicting)", "ratio"],
                             capped))
        rows = [row for backend in backends for row in compare(backend, with_langgraph)]
        headings = ["backend", "TTL", "memories", "call", "ours"]
        if with_langgraph:
            headings += ["LangGraph", "ours / theirs"]
        print()
        print(markdown_table(headings, rows))


if __name__ == "__main__":
    main()
