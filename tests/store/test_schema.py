"""The tables a store creates are pinned, and stores of each earlier format open and are
upgraded."""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime, timedelta

from memorybook.store.encryption import Keys, parse_key
from tests.helpers import Backend, make_memory, ticket_ids


def test_a_new_store_has_the_pinned_tables_indexes_and_meta_rows(backend: Backend) -> None:
    backend.open().close()
    assert backend.schema() == backend.pinned_schema, (
        "The store's tables changed: a change of schema is a new format (schema.STORE_FORMAT, "
        "with an upgrade in schema.upgrade_tables()); then update pinned_schema deliberately."
    )
    assert meta_of(backend) == b"memorybook-store-3"


def test_a_store_of_format_1_opens_keeps_its_memories_and_is_upgraded(backend: Backend) -> None:
    memory = make_memory("C-1042", "T-1", text="saved by memorybook-store-1")
    make_format_1_store(backend, memory)
    clock = lambda: datetime(2126, 1, 1, tzinfo=UTC)  # noqa: E731 -- a century later
    with backend.open(retention=timedelta(days=1), clock=clock) as store:
        assert json.dumps(store.recall("C-1042")) == json.dumps([memory]), (
            "A format-1 memory has no expiry date: it must be recalled after the upgrade."
        )
        assert store.sweep() == 0
        store.save("C-1042", make_memory("C-1042", "T-2"))
        assert [event for event, _, _ in store.history("C-1042")] == ["saved"]
        assert ticket_ids(store.recall("C-1042")) == ["T-1", "T-2"]
    assert backend.schema() == backend.pinned_schema, (
        "An upgraded store must have the tables of a new one: see schema.upgrade_tables()."
    )
    assert meta_of(backend) == b"memorybook-store-3"
    with backend.open() as again:  # an upgraded store opens as any other
        assert ticket_ids(again.recall("C-1042")) == ["T-1", "T-2"]


def test_a_store_of_format_2_opens_keeps_memories_and_history_and_is_upgraded(
    backend: Backend,
) -> None:
    now = datetime(2026, 8, 4, tzinfo=UTC)
    memory = make_memory("C-1042", "T-1", text="saved by memorybook-store-2")
    make_format_2_store(backend, memory, expires_at=now + timedelta(days=10))
    with backend.open(clock=lambda: now) as store:
        assert json.dumps(store.recall("C-1042")) == json.dumps([memory])
        assert [(e.event, e.ticket_id) for e in store.history("C-1042")] == [("saved", "T-1")]
        gate = store.record_gate("C-1042", make_memory("C-1042", "T-2"))
        assert store.settle_gate(gate, keep=True), (
            "An upgraded store must keep pending gates: see schema.upgrade_tables()."
        )
        assert ticket_ids(store.recall("C-1042")) == ["T-1", "T-2"]
    with backend.open(clock=lambda: now + timedelta(days=11)) as later:
        assert ticket_ids(later.recall("C-1042")) == ["T-2"], (
            "A format-2 memory keeps its expiry date through the upgrade."
        )
    assert backend.schema() == backend.pinned_schema, (
        "An upgraded store must have the tables of a new one: see schema.upgrade_tables()."
    )
    assert meta_of(backend) == b"memorybook-store-3"


def make_format_1_store(backend: Backend, memory: dict) -> None:
    """A store as memorybook-store-1 made it, holding one memory."""
    keys = Keys(parse_key(backend.key, "the test's key", backend.location))
    customer = keys.customer_digest("C-1042")
    ticket = keys.ticket_digest("C-1042", "T-1")
    connection, mark = backend.connect_directly()
    with contextlib.closing(connection):
        for statement in backend.format_1_tables:
            connection.execute(statement)
        connection.execute(
            f"INSERT INTO memorybook_meta (name, value) VALUES ('format', {mark}),"
            f" ('key_check', {mark})",
            (b"memorybook-store-1", keys.check_value),
        )
        connection.execute(
            "INSERT INTO memorybook_memories (customer_digest, ticket_digest, sealed)"
            f" VALUES ({mark}, {mark}, {mark})",
            (customer, ticket, keys.seal(customer, ticket, json.dumps(memory))),
        )
        connection.commit()


def make_format_2_store(backend: Backend, memory: dict, expires_at: datetime) -> None:
    """A store as memorybook-store-2 made it, holding one memory (expiring) and its history."""
    keys = Keys(parse_key(backend.key, "the test's key", backend.location))
    customer = keys.customer_digest("C-1042")
    ticket = keys.ticket_digest("C-1042", "T-1")
    ends = (expires_at - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    connection, mark = backend.connect_directly()
    with contextlib.closing(connection):
        for statement in backend.format_2_tables:
            connection.execute(statement)
        connection.execute(
            f"INSERT INTO memorybook_meta (name, value) VALUES ('format', {mark}),"
            f" ('key_check', {mark})",
            (b"memorybook-store-2", keys.check_value),
        )
        connection.execute(
            "INSERT INTO memorybook_memories (customer_digest, ticket_digest, sealed, expires_at)"
            f" VALUES ({mark}, {mark}, {mark}, {mark})",
            (customer, ticket, keys.seal(customer, ticket, json.dumps(memory)), ends),
        )
        connection.execute(
            "INSERT INTO memorybook_history (customer_digest, event, at, sealed_ticket)"
            f" VALUES ({mark}, 'saved', {mark}, {mark})",
            (customer, ends - 10 * 86_400_000_000,
             keys.seal(customer, b"memorybook history", json.dumps("T-1"))),
        )
        connection.commit()


def meta_of(backend: Backend) -> bytes:
    connection, _ = backend.connect_directly()
    with contextlib.closing(connection):
        meta = dict(connection.execute("SELECT name, value FROM memorybook_meta").fetchall())
    assert sorted(meta) == ["format", "key_check"]
    return bytes(meta["format"])
