"""The calls every store answers alike: round trips, order, scoping, eviction, forgetting."""

from __future__ import annotations

import contextlib
import json

import pytest

from memorybook.store import (
    MAX_MEMORIES_PER_CUSTOMER,
    Memories,
    MemoryNotFoundError,
    MemoryStore,
    MemoryStoreError,
)
from tests.helpers import Backend, make_memory, ticket_ids


def test_recall_returns_saved_memories_byte_exact_and_in_order(store: MemoryStore) -> None:
    saved = [make_memory("C-1042", f"T-{n}", text=f"message {n}") for n in range(5)]
    for memory in saved:
        assert store.save("C-1042", memory) == []
    recalled = store.recall("C-1042")
    assert json.dumps(recalled) == json.dumps(saved)
    assert json.dumps(recalled, ensure_ascii=False) == json.dumps(saved, ensure_ascii=False)
    assert [list(m["jev_answered"]) for m in recalled] == [list(m["jev_answered"]) for m in saved]


def test_recall_of_unknown_customer_is_empty(store: MemoryStore) -> None:
    assert store.recall("C-nobody") == []


@pytest.mark.parametrize("where", ["a store", "InMemoryMemories"])
def test_recall_ticket_returns_that_tickets_memories_alone(store: MemoryStore, where) -> None:
    from datetime import UTC, datetime, timedelta

    from memorybook import InMemoryMemories

    memories = store if where == "a store" else InMemoryMemories()
    for ticket_id in ("T-1", "T-2", "T-1"):
        memories.save("C-1042", make_memory("C-1042", ticket_id))
    memories.save("C-7", make_memory("C-7", "T-1"))
    assert ticket_ids(memories.recall_ticket("C-1042", "T-1")) == ["T-1", "T-1"], (
        f"{where}: recall_ticket() must return the customer's memories of that ticket alone")
    assert memories.recall_ticket("C-1042", "T-9") == []
    if where == "a store":  # an expired memory is never recalled, by ticket either
        store.save("C-1042", make_memory("C-1042", "T-3"),
                   expires_at=datetime.now(UTC) + timedelta(hours=1))
        assert ticket_ids(store.recall_ticket("C-1042", "T-3")) == ["T-3"]
        store.clock = lambda: datetime.now(UTC) + timedelta(days=1)
        assert store.recall_ticket("C-1042", "T-3") == []


def test_memories_survive_reopening(backend: Backend) -> None:
    saved = [make_memory("C-1042", "T-1"), make_memory("C-1042", "T-2")]
    with backend.open() as store:
        for memory in saved:
            store.save("C-1042", memory)
    with backend.open() as store:
        assert json.dumps(store.recall("C-1042")) == json.dumps(saved)


LOOKALIKE_CUSTOMER_IDS = [
    "C-1042",
    "c-1042",
    "C-1042 ",
    " C-1042",
    "C-1042\n",
    "C-10420",
    "C-1042' OR '1'='1",
    "C-1042'; DROP TABLE memorybook_memories; --",
    '["customer", "C-1042"]',
    "%",
    "*",
]


def test_each_customer_recalls_only_their_own_memories(store: MemoryStore) -> None:
    for customer_id in LOOKALIKE_CUSTOMER_IDS:
        store.save(customer_id, make_memory(customer_id, "T-1", text=f"from {customer_id!r}"))
    for customer_id in LOOKALIKE_CUSTOMER_IDS:
        recalled = store.recall(customer_id)
        assert len(recalled) == 1
        assert recalled[0]["request"]["customer"]["id"] == customer_id
    assert store.recall("C-1042 OR 1=1") == []


def test_forget_cannot_reach_another_customers_memory(store: MemoryStore) -> None:
    store.save("C-1042", make_memory("C-1042", "T-1"))
    with pytest.raises(MemoryNotFoundError):
        store.forget("c-1042", "T-1")
    assert len(store.recall("C-1042")) == 1


