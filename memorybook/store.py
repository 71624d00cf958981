"""Persistent, encrypted, per-customer memory.

A *memory* is one answered ticket, kept so that the next request from the same
customer can be sent with what we already learned::

    {"request": {"customer": {"id": "C-1042", "company": "Acme Corp"},
                 "ticket": {"id": "T-101", "received_on": "2026-08-04", "subject": "...",
                            "messages": [{"from": "customer", "text": "..."}]}},
     "jev_answered": {"<question text>": "<answer text>"}}

The store replaces an in-process ``dict[str, list[dict]]`` (customer id -> memories
in the order saved) with one that survives restarts and is shared by processes::

    from memorybook.store import open_store

    with open_store() as store:
        store.save("C-1042", memory)      # append; returns memories evicted by the cap
        store.recall("C-1042")            # that customer's memories, oldest first
        store.forget("C-1042", "T-101")   # delete them for good; returns what was deleted
        store.forget_customer("C-1042")   # erase every memory of the customer; returns them

Where memories live
    ``open_store(url)`` picks the backend. With no ``url`` it reads
    ``$MEMORYBOOK_STORE_URL``; without that it uses the SQLite file
    ``.memorybook/memories.sqlite3`` in the repository root (the nearest folder at
    or above the working directory that holds ``pyproject.toml``, else the working
    directory). URLs: ``sqlite:///relative/path.sqlite3`` (relative to the working
    directory), ``sqlite:////absolute/path.sqlite3``, or
    ``postgresql://user@host:port/database`` (psycopg 3). On PostgreSQL the tables
    ``memorybook_meta`` and ``memorybook_memories`` are created in the connection's
    current schema; add ``?options=-csearch_path%3Dmyschema`` to the URL to pick one.

One customer at a time
    Every read and write names one customer id, and there is no way to list
    customers or read another customer's memories. A memory whose
    ``request.customer.id`` is not the customer it is saved for is refused, so
    nothing can be filed under the wrong customer. Ids are compared exactly:
    ``"C-1042"``, ``"c-1042"`` and ``"C-1042 "`` are three different customers.

Encryption at rest
    Memory content is encrypted with AES-256-GCM. Customer ids and ticket ids are
    never stored: rows are found by keyed HMAC-SHA256 digests of them. Each row's
    ciphertext is bound to its digests, so a row copied to another customer fails
    to decrypt instead of leaking. The key is 32 random bytes in URL-safe base64,
    taken from the ``key`` argument, else ``$MEMORYBOOK_STORE_KEY``. A local SQLite
    store with neither creates a key file beside the database (``<file>.key``, mode
    0600) and says so in ``store.notices``: lose that file and the memories cannot
    be read by anyone. A key file that other users can read or write, or that
    another user owns, is refused (``MemoryStoreKeyError`` saying how to fix it),
    as ssh refuses such private keys. PostgreSQL always needs an explicit key. A wrong key is
    refused when the store opens (``MemoryStoreKeyError``), never decrypted into
    garbage.

Bounded growth
    Each customer keeps at most ``MAX_MEMORIES_PER_CUSTOMER`` (50) memories.
    Saving one more evicts the oldest, and ``save()`` returns the evicted
    memories (oldest first) so the caller can report them. ``open_store()`` and
    the store classes take ``max_memories=`` to change the cap; a lower cap takes
    effect for a customer at their next save. One memory holds at most
    ``MAX_MEMORY_BYTES`` (1,000,000) bytes of JSON.

Forgetting
    ``forget(customer_id, ticket_id)`` deletes every memory of that ticket for that
    customer in one transaction; ``forget_customer(customer_id)`` deletes all of
    that customer's memories in one transaction (the right to erasure). Both
    return the deleted memories they could read, oldest first ([] if there were
    none). Rows are found by their digests and deleted before anything is
    decoded, so a memory that fails its integrity check or cannot be decoded is
    deleted all the same, is not in the returned list, and is counted in a line
    appended to ``store.notices``; the same holds for an unreadable memory
    evicted by ``save()``. SQLite runs with ``secure_delete`` and truncates
    its write-ahead log afterwards, so the deleted ciphertext is overwritten on
    disk. PostgreSQL keeps dead row versions until (auto)vacuum reuses the space,
    and backups keep what they hold; those copies are still encrypted.

Concurrency
    Rows are append-only and ordered by an auto-increment id. SQLite runs in WAL
    mode with a 30 s busy timeout and short ``BEGIN IMMEDIATE`` transactions;
    PostgreSQL takes a per-customer advisory lock inside each write transaction.
    Eviction happens inside the saving transaction, so processes saving for the
    same customer at once lose nothing.

Time limits and reconnecting
    A call waits at most ``timeout`` seconds (``open_store(timeout=)``; 30 on
    SQLite, 20 on PostgreSQL) for a lock another process or session holds, then
    raises ``MemoryStoreError`` naming the call; nothing is written. On
    PostgreSQL any one statement is also cancelled after twice that, and the
    server ends a transaction of ours left idle as long. A PostgreSQL store whose
    connection was lost (a server restart, a network cut) connects again at its
    next call; the call that lost it says so.

Damaged input
    A file that is not a memorybook SQLite database, or that is damaged, raises
    ``MemoryStoreError`` naming the file; the file is never overwritten or
    truncated. A memory that fails its integrity check makes ``recall()`` raise
    ``MemoryStoreError`` naming its position among the customer's memories and
    how to remove it (``forget`` or ``forget_customer``, which always work). A
    full or read-only disk is reported as such; the file is then not at fault.
    A memory that is not JSON-serialisable, too large, or nested more than
    ``MAX_MEMORY_NESTING`` (100) levels deep raises ``ValueError``, whatever the
    caller's stack depth. Ids are cut short in error messages.
    What ``recall()`` returns serialises to exactly the JSON text of what was
    saved (same key order), because the memories are sent on to the API and cache
    keys depend on that text.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import json
import math
import os
import re
import select
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Protocol, Self, runtime_checkable
from urllib.parse import unquote

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

MAX_MEMORIES_PER_CUSTOMER = 50
MAX_MEMORY_BYTES = 1_000_000  # of JSON text per memory: a ticket and its answers, not attachments
# Levels of dicts and lists in one memory: far below what Python decodes at any stack depth.
MAX_MEMORY_NESTING = 100
STORE_URL_ENV = "MEMORYBOOK_STORE_URL"
STORE_KEY_ENV = "MEMORYBOOK_STORE_KEY"
DEFAULT_STORE_PATH = Path(".memorybook") / "memories.sqlite3"

SQLITE_BUSY_TIMEOUT_SECONDS = 30  # how long a writer waits for another process's transaction
# How long a PostgreSQL call waits for a lock another session holds; any one statement may take
# twice that, and a transaction of ours left idle (a stuck client) is ended after twice that too.
POSTGRES_LOCK_TIMEOUT_SECONDS = 20
POSTGRES_CONNECT_TIMEOUT_SECONDS = 10
_WRITES = ("save()", "forget()", "forget_customer()")

_STORE_FORMAT = b"memorybook-store-1"
_KEY_CHECK_MESSAGE = b"memorybook key check"
_SEALED_VERSION = b"\x01"
_NONCE_BYTES = 12
_KEY_TEXT = re.compile(r"[A-Za-z0-9_-]{43}=")  # 32 bytes in URL-safe base64, nothing else
# SQLite errors that say the disk or the permissions refused a write, not that the file is bad.
_NOT_THE_FILES_FAULT = ("disk is full", "readonly", "read-only", "unable to open", "disk I/O")
_SQLITE_HEADER = b"SQLite format 3\x00"
_NEW_KEY_COMMAND = (
    'python -c "import base64, os; print(base64.urlsafe_b64encode(os.urandom(32)).decode())"'
)


class MemoryStoreError(Exception):
    """The memory store could not do what was asked; the message says what to do."""


class MemoryStoreKeyError(MemoryStoreError):
    """The encryption key is missing, malformed, or not the one the store was made with."""


class MemoryNotFoundError(MemoryStoreError):
    """``forget()`` was asked for a ticket the customer has no memory of."""


class _UnreadableMemory(Exception):
    """A stored row whose memory cannot be read; the message says why."""


@runtime_checkable
class MemoryStore(Protocol):
    """What the cookbook's wrapper needs from a memory store."""

    notices: list[str]

    def recall(self, customer_id: str) -> list[dict]: ...

    def save(self, customer_id: str, memory: dict) -> list[dict]: ...

    def forget(self, customer_id: str, ticket_id: str) -> list[dict]: ...

    def forget_customer(self, customer_id: str) -> list[dict]: ...

    def close(self) -> None: ...

    def __enter__(self) -> MemoryStore: ...

    def __exit__(self, *exc_info: object) -> None: ...


