"""Memories that expire, erasure that leaves nothing in the files, and each customer's history.

Every test runs on each backend of FRESH_STORES, on a clock the test sets.
"""

from __future__ import annotations

import contextlib
import os
from datetime import UTC, datetime, timedelta

import pytest

from memorybook.store import MemoryStore, open_store
from memorybook.store.retention import MAX_RETENTION
from tests.helpers import Backend, make_memory, ticket_ids

START = datetime(2026, 8, 4, 9, 0, tzinfo=UTC)
DAY = timedelta(days=1)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


def rows_in_table(backend: Backend, table: str) -> int:
    connection, _ = backend.connect_directly()
    with contextlib.closing(connection):
        [(count,)] = connection.execute(f"SELECT COUNT(*) FROM {table}").fetchall()
    return count


def test_an_expired_memory_is_never_recalled_swept_or_not(backend: Backend) -> None:
    clock = Clock()
    with backend.open(retention=3 * DAY, clock=clock) as store:
        store.save("C-1042", make_memory("C-1042", "T-1"))  # ends with the retention
        store.save("C-1042", make_memory("C-1042", "T-2"), expires_at=START + 10 * DAY)
        clock.now = START + 3 * DAY - timedelta(microseconds=1)
        assert ticket_ids(store.recall("C-1042")) == ["T-1", "T-2"]
        clock.now = START + 3 * DAY
        assert ticket_ids(store.recall("C-1042")) == ["T-2"], (
            "recall() must leave out a memory whose expires_at has come, before any sweep(): "
            "see its WHERE clause in base.py."
        )
    assert rows_in_table(backend, "memorybook_memories") == 2  # expired, not yet swept
    with backend.open(clock=clock) as reopened:  # the expiry date is stored with the memory
        assert ticket_ids(reopened.recall("C-1042")) == ["T-2"]
        assert reopened.sweep() == 1
        assert ticket_ids(reopened.recall("C-1042")) == ["T-2"]
    assert rows_in_table(backend, "memorybook_memories") == 1


def test_open_store_passes_retention_and_clock_on(backend: Backend) -> None:
    clock = Clock()
    with open_store(backend.url, key=backend.key, retention=DAY, clock=clock) as store:
        store.save("C-1042", make_memory("C-1042", "T-1"))
        clock.now += DAY
        assert store.recall("C-1042") == []


def test_sweep_deletes_and_counts_only_expired_memories_of_every_customer(
    backend: Backend,
) -> None:
    clock = Clock()
    with backend.open(retention=2 * DAY, clock=clock) as store:
        for customer, tickets in (("C-1", 3), ("C-2", 2), ("C-3", 1)):
            for n in range(tickets):
                store.save(customer, make_memory(customer, f"T-{n}"))
        clock.now += DAY
        store.save("C-3", make_memory("C-3", "T-late"))  # expires a day after the others
        assert store.sweep() == 0
        clock.now += DAY
        assert store.sweep() == 6, "sweep() must return how many memories it deleted"
        assert store.sweep() == 0
        assert ticket_ids(store.recall("C-3")) == ["T-late"]
        clock.now += DAY
        assert store.sweep() == 1
    with backend.open(clock=clock) as forever:  # no retention: memories last until forgotten
        forever.save("C-4", make_memory("C-4", "T-1"))
        clock.now += 36_500 * DAY
        assert forever.sweep() == 0 and ticket_ids(forever.recall("C-4")) == ["T-1"]


def test_an_expired_memory_takes_no_room_under_the_cap(backend: Backend) -> None:
    clock = Clock()
    with backend.open(max_memories=2, clock=clock) as store:
        store.save("C-1042", make_memory("C-1042", "T-old"), expires_at=START + DAY)
        store.save("C-1042", make_memory("C-1042", "T-1"))
        clock.now += DAY
        assert store.save("C-1042", make_memory("C-1042", "T-2")) == [], (
            "save() must delete the customer's expired memories before counting against the cap"
        )
        assert ticket_ids(store.recall("C-1042")) == ["T-1", "T-2"]
        assert [e.event for e in store.history("C-1042")] == [
            "saved", "saved", "expired", "saved"
        ]


