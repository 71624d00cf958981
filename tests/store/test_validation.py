"""What a store refuses: ids, memories that are not memories, too large or too deep, bad limits."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from memorybook.example import ROUTE
from memorybook.store import MAX_MEMORY_BYTES, MemoryStore, MemoryStoreError, SQLiteMemoryStore
from tests.helpers import REPO_ROOT, Backend, make_memory, nested, new_key, sweep_nesting_depths


def test_memory_for_another_customer_is_rejected(store: MemoryStore) -> None:
    with pytest.raises(ValueError, match="wrong customer"):
        store.save("C-2210", make_memory("C-1042", "T-1"))
    assert store.recall("C-2210") == []
    assert store.recall("C-1042") == []


@pytest.mark.parametrize("bad_id", ["", "   ", None, 1042, b"C-1042"])
def test_customer_id_must_be_a_non_empty_string(store: MemoryStore, bad_id: object) -> None:
    with pytest.raises(ValueError, match="customer_id must be a non-empty string"):
        store.recall(bad_id)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="customer_id must be a non-empty string"):
        store.save(bad_id, make_memory("C-1042", "T-1"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="customer_id must be a non-empty string"):
        store.forget(bad_id, "T-1")  # type: ignore[arg-type]


def test_memory_that_is_not_json_serialisable_is_rejected(store: MemoryStore) -> None:
    memory = make_memory("C-1042", "T-1")
    memory["jev_answered"]["when"] = {1, 2}
    with pytest.raises(ValueError, match="not JSON-serialisable"):
        store.save("C-1042", memory)
    memory["jev_answered"]["when"] = float("nan")
    with pytest.raises(ValueError, match="not JSON-serialisable"):
        store.save("C-1042", memory)
    assert store.recall("C-1042") == []


@pytest.mark.parametrize("changed, why", [
    pytest.param({1: "one"}, "key 1", id="an int key"),
    pytest.param({None: "none"}, "key None", id="a None key"),
    pytest.param({2.5: "half"}, "key 2.5", id="a float key"),
    pytest.param({True: "yes"}, "key True", id="a bool key"),
    pytest.param(("a", "b"), "tuple", id="a tuple"),
    pytest.param([{"deep": (1, 2)}], "tuple", id="a nested tuple"),
])
def test_a_memory_that_would_come_back_changed_is_refused(
    store: MemoryStore, changed: object, why: str
) -> None:
    memory = make_memory("C-1042", "T-1")
    memory["jev_answered"]["changed"] = changed
    with pytest.raises(ValueError, match="would not come back unchanged") as raised:
        store.save("C-1042", memory)
    assert why in str(raised.value)
    assert store.recall("C-1042") == []


def test_every_json_type_is_saved_and_recalled_exactly(store: MemoryStore) -> None:
    memory = make_memory("C-1042", "T-1")
    memory["jev_answered"]["all"] = [None, True, False, 0, -1, 2**70, 0.5, -0.0, "", {"": []}]
    store.save("C-1042", memory)
    [back] = store.recall("C-1042")
    assert back == memory and json.dumps(back) == json.dumps(memory)


@pytest.mark.parametrize(
    "bad_memory", [None, [], "memory", {"request": {}}, {"request": {"customer": {"id": "C-1042"}}}]
)
def test_memory_without_customer_and_ticket_ids_is_rejected(
    store: MemoryStore, bad_memory: object
) -> None:
    with pytest.raises(ValueError, match="shaped like"):
        store.save("C-1042", bad_memory)  # type: ignore[arg-type]


def test_a_deeply_nested_memory_is_a_value_error(store: MemoryStore) -> None:
    memory = make_memory("C-1042", "T-1")
    memory["jev_answered"]["deep"] = nested(100_000)
    with pytest.raises(ValueError, match="nested more than 100 levels"):
        store.save("C-1042", memory)


def test_a_memory_whose_lists_share_references_is_refused_in_time_without_the_lock(
    backend: Backend,
) -> None:
    import threading
    import time

    from tests.helpers import MARGIN_SECONDS

    exploding: list = []
    for _ in range(23):  # 23 levels, but 2**23 paths through them
        exploding = [exploding, exploding]
    memory = make_memory("C-1042", "T-1")
    memory["jev_answered"]["shared"] = exploding
    seconds = 2
    with backend.open(timeout=seconds) as store:
        holding, release = threading.Event(), threading.Event()

        def hold_the_store() -> None:  # another thread's call, holding the store's lock
            with store.customer_lock("C-2210"):
                holding.set()
                release.wait(60)

        holder = threading.Thread(target=hold_the_store, daemon=True)
        holder.start()
        try:
            assert holding.wait(10), "the other thread never held the store"
            started = time.monotonic()
            with pytest.raises(ValueError, match="holds more than 1,000,000 values"):
                store.save("C-1042", memory)
            took = time.monotonic() - started
        finally:
            release.set()
            holder.join(10)
        assert took <= seconds + MARGIN_SECONDS, (
            f"{took:.1f} s to refuse it: memorybook/store/validation.py must bound its walk by "
            "the size limit")
        assert store.recall("C-1042") == []


def test_a_memory_has_a_size_limit(store: MemoryStore) -> None:
    memory = make_memory("C-1042", "T-1", text="x" * (MAX_MEMORY_BYTES + 1))
    with pytest.raises(ValueError, match="at most 1,000,000"):
        store.save("C-1042", memory)
    assert store.recall("C-1042") == []
    store.save("C-1042", make_memory("C-1042", "T-2", text="x" * (MAX_MEMORY_BYTES // 2)))


# Either side of the values validation.py checks at a glance (_plainly_within_limits), beyond
# which they are counted exactly: a memory nested to the limit is kept, one level more refused.
@pytest.mark.parametrize("values", [9_000, 11_000])
def test_a_memory_nested_to_the_limit_is_kept_and_one_level_more_refused_whatever_its_size(
    store: MemoryStore, values: int
) -> None:
    memory = make_memory("C-1042", "T-1")
    memory["jev_answered"]["many"] = list(range(values))
    memory["jev_answered"]["deep"] = nested(98)  # levels 3 to 100 of the memory
    store.save("C-1042", memory)
    assert store.recall("C-1042") == [memory]
    deeper = make_memory("C-1042", "T-2")
    deeper["jev_answered"]["many"] = list(range(values))
    deeper["jev_answered"]["deep"] = nested(99)
    try:
        store.save("C-1042", deeper)
    except ValueError as error:
        assert "nested more than 100 levels" in str(error), error
    else:
        pytest.fail(f"A memory of {values:,} values nested 101 levels deep was saved: "
                    "_plainly_within_limits() in memorybook/store/validation.py must count the "
                    "levels as _shape_beyond_limits() does.")


def test_a_memory_holding_dicts_of_other_kinds_is_checked_as_plain_dicts_are(
    store: MemoryStore,
) -> None:
    from collections import OrderedDict, defaultdict

    class Generated(dict):  # values() a generator, which has no len()
        def values(self):  # type: ignore[override]
            return iter(list(super().values()))

    memory = make_memory("C-1042", "T-1")
    memory["jev_answered"].update(ordered=OrderedDict(a=1), default=defaultdict(list, b=[2]),
                                  generated=Generated(c={"d": [3]}))
    store.save("C-1042", memory)
    assert store.recall("C-1042") == [memory], (
        "memorybook/store/validation.py must read a dict's values as _children() does")


def test_huge_ids_are_cut_short_in_error_messages(store: MemoryStore) -> None:
    huge = "C-" + "9" * 1_000_000
    for call in (
        lambda: store.forget(huge, "T-1"),
        lambda: store.forget("C-1042", huge),
        lambda: store.save("C-1042", make_memory(huge, "T-1")),
        lambda: store.save(huge, make_memory("C-1042", "T-1")),
    ):
        with pytest.raises((MemoryStoreError, ValueError)) as raised:
            call()
        assert len(str(raised.value)) < 2000
        assert "1,000,002 characters" in str(raised.value), (
            "a message must give the id's own length, not its repr's (shown() in "
            f"memorybook/store/validation.py): {str(raised.value)[:300]}")


def at_stack_depth(frames: int, call):
    """`call()` made from `frames` frames deeper than here, as from inside a kernel or framework."""
    if frames == 0:
        return call()
    return at_stack_depth(frames - 1, call)


def test_every_nesting_depth_is_refused_or_fully_usable_whatever_the_callers_stack(
    backend: Backend,
) -> None:
    with backend.open(max_memories=1) as store:
        shallow = sweep_nesting_depths(store, 2000)
        deep = at_stack_depth(600, lambda: sweep_nesting_depths(store, 2000))
    assert shallow == deep == list(range(1, len(shallow) + 1)), "accepted depths must not vary"
    assert len(shallow) >= 20, "ordinary memories must still be accepted"


IN_A_KERNEL = """
from memorybook.store import SQLiteMemoryStore
from tests.helpers import new_key, sweep_nesting_depths

