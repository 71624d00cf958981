"""The in-process memories (memorybook.memory) and the stores (notebook 6) are interchangeable."""

import pytest

from memorybook.example import EARLIER
from memorybook.memory import InMemoryMemories, ticket_id_of
from memorybook.store import Memories, MemoryNotFoundError, MemoryStore, StoreInputError


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
    with pytest.raises(KeyError, match="'C-1042' has no memory of ticket 'T-105'"):
        memories.forget("C-1042", "T-105")
    assert [ticket_id_of(m) for m in memories.forget_customer("C-1042")] == ["T-101"]
    assert memories.recall("C-1042") == []


FIX = ("InMemoryMemories (memorybook/memory.py) must refuse what a store refuses with the "
       "store's errors, using its checks in memorybook/store/validation.py: an app may pass "
       "either")


@pytest.mark.parametrize("bad_id", [None, "", "   ", 1042, b"C-1042"])
def test_the_in_kernel_memories_refuse_an_id_a_store_refuses_with_its_error(bad_id):
    memories = InMemoryMemories()
    memories.save("C-1042", memory_of(0))
    calls = {"recall": lambda: memories.recall(bad_id),
             "save": lambda: memories.save(bad_id, memory_of(0)),
             "forget": lambda: memories.forget(bad_id, "T-101"),
             "forget_customer": lambda: memories.forget_customer(bad_id),
             "forget's ticket id": lambda: memories.forget("C-1042", bad_id)}
    not_refused = []
    for name, call in calls.items():
        try:
            call()
        except StoreInputError as error:
            assert "must be a non-empty string" in str(error), error
        except Exception as error:
            not_refused.append(f"{name} raised {type(error).__name__}")
        else:
            not_refused.append(f"{name} took it")
    assert not_refused == [], f"given the id {bad_id!r}, {not_refused}: {FIX}"
    assert [ticket_id_of(m) for m in memories.recall("C-1042")] == ["T-101"]


def test_the_in_kernel_memories_forget_a_ticket_they_lack_as_a_store_does():
    memories = InMemoryMemories()
    memories.save("C-1042", memory_of(0))
    with pytest.raises(KeyError) as lacking:
        memories.forget("C-1042", "T-9")
    assert isinstance(lacking.value, MemoryNotFoundError), f"{type(lacking.value)}: {FIX}"
    assert "'C-1042' has no memory of ticket 'T-9'" in str(lacking.value), lacking.value


def memory_for(customer: str, **changes) -> dict:
    memory = memory_of(0)
    return {**memory, "request": {**memory["request"], "customer": {"id": customer}}, **changes}


@pytest.mark.parametrize("memory", [
    "not a memory",
    {"request": {"customer": {"id": "C-1042"}}, "jev_answered": {}},
    memory_for("C-2210"),
    memory_for("C-1042", jev_answered={"team": float("nan")}),
    memory_for("C-1042", jev_answered={"teams": ("billing", "general")}),
], ids=["a string", "no ticket id", "another customer's", "NaN", "a tuple"])
def test_the_in_kernel_memories_refuse_a_memory_a_store_refuses(memory, tmp_path):
    from memorybook.store import open_store

    refused = []
    with open_store(f"sqlite:///{tmp_path / 'store.sqlite3'}") as store:
        for memories in (store, InMemoryMemories()):
            with pytest.raises(StoreInputError) as error:
                memories.save("C-1042", memory)
            refused.append(str(error.value))
            assert memories.recall("C-1042") == []
    assert refused[0] == refused[1], f"the store and the in-kernel memories differ: {FIX}"


def test_the_in_kernel_memories_keep_copies_as_a_store_does():
    memories, memory = InMemoryMemories(), memory_of(0)
    memories.save("C-1042", memory)
    memory["jev_answered"]["team"] = "changed after the save"
    memories.recall("C-1042")[0]["jev_answered"]["team"] = "changed after a recall"
    assert memories.recall("C-1042") == [memory_of(0)], (
        "InMemoryMemories (memorybook/memory.py) must keep a copy of what is saved and recall "
        "copies, as a store's memories are: otherwise an app's later edit changes its memory")


def test_a_state_of_the_example_is_the_callers_own_to_change():
    from memorybook.example import CUSTOMERS, later_state

    state = later_state("C-1042", 0)
    state["customer"]["company"] = "changed by the app"
    assert later_state("C-1042", 1)["customer"] == CUSTOMERS["C-1042"] == {
        "id": "C-1042", "company": "Acme Corp"}, (
        "memorybook/example.py's ticket_state() must give each state a customer of its own: "
        "changing one state changed the example's customers, and every later call would miss")