def open_store(
    url: str | None = None,
    *,
    key: str | bytes | None = None,
    max_memories: int = MAX_MEMORIES_PER_CUSTOMER,
    timeout: float | None = None,
) -> MemoryStore:
    """Open the memory store at ``url`` (see the module docstring for the forms).

    ``url`` defaults to ``$MEMORYBOOK_STORE_URL``, then to
    ``.memorybook/memories.sqlite3`` in the repository root. ``key`` defaults to
    ``$MEMORYBOOK_STORE_KEY``. ``max_memories`` is the per-customer cap of this store object.
    ``timeout`` is how many seconds a call waits for a lock held elsewhere before it fails
    (default: 30 on SQLite, 20 on PostgreSQL).
    """
    options: dict[str, Any] = {"key": key, "max_memories": max_memories}
    if timeout is not None:
        options["timeout"] = timeout
    if url is None:
        url = os.environ.get(STORE_URL_ENV) or None
    if url is None:
        path = _repo_root(Path.cwd()) / DEFAULT_STORE_PATH
        _create_private_folder(path.parent)
        return SQLiteMemoryStore(path, **options)
    scheme = url.partition(":")[0].lower()
    if scheme == "sqlite":
        return SQLiteMemoryStore(_sqlite_path(url), **options)
    if scheme in ("postgresql", "postgres"):
        return PostgresMemoryStore(url, **options)
    raise MemoryStoreError(
        f"Unsupported memory store URL {_shown(_redacted(url))}: use "
        "sqlite:///path/to/memories.sqlite3 or postgresql://user@host:port/database "
        f"(pass url= or set {STORE_URL_ENV})."
    )


