"""A store key that rotates: which keys a store's rows may be sealed with, and sealing them anew.

    MEMORYBOOK_STORE_KEY=<new> MEMORYBOOK_STORE_OLD_KEYS=<old> python -m memorybook.store rotate URL

A store object is given its key and, while the key rotates, earlier ones
(memorybook/store/encryption.py): it seals with its key and opens what any of them sealed. Its
digests of customer and ticket ids keep one key whatever the store key is, the digest key derived
from the store's first key, so that the rows an earlier key wrote are found, the customer's write
locks (and turns) stay the same across replicas, and nothing but the sealed values has to change.

The store's meta rows say which keys its rows may be sealed with: the key check's (the key the
store was made with, or last rotated to) and, once a store object was given another key to seal
with, those keys' check values (schema.SEALING_KEYS), recorded before it seals anything. The store
is then format 5 (schema.ROTATED_FORMAT), holding its digest key sealed with the key check's key
(schema.DIGEST_KEY): a store object lacking any of those keys is refused at open, as rows it
could not read may exist, and so are versions that know only format 4. A store nobody rotates
keeps format 4, which the previous release opens alike.

``rotate_key()`` seals every value an earlier key sealed anew, in batches, then makes its key the
key check's in one transaction: that key alone opens the store, and an earlier one alone is
refused as any wrong key is. ``python -m memorybook.store rotate`` runs it
(memorybook/store/__main__.py); a SQLite store whose key is in its key file gets a new key in
``<database>.key.new`` first, which replaces the key file as the last step. Interrupted anywhere,
a run again finishes the work: what was sealed anew stays so, and no row is written twice.
OPERATING.md gives the operator's steps.
"""

from __future__ import annotations

from typing import NamedTuple

from memorybook.settings import STORE_KEY_ENV, STORE_OLD_KEYS_ENV
from memorybook.store.encryption import HISTORY_AAD, PENDING_AAD, Keys
from memorybook.store.schema import (
    CHECK_VALUE_BYTES,
    DIGEST_KEY,
    HISTORY_TABLE,
    MEMORIES_TABLE,
    PENDING_TABLE,
    READ_META,
    ROTATED_FORMAT,
    SEALING_KEYS,
    TABLES_LOCK,
    WRITE_META,
)
from memorybook.store.urls import STORE_URL_ENV
from memorybook.store.validation import MemoryStoreError, MemoryStoreKeyError, UnreadableMemory
from memorybook.store.writes import UNKNOWN_TICKET

COMMAND = "python -m memorybook.store rotate"
# Rows read at once: a memory may be a megabyte, a ticket id in history is small.
MEMORY_ROWS_A_BATCH = 100
SMALL_ROWS_A_BATCH = 1000
# The write lock that a batch of history or pending rows is sealed anew under (never a
# customer's: theirs are digests).
_ROTATION_LOCK = b"memorybook key rotation"


class Resealed(NamedTuple):
    """How many rows ``rotate_key()`` sealed anew, by table, and how many rows no key given
    opens (damaged outside memorybook), left as they were."""

    memories: int = 0
    history: int = 0
    pending: int = 0
    unreadable: int = 0

    @property
    def rows(self) -> int:
        return self.memories + self.history + self.pending

    def __add__(self, other: object) -> Resealed:
        if not isinstance(other, Resealed):
            return NotImplemented
        return Resealed(*(mine + theirs for mine, theirs in zip(self, other, strict=True)))


