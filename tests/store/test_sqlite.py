"""The SQLite backend: deleted rows leave the file; foreign, damaged or full files; first opens;
one timeout for a forget's lock and checkpoint."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memorybook.store import MemoryStoreError, SQLiteMemoryStore
from memorybook.store.sqlite import explain_sqlite_error
from tests.helpers import (
    MARGIN_SECONDS,
    SUBPROCESS_TIMEOUT_SECONDS,
    finish,
    make_memory,
    new_key,
    small_tmpfs,
    start_python,
    ticket_ids,
)


def test_forgotten_ciphertext_is_not_left_in_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "memories.sqlite3"
    with SQLiteMemoryStore(path, key=new_key()) as store:
        store.save("C-1042", make_memory("C-1042", "T-1", text="x" * 3000))
        store.save("C-1042", make_memory("C-1042", "T-2"))
        with sqlite3.connect(path) as peek:
            [(sealed,)] = peek.execute("SELECT sealed FROM memorybook_memories ORDER BY id LIMIT 1")
        peek.close()
        store.forget("C-1042", "T-1")
        leftovers = b"".join(p.read_bytes() for p in tmp_path.glob("memories.sqlite3*"))
        assert sealed[100:164] not in leftovers
    leftovers = b"".join(p.read_bytes() for p in tmp_path.glob("memories.sqlite3*"))
    assert sealed[100:164] not in leftovers


# What the store deletes on its own, each a call that must leave the write-ahead log as any
# save leaves it; sweep() erases what they deleted (test_retention.py, test_pending.py).
ON_ITS_OWN = ["eviction", "expiry", "a gate kept", "a gate decided against"]


@pytest.mark.parametrize("deletion", ON_ITS_OWN)
def test_what_the_store_deletes_on_its_own_leaves_the_log_for_sweep(
    tmp_path: Path, deletion: str
) -> None:
    path = tmp_path / "memories.sqlite3"
    now = [datetime(2026, 8, 4, tzinfo=UTC)]
    with SQLiteMemoryStore(path, key=new_key(), max_memories=2, clock=lambda: now[0]) as store:
        store.save("C-1042", make_memory("C-1042", "T-1"), expires_at=now[0] + timedelta(days=1))
        store.save("C-1042", make_memory("C-1042", "T-2"))
        gate = store.record_gate("C-1042", make_memory("C-1042", "T-3"))
        if deletion == "eviction":
            assert ticket_ids(store.save("C-1042", make_memory("C-1042", "T-4"))) == ["T-1"]
        elif deletion == "expiry":
            now[0] += timedelta(days=2)
            assert store.save("C-1042", make_memory("C-1042", "T-4")) == []
            assert [event.event for event in store.history("C-1042")][-2:] == ["expired", "saved"]
        else:
            assert store.settle_gate(gate, keep=deletion == "a gate kept")
        log = Path(f"{path}-wal").stat().st_size
        assert log > 0, (
            f"{deletion} emptied SQLite's write-ahead log (PRAGMA wal_checkpoint(TRUNCATE), which "
            "syncs the database file and truncates the log, so that the next commit grows it "
            "anew): each save at the cap took 2.5 times a save below it (benchmarks/README.md). "
            "What the store deletes on its own is erased by sweep(); only forget(), supersede() "
            "and forget_customer() call after_forget() (memorybook/store/base.py, pending.py)."
        )
        store.forget("C-1042", "T-2")  # control: a requested erasure empties it
        assert Path(f"{path}-wal").stat().st_size == 0


def test_file_that_is_not_a_database_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "memories.sqlite3"
    content = b"these are my notes, not a database\n" * 200
    path.write_bytes(content)
    with pytest.raises(MemoryStoreError, match="not a SQLite database") as raised:
        SQLiteMemoryStore(path, key=new_key())
    assert str(path) in str(raised.value)
    assert path.read_bytes() == content


def test_other_sqlite_database_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "app.sqlite3"
    with sqlite3.connect(path) as other:
        other.execute("CREATE TABLE customers (id TEXT)")
    other.close()
    content = path.read_bytes()
    with pytest.raises(MemoryStoreError, match="not a memorybook memory store"):
        SQLiteMemoryStore(path, key=new_key())
    assert path.read_bytes() == content


def test_damaged_database_raises_store_error_and_is_not_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "memories.sqlite3"
    key = new_key()
    with SQLiteMemoryStore(path, key=key) as store:
        for n in range(20):
            store.save("C-1042", make_memory("C-1042", f"T-{n}", text="y" * 2000))
    content = bytearray(path.read_bytes())
    page_size = int.from_bytes(content[16:18], "big")
    content[page_size:] = b"\xa5" * (len(content) - page_size)  # keep page 1, ruin the rest
    path.write_bytes(bytes(content))
    with pytest.raises(MemoryStoreError, match=str(path)):
        with SQLiteMemoryStore(path, key=key) as store:
            store.recall("C-1042")
    assert path.read_bytes() == bytes(content)


def test_a_folder_that_cannot_be_made_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "a_file").write_text("not a folder")  # refused to root as well
    path = tmp_path / "a_file" / "sub" / "memories.sqlite3"
    with pytest.raises(MemoryStoreError, match=r"Cannot create the memory database .* \(Not a "
                       r"directory\); choose a writable folder"):
        SQLiteMemoryStore(path, key=new_key())


@pytest.mark.parametrize(
    "message",
    ["database or disk is full", "attempt to write a readonly database", "disk I/O error"],
)
def test_a_full_or_read_only_disk_never_advises_moving_the_file(
    tmp_path: Path, message: str
) -> None:
    path = tmp_path / "memories.sqlite3"
    advice = str(explain_sqlite_error(sqlite3.OperationalError(message), path, "save()", 30))
    assert message in advice and "The file itself is fine" in advice
    assert "move it aside" not in advice


FILL_THE_DISK = """
    import os, sys
    from memorybook.store import MemoryStoreError, SQLiteMemoryStore
    from tests.helpers import make_memory, new_key

    with SQLiteMemoryStore(sys.argv[1], key=new_key()) as store:
        try:
            for n in range(1000):
                store.save("C-1042", make_memory("C-1042", f"T-{n}", text=os.urandom(4000).hex()))
        except MemoryStoreError as error:
            print(error)