def test_history_lists_each_event_oldest_first_and_holds_no_memory_content(
    backend: Backend,
) -> None:
    clock = Clock()
    secret = "Our vault code is 4417, keep it safe"
    with backend.open(max_memories=2, clock=clock) as store:
        for n in (1, 2, 3):  # the third save evicts T-1
            store.save("C-1042", make_memory("C-1042", f"T-{n}", text=secret))
            clock.now += DAY
        store.forget("C-1042", "T-2")
        clock.now += DAY
        store.supersede("C-1042", "T-3")
        store.save("C-1042", make_memory("C-1042", "T-4", text=secret), expires_at=clock.now + DAY)
        clock.now += 2 * DAY
        assert store.sweep() == 1
        assert store.recall("C-1042") == []
        history = store.history("C-1042")
    expected = [
        ("saved", "T-1", START),
        ("saved", "T-2", START + DAY),
        ("saved", "T-3", START + 2 * DAY),
        ("evicted", "T-1", START + 2 * DAY),
        ("forgotten", "T-2", START + 3 * DAY),
        ("superseded", "T-3", START + 4 * DAY),
        ("saved", "T-4", START + 4 * DAY),
        ("expired", "T-4", START + 5 * DAY),  # when it expired, not when it was swept
    ]
    assert [tuple(event) for event in history] == expected, (
        "history() must list every save, eviction, forget, supersession and expiry in order"
    )
    assert secret not in repr(history)
    raw_history = rows_of(backend, "memorybook_history")
    for plain in (secret.encode(), b"T-1", b"T-4", b"Acme Corp", b"C-1042"):
        assert plain not in raw_history, f"the history table holds {plain!r} in the clear"
    with backend.open() as reopened:  # it outlives the memories it describes
        assert [tuple(event) for event in reopened.history("C-1042")] == expected


def test_forget_customer_leaves_no_history_behind(backend: Backend) -> None:
    with backend.open() as store:
        for customer in ("C-1", "C-2"):
            store.save(customer, make_memory(customer, "T-1"))
            store.save(customer, make_memory(customer, "T-2"))
            store.forget(customer, "T-1")
        store.forget_customer("C-1")
        assert store.history("C-1") == []
        assert [e.event for e in store.history("C-2")] == ["saved", "saved", "forgotten"]
        store.forget("C-2", "T-2")  # no memory left, only its history
        store.forget_customer("C-2")
        assert store.history("C-2") == []
    assert rows_in_table(backend, "memorybook_history") == 0, (
        "forget_customer() must delete the customer's history rows too"
    )


def test_a_history_row_damaged_in_place_is_listed_without_its_ticket(backend: Backend) -> None:
    with backend.open() as store:
        for ticket in ("T-1", "T-2"):
            store.save("C-1042", make_memory("C-1042", ticket))
        backend.flip_a_byte("memorybook_history", "sealed_ticket")  # T-1's "saved"
        history = store.history("C-1042")
        assert [(event.event, event.ticket_id) for event in history] == [
            ("saved", None), ("saved", "T-2")], (
            "history() must list a row whose ticket id cannot be read, without it, rather than "
            f"refuse the customer's whole history (memorybook/store/base.py): {history}")
        assert any("integrity check" in notice for notice in store.notices), store.notices
        assert ticket_ids(store.recall("C-1042")) == ["T-1", "T-2"]


ERASURES = ["forget", "forget_customer", "eviction", "expiry"]