with SQLiteMemoryStore({path!r}, key=new_key(), max_memories=1) as store:
    accepted = sweep_nesting_depths(store, 2000)
print(len(accepted), accepted == list(range(1, len(accepted) + 1)))
"""


def test_every_nesting_depth_is_refused_or_fully_usable_in_a_kernel(tmp_path: Path) -> None:
    """The same sweep where a notebook's reader saves: in an IPython kernel, whose stack is
    deeper than a script's."""
    from jupyter_client.manager import start_new_kernel

    with SQLiteMemoryStore(tmp_path / "script.sqlite3", key=new_key(), max_memories=1) as store:
        in_a_script = sweep_nesting_depths(store, 2000)
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(REPO_ROOT),
                                       env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    printed: list[str] = []
    try:
        reply = client.execute_interactive(
            IN_A_KERNEL.format(path=str(tmp_path / "kernel.sqlite3")), timeout=120,
            output_hook=lambda message: printed.append(message["content"].get("text", "")))
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    assert reply["content"]["status"] == "ok", reply["content"]
    assert "".join(printed).split() == [str(len(in_a_script)), "True"]


@pytest.mark.parametrize("bad_cap", [0, -1, 2.5, True])
def test_cap_must_be_a_positive_integer(backend: Backend, bad_cap: object) -> None:
    with pytest.raises(ValueError, match="max_memories"):
        backend.open(max_memories=bad_cap)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad_timeout", [0, -1, float("nan"), float("inf"), "5", True])
