"""The tables a store creates are pinned, and stores of earlier formats open and are upgraded."""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime, timedelta

import pytest

from memorybook.store.encryption import Keys, parse_key
from memorybook.store.postgres import _write_lock_id
from memorybook.store.writes import SAVE, UNKNOWN_TICKET, postgres_function
from tests.helpers import Backend, make_memory, ticket_ids

START = datetime(2026, 8, 4, 9, 0, tzinfo=UTC)


def test_a_new_store_has_the_pinned_tables_indexes_and_meta_rows(backend: Backend) -> None:
    backend.open().close()
    assert backend.schema() == backend.pinned_schema, (
        "The store's tables changed: a change of schema is a new format (schema.STORE_FORMAT, "
        "with an upgrade in schema.upgrade_tables()); then update pinned_schema deliberately."
    )
    assert meta_of(backend) == b"memorybook-store-4"


def test_a_store_of_format_1_opens_keeps_its_memories_and_is_upgraded(backend: Backend) -> None:
    memory = make_memory("C-1042", "T-1", text="saved by memorybook-store-1")
    make_old_store(backend, [memory], format_number=1)
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
    assert meta_of(backend) == b"memorybook-store-4"
    with backend.open() as again:  # an upgraded store opens as any other
        assert ticket_ids(again.recall("C-1042")) == ["T-1", "T-2"]


def test_a_store_of_format_2_is_upgraded_with_each_customers_count(backend: Backend) -> None:
    memories = [make_memory("C-1042", f"T-{n}") for n in (1, 2, 3)]
    make_old_store(backend, memories, format_number=2, expires_at=[None, START, None])
    clock = lambda: START  # noqa: E731 -- T-2 has just expired
    with backend.open(max_memories=3, clock=clock) as store:
        assert ticket_ids(store.recall("C-1042")) == ["T-1", "T-3"]
        assert store.save("C-1042", make_memory("C-1042", "T-4")) == []
        evicted = store.save("C-1042", make_memory("C-1042", "T-5"))
        assert ticket_ids(evicted) == ["T-1"], (
            "A customer of a format-2 store must be held to the cap after the upgrade: the "
            "upgrade counts each customer's memories (schema.upgrade_tables())."
        )
        assert ticket_ids(store.recall("C-1042")) == ["T-3", "T-4", "T-5"]
        assert [event for event, _, _ in store.history("C-1042")] == [
            "expired", "saved", "saved", "evicted"
        ]
    assert backend.schema() == backend.pinned_schema, (
        "An upgraded store must have the tables and indexes of a new one (the expiry index "
        "included): see schema.upgrade_tables()."
    )
    assert meta_of(backend) == b"memorybook-store-4"


def test_a_store_of_format_2_is_upgraded_to_keep_pending_gates(backend: Backend) -> None:
    now = datetime(2026, 8, 4, tzinfo=UTC)
    memory = make_memory("C-1042", "T-1", text="saved by memorybook-store-2")
    make_old_store(backend, [memory], format_number=2, expires_at=[now + timedelta(days=10)])
    with backend.open(clock=lambda: now) as store:
        assert json.dumps(store.recall("C-1042")) == json.dumps([memory])
        gate = store.record_gate("C-1042", make_memory("C-1042", "T-2"))
        assert store.settle_gate(gate, keep=True), (
            "An upgraded store must keep pending gates: see schema.upgrade_tables()."
        )
        assert ticket_ids(store.recall("C-1042")) == ["T-1", "T-2"]
    with backend.open(clock=lambda: now + timedelta(days=11)) as later:
        assert ticket_ids(later.recall("C-1042")) == ["T-2"], (
            "A format-2 memory keeps its expiry date through the upgrade."
        )


