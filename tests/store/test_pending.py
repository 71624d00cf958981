"""Gates recorded in the store before their reply (memorybook/store/pending.py): sealed, settled
once with their memory's save, erased with their customer, and claimed only once their owner is
gone (closed, or its process killed)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

from memorybook.store import MemoryStore
from tests.helpers import Backend, make_memory, start_python, ticket_ids, wait_until


def pending_rows(backend: Backend) -> list[bytes]:
    """The sealed column of every pending row, as the database holds it."""
    connection, _ = backend.connect_directly()
    with contextlib.closing(connection):
        rows = connection.execute("SELECT sealed FROM memorybook_pending ORDER BY id").fetchall()
    return [bytes(sealed) for (sealed,) in rows]


def erased_everywhere(backend: Backend, store: MemoryStore, pieces: list[bytes]) -> bool:
    """Whether none of `pieces` is left in the database files, after sweep() (PostgreSQL's
    VACUUM FULL) as erasure is checked in test_retention.py."""
    backend.wait_for_older_transactions()
    store.sweep()
    raw = backend.raw_bytes()
    return not any(piece in raw for piece in pieces)


def test_a_recorded_gate_is_sealed_and_its_memory_saved_once_as_the_record_goes(
    backend: Backend,
) -> None:
    secret = os.urandom(16).hex()
    memory = make_memory("C-1042", "T-1", text=f"Our licence is {secret}.")
    with backend.open() as store:
        gate = store.record_gate("C-1042", memory)
        [sealed] = pending_rows(backend)
        raw = backend.raw_bytes()
        assert sealed[20:80] in raw  # control: the record is in the files
        assert secret.encode() not in raw and b"C-1042" not in raw, (
            "a pending gate must be sealed as a memory is: record_gate() in "
            "memorybook/store/pending.py"
        )
        assert store.recall("C-1042") == [], "a pending gate is not a memory yet"
        assert store.settle_gate(gate, keep=True) is True
        assert store.settle_gate(gate, keep=True) is False, (
            "a gate settled twice must save nothing the second time: its record is gone"
        )
        assert store.recall("C-1042") == [memory]
        assert [event.event for event in store.history("C-1042")] == ["saved"]
        assert pending_rows(backend) == []
        assert erased_everywhere(backend, store, [sealed[20:80]]), (
            "the record's bytes are still in the database files once its gate has run and "
            "sweep() too: erase_deleted_rows() of the backend must vacuum memorybook_pending"
        )


def test_a_gate_decided_against_saves_nothing_and_leaves_no_record(backend: Backend) -> None:
    with backend.open() as store:
        gate = store.record_gate("C-1042", make_memory("C-1042", "T-1"))
        [sealed] = pending_rows(backend)
        assert store.settle_gate(gate, keep=False) is True
        assert store.recall("C-1042") == [] and store.history("C-1042") == []
        assert pending_rows(backend) == []
        assert erased_everywhere(backend, store, [sealed[20:80]])


def test_erasing_a_customer_erases_their_pending_gates_and_no_gate_saves_after_it(
    backend: Backend,
) -> None:
    with backend.open() as store, backend.open() as other:
        mine = store.record_gate("C-1042", make_memory("C-1042", "T-1"))
        kept = store.record_gate("C-2210", make_memory("C-2210", "T-2"))
        other.forget_customer("C-1042")  # another store object, as another process would
        assert store.settle_gate(mine, keep=True) is False
        assert store.recall("C-1042") == [], (
            "a gate pending when its customer was erased saved its memory after the erasure: "
            "forget_customer() must delete the customer's pending rows (ERASE_STEPS in "
            "memorybook/store/writes.py)"
        )
        assert store.settle_gate(kept, keep=True) is True
        assert ticket_ids(store.recall("C-2210")) == ["T-2"]


def test_a_store_object_claims_only_the_gates_of_owners_that_are_closed(
    backend: Backend,
) -> None:
    with backend.open() as owner, backend.open() as claimant:
        gate = owner.record_gate("C-1042", make_memory("C-1042", "T-1"))
        assert claimant.customers_with_abandoned_gates() == []
        assert claimant.claim_abandoned_gates("C-1042") == [], (
            "a gate whose owner is open was claimed: it would run twice"
        )
        owner.close()  # PostgreSQL lets go of its lock as the session ends, moments later
        wait_until(lambda: claimant.customers_with_abandoned_gates() == ["C-1042"], 10,
                   "the gates of a closed store object to be found abandoned")
        [claimed] = claimant.claim_abandoned_gates("C-1042")
        assert (claimed.id, claimed.memory) == (gate.id, gate.memory)
        assert claimant.customers_with_abandoned_gates() == [], "a claimed gate is owned again"
        assert claimant.settle_gate(claimed, keep=True)
        assert ticket_ids(claimant.recall("C-1042")) == ["T-1"]


OWNER_IN_A_PROCESS = """
import sys, time
from memorybook.store import open_store
from tests.helpers import make_memory

store = open_store(sys.argv[1])
for number in range(3):
    store.record_gate("C-1042", make_memory("C-1042", f"T-{number}"))
