"""Memories in PostgreSQL (psycopg 3): time limits on every wait, reconnecting after a loss."""

from __future__ import annotations

import hashlib
import math
import select
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

from memorybook.store.base import MAX_MEMORIES_PER_CUSTOMER, EncryptedStore
from memorybook.store.database import SqlDatabase
from memorybook.store.encryption import NEW_KEY_COMMAND, STORE_KEY_ENV, Keys, resolve_key
from memorybook.store.errors import MemoryStoreError, MemoryStoreKeyError
from memorybook.store.messages import one_line
from memorybook.store.schema import POSTGRES
from memorybook.store.urls import password_needs_encoding, passwords_in, redacted

# How long a PostgreSQL call waits for a lock another session holds; any one statement may take
# twice that, and a transaction of ours left idle (a stuck client) is ended after twice that too.
POSTGRES_LOCK_TIMEOUT_SECONDS = 20
POSTGRES_CONNECT_TIMEOUT_SECONDS = 10
_WRITES = ("save()", "forget()", "forget_customer()")


class PostgresMemoryStore(EncryptedStore):
    """Memories in PostgreSQL (psycopg 3), in the connection's current schema.

    Needs a key: the ``key`` argument or ``$MEMORYBOOK_STORE_KEY``. A call waits at most
    ``timeout`` seconds for a lock another session holds, then fails and writes nothing. A
    connection lost (the server restarted, or was unreachable for a while) is opened again at the
    next call.
    """

    def __init__(
        self,
        url: str,
        *,
        key: str | bytes | None = None,
        max_memories: int = MAX_MEMORIES_PER_CUSTOMER,
        timeout: float = POSTGRES_LOCK_TIMEOUT_SECONDS,
    ) -> None:
        super().__init__(
            redacted(url),
            max_memories,
            timeout,
            connect=lambda: PostgresDatabase(url, self.timeout, key),
        )


class PostgresDatabase(SqlDatabase):
    """A connection to PostgreSQL whose waits for locks and statements are bounded."""

    dialect = POSTGRES

    def __init__(self, url: str, timeout: float, key: str | bytes | None) -> None:
        super().__init__(redacted(url), timeout)
        if password_needs_encoding(url):
            raise MemoryStoreError(
                f"The password in the PostgreSQL URL {self.location} holds characters that must "
                "be percent-encoded: write @ as %40, / as %2F, ? as %3F, # as %23 and a space as "
                "%20, or leave the password out of the URL and set $PGPASSWORD."
            )
        self._keys = Keys(resolve_key(key, self.location, otherwise=self._no_key))
        self._psycopg = _import_psycopg()
        self._url = url
        self.connection = self._connect()

    def open_tables(self) -> tuple[Keys, bytes]:
        # One lock for table creation, so that two first openings do not race.
        with self.write_transaction(b"memorybook tables"):
            [(meta_table,)] = self.run("SELECT to_regclass('memorybook_meta') IS NOT NULL")
            if meta_table:
                return self._keys, self.read_key_check()
            return self._keys, self.create_tables(self._keys)

    def run(self, sql: str, params: tuple = ()) -> list[tuple]:
        try:
            cursor = self.connection.execute(sql.replace("?", self.dialect.placeholder), params)
            return cursor.fetchall() if cursor.description else []
        except self._psycopg.Error as error:
            raise self._error(error) from None

    @contextmanager
    def write_transaction(self, lock_key: bytes) -> Iterator[None]:
        # The advisory lock serialises writers for one customer (and only them), so the
        # count-then-evict step in save() sees every row committed before it.
        lock_id = int.from_bytes(
            hashlib.sha256(b"memorybook lock " + lock_key).digest()[:8], "big", signed=True
        )
        try:
            with self.connection.transaction():
                self.run(self.dialect.write_lock, (lock_id,))
                yield
        except self._psycopg.Error as error:  # from the commit or the rollback itself
            raise self._error(error) from None

    def before_call(self) -> None:
        """Open a new connection if the server ended this one (a restart) since the last call.

        Between calls the connection is idle, so anything waiting to be read on it is the
        server's notice that it closed the connection.
        """
        connection = self.connection
        if not (connection.closed or connection.broken):
            waiting, _, _ = select.select([connection.fileno()], [], [], 0)
            if not waiting:
                return
        with suppress(self._psycopg.Error):
            connection.close()
        self.connection = self._connect()

    def _no_key(self) -> bytes:
        raise MemoryStoreKeyError(
            f"The PostgreSQL memory store {self.location} needs an encryption key: set "
            f"${STORE_KEY_ENV} or pass key=. Make one with {NEW_KEY_COMMAND} and keep it in "
            "your secrets manager; without it the memories cannot be read."
        )

    def _connect(self) -> Any:
        """A new connection whose waits for locks and statements are bounded by ``timeout``."""
        try:
            connection = self._psycopg.connect(
                self._url, autocommit=True, connect_timeout=POSTGRES_CONNECT_TIMEOUT_SECONDS
            )
        except self._psycopg.Error as error:
            raise MemoryStoreError(
                f"Could not connect to the PostgreSQL memory store {self.location} "
                f"({self._shown_error(error)}). Check that the server is running and the URL is "
                "right; this store object connects again at its next call."
            ) from None
        limits = {
            "lock_timeout": self.timeout,
            "statement_timeout": 2 * self.timeout,
            "idle_in_transaction_session_timeout": 2 * self.timeout,
        }
        try:
            for name, seconds in limits.items():
                connection.execute(
                    "SELECT set_config(%s, %s, false)", (name, f"{math.ceil(seconds * 1000)}ms")
                )
        except self._psycopg.Error as error:
            connection.close()
            raise MemoryStoreError(
                f"Could not set the time limits of a connection to the PostgreSQL memory store "
                f"{self.location} ({self._shown_error(error)}); check the server."
            ) from None
        return connection

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
        if isinstance(error, errors.QueryCanceled):
            return MemoryStoreError(
                f"{call} took more than {2 * self.timeout:g} s on the PostgreSQL memory store "
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
        text = one_line(error)
        for secret in passwords_in(self._url):
            text = text.replace(secret, "***")
        return text


def _import_psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise MemoryStoreError(
            "PostgreSQL memory stores need psycopg 3: pip install 'psycopg[binary]'."
        ) from None
    return psycopg
