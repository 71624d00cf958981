"""Readiness (memorybook/readiness.py, AsyncMemory.ready(), GET /ready): ready only while the
memory runs and its store answers within 2 s of the probe's own; a 503 with Retry-After, in one
line naming no database, once the store fails, while the memory stops, within 10 s of PostgreSQL
stopping and within 2 s of it freezing, when probes pile up neither threads nor connections; any
Host and no token, as /health. Jev's answers are a stand-in's, made up here."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

import pytest

from memorybook import MadeUpJev, MemoryStoreError
from memorybook.service import create_app
from memorybook.settings import Settings
from tests.helpers import in_process, new_key, talk

TOKEN = "readiness-canary-token-5d1c8a"
PROBE = {"Host": "10.0.0.7:8000"}  # an orchestrator's probe, by the replica's address


def made_up(state: dict, questions: dict) -> dict:
    return {"remember": 0.9} if "remember" in questions else {"team": "general"}


def ticket(customer: str, ticket_id: str) -> dict:
    return {"customer": {"id": customer}, "ticket": {"id": ticket_id, "text": "On Linux."}}


def not_ready(answer, why: str) -> str:
    """The 503's one line, checked: JSON, Retry-After, no database's name or address."""
    assert answer.status_code == 503, (
        f"GET /ready answered {answer.status_code} {answer.text[:200]}, not 503: {why}")
    detail = answer.json()["detail"]
    assert answer.headers.get("retry-after") == "1" and "\n" not in detail, (
        f"a 503 from GET /ready must carry Retry-After and one line (routes.py ready()): "
        f"{answer.headers} {detail!r}")
    assert not [word for word in ("sqlite", "postgres", "127.0.0.1", ".sqlite3") if word in
                detail.lower()], f"the 503's line names the store: {detail}"
    return detail


def test_ready_answers_any_probe_and_is_a_503_while_the_store_fails(tmp_path, monkeypatch,
                                                                    caplog):
    import memorybook.readiness

    monkeypatch.setattr(memorybook.readiness, "REUSED_FOR_SECONDS", 0)  # each probe asks
    app = create_app(f"sqlite:///{tmp_path / 'store.sqlite3'}", ask=MadeUpJev(made_up),
                     settings=Settings(token=TOKEN))

    def failing() -> None:
        raise MemoryStoreError(f"the database {tmp_path}/store.sqlite3 is gone")

    async def requests(http):
        answers = [await http.get("/ready", headers=PROBE)]
        store = app.state.memory.store
        store.check, checked = failing, store.check
        answers += [await http.get("/ready", headers=PROBE), await http.get("/ready")]
        store.check = checked
        return [*answers, await http.get("/ready", headers=PROBE),
                await http.get("/customers/C-1/memories", headers=PROBE)]

    with caplog.at_level(logging.INFO, logger="memorybook"):
        first, failed, again, back, foreign = talk(app, requests, base_url="http://memory.internal")
    assert (first.status_code, first.json()) == (200, {"status": "ready"}), (
        f"GET /ready by a probe with neither an allowed Host nor the token must answer as /health "
        f"does (PROBE_PATHS in memorybook/service_guard.py): {first.status_code} {first.text}")
    assert foreign.status_code == 400, "the other routes must still refuse a foreign Host"
    detail = not_ready(failed, "the store's check failed (StoreCheck in memorybook/readiness.py)")
    assert not_ready(again, "the store still fails") == detail and "failed" in detail, detail
    assert back.status_code == 200, f"the store answers again, so must GET /ready: {back.text}"
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith(
        ("not ready", "ready again"))]
    assert len(logged) == 2 and "is gone" in logged[0] and logged[1].startswith("ready again"), (
        "a change between ready and not must be logged once each way, the store's error with "
        f"the first (StoreCheck._noted() in memorybook/readiness.py): {logged}")


def test_ready_is_a_503_while_the_memory_stops_waiting_for_a_gate(tmp_path):
    release = asyncio.Event()

    async def gate_held(state: dict, questions: dict):
        if "remember" in questions:
            await release.wait()
        return await MadeUpJev(made_up).ask_async(state, questions)

    app = create_app(f"sqlite:///{tmp_path / 'store.sqlite3'}", ask=gate_held)

    async def scenario():
        async with in_process(app) as http:
            assert (await http.post("/tickets", json=ticket("C-1", "T-1"))).status_code == 200
            stopping = asyncio.create_task(app.state.memory.stop())  # as SIGTERM's shutdown
            await asyncio.sleep(0.05)
            answer = await http.get("/ready")
            memory_says = await app.state.memory.ready()
            release.set()
            await stopping
            return answer, memory_says, stopping

    answer, memory_says, _ = asyncio.run(scenario())
    detail = not_ready(answer, "the memory is stopping, draining a gate (AsyncMemory.ready())")
    assert "stopping" in detail and not memory_says and memory_says.reason == detail, (
        f"while it stops, AsyncMemory.ready() must be false and say so: {memory_says}")


@pytest.fixture
def postgres_url():
    from tests.store.conftest import PostgresBackend

    return PostgresBackend.server_url_or_skip()


def connections_named(url: str, name: str) -> list[int]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as admin:
        return [pid for (pid,) in admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (name,))]


def threads_in_the_store() -> int:
    """How many threads are in a call of memorybook's store now."""
    return sum(any("memorybook/store/" in frame.f_code.co_filename
                   for frame, _ in traceback.walk_stack(top))
               for top in sys._current_frames().values())