print("recorded", flush=True)
time.sleep(600)
"""


def test_gates_of_a_process_alive_are_never_claimed_and_once_it_is_killed_claimed_once(
    backend: Backend,
) -> None:
    owner = start_python(OWNER_IN_A_PROCESS, backend.url, MEMORYBOOK_STORE_KEY=backend.key)
    try:
        assert owner.stdout.readline() == "recorded\n", owner.communicate()
        with backend.open() as first, backend.open() as second:
            assert first.customers_with_abandoned_gates() == []
            assert first.claim_abandoned_gates("C-1042") == [], (
                "the gates of a process still running were claimed: each store object that "
                "records gates must hold its owner lock (hold_owner() of the backend)"
            )
            owner.send_signal(signal.SIGKILL)
            owner.communicate()
            wait_until(lambda: first.customers_with_abandoned_gates() == ["C-1042"], 10,
                       "the gates of a killed process to be found abandoned: its owner lock "
                       "must end with it (owner_gone() of the backend)")
            claims: list[list] = [[], []]
            start = threading.Barrier(2)

            def claim(store: MemoryStore, into: list) -> None:
                start.wait()
                into.extend(store.claim_abandoned_gates("C-1042"))

            threads = [threading.Thread(target=claim, args=(store, into))
                       for store, into in zip((first, second), claims, strict=True)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
            claimed = sorted(ticket_ids([gate.memory for gate in claims[0] + claims[1]]))
            assert claimed == ["T-0", "T-1", "T-2"], (
                f"two claimants took {claimed}: each abandoned gate must go to one of them"
            )
    finally:
        if owner.poll() is None:
            owner.kill()
        owner.communicate()


def test_sqlite_store_objects_on_one_file_by_two_paths_see_each_other_alive(tmp_path) -> None:
    from memorybook.store import SQLiteMemoryStore
    from tests.helpers import new_key

    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    key = new_key()
    with (SQLiteMemoryStore(tmp_path / "real" / "memories.sqlite3", key=key) as owner,
          SQLiteMemoryStore(tmp_path / "link" / "memories.sqlite3", key=key) as claimant):
        owner.record_gate("C-1042", make_memory("C-1042", "T-1"))
        assert claimant.claim_abandoned_gates("C-1042") == [], (
            "a store object of this process, on the same file by another path, was taken for "
            "gone: memorybook/store/lock_file.py must know its owners by the file, not the path")
        owner.close()
        assert len(claimant.claim_abandoned_gates("C-1042")) == 1


CLAIMING_IN_A_PROCESS = """
import sys, time
from pathlib import Path
from memorybook.store import lock_file

database, owner, leaving = Path(sys.argv[1]), bytes.fromhex(sys.argv[2]), Path(sys.argv[3])
with lock_file.owner_gone(database, owner, 10) as gone:
    print(gone, flush=True)
    time.sleep(0.5)  # as a claim's UPDATE waiting for another process's write
    leaving.touch()
"""


def test_an_owner_gone_is_never_taken_for_alive_while_another_process_claims_its_gates(
    tmp_path,
) -> None:
    # Two replicas that look for abandoned gates at once: the one that looks while the other is
    # claiming must wait its turn and find the owner gone, or it leaves the gates it listed for
    # its next look (30 s later in an AsyncMemory: memorybook/serving.py).
    from memorybook.store import lock_file

    database, owner, leaving = tmp_path / "memories.sqlite3", os.urandom(16), tmp_path / "left"
    claimant = start_python(CLAIMING_IN_A_PROCESS, str(database), owner.hex(), str(leaving))
    try:
        assert claimant.stdout.readline() == "True\n", claimant.communicate()
        with lock_file.owner_gone(database, owner, 10) as gone:
            after_the_other = leaving.exists()
        assert gone, (
            "an owner that is gone was taken for alive because another process was claiming "
            "its gates: claimants must take turns, not test the owner's byte while another "
            "holds it (owner_gone() in memorybook/store/lock_file.py)")
        assert after_the_other, (
            "two processes found the same owner gone at once: a claimant's block must end "
            "before another's begins (owner_gone() in memorybook/store/lock_file.py)")
    finally:
        claimant.communicate(timeout=60)


def test_a_claimant_waits_for_a_frozen_one_no_longer_than_its_time(tmp_path) -> None:
    from memorybook.store import lock_file

    database, owner, leaving = tmp_path / "memories.sqlite3", os.urandom(16), tmp_path / "left"
    claimant = start_python(CLAIMING_IN_A_PROCESS, str(database), owner.hex(), str(leaving))
    try:
        assert claimant.stdout.readline() == "True\n", claimant.communicate()
        os.kill(claimant.pid, signal.SIGSTOP)  # frozen inside its claim
        started = time.monotonic()
        with lock_file.owner_gone(database, owner, 0.3) as gone:
            waited = time.monotonic() - started
        assert not gone and waited < 2, (
            f"a claimant waited {waited:.1f} s for another frozen in its claim, given 0.3 s, "
            f"and found the owner {'gone' if gone else 'alive'}: the wait for the claim byte "
            "must end by the call's time (_take_claim() in memorybook/store/lock_file.py)")
    finally:
        os.kill(claimant.pid, signal.SIGCONT)
        claimant.communicate(timeout=60)