def test_forget_returns_deleted_memories_and_they_stay_gone(backend: Backend) -> None:
    first = make_memory("C-1042", "T-1", text="first")
    second = make_memory("C-1042", "T-2")
    again = make_memory("C-1042", "T-1", text="follow-up")
    with backend.open() as store:
        for memory in (first, second, again):
            store.save("C-1042", memory)
        forgotten = store.forget("C-1042", "T-1")
        assert json.dumps(forgotten) == json.dumps([first, again])
        assert json.dumps(store.recall("C-1042")) == json.dumps([second])
    with backend.open() as store:
        assert json.dumps(store.recall("C-1042")) == json.dumps([second])
        with pytest.raises(MemoryNotFoundError, match="T-1"):
            store.forget("C-1042", "T-1")
        with pytest.raises(MemoryNotFoundError):
            store.forget("C-1042", "T-unknown")
        with pytest.raises(KeyError) as not_found:  # what code for the in-kernel memories catches
            store.forget("C-1042", "T-unknown")
        assert "T-unknown" in str(not_found.value) and not str(not_found.value).startswith("'")


def test_a_store_is_memories_the_wrapper_can_be_given(store: MemoryStore) -> None:
    assert isinstance(store, Memories) and isinstance(store, MemoryStore)


def test_saving_past_the_cap_evicts_the_oldest(store: MemoryStore) -> None:
    saved = [make_memory("C-1042", f"T-{n}") for n in range(MAX_MEMORIES_PER_CUSTOMER + 2)]
    for memory in saved[:MAX_MEMORIES_PER_CUSTOMER]:
        assert store.save("C-1042", memory) == []
    assert json.dumps(store.save("C-1042", saved[-2])) == json.dumps([saved[0]])
    assert json.dumps(store.save("C-1042", saved[-1])) == json.dumps([saved[1]])
    assert json.dumps(store.recall("C-1042")) == json.dumps(saved[2:])
    assert store.recall("C-other") == []


def test_lower_cap_applies_at_next_save(backend: Backend) -> None:
    saved = [make_memory("C-1042", f"T-{n}") for n in range(5)]
    with backend.open(max_memories=10) as store:
        for memory in saved[:4]:
            store.save("C-1042", memory)
    with backend.open(max_memories=2) as store:
        assert len(store.recall("C-1042")) == 4
        assert json.dumps(store.save("C-1042", saved[4])) == json.dumps(saved[:3])
        assert json.dumps(store.recall("C-1042")) == json.dumps(saved[3:])


def test_closed_store_refuses_work(store: MemoryStore) -> None:
    store.close()
    store.close()
    with pytest.raises(MemoryStoreError, match="closed"):
        store.recall("C-1042")


def damage_row(backend: Backend, position: int) -> None:
    """Flip one byte of the ciphertext of the customer rows' `position`-th row (1 = oldest)."""
    connection, placeholder = backend.connect_directly()
    with contextlib.closing(connection):
        rows = connection.execute("SELECT id, sealed FROM memorybook_memories ORDER BY id")
        row_id, sealed = list(rows)[position - 1]
        damaged = bytearray(sealed)
        damaged[-1] ^= 0x01
        connection.execute(
            f"UPDATE memorybook_memories SET sealed = {placeholder} WHERE id = {placeholder}",
            (bytes(damaged), row_id),
        )
        connection.commit()


def test_a_damaged_memory_is_named_and_can_be_forgotten(backend: Backend) -> None:
    with backend.open() as store:
        for ticket in ("T-1", "T-2", "T-3"):
            store.save("C-1042", make_memory("C-1042", ticket))
    damage_row(backend, 2)
    with backend.open() as store:
        with pytest.raises(MemoryStoreError, match="Memory number 2 of 3 .oldest first.") as raised:
            store.recall("C-1042")
        assert "forget_customer" in str(raised.value) and "'C-1042'" in str(raised.value)
        assert store.forget("C-1042", "T-2") == []  # unreadable: deleted, reported as a notice
        assert "1 unreadable memory row(s) of customer 'C-1042'" in store.notices[-1]
        assert ticket_ids(store.recall("C-1042")) == ["T-1", "T-3"]


