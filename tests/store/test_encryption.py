"""Encryption at rest and the store key: nothing in plaintext, wrong and malformed keys refused."""

from __future__ import annotations

import base64
import contextlib
import os

import pytest

from memorybook.store import (
    DamagedMemoryError,
    MemoryStoreError,
    MemoryStoreKeyError,
    open_store,
)
from tests.helpers import Backend, make_memory, new_key, ticket_ids

# Distinctive strings that must never reach the disk in plaintext.
SECRET_CUSTOMER_ID = "C-PLAINTEXT-7731"


SECRET_TICKET_ID = "T-PLAINTEXT-4410"


SECRET_TICKET_TEXT = "our vault combination is 31-7-44, please rotate it"


def test_nothing_is_stored_in_plaintext(backend: Backend) -> None:
    with backend.open() as store:
        for n in range(3):
            memory = make_memory(
                SECRET_CUSTOMER_ID, f"{SECRET_TICKET_ID}-{n}", text=SECRET_TICKET_TEXT
            )
            store.save(SECRET_CUSTOMER_ID, memory)
        raw = backend.raw_bytes()  # while open: SQLite's new rows are still in the -wal file
        assert len(raw) > 1000
        secrets = [
            SECRET_CUSTOMER_ID,
            SECRET_TICKET_ID,
            SECRET_TICKET_TEXT,
            "Acme Corp",
            "Adding an admin",
        ]
        for secret in secrets:
            for encoded in (
                secret.encode(),
                secret.encode().hex().encode(),
                secret.encode("utf-16-le"),
            ):
                assert encoded not in raw, f"{secret!r} found in the raw store"
        assert backend.key.encode() not in raw


def test_wrong_key_fails_at_open(backend: Backend) -> None:
    with backend.open() as store:
        store.save("C-1042", make_memory("C-1042", "T-1"))
    with pytest.raises(MemoryStoreKeyError, match="did not encrypt") as raised:
        backend.open(key=new_key())
    assert backend.location.split("?")[0] in str(raised.value)


def test_malformed_key_is_rejected(backend: Backend) -> None:
    for malformed in ["not a key", "c2hvcnQ=", base64.urlsafe_b64encode(os.urandom(31)).decode()]:
        with pytest.raises(MemoryStoreKeyError, match="malformed"):
            backend.open(key=malformed)


@pytest.mark.parametrize(
    "bad_key",
    [
        pytest.param(lambda key: key + "junk", id="trailing junk"),
        pytest.param(lambda key: key[:20] + "!" + key[20:], id="junk inside"),
        pytest.param(lambda key: key + "=", id="extra padding"),
        pytest.param(lambda key: base64.urlsafe_b64encode(bytes(32)).decode(), id="all zero"),
    ],
)
def test_keys_that_only_look_valid_are_refused(backend: Backend, bad_key) -> None:
    with pytest.raises(MemoryStoreKeyError, match="malformed|all zero"):
        backend.open(key=bad_key(backend.key))


