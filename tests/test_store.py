"""Tests for memorybook.store, run against SQLite and PostgreSQL alike.

PostgreSQL tests use the server at $MEMORYBOOK_TEST_PG_URL, for example one
started with ``tools/postgres_server.sh start /tmp/memorybook-pg``. Without it
they are skipped, except under CI (``$CI`` set), where they fail.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import sqlite3
import stat
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from memorybook.store import (
    MAX_MEMORIES_PER_CUSTOMER,
    MAX_MEMORY_BYTES,
    MemoryNotFoundError,
    MemoryStore,
    MemoryStoreError,
    MemoryStoreKeyError,
    PostgresMemoryStore,
    SQLiteMemoryStore,
    open_store,
)
from tests.helpers import REPO_ROOT
from tests.helpers import small_tmpfs as mounted_tmpfs

PG_URL_ENV = "MEMORYBOOK_TEST_PG_URL"
SUBPROCESS_TIMEOUT_SECONDS = 120

# Distinctive strings that must never reach the disk in plaintext.
SECRET_CUSTOMER_ID = "C-PLAINTEXT-7731"
SECRET_TICKET_ID = "T-PLAINTEXT-4410"
SECRET_TICKET_TEXT = "our vault combination is 31-7-44, please rotate it"


def new_key() -> str:
    return base64.urlsafe_b64encode(os.urandom(32)).decode()


def make_memory(customer_id: str, ticket_id: str, text: str = "How do I add an admin?") -> dict:
    """A memory shaped like the cookbook's, with deliberately unsorted keys."""
    return {
        "request": {
            "customer": {"id": customer_id, "company": "Acme Corp"},
            "ticket": {
                "id": ticket_id,
                "received_on": "2026-08-04",
                "subject": "Adding an admin",
                "messages": [{"from": "customer", "text": text}],
            },
        },
        "jev_answered": {
            "Which edition?": "Self-hosted, Windows Server 2022",
            "Accents and symbols?": 'Café — naïve ☕ 100% "quoted" \\ back',
            "A number": 3.14159,
        },
    }


# -- backends -----------------------------------------------------------------------


@dataclass
class Backend:
    """One fresh, empty store location, and how to open and inspect it."""

    name: str
    url: str  # what open_store() takes
    location: str  # what the store class takes
    store_class: type
    key: str

    def open(
        self, *, key: str | bytes | None = None, max_memories: int = MAX_MEMORIES_PER_CUSTOMER
    ) -> MemoryStore:
        return self.store_class(self.location, key=key or self.key, max_memories=max_memories)

    def raw_bytes(self) -> bytes:
        """Everything the database holds, as raw bytes (files, or every table row)."""
        if self.name == "sqlite":
            return b"".join(
                Path(self.location + suffix).read_bytes()
                for suffix in ("", "-wal", "-journal")
                if Path(self.location + suffix).exists()
            )
        import psycopg

        chunks = []
        with psycopg.connect(self.url) as connection:
            for table in ("memorybook_meta", "memorybook_memories"):
                for row in connection.execute(f"SELECT t.*, t::text FROM {table} t"):
                    for value in row:
                        chunks.append(value if isinstance(value, bytes) else str(value).encode())
        return b"\n".join(chunks)


def postgres_url_or_skip() -> str:
    url = os.environ.get(PG_URL_ENV)
    if not url:
        reason = (
            f"PostgreSQL tests need ${PG_URL_ENV}; start a server with "
            "`tools/postgres_server.sh start /tmp/memorybook-pg` and export its URL"
        )
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI is set, so this is a failure, not a skip)")
        pytest.skip(reason)
    return url


