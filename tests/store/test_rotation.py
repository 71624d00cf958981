"""A store key that rotates (memorybook/store/rotation.py): earlier keys read what they sealed and
the digests find it, a new key seals; `rotate` seals every row anew, in batches, beside other
writers and again after SIGKILL anywhere; then the new key alone reads everything and an old key
alone is refused. And a store nobody rotates keeps the format the previous release opens."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidTag

import memorybook.store.rotation as rotation
from memorybook.settings import Settings
from memorybook.store import MemoryStoreError, MemoryStoreKeyError, SQLiteMemoryStore
from memorybook.store.__main__ import main, rotate
from memorybook.store.encryption import DerivedKeys, parse_key
from memorybook.store.postgres import PostgresDatabase
from memorybook.store.rotation import Resealed
from memorybook.store.sqlite import SQLiteDatabase
from tests.helpers import REPO_ROOT, Backend, forked, make_memory, new_key, ticket_ids

CUSTOMERS = ("C-1", "C-2", "C-3")
CAP = 3  # each customer saves one memory more: an eviction copies its sealed ticket id


@pytest.fixture(autouse=True)
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of two memory rows and three history rows, so that a few rows take many."""
    monkeypatch.setattr(rotation, "MEMORY_ROWS_A_BATCH", 2)
    monkeypatch.setattr(rotation, "SMALL_ROWS_A_BATCH", 3)


def fill(store) -> None:
    """Rows of every kind a store seals: memories and their ticket ids, history (saved, evicted,
    forgotten) and a pending gate, abandoned once the store object is closed."""
    for customer in CUSTOMERS:
        for n in range(CAP + 1):
            store.save(customer, make_memory(customer, f"T-{n}"))
    store.forget("C-2", "T-3")
    store.record_gate("C-3", make_memory("C-3", "T-9"))


def everything(store) -> dict:
    """What the store gives back of those rows; of the pending gate, its customer, which
    customers_with_abandoned_gates() reads from the gate's sealed memory (without claiming it,
    so that its owner stays the store object that recorded it, long gone)."""
    read = {customer: (store.recall(customer),
                       [(event, ticket) for event, ticket, _ in store.history(customer)])
            for customer in CUSTOMERS}
    read["gates"] = store.customers_with_abandoned_gates()
    assert store.notices == [], store.notices
    return read


def sealed_values(backend: Backend) -> list[bytes]:
    """Every sealed value the store's rows hold."""
    connection, _ = backend.connect_directly()
    with contextlib.closing(connection):
        values = [value for table, column in (
            ("memories", "sealed"), ("memories", "sealed_ticket"), ("history", "sealed_ticket"),
            ("pending", "sealed"),
        ) for (value,) in connection.execute(f"SELECT {column} FROM memorybook_{table}")]
    return [bytes(value) for value in values if value]


def meta(backend: Backend) -> dict[str, bytes]:
    connection, _ = backend.connect_directly()
    with contextlib.closing(connection):
        return {name: bytes(value) for name, value in
                connection.execute("SELECT name, value FROM memorybook_meta").fetchall()}


def filled(backend: Backend) -> dict:
    with backend.open(max_memories=CAP) as store:
        fill(store)
    with backend.open(max_memories=CAP) as store:
        return everything(store)


def test_earlier_keys_read_what_they_sealed_the_digests_find_it_and_the_new_key_seals(
        backend: Backend) -> None:
    before = filled(backend)
    old, new = backend.key, new_key()
    with backend.open(key=new, old_keys=[old], max_memories=CAP) as store:
        assert before["gates"] == ["C-3"] and everything(store) == before, (
            "a store given a new key and the old one must find and read every row the old key "
            "wrote, pending gates and history included: digests keep the store's digest key "
            "(RotatingKeys._checked() in memorybook/store/rotation.py), rows open with any key "
            "given (Keys.opened() in memorybook/store/encryption.py)")
        store.save("C-1", make_memory("C-1", "T-new"))
        assert ticket_ids(store.recall("C-1"))[-1] == "T-new"
    connection, _ = backend.connect_directly()
    with contextlib.closing(connection):
        [(customer, ticket, sealed)] = connection.execute(
            "SELECT customer_digest, ticket_digest, sealed FROM memorybook_memories"
            " ORDER BY id DESC LIMIT 1").fetchall()
    bound_to, sealed = bytes(customer) + bytes(ticket), bytes(sealed)
    DerivedKeys(parse_key(new, "new", "test")).open(bound_to, sealed)  # InvalidTag unless new's
    with pytest.raises(InvalidTag):
        DerivedKeys(parse_key(old, "old", "test")).open(bound_to, sealed)
    with pytest.raises(MemoryStoreKeyError, match="may be sealed with 1 key") as refused:
        backend.open(max_memories=CAP)  # the old key alone
    assert old not in str(refused.value) and new not in str(refused.value), "a key in a message"