def test_the_time_limit_must_be_a_positive_number_of_seconds(
    backend: Backend, bad_timeout: object
) -> None:
    with pytest.raises(ValueError, match="timeout must be a positive number of seconds"):
        backend.open(timeout=bad_timeout)  # type: ignore[arg-type]


def test_what_the_store_refuses_is_a_memorybook_error_and_a_value_error(backend: Backend) -> None:
    from memorybook import MemorybookError, StoreInputError

    with backend.open() as store:
        for customer, memory in (("C-1042", {"request": {"customer": {"id": "C-1042"},
                                                         "ticket": {"id": ("T", 1)}}}),
                                 ("", make_memory("C-1042", "T-1")),
                                 ("C-1042", make_memory("C-2210", "T-1"))):
            with pytest.raises(StoreInputError) as refused:
                store.save(customer, memory)
            assert isinstance(refused.value, MemorybookError) and isinstance(
                refused.value, ValueError), (
                "what the store refuses must be caught by `except MemorybookError` around "
                "ask_with_memory() and by `except ValueError` (StoreInputError, "
                "memorybook/store/validation.py)")
        assert store.recall("C-1042") == []


def test_a_state_the_store_would_refuse_as_a_memory_costs_no_call(backend: Backend) -> None:
    from memorybook import MadeUpJev, StoreInputError, ask_with_memory

    jev = MadeUpJev(lambda state, questions: (
        {"remember": 0.9} if "remember" in questions else {"team": "billing"}))
    state = {"customer": {"id": "C-1042"}, "ticket": {"id": "T-1", "tags": ("a", "b")}}
    with backend.open() as store:
        with pytest.raises(StoreInputError, match="would not come back unchanged"):
            ask_with_memory(state, ROUTE, store, ask=jev.ask)  # a tuple would come back a list
        assert jev.calls == [] and store.recall("C-1042") == [], (
            "a state the store would refuse as a memory must be refused before Jev is asked "
            "(checked_state() in memorybook/memory.py), not after both calls were paid for")
