"""What both backends do alike on their connection: create the tables, read the meta, close."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from memorybook.store.encryption import Keys
from memorybook.store.schema import (
    CURRENT_FORMATS,
    EARLIER_FORMATS,
    FILL_SEALED_TICKET,
    INSERT_META,
    READ_FORMAT,
    READ_META,
    ROWS_WITHOUT_SEALED_TICKET,
    STORE_FORMAT,
    TABLES_LOCK,
    Dialect,
    create_tables,
    upgrade_tables,
)
from memorybook.store.validation import MemoryStoreError
from memorybook.store.writes import (
    ERASE,
    EXPIRED_BY_CUSTOMER,
    SAVE,
    STILL_EXPIRED,
    SWEEP,
    Write,
    positional,
)


class SqlDatabase:
    """A store's connection to its database. Each backend subclasses it.

    The store names the call in progress in ``current_call``, for the backend's error messages.
    """

    dialect: Dialect
    connection: Any

    def __init__(self, location: str, timeout: float) -> None:
        self.location = location
        self.timeout = timeout
        self.current_call = "opening the store"
        self.deadline = time.monotonic() + timeout
        self.stored_format = STORE_FORMAT  # as read_key_check() finds it
        self.meta: dict[str, bytes] = {}  # the meta rows, as read_key_check() finds them

    def read_key_check(self) -> bytes:
        """Return the stored key check value after making sure the meta table is ours."""
        meta = self.meta = {name: bytes(value) for name, value in self.run(READ_META)}
        self.stored_format = meta.get("format", b"")
        if self.stored_format not in (*CURRENT_FORMATS, *EARLIER_FORMATS) or (
                "key_check" not in meta):
            raise MemoryStoreError(
                f"{self.location} holds a memorybook_meta table that this version of memorybook "
                "does not recognise; open it with the memorybook version that created it, or use "
                "a new store."
            )
        return bytes(meta["key_check"])

    def upgrade(self, seal_ticket: Callable[[bytes, bytes, bytes], bytes]) -> None:
        """Bring a store of an earlier format to this one, once its key is known to match.

        Adds what each later format has (format 2: the expiry column and the history tables;
        format 3: the expiry index, each customer's count and the table of pending gates;
        format 4: each memory's ticket id sealed for history, which ``seal_ticket(customer,
        ticket, sealed)`` gives for a row), keeping every memory (those of format 1 never
        expire); and, in a store of any format, the backend's ``save_objects()`` as this
        version makes them, when ``objects_out_of_date()`` says they are not (a store that an
        earlier version of this format made). A racing opener may have done it already: then
        nothing is changed.
        """
        if self.stored_format in CURRENT_FORMATS and not self.objects_out_of_date():
            return
        with self.write_transaction(TABLES_LOCK):
            [(stored,)] = self.run(READ_FORMAT)
            stored = bytes(stored)
            upgraded = stored not in CURRENT_FORMATS
            if upgraded:
                *changes, set_format = upgrade_tables(self.dialect, stored)
                for statement in changes:
                    self.run(statement)
                while rows := self.run(ROWS_WITHOUT_SEALED_TICKET):
                    self.run_before_commit(FILL_SEALED_TICKET, [
                        (seal_ticket(bytes(customer), bytes(ticket), bytes(sealed)), row_id)
                        for row_id, customer, ticket, sealed in rows
                    ])
                self.run(set_format, (STORE_FORMAT,))
                stored = STORE_FORMAT
            if upgraded or self.objects_out_of_date():
                for statement in self.save_objects():
                    self.run(statement)
        self.stored_format = stored

    def create_tables(self, keys: Keys) -> bytes:
        """Create the tables and the meta rows; return the key check value the store now holds.

        Runs inside a write transaction. A racing first opening may have made them already: then
        they are left as they are, and its key check value is returned.
        """
        for statement in [*create_tables(self.dialect), *self.save_objects()]:
            self.run(statement)
        self.run(INSERT_META, (STORE_FORMAT, keys.check_value))
        return self.read_key_check()

    def close(self) -> None:
        self.connection.close()

    @contextmanager
    def call_within(self, deadline: float) -> Iterator[None]:
        """Around each call of the store, with its lock held: the call's waits end by
        ``deadline`` (of ``time.monotonic()``). Backends bound their waits to it."""
        self.deadline = deadline
        self.before_call()
        yield

    def key_hint(self) -> str:
        """Where else the store's key may be kept, for the wrong-key message ("" if nowhere)."""
        return ""

    def seconds_left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def before_call(self) -> None:
        """Run before each call of the store, with the store's lock held."""

    def after_forget(self) -> None:
        """Run after ``forget()``, ``supersede()`` and ``forget_customer()`` deleted rows."""

    def erase_deleted_rows(self) -> None:
        """Run by ``sweep()``: make sure no deleted row stays in the database's files."""
        self.after_forget()

    # -- who runs the pending gates (memorybook/store/pending.py) ---------------------------

    def hold_owner(self, owner: bytes) -> None:
        """Mark ``owner`` (a store object's random id) as alive until this database is closed,
        or its process ends however it ends."""
        raise NotImplementedError

    def owner_gone(self, owner: bytes) -> AbstractContextManager[bool]:
        """Whether ``owner`` is no longer alive (released, or its process gone), as a block
        during which no other store object can find it gone too."""
        raise NotImplementedError

    # -- the writes that run as one call (memorybook/store/writes.py) --------------------------

    def save_objects(self) -> list[str]:
        """The statements that create what this backend's writes run on, beside the tables."""
        return []

    def objects_out_of_date(self) -> bool:
        """Whether what ``save_objects()`` makes is missing, or differs from what this version
        makes (as in a store an earlier version made)."""
        return False

    def run_save(self, parameters: dict[str, object]) -> list[tuple]:
        """Inside a write transaction: a save (writes.SAVE) with these parameters. Returns the
        rows evicted (id, ticket digest, sealed)."""
        return self._run_steps(SAVE, parameters)

    def save_alone(self, lock_key: bytes, parameters: dict[str, object]) -> list[tuple]:
        """A save in a transaction of its own, holding ``lock_key``'s write lock; as
        ``run_save()``. A backend on a server does it in one trip."""
        with self.write_transaction(lock_key):
            return self.run_save(parameters)

    def erase_alone(self, lock_key: bytes, parameters: dict[str, object]) -> list[tuple]:
        """A customer's erasure (writes.ERASE) in a transaction of its own, holding
        ``lock_key``'s write lock: the memory rows it deleted (id, ticket digest, sealed). A
        backend on a server does it in one trip."""
        with self.write_transaction(lock_key):
            return self._run_steps(ERASE, parameters)

    def expired_by_customer(self, now: int) -> list[tuple[bytes, int]]:
        """Each customer with memories expired at ``now``, and how many: (digest, count)."""
        return [(bytes(customer), int(count))
                for customer, count in self.run(*positional(EXPIRED_BY_CUSTOMER, {"now": now}))]

    def still_expired(self, customers: list[bytes], now: int) -> list[bytes]:
        """Those of ``customers`` that still have memories expired at ``now``."""
        if not customers:
            return []
        return [bytes(customer) for (customer,) in self.run(
            *positional(STILL_EXPIRED, {"customers": customers, "now": now}))]

    def run_sweep(self, parameters: dict[str, object]) -> list[bytes]:
        """Inside a write transaction holding the lock of each of its customers: a batch of a
        sweep (writes.SWEEP); the customer of each memory it expired."""
        return [bytes(customer) for (customer,) in self._run_steps(SWEEP, parameters)]

    def sweep_alone(self, parameters: dict[str, object]) -> list[bytes]:
        """A batch of a sweep in a transaction of its own; as ``run_sweep()``. A backend whose
        writers lock each customer leaves out a customer whose lock another transaction holds
        (writes.SWEEP's ``locks``), and does it in one trip."""
        with self.write_transaction(b""):  # the database's one write lock
            return self.run_sweep(parameters)

    def _run_steps(self, write: Write, parameters: dict[str, object]) -> list[tuple]:
        """A write's steps, each only when its flag is set: the rows of its result."""
        result: list[tuple] = []
        flags: dict[str, bool] = {}
        for step in write.steps:
            if step.when is not None and not flags.get(step.when):
                continue
            for statement in step.statements:
                rows = self.run(*positional(statement.sql, parameters))
                if statement.sets is not None:
                    [(flags[statement.sets],)] = rows
                elif rows:
                    result = rows
        return result

    # -- what each backend provides ------------------------------------------------------

    def open_tables(self) -> tuple[Keys, bytes]:
        """The store's keys and its stored key check value, creating the tables of a new store."""
        raise NotImplementedError

    def run(self, sql: str, params: tuple = ()) -> list[tuple]:
        """One statement, written with ``?`` placeholders; its rows ([] if it returns none)."""
        raise NotImplementedError

    def run_before_commit(self, sql: str, rows: list[tuple]) -> None:
        """Inside a write transaction: a statement run once for each of ``rows``, whose result
        is not needed. A backend on a server may send it with the commit, so an error it meets
        may be raised by the end of the transaction rather than here."""
        for params in rows:
            self.run(sql, params)

    def flush(self) -> None:
        """Make sure that every statement sent so far has run (a backend that holds statements
        back sends them now, and raises what they met)."""

    def write_transaction(self, lock_key: bytes) -> AbstractContextManager[None]:
        """A transaction that waits for, then holds, the write lock of ``lock_key``'s writers."""
        raise NotImplementedError