def test_rotate_seals_every_row_anew_then_the_new_key_alone_reads_everything(
        backend: Backend) -> None:
    before = filled(backend)
    old_values = sealed_values(backend)
    old, new = backend.key, new_key()
    with backend.open(key=new, old_keys=[old], max_memories=CAP) as store:
        resealed = store.rotate_key()
    connection, _ = backend.connect_directly()
    with contextlib.closing(connection):
        counts = [connection.execute(f"SELECT COUNT(*) FROM memorybook_{table}").fetchall()[0][0]
                  for table in ("memories", "history", "pending")]
    assert resealed == Resealed(*counts, unreadable=0), (
        f"rotate_key() must seal every row of memories, history and pending gates anew, and say "
        f"how many (memorybook/store/rotation.py): {resealed}, rows {counts}")
    with backend.open(key=new, max_memories=CAP) as store:
        assert everything(store) == before, "after rotate_key(), the new key alone must read all"
    with pytest.raises(MemoryStoreKeyError, match="did not encrypt"):
        backend.open(key=old)
    backend.wait_for_older_transactions()  # PostgreSQL: VACUUM FULL keeps what they may read
    with backend.open(key=new) as store:
        assert store.rotate_key() == Resealed(), "a rotation run again has nothing left to seal"
    raw = backend.raw_bytes()
    kept = sum(value in raw for value in old_values)
    assert not kept, (
        f"{kept} of {len(old_values)} values sealed with the old key are still in the store's "
        "files after rotate_key(): it must erase them as sweep() erases deleted rows "
        "(erase_deleted_rows()), or a leaked old key still reads them")


@contextlib.contextmanager
def saving_beside(rotating, writer, saved: dict[str, list[str]]):
    """Before each transaction of the rotation's pass over memories (one customer's rows), a save
    of the writer's: over the cap, it evicts a row the rotation may not have reached yet,
    copying its sealed ticket id into history."""
    database = rotating._database
    begin = database.write_transaction

    def another_save_first(lock_key: bytes):
        if len(lock_key) == 32:  # a customer's digest: not the tables' lock nor the rotation's
            n = sum(map(len, saved.values()))
            customer = CUSTOMERS[n % 3]
            writer.save(customer, make_memory(customer, f"W-{n}"))
            saved[customer].append(f"W-{n}")
        return begin(lock_key)

    database.write_transaction = another_save_first
    try:
        yield
    finally:
        del database.write_transaction


def saved_so_far() -> dict[str, list[str]]:
    saved = {customer: [f"T-{n}" for n in range(CAP + 1)] for customer in CUSTOMERS}
    saved["C-2"].remove("T-3")
    return saved


def test_rotate_beside_another_store_object_writing_loses_nothing(backend: Backend) -> None:
    filled(backend)
    old, new = backend.key, new_key()
    saved = saved_so_far()
    with backend.open(key=new, old_keys=[old], max_memories=CAP) as writer, backend.open(
            key=new, old_keys=[old], max_memories=CAP) as rotating:
        with saving_beside(rotating, writer, saved):
            rotating.rotate_key()
    assert sum(map(len, saved.values())) > 13, "the rotation ran too few transactions to test"
    with backend.open(key=new, max_memories=CAP) as store:
        for customer in CUSTOMERS:
            assert ticket_ids(store.recall(customer)) == saved[customer][-CAP:]
            tickets = [ticket for event, ticket, _ in store.history(customer)
                       if event in ("saved", "evicted")]
            assert None not in tickets and store.notices == [], (
                f"{customer}'s history holds ticket ids the new key cannot open: a save copied a "
                "memory's sealed ticket id into history after the rotation's history pass, or "
                "the rotation missed it (memories first, each customer's under its write lock, "
                f"then history: RotatingKeys._resealed_everywhere()): {store.notices}")
            saves = len(saved[customer]) + (customer == "C-2")  # and C-2's T-3, forgotten
            evicted = saves - CAP - (customer == "C-2")
            assert len(tickets) == saves + evicted, (
                f"{customer}'s history must hold an event for each of its {saves} saves and "
                f"{evicted} evictions, whatever the rotation did meanwhile: {tickets}")