class RotatingKeys:
    """The keys of an EncryptedStore (memorybook/store/base.py), which inherits them: a part of
    it kept in a module of its own, using its `_call()`, `_database`, `_keys` and `location`."""

    def _keys_of_the_store(self, given: Keys) -> Keys:
        """The keys given, checked against the store's meta rows (MemoryStoreKeyError unless
        they hold the key check's key and every key rows may be sealed with), sealing with the
        key check's key and digesting with the store's digest key."""
        return self._checked(given, self._database.meta)

    def _seal_with_the_first_key(self, given: Keys) -> Keys:
        """The keys, sealing from now on with the first one given. If rows sealed with it would
        be new to the store, the store records that key first (and becomes format 5)."""
        keys = self._checked(given, self._database.meta)
        first = given.given[0]
        if not _known(first.check_value, self._database.meta):
            with self._database.write_transaction(TABLES_LOCK):
                meta = self._read_meta()  # as it is now: another store object may have changed it
                keys = self._checked(given, meta)
                if not _known(first.check_value, meta):
                    self._write_meta(meta, {
                        DIGEST_KEY: meta.get(DIGEST_KEY)
                        or keys.sealing.sealed_digest_key(keys.digest_key),
                        SEALING_KEYS: meta.get(SEALING_KEYS, b"") + first.check_value,
                        "format": ROTATED_FORMAT,
                    })
        return keys.settled(first, keys.digest_key)

    def rotate_key(self) -> Resealed:
        """Seal every row anew with this store object's key (the first it was given) and make
        it the store's key: afterwards that key alone opens the store, and an earlier one alone
        is refused.

        Each value an earlier key sealed (memories, the ticket ids beside them and in history,
        pending gates) is sealed anew, a batch of rows per transaction, a memory's under its
        customer's write lock as a save takes it. Other store objects may read and write
        meanwhile, each given this key to seal with and the earlier ones. The rows are then read
        once more: should an earlier key have sealed any since (a process still sealing with
        it), they are sealed anew and MemoryStoreError says so, without finishing. Then, in one
        transaction, this key becomes the key check's and seals the digest key, and the earlier
        keys are forgotten; the old values' bytes go from the files as at ``sweep()``.
        Interrupted, run it again: what was sealed anew stays so. Returns how many rows were
        sealed anew, and how many no key opens (damaged: left as they were).
        """
        resealed = self._resealed_everywhere()
        since = self._resealed_everywhere()
        if since.rows:
            raise MemoryStoreError(
                f"{since.rows} row(s) of {self.location} were sealed with an earlier key while "
                "the key rotated, and have been sealed anew: a process still seals with an "
                f"earlier key. Give every replica and app ${STORE_KEY_ENV} set to the new key "
                f"(the earlier ones in ${STORE_OLD_KEYS_ENV}), restart them, then run "
                f"`{COMMAND}` again."
            )
        self._finish_rotation()
        with self._call("rotate_key()"):
            self._database.erase_deleted_rows()
        return resealed

    # -- helpers -------------------------------------------------------------------

    def _checked(self, given: Keys, meta: dict[str, bytes]) -> Keys:
        store_key = given.matching(meta["key_check"])
        if store_key is None:
            raise MemoryStoreKeyError(
                f"This key did not encrypt {self.location}. Use the key it was created with or "
                f"last rotated to (the key argument or ${STORE_KEY_ENV}"
                f"{self._database.key_hint()}; to rotate to a new key, give the current one in "
                f"${STORE_OLD_KEYS_ENV}), or point ${STORE_URL_ENV} at a new store to start "
                "empty."
            )
        missing = [check for check in _sealing_keys(meta) if given.matching(check) is None]
        if missing:
            raise MemoryStoreKeyError(
                f"Rows of {self.location} may be sealed with {len(missing)} key(s) this store "
                "object was not given: a rotation of its key began with them and has not "
                f"finished. Give every key since: the newest as ${STORE_KEY_ENV} (or key=), the "
                f"others in ${STORE_OLD_KEYS_ENV} (or old_keys=){self._database.key_hint()}; "
                f"`{COMMAND}` then finishes the rotation."
            )
        digest_key = (store_key.opened_digest_key(meta[DIGEST_KEY], self.location)
                      if DIGEST_KEY in meta else store_key.lookup_key)
        return given.settled(store_key, digest_key)

    def _read_meta(self) -> dict[str, bytes]:
        meta = {name: bytes(value) for name, value in self._database.run(READ_META)}
        self._database.meta = meta
        return meta

    def _write_meta(self, meta: dict[str, bytes],
                    rows: dict[str, bytes]) -> None:
        """Inside a write transaction holding TABLES_LOCK: set these meta rows."""
        for name, value in rows.items():
            self._database.run(WRITE_META, (name, value))
        meta.update(rows)
        self._database.stored_format = meta["format"]

    def _finish_rotation(self) -> None:
        """Make the key that seals the store's key, in one transaction: the key check, the digest
        key sealed with it, and no other key listed (but one a newer rotation began with)."""
        with self._call("rotate_key()"), self._database.write_transaction(TABLES_LOCK):
            meta = self._read_meta()
            keys = self._checked(self._open_keys(), meta)
            first = self._open_keys().sealing
            if first.matches(meta["key_check"]) and not _sealing_keys(meta):
                return  # its key already, and no other: nothing to change
            others = [check for check in _sealing_keys(meta) if not first.matches(check)]
            self._write_meta(meta, {
                DIGEST_KEY: first.sealed_digest_key(keys.digest_key),
                "key_check": first.check_value,
                SEALING_KEYS: b"".join(others),
                "format": ROTATED_FORMAT,
            })

    def _resealed_everywhere(self) -> Resealed:
        return (self._resealed_memories()
                + self._resealed(PENDING_TABLE, "sealed", PENDING_AAD, MEMORY_ROWS_A_BATCH)
                + self._resealed(HISTORY_TABLE, "sealed_ticket", HISTORY_AAD,
                                 SMALL_ROWS_A_BATCH))

    def _resealed_memories(self) -> Resealed:
        """Every memory row's two sealed values, sealed anew where an earlier key sealed them;
        each customer's rows of a batch in a transaction holding its write lock, so that a save
        copying a row's sealed ticket id into history either ends before (its history row is
        then there for the history pass) or copies the new one."""
        resealed = unreadable = 0
        last, end = 0, self._last_id(MEMORIES_TABLE)
        while True:
            with self._call("rotate_key()"):
                keys = self._open_keys()
                rows = self._database.run(
                    f"SELECT id, customer_digest, ticket_digest, sealed, sealed_ticket FROM"
                    f" {MEMORIES_TABLE} WHERE id > ? AND id <= ? ORDER BY id LIMIT ?",
                    (last, end, MEMORY_ROWS_A_BATCH))
                if not rows:
                    return Resealed(memories=resealed, unreadable=unreadable)
                last = rows[-1][0]
                changes: dict[bytes, tuple[list[tuple], list[tuple]]] = {}
                for row_id, customer, ticket, sealed, sealed_ticket in rows:
                    customer = bytes(customer)
                    new = _anew(keys, customer, ticket, sealed)
                    new_ticket = None if sealed_ticket is None else _anew(
                        keys, customer, HISTORY_AAD, sealed_ticket)
                    unreadable += isinstance(new, UnreadableMemory) + isinstance(
                        new_ticket, UnreadableMemory)
                    memories, tickets = changes.setdefault(customer, ([], []))
                    if isinstance(new, bytes):
                        memories.append((new, row_id, bytes(sealed)))
                    if isinstance(new_ticket, bytes):
                        tickets.append((new_ticket, row_id, bytes(sealed_ticket)))
                    resealed += isinstance(new, bytes) or isinstance(new_ticket, bytes)
                for customer, (memories, tickets) in changes.items():
                    if not (memories or tickets):
                        continue
                    with self._database.write_transaction(customer):
                        for column, updates in (("sealed", memories), ("sealed_ticket", tickets)):
                            if updates:
                                self._database.run_before_commit(
                                    f"UPDATE {MEMORIES_TABLE} SET {column} = ?"
                                    f" WHERE id = ? AND {column} = ?", updates)

    def _last_id(self, table: str) -> int:
        """The table's last row id now: a pass goes no further, so that it ends however fast
        others write (the rows after it are sealed with the new key, or found by the next)."""
        with self._call("rotate_key()"):
            [(last,)] = self._database.run(f"SELECT COALESCE(MAX(id), 0) FROM {table}")
        return int(last)

    def _resealed(self, table: str, column: str, bound_to: bytes,
                  batch: int) -> Resealed:
        """A table's sealed values (``column``, bound to the row's customer and ``bound_to``),
        sealed anew where an earlier key sealed them, a transaction a batch."""
        resealed = unreadable = 0
        last, end = 0, self._last_id(table)
        while True:
            with self._call("rotate_key()"):
                keys = self._open_keys()
                rows = self._database.run(
                    f"SELECT id, customer_digest, {column} FROM {table} WHERE id > ? AND id <= ?"
                    " ORDER BY id LIMIT ?", (last, end, batch))
                if not rows:
                    counted = {"history" if table == HISTORY_TABLE else "pending": resealed}
                    return Resealed(**counted, unreadable=unreadable)
                last = rows[-1][0]
                updates = []
                for row_id, customer, sealed in rows:
                    if sealed == UNKNOWN_TICKET:  # history's ticket of a row that had none
                        continue
                    new = _anew(keys, bytes(customer), bound_to, sealed)
                    unreadable += isinstance(new, UnreadableMemory)
                    if isinstance(new, bytes):
                        updates.append((new, row_id, bytes(sealed)))
                if updates:
                    with self._database.write_transaction(_ROTATION_LOCK):
                        self._database.run_before_commit(
                            f"UPDATE {table} SET {column} = ? WHERE id = ? AND {column} = ?",
                            updates)
                resealed += len(updates)


def _anew(keys: Keys, customer: bytes, bound_to: object, sealed: object
          ) -> bytes | UnreadableMemory | None:
    """A sealed value sealed anew with the key that seals; None if it already was; the
    ``UnreadableMemory`` that says why, when no key given opens it."""
    try:
        return keys.resealed(customer, bound_to, sealed)
    except UnreadableMemory as unreadable:
        return unreadable


def _sealing_keys(meta: dict[str, bytes]) -> list[bytes]:
    """The check values of the keys, besides the key check's, that rows may be sealed with."""
    listed = meta.get(SEALING_KEYS, b"")
    return [listed[start:start + CHECK_VALUE_BYTES]
            for start in range(0, len(listed), CHECK_VALUE_BYTES)]


def _known(check_value: bytes, meta: dict[str, bytes]) -> bool:
    """Whether rows sealed with the key of this check value are known to the store."""
    return check_value in (meta["key_check"], *_sealing_keys(meta))