def _one_call_at_a_time(method: Callable) -> Callable:
    """Serialise calls on one store object, so that threads can share it.

    Each call first lets the backend make sure its connection is usable (``_before_call``), and
    is named in the errors it raises.
    """

    @functools.wraps(method)
    def serialised(self: _EncryptedStore, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            self._current_call = f"{method.__name__}()"
            self._open_keys()
            self._before_call()
            return method(self, *args, **kwargs)

    return serialised


class _EncryptedStore:
    """The part of a store that does not depend on the database: checks, crypto, eviction.

    Subclasses provide ``_run`` (one SQL statement with ``?`` placeholders, returning
    its rows), ``_write_transaction`` and ``_close_connection``.
    """

    def __init__(self, location: str, max_memories: int, timeout: float) -> None:
        if not isinstance(max_memories, int) or isinstance(max_memories, bool) or max_memories < 1:
            raise ValueError(f"max_memories must be a positive integer, got {_shown(max_memories)}")
        if (not isinstance(timeout, (int, float)) or isinstance(timeout, bool)
                or not math.isfinite(timeout) or timeout <= 0):
            raise ValueError(f"timeout must be a positive number of seconds, got {_shown(timeout)}")
        self.location = location
        self.max_memories = max_memories
        self.timeout = timeout
        self.notices: list[str] = []
        self._keys: _Keys | None = None
        self._is_open = False
        self._lock = threading.RLock()
        self._current_call = "opening the store"

    # -- the MemoryStore interface -------------------------------------------------

    @_one_call_at_a_time
    def recall(self, customer_id: str) -> list[dict]:
        """Return this customer's memories, oldest first ([] for a customer with none)."""
        keys = self._open_keys()
        customer = keys.customer_digest(_checked_customer_id(customer_id))
        rows = self._run(
            "SELECT ticket_digest, sealed FROM memorybook_memories"
            " WHERE customer_digest = ? ORDER BY id",
            (customer,),
        )
        memories = []
        for position, (ticket, sealed) in enumerate(rows, start=1):
            try:
                memories.append(self._unseal(customer, ticket, sealed))
            except _UnreadableMemory as unreadable:
                raise MemoryStoreError(
                    f"Memory number {position} of {len(rows)} (oldest first) of customer "
                    f"{_shown(customer_id)} in {self.location} {unreadable}, and cannot be read. "
                    "Remove it with forget(customer_id, ticket_id) if you know its ticket, or "
                    "erase all of this customer's memories with forget_customer(customer_id); or "
                    "restore the store from a backup."
                ) from None
        return memories

    @_one_call_at_a_time
    def save(self, customer_id: str, memory: dict) -> list[dict]:
        """Append a memory; return the memories evicted by the cap, oldest first (usually [])."""
        customer, ticket, sealed = self._row_for(customer_id, memory)
        with self._write_transaction(customer):
            self._run(
                "INSERT INTO memorybook_memories (customer_digest, ticket_digest, sealed)"
                " VALUES (?, ?, ?)",
                (customer, ticket, sealed),
            )
            [(count,)] = self._run(
                "SELECT COUNT(*) FROM memorybook_memories WHERE customer_digest = ?", (customer,)
            )
            if count <= self.max_memories:
                return []
            oldest = self._run(
                "SELECT id, ticket_digest, sealed FROM memorybook_memories"
                " WHERE customer_digest = ? ORDER BY id LIMIT ?",
                (customer, count - self.max_memories),
            )
            for row_id, _, _ in oldest:
                self._run("DELETE FROM memorybook_memories WHERE id = ?", (row_id,))
        # Read only once the rows are gone: what cannot be read is still evicted.
        return self._readable(
            customer_id, customer, [(ticket, sealed) for _, ticket, sealed in oldest], "Evicted"
        )

    @_one_call_at_a_time
    def forget(self, customer_id: str, ticket_id: str) -> list[dict]:
        """Delete this customer's memories of ``ticket_id`` for good; return them."""
        keys = self._open_keys()
        customer_id = _checked_customer_id(customer_id)
        if not isinstance(ticket_id, str) or not ticket_id.strip():
            raise ValueError(f"ticket_id must be a non-empty string, got {_shown(ticket_id)}")
        customer = keys.customer_digest(customer_id)
        ticket = keys.ticket_digest(customer_id, ticket_id)
        with self._write_transaction(customer):
            rows = self._run(
                "SELECT id, sealed FROM memorybook_memories"
                " WHERE customer_digest = ? AND ticket_digest = ? ORDER BY id",
                (customer, ticket),
            )
            if not rows:
                raise MemoryNotFoundError(
                    f"Customer {_shown(customer_id)} has no memory of ticket "
                    f"{_shown(ticket_id)} in {self.location}; check both ids (they are matched "
                    "exactly, case and spaces included) against recall()."
                )
            for row_id, _ in rows:
                self._run("DELETE FROM memorybook_memories WHERE id = ?", (row_id,))
        self._after_forget()
        return self._readable(
            customer_id, customer, [(ticket, sealed) for _, sealed in rows], "Forgot"
        )

    @_one_call_at_a_time
    def forget_customer(self, customer_id: str) -> list[dict]:
        """Erase every memory of this customer for good; return those that could be read.

        The right to erasure: every row of the customer is deleted in one transaction, readable
        or not. The memories come back oldest first; a memory that failed its integrity check is
        deleted too, is not in the list, and is counted in a line added to ``notices``. A
        customer with no memories gives [].
        """
        keys = self._open_keys()
        customer_id = _checked_customer_id(customer_id)
        customer = keys.customer_digest(customer_id)
        with self._write_transaction(customer):
            rows = self._run(
                "SELECT ticket_digest, sealed FROM memorybook_memories"
                " WHERE customer_digest = ? ORDER BY id",
                (customer,),
            )
            self._run("DELETE FROM memorybook_memories WHERE customer_digest = ?", (customer,))
        if rows:
            self._after_forget()
        return self._readable(customer_id, customer, rows, "Erased")

    def close(self) -> None:
        """Close the connection; calling it again does nothing."""
        with self._lock:
            if self._is_open:
                self._is_open = False
                self._close_connection()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.location!r}, max_memories={self.max_memories})"

    # -- shared helpers ------------------------------------------------------------

    def _row_for(self, customer_id: str, memory: dict) -> tuple[bytes, bytes, bytes]:
        """Check a memory and return the row that stores it: (customer, ticket, sealed)."""
        keys = self._open_keys()
        customer_id = _checked_customer_id(customer_id)
        ticket_id, text = _checked_memory_json(customer_id, memory)
        customer = keys.customer_digest(customer_id)
        ticket = keys.ticket_digest(customer_id, ticket_id)
        nonce = os.urandom(_NONCE_BYTES)
        ciphertext = keys.cipher.encrypt(nonce, text.encode("utf-8"), customer + ticket)
        return customer, ticket, _SEALED_VERSION + nonce + ciphertext

    def _unseal(self, customer: bytes, ticket: bytes, sealed: bytes) -> dict:
        """The memory in a row; ``_UnreadableMemory`` says why a row cannot be read."""
        sealed = bytes(sealed)
        version = sealed[:1]
        nonce, ciphertext = sealed[1 : 1 + _NONCE_BYTES], sealed[1 + _NONCE_BYTES :]
        damaged = _UnreadableMemory(
            "failed its integrity check: it was changed or damaged outside memorybook"
        )
        if version != _SEALED_VERSION:
            raise damaged
        try:
            text = self._open_keys().cipher.decrypt(nonce, ciphertext, customer + ticket)
            return json.loads(text)
        except (InvalidTag, ValueError):
            raise damaged from None
        except RecursionError:
            raise _UnreadableMemory(
                f"is nested too deeply to decode (it was saved before memorybook refused memories "
                f"nested more than {MAX_MEMORY_NESTING} levels)"
            ) from None

    def _readable(
        self, customer_id: str, customer: bytes, rows: list[tuple[bytes, bytes]], done: str
    ) -> list[dict]:
        """The memories of these rows that can be read; a notice counts the others."""
        memories, unreadable = [], 0
        for ticket, sealed in rows:
            try:
                memories.append(self._unseal(customer, ticket, sealed))
            except _UnreadableMemory:
                unreadable += 1
        if unreadable:
            self.notices.append(
                f"{done} {unreadable} unreadable memory row(s) of customer {_shown(customer_id)} "
                f"in {self.location} (damaged, or nested too deeply to decode), so they are not "
                "in the returned list."
            )
        return memories

    def _open_keys(self) -> _Keys:
        if not self._is_open or self._keys is None:
            raise MemoryStoreError(
                f"The memory store {self.location} is closed; open it again with open_store()."
            )
        return self._keys

    def _check_key(self, stored_check_value: bytes) -> None:
        assert self._keys is not None
        if not hmac.compare_digest(bytes(stored_check_value), self._keys.check_value):
            raise MemoryStoreKeyError(
                f"This key did not encrypt {self.location}. Use the key it was created with "
                f"(the key argument or ${STORE_KEY_ENV}{self._key_file_hint()}), or point "
                f"${STORE_URL_ENV} at a new store to start empty."
            )

    def _key_file_hint(self) -> str:
        return ""

    def _meta_key_check(self, meta: dict[str, bytes]) -> bytes:
        """Return the stored key check value after making sure ``meta`` is ours."""
        if bytes(meta.get("format", b"")) != _STORE_FORMAT or "key_check" not in meta:
            raise MemoryStoreError(
                f"{self.location} holds a memorybook_meta table that this version of memorybook "
                "does not recognise; open it with the memorybook version that created it, or use "
                "a new store."
            )
        return bytes(meta["key_check"])

    def _after_forget(self) -> None:
        """Backend hook run after memories were deleted."""

    def _before_call(self) -> None:
        """Backend hook run before each call, with the store's lock held."""

    # -- what each backend provides ------------------------------------------------

    def _run(self, sql: str, params: tuple = ()) -> list[tuple]:
        raise NotImplementedError

    def _write_transaction(self, lock_key: bytes) -> Any:
        raise NotImplementedError

    def _close_connection(self) -> None:
        raise NotImplementedError


