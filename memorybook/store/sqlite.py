"""Memories in one local SQLite file: WAL mode, a key file beside it, errors naming whose fault."""

from __future__ import annotations

import math
import os
import sqlite3
import stat
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from datetime import timedelta
from pathlib import Path
from typing import Any

import memorybook.store.lock_file as lock_file
from memorybook.store.base import MAX_MEMORIES_PER_CUSTOMER, EncryptedStore
from memorybook.store.database import SqlDatabase
from memorybook.store.encryption import Keys, StoreKey, resolve_keys
from memorybook.store.key_file import OWNERS_AND_MODES, KeyFile
from memorybook.store.retention import Clock
from memorybook.store.rotation import COMMAND as ROTATE_COMMAND
from memorybook.store.schema import SQLITE
from memorybook.store.urls import STORE_URL_ENV, sqlite_path
from memorybook.store.validation import MemoryStoreError, shown

SQLITE_BUSY_TIMEOUT_SECONDS = 30  # how long a writer waits for another process's transaction

# SQLite errors that say the disk or the permissions refused a write, not that the file is bad.
_NOT_THE_FILES_FAULT = ("disk is full", "readonly", "read-only", "unable to open", "disk I/O")
_SQLITE_HEADER = b"SQLite format 3\x00"
_OLDEST_SQLITE = (3, 35, 0)  # the first with DELETE ... RETURNING (March 2021)
# A call left with less than its timeout minus this has waited: its busy timeout is shortened.
_SLACK_SECONDS = 0.05


class SQLiteMemoryStore(EncryptedStore):
    """Memories in one local SQLite file (WAL mode, encrypted rows).

    ``path`` is the database file; its folder is created if missing. Without a
    ``key`` argument or ``$MEMORYBOOK_STORE_KEY``, the key is read from
    ``<path>.key`` -- created (mode 0600) for a new database, with a notice. ``old_keys``: earlier
    keys it reads with (default: ``$MEMORYBOOK_STORE_OLD_KEYS`` when ``key`` is not given).
    """

    url_example = "sqlite:///path/to/memories.sqlite3"

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SQLiteMemoryStore:
        return cls(sqlite_path(url), **options)

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        key: str | bytes | StoreKey | None = None,
        max_memories: int = MAX_MEMORIES_PER_CUSTOMER,
        timeout: float = SQLITE_BUSY_TIMEOUT_SECONDS,
        retention: timedelta | None = None,
        clock: Clock | None = None,
        old_keys: Sequence[str | bytes] | None = None,
    ) -> None:
        if "\0" in os.fspath(path):
            raise MemoryStoreError(
                f"The memory database path {shown(os.fspath(path))} holds a NUL character, which "
                "no file system takes: choose another path."
            )
        self.path = Path(path).expanduser().absolute()
        key_file = KeyFile(self.path)
        self.key_path = key_file.path
        super().__init__(
            str(self.path),
            max_memories,
            timeout,
            connect=lambda: SQLiteDatabase(key_file, self.timeout, key, old_keys, self.notices),
            retention=retention,
            clock=clock,
        )

    def serving_alone(self) -> AbstractContextManager[None]:
        # One service process per file: customers' turns hold within one process only.
        return lock_file.serving_alone(self.path)