"""


def test_a_really_full_disk_is_explained_without_blaming_the_file(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path, "128k") as tmpfs:  # a store fills it
        # In the tmpfs's namespace: SQLite resolves the path it is given, which loses the
        # namespace.
        database = tmpfs.mount_point / "memories.sqlite3"
        printed = finish(start_python(FILL_THE_DISK, str(database), within=tmpfs.enter))
    assert "disk is full" in printed and "The file itself is fine" in printed
    assert "move it aside" not in printed


SERVES = """
    import sys, time
    from memorybook.store import SQLiteMemoryStore

    with SQLiteMemoryStore(sys.argv[1], key=sys.argv[2]) as store, store.serving_alone():
        print("serving", flush=True)
        time.sleep(120)  # until the test kills it
"""


def test_a_second_process_cannot_serve_a_sqlite_store_until_the_first_is_gone(
    tmp_path: Path,
) -> None:
    path, key = tmp_path / "memories.sqlite3", new_key()
    serving = start_python(SERVES, str(path), key)
    try:
        assert serving.stdout.readline() == "serving\n", serving.stderr.read()
        with SQLiteMemoryStore(path, key=key) as store:
            with pytest.raises(MemoryStoreError, match="Another process serves the SQLite store"):
                with store.serving_alone():
                    pass
            serving.kill()  # however it ends, its lock goes with it
            serving.wait(SUBPROCESS_TIMEOUT_SECONDS)
            with store.serving_alone(), store.serving_alone():  # shared within one process
                pass
    finally:
        serving.kill()
        serving.communicate()


FIRST_OPENS = """
    import sys, time
    from pathlib import Path
    from memorybook.store import SQLiteMemoryStore

    folder, name = Path(sys.argv[1]), sys.argv[2]
    processes, rounds = int(sys.argv[3]), int(sys.argv[4])
    failures = []
    for n in range(rounds):
        (folder / f"ready-{n}-{name}").touch()
        deadline = time.monotonic() + 60
        while len(list(folder.glob(f"ready-{n}-*"))) < processes:
            assert time.monotonic() < deadline, "the other processes never got ready"
            time.sleep(0.001)
        try:
            SQLiteMemoryStore(folder / f"round-{n}.sqlite3").close()
        except Exception as error:
            failures.append(f"round {n}: {error}")
    print("\\n".join(failures))
