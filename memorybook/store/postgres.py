"""Memories in PostgreSQL (psycopg 3): time limits on every wait, reconnecting after a loss."""

from __future__ import annotations

import functools
import hashlib
import math
import os
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from datetime import timedelta
from typing import Any, NamedTuple, Self

from memorybook.store.base import MAX_MEMORIES_PER_CUSTOMER, EncryptedStore
from memorybook.store.database import SqlDatabase
from memorybook.store.encryption import (
    NEW_KEY_COMMAND,
    STORE_KEY_ENV,
    Keys,
    StoreKey,
    resolve_keys,
)
from memorybook.store.retention import Clock
from memorybook.store.schema import (
    COUNTS_TABLE,
    HISTORY_TABLE,
    MEMORIES_TABLE,
    PENDING_TABLE,
    POSTGRES,
)
from memorybook.store.urls import password_needs_encoding, passwords_in, redacted
from memorybook.store.validation import MemoryStoreError, MemoryStoreKeyError
from memorybook.store.writes import (
    ERASE,
    SAVE,
    SWEEP,
    Write,
    postgres_function,
    postgres_function_body,
)

_WRITE_FUNCTIONS = (SAVE, ERASE, SWEEP)

# How long a PostgreSQL call waits for a lock another session holds; a transaction of ours left
# idle (a stuck client) is ended after twice that.
POSTGRES_LOCK_TIMEOUT_SECONDS = 20
POSTGRES_CONNECT_TIMEOUT_SECONDS = 10
# Past a call's timeout: the server cancels a statement after this much more, and a call still
# waiting for the server after twice this much more is ended here (a frozen server never answers).
POSTGRES_MARGIN_SECONDS = 0.25
_WRITES = ("save()", "forget()", "forget_customer()", "supersede()", "sweep()", "record_gate()",
           "settle_gate()", "claim_abandoned_gates()")


class PostgresMemoryStore(EncryptedStore):
    """Memories in PostgreSQL (psycopg 3), in the connection's current schema.

    Needs a key: the ``key`` argument or ``$MEMORYBOOK_STORE_KEY`` (``old_keys``: earlier keys
    it reads with, by default ``$MEMORYBOOK_STORE_OLD_KEYS`` when ``key`` is not given). A call
    waits at most ``timeout`` seconds for a lock another session holds, then fails and writes
    nothing. A connection lost (the server restarted, or was unreachable for a while) is opened
    again at the next call.
    """

    url_example = "postgresql://user@host:port/database"

    def __init__(
        self,
        url: str,
        *,
        key: str | bytes | StoreKey | None = None,
        max_memories: int = MAX_MEMORIES_PER_CUSTOMER,
        timeout: float = POSTGRES_LOCK_TIMEOUT_SECONDS,
        retention: timedelta | None = None,
        clock: Clock | None = None,
        old_keys: Sequence[str | bytes] | None = None,
    ) -> None:
        super().__init__(
            redacted(url),
            max_memories,
            timeout,
            connect=lambda: PostgresDatabase(url, self.timeout, key, old_keys),
            retention=retention,
            clock=clock,
        )
        self._reopen = functools.partial(
            type(self), url, key=key, max_memories=max_memories, timeout=timeout,
            retention=retention, clock=clock, old_keys=old_keys)

    def reopened(self) -> Self:
        """Another store object on this database, opened with this one's key and options: a
        connection of its own (each customer's turn holds one: memorybook/store/turns.py)."""
        return self._reopen()