def test_a_damaged_memory_does_not_block_saving_at_the_cap(backend: Backend) -> None:
    with backend.open(max_memories=2) as store:
        store.save("C-1042", make_memory("C-1042", "T-1"))
        store.save("C-1042", make_memory("C-1042", "T-2"))
    damage_row(backend, 1)
    with backend.open(max_memories=2) as store:
        assert store.save("C-1042", make_memory("C-1042", "T-3")) == []  # T-1 evicted, unreadable
        assert "Evicted 1 unreadable memory row(s)" in store.notices[-1]
        assert ticket_ids(store.recall("C-1042")) == ["T-2", "T-3"]


def test_forget_customer_erases_every_memory_and_returns_the_readable_ones(
    backend: Backend,
) -> None:
    with backend.open() as store:
        for ticket in ("T-1", "T-2", "T-3", "T-1"):
            store.save("C-1042", make_memory("C-1042", ticket))
        store.save("C-2210", make_memory("C-2210", "T-9"))
    damage_row(backend, 3)
    with backend.open() as store:
        erased = store.forget_customer("C-1042")
        assert ticket_ids(erased) == ["T-1", "T-2", "T-1"]  # oldest first, damaged one left out
        assert erased[0] == make_memory("C-1042", "T-1")
        assert "Erased 1 unreadable memory row(s)" in store.notices[-1]
        assert store.recall("C-1042") == []
        assert store.forget_customer("C-1042") == []
        assert ticket_ids(store.recall("C-2210")) == ["T-9"]  # other customers untouched
    with backend.open() as store:
        assert store.recall("C-1042") == []


# More levels than json can decode on any Python (3.11 and 3.12 stop near 1,000, 3.13 near
# 10,000), and so than it can encode: such a memory's text is written by hand, as one saved
# before memorybook refused deep memories would read.
TOO_DEEP_TO_DECODE = 1_000_000


def too_deep_memory_json(ticket_id: str) -> str:
    memory = make_memory("C-1042", ticket_id)
    memory["jev_answered"]["deep"] = "NESTED"
    nested_text = "[" * TOO_DEEP_TO_DECODE + '"deep"' + "]" * TOO_DEEP_TO_DECODE
    return json.dumps(memory).replace('"NESTED"', nested_text)


@pytest.mark.parametrize("erase", ["forget", "forget_customer", "eviction"])
def test_a_memory_too_deep_to_read_is_named_by_recall_and_erased_all_the_same(
    backend: Backend, monkeypatch: pytest.MonkeyPatch, erase: str
) -> None:
    with backend.open(max_memories=2) as store:
        with monkeypatch.context() as saved_before_the_limit:
            saved_before_the_limit.setattr(
                "memorybook.store.base.checked_memory_json",
                lambda customer_id, memory: ("T-deep", too_deep_memory_json("T-deep")),
            )
            store.save("C-1042", make_memory("C-1042", "T-deep"))
        store.save("C-1042", make_memory("C-1042", "T-1"))
        with pytest.raises(MemoryStoreError, match="Memory number 1 of 2 .oldest first.") as raised:
            store.recall("C-1042")
        assert "nested too deeply to decode" in str(raised.value)
        assert "forget_customer" in str(raised.value)
        if erase == "forget":
            assert store.forget("C-1042", "T-deep") == []
            assert ticket_ids(store.recall("C-1042")) == ["T-1"]
        elif erase == "forget_customer":
            assert ticket_ids(store.forget_customer("C-1042")) == ["T-1"]
            assert store.recall("C-1042") == []
        else:
            assert store.save("C-1042", make_memory("C-1042", "T-2")) == []
            assert ticket_ids(store.recall("C-1042")) == ["T-1", "T-2"]
        assert "1 unreadable memory row(s)" in store.notices[-1]


def test_a_sealed_row_written_straight_into_the_table_is_recalled(backend: Backend) -> None:
    memory = make_memory("C-1042", "T-1")
    with backend.open() as store:
        row = store.sealed_row("C-1042", memory)
        assert store.recall("C-1042") == []  # making the row wrote nothing
        connection, placeholder = backend.connect_directly()
        with contextlib.closing(connection):
            connection.execute(
                f"INSERT INTO memorybook_memories ({', '.join(row._fields)})"
                f" VALUES ({', '.join([placeholder] * len(row))})",
                row,
            )
            connection.commit()
        assert json.dumps(store.recall("C-1042")) == json.dumps([memory])