def test_key_is_read_from_environment(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    with backend.open() as store:
        store.save("C-1042", make_memory("C-1042", "T-1"))
    monkeypatch.setenv("MEMORYBOOK_STORE_KEY", backend.key)
    with open_store(backend.url) as store:
        assert len(store.recall("C-1042")) == 1


def test_a_row_copied_to_another_customer_fails_its_integrity_check(backend: Backend) -> None:
    with backend.open() as store:
        store.save("C-1042", make_memory("C-1042", "T-1"))
        elsewhere = store.sealed_row("C-2210", make_memory("C-2210", "T-1"))
        connection, placeholder = backend.connect_directly()
        with contextlib.closing(connection):
            [(sealed,)] = connection.execute("SELECT sealed FROM memorybook_memories").fetchall()
            connection.execute(
                "INSERT INTO memorybook_memories (customer_digest, ticket_digest, sealed)"
                f" VALUES ({placeholder}, {placeholder}, {placeholder})",
                (elsewhere.customer_digest, elsewhere.ticket_digest, sealed),
            )
            connection.commit()
        with pytest.raises(MemoryStoreError, match="failed its integrity check") as raised:
            store.recall("C-2210")
        assert ticket_ids(store.recall("C-1042")) == ["T-1"]
    # Its row holds no ticket id sealed for C-2210 (it was written by hand): none is named.
    assert isinstance(raised.value, DamagedMemoryError) and raised.value.ticket_id is None
    assert "if you know its ticket" in str(raised.value)


def test_a_memory_damaged_in_place_is_named_by_its_ticket_so_that_it_can_be_forgotten(
        backend: Backend) -> None:
    with backend.open() as store:
        for ticket in ("T-1", "T-2", "T-3"):
            store.save("C-1042", make_memory("C-1042", ticket))
        backend.flip_a_byte("memorybook_memories", "sealed", offset=1)  # T-2's
        with pytest.raises(DamagedMemoryError) as raised:
            store.recall("C-1042")
        assert raised.value.customer_id == "C-1042" and raised.value.ticket_id == "T-2", (
            "recall() must name the damaged memory's ticket, read from the ticket id sealed "
            "beside it for history (_damaged_rows_ticket() in memorybook/store/base.py), so "
            f"that it can be forgotten: {raised.value}")
        assert "forget('C-1042', 'T-2')" in str(raised.value), str(raised.value)
        forgotten = store.forget("C-1042", raised.value.ticket_id)
        assert forgotten == [] and forgotten.unreadable == 1, (
            "forget() of a damaged memory returns none it could read, and counts the one it "
            f"deleted all the same (MemoriesRead.unreadable): {forgotten!r}")
        assert ticket_ids(store.recall("C-1042")) == ["T-1", "T-3"]


def test_a_damaged_memory_is_named_by_any_intact_copy_of_its_ticket_id(backend: Backend) -> None:
    with backend.open() as store:
        store.save("C-1042", make_memory("C-1042", "T-1"))
        store.save("C-1042", make_memory("C-1042", "T-1"))  # the same ticket, saved again
        backend.flip_a_byte("memorybook_memories", "sealed_ticket", offset=0)
        backend.flip_a_byte("memorybook_memories", "sealed", offset=1)
        with pytest.raises(DamagedMemoryError) as raised:
            store.recall("C-1042")
        assert raised.value.ticket_id == "T-1", (
            "recall() must read the ticket id from any row of the damaged memory's ticket whose "
            f"copy opens (_damaged_rows_ticket() in memorybook/store/base.py): {raised.value}")


@pytest.mark.parametrize("column", ["sealed", "ticket_digest", "sealed_ticket"])
def test_text_in_place_of_a_rows_bytes_is_a_damaged_memory_and_can_be_erased(
        backend: Backend, column: str) -> None:
    if backend.name != "sqlite":
        pytest.skip("only SQLite keeps text in a column declared for bytes")
    with backend.open() as store:
        for ticket in ("T-1", "T-2"):
            store.save("C-1042", make_memory("C-1042", ticket))
        connection, _ = backend.connect_directly()
        with contextlib.closing(connection):
            [(row,)] = connection.execute(
                "SELECT id FROM memorybook_memories ORDER BY id DESC LIMIT 1").fetchall()
            if column == "sealed_ticket":  # and its memory damaged, so that it is read
                connection.execute("UPDATE memorybook_memories SET sealed = x'00' WHERE id = ?",
                                   (row,))
            connection.execute(f"UPDATE memorybook_memories SET {column} = 'text' WHERE id = ?",
                               (row,))
            connection.commit()
        with pytest.raises(DamagedMemoryError):
            store.recall("C-1042")
        erased = store.forget_customer("C-1042")
        assert ticket_ids(erased) == ["T-1"] and erased.unreadable == 1, (
            "a row holding text where bytes belong is a damaged memory, never a TypeError "
            f"(Keys.opened() in memorybook/store/encryption.py): {erased!r}")
        assert store.recall("C-1042") == []