class PostgresDatabase(SqlDatabase):
    """A connection to PostgreSQL whose waits for locks and statements are bounded."""

    dialect = POSTGRES

    def __init__(self, url: str, timeout: float, key: str | bytes | StoreKey | None,
                 old_keys: Sequence[str | bytes] | None = None) -> None:
        super().__init__(redacted(url), timeout)
        if password_needs_encoding(url):
            raise MemoryStoreError(
                f"The password in the PostgreSQL URL {self.location} holds characters that must "
                "be percent-encoded: write @ as %40, / as %2F, ? as %3F, # as %23 and a space as "
                "%20, or leave the password out of the URL and set $PGPASSWORD."
            )
        first, *old = resolve_keys(key, old_keys, self.location, otherwise=self._no_key)
        self._keys = Keys(first, old)
        self._psycopg = _import_psycopg()
        self._url = url
        self._limits = self.timeout
        self._pipeline: Any = None  # psycopg's Pipeline while a write transaction uses one
        self._transaction_lock = 0  # the advisory lock the latest write transaction took
        self._write_cursor: Any = None  # for the write functions' calls, on self.connection
        self._owners: set[int] = set()  # the advisory locks of the owners this session holds
        self._watchdog = Watchdog()
        self._watchdog.arm(self.deadline + 2 * POSTGRES_MARGIN_SECONDS)  # until the tables are open
        try:
            self.connection = self._connect()
        except BaseException:
            self._watchdog.close()
            raise

    def open_tables(self) -> tuple[Keys, bytes]:
        # One lock for table creation, so that two first openings do not race.
        try:
            with self.write_transaction(b"memorybook tables"):
                [(meta_table,)] = self.run("SELECT to_regclass('memorybook_meta') IS NOT NULL")
                if meta_table:
                    return self._keys, self.read_key_check()
                return self._keys, self.create_tables(self._keys)
        finally:
            self._watchdog.disarm()

    def run(self, sql: str, params: tuple = ()) -> list[tuple]:
        cursor = self._send(sql, params)
        self.flush()
        try:
            return cursor.fetchall() if cursor.description else []
        except self._psycopg.Error as error:
            raise self._error(error) from None

    def run_before_commit(self, sql: str, rows: list[tuple]) -> None:
        try:
            with self.connection.cursor() as cursor:
                cursor.executemany(sql.replace("?", self.dialect.placeholder), rows)
        except self._psycopg.Error as error:
            raise self._error(error) from None

    def save_objects(self) -> list[str]:
        return [postgres_function(write, self.dialect) for write in _WRITE_FUNCTIONS]

    def objects_out_of_date(self) -> bool:
        made = dict(self.run(
            "SELECT proname, prosrc FROM pg_proc WHERE proname = ANY(?) AND pronamespace ="
            " (SELECT oid FROM pg_namespace WHERE nspname = current_schema())",
            ([write.function for write in _WRITE_FUNCTIONS],)))
        return made != {write.function: postgres_function_body(write, self.dialect)
                        for write in _WRITE_FUNCTIONS}

    def run_save(self, parameters: dict[str, object]) -> list[tuple]:
        return self._call_write(SAVE, parameters, self._transaction_lock)

    def save_alone(self, lock_key: bytes, parameters: dict[str, object]) -> list[tuple]:
        # One statement in a transaction of its own: the function takes the lock, then saves.
        return self._call_write(SAVE, parameters, _write_lock_id(lock_key))

    def erase_alone(self, lock_key: bytes, parameters: dict[str, object]) -> list[tuple]:
        return self._call_write(ERASE, parameters, _write_lock_id(lock_key))

    def run_sweep(self, parameters: dict[str, object]) -> list[bytes]:
        return self._sweep(parameters)

    def sweep_alone(self, parameters: dict[str, object]) -> list[bytes]:
        # One statement in a transaction of its own: the function takes the locks that are
        # free, then sweeps those customers.
        return self._sweep(parameters)

    def _sweep(self, parameters: dict[str, object]) -> list[bytes]:
        customers = parameters["customers"]
        assert isinstance(customers, list)
        locks = [_write_lock_id(customer) for customer in customers]
        return [bytes(customer) for (customer,) in self._call_write(SWEEP, parameters, locks)]

    def _call_write(self, write: Write, parameters: dict[str, object], lock: int | list[int]
                    ) -> list[tuple]:
        """The rows of a write's function (writes.postgres_function()). Inside a write
        transaction, which holds the lock already, it takes it again, which changes nothing."""
        call = _CALLS[write.function]
        values = (*call.arguments(parameters), lock)
        if self._pipeline is not None:  # in a write transaction's pipeline
            return self.run(call.in_a_transaction, values)
        # Alone, on a cursor kept for it, whose rows come back in binary too.
        cursor = self._write_cursor
        if cursor is None or cursor.connection is not self.connection:
            cursor = self._write_cursor = self.connection.cursor(binary=True)
        try:
            rows = cursor.execute(call.alone, values).fetchall()
        except self._psycopg.Error as error:
            raise self._error(error) from None
        return rows if len(write.returns) == 1 else [row for (row,) in rows]

    def flush(self) -> None:
        if self._pipeline is not None:
            try:
                self._pipeline.sync()
            except self._psycopg.Error as error:
                raise self._error(error) from None

    @contextmanager
    def write_transaction(self, lock_key: bytes) -> Iterator[None]:
        """A transaction holding the advisory lock of ``lock_key``, whose statements travel
        together: the BEGIN and the lock go with the first statement whose rows are needed
        (``run()``), and the commit with whatever ``run_before_commit()`` left: ``forget()``
        thus waits for the server twice (a save or an erasure alone is one call of its function
        instead). Without pipeline mode (a libpq older than 14) each statement waits for its
        own answer.
        """
        lock_id = self._transaction_lock = _write_lock_id(lock_key)
        with ExitStack() as pipeline:
            try:
                if self._psycopg.Pipeline.is_supported():
                    self._pipeline = pipeline.enter_context(self.connection.pipeline())
                    pipeline.callback(setattr, self, "_pipeline", None)
                self._send("BEGIN")
                self._send(self.dialect.write_lock, (lock_id,))
                yield
                self._send("COMMIT")
                pipeline.close()  # leaving pipeline mode sends what is left, and waits for it
            except BaseException as error:
                self._roll_back(pipeline)
                if isinstance(error, self._psycopg.Error):
                    raise self._error(error) from None
                raise

    def _roll_back(self, pipeline: ExitStack) -> None:
        """After a failed write: end the transaction and leave pipeline mode, whatever state
        the connection is in (a lost one raises here, and the original error is kept)."""
        with suppress(self._psycopg.Error):
            self.connection.rollback()
        with suppress(self._psycopg.Error):
            pipeline.close()
        self._pipeline = None

    def _send(self, sql: str, params: tuple = ()) -> Any:
        """Send one statement (in pipeline mode, to run with the next ``flush()``); its cursor."""
        try:
            return self.connection.execute(sql.replace("?", self.dialect.placeholder), params)
        except self._psycopg.Error as error:
            raise self._error(error) from None

    @contextmanager
    def call_within(self, deadline: float) -> Iterator[None]:
        """The call, ended by the watchdog if the server has not answered by its deadline."""
        self.deadline = deadline
        self._watchdog.arm(deadline + 2 * POSTGRES_MARGIN_SECONDS)
        try:
            self.before_call()
            yield
        finally:
            self._watchdog.disarm()

    def before_call(self) -> None:
        """Open a new connection if the server ended this one (a restart) since the last call,
        and shorten the server's time limits to what is left of this call's time.

        Between calls the connection is idle, so anything waiting to be read on it is the
        server's notice that it closed the connection.
        """
        connection = self.connection
        if connection.closed or connection.broken or select.select(
            [connection.fileno()], [], [], 0
        )[0]:
            self._close_connection()
            self.connection = self._connect()
        seconds_left = self.seconds_left()
        if seconds_left < self.timeout - POSTGRES_MARGIN_SECONDS:
            self._set_limits(seconds_left)
        elif self._limits != self.timeout:
            self._set_limits(self.timeout)

    def erase_deleted_rows(self) -> None:
        # A plain VACUUM can leave a deleted row's bytes in the page's free space; VACUUM FULL
        # writes the tables (and their TOAST tables) anew and removes the old files. It holds
        # each table's exclusive lock while it runs, so other calls wait for it, and it copies
        # the deleted rows that a transaction still open in the database may read.
        for table in (MEMORIES_TABLE, HISTORY_TABLE, COUNTS_TABLE, PENDING_TABLE):
            self.run(f"VACUUM FULL {table}")

    # An owner is alive while a session holds its advisory lock: the server releases it when the
    # session ends (close(), or a process killed: its socket closes with it).

    def hold_owner(self, owner: bytes) -> None:
        self.run("SELECT pg_advisory_lock(?)", (_owner_lock(owner),))
        self._owners.add(_owner_lock(owner))

    @contextmanager
    def owner_gone(self, owner: bytes) -> Iterator[bool]:
        lock = _owner_lock(owner)
        [(gone,)] = self.run("SELECT pg_try_advisory_lock(?)", (lock,))
        try:
            yield bool(gone)
        finally:
            if gone:
                self.run("SELECT pg_advisory_unlock(?)", (lock,))

    def close(self) -> None:
        self._watchdog.close()
        self._close_connection()

    def _no_key(self) -> bytes:
        raise MemoryStoreKeyError(
            f"The PostgreSQL memory store {self.location} needs an encryption key: set "
            f"${STORE_KEY_ENV} or pass key=. Make one with {NEW_KEY_COMMAND} and keep it in "
            "your secrets manager; without it the memories cannot be read."
        )

    def _connect(self) -> Any:
        """A new connection whose waits for locks and statements are bounded by ``timeout``."""
        try:
            connection, failed = self._connected_by_the_deadline(), None
        except self._psycopg.Error as error:
            connection, failed = None, self._shown_error(error)
        if failed is not None:  # raised out here: psycopg's error, which may quote the URL's
            raise MemoryStoreError(  # password, is not even its hidden __context__
                f"Could not connect to the PostgreSQL memory store {self.location} "
                f"({failed}). Check that the server is running and the URL is "
                "right; this store object connects again at its next call."
            )
        self.connection = connection
        self._watchdog.watch(connection.fileno())
        try:
            self._set_limits(self.timeout)
            self.run("SELECT set_config('idle_in_transaction_session_timeout', ?, false)",
                     (_milliseconds(2 * self.timeout),))
            for lock in getattr(self, "_owners", ()):  # held on the session that was lost
                self.run("SELECT pg_advisory_lock(?)", (lock,))
        except MemoryStoreError:
            self._close_connection()
            raise
        return connection

    def _connected_by_the_deadline(self) -> Any:
        """psycopg's connect, every host of the URL included, given up at the call's deadline.

        libpq waits at least 2 s for each host, so the connect runs in a thread of its own; one
        still trying at the deadline is left to end by itself (within 2 s a host) and closes
        any connection it makes then.
        """
        attempt = _ConnectAttempt(lambda: self._psycopg.connect(
            self._url, autocommit=True, connect_timeout=self._connect_timeout()))
        connection = attempt.result(self.seconds_left())
        if connection is None:
            raise MemoryStoreError(
                f"Could not connect to the PostgreSQL memory store {self.location} within "
                f"{self.timeout:g} s: no server at it answered. Check that the server is running "
                "and the URL is right; this store object connects again at its next call."
            )
        return connection

    def _connect_timeout(self) -> int:
        """Whole seconds for connecting: libpq waits at least 2, whatever it is given."""
        return max(2, math.ceil(min(self.seconds_left(), POSTGRES_CONNECT_TIMEOUT_SECONDS)))

    def _set_limits(self, seconds: float) -> None:
        """The server's limits on this connection: for a lock, then for a whole statement."""
        self.run(
            "SELECT set_config('lock_timeout', ?, false),"
            " set_config('statement_timeout', ?, false)",
            (_milliseconds(seconds), _milliseconds(seconds + POSTGRES_MARGIN_SECONDS)),
        )
        self._limits = seconds

    def _close_connection(self) -> None:
        self._watchdog.watch(None)  # before its socket's number can be another file's
        with suppress(self._psycopg.Error):
            self.connection.close()

    def _error(self, error: Exception) -> MemoryStoreError:
        """One sentence for a failed call: what it waited for, what was kept, what to do next."""
        call, errors = self.current_call, self._psycopg.errors
        writing = call in _WRITES
        kept = " Nothing was written." if writing else ""
        if isinstance(error, errors.LockNotAvailable):
            return MemoryStoreError(
                f"{call} waited more than {self.timeout:g} s for a lock that another session "
                f"holds on the memorybook tables or on this customer's memories in "
                f"{self.location}, and gave up; nothing was written. Try again once that session "
                "has finished (a session stuck in a transaction shows in pg_stat_activity)."
            )
        if self._watchdog.fired:
            unsure = (
                " If it was committing a change, the change may have been made: check with "
                "recall() before doing it again." if writing else ""
            )
            return MemoryStoreError(
                f"{call} had no answer from the PostgreSQL memory store {self.location} within "
                f"its {self.timeout:g} s, so this store object closed its connection: the server "
                "may be frozen or overloaded, or the network to it down. It connects again at its "
                f"next call; try again later.{unsure}"
            )
        if isinstance(error, errors.QueryCanceled):
            return MemoryStoreError(
                f"{call} took more than {self.timeout:g} s on the PostgreSQL memory store "
                f"{self.location} and was cancelled ({self._shown_error(error)}).{kept} The "
                "server may be overloaded or waiting on another session; try again later."
            )
        if self.connection.closed or self.connection.broken:
            unsure = (
                " If it was lost while the change was being committed, the change may have been "
                "made: check with recall() before doing it again." if writing else ""
            )
            return MemoryStoreError(
                f"{call} lost its connection to the PostgreSQL memory store {self.location} "
                f"({self._shown_error(error)}). This store object connects again at its next "
                f"call, so try again once the server is back.{unsure}"
            )
        return MemoryStoreError(
            f"The PostgreSQL memory store {self.location} failed during {call} "
            f"({self._shown_error(error)}).{kept} Check the server and your permissions on the "
            "memorybook tables."
        )

    def _shown_error(self, error: Exception) -> str:
        """The error's text on one line, without the URL's password in any form."""
        from memorybook.redaction import redact_key  # here: the store alone loads no config

        return redact_key(" ".join(str(error).split()), *passwords_in(self._url))