def test_a_store_of_format_3_is_upgraded_so_that_history_names_what_expires_or_is_evicted(
    backend: Backend,
) -> None:
    memories = [make_memory("C-1042", f"T-{n}") for n in (1, 2, 3)]
    make_old_store(backend, memories, format_number=3, expires_at=[START, None, None])
    with backend.open(max_memories=2, clock=lambda: START) as store:  # T-1 has just expired
        assert ticket_ids(store.save("C-1042", make_memory("C-1042", "T-4"))) == ["T-2"]
        assert [(event, ticket) for event, ticket, _ in store.history("C-1042")] == [
            ("expired", "T-1"), ("saved", "T-4"), ("evicted", "T-2")
        ], (
            "A save copies the sealed ticket id of each memory that expires or is evicted into "
            "history: the upgrade to format 4 must seal it for every row of an earlier format "
            "(SqlDatabase.upgrade() in database.py)."
        )
        assert ticket_ids(store.recall("C-1042")) == ["T-3", "T-4"]
    assert backend.schema() == backend.pinned_schema, (
        "An upgraded store must have the tables of a new one (the backend's save_objects() "
        "included): see schema.upgrade_tables() and SqlDatabase.upgrade()."
    )
    assert meta_of(backend) == b"memorybook-store-4"


def test_a_format_3_store_larger_than_an_upgrade_batch_has_every_row_sealed(
    backend: Backend,
) -> None:
    memories = [make_memory("C-1042", f"T-{n}") for n in range(1_001)]  # a batch is 1,000
    make_old_store(backend, memories, format_number=3, expires_at=[START] * len(memories))
    # At the cap, a save expires them first (their history copies each sealed ticket id).
    with backend.open(max_memories=1_001, clock=lambda: START) as store:
        store.save("C-1042", make_memory("C-1042", "T-new"))
        expired = [ticket for event, ticket, _ in store.history("C-1042") if event == "expired"]
    assert sorted(expired) == sorted(f"T-{n}" for n in range(1_001)), (
        "Every row of an earlier format must have its ticket id sealed by the upgrade, however "
        "many batches that takes (SqlDatabase.upgrade() in database.py)."
    )


def test_a_row_an_earlier_version_writes_after_the_upgrade_is_evicted_with_an_unknown_ticket(
    backend: Backend,
) -> None:
    # During a rolling upgrade, a replica still running format 3's code writes rows without
    # their sealed ticket id: a save must still evict them, history naming no ticket.
    with backend.open(max_memories=1) as store:
        row = store.sealed_row("C-1042", make_memory("C-1042", "T-1"))
    connection, mark = backend.connect_directly()
    with contextlib.closing(connection):
        connection.execute(
            "INSERT INTO memorybook_memories (customer_digest, ticket_digest, sealed)"
            f" VALUES ({mark}, {mark}, {mark})", row[:3],
        )
        connection.execute(
            f"INSERT INTO memorybook_counts (customer_digest, memories) VALUES ({mark}, 1)",
            row[:1],
        )
        connection.commit()
    with backend.open(max_memories=1) as store:
        assert ticket_ids(store.save("C-1042", make_memory("C-1042", "T-2"))) == ["T-1"]
        assert [(event, ticket) for event, ticket, _ in store.history("C-1042")] == [
            ("saved", "T-2"), ("evicted", None)
        ], (
            "A row without its sealed ticket id must be evicted all the same, its history "
            "ticket unknown (writes.UNKNOWN_TICKET, EncryptedStore.history())."
        )


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_functions_an_earlier_version_made_are_made_anew_at_open_and_its_calls_still_work(
    backend: Backend,
) -> None:
    """A store of this format that an earlier version made holds that version's functions, and
    such a version's replicas may run beside this one during a rolling upgrade: opening the
    store makes this version's functions (the sweep's too), with the signatures those replicas
    call."""
    with backend.open(max_memories=2) as store:
        store.save("C-1042", make_memory("C-1042", "T-1"))
        row = store.sealed_row("C-1042", make_memory("C-1042", "T-3"))
    connection, _ = backend.connect_directly()
    with contextlib.closing(connection):  # as an earlier version left them: a save that does
        connection.execute("DROP FUNCTION memorybook_sweep")  # nothing, and no sweep's
        connection.execute(postgres_function(SAVE._replace(steps=())))
        connection.commit()
    now = datetime(2026, 8, 4, 9, 0, tzinfo=UTC)
    with backend.open(max_memories=2, clock=lambda: now) as store:
        assert store.save("C-1042", make_memory("C-1042", "T-2")) == []
        assert ticket_ids(store.recall("C-1042")) == ["T-1", "T-2"], (
            "Opening a store whose functions differ from this version's must make them anew "
            "(SqlDatabase.upgrade(), PostgresDatabase.objects_out_of_date()).")
        assert store.sweep() == 0
    connection, _ = backend.connect_directly()
    with contextlib.closing(connection):  # a save as the previous release calls it
        evicted = connection.execute(
            "SELECT row_id, row_ticket, row_sealed FROM memorybook_save(%s, %s, %s, %s, %s,"
            " %s, %s, %s, %s, %s)",
            (*row, None, 1, 2, 2**62, UNKNOWN_TICKET, _write_lock_id(row.customer_digest)),
        ).fetchall()
        connection.commit()
    assert len(evicted) == 1, (
        "memorybook_save() must keep the arguments and the rows earlier versions call it with "
        f"and read (writes.py SAVE): {evicted}")
    with backend.open(max_memories=2) as store:
        assert ticket_ids(store.recall("C-1042")) == ["T-2", "T-3"]
        assert store.save("C-1042", make_memory("C-1042", "T-4")) == [make_memory("C-1042", "T-2")]


