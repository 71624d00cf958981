"""The PostgreSQL backend: no key is a clear error; a store outlives a restart of its server;
a call to a frozen server ends within its timeout."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from memorybook.store import MemoryStoreError, MemoryStoreKeyError, PostgresMemoryStore, open_store
from tests.helpers import (
    MARGIN_SECONDS,
    REPO_ROOT,
    SUBPROCESS_TIMEOUT_SECONDS,
    Backend,
    in_thread,
    make_memory,
    new_key,
    ticket_ids,
)


def test_postgres_without_key_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMORYBOOK_STORE_KEY", raising=False)
    url = "postgresql://memorybook:secret-password@127.0.0.1:9/memories"
    with pytest.raises(MemoryStoreKeyError, match="needs an encryption key") as raised:
        open_store(url)
    message = str(raised.value)
    assert "MEMORYBOOK_STORE_KEY" in message
    assert "127.0.0.1:9/memories" in message
    assert "secret-password" not in message


@dataclass
class OwnPostgres:
    """A PostgreSQL server of one test's own, to stop and restart (tools/postgres_server.sh)."""

    folder: Path

    def run(self, command: str) -> str:
        done = subprocess.run(
            [str(REPO_ROOT / "tools" / "postgres_server.sh"), command, str(self.folder)],
            capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_SECONDS,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()


@pytest.fixture
def own_postgres(postgres_server_url: str) -> Iterator[OwnPostgres]:
    """A server of the test's own, where the shared one runs (postgres_server_url skips else)."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="memorybook-own-pg-"))
    folder.chmod(0o755)  # the postgres user must reach the cluster inside when we are root
    server = OwnPostgres(folder / "postgres")
    try:
        yield server
    finally:
        server.run("stop")
        shutil.rmtree(folder)


def test_a_postgres_store_works_again_after_its_server_restarts(own_postgres: OwnPostgres) -> None:
    url = own_postgres.run("start")
    with PostgresMemoryStore(url, key=new_key()) as store:
        store.save("C-1042", make_memory("C-1042", "T-1"))
        own_postgres.run("stop")
        with pytest.raises(MemoryStoreError) as raised:
            store.save("C-1042", make_memory("C-1042", "T-2"))
        assert "next call" in str(raised.value), "it must say that a later call reconnects"
        assert own_postgres.run("start") == url, "the server came back where it was"
        store.save("C-1042", make_memory("C-1042", "T-3"))
        assert ticket_ids(store.recall("C-1042")) == ["T-1", "T-3"]
        own_postgres.run("restart")
        assert ticket_ids(store.recall("C-1042")) == ["T-1", "T-3"]
        store.save("C-1042", make_memory("C-1042", "T-4"))
        assert ticket_ids(store.forget_customer("C-1042")) == ["T-1", "T-3", "T-4"]


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)  # a server to freeze
@pytest.mark.parametrize("call", ["recall", "save"])
def test_a_call_to_a_frozen_postgres_server_ends_within_its_timeout(
    backend: Backend, call: str
) -> None:
    import psycopg

    seconds = 1
    name = f"memorybook-frozen-{os.getpid()}-{time.monotonic_ns()}"
    url = f"{backend.url}&application_name={name}"
    with backend.store_class(url, key=backend.key, timeout=seconds) as store:
        store.save("C-1042", make_memory("C-1042", "T-1"))
        with psycopg.connect(backend.url) as admin:
            [(pid,)] = admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (name,)
            ).fetchall()
        calls = {"recall": lambda: store.recall("C-1042"),
                 "save": lambda: store.save("C-1042", make_memory("C-1042", "T-2"))}
        os.kill(pid, signal.SIGSTOP)  # as a frozen host, or a network that drops everything
        try:
            calling, called = in_thread(calls[call])
            calling.join(seconds + MARGIN_SECONDS + 20)
        finally:
            os.kill(pid, signal.SIGCONT)
        calling.join(10)
        [(error, took)] = called
        assert isinstance(error, MemoryStoreError), error
        assert f"{call}() had no answer" in str(error) and "connects again" in str(error)
        assert took <= seconds + MARGIN_SECONDS, f"{took:.2f} s for a timeout of {seconds} s"
        assert ticket_ids(store.recall("C-1042")) == ["T-1"]  # on a new connection


@pytest.mark.parametrize("hosts", [1, 5])
def test_a_connect_to_a_server_that_never_answers_ends_within_the_timeout(hosts: int) -> None:
    import socket

    listener = socket.create_server(("127.0.0.1", 0), backlog=16)  # accepts TCP, says nothing
    try:
        port = listener.getsockname()[1]
        url = f"postgresql://u@{','.join([f'127.0.0.1:{port}'] * hosts)}/memories"
        seconds = 1
        started = time.monotonic()
        with pytest.raises(MemoryStoreError, match="Could not connect") as raised:
            open_store(url, key=new_key(), timeout=seconds)
        took = time.monotonic() - started
    finally:
        listener.close()
    assert took <= seconds + MARGIN_SECONDS, (
        f"{took:.1f} s to give up connecting to {hosts} host(s) with a timeout of {seconds} s: "
        "memorybook/store/postgres.py (_connect) must bound the whole connect")
    assert "\n" not in str(raised.value)