def test_a_frozen_postgresql_is_a_503_within_2_s_and_probes_pile_up_nothing(
        tmp_path, monkeypatch, postgres_url):
    from tests.store.conftest import PostgresBackend

    monkeypatch.setenv("MEMORYBOOK_STORE_KEY", new_key())
    with PostgresBackend.fresh(tmp_path) as backend:
        name = f"memorybook-ready-{os.getpid()}-{time.monotonic_ns()}"
        # The store's own timeout (5 s) is longer than the probe's (2 s): the probe must not
        # wait for it.
        app = create_app(f"{backend.url}&application_name={name}", ask=MadeUpJev(made_up),
                         store_options={"timeout": 5})

        async def requests(http):
            assert (await http.get("/ready")).status_code == 200
            checks = []
            store = app.state.memory.store
            checked = store.check
            store.check = lambda: checks.append(1) or checked()
            pids = connections_named(backend.url, name)
            threads = threads_in_the_store()
            for pid in pids:  # as a frozen host, or a network that drops everything
                os.kill(pid, signal.SIGSTOP)
            try:
                frozen = time.monotonic()
                while True:  # the last answer, ready, is reused for a second
                    started = time.monotonic()
                    first = await asyncio.gather(*[http.get("/ready") for _ in range(3)])
                    first_took, since = time.monotonic() - started, time.monotonic() - frozen
                    if first[0].status_code != 200 or since > 5:
                        break
                    await asyncio.sleep(0.1)
                started = time.monotonic()
                more = await asyncio.gather(*[http.get("/ready") for _ in range(10)])
                more_took = time.monotonic() - started
                piled = (threads_in_the_store() - threads, len(checks),
                         len(connections_named(backend.url, name)) - len(pids))
            finally:
                for pid in pids:
                    os.kill(pid, signal.SIGCONT)
            for _ in range(50):
                back = await http.get("/ready")
                if back.status_code == 200:
                    break
                await asyncio.sleep(0.1)
            return first, first_took, since, more, more_took, piled, back

        first, first_took, since, more, more_took, piled, back = talk(app, requests)
    print(f"GET /ready on a frozen PostgreSQL: 503 {since:.2f} s after it froze, the probe taking "
          f"{first_took:.2f} s; then 10 more in {more_took:.2f} s; threads, checks and "
          f"connections added: {piled}")
    assert all("did not answer within 2 s" in not_ready(answer, "the store is frozen")
               for answer in first) and 1.8 < first_took < 3 and since < 1 + 3, (
        f"3 probes at once on a frozen store must be 503s after the probe's own 2 s, not the "
        f"store's 5 s, once the last answer (reused for 1 s) is older: they took "
        f"{first_took:.2f} s, {since:.2f} s after the store froze (StoreCheck in "
        "memorybook/readiness.py)")
    assert all("has not answered" in not_ready(answer, "the check is stuck") for answer in more)
    assert more_took < 1, (
        f"10 probes while the last check is stuck took {more_took:.2f} s: they must be told at "
        "once, not wait (StoreCheck.readiness())")
    assert piled == (1, 1, 0), (
        f"13 probes on a frozen store left {piled[0]} thread(s) in a store call, asked the store "
        f"{piled[1]} "
        f"time(s) and opened {piled[2]} connection(s): at most one check at a time, and no "
        "new connection (StoreCheck in memorybook/readiness.py)")
    assert back.status_code == 200, f"thawed, the store answers again: {back.text}"


def test_a_stopped_postgresql_is_a_503_within_10_s_and_ready_again_once_it_is_back(
        tmp_path, monkeypatch, postgres_url):
    from tests.store.test_postgres import OwnPostgres

    folder = Path(tempfile.mkdtemp(prefix="memorybook-ready-pg-"))
    folder.chmod(0o755)  # the postgres user must reach the cluster inside when we are root
    server = OwnPostgres(folder / "postgres")
    monkeypatch.setenv("MEMORYBOOK_STORE_KEY", new_key())
    try:
        app = create_app(server.run("start"), ask=MadeUpJev(made_up))

        async def until(status: int, limit: float, http) -> tuple[object, float]:
            started = time.monotonic()
            while True:
                answer = await http.get("/ready")
                if answer.status_code == status or time.monotonic() - started > limit:
                    return answer, time.monotonic() - started
                await asyncio.sleep(0.1)

        async def requests(http):
            assert (await http.get("/ready")).status_code == 200
            await asyncio.to_thread(server.run, "stop")
            stopped = await until(503, 10, http)
            await asyncio.to_thread(server.run, "start")
            return stopped, await until(200, 10, http)

        (stopped, stopped_took), (back, back_took) = talk(app, requests)
    finally:
        with contextlib.suppress(Exception):
            server.run("stop")
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
    print(f"GET /ready: 503 {stopped_took:.2f} s after PostgreSQL stopped, 200 {back_took:.2f} s "
          "after it started again")
    assert "failed" in not_ready(stopped, "within 10 s of PostgreSQL stopping"), stopped.text
    assert back.status_code == 200, (
        f"PostgreSQL is back: GET /ready must be 200 within 10 s (the store connects again at "
        f"its next call): {back.status_code} {back.text}")