def make_old_store(
    backend: Backend, memories: list[dict], *, format_number: int,
    expires_at: list[datetime | None] | None = None,
) -> None:
    """A store as memorybook-store-1, -2 or -3 made it, holding these memories of one customer
    (from format 2: each with its expiry date, if any; format 3: and the customer's count)."""
    keys = Keys(parse_key(backend.key, "the test's key", backend.location))
    customer = keys.customer_digest("C-1042")
    connection, mark = backend.connect_directly()
    statements = backend.format_1_tables
    if format_number >= 2:
        statements = (*statements, *backend.format_2_tables)
    if format_number >= 3:
        statements = (*statements, *backend.format_3_tables)
    with contextlib.closing(connection):
        for statement in statements:
            connection.execute(statement)
        connection.execute(
            f"INSERT INTO memorybook_meta (name, value) VALUES ('format', {mark}),"
            f" ('key_check', {mark})",
            (f"memorybook-store-{format_number}".encode(), keys.check_value),
        )
        for memory, ends in zip(memories, expires_at or [None] * len(memories), strict=True):
            ticket = keys.ticket_digest("C-1042", memory["request"]["ticket"]["id"])
            row = (customer, ticket, keys.seal(customer, ticket, json.dumps(memory)))
            if format_number == 1:
                connection.execute(
                    "INSERT INTO memorybook_memories (customer_digest, ticket_digest, sealed)"
                    f" VALUES ({mark}, {mark}, {mark})", row,
                )
            else:
                micros = None if ends is None else (ends - datetime(1970, 1, 1, tzinfo=UTC)) // (
                    timedelta(microseconds=1))
                connection.execute(
                    "INSERT INTO memorybook_memories"
                    " (customer_digest, ticket_digest, sealed, expires_at)"
                    f" VALUES ({mark}, {mark}, {mark}, {mark})", (*row, micros),
                )
        if format_number == 3:
            connection.execute(
                "INSERT INTO memorybook_counts (customer_digest, memories)"
                f" VALUES ({mark}, {mark})",
                (customer, len(memories)),
            )
        connection.commit()


def meta_of(backend: Backend) -> bytes:
    connection, _ = backend.connect_directly()
    with contextlib.closing(connection):
        meta = dict(connection.execute("SELECT name, value FROM memorybook_meta").fetchall())
    assert sorted(meta) == ["format", "key_check"]
    return bytes(meta["format"])