def test_rotate_beside_a_process_sealing_with_the_old_key_stops_before_it_finishes(
        backend: Backend) -> None:
    filled(backend)
    old, new = backend.key, new_key()
    saved = saved_so_far()
    with backend.open(key=old, old_keys=[new], max_memories=CAP) as writer, backend.open(
            key=new, old_keys=[old], max_memories=CAP) as rotating:
        with saving_beside(rotating, writer, saved), pytest.raises(
                MemoryStoreError, match="still seals with an earlier key") as refused:
            rotating.rotate_key()
    assert "\n" not in str(refused.value)
    with pytest.raises(MemoryStoreKeyError, match="did not encrypt"):
        backend.open(key=new)  # the rotation did not finish: the new key alone is refused
    with backend.open(key=new, old_keys=[old], max_memories=CAP) as rotating:
        rotating.rotate_key()  # once every process seals with the new key, run again
    with backend.open(key=new, max_memories=CAP) as store:
        assert [ticket_ids(store.recall(customer)) for customer in CUSTOMERS] == [
            saved[customer][-CAP:] for customer in CUSTOMERS], (
            "rows sealed with the old key during a rotation must be found by it, which says so "
            "and does not finish (RotatingKeys.rotate_key()), so that running it again gives "
            "the new key every row")


def test_rotate_waits_for_a_customers_writer_as_a_save_does(backend: Backend) -> None:
    filled(backend)
    new = new_key()
    with backend.open(key=new, old_keys=[backend.key], max_memories=CAP,
                      timeout=0.5) as rotating, backend.open(
            key=new, old_keys=[backend.key]) as writer, writer.customer_lock("C-2"):
        with pytest.raises(MemoryStoreError, match="waited more than"):
            rotating.rotate_key()  # C-1's rows are sealed anew, C-2's wait for its writer
    with backend.open(key=new, old_keys=[backend.key], max_memories=CAP) as rotating:
        resealed = rotating.rotate_key().memories
    assert 0 < resealed < 8 or (backend.name == "sqlite" and resealed == 8), (  # its one lock
        "the rotation must seal a customer's memories under the write lock a save of theirs "
        "takes (RotatingKeys._resealed_memories()), waiting for it as long as a call may, and "
        f"once run again seal what is left: {resealed} of 8 rows were left")


def database_class(backend: Backend) -> type:
    return SQLiteDatabase if backend.name == "sqlite" else PostgresDatabase


# Where a run of `rotate` is killed: before (or after) the n-th call of what is named.
KILL_POINTS = {
    "its first write transaction": ("write_transaction", 1, "before"),
    "a memory batch": ("write_transaction", 4, "before"),
    "inside a transaction": ("run_before_commit", 3, "after"),
    "a history batch": ("write_transaction", 9, "before"),
    "erasing old values": ("erase_deleted_rows", 1, "before"),
    "replacing the key file": ("replace", 1, "before"),
}


