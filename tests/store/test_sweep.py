"""sweep() expires many customers' memories a transaction, each once, with its history and the
customers' counts exact: across batches, beside another sweep and beside saves and forgets.

The customers are loaded straight into the tables, as that many saves would have left them.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from memorybook.store import MemoryStore
from memorybook.store.writes import SWEEP_BATCH_CUSTOMERS, SWEEP_BATCH_ROWS
from tests.helpers import Backend, make_memory, ticket_ids
from tests.store.test_postgres import RoundTripCounter

START = datetime(2026, 8, 4, 9, 0, tzinfo=UTC)
EXPIRED = START - timedelta(days=1)  # before the stores' clock
LIVE = START + timedelta(days=30)


def load(backend: Backend, customers: dict[str, list[tuple[str, datetime]]]) -> dict[str, bytes]:
    """Each customer's memories (ticket id, expiry), oldest first, with the count as many saves
    would have left; returns each customer's digest."""
    with backend.open() as store:
        rows = {customer: [(store.sealed_row(customer, make_memory(customer, ticket)), ends)
                           for ticket, ends in memories]
                for customer, memories in customers.items()}
    micros = lambda moment: (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(  # noqa: E731
        microseconds=1)
    connection, mark = backend.connect_directly()
    with contextlib.closing(connection):
        cursor = connection.cursor()
        cursor.executemany(
            "INSERT INTO memorybook_memories (customer_digest, ticket_digest, sealed,"
            f" sealed_ticket, expires_at) VALUES ({', '.join([mark] * 5)})",
            [(*row, micros(ends)) for memories in rows.values() for row, ends in memories])
        cursor.executemany(
            f"INSERT INTO memorybook_counts (customer_digest, memories) VALUES ({mark}, {mark})",
            [(memories[0][0].customer_digest, len(memories)) for memories in rows.values()])
        connection.commit()
    return {customer: memories[0][0].customer_digest for customer, memories in rows.items()}


def counts_and_expiries(backend: Backend) -> tuple[dict[bytes, tuple[int, int]], Counter]:
    """Each customer's count and the rows it holds; and how many `expired` history rows each
    customer has."""
    connection, _ = backend.connect_directly()
    with contextlib.closing(connection):
        counts = {bytes(customer): (count, rows) for customer, count, rows in connection.execute(
            "SELECT customer_digest, memories, (SELECT COUNT(*) FROM memorybook_memories m"
            " WHERE m.customer_digest = c.customer_digest) FROM memorybook_counts c").fetchall()}
        expired = Counter({bytes(customer): n for customer, n in connection.execute(
            "SELECT customer_digest, COUNT(*) FROM memorybook_history WHERE event = 'expired'"
            " GROUP BY customer_digest").fetchall()})
    return counts, expired


def assert_exact(backend: Backend, digests: dict[str, bytes], expired_each: dict[str, int],
                 where: str) -> None:
    counts, expired = counts_and_expiries(backend)
    wrong = {customer: counts[digest] for customer, digest in digests.items()
             if counts[digest][0] != counts[digest][1]}
    assert not wrong, (
        f"{where}: these customers' counts (count, rows held) are not the rows they hold "
        f"({backend.name}): {dict(list(wrong.items())[:5])}. Every statement that deletes rows "
        "must take them off the count, under the customer's lock (memorybook/store/writes.py)")
    twice = {customer: expired[digest] for customer, digest in digests.items()
             if expired[digest] != expired_each[customer]}
    assert not twice, (
        f"{where}: these customers' `expired` history rows are not one per memory that expired "
        f"({backend.name}): {dict(list(twice.items())[:5])}, expected "
        f"{ {c: expired_each[c] for c in list(twice)[:5]} }. A memory must expire once: a "
        "sweep's batch and a save's expiry each take the customer's lock, and what they delete "
        "is what they copy into history (writes.py SWEEP and SAVE).")


def test_a_sweep_across_batches_expires_each_memory_once_in_order_with_exact_counts(
    backend: Backend,
) -> None:
    # More customers than a batch holds, and one with more expired memories than a batch: the
    # latter's rows expire in another order than they were saved, as history lists them.
    customers = {f"C-{n}": [("T-a", EXPIRED), ("T-b", EXPIRED - timedelta(hours=1)),
                            ("T-live", LIVE)] for n in range(SWEEP_BATCH_CUSTOMERS + 50)}
    many = SWEEP_BATCH_ROWS + 1
    customers["C-many"] = [(f"T-{n}", EXPIRED - timedelta(seconds=n)) for n in range(many)]
    customers["C-many"].append(("T-live", LIVE))
    digests = load(backend, customers)
    connection, mark = backend.connect_directly()
    with contextlib.closing(connection):
        [(sealed_of_c0,)] = connection.execute(
            "SELECT sealed FROM memorybook_memories WHERE customer_digest = "
            f"{mark} ORDER BY id LIMIT 1", (digests["C-0"],)).fetchall()
    with backend.open(clock=lambda: START) as store:
        assert store.sweep() == 2 * SWEEP_BATCH_CUSTOMERS + 100 + many, (
            "sweep() must return how many memories it expired, every batch's")
        backend.wait_for_older_transactions()  # PostgreSQL: what they may read, vacuum keeps
        assert store.sweep() == 0
        for customer in ("C-0", f"C-{SWEEP_BATCH_CUSTOMERS + 49}", "C-many"):
            assert ticket_ids(store.recall(customer)) == ["T-live"]
        assert [(event.ticket_id, event.at) for event in store.history("C-0")] == [
            ("T-b", EXPIRED - timedelta(hours=1)), ("T-a", EXPIRED)], (
            "a customer's memories expire into history each at the time it expired, in that "
            "order (writes.py SWEEP's ORDER BY)")
        many_history = store.history("C-many")
        assert [event.ticket_id for event in many_history] == [
            f"T-{n}" for n in reversed(range(many))]
    assert_exact(backend, digests, {c: len(m) - 1 for c, m in customers.items()}, "after sweep()")
    assert bytes(sealed_of_c0)[20:80] not in backend.raw_bytes(), (
        "sweep() must still rid the files of what its batches deleted (erase_deleted_rows())")


def transactions_of_a_sweep(backend: Backend, customers: int,
                            sweep: Callable[[MemoryStore], object]) -> int:
    """Times a sweep of `customers` customers, each with one memory expired, waited for its
    database: SQLite's transactions begun, PostgreSQL's round trips (each batch one)."""
    load(backend, {f"C-{n}": [("T-1", EXPIRED)] for n in range(customers)})
    if backend.name == "sqlite":
        with backend.open(clock=lambda: START) as store:
            statements: list[str] = []
            connection = store._database.connection  # type: ignore[attr-defined]
            connection.set_trace_callback(statements.append)
            sweep(store)
            connection.set_trace_callback(None)
        return sum(statement.startswith("BEGIN") for statement in statements)
    proxy = RoundTripCounter(backend.url)
    try:
        with backend.store_class(proxy.url, key=backend.key, clock=lambda: START) as store:
            return proxy.during(lambda: sweep(store))
    finally:
        proxy.close()


def test_a_sweep_of_many_customers_commits_a_batch_at_a_time(backend: Backend) -> None:
    customers = 2 * SWEEP_BATCH_CUSTOMERS + 1
    swept: list[object] = []
    waits = transactions_of_a_sweep(backend, customers, lambda store: swept.append(store.sweep()))
    assert swept == [customers]
    batches = math.ceil(customers / SWEEP_BATCH_CUSTOMERS)
    # PostgreSQL: besides the batches, the search for expired memories and VACUUM FULL of the
    # four tables.
    most = batches + (0 if backend.name == "sqlite" else 5)
    assert batches <= waits <= most, (
        f"A sweep of {customers} customers' expired memories waited for the database {waits} "
        f"times ({backend.name}), where batches of at most {SWEEP_BATCH_CUSTOMERS} customers "
        f"take {batches} transactions: sweep() must expire a batch of customers in one "
        "transaction (SQLite) or one call of memorybook_sweep() (PostgreSQL), and no more than "
        "a batch in one (memorybook/store/base.py sweep(), writes.py SWEEP)")


def test_two_sweeps_at_once_expire_each_memory_once(backend: Backend) -> None:
    customers = {f"C-{n}": [("T-old", EXPIRED), ("T-live", LIVE)]
                 for n in range(2 * SWEEP_BATCH_CUSTOMERS)}
    digests = load(backend, customers)
    swept, failed = at_once(backend, [lambda store: store.sweep()] * 2)
    assert not failed, f"a sweep beside another failed ({backend.name}): {failed}"
    assert sum(swept) == len(customers), (
        f"two sweeps at once returned {swept}, for {len(customers)} memories expired: each "
        "memory expires once, in one of them")
    assert_exact(backend, digests, dict.fromkeys(customers, 1), "after two sweeps at once")


def test_a_sweep_beside_saves_and_forgets_keeps_history_and_counts_exact(
    backend: Backend,
) -> None:
    # At the cap (3), each save first expires its customer's two expired memories, as the
    # sweep may at the same moment; a forget takes the live memory off the count meanwhile.
    customers = {f"C-{n}": [("T-old", EXPIRED), ("T-older", EXPIRED - timedelta(hours=1)),
                            ("T-live", LIVE)] for n in range(SWEEP_BATCH_CUSTOMERS + 50)}
    digests = load(backend, customers)
    saved, forgotten = list(customers)[::3], list(customers)[1::3]

    def save(store: MemoryStore) -> None:
        for customer in saved:
            assert store.save(customer, make_memory(customer, "T-new")) == []

    def forget(store: MemoryStore) -> None:
        for customer in forgotten:
            assert ticket_ids(store.forget(customer, "T-live")) == ["T-live"]

    results, failed = at_once(backend, [lambda store: store.sweep(), save, forget], cap=3)
    assert not failed, f"a sweep beside saves and forgets failed ({backend.name}): {failed}"
    with backend.open(max_memories=3, clock=lambda: START) as store:
        assert store.sweep() == 0, (
            "every memory expired must have gone in the sweep, or in a save at the cap")
        for customer in saved[:20] + forgotten[:20]:
            expected = ["T-live", "T-new"] if customer in saved else []
            assert ticket_ids(store.recall(customer)) == expected
    assert_exact(backend, digests, dict.fromkeys(customers, 2),
                 "after a sweep beside saves and forgets")


def at_once(backend: Backend, calls: list[Callable[[MemoryStore], object]], cap: int = 50
            ) -> tuple[list[object], list[BaseException]]:
    """Each call on a store object of its own (a connection each), in threads released at
    once; what they returned, and what they raised."""
    stores = [backend.open(max_memories=cap, clock=lambda: START) for _ in calls]
    ready = threading.Barrier(len(calls))
    results: list[object] = [None] * len(calls)
    failed: list[BaseException] = []

    def run(number: int) -> None:
        ready.wait()
        try:
            results[number] = calls[number](stores[number])
        except BaseException as error:  # noqa: BLE001 -- reported by the test
            failed.append(error)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(len(calls))]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not any(thread.is_alive() for thread in threads), (
            f"calls beside a sweep still running after 60 s ({backend.name}): a deadlock")
    finally:
        for store in stores:
            store.close()
    return results, failed


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_batch_leaves_out_a_customer_whose_lock_is_held_and_sweeps_it_once_free(
    backend: Backend,
) -> None:
    """A customer another session holds (a save in progress, another replica's batch) is not
    waited for inside a batch, which would hold the other customers' locks meanwhile: the
    batch sweeps the others, and the sweep then waits for that customer alone."""
    digests = load(backend, {customer: [("T-old", EXPIRED)] for customer in ("C-1", "C-2")})
    release = threading.Event()

    def hold_c1() -> None:
        with backend.open() as holder, holder.customer_lock("C-1"):
            held.set()
            release.wait(30)

    held = threading.Event()
    holder = threading.Thread(target=hold_c1)
    holder.start()
    try:
        assert held.wait(30)
        with backend.open(clock=lambda: START) as store:
            sweeping = threading.Thread(target=lambda: swept.append(store.sweep()))
            swept: list[int] = []
            sweeping.start()
            with_c2_gone = wait_until(lambda: counts_and_expiries(backend)[1][digests["C-2"]])
            assert with_c2_gone and not swept, (
                "while C-1's lock was held, the sweep must have expired C-2's memory in its "
                "batch (pg_try_advisory_xact_lock in memorybook_sweep) and be waiting for C-1")
            release.set()
            sweeping.join(30)
        assert swept == [2]
    finally:
        release.set()
        holder.join(30)
    assert_exact(backend, digests, {"C-1": 1, "C-2": 1}, "after a held customer was freed")


def wait_until(condition: Callable[[], object], seconds: float = 20) -> bool:
    deadline = threading.Event()
    timer = threading.Timer(seconds, deadline.set)
    timer.start()
    try:
        while not deadline.is_set():
            if condition():
                return True
            deadline.wait(0.02)
        return False
    finally:
        timer.cancel()
