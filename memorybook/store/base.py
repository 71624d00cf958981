"""What a store is, and what every store does whatever its database.

The protocols the wrapper relies on (Memories, MemoryStore), and EncryptedStore: the calls,
sealing rows, eviction, opening.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from datetime import datetime, timedelta
from typing import Any, NamedTuple, Protocol, Self, runtime_checkable

from memorybook.store.database import SqlDatabase
from memorybook.store.encryption import HISTORY_AAD, Keys, decode_all
from memorybook.store.pending import StoredGates
from memorybook.store.retention import (
    FORGOTTEN,
    SUPERSEDED,
    Clock,
    HistoryEvent,
    checked_clock,
    checked_retention,
    micros,
    moment,
)
from memorybook.store.rotation import RotatingKeys
from memorybook.store.validation import (
    DamagedMemoryError,
    MemoryStoreError,
    StoreInputError,
    UnreadableMemory,
    check_limits,
    checked_customer_id,
    checked_memory_json,
    checked_ticket_id,
    memory_not_found,
    shown,
)
from memorybook.store.writes import (
    SWEEP_BATCH_CUSTOMERS,
    SWEEP_BATCH_ROWS,
    UNKNOWN_TICKET,
)

MAX_MEMORIES_PER_CUSTOMER = 50
_MICROSECOND = timedelta(microseconds=1)
_ALL_ROWS = 2**62  # a LIMIT that limits nothing, spelt alike in SQLite and PostgreSQL
_HISTORY_AAD = HISTORY_AAD  # what a sealed ticket id is bound to, besides its customer's digest


def ticket_id_of_memory(memory: dict) -> str:
    return memory["request"]["ticket"]["id"]


@runtime_checkable
class Memories(Protocol):
    """Each customer's memories, oldest first: notebook 3's in-kernel ones, or a store.

    `save()` returns the memories it evicted to make room; `forget()` returns those it erased and
    raises a `KeyError` when the customer has no memory of that ticket.
    """

    def recall(self, customer_id: str) -> list[dict]: ...

    def save(self, customer_id: str, memory: dict) -> list[dict]: ...

    def forget(self, customer_id: str, ticket_id: str) -> list[dict]: ...

    def forget_customer(self, customer_id: str) -> list[dict]: ...


@runtime_checkable
class MemoryStore(Memories, Protocol):
    """Memories kept outside the process: a store also recalls one ticket's memories, lets
    memories expire (``sweep()``, ``save(expires_at=...)``), keeps their ``history()``, reports
    what it noticed, and closes. What a serving process keeps beside them (pending gates, turns)
    is a protocol of its own: GateRecords, memorybook/store/pending.py."""

    notices: list[str]

    def save(self, customer_id: str, memory: dict,
             expires_at: datetime | None = None) -> list[dict]: ...

    def recall_ticket(self, customer_id: str, ticket_id: str) -> list[dict]: ...

    def supersede(self, customer_id: str, ticket_id: str) -> list[dict]: ...

    def sweep(self) -> int: ...

    def history(self, customer_id: str) -> list[HistoryEvent]: ...

    def close(self) -> None: ...

    def __enter__(self) -> MemoryStore: ...

    def __exit__(self, *exc_info: object) -> None: ...


def _batches(expired: list[tuple[bytes, int]]) -> Iterator[list[bytes]]:
    """Customers with memories expired (digest, how many), in batches of at most
    SWEEP_BATCH_CUSTOMERS customers and SWEEP_BATCH_ROWS memories (a customer with more, in a
    batch of its own)."""
    batch: list[bytes] = []
    rows = 0
    for customer, count in expired:
        if batch and (len(batch) == SWEEP_BATCH_CUSTOMERS or rows + count > SWEEP_BATCH_ROWS):
            yield batch
            batch, rows = [], 0
        batch.append(customer)
        rows += count
    if batch:
        yield batch


class MemoriesRead(list[dict]):
    """The memories a deleting call read back, oldest first, in a list (what ``forget()``,
    ``forget_customer()`` and ``save()``'s evictions return). ``unreadable`` counts the rows it
    deleted all the same that could not be read (damaged, or nested too deeply), which the list
    leaves out: ``len(read) + read.unreadable`` rows went."""

    unreadable: int = 0


class SealedRow(NamedTuple):
    """One memory as a row of the memories table stores it; its expiry date aside, in the
    table's column order."""

    customer_digest: bytes
    ticket_digest: bytes
    sealed: bytes
    sealed_ticket: bytes  # the ticket id, sealed for history


def _one_call_at_a_time(method: Callable) -> Callable:
    """Serialise calls on one store object, so that threads can share it.

    A call waits for the calls of other threads on the object, then for the database, within its
    ``timeout`` in all. It first lets the database make sure its connection is usable
    (``before_call``), and is named in the errors it raises.
    """

    @functools.wraps(method)
    def serialised(self: EncryptedStore, *args: Any, **kwargs: Any) -> Any:
        with self._call(f"{method.__name__}()"):
            return method(self, *args, **kwargs)

    return serialised


class EncryptedStore(StoredGates, RotatingKeys):
    """A memory store on any SQL database: checks, encryption, eviction, one call at a time,
    the gates still to run after their reply (GateRecords, memorybook/store/pending.py), and keys
    that rotate (memorybook/store/rotation.py).

    A backend's store class passes ``connect``, which opens its database (an ``SqlDatabase``).
    The store is open once the database's key check matches the key; if anything fails before,
    the database is closed again. ``open_store()`` finds the class by its URL's scheme
    (``opening.BACKENDS``) and opens it with ``from_url()``.
    """

    url_example: str  # a URL naming such a store, as open_store()'s error messages show it

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        """Open the store ``url`` names (its scheme is this backend's). A backend whose location
        is not the URL itself overrides this."""
        return cls(url, **options)

    def __init__(
        self,
        location: str,
        max_memories: int,
        timeout: float,
        connect: Callable[[], SqlDatabase],
        *,
        retention: timedelta | None = None,
        clock: Clock | None = None,
    ) -> None:
        check_limits(max_memories, timeout)
        self.location = location
        self.max_memories = max_memories
        self.timeout = timeout
        self.retention = checked_retention(retention)  # a new memory's time to live; None: none
        self.clock = checked_clock(clock)  # the time, as an aware datetime
        self.notices: list[str] = []
        self._keys: Keys | None = None
        self._is_open = False
        self._lock = threading.RLock()
        self._database = connect()
        self._is_open = True
        try:
            given, _ = self._database.open_tables()
            # Checked against the key check (and sealing with its key while upgrading), then
            # sealing with the first key given (memorybook/store/rotation.py).
            self._keys = self._keys_of_the_store(given)
            self._database.upgrade(lambda customer, ticket, sealed: self._sealed_ticket(
                customer, self._ticket_in(customer, ticket, sealed)))
            self._keys = self._seal_with_the_first_key(given)
        except BaseException:
            self.close()
            raise

    # -- the MemoryStore interface -------------------------------------------------

    @_one_call_at_a_time
    def recall(self, customer_id: str) -> list[dict]:
        """Return this customer's memories, oldest first ([] for a customer with none).

        An expired memory is never among them, swept or not.
        """
        return self._recalled(customer_id)

    @_one_call_at_a_time
    def recall_ticket(self, customer_id: str, ticket_id: str) -> list[dict]:
        """Return this customer's memories of one ticket, oldest first ([] for none): those
        ``forget(customer_id, ticket_id)`` would erase, expired ones aside."""
        return self._recalled(customer_id, checked_ticket_id(ticket_id))

    def _recalled(self, customer_id: str, ticket_id: str | None = None) -> list[dict]:
        """The customer's memories (of ``ticket_id`` alone, if given) that have not expired; a
        DamagedMemoryError, saying how to free the customer, when one cannot be read."""
        keys = self._open_keys()
        customer = keys.customer_digest(checked_customer_id(customer_id))
        of_ticket, parameters = "", (customer, self._now())
        if ticket_id is not None:
            of_ticket = " AND ticket_digest = ?"
            parameters += (keys.ticket_digest(customer_id, ticket_id),)
        rows = self._database.run(
            "SELECT ticket_digest, sealed FROM memorybook_memories WHERE customer_digest = ?"
            f" AND (expires_at IS NULL OR expires_at > ?){of_ticket} ORDER BY id",
            parameters,
        )
        memories = self._opened(customer, rows)
        for position, unreadable in enumerate(memories, start=1):
            if isinstance(unreadable, UnreadableMemory):
                ticket_id = self._damaged_rows_ticket(customer_id, customer,
                                                      rows[position - 1][0])
                remove = ("Remove it with forget(customer_id, ticket_id) if you know its ticket"
                          if ticket_id is None else
                          f"Remove it with forget({shown(customer_id)}, {shown(ticket_id)})")
                raise DamagedMemoryError(
                    f"Memory number {position} of {len(rows)} (oldest first) of customer "
                    f"{shown(customer_id)}"
                    f"{'' if ticket_id is None else f', of ticket {shown(ticket_id)},'} in "
                    f"{self.location} {unreadable}, and cannot be read. {remove}, or erase all "
                    "of this customer's memories with forget_customer(customer_id); or restore "
                    "the store from a backup.", customer_id, ticket_id
                ) from None
        return memories

    def _damaged_rows_ticket(self, customer_id: str, customer: bytes, ticket: object
                             ) -> str | None:
        """The ticket id of an unreadable memory's row, from the copy sealed beside it for
        history, when that opens and is the ticket of the row's digest (so that ``forget()`` of
        it erases the row); otherwise None (text where the digest belongs matches none)."""
        keys = self._open_keys()
        for (sealed_ticket,) in self._database.run(  # each row of that digest, till one opens
                "SELECT sealed_ticket FROM memorybook_memories WHERE customer_digest = ?"
                " AND ticket_digest = ? AND sealed_ticket IS NOT NULL", (customer, ticket)):
            try:
                ticket_id = keys.unseal(customer, _HISTORY_AAD, sealed_ticket)
            except UnreadableMemory:
                continue
            if isinstance(ticket_id, str) and keys.ticket_digest(customer_id, ticket_id) == ticket:
                return ticket_id
        return None

    def save(
        self, customer_id: str, memory: dict, expires_at: datetime | None = None
    ) -> list[dict]:
        """Append a memory; return the memories evicted by the cap, oldest first (usually []).

        ``expires_at`` (an aware datetime, after the clock's time) ends this memory; without it,
        the memory ends ``retention`` after the clock's time, or never when the store has none.
        Expired memories take no room under the cap: a save that reaches it deletes the
        customer's expired memories before it evicts any (below the cap they wait for
        ``sweep()``; none is ever recalled). What a save deletes is gone from recall at once,
        and from the database's files at the next ``sweep()``.
        """
        # Checked before the call takes the store's lock: however large, it holds up no other.
        customer_id = checked_customer_id(customer_id)
        ticket_id, text = checked_memory_json(customer_id, memory)
        with self._call("save()"):
            return self._save_checked(customer_id, ticket_id, text, expires_at)

    def _save_checked(self, customer_id: str, ticket_id: str, text: str,
                      expires_at: datetime | None, gate_id: int | None = None
                      ) -> list[dict] | None:
        """save(), once checked; with ``gate_id``, the pending gate's row is deleted in the same
        transaction, and None is returned, with nothing saved, when that row is gone."""
        customer, ticket, sealed, sealed_ticket = self._sealed(customer_id, ticket_id, text)
        now = self._now()
        if expires_at is not None:
            ends = micros(expires_at, "expires_at")
            if ends <= now:
                raise StoreInputError(
                    f"expires_at {expires_at.isoformat()} is not after the store's clock "
                    f"({moment(now).isoformat()}): such a memory could never be recalled, so it "
                    "was not saved."
                )
        else:
            ends = None if self.retention is None else now + self.retention // _MICROSECOND
        parameters = {
            "customer": customer, "ticket": ticket, "sealed": sealed,
            "sealed_ticket": sealed_ticket, "expires_at": ends,
            "now": now, "max_memories": self.max_memories, "all_rows": _ALL_ROWS,
            "unknown_ticket": UNKNOWN_TICKET,
        }
        # What the save deletes (expired memories, those over the cap, a settled gate's row)
        # leaves the files at the next sweep(), as on every backend: emptying SQLite's log here
        # made each save at the cap take 2.5 times one below it (benchmarks/README.md).
        if gate_id is None:
            evicted = self._database.save_alone(customer, parameters)
        else:
            with self._database.write_transaction(customer):
                # A pending gate's save: only while its row is there (not settled elsewhere,
                # nor erased with its customer), deleted in this transaction.
                if not self._delete_gate(customer, gate_id):
                    return None
                evicted = self._database.run_save(parameters)
        if not evicted:  # as after most saves
            return MemoriesRead()
        evicted.sort()
        # Read only once the rows are gone: what cannot be read is still evicted.
        return self._readable(
            customer_id, customer, [(ticket, sealed) for _, ticket, sealed in evicted], "Evicted"
        )

    @_one_call_at_a_time
    def forget(self, customer_id: str, ticket_id: str) -> MemoriesRead:
        """Delete this customer's memories of ``ticket_id`` for good; return them."""
        return self._forget(customer_id, ticket_id, FORGOTTEN)

    @_one_call_at_a_time
    def supersede(self, customer_id: str, ticket_id: str) -> MemoriesRead:
        """``forget()``, for memories a newer one replaces: history says ``superseded``."""
        return self._forget(customer_id, ticket_id, SUPERSEDED)

    @_one_call_at_a_time
    def sweep(self) -> int:
        """Delete every customer's expired memories for good; return how many.

        Each deletion is in the customer's history as ``expired``, at the time it expired.
        Customers are swept in batches, many in one transaction, each batch at most a few
        hundred customers and a thousand memories (memorybook/store/writes.py), so that no
        batch holds its locks for long. Beside other processes sweeping at once, each memory
        expires once: on PostgreSQL a batch leaves out the customers whose lock another
        transaction holds (a save, or another sweep's batch), and those that still have expired
        memories then are swept one by one, waiting for their lock.
        Then the database's files are rid of every deleted row (SQLite: its write-ahead log
        is emptied; PostgreSQL: ``VACUUM FULL``, which locks the tables while it runs). This is
        the step that erases what the store deleted on its own: memories evicted by the cap or
        expired during a save, and the records of settled gates; on PostgreSQL also what
        ``forget()``, ``supersede()`` and ``forget_customer()`` deleted, which SQLite erases at
        once. On PostgreSQL a row that a transaction begun before its deletion may still read
        is kept until that transaction ends: it goes at the next ``sweep()``. The server's
        write-ahead log and backups keep their copies until they are recycled.
        """
        now = self._now()
        swept, left_out = 0, []
        for batch in _batches(self._database.expired_by_customer(now)):
            gone = self._database.sweep_alone(self._sweep_parameters(batch, now))
            swept += len(gone)
            left_out += set(batch).difference(gone)
        for start in range(0, len(left_out), SWEEP_BATCH_CUSTOMERS):
            for customer in self._database.still_expired(
                    left_out[start:start + SWEEP_BATCH_CUSTOMERS], now):
                with self._database.write_transaction(customer):
                    swept += len(self._database.run_sweep(self._sweep_parameters([customer], now)))
        self._database.erase_deleted_rows()
        return swept

    @staticmethod
    def _sweep_parameters(customers: list[bytes], now: int) -> dict[str, object]:
        return {"customers": customers, "now": now, "unknown_ticket": UNKNOWN_TICKET}

    @_one_call_at_a_time
    def history(self, customer_id: str) -> list[HistoryEvent]:
        """What happened to this customer's memories, oldest first: event, ticket id, time.

        Events: ``saved``, ``evicted`` (by the cap), ``forgotten``, ``expired``, ``superseded``.
        It holds no memory content, outlives the memories it describes, and is erased by
        ``forget_customer()``. A row whose ticket id cannot be read is listed with None for it,
        and a notice says so.
        """
        keys = self._open_keys()
        customer = keys.customer_digest(checked_customer_id(customer_id))
        rows = self._database.run(
            "SELECT event, at, sealed_ticket FROM memorybook_history"
            " WHERE customer_digest = ? ORDER BY at, id",
            (customer,),
        )
        events, unreadable = [], 0
        for event, at, sealed_ticket in rows:
            ticket_id = None  # as for a row whose memory's row lacked it (UNKNOWN_TICKET)
            if sealed_ticket != UNKNOWN_TICKET:  # bytes, or a memoryview of them
                try:
                    ticket_id = keys.unseal(customer, _HISTORY_AAD, sealed_ticket)
                except UnreadableMemory:  # listed all the same: what happened, and when
                    unreadable += 1
            events.append(HistoryEvent(event, ticket_id, moment(at)))
        if unreadable:
            self.notices.append(
                f"{unreadable} history row(s) of customer {shown(customer_id)} in "
                f"{self.location} failed their integrity check (changed or damaged outside "
                "memorybook): they are listed without their ticket id.")
        return events

    @_one_call_at_a_time
    def forget_customer(self, customer_id: str) -> MemoriesRead:
        """Erase every memory of this customer for good; return those that could be read.

        The right to erasure: every row of the customer is deleted in one transaction, readable
        or not, expired or not, and the customer's history and pending gates with them (a gate
        recorded before and settled after saves nothing). The memories come back
        oldest first; a memory that failed its integrity check is
        deleted too, is not in the list, and is counted in a line added to ``notices``. A
        customer with no memories gives [].
        """
        keys = self._open_keys()
        customer_id = checked_customer_id(customer_id)
        customer = keys.customer_digest(customer_id)
        rows = self._database.erase_alone(customer, {"customer": customer})
        rows = [(ticket, sealed) for _, ticket, sealed in sorted(rows)]
        self._database.after_forget()
        return self._readable(customer_id, customer, rows, "Erased")

    @_one_call_at_a_time
    def check(self) -> None:
        """Read one row of the store's own table, within ``timeout`` as any call: whether the
        database answers (a readiness probe's question, memorybook/readiness.py). Raises
        MemoryStoreError as any call does when it cannot."""
        self._database.run("SELECT 1 FROM memorybook_meta LIMIT 1")

    def close(self) -> None:
        """Close the connection; calling it again does nothing."""
        with self._lock:
            if self._is_open:
                self._is_open = False
                self._database.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.location!r}, max_memories={self.max_memories})"

    # -- beyond the MemoryStore interface ------------------------------------------

    def sealed_row(self, customer_id: str, memory: dict) -> SealedRow:
        """Check a memory and return the row that stores it, encrypted; nothing is written.

        ``save()`` writes such a row. Rows made here can be loaded in bulk straight into the
        memories table of a store with the same key (the store benchmark does), bypassing the cap.
        """
        self._open_keys()
        customer_id = checked_customer_id(customer_id)
        return self._sealed(customer_id, *checked_memory_json(customer_id, memory))

    def _sealed(self, customer_id: str, ticket_id: str, text: str) -> SealedRow:
        keys = self._open_keys()
        customer = keys.customer_digest(customer_id)
        ticket = keys.ticket_digest(customer_id, ticket_id)
        return SealedRow(customer, ticket, keys.seal(customer, ticket, text),
                         self._sealed_ticket(customer, ticket_id))

    def _sealed_ticket(self, customer: bytes, ticket_id: str | None) -> bytes:
        """A ticket id as history holds it: sealed, bound to the customer (None: unreadable)."""
        return self._open_keys().seal(customer, _HISTORY_AAD, json.dumps(ticket_id))

    def serving_alone(self) -> AbstractContextManager[None]:
        """Held by a process while it serves this store's customers (memorybook/serving.py).
        Where customers' turns hold across processes (PostgreSQL: memorybook/store/turns.py), it
        is nothing; a backend whose turns hold within one process refuses a second process's
        (MemoryStoreError)."""
        return nullcontext()

    @contextmanager
    def customer_lock(self, customer_id: str) -> Iterator[None]:
        """Hold, until the block ends, the lock that a write for this customer takes.

        Saves and forgets for the customer through other store objects or processes wait
        meanwhile, up to their time limit. Make no call on this store object inside the block.
        """
        with ExitStack() as held:
            with self._call("customer_lock()"):
                customer = self._open_keys().customer_digest(checked_customer_id(customer_id))
                held.enter_context(self._lock)  # for the block too, past the call's deadline
                held.enter_context(self._database.write_transaction(customer))
                self._database.flush()  # the lock is held once this returns, not merely asked for
            yield

    # -- helpers -------------------------------------------------------------------

    def _forget(self, customer_id: str, ticket_id: str, event: str) -> MemoriesRead:
        keys = self._open_keys()
        customer_id = checked_customer_id(customer_id)
        ticket_id = checked_ticket_id(ticket_id)
        customer = keys.customer_digest(customer_id)
        ticket = keys.ticket_digest(customer_id, ticket_id)
        now = self._now()
        with self._database.write_transaction(customer):
            rows = sorted(self._database.run(
                "DELETE FROM memorybook_memories WHERE customer_digest = ? AND ticket_digest = ?"
                " RETURNING id, sealed",
                (customer, ticket),
            ))
            if not rows:  # nothing was deleted: the transaction is rolled back all the same
                raise memory_not_found(customer_id, ticket_id, self.location)
            self._record_all(customer, [(event, ticket_id, now)] * len(rows))
            self._count_deleted(customer, len(rows))
        self._database.after_forget()
        return self._readable(
            customer_id, customer, [(ticket, sealed) for _, sealed in rows], "Forgot"
        )

    def _count_deleted(self, customer: bytes, deleted: int) -> None:
        """Inside a write transaction: take rows deleted off the customer's count."""
        self._database.run_before_commit(
            "UPDATE memorybook_counts SET memories = CASE WHEN memories > ? THEN memories - ?"
            " ELSE 0 END WHERE customer_digest = ?",
            [(deleted, deleted, customer)],
        )

    def _record_all(self, customer: bytes, events: list[tuple[str, str | None, int]]) -> None:
        """Add events (name, ticket id, time) to the customer's history, in this order; each
        ticket id is sealed, as memories are. They are written before the commit."""
        self._database.run_before_commit(
            "INSERT INTO memorybook_history (customer_digest, event, at, sealed_ticket)"
            " VALUES (?, ?, ?, ?)",
            [(customer, event, at, self._sealed_ticket(customer, ticket_id))
             for event, ticket_id, at in events],
        )

    def _ticket_in(self, customer: bytes, ticket: bytes, sealed: bytes) -> str | None:
        """The ticket id of a stored memory, or None if it cannot be read."""
        try:
            return ticket_id_of_memory(self._open_keys().unseal(customer, bytes(ticket), sealed))
        except (UnreadableMemory, KeyError, TypeError):
            return None

    def _now(self) -> int:
        return micros(self.clock(), "The store's clock")

    @contextmanager
    def _call(self, name: str) -> Iterator[None]:
        """One call on the store, holding its lock, with ``timeout`` for all its waits."""
        deadline = time.monotonic() + self.timeout
        if not self._lock.acquire(timeout=self.timeout):
            raise MemoryStoreError(
                f"{name} waited more than {self.timeout:g} s for another thread's call on this "
                f"store object ({self.location}) to end, and gave up; nothing was written. Try "
                "again, or give each thread a store object of its own."
            )
        try:
            self._database.current_call = name
            self._open_keys()
            with self._database.call_within(deadline):
                yield
        finally:
            self._lock.release()

    def _readable(
        self, customer_id: str, customer: bytes, rows: list[tuple[bytes, bytes]], done: str
    ) -> MemoriesRead:
        """The memories of these rows that can be read; the others are counted (``unreadable``),
        and a notice says so."""
        memories = MemoriesRead()
        if not rows:  # as after most saves
            return memories
        opened = self._opened(customer, rows)
        memories.extend(memory for memory in opened if not isinstance(memory, UnreadableMemory))
        memories.unreadable = unreadable = len(opened) - len(memories)
        if unreadable:
            self.notices.append(
                f"{done} {unreadable} unreadable memory row(s) of customer {shown(customer_id)} "
                f"in {self.location} (damaged, or nested too deeply to decode), so they are not "
                "in the returned list."
            )
        return memories

    def _opened(
        self, customer: bytes, rows: list[tuple[bytes, bytes]]
    ) -> list[dict | UnreadableMemory]:
        """The memories of these rows (ticket digest, sealed), decoded together; in place of
        one that cannot be read, the ``UnreadableMemory`` that says why."""
        keys = self._open_keys()
        opened: list[str | UnreadableMemory] = []
        for ticket, sealed in rows:
            try:
                opened.append(keys.opened(customer, ticket, sealed))
            except UnreadableMemory as unreadable:
                opened.append(unreadable)
        decoded = iter(decode_all([text for text in opened if isinstance(text, str)]))
        return [next(decoded) if isinstance(text, str) else text for text in opened]

    def _open_keys(self) -> Keys:
        if not self._is_open or self._keys is None:
            raise MemoryStoreError(
                f"The memory store {self.location} is closed; open it again with open_store()."
            )
        return self._keys