def rotate_killed(url: str, settings: Settings, owner: object, name: str, n: int,
                  when: str) -> None:
    """In a forked child: `rotate`, SIGKILLed before or after the n-th call of owner.name."""
    original, calls = getattr(owner, name), [0]

    def killed(*args, **kwargs):
        calls[0] += 1
        if calls[0] == n and when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        result = original(*args, **kwargs)
        if calls[0] == n:
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    setattr(owner, name, killed)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    rotate(url, settings=settings)


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_rotate_killed_anywhere_then_run_again_loses_and_doubles_nothing(
        backend: Backend, point: str) -> None:
    name, n, when = KILL_POINTS[point]
    key_path = Path(backend.location + ".key")
    if backend.name == "sqlite":  # its key file rotates: a store made without a key
        with SQLiteMemoryStore(backend.location, max_memories=CAP) as store:
            fill(store)
        old = key_path.read_text().strip()
        settings = Settings()
    elif name == "replace":
        pytest.skip("only a SQLite store's key is in a file")
    else:
        filled(backend)
        old, new = backend.key, new_key()
        settings = Settings(store_key=new, store_old_keys=[old])
    with backend.open(key=old, max_memories=CAP) as store:
        before = everything(store)
    owner = os if name == "replace" else database_class(backend)
    status = forked(rotate_killed, backend.url, settings, owner, name, n, when)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (
        f"the rotation ended without reaching {point} (call {n} of {name}): choose a kill point "
        "it reaches in KILL_POINTS")
    if backend.name == "sqlite":  # the new key waits beside the key file until the last step
        new = Path(f"{key_path}.new").read_text().strip()
    for alone in (old, new):  # refused, or reads everything: never half a store
        with contextlib.suppress(MemoryStoreKeyError), backend.open(
                key=alone, max_memories=CAP) as store:
            assert everything(store) == before, (
                f"killed at {point}, the rotation left a store that one key alone opens, but "
                "not all of whose rows it reads (memorybook/store/rotation.py)")
    with backend.open(key=new, old_keys=[old], max_memories=CAP) as store:
        assert everything(store) == before, (
            f"killed at {point}, the rotation left rows that its keys cannot read, or lost some")
    said = rotate(backend.url, settings=settings)
    assert said.startswith("Sealed ") and "\n" not in said, said
    if backend.name == "sqlite":
        assert key_path.read_text().strip() == new and not Path(f"{key_path}.new").exists(), (
            "run again, the rotation must finish with the new key it began with, in the key "
            "file (KeyFile.take_next_key() in memorybook/store/key_file.py)")
    with backend.open(key=new, max_memories=CAP) as store:
        assert everything(store) == before, (
            f"killed at {point}, then run again, the rotation lost or doubled rows, or left "
            "some the new key alone cannot read (memorybook/store/rotation.py)")
    with pytest.raises(MemoryStoreKeyError, match="did not encrypt"):
        backend.open(key=old)


def test_a_store_nobody_rotates_keeps_the_format_the_previous_release_opens(
        backend: Backend) -> None:
    filled(backend)
    with backend.open(old_keys=[new_key()]) as store:  # earlier keys given, its own key seals
        store.save("C-1", make_memory("C-1", "T-5"))
        store.rotate_key()
    assert meta(backend)["format"] == b"memorybook-store-4" and sorted(meta(backend)) == [
        "format", "key_check"], (
        "a store whose own key still seals must stay format 4, which the previous release "
        "opens beside this one (schema.ROTATED_FORMAT is for stores a new key sealed rows of)")
    with backend.open(key=new_key(), old_keys=[backend.key]):
        pass
    assert meta(backend)["format"] == b"memorybook-store-5", (
        "once a new key may seal rows, the store must be format 5, so that a version knowing "
        "only format 4 refuses it rather than find none of its rows (schema.ROTATED_FORMAT)")


def test_a_store_of_an_earlier_format_given_a_new_key_is_upgraded_then_rotated(
        backend: Backend) -> None:
    from tests.store.test_schema import make_old_store

    memories = [make_memory("C-1042", f"T-{n}") for n in range(3)]
    make_old_store(backend, memories, format_number=3)
    new = new_key()
    with backend.open(key=new, old_keys=[backend.key], max_memories=2) as store:
        store.rotate_key()
    with backend.open(key=new, max_memories=2) as store:
        assert ticket_ids(store.save("C-1042", make_memory("C-1042", "T-3"))) == ["T-0", "T-1"]
        assert [(event, ticket) for event, ticket, _ in store.history("C-1042")] == [
            ("saved", "T-3"), ("evicted", "T-0"), ("evicted", "T-1")], (
            "a format-3 store opened with a new key must be upgraded (its rows' ticket ids "
            "sealed for history), then rotated, so that the new key alone reads them")
    assert meta(backend)["format"] == b"memorybook-store-5"


