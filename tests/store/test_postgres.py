"""The PostgreSQL backend: no key is a clear error; a store outlives a restart of its server;
a call to a frozen server ends within its timeout; a save waits for the server twice."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

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
        # The thawed session sees its socket shut, and ends. (Autocommit: inside a transaction,
        # pg_stat_activity shows what it showed at its first read, ended sessions included.)
        with psycopg.connect(backend.url, autocommit=True) as admin:
            deadline = time.monotonic() + 10
            while session := admin.execute(
                "SELECT state, wait_event_type, wait_event, query FROM pg_stat_activity"
                " WHERE pid = %s", (pid,)).fetchall():
                assert time.monotonic() < deadline, (
                    f"the frozen session was still there 10 s after it thawed: {session[0]} "
                    "(state, wait event type and name, query). It should end once it reads the "
                    "socket the store's watchdog shut (postgres.py Watchdog)."
                )
                time.sleep(0.05)
        # A save is one statement (writes.py), which the server runs once it thaws, though its
        # answer can no longer reach us: so the error says the change may have been made.
        saved = {"recall": ["T-1"], "save": ["T-1", "T-2"]}[call]
        assert ticket_ids(store.recall("C-1042")) == saved, (  # on a new connection
            "A store whose call the watchdog ended must work on a new connection, holding what "
            "the server committed (postgres.py Watchdog, _error())."
        )
        if call == "save":
            assert "the change may have been made: check with recall()" in str(error), error


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


class RoundTripCounter:
    """A TCP proxy in front of the PostgreSQL server that counts round trips: each time the
    client sends after the server has answered (or first), the client waits for the server once
    more. Statements sent together, in one write or several, count once."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self._server = (parts.hostname, parts.port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        netloc = f"{parts.username}@127.0.0.1:{self._listener.getsockname()[1]}"
        self.url = urlunsplit(parts._replace(netloc=netloc))
        self.round_trips = 0
        self._last_sender = ""
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def during(self, call) -> int:
        """The round trips the call made (it has its answers once it returns)."""
        with self._lock:
            before = self.round_trips
        call()
        with self._lock:
            return self.round_trips - before

    def close(self) -> None:
        self._listener.close()
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # closed
                return
            server = socket.create_connection(self._server)
            self._sockets += [client, server]
            for source, sink, side in ((client, server, "client"), (server, client, "server")):
                threading.Thread(target=self._pass, args=(source, sink, side), daemon=True).start()

    def _pass(self, source: socket.socket, sink: socket.socket, side: str) -> None:
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                data = b""
            if not data:
                with contextlib.suppress(OSError):
                    sink.shutdown(socket.SHUT_WR)
                return
            with self._lock:  # counted before it is passed on, so before its answer comes
                if side == "client" and self._last_sender != "client":
                    self.round_trips += 1
                self._last_sender = side
            try:
                sink.sendall(data)
            except OSError:  # the other side is gone: the proxy is closing
                return


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_postgres_save_or_erasure_waits_for_the_server_once(backend: Backend) -> None:
    """A save is one statement, whether it evicts, expires or neither, and so is an erasure.
    forget() needs its rows before its history: twice."""
    proxy = RoundTripCounter(backend.url)
    start = datetime(2026, 8, 4, 9, 0, tzinfo=UTC)
    now = [start]
    try:
        with backend.store_class(proxy.url, key=backend.key, max_memories=2,
                                 retention=timedelta(days=1), clock=lambda: now[0]) as store:
            trips = {}
            for n, case in enumerate(["first", "second", "evicting", "evicting again"]):
                trips[case] = proxy.during(
                    lambda n=n: store.save("C-1042", make_memory("C-1042", f"T-{n}")))
            now[0] = start + timedelta(days=2)
            trips["expiring"] = proxy.during(
                lambda: store.save("C-1042", make_memory("C-1042", "T-5")))
            trips["forget"] = proxy.during(lambda: store.forget("C-1042", "T-5"))
            trips["forget_customer"] = proxy.during(lambda: store.forget_customer("C-1042"))
            assert [e.event for e in store.history("C-1042")] == []
    finally:
        proxy.close()
    most = {"forget": 2}
    assert all(count <= most.get(call, 1) for call, count in trips.items()), (
        f"Round trips per call: {trips}. A PostgreSQL save or erasure must be one call of its "
        "function (writes.py; postgres.py save_alone(), erase_alone()); forget() may wait "
        "twice, for its rows, then for its history and the commit (write_transaction() in "
        "pipeline mode)."
    )