class SQLiteDatabase(SqlDatabase):
    """The connection to a SQLite store's file, made only if the file is a store or empty."""

    dialect = SQLITE

    def __init__(
        self, key_file: KeyFile, timeout: float, key: str | bytes | StoreKey | None,
        old_keys: Sequence[str | bytes] | None, notices: list[str]
    ) -> None:
        self.path = key_file.database
        super().__init__(str(self.path), timeout)
        self._key_file = key_file
        self._key, self._old_keys = key, old_keys
        self._notices = notices
        self._busy_timeout = timeout  # sqlite3.connect's, until a call shortens it
        if sqlite3.sqlite_version_info < _OLDEST_SQLITE:
            raise MemoryStoreError(
                f"The memory store needs SQLite {'.'.join(map(str, _OLDEST_SQLITE))} or later "
                f"(its statements return the rows they delete), but this Python's sqlite3 module "
                f"uses SQLite {sqlite3.sqlite_version}. Use a Python built with a newer SQLite "
                "(python.org's and Debian 12's are), or a PostgreSQL store."
            )
        self._owners: list[bytes] = []  # of pending gates, alive until close()
        _create_private_file(self.path)
        _refuse_foreign_file(self.path)  # after: one planted meanwhile is refused too
        try:
            self.connection = sqlite3.connect(
                self.path,
                timeout=self.timeout,
                isolation_level=None,
                check_same_thread=False,  # the store makes one call at a time
            )
        except sqlite3.Error as error:
            raise self._error(error) from error

    def key_hint(self) -> str:
        """The key file, when there is one; and the new key of a rotation not finished."""
        path, next_path = self._key_file.path, self._key_file.next_path
        hint = f", or the key file {path}" if os.path.lexists(path) else ""
        if os.path.lexists(next_path):
            hint += (f"; a rotation of its key left the new key in {next_path}: run "
                     f"`{ROTATE_COMMAND}` on this store again to finish it")
        return hint

    def open_tables(self) -> tuple[Keys, bytes]:
        self.run("PRAGMA secure_delete = ON")
        stored_check_value = self._stored_key_check()
        if stored_check_value is not None:
            return self._keys(has_data=True), stored_check_value
        # A new key file is made only under the write lock, and the tables with it, so that a
        # key file beside a database without tables (once the lock is ours) means it lost them.
        if os.path.lexists(self._key_file.path):
            keys = self._keys(has_data=True)  # a key file planted or unreadable is refused as such
            self.run(self.dialect.write_lock)  # a racing first opening may hold it: wait
            try:
                stored_check_value = self._stored_key_check()
            finally:
                self.run("ROLLBACK")  # not COMMIT, which would write to an empty file
            if stored_check_value is None:
                raise self._lost_its_store()
            return keys, stored_check_value
        self._switch_to_wal()
        with self.write_transaction(b""):
            stored_check_value = self._stored_key_check()  # a racing first opening's
            if stored_check_value is not None:
                return self._keys(has_data=True), stored_check_value
            if os.path.lexists(self._key_file.path):
                raise self._lost_its_store()
            keys = self._keys(has_data=False)
            return keys, self.create_tables(keys)

    def _lost_its_store(self) -> MemoryStoreError:
        return MemoryStoreError(
            f"{self.path} holds no memory store (it is empty, or lacks its tables), but its key "
            f"file {self._key_file.path} exists: a store was made here, and what it held is gone."
            " It was left untouched: restore the database from a backup, or, to start afresh, "
            "move both files aside."
        )

    def _keys(self, *, has_data: bool) -> Keys:
        """The store's keys: from the key given, else from its key file (made if need be)."""
        first, *old = resolve_keys(self._key, self._old_keys, self.location, otherwise=lambda:
                                   self._key_file.key(has_data=has_data, notices=self._notices))
        return Keys(first, old)

    def run(self, sql: str, params: tuple = ()) -> list[tuple]:
        try:
            return self.connection.execute(sql, params).fetchall()
        except sqlite3.Error as error:
            raise self._error(error) from error

    def run_before_commit(self, sql: str, rows: list[tuple]) -> None:
        try:
            self.connection.executemany(sql, rows)
        except sqlite3.Error as error:
            raise self._error(error) from error

    @contextmanager
    def write_transaction(self, lock_key: bytes) -> Iterator[None]:
        # BEGIN IMMEDIATE takes the file's write lock up front, so concurrent writers
        # queue (up to the busy timeout) instead of failing halfway through.
        self.run(self.dialect.write_lock)
        try:
            yield
        except BaseException:
            with suppress(sqlite3.Error):  # keep the original error, not a failed rollback
                self.connection.execute("ROLLBACK")
            raise
        self.run("COMMIT")

    def before_call(self) -> None:
        seconds_left = self.seconds_left()
        if seconds_left < self.timeout - _SLACK_SECONDS:  # it waited for another thread's call
            self._wait_at_most(seconds_left)
        elif self._busy_timeout != self.timeout:
            self._wait_at_most(self.timeout)

    def after_forget(self) -> None:
        # Copy the zeroed pages into the database file and empty the write-ahead log,
        # so no earlier copy of the deleted rows stays in it. Best effort: it is
        # skipped while another process is reading, and once the call's time is up.
        seconds_left = self.seconds_left()
        if seconds_left > 0:
            self._wait_at_most(seconds_left)
            self.run("PRAGMA wal_checkpoint(TRUNCATE)")

    def hold_owner(self, owner: bytes) -> None:
        lock_file.mark_alive(self.path, owner)
        self._owners.append(owner)

    def close(self) -> None:
        for owner in self._owners:
            lock_file.mark_gone(self.path, owner)
        self._owners.clear()
        super().close()

    def owner_gone(self, owner: bytes) -> AbstractContextManager[bool]:
        return lock_file.owner_gone(self.path, owner, self.seconds_left())

    def _wait_at_most(self, seconds: float) -> None:
        """How long SQLite waits for another process's lock, from now on (its busy timeout)."""
        self.run(f"PRAGMA busy_timeout = {max(1, math.floor(seconds * 1000))}")
        self._busy_timeout = seconds

    def _stored_key_check(self) -> bytes | None:
        """Return the key check value, or None for a new (empty) database."""
        tables = {
            name for (name,) in self.run("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        if not tables:
            return None
        if "memorybook_meta" not in tables:
            raise MemoryStoreError(
                f"{self.path} is a SQLite database but not a memorybook memory store (it has "
                "no memorybook_meta table). It was left untouched: point "
                f"${STORE_URL_ENV} at another file."
            )
        if "memorybook_memories" not in tables:
            raise MemoryStoreError(
                f"The memory store {self.path} has lost its memorybook_memories table (its key "
                f"file is {self._key_file.path}). It was left untouched: restore it from a "
                "backup, or, to start afresh, move both files aside."
            )
        return self.read_key_check()

    def _switch_to_wal(self) -> None:
        """Put the database in WAL mode, waiting out other processes doing the same.

        Changing the journal mode needs the database to itself, and SQLite answers "locked" at
        once (without its busy timeout) while another new opener holds it, so retry until the
        busy timeout.
        """
        deadline = time.monotonic() + self.timeout
        pause = 0.005
        while True:
            try:
                [(mode,)] = self.connection.execute("PRAGMA journal_mode = WAL").fetchall()
                if str(mode).lower() == "wal":
                    return
            except sqlite3.OperationalError as error:
                if not _is_busy(error):
                    raise self._error(error) from error
                if time.monotonic() > deadline:
                    raise self._error(error) from error
            else:
                if time.monotonic() > deadline:
                    raise MemoryStoreError(
                        f"Could not switch {self.path} to WAL mode (SQLite kept it in {mode!r})."
                    )
            time.sleep(pause)
            pause = min(pause * 2, 0.1)

    def _error(self, error: sqlite3.Error) -> MemoryStoreError:
        return explain_sqlite_error(error, self.path, self.current_call, self.timeout)


def explain_sqlite_error(
    error: sqlite3.Error, path: Path, call: str, timeout: float
) -> MemoryStoreError:
    """The store's error for a failed SQLite statement: whose fault it is, and what to do."""
    message = str(error)
    if _is_busy(error):
        return MemoryStoreError(
            f"{call} waited more than {timeout:g} s for the memory "
            f"database {path}, which another process kept locked ({message}); nothing "
            "was written. Try again when it has finished."
        )
    if any(sign in message for sign in _NOT_THE_FILES_FAULT):
        return MemoryStoreError(
            f"Could not write to the memory database {path} ({message}): the disk is "
            "full, read-only, or the folder's permissions forbid it. The file itself is "
            "fine: free space or fix the permissions, then try again; keep the file where "
            "it is."
        )
    return MemoryStoreError(
        f"Could not use the memory database {path} ({message}). If the file is damaged, "
        "restore it from a backup, or move it aside to start with an empty store; memorybook "
        "never overwrites it."
    )


def _refuse_foreign_file(path: Path) -> None:
    """Refuse, before SQLite touches it, a non-empty file that is not a SQLite database."""
    try:
        # Without O_NONBLOCK, opening a FIFO would wait for a writer, for ever.
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        with os.fdopen(descriptor, "rb") as file:
            status = os.fstat(file.fileno())
            is_regular = stat.S_ISREG(status.st_mode)
            header = file.read(len(_SQLITE_HEADER)) if is_regular else b""
    except FileNotFoundError:
        return
    except OSError as error:
        raise MemoryStoreError(
            f"Cannot read the memory database {path} ({error.strerror}); fix its "
            f"permissions or point ${STORE_URL_ENV} at another file."
        ) from None
    if not is_regular:
        raise MemoryStoreError(
            f"{path} is not a regular file (a FIFO, device or folder), so it cannot be a "
            f"memorybook memory store. It was left untouched: point ${STORE_URL_ENV} at a file."
        )
    if OWNERS_AND_MODES and status.st_uid != os.geteuid():
        raise MemoryStoreError(
            f"The memory database {path} is owned by another user (uid {status.st_uid}), who "
            "may have planted it and can read or empty it; memorybook uses only a database of "
            f"your own. It was left untouched: move it aside, or point ${STORE_URL_ENV} elsewhere."
        )
    if OWNERS_AND_MODES and stat.S_IMODE(status.st_mode) & 0o022:
        raise MemoryStoreError(
            f"The memory database {path} is writable by others (mode "
            f"{stat.S_IMODE(status.st_mode):04o}), who could change or empty it. It was left "
            f"untouched: make it private with `chmod 600 {path}` if it is yours."
        )
    if header and header != _SQLITE_HEADER:
        raise MemoryStoreError(
            f"{path} is not a SQLite database, so it cannot be a memorybook memory store. "
            f"It was left untouched: move it aside, or point ${STORE_URL_ENV} at another file."
        )


def _create_private_file(path: Path) -> None:
    """Create a missing database file as mode 0600 (SQLite gives its -wal file the same)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass
    except OSError as error:
        raise MemoryStoreError(
            f"Cannot create the memory database {path} ({error.strerror}); choose a "
            f"writable folder with ${STORE_URL_ENV}."
        ) from None


def _is_busy(error: sqlite3.Error) -> bool:
    message = str(error)
    return "locked" in message or "busy" in message