class _ConnectAttempt:
    """`connect()` in a thread of its own, waited for up to a time limit."""

    def __init__(self, connect: Callable[[], Any]) -> None:
        self._connect = connect
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._abandoned = False
        self._connection: Any = None
        self._error: BaseException | None = None
        threading.Thread(target=self._run, name="memorybook-postgres-connect",
                         daemon=True).start()

    def result(self, seconds: float) -> Any:
        """The connection; None if it was not made within `seconds` (it is then closed once
        made); the connect's own error if it failed."""
        self._done.wait(seconds)
        with self._lock:
            if not self._done.is_set():
                self._abandoned = True
                return None
        if self._error is not None:
            raise self._error
        return self._connection

    def _run(self) -> None:
        connection = None
        try:
            connection = self._connect()
        except BaseException as error:  # handed to the caller, whatever it is
            self._error = error
        with self._lock:
            if self._abandoned:
                if connection is not None:
                    with suppress(Exception):
                        connection.close()
            else:
                self._connection = connection
                self._done.set()


class Watchdog:
    """Shuts a connection's socket down when a call on it is still waiting at its deadline.

    psycopg waits for the server's answer without a limit of its own, and a frozen server (or a
    network that drops everything) never answers: the server's own time limits cannot end that.
    Shut down, the socket reads as closed, and psycopg raises at once.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._fileno: int | None = None
        self._deadline: float | None = None
        # When the thread wakes next by itself (None: only when notified). A call's deadline
        # at or after it needs no notify, which would wake the thread at every call: the thread
        # wakes by then anyway, and reads the deadline of the call in progress.
        self._wakes_at: float | None = None
        self._closed = False
        self._thread: threading.Thread | None = None
        self.fired = False

    def watch(self, fileno: int | None) -> None:
        """Watch this socket (a new connection's) from now on; None: no socket."""
        with self._changed:
            self._fileno = fileno

    def arm(self, deadline: float) -> None:
        with self._changed:
            self._deadline, self.fired = deadline, False
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._watch, name="memorybook-postgres-watchdog", daemon=True
                )
                self._thread.start()
            if self._wakes_at is None or self._wakes_at > deadline:
                self._changed.notify()

    def disarm(self) -> None:
        with self._changed:
            self._deadline = None

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify()

    def _watch(self) -> None:
        with self._changed:
            while not self._closed:
                if self._deadline is None:
                    self._wakes_at = None
                    self._changed.wait()
                    continue
                seconds_left = self._deadline - time.monotonic()
                if seconds_left > 0:
                    self._wakes_at = self._deadline
                    self._changed.wait(seconds_left)
                    continue
                self._deadline, self.fired = None, True
                if self._fileno is not None:
                    with suppress(OSError), socket.socket(fileno=os.dup(self._fileno)) as sock:
                        sock.shutdown(socket.SHUT_RDWR)