class SQLiteMemoryStore(_EncryptedStore):
    """Memories in one local SQLite file (WAL mode, encrypted rows).

    ``path`` is the database file; its folder is created if missing. Without a
    ``key`` argument or ``$MEMORYBOOK_STORE_KEY``, the key is read from
    ``<path>.key`` -- created (mode 0600) for a new database, with a notice.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        key: str | bytes | None = None,
        max_memories: int = MAX_MEMORIES_PER_CUSTOMER,
        timeout: float = SQLITE_BUSY_TIMEOUT_SECONDS,
    ) -> None:
        self.path = Path(path).expanduser().absolute()
        super().__init__(str(self.path), max_memories, timeout)
        self.key_path = self.path.with_name(self.path.name + ".key")
        self._refuse_foreign_file()
        self._create_private_file()
        try:
            self._connection = sqlite3.connect(
                self.path,
                timeout=self.timeout,
                isolation_level=None,
                check_same_thread=False,  # calls are serialised by _one_call_at_a_time
            )
        except sqlite3.Error as error:
            raise self._database_error(error) from error
        self._is_open = True
        try:
            self._run("PRAGMA secure_delete = ON")
            stored_check_value = self._read_key_check()
            self._keys = _Keys(self._resolve_key(key, has_data=stored_check_value is not None))
            if stored_check_value is None:
                stored_check_value = self._create_tables()
            self._check_key(stored_check_value)
        except BaseException:
            self.close()
            raise

    def _refuse_foreign_file(self) -> None:
        """Refuse, before SQLite touches it, a non-empty file that is not a SQLite database."""
        try:
            with open(self.path, "rb") as file:
                header = file.read(len(_SQLITE_HEADER))
        except FileNotFoundError:
            return
        except OSError as error:
            raise MemoryStoreError(
                f"Cannot read the memory database {self.path} ({error.strerror}); fix its "
                f"permissions or point ${STORE_URL_ENV} at another file."
            ) from None
        if header and header != _SQLITE_HEADER:
            raise MemoryStoreError(
                f"{self.path} is not a SQLite database, so it cannot be a memorybook memory store. "
                f"It was left untouched: move it aside, or point ${STORE_URL_ENV} at another file."
            )

    def _create_private_file(self) -> None:
        """Create a missing database file as mode 0600 (SQLite gives its -wal file the same)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            pass
        except OSError as error:
            raise MemoryStoreError(
                f"Cannot create the memory database {self.path} ({error.strerror}); choose a "
                f"writable folder with ${STORE_URL_ENV}."
            ) from None

    def _read_key_check(self) -> bytes | None:
        """Return the key check value, or None for a new (empty) database."""
        tables = {
            name for (name,) in self._run("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        if not tables:
            return None
        if "memorybook_meta" not in tables:
            raise MemoryStoreError(
                f"{self.path} is a SQLite database but not a memorybook memory store (it has "
                "no memorybook_meta table). It was left untouched: point "
                f"${STORE_URL_ENV} at another file."
            )
        return self._meta_key_check(dict(self._run("SELECT name, value FROM memorybook_meta")))

    def _create_tables(self) -> bytes:
        self._switch_to_wal()
        with self._write_transaction(b""):
            self._run(
                "CREATE TABLE IF NOT EXISTS memorybook_meta"
                " (name TEXT PRIMARY KEY, value BLOB NOT NULL)"
            )
            self._run(
                "CREATE TABLE IF NOT EXISTS memorybook_memories ("
                " id INTEGER PRIMARY KEY AUTOINCREMENT,"
                " customer_digest BLOB NOT NULL,"
                " ticket_digest BLOB NOT NULL,"
                " sealed BLOB NOT NULL)"
            )
            self._run(
                "CREATE INDEX IF NOT EXISTS memorybook_memories_by_customer"
                " ON memorybook_memories (customer_digest)"
            )
            return _insert_meta(self)

    def _resolve_key(self, key: str | bytes | None, *, has_data: bool) -> bytes:
        if key is not None:
            return _parse_key(key, "the key argument", self.location)
        if os.environ.get(STORE_KEY_ENV):
            return _parse_key(os.environ[STORE_KEY_ENV], f"${STORE_KEY_ENV}", self.location)
        if self.key_path.exists():
            return self._read_key_file()
        if has_data:
            raise MemoryStoreKeyError(
                f"{self.path} is encrypted, but no key was given and its key file "
                f"{self.key_path} is missing. Restore the key file, set ${STORE_KEY_ENV}, or pass "
                "key=; without the original key these memories cannot be read. To start over, "
                "move the database aside."
            )
        return self._create_key_file()

    def _create_key_file(self) -> bytes:
        """Write a new random key to ``<path>.key`` (mode 0600) without racing other processes."""
        new_key = base64.urlsafe_b64encode(os.urandom(32))
        draft = self.key_path.with_name(f"{self.key_path.name}.{os.getpid()}.draft")
        descriptor = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "wb") as file:
            file.write(new_key + b"\n")
            file.flush()
            os.fsync(file.fileno())
        try:
            os.link(draft, self.key_path)  # fails if another process created it first
        except FileExistsError:
            return self._read_key_file()
        finally:
            draft.unlink()
        self.notices.append(
            f"Created a new encryption key for {self.path} at {self.key_path} (readable only by "
            "you). Keep it safe and out of version control: if it is lost, nobody can read these "
            f"memories. To use your own key instead, set ${STORE_KEY_ENV}."
        )
        return _parse_key(new_key, str(self.key_path), self.location)

    def _key_file_hint(self) -> str:
        return f", or the key file {self.key_path}"

    def _read_key_file(self) -> bytes:
        """The key in ``<path>.key``, refused unless only we own it and can read or write it.

        Checked on the opened file, so that what is checked is what is read. Another user's file
        may have been planted to make us encrypt with a key they know.
        """
        try:
            with open(self.key_path, "rb") as file:
                status = os.fstat(file.fileno())
                text = file.read(1000)
        except OSError as error:
            raise MemoryStoreKeyError(
                f"Cannot read the key file {self.key_path} for {self.path} ({error.strerror}); "
                f"fix its permissions or set ${STORE_KEY_ENV}."
            ) from None
        if not stat.S_ISREG(status.st_mode):
            raise MemoryStoreKeyError(
                f"The key file {self.key_path} for {self.path} is not a regular file; replace it "
                f"with the store's key file, or set ${STORE_KEY_ENV}."
            )
        if status.st_uid != os.geteuid():
            raise MemoryStoreKeyError(
                f"The key file {self.key_path} for {self.path} is owned by another user (uid "
                f"{status.st_uid}), who may have planted it or can read it; memorybook uses only "
                "a key file of your own. If it really is your store's key, copy it to a new file "
                f"of yours with mode 0600 in its place; otherwise remove it, or set "
                f"${STORE_KEY_ENV}."
            )
        mode = stat.S_IMODE(status.st_mode)
        if mode & 0o077:
            raise MemoryStoreKeyError(
                f"The key file {self.key_path} for {self.path} can be read or written by other "
                f"users (mode {mode:04o}), who could then decrypt these memories or swap the key. "
                f"Make it private with `chmod 600 {self.key_path}`, and treat the key as seen by "
                "others if they could read it."
            )
        return _parse_key(text, str(self.key_path), self.location)

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
                [(mode,)] = self._connection.execute("PRAGMA journal_mode = WAL").fetchall()
                if str(mode).lower() == "wal":
                    return
            except sqlite3.OperationalError as error:
                if not _is_busy(error):
                    raise self._database_error(error) from error
                if time.monotonic() > deadline:
                    raise self._database_error(error) from error
            else:
                if time.monotonic() > deadline:
                    raise MemoryStoreError(
                        f"Could not switch {self.path} to WAL mode (SQLite kept it in {mode!r})."
                    )
            time.sleep(pause)
            pause = min(pause * 2, 0.1)

    def _run(self, sql: str, params: tuple = ()) -> list[tuple]:
        try:
            return self._connection.execute(sql, params).fetchall()
        except sqlite3.Error as error:
            raise self._database_error(error) from error

    @contextmanager
    def _write_transaction(self, lock_key: bytes) -> Iterator[None]:
        # BEGIN IMMEDIATE takes the file's write lock up front, so concurrent writers
        # queue (up to the busy timeout) instead of failing halfway through.
        self._run("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            with suppress(sqlite3.Error):  # keep the original error, not a failed rollback
                self._connection.execute("ROLLBACK")
            raise
        self._run("COMMIT")

    def _after_forget(self) -> None:
        # Copy the zeroed pages into the database file and empty the write-ahead log,
        # so no earlier copy of the deleted rows stays in it. Best effort: it is
        # skipped while another process is reading.
        self._run("PRAGMA wal_checkpoint(TRUNCATE)")

    def _close_connection(self) -> None:
        self._connection.close()

    def _database_error(self, error: sqlite3.Error) -> MemoryStoreError:
        message = str(error)
        if _is_busy(error):
            return MemoryStoreError(
                f"{self._current_call} waited more than {self.timeout:g} s for the memory "
                f"database {self.path}, which another process kept locked ({message}); nothing "
                "was written. Try again when it has finished."
            )
        if any(sign in message for sign in _NOT_THE_FILES_FAULT):
            return MemoryStoreError(
                f"Could not write to the memory database {self.path} ({message}): the disk is "
                "full, read-only, or the folder's permissions forbid it. The file itself is "
                "fine: free space or fix the permissions, then try again; keep the file where "
                "it is."
            )
        return MemoryStoreError(
            f"Could not use the memory database {self.path} ({message}). If the file is damaged, "
            "restore it from a backup, or move it aside to start with an empty store; memorybook "
            "never overwrites it."
        )


class PostgresMemoryStore(_EncryptedStore):
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
        super().__init__(_redacted(url), max_memories, timeout)
        if _password_needs_encoding(url):
            raise MemoryStoreError(
                f"The password in the PostgreSQL URL {self.location} holds characters that must "
                "be percent-encoded: write @ as %40, / as %2F, ? as %3F, # as %23 and a space as "
                "%20, or leave the password out of the URL and set $PGPASSWORD."
            )
        if key is None:
            key = os.environ.get(STORE_KEY_ENV) or None
        if key is None:
            raise MemoryStoreKeyError(
                f"The PostgreSQL memory store {self.location} needs an encryption key: set "
                f"${STORE_KEY_ENV} or pass key=. Make one with {_NEW_KEY_COMMAND} and keep it in "
                "your secrets manager; without it the memories cannot be read."
            )
        keys = _Keys(_parse_key(key, "the given key", self.location))
        self._psycopg = _import_psycopg()
        self._url = url
        self._connection = self._connect()
        self._keys = keys
        self._is_open = True
        try:
            self._check_key(self._read_or_create_tables())
        except BaseException:
            self.close()
            raise

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

    def _before_call(self) -> None:
        """Open a new connection if the server ended this one (a restart) since the last call.

        Between calls the connection is idle, so anything waiting to be read on it is the
        server's notice that it closed the connection.
        """
        connection = self._connection
        if not (connection.closed or connection.broken):
            waiting, _, _ = select.select([connection.fileno()], [], [], 0)
            if not waiting:
                return
        with suppress(self._psycopg.Error):
            connection.close()
        self._connection = self._connect()

    def _read_or_create_tables(self) -> bytes:
        # One lock for table creation, so that two first openings do not race.
        with self._write_transaction(b"memorybook tables"):
            [(meta_table,)] = self._run("SELECT to_regclass('memorybook_meta') IS NOT NULL")
            if meta_table:
                return self._meta_key_check(
                    dict(self._run("SELECT name, value FROM memorybook_meta"))
                )
            self._run("CREATE TABLE memorybook_meta (name TEXT PRIMARY KEY, value BYTEA NOT NULL)")
            self._run(
                "CREATE TABLE IF NOT EXISTS memorybook_memories ("
                " id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
                " customer_digest BYTEA NOT NULL,"
                " ticket_digest BYTEA NOT NULL,"
                " sealed BYTEA NOT NULL)"
            )
            self._run(
                "CREATE INDEX IF NOT EXISTS memorybook_memories_by_customer"
                " ON memorybook_memories (customer_digest, id)"
            )
            return _insert_meta(self)

    def _run(self, sql: str, params: tuple = ()) -> list[tuple]:
        try:
            cursor = self._connection.execute(sql.replace("?", "%s"), params)
            return cursor.fetchall() if cursor.description else []
        except self._psycopg.Error as error:
            raise self._database_error(error) from None

    @contextmanager
    def _write_transaction(self, lock_key: bytes) -> Iterator[None]:
        # The advisory lock serialises writers for one customer (and only them), so the
        # count-then-evict step in save() sees every row committed before it.
        lock_id = int.from_bytes(
            hashlib.sha256(b"memorybook lock " + lock_key).digest()[:8], "big", signed=True
        )
        try:
            with self._connection.transaction():
                self._run("SELECT pg_advisory_xact_lock(?)", (lock_id,))
                yield
        except self._psycopg.Error as error:  # from the commit or the rollback itself
            raise self._database_error(error) from None

    def _database_error(self, error: Exception) -> MemoryStoreError:
        """One sentence for a failed call: what it waited for, what was kept, what to do next."""
        call, errors = self._current_call, self._psycopg.errors
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
        if self._connection.closed or self._connection.broken:
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
        text = _one_line(error)
        for secret in _passwords_in(self._url):
            text = text.replace(secret, "***")
        return text

    def _close_connection(self) -> None:
        self._connection.close()


class _Keys:
    """The working keys derived from one store key, each for one purpose."""

    def __init__(self, store_key: bytes) -> None:
        self.cipher = AESGCM(_derive(store_key, b"memorybook: encrypt memories"))
        self._lookup_key = _derive(store_key, b"memorybook: lookup digests")
        check_key = _derive(store_key, b"memorybook: key check")
        self.check_value = hmac.new(check_key, _KEY_CHECK_MESSAGE, hashlib.sha256).digest()

    def customer_digest(self, customer_id: str) -> bytes:
        return self._digest(["customer", customer_id])

    def ticket_digest(self, customer_id: str, ticket_id: str) -> bytes:
        # Scoped to the customer, so the same ticket id under two customers is unlinkable.
        return self._digest(["ticket", customer_id, ticket_id])

    def _digest(self, parts: list[str]) -> bytes:
        message = json.dumps(parts).encode("ascii")  # unambiguous, whatever the ids contain
        return hmac.new(self._lookup_key, message, hashlib.sha256).digest()


def _derive(store_key: bytes, purpose: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=purpose).derive(store_key)


def _insert_meta(store: _EncryptedStore) -> bytes:
    """Record the format and key check (unless a racing process did) and return the check."""
    assert store._keys is not None
    store._run(
        "INSERT INTO memorybook_meta (name, value) VALUES ('format', ?), ('key_check', ?)"
        " ON CONFLICT (name) DO NOTHING",
        (_STORE_FORMAT, store._keys.check_value),
    )
    [(check_value,)] = store._run("SELECT value FROM memorybook_meta WHERE name = 'key_check'")
    return bytes(check_value)


def _parse_key(key: str | bytes, source: str, location: str) -> bytes:
    """Decode a store key: 32 random bytes in URL-safe base64 (as Fernet keys are)."""
    text = key.strip() if isinstance(key, (str, bytes)) else None
    if isinstance(text, bytes):
        try:
            text = text.decode("ascii")
        except UnicodeDecodeError:
            text = None
    raw = b""
    if text and _KEY_TEXT.fullmatch(text):
        try:
            raw = base64.urlsafe_b64decode(text)
        except (binascii.Error, ValueError):
            raw = b""
    if len(raw) == 32 and not any(raw):
        raise MemoryStoreKeyError(
            f"The key from {source} for {location} is all zero bytes, which is no secret: make a "
            f"random one with {_NEW_KEY_COMMAND}"
        )
    if len(raw) != 32:
        raise MemoryStoreKeyError(
            f"The key from {source} for {location} is malformed: expected 32 random bytes in "
            f"URL-safe base64 (44 characters). Use the key the store was created with; for a new "
            f"store make one with {_NEW_KEY_COMMAND}"
        )
    return raw


def _checked_customer_id(customer_id: object) -> str:
    if not isinstance(customer_id, str) or not customer_id.strip():
        raise ValueError(
            f"customer_id must be a non-empty string, got {_shown(customer_id)}: every memory "
            "belongs to exactly one customer."
        )
    return customer_id


def _checked_memory_json(customer_id: str, memory: object) -> tuple[str, str]:
    """Return (ticket id, JSON text) of a memory that may be saved for this customer."""
    not_a_memory = ValueError(
        "A memory must be a dict shaped like "
        "{'request': {'customer': {'id': ...}, 'ticket': {'id': ...}}, ...}"
    )
    if not isinstance(memory, dict):
        raise not_a_memory
    try:
        memory_customer_id = memory["request"]["customer"]["id"]
        ticket_id = memory["request"]["ticket"]["id"]
    except (KeyError, TypeError, IndexError):
        raise not_a_memory from None
    if memory_customer_id != customer_id:
        raise ValueError(
            f"This memory is for customer {_shown(memory_customer_id)} (request.customer.id) but "
            f"was saved for {_shown(customer_id)}; refusing to file it under the wrong customer."
        )
    if not isinstance(ticket_id, str) or not ticket_id.strip():
        raise ValueError(f"request.ticket.id must be a non-empty string, got {_shown(ticket_id)}")
    if _nested_deeper_than(memory, MAX_MEMORY_NESTING):
        raise ValueError(
            f"The memory of ticket {_shown(ticket_id)} is nested more than {MAX_MEMORY_NESTING} "
            "levels deep (dicts and lists within each other), or contains itself; a memory may "
            f"nest at most {MAX_MEMORY_NESTING} levels."
        )
    try:
        text = json.dumps(memory, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"The memory of ticket {_shown(ticket_id)} is not JSON-serialisable: {error}"
        ) from None
    if len(text.encode("utf-8")) > MAX_MEMORY_BYTES:
        raise ValueError(
            f"The memory of ticket {_shown(ticket_id)} is {len(text.encode('utf-8')):,} bytes of "
            f"JSON; a memory may hold at most {MAX_MEMORY_BYTES:,}. Keep what the next request "
            "needs, not whole attachments."
        )
    if json.dumps(json.loads(text)) != text:  # depth is bounded by the check above
        raise ValueError(
            f"The memory of ticket {_shown(ticket_id)} would not come back as the same JSON (are "
            "two keys equal once turned into strings?)."
        )
    return ticket_id, text


def _nested_deeper_than(value: object, limit: int) -> bool:
    """Whether dicts and lists nest more than ``limit`` levels in ``value``, found iteratively.

    A value that contains itself nests without end, so it is deeper than any limit.
    """
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth > limit:
            return True
        pending.extend((child, depth + 1) for child in children)
    return False


def _repo_root(start: Path) -> Path:
    """The nearest folder at or above ``start`` holding pyproject.toml, else ``start``."""
    for folder in (start, *start.parents):
        if (folder / "pyproject.toml").is_file():
            return folder
    return start


def _create_private_folder(folder: Path) -> None:
    """Create the default store folder, readable only by us and ignored by git."""
    if folder.is_dir():
        return
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    (folder / ".gitignore").write_text(
        "# Created by memorybook: customer memories and their key stay out of git.\n*\n"
    )


def _sqlite_path(url: str) -> Path:
    """``sqlite:///relative/path`` or ``sqlite:////absolute/path`` -> a path."""
    prefix = "sqlite:///"
    path = unquote(url[len(prefix) :]) if url.lower().startswith(prefix) else ""
    if not path or "?" in path:
        raise MemoryStoreError(
            f"Cannot read a file path from {_shown(url)}: write sqlite:///relative/path.sqlite3 or "
            "sqlite:////absolute/path.sqlite3."
        )
    return Path(path)


def _userinfo(url: str) -> tuple[str, str, str]:
    """(``scheme://``, user info, the rest) of a URL, split at the last @ before any ? or #.

    Found without a URL parser, so that a password holding unencoded @, /, or spaces, which
    parsers split in other places, is still found whole.
    """
    scheme, separator, rest = url.partition("://")
    if not separator:
        return "", "", url
    before_query = re.split(r"[?#]", rest, maxsplit=1)[0]
    user_info, at, _ = before_query.rpartition("@")
    if not at:
        return f"{scheme}://", "", rest
    return f"{scheme}://", user_info, rest[len(user_info) + 1 :]


def _passwords_in(url: str) -> list[str]:
    """The URL's passwords as they may appear in messages: as written and decoded, longest first."""
    _, user_info, rest = _userinfo(url)
    found = [user_info.partition(":")[2]] if ":" in user_info else []
    found += re.findall(r"(?i)(?:^|[?&])password=([^&#]*)", rest.partition("?")[2])
    forms = {form for secret in found for form in (secret, unquote(secret)) if form}
    return sorted(forms, key=len, reverse=True)


def _password_needs_encoding(url: str) -> bool:
    _, user_info, _ = _userinfo(url)
    password = user_info.partition(":")[2]
    return any(character in password for character in "@/?#") or any(
        character.isspace() for character in password
    )


def _redacted(url: str) -> str:
    """The URL without its password, fit for error messages."""
    scheme, user_info, rest = _userinfo(url)
    if ":" in user_info:
        user_info = f"{user_info.partition(':')[0]}:***"
    rest = re.sub(r"(?i)((?:^|[?&])password=)[^&#]*", r"\1***", rest)
    return f"{scheme}{user_info}@{rest}" if user_info else f"{scheme}{rest}"


def _shown(value: object, limit: int = 60) -> str:
    """A value for an error message: its repr, cut short so a huge id cannot flood the message."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def _is_busy(error: sqlite3.Error) -> bool:
    message = str(error)
    return "locked" in message or "busy" in message


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split())


def _import_psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise MemoryStoreError(
            "PostgreSQL memory stores need psycopg 3: pip install 'psycopg[binary]'."
        ) from None
    return psycopg