@pytest.mark.parametrize("erasure", ERASURES)
def test_an_erased_memorys_ciphertext_is_gone_from_the_database_files(
    backend: Backend, erasure: str
) -> None:
    clock = Clock()
    with backend.open(max_memories=2, clock=clock) as store:
        kept = save_and_seal(backend, store, "C-keep", "T-kept", clock)
        erased = [
            save_and_seal(backend, store, "C-1042", "T-1", clock, big=True),
            save_and_seal(backend, store, "C-1042", "T-2", clock),
        ]
        assert all(sealed in backend.raw_bytes() for sealed in [kept, *erased])  # control
        if erasure == "forget":
            store.forget("C-1042", "T-1")
            store.forget("C-1042", "T-2")
        elif erasure == "forget_customer":
            store.forget_customer("C-1042")
        elif erasure == "eviction":
            store.save("C-1042", make_memory("C-1042", "T-3"))
            store.save("C-1042", make_memory("C-1042", "T-4"))
        else:
            clock.now += 30 * DAY
        if backend.erases_without_sweep and erasure in ("forget", "forget_customer"):
            assert not any(sealed in backend.raw_bytes() for sealed in erased), (
                f"after {erasure}, the memory's ciphertext is still in the database files: "
                "SQLite needs secure_delete on and the WAL checkpointed (after_forget())"
            )
        if erasure == "expiry":
            store.sweep()  # deletes them: on PostgreSQL, transactions begun before may read them
        backend.wait_for_older_transactions()  # PostgreSQL: what they may read, vacuum keeps
        store.sweep()
        raw = backend.raw_bytes()
        for sealed in erased:
            assert sealed not in raw, (
                f"after {erasure} and sweep(), the memory's ciphertext is still in the database "
                "files: see erase_deleted_rows() of the backend"
            )
        if erasure != "expiry":
            assert kept in raw


def save_and_seal(
    backend: Backend, store: MemoryStore, customer: str, ticket: str, clock: Clock,
    big: bool = False,
) -> bytes:
    """Save a memory (expiring in 10 days) and return a slice of its stored ciphertext."""
    text = os.urandom(3000 if big else 200).hex()  # a big one is stored out of line (TOAST)
    store.save(customer, make_memory(customer, ticket, text=text), expires_at=clock.now + 10 * DAY)
    connection, mark = backend.connect_directly()
    with contextlib.closing(connection):
        [(sealed,)] = connection.execute(
            "SELECT sealed FROM memorybook_memories ORDER BY id DESC LIMIT 1"
        ).fetchall()
    return bytes(sealed)[20:80]


def rows_of(backend: Backend, table: str) -> bytes:
    connection, _ = backend.connect_directly()
    with contextlib.closing(connection):
        rows = connection.execute(f"SELECT * FROM {table}").fetchall()
    return b"\n".join(
        bytes(value) if isinstance(value, (bytes, memoryview)) else str(value).encode()
        for row in rows
        for value in row
    )


def test_bad_retention_clock_and_expiry_dates_are_refused_and_nothing_is_saved(
    backend: Backend,
) -> None:
    for retention in (timedelta(0), -DAY, 3, "3 days"):
        with pytest.raises(ValueError, match="retention must be a positive"):
            backend.open(retention=retention)
    for retention in (MAX_RETENTION + timedelta(microseconds=1), timedelta.max):
        with pytest.raises(ValueError, match="retention must be at most 36,525 days"):
            backend.open(retention=retention)  # timedelta.max overflowed every save
    with backend.open(retention=MAX_RETENTION) as store:
        store.save("C-1042", make_memory("C-1042", "T-0"))
        assert ticket_ids(store.recall("C-1042")) == ["T-0"]
        store.forget_customer("C-1042")
    with pytest.raises(ValueError, match="clock must be a function"):
        backend.open(clock=START)
    clock = Clock()
    with backend.open(clock=clock) as store:
        memory = make_memory("C-1042", "T-1")
        with pytest.raises(ValueError, match="timezone-aware"):
            store.save("C-1042", memory, expires_at=datetime(2026, 9, 1))
        with pytest.raises(ValueError, match="could never be recalled"):
            store.save("C-1042", memory, expires_at=START)
        clock.now = datetime(2026, 9, 1)  # a naive clock
        with pytest.raises(ValueError, match="clock must be a timezone-aware"):
            store.recall("C-1042")
        clock.now = START
        assert store.recall("C-1042") == [] and store.history("C-1042") == []
