"""The in-process memories (memorybook.memory) and the stores (notebook 6) are interchangeable."""

import pytest

from memorybook.example import EARLIER
from memorybook.memory import InMemoryMemories, ticket_id_of
from memorybook.store import Memories, MemoryStore


def memory_of(ticket_index: int) -> dict:
    return {"request": EARLIER[ticket_index], "jev_answered": {}}


def test_the_in_kernel_memories_have_what_the_wrapper_needs_from_a_store():
    memories = InMemoryMemories()
    assert isinstance(memories, Memories) and not isinstance(memories, MemoryStore)
    assert memories.save("C-1042", memory_of(0)) == []  # nothing evicted: no cap
    assert memories.save("C-1042", memory_of(4)) == []
    erased = memories.forget("C-1042", "T-105")
    assert [ticket_id_of(m) for m in erased] == ["T-105"]
    assert [ticket_id_of(m) for m in memories.recall("C-1042")] == ["T-101"]
    with pytest.raises(KeyError, match="C-1042 has no memory of ticket T-105"):
        memories.forget("C-1042", "T-105")
    assert [ticket_id_of(m) for m in memories.forget_customer("C-1042")] == ["T-101"]
    assert memories.recall("C-1042") == []