def test_python_m_memorybook_store_rotate_gives_a_sqlite_store_a_new_key_file(
        tmp_path: Path) -> None:
    path = tmp_path / "memories.sqlite3"
    with SQLiteMemoryStore(path, max_memories=CAP) as store:
        fill(store)
    with SQLiteMemoryStore(path, max_memories=CAP) as store:
        before = everything(store)
    old = Path(f"{path}.key").read_text().strip()
    environment = {name: value for name, value in os.environ.items()
                   if not name.startswith(("MEMORYBOOK_STORE_", "TYPESAFE_"))}
    done = subprocess.run([sys.executable, "-m", "memorybook.store", "rotate", f"sqlite:///{path}"],
                          cwd=REPO_ROOT, env=environment, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and done.stderr == "" and done.stdout.count("\n") == 1, (
        f"`python -m memorybook.store rotate` must say what it did in one line: {done}")
    rows = f"{len(before['gates']) + sum(len(m) + len(h) for m, h in map(before.get, CUSTOMERS))}"
    assert done.stdout.startswith(f"Sealed {rows} rows of ") and (
        f"key file {path}.key" in done.stdout), (
        f"it must say how many rows it sealed anew ({rows}), and where the new key is: {done}")
    new = Path(f"{path}.key").read_text().strip()
    assert new != old and old not in done.stdout and new not in done.stdout
    with SQLiteMemoryStore(path, max_memories=CAP) as store:
        assert everything(store) == before, "the new key file alone must read every row"
    with pytest.raises(MemoryStoreKeyError, match="did not encrypt"):
        SQLiteMemoryStore(path, key=old)


@pytest.mark.parametrize("case", ["no store named", "no old key given", "a wrong old key"])
def test_rotate_refuses_in_one_line_saying_what_to_do_and_no_key(
        case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    for variable in ("MEMORYBOOK_STORE_URL", "MEMORYBOOK_STORE_KEY", "MEMORYBOOK_STORE_OLD_KEYS"):
        monkeypatch.delenv(variable, raising=False)
    path, old, new = tmp_path / "memories.sqlite3", new_key(), new_key()
    with SQLiteMemoryStore(path, key=old) as store:
        store.save("C-1", make_memory("C-1", "T-1"))
    arguments = ["rotate"] if case == "no store named" else ["rotate", f"sqlite:///{path}"]
    monkeypatch.setenv("MEMORYBOOK_STORE_KEY", new)
    if case == "a wrong old key":
        monkeypatch.setenv("MEMORYBOOK_STORE_OLD_KEYS", new_key())
    assert main(arguments) == 1
    said = capsys.readouterr()
    expected = {"no store named": "rotate URL", "no old key given": "MEMORYBOOK_STORE_OLD_KEYS",
                "a wrong old key": "did not encrypt"}[case]
    assert said.out == "" and said.err.count("\n") == 1 and expected in said.err, (
        f"`rotate` must refuse ({case}) in one line naming what to do ({expected!r}): {said}")
    assert old not in said.err and new not in said.err, "a key shows in rotate's message"
    with SQLiteMemoryStore(path, key=old) as store:
        assert ticket_ids(store.recall("C-1")) == ["T-1"], "a refused rotation changed the store"


def test_a_rotation_left_unfinished_is_named_to_whoever_opens_without_its_new_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMORYBOOK_STORE_KEY", raising=False)
    path = tmp_path / "memories.sqlite3"
    with SQLiteMemoryStore(path) as store:
        store.save("C-1", make_memory("C-1", "T-1"))
    status = forked(rotate_killed, f"sqlite:///{path}", Settings(), SQLiteDatabase,
                    "erase_deleted_rows", 1, "before")
    assert os.WIFSIGNALED(status), "the rotation was not killed before its end"
    with pytest.raises(MemoryStoreError) as refused:
        SQLiteMemoryStore(path)  # the key file still holds the old key
    assert f"{path}.key.new" in str(refused.value) and "rotate" in str(refused.value), (
        "a store opened with its key file while a rotation's new key waits in <database>.key.new "
        f"must say so, and to run rotate again (key_hint() in sqlite.py): {refused.value}")