def test_a_process_holds_at_most_its_turns_connections_and_few_once_quiet(tmp_path) -> None:
    import uuid

    import psycopg

    from memorybook.store.turns import KEPT_IDLE, CustomerTurns
    from tests.store.conftest import PostgresBackend

    name = f"memorybook-turns-{uuid.uuid4().hex[:8]}"

    def connections() -> int:
        with psycopg.connect(PostgresBackend.server_url_or_skip(), autocommit=True) as server:
            return server.execute("SELECT count(*) FROM pg_stat_activity WHERE "
                                  "application_name = %s", (name,)).fetchone()[0]

    with PostgresBackend.fresh(tmp_path) as backend:
        turns = CustomerTurns(f"{backend.url}&application_name={name}", at_most=KEPT_IDLE + 2,
                              key=new_key(), timeout=1)
        try:
            held = [turns.take(f"C-{n}") for n in range(KEPT_IDLE + 2)]
            for turn in held:
                turn.wait()
            one_more = turns.take("C-one-more")
            started = time.monotonic()
            with pytest.raises(MemoryStoreError, match=f"{KEPT_IDLE + 2} connections"):
                one_more.wait()
            waited, at_most = time.monotonic() - started, connections()
            for turn in held:
                turn.give_back()
            quiet = connections()
            for _ in range(100):  # the turns' threads give their connections back
                if quiet <= KEPT_IDLE:
                    break
                time.sleep(0.05)
                quiet = connections()
            again = turns.take("C-0")
            again.wait()
            again.give_back()
        finally:
            turns.close()
    assert at_most == KEPT_IDLE + 2 and waited < 1 + MARGIN_SECONDS, (
        f"with CustomerTurns(at_most={KEPT_IDLE + 2}), a process held {at_most} connections "
        f"and a turn beyond them waited {waited:.1f} s: memorybook/store/turns.py must cap the "
        "turns held at once and bound the wait for one by the store's timeout")
    assert quiet == KEPT_IDLE, (
        f"once every turn was given back, {quiet} connections stayed open: "
        "memorybook/store/turns.py must keep at most KEPT_IDLE")


def test_calls_waiting_for_turns_leave_the_holders_the_threads_their_store_calls_need(
        tmp_path) -> None:
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from memorybook.gates import PendingGates
    from memorybook.store.turns import CustomerTurns
    from tests.store.conftest import PostgresBackend

    finished: list[str] = []

    async def customers_at_once(url: str) -> None:
        # As few worker threads as a small machine's default, and more customers than turns
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=2))
        gates = PendingGates(CustomerTurns(url, at_most=2, key=new_key(), timeout=5))

        async def one(customer: str) -> None:
            previous, done = gates.take_turn(customer)
            await gates.wait_for_turn(customer, previous, done, 10)
            try:
                await asyncio.to_thread(time.sleep, 0.1)  # the holder's recall, say
                finished.append(customer)
            finally:
                gates.end_turn(customer, done)

        try:
            await asyncio.gather(*(one(f"C-{n}") for n in range(6)))
        finally:
            gates.turns.close()

    with PostgresBackend.fresh(tmp_path) as backend:
        started = time.monotonic()
        asyncio.run(customers_at_once(backend.url))
        seconds = time.monotonic() - started
    assert len(finished) == 6 and seconds < 4, (
        f"6 customers on 2 turns and 2 worker threads took {seconds:.1f} s ({len(finished)} "
        "finished): a call waiting for its turn must not hold a worker thread "
        "(PendingGates.hold() awaits Turn.wait_async(), memorybook/store/turns.py)")