"""


def test_concurrent_first_opens_of_a_new_sqlite_store_all_succeed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MEMORYBOOK_STORE_KEY", raising=False)  # the key file is raced for too
    processes, rounds = 8, 20
    openers = [
        start_python(FIRST_OPENS, str(tmp_path), str(n), str(processes), str(rounds))
        for n in range(processes)
    ]
    try:
        failures = [line for opener in openers for line in finish(opener).splitlines() if line]
    finally:
        for opener in openers:
            if opener.poll() is None:
                opener.kill()
                opener.communicate()
    assert failures == [], f"{len(failures)} of {processes * rounds} openings failed"
    keys = {(tmp_path / f"round-{n}.sqlite3.key").read_bytes() for n in range(rounds)}
    assert len(keys) == rounds  # one key per store, shared by every opener


@pytest.mark.parametrize("fifo_at", ["memories.sqlite3", "memories.sqlite3.key"])
def test_a_fifo_in_place_of_the_database_or_its_key_file_is_refused_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fifo_at: str
) -> None:
    monkeypatch.delenv("MEMORYBOOK_STORE_KEY", raising=False)
    path = tmp_path / "memories.sqlite3"
    if fifo_at.endswith(".key"):
        with SQLiteMemoryStore(path) as store:
            store.save("C-1042", make_memory("C-1042", "T-1"))
        (tmp_path / fifo_at).unlink()
    fifo = tmp_path / fifo_at
    os.mkfifo(fifo, 0o600)
    outcome: dict[str, BaseException] = {}

    def open_it() -> None:
        try:
            SQLiteMemoryStore(path, timeout=1).close()
        except BaseException as error:  # noqa: BLE001 - handed to the test's thread
            outcome["error"] = error

    opening = threading.Thread(target=open_it, daemon=True)
    opening.start()
    opening.join(1 + 5)  # the store's timeout, and a margin for a loaded machine
    hung = opening.is_alive()
    if hung:  # let the opening go: give the FIFO a writer that writes nothing
        with suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        opening.join(5)
    assert not hung, "opening the store waited on the FIFO"
    assert isinstance(outcome.get("error"), MemoryStoreError)
    assert str(fifo) in str(outcome["error"]) and "not a regular file" in str(outcome["error"])


def test_a_sqlite_forget_waits_no_longer_than_its_timeout_in_all(tmp_path: Path) -> None:
    """The lock's wait and the write-ahead log's checkpoint share one timeout."""
    seconds = 2
    path = tmp_path / "memories.sqlite3"
    with SQLiteMemoryStore(path, key=new_key(), timeout=seconds) as store:
        store.save("C-1042", make_memory("C-1042", "T-1"))
        reader = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            reader.execute("BEGIN")  # a snapshot from before the forget: it holds the log
            reader.execute("SELECT COUNT(*) FROM memorybook_memories").fetchall()
            writer.execute("BEGIN IMMEDIATE")
            release = threading.Timer(1.8, lambda: writer.execute("COMMIT"))
            release.start()
            started = time.monotonic()
            forgotten = store.forget("C-1042", "T-1")
            took = time.monotonic() - started
            release.join()
        finally:
            reader.close()
            writer.close()
    assert ticket_ids(forgotten) == ["T-1"]
    assert took <= seconds + MARGIN_SECONDS, f"{took:.2f} s for a timeout of {seconds} s"


def planted_by_another_user(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `path` another user's, as a file planted in a shared folder is."""
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534)  # nobody
    else:  # only root may give a file away: the store runs as another user instead
        monkeypatch.setattr(os, "geteuid", lambda: path.stat().st_uid + 1)


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="no owners or mode bits (Windows)")
@pytest.mark.parametrize("planted", ["owned by another user", "writable by others"])
def test_a_database_file_planted_by_another_user_is_refused_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, planted: str
) -> None:
    path = tmp_path / "memories.sqlite3"
    path.write_bytes(b"")  # an empty file: SQLite would take it as a new database
    if planted == "owned by another user":
        path.chmod(0o600)
        planted_by_another_user(path, monkeypatch)
    else:
        path.chmod(0o666)
    with pytest.raises(MemoryStoreError, match=planted) as raised:
        SQLiteMemoryStore(path, key=new_key())
    assert str(path) in str(raised.value) and "\n" not in str(raised.value)
    assert path.read_bytes() == b"", "a refused database file must be left untouched"
    assert not path.with_name(path.name + ".key").exists()


@pytest.mark.parametrize("damage", ["emptied", "tables dropped"])
def test_a_store_whose_key_file_exists_but_whose_database_lost_its_tables_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    monkeypatch.delenv("MEMORYBOOK_STORE_KEY", raising=False)
    path = tmp_path / "memories.sqlite3"
    with SQLiteMemoryStore(path) as store:  # its key in memories.sqlite3.key
        store.save("C-1042", make_memory("C-1042", "T-1"))
    if damage == "emptied":
        for leftover in tmp_path.glob("memories.sqlite3-*"):
            leftover.unlink()
        path.write_bytes(b"")
    else:
        with sqlite3.connect(path) as peek:
            peek.execute("DROP TABLE memorybook_memories")
        peek.close()
    before = path.read_bytes()
    with pytest.raises(MemoryStoreError, match="key file") as raised:
        SQLiteMemoryStore(path)
    message = str(raised.value)
    assert str(path.with_name(path.name + ".key")) in message and "\n" not in message, message
    assert path.read_bytes() == before, "the store must not start afresh in the emptied file"