def with_search_path(url: str, schema: str) -> str:
    separator = "&" if "?" in url else "?"
    return f"{url}{separator}options=-csearch_path%3D{schema}"


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Backend]:
    """A fresh, empty store location per test: a new SQLite file or a new PostgreSQL schema."""
    monkeypatch.delenv("MEMORYBOOK_STORE_KEY", raising=False)
    monkeypatch.delenv("MEMORYBOOK_STORE_URL", raising=False)
    if request.param == "sqlite":
        path = tmp_path / "memories.sqlite3"
        yield Backend("sqlite", f"sqlite:///{path}", str(path), SQLiteMemoryStore, new_key())
        return
    admin_url = postgres_url_or_skip()
    import psycopg

    schema = f"memorybook_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    url = with_search_path(admin_url, schema)
    try:
        yield Backend("postgresql", url, url, PostgresMemoryStore, new_key())
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture
def store(backend: Backend) -> Iterator[MemoryStore]:
    """A fresh store on each backend."""
    with backend.open() as opened:
        yield opened


def run_python(code: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start a separate Python process that can import memorybook."""
    child_env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        cwd=REPO_ROOT,
        env=child_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen) -> str:
    stdout, stderr = process.communicate(timeout=SUBPROCESS_TIMEOUT_SECONDS)
    assert process.returncode == 0, stderr
    assert stderr == ""
    return stdout


# -- round trip and order -------------------------------------------------------------


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


def test_memories_survive_reopening(backend: Backend) -> None:
    saved = [make_memory("C-1042", "T-1"), make_memory("C-1042", "T-2")]
    with backend.open() as store:
        for memory in saved:
            store.save("C-1042", memory)
    with backend.open() as store:
        assert json.dumps(store.recall("C-1042")) == json.dumps(saved)


def test_open_store_opens_backend_url(backend: Backend) -> None:
    with open_store(backend.url, key=backend.key) as store:
        assert isinstance(store, backend.store_class)
        store.save("C-1", make_memory("C-1", "T-1"))
    with backend.open() as store:
        assert len(store.recall("C-1")) == 1


# -- scoping ------------------------------------------------------------------------

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


# -- bad memories -------------------------------------------------------------------


def test_memory_that_is_not_json_serialisable_is_rejected(store: MemoryStore) -> None:
    memory = make_memory("C-1042", "T-1")
    memory["jev_answered"]["when"] = {1, 2}
    with pytest.raises(ValueError, match="not JSON-serialisable"):
        store.save("C-1042", memory)
    memory["jev_answered"]["when"] = float("nan")
    with pytest.raises(ValueError, match="not JSON-serialisable"):
        store.save("C-1042", memory)
    assert store.recall("C-1042") == []


@pytest.mark.parametrize(
    "bad_memory", [None, [], "memory", {"request": {}}, {"request": {"customer": {"id": "C-1042"}}}]
)
def test_memory_without_customer_and_ticket_ids_is_rejected(
    store: MemoryStore, bad_memory: object
) -> None:
    with pytest.raises(ValueError, match="shaped like"):
        store.save("C-1042", bad_memory)  # type: ignore[arg-type]


# -- encryption and keys ------------------------------------------------------------


def test_nothing_is_stored_in_plaintext(backend: Backend) -> None:
    with backend.open() as store:
        for n in range(3):
            memory = make_memory(
                SECRET_CUSTOMER_ID, f"{SECRET_TICKET_ID}-{n}", text=SECRET_TICKET_TEXT
            )
            store.save(SECRET_CUSTOMER_ID, memory)
        raw = backend.raw_bytes()  # while open: SQLite's new rows are still in the -wal file
        assert len(raw) > 1000
        secrets = [
            SECRET_CUSTOMER_ID,
            SECRET_TICKET_ID,
            SECRET_TICKET_TEXT,
            "Acme Corp",
            "Adding an admin",
        ]
        for secret in secrets:
            for encoded in (
                secret.encode(),
                secret.encode().hex().encode(),
                secret.encode("utf-16-le"),
            ):
                assert encoded not in raw, f"{secret!r} found in the raw store"
        assert backend.key.encode() not in raw


def test_wrong_key_fails_at_open(backend: Backend) -> None:
    with backend.open() as store:
        store.save("C-1042", make_memory("C-1042", "T-1"))
    with pytest.raises(MemoryStoreKeyError, match="did not encrypt") as raised:
        backend.open(key=new_key())
    assert backend.location.split("?")[0] in str(raised.value)


def test_malformed_key_is_rejected(backend: Backend) -> None:
    for malformed in ["not a key", "c2hvcnQ=", base64.urlsafe_b64encode(os.urandom(31)).decode()]:
        with pytest.raises(MemoryStoreKeyError, match="malformed"):
            backend.open(key=malformed)


def test_key_is_read_from_environment(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    with backend.open() as store:
        store.save("C-1042", make_memory("C-1042", "T-1"))
    monkeypatch.setenv("MEMORYBOOK_STORE_KEY", backend.key)
    with open_store(backend.url) as store:
        assert len(store.recall("C-1042")) == 1


def test_postgres_without_key_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMORYBOOK_STORE_KEY", raising=False)
    url = "postgresql://memorybook:secret-password@127.0.0.1:9/memories"
    with pytest.raises(MemoryStoreKeyError, match="needs an encryption key") as raised:
        open_store(url)
    message = str(raised.value)
    assert "MEMORYBOOK_STORE_KEY" in message
    assert "127.0.0.1:9/memories" in message
    assert "secret-password" not in message


def test_local_key_file_is_created_with_notice_and_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MEMORYBOOK_STORE_KEY", raising=False)
    path = tmp_path / "memories.sqlite3"
    key_path = tmp_path / "memories.sqlite3.key"
    with SQLiteMemoryStore(path) as store:
        assert key_path.exists()
        assert stat.S_IMODE(key_path.stat().st_mode) == 0o600
        assert len(store.notices) == 1
        assert str(key_path) in store.notices[0]
        assert "lost" in store.notices[0]
        store.save("C-1042", make_memory("C-1042", "T-1"))
    key_text = key_path.read_text()
    with SQLiteMemoryStore(path) as store:
        assert store.notices == []
        assert len(store.recall("C-1042")) == 1
    assert key_path.read_text() == key_text
    with SQLiteMemoryStore(path, key=key_text) as store:
        assert len(store.recall("C-1042")) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "memories.sqlite3",
        "memories.sqlite3.key",
    ]


def test_missing_key_file_for_existing_database_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MEMORYBOOK_STORE_KEY", raising=False)
    path = tmp_path / "memories.sqlite3"
    with SQLiteMemoryStore(path) as store:
        store.save("C-1042", make_memory("C-1042", "T-1"))
    (tmp_path / "memories.sqlite3.key").unlink()
    with pytest.raises(MemoryStoreKeyError, match="key file .* is missing"):
        SQLiteMemoryStore(path)
    assert not (tmp_path / "memories.sqlite3.key").exists()


# -- forgetting ---------------------------------------------------------------------


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


# -- bounded growth -----------------------------------------------------------------


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


@pytest.mark.parametrize("bad_cap", [0, -1, 2.5, True])
def test_cap_must_be_a_positive_integer(backend: Backend, bad_cap: object) -> None:
    with pytest.raises(ValueError, match="max_memories"):
        backend.open(max_memories=bad_cap)  # type: ignore[arg-type]


# -- processes ----------------------------------------------------------------------

OPEN_STORE_FROM_ARGS = """
    import json, os, sys, time
    from pathlib import Path
    from memorybook.store import PostgresMemoryStore, SQLiteMemoryStore

    backend, location = sys.argv[1], sys.argv[2]
    store_class = SQLiteMemoryStore if backend == "sqlite" else PostgresMemoryStore
    store = store_class(location, max_memories=int(os.environ.get("CAP", "50")))
"""


def test_memories_persist_across_processes(backend: Backend) -> None:
    env = {"MEMORYBOOK_STORE_KEY": backend.key}
    saved_here = make_memory("C-1042", "T-parent")
    with backend.open() as store:
        store.save("C-1042", saved_here)
    child = run_python(
        OPEN_STORE_FROM_ARGS
        + """
    print(json.dumps(store.recall("C-1042")))
    memory = json.loads(json.dumps(store.recall("C-1042")[0]))
    memory["request"]["ticket"]["id"] = "T-child"
    store.save("C-1042", memory)
    store.close()
    """,
        backend.name,
        backend.location,
        env=env,
    )
    assert finish(child).strip() == json.dumps([saved_here])
    with backend.open() as store:
        ticket_ids = [m["request"]["ticket"]["id"] for m in store.recall("C-1042")]
    assert ticket_ids == ["T-parent", "T-child"]


WRITES_PER_PROCESS = 100

CONCURRENT_WRITER = (
    OPEN_STORE_FROM_ARGS
    + """
    name, go_file = sys.argv[3], Path(sys.argv[4])
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
        run_python(CONCURRENT_WRITER, backend.name, backend.location, name, str(go_file), env=env)
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


# -- damaged files and lifecycle ------------------------------------------------------


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


def test_closed_store_refuses_work(store: MemoryStore) -> None:
    store.close()
    store.close()
    with pytest.raises(MemoryStoreError, match="closed"):
        store.recall("C-1042")


# -- choosing the store -------------------------------------------------------------


def test_default_store_lives_in_repo_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMORYBOOK_STORE_URL", raising=False)
    monkeypatch.delenv("MEMORYBOOK_STORE_KEY", raising=False)
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "notebooks").mkdir()
    monkeypatch.chdir(tmp_path / "notebooks")
    with open_store() as store:
        assert isinstance(store, SQLiteMemoryStore)
        assert store.path == tmp_path / ".memorybook" / "memories.sqlite3"
        assert any(".memorybook/memories.sqlite3.key" in notice for notice in store.notices)
    assert (tmp_path / ".memorybook" / ".gitignore").exists()


