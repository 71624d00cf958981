"""Processes and threads sharing a store, and calls that meet a lock held elsewhere."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from memorybook.store import MemoryStore, MemoryStoreError
from tests.helpers import (
    MARGIN_SECONDS,
    SUBPROCESS_TIMEOUT_SECONDS,
    Backend,
    finish,
    in_thread,
    make_memory,
    start_python,
    ticket_ids,
)

OPEN_STORE_FROM_ARGS = """
    import json, os, sys, time
    from pathlib import Path
    from memorybook.store import open_store

    store = open_store(sys.argv[1], max_memories=int(os.environ.get("CAP", "50")))
"""


def test_memories_persist_across_processes(backend: Backend) -> None:
    env = {"MEMORYBOOK_STORE_KEY": backend.key}
    saved_here = make_memory("C-1042", "T-parent")
    with backend.open() as store:
        store.save("C-1042", saved_here)
    child = start_python(
        OPEN_STORE_FROM_ARGS
        + """
    print(json.dumps(store.recall("C-1042")))
    memory = json.loads(json.dumps(store.recall("C-1042")[0]))
    memory["request"]["ticket"]["id"] = "T-child"
    store.save("C-1042", memory)
    store.close()
    """,
        backend.url,
        **env,
    )
    assert finish(child).strip() == json.dumps([saved_here])
    with backend.open() as store:
        ticket_ids = [m["request"]["ticket"]["id"] for m in store.recall("C-1042")]
    assert ticket_ids == ["T-parent", "T-child"]


WRITES_PER_PROCESS = 100


CONCURRENT_WRITER = (
    OPEN_STORE_FROM_ARGS
    + """
    name, go_file = sys.argv[2], Path(sys.argv[3])
    Path(f"{go_file}.{name}.ready").touch()
    deadline = time.monotonic() + 60
    while not go_file.exists() and time.monotonic() < deadline:
        time.sleep(0.005)
    evicted = []
    for n in range(int(os.environ["WRITES"])):
        memory = {"request": {"customer": {"id": "C-1042"}, "ticket": {"id": f"{name}-{n}"}},
                  "jev_answered": {}}
        evicted += [m["request"]["ticket"]["id"] for m in store.save("C-1042", memory)]
    store.close()
    print(json.dumps(evicted))