class _Call(NamedTuple):
    """How a write's function is called (%b: the arguments travel in binary, a sealed memory as
    its bytes rather than hex), and its arguments in order, but for the lock's."""

    alone: str  # in the select list: no table of rows made first; each row one record
    in_a_transaction: str  # in a pipeline, whose rows come in text: each column its own
    arguments: Callable[[dict[str, object]], tuple]


def _call_of(write: Write) -> _Call:
    call = f"{write.function}({', '.join(['%b'] * (len(write.parameters) + 1))})"
    names = list(write.parameters)
    return _Call(f"SELECT {call}", f"SELECT {', '.join(write.returns)} FROM {call}",
                 lambda parameters: tuple(parameters[name] for name in names))


_CALLS = {write.function: _call_of(write) for write in _WRITE_FUNCTIONS}


@functools.lru_cache(maxsize=1024)
def _write_lock_id(lock_key: bytes) -> int:
    """The advisory lock that serialises the writers of one customer (and only them), so that
    a save's count-then-evict step sees every row committed before it."""
    return int.from_bytes(
        hashlib.sha256(b"memorybook lock " + lock_key).digest()[:8], "big", signed=True
    )


def _owner_lock(owner: bytes) -> int:
    """The advisory lock that a store object running pending gates holds (never a customer's
    write lock: those are named differently)."""
    return int.from_bytes(
        hashlib.sha256(b"memorybook gate owner " + owner).digest()[:8], "big", signed=True
    )


def _milliseconds(seconds: float) -> str:
    return f"{max(1, math.ceil(seconds * 1000))}ms"


def _import_psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise MemoryStoreError(
            "PostgreSQL memory stores need psycopg 3, which memorybook's `postgres` extra "
            "brings: pip install 'memorybook[postgres]' (from a clone: "
            "'path/to/clone[postgres]')."
        ) from None
    return psycopg