def test_store_url_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MEMORYBOOK_STORE_URL", "sqlite:///nested/folder/store.sqlite3")
    with open_store(key=new_key()) as store:
        assert isinstance(store, SQLiteMemoryStore)
        assert store.path == tmp_path / "nested" / "folder" / "store.sqlite3"


def test_unsupported_url_is_a_clear_error() -> None:
    with pytest.raises(MemoryStoreError, match="Unsupported memory store URL"):
        open_store("mysql://root:hunter2@db/memories", key=new_key())


# -- faults: damaged rows, erasure, racing first opens, bad input (issue 8) ---------------------


def damage_row(backend: Backend, position: int) -> None:
    """Flip one byte of the ciphertext of the customer rows' `position`-th row (1 = oldest)."""
    if backend.name == "sqlite":
        connection = sqlite3.connect(backend.location)
        placeholder = "?"
    else:
        import psycopg

        connection = psycopg.connect(backend.url)
        placeholder = "%s"
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


def ticket_ids(memories: list[dict]) -> list[str]:
    return [m["request"]["ticket"]["id"] for m in memories]


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
        assert "1 damaged memory row(s) of customer 'C-1042'" in store.notices[-1]
        assert ticket_ids(store.recall("C-1042")) == ["T-1", "T-3"]


def test_a_damaged_memory_does_not_block_saving_at_the_cap(backend: Backend) -> None:
    with backend.open(max_memories=2) as store:
        store.save("C-1042", make_memory("C-1042", "T-1"))
        store.save("C-1042", make_memory("C-1042", "T-2"))
    damage_row(backend, 1)
    with backend.open(max_memories=2) as store:
        assert store.save("C-1042", make_memory("C-1042", "T-3")) == []  # T-1 evicted, unreadable
        assert "Evicted 1 damaged memory row(s)" in store.notices[-1]
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
        assert "Erased 1 damaged memory row(s)" in store.notices[-1]
        assert store.recall("C-1042") == []
        assert store.forget_customer("C-1042") == []
        assert ticket_ids(store.recall("C-2210")) == ["T-9"]  # other customers untouched
    with backend.open() as store:
        assert store.recall("C-1042") == []