"""
)


def save_from_two_processes_at_once(
    backend: Backend, tmp_path: Path, cap: int
) -> tuple[list[str], list[str]]:
    """Two processes each save WRITES_PER_PROCESS memories for C-1042, released together.

    Returns the ticket ids they were told were evicted, and the ticket ids left.
    """
    with backend.open():
        pass  # create the tables first, so both writers find the same store
    go_file = tmp_path / "go"
    env = {"MEMORYBOOK_STORE_KEY": backend.key, "CAP": str(cap), "WRITES": str(WRITES_PER_PROCESS)}
    writers = [
        start_python(CONCURRENT_WRITER, backend.url, name, str(go_file), **env)
        for name in ("A", "B")
    ]
    deadline = time.monotonic() + SUBPROCESS_TIMEOUT_SECONDS
    while not all(Path(f"{go_file}.{name}.ready").exists() for name in ("A", "B")):
        assert time.monotonic() < deadline, "writers did not start"
        assert all(w.poll() is None for w in writers), [w.communicate() for w in writers]
        time.sleep(0.01)
    go_file.touch()
    evicted = [ticket_id for w in writers for ticket_id in json.loads(finish(w))]
    with backend.open(max_memories=cap) as store:
        remaining = [m["request"]["ticket"]["id"] for m in store.recall("C-1042")]
    return evicted, remaining


def test_two_processes_saving_for_one_customer_lose_nothing(
    backend: Backend, tmp_path: Path
) -> None:
    evicted, remaining = save_from_two_processes_at_once(
        backend, tmp_path, cap=2 * WRITES_PER_PROCESS
    )
    assert evicted == []
    assert len(remaining) == 2 * WRITES_PER_PROCESS
    for name in ("A", "B"):
        in_order = [f"{name}-{n}" for n in range(WRITES_PER_PROCESS)]
        assert [t for t in remaining if t.startswith(f"{name}-")] == in_order


def test_concurrent_eviction_keeps_the_cap_and_evicts_each_memory_once(
    backend: Backend, tmp_path: Path
) -> None:
    cap = 10
    evicted, remaining = save_from_two_processes_at_once(backend, tmp_path, cap=cap)
    assert len(remaining) == cap
    assert len(evicted) == 2 * WRITES_PER_PROCESS - cap
    every_ticket = {f"{name}-{n}" for name in ("A", "B") for n in range(WRITES_PER_PROCESS)}
    assert sorted(evicted + remaining) == sorted(every_ticket)


def test_threads_can_share_one_store(store: MemoryStore) -> None:
    def save_many(name: str) -> None:
        for n in range(20):
            store.save("C-1042", make_memory("C-1042", f"{name}-{n}"))

    threads = [threading.Thread(target=save_many, args=(name,)) for name in ("A", "B")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ticket_ids = [m["request"]["ticket"]["id"] for m in store.recall("C-1042")]
    assert sorted(ticket_ids) == sorted(f"{name}-{n}" for name in ("A", "B") for n in range(20))


LOCK_WAIT_SECONDS = 0.5  # the store's time limit in these tests (the default is far longer)


def test_a_save_blocked_by_a_lock_ends_with_a_clear_error_and_writes_nothing(
    backend_and_a_way_to_lock_it: tuple[Backend, str],
) -> None:
    backend, how = backend_and_a_way_to_lock_it
    bound = 6 * LOCK_WAIT_SECONDS
    with backend.open(timeout=LOCK_WAIT_SECONDS) as store:
        store.save("C-1042", make_memory("C-1042", "T-1"))
        with backend.hold_a_lock(how, "C-1042"):
            saving, saved = in_thread(lambda: store.save("C-1042", make_memory("C-1042", "T-2")))
            time.sleep(0.05)
            recalling, recalled = in_thread(lambda: store.recall("C-2210"))  # same store object
            saving.join(bound)
            recalling.join(bound)
            assert saved and recalled, f"still blocked after {bound} s"
        [(error, seconds)] = saved
        assert isinstance(error, MemoryStoreError), error
        assert LOCK_WAIT_SECONDS * 0.9 <= seconds <= bound
        for words in ("save()", "lock", f"{LOCK_WAIT_SECONDS:g} s", "nothing was written"):
            assert words in str(error)
        [(recall_result, _)] = recalled
        assert recall_result == [] or isinstance(recall_result, MemoryStoreError)
        assert ticket_ids(store.recall("C-1042")) == ["T-1"]
        store.save("C-1042", make_memory("C-1042", "T-3"))
        assert ticket_ids(store.recall("C-1042")) == ["T-1", "T-3"]


def test_a_call_waiting_for_another_threads_call_gives_up_within_its_timeout(
    backend: Backend,
) -> None:
    seconds = LOCK_WAIT_SECONDS
    with backend.open(timeout=seconds) as store:
        holding, release = threading.Event(), threading.Event()

        def hold_the_store() -> None:
            with store.customer_lock("C-1042"):
                holding.set()
                release.wait(8)

        holder = threading.Thread(target=hold_the_store, daemon=True)
        holder.start()
        try:
            assert holding.wait(10), "the other thread never held the store"
            recalling, recalled = in_thread(lambda: store.recall("C-2210"))
            recalling.join(seconds + MARGIN_SECONDS + 8)
        finally:
            release.set()
            holder.join(10)
        [(error, took)] = recalled
        assert isinstance(error, MemoryStoreError), error
        assert "recall()" in str(error) and "another thread's call" in str(error)
        assert took <= seconds + MARGIN_SECONDS, f"{took:.2f} s for a timeout of {seconds} s"
        assert store.recall("C-2210") == []