def test_open_store_takes_a_cap(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORYBOOK_STORE_KEY", backend.key)
    with open_store(backend.url, max_memories=1) as store:
        assert store.max_memories == 1
        assert store.save("C-1042", make_memory("C-1042", "T-1")) == []
        evicted = store.save("C-1042", make_memory("C-1042", "T-2"))
        assert evicted == [make_memory("C-1042", "T-1")]
        assert ticket_ids(store.recall("C-1042")) == ["T-2"]


@pytest.mark.parametrize(
    "bad_key",
    [
        pytest.param(lambda key: key + "junk", id="trailing junk"),
        pytest.param(lambda key: key[:20] + "!" + key[20:], id="junk inside"),
        pytest.param(lambda key: key + "=", id="extra padding"),
        pytest.param(lambda key: base64.urlsafe_b64encode(bytes(32)).decode(), id="all zero"),
    ],
)
def test_keys_that_only_look_valid_are_refused(backend: Backend, bad_key) -> None:
    with pytest.raises(MemoryStoreKeyError, match="malformed|all zero"):
        backend.open(key=bad_key(backend.key))


def nested(depth: int) -> dict:
    value: object = "deep"
    for _ in range(depth):
        value = [value]
    return value


def test_a_deeply_nested_memory_is_a_value_error(store: MemoryStore) -> None:
    memory = make_memory("C-1042", "T-1")
    memory["jev_answered"]["deep"] = nested(100_000)
    with pytest.raises(ValueError, match="nested too deeply"):
        store.save("C-1042", memory)


def test_a_memory_has_a_size_limit(store: MemoryStore) -> None:
    memory = make_memory("C-1042", "T-1", text="x" * (MAX_MEMORY_BYTES + 1))
    with pytest.raises(ValueError, match="at most 1,000,000"):
        store.save("C-1042", memory)
    assert store.recall("C-1042") == []
    store.save("C-1042", make_memory("C-1042", "T-2", text="x" * (MAX_MEMORY_BYTES // 2)))


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
        assert "1,000,004 characters" in str(raised.value)


@pytest.mark.parametrize(
    "message",
    ["database or disk is full", "attempt to write a readonly database", "disk I/O error"],
)
def test_a_full_or_read_only_disk_never_advises_moving_the_file(
    tmp_path: Path, message: str
) -> None:
    with SQLiteMemoryStore(tmp_path / "memories.sqlite3", key=new_key()) as store:
        advice = str(store._database_error(sqlite3.OperationalError(message)))
    assert message in advice and "The file itself is fine" in advice
    assert "move it aside" not in advice


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 64 KiB tmpfs (a store fills it)."""
    with mounted_tmpfs(tmp_path, "64k") as tmpfs:
        yield tmpfs


FILL_THE_DISK = """
    import os, sys
    from memorybook.store import MemoryStoreError, SQLiteMemoryStore
    from tests.test_store import make_memory, new_key

    with SQLiteMemoryStore(sys.argv[1], key=new_key()) as store:
        try:
            for n in range(1000):
                store.save("C-1042", make_memory("C-1042", f"T-{n}", os.urandom(4000).hex()))
        except MemoryStoreError as error:
            print(error)
"""


def test_a_really_full_disk_is_explained_without_blaming_the_file(small_tmpfs) -> None:
    # In the tmpfs's namespace: SQLite resolves the path it is given, which loses the namespace.
    database = small_tmpfs.mount_point / "memories.sqlite3"
    filled = subprocess.run(
        [*small_tmpfs.enter, sys.executable, "-c", textwrap.dedent(FILL_THE_DISK), str(database)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_SECONDS)
    assert filled.returncode == 0, filled.stderr
    assert "disk is full" in filled.stdout and "The file itself is fine" in filled.stdout
    assert "move it aside" not in filled.stdout


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
        run_python(FIRST_OPENS, str(tmp_path), str(n), str(processes), str(rounds))
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
