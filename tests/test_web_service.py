"""The async wrapper (memorybook/wrapper.py), each customer's turn (memorybook/gates.py) and the
service (memorybook/service/), as notebook 9 shows them: the gate after the reply, each
customer's calls in order, failures that never touch the reply, the service's contract, and
stopping with gates pending. Jev's answers here are a stand-in's, made up by each test, never
written anywhere."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time

import httpx2
import psutil
import pytest

from memorybook.config import RECORDING_PATH
from memorybook.example import EARLIER, ROUTE, ticket_state
from memorybook.gates import PendingGates
from memorybook.memory import MEMORY_KEY, InMemoryMemories, StateError
from memorybook.service import create_app
from memorybook.wrapper import ask_with_memory_async
from tests.helpers import (
    COMMITTED_RECORDING,
    REPO_ROOT,
    MadeUpAnswers,
    free_port,
    fresh_jev,
    in_process,
    live_env,
    loopback_http,
    pending_records,
    seconds_until_it_answers,
    services,
    stop_for_good,
    twenty_customers_tickets,
)
from tools.loopback_server import LoopbackSystemOne

CANARY_KEY = "canary-key-3f9a1c7e55d2"
CANARY_PASSWORD = "canary-password-b81e0d"
SENT_AS_JSON = {"Content-Type": "application/json"}


def my_ticket(customer: str, ticket_id: str, text: str = "We self-host on Linux.") -> dict:
    return ticket_state(customer, ticket_id, "2026-10-02", "Question", text)


SUBJECT = "Kestrel invoice 7731"  # a subject no log may hold


class SlowGate:
    """Made-up answers: every ticket to the Linux team at once; the gate keeps every ticket, but
    only once `release` is set."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.routed: list[dict] = []  # the states the routing requests carried
        self.gates_waiting = 0

    async def gate_started(self, what: str) -> None:
        """Wait (up to 1 s) for a gate to be held here: the reply has come back before it.
        Python 3.12's wait_for() no longer yields to the loop on its way out, so the gate's
        task may not have taken its first step when the reply is in."""
        for _ in range(100):
            if self.gates_waiting:
                return
            await asyncio.sleep(0.01)
        pytest.fail(f"{what}: no gate started after the reply")

    async def ask_async(self, state: dict, questions: dict):
        from typesafe_sdk import SystemOneResponse

        if "remember" in questions:
            self.gates_waiting += 1
            await self.release.wait()
            self.gates_waiting -= 1
            answers = {"remember": {"type": "noul", "noul": 0.9}}
        else:
            self.routed.append(state)
            answers = {"team": {"type": "choice", "choice": "selfhosted_linux",
                                "confidence": 1.0, "probabilities": {"selfhosted_linux": 1.0}}}
        return SystemOneResponse.model_validate(
            {"model": "made-up", "usage": {"input_tokens": 0, "output_tokens": 0},
             "answers": answers})


async def within(seconds: float, awaitable, what: str):
    """`await awaitable`, failing the test with `what` if it takes longer than `seconds`."""
    try:
        return await asyncio.wait_for(awaitable, seconds)
    except TimeoutError:
        pytest.fail(f"{what} took more than {seconds} s")


def memory_ids(state: dict) -> list[str]:
    return [memory["request"]["ticket"]["id"] for memory in state.get(MEMORY_KEY, [])]


def test_the_next_call_for_a_customer_waits_for_the_pending_gate_and_sees_its_memory(
        monkeypatch):
    async def scenario():
        jev, memories, gates = SlowGate(), InMemoryMemories(), PendingGates()
        first = await within(2, ask_with_memory_async(
            my_ticket("C-1042", "T-901"), ROUTE, memories, gates=gates, ask=jev.ask_async),
            "the reply of ask_with_memory_async() with its gate held (it must not wait for it)")
        assert first.answers["team"].choice == "selfhosted_linux"
        await jev.gate_started("ask_with_memory_async()")  # and is held: the reply did not wait
        second = asyncio.create_task(ask_with_memory_async(
            my_ticket("C-1042", "T-902", "Backups fail."), ROUTE, memories, gates=gates,
            ask=jev.ask_async))
        await asyncio.sleep(0.3)
        assert len(jev.routed) == 1 and not second.done(), (
            "ask_with_memory_async() recalled for C-1042 while C-1042's gate was pending: "
            "PendingGates.take_turn() (memorybook/gates.py) must make it wait")
        jev.release.set()
        await asyncio.wait_for(second, 2)
        await gates.drain()
        return jev, memories

    jev, memories = asyncio.run(scenario())
    assert memory_ids(jev.routed[1]) == ["T-901"], (
        "the second ticket was routed without the first one's memory")
    assert [m["request"]["ticket"]["id"] for m in memories.recall("C-1042")] == ["T-901", "T-902"]


def test_another_customers_call_does_not_wait_for_a_slow_gate(monkeypatch):
    async def scenario():
        jev, memories, gates = SlowGate(), InMemoryMemories(), PendingGates()
        await ask_with_memory_async(my_ticket("C-1042", "T-901"), ROUTE, memories,
                                        gates=gates, ask=jev.ask_async)  # its gate never ends here
        started = time.perf_counter()
        await within(2, ask_with_memory_async(
            my_ticket("C-2210", "T-902"), ROUTE, memories, gates=gates, ask=jev.ask_async),
            "C-2210's call with C-1042's gate held (PendingGates must not make it wait)")
        seconds = time.perf_counter() - started
        jev.release.set()
        await gates.drain()
        return seconds

    seconds = asyncio.run(scenario())
    print(f"C-2210's reply with C-1042's gate held: {seconds * 1000:.1f} ms")
    assert seconds < 1.0, (
        "C-2210's call waited for C-1042's gate (PendingGates, memorybook/gates.py)")


class SlowStore(InMemoryMemories):
    """In-memory memories whose every call takes 0.3 s, as a slow database's would."""

    def recall(self, customer_id: str) -> list[dict]:
        time.sleep(0.3)
        return super().recall(customer_id)

    def save(self, customer_id: str, memory: dict) -> list[dict]:
        time.sleep(0.3)
        return super().save(customer_id, memory)


def test_store_calls_never_block_the_event_loop(monkeypatch):
    async def scenario():
        jev, memories, gates = SlowGate(), SlowStore(), PendingGates()
        jev.release.set()
        ticks = 0

        async def tick():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())
        await ask_with_memory_async(my_ticket("C-1042", "T-901"), ROUTE, memories,
                                        gates=gates, ask=jev.ask_async)
        await gates.drain()  # a recall and a save: 0.6 s in the store
        ticker.cancel()
        return ticks, memories

    ticks, memories = asyncio.run(scenario())
    assert [m["request"]["ticket"]["id"] for m in memories.recall("C-1042")] == ["T-901"]
    assert ticks >= 10, (
        f"the event loop ran {ticks} times in 0.6 s of store calls: ask_with_memory_async() "
        "must call the store in a worker thread (asyncio.to_thread), not on the loop")


def test_a_failing_gate_leaves_the_reply_intact_and_is_logged_once_without_secrets(
        monkeypatch, caplog):
    monkeypatch.setenv("TYPESAFE_API_KEY", CANARY_KEY)  # the key redact() hides
    jev = SlowGate()

    async def failing_gate(state, questions):
        if "remember" in questions:
            raise RuntimeError(f"HTTP 500 Authorization: Bearer {CANARY_KEY} from "
                               f"postgresql://app:{CANARY_PASSWORD}@db.example/x\nsecond line")
        return await jev.ask_async(state, questions)

    async def scenario():
        memories, gates = InMemoryMemories(), PendingGates()
        reply = await ask_with_memory_async(my_ticket("C-1042", "T-901"), ROUTE, memories,
                                                gates=gates, ask=failing_gate)
        await gates.drain()
        return reply, memories

    with caplog.at_level(logging.ERROR, logger="memorybook"):
        reply, memories = asyncio.run(scenario())
    assert reply.answers["team"].choice == "selfhosted_linux"
    assert memories.recall("C-1042") == []
    records = [r for r in caplog.records if r.name == "memorybook"]
    assert len(records) == 1, f"a failed gate must be logged once, not {len(records)} times"
    message = records[0].getMessage()
    assert "C-1042" in message and "T-901" in message, message
    assert CANARY_KEY not in caplog.text and CANARY_PASSWORD not in caplog.text, caplog.text


@pytest.mark.parametrize("ticket", ["T-901", ["T-901"], None, {"id": 901}, {"id": "  "}, {},
                                    "missing"])
def test_a_state_whose_ticket_has_no_id_is_refused_before_its_reply_and_its_gate(caplog, ticket):
    state = {"customer": {"id": "C-1042"}}
    if ticket != "missing":
        state["ticket"] = ticket
    jev = SlowGate()

    async def scenario():
        gates = PendingGates()
        try:
            await ask_with_memory_async(state, ROUTE, InMemoryMemories(), gates=gates,
                                        ask=jev.ask_async)
        finally:
            await gates.drain()

    with caplog.at_level(logging.ERROR), pytest.raises(StateError, match="`ticket.id`"):
        asyncio.run(scenario())
    assert jev.routed == [] and not jev.gates_waiting and not caplog.records, (
        f"a state whose ticket is {ticket!r} cannot be remembered: ask_with_memory_async() "
        "(memorybook/wrapper.py) must refuse it before asking, not fail in its gate afterwards "
        f"({len(jev.routed)} routing call(s) made; logged: {caplog.text})")


def test_a_gate_that_misses_the_recording_sends_nothing_and_is_logged_by_ids_only(
        monkeypatch, caplog):
    with LoopbackSystemOne({}) as server:
        real = fresh_jev(monkeypatch, TYPESAFE_ENDPOINT=server.base_url)  # replay: no key
        jev = SlowGate()

        async def made_up_route_real_gate(state, questions):
            if "remember" in questions:  # the real gate: its memory is not in the recording
                return await real.ask_async(state, questions)
            return await jev.ask_async(state, questions)

        async def scenario():
            memories, gates = InMemoryMemories(), PendingGates()
            state = ticket_state("C-1042", "T-901", "2026-10-02", SUBJECT, "On Linux.")
            reply = await ask_with_memory_async(state, ROUTE, memories, gates=gates,
                                                ask=made_up_route_real_gate)
            await gates.drain()
            return reply, memories

        with caplog.at_level(logging.ERROR, logger="memorybook"):
            reply, memories = asyncio.run(scenario())
        assert server.requests == [], "without a key, the async client sent a request"
    assert reply.answers["team"].choice == "selfhosted_linux"
    assert memories.recall("C-1042") == []
    records = [r for r in caplog.records if r.name == "memorybook"]
    assert len(records) == 1 and "RecordingMissError" in records[0].getMessage(), caplog.text
    logged = records[0].getMessage()
    assert "T-901" in logged and "C-1042" in logged and SUBJECT not in logged, (
        "a failed gate is logged by its ids, never with the ticket's words: keep_if_worth_it() "
        "(memorybook/wrapper.py) must log a RecordingError's `logged`, which names the call "
        f"without its subject (describe_call(..., words=False)): {logged}")


@pytest.mark.parametrize("mode", ["record", "live"])
@pytest.mark.parametrize("failure", ["hang", "server_error", "unauthorized"])
def test_a_live_gate_that_times_out_or_fails_leaves_the_reply_intact(monkeypatch, caplog,
                                                                     tmp_path, failure, mode):
    # echo_headers: every error answer repeats the request's headers, the key's among them
    with LoopbackSystemOne({}, failure=failure, echo_headers=True) as server:
        real = fresh_jev(
            monkeypatch, tmp_path / "new.json" if mode == "record" else None, mode=mode,
            TYPESAFE_API_KEY=CANARY_KEY, TYPESAFE_ENDPOINT=server.base_url,
            MEMORYBOOK_LIVE_IN_CI="1", MEMORYBOOK_TIMEOUT_SECONDS="1")
        jev = SlowGate()

        async def made_up_route_live_gate(state, questions):
            if "remember" in questions:
                return await real.ask_async(state, questions)
            return await jev.ask_async(state, questions)

        async def scenario():
            memories, gates = InMemoryMemories(), PendingGates()
            started = time.perf_counter()
            reply = await ask_with_memory_async(
                my_ticket("C-1042", "T-901"), ROUTE, memories, gates=gates,
                ask=made_up_route_live_gate)
            replied = time.perf_counter() - started
            await gates.drain()
            return reply, replied

        with caplog.at_level(logging.ERROR, logger="memorybook"):
            reply, replied = asyncio.run(scenario())
    assert reply.answers["team"].choice == "selfhosted_linux" and replied < 0.5, (
        f"the reply took {replied:.2f} s or changed: ask_with_memory_async() (memorybook/"
        "wrapper.py) must return before its gate")
    records = [r for r in caplog.records if r.name == "memorybook"]
    assert len(records) == 1 and "T-901" in records[0].getMessage(), caplog.text
    assert CANARY_KEY not in caplog.text, "keep_if_worth_it() must log the failure redacted"
    assert list(tmp_path.iterdir()) == [], (
        f"{mode} mode wrote {sorted(p.name for p in tmp_path.iterdir())} for a failed call")
    assert RECORDING_PATH.read_bytes() == COMMITTED_RECORDING, "the committed recording changed"


@pytest.mark.parametrize("recording", ["the collection's", "the app's own"])
def test_the_service_answers_422_for_a_bad_body_and_503_for_a_miss_sending_nothing(
        monkeypatch, tmp_path, recording):
    own = tmp_path / "app_recording.json"
    own.write_text("{}", encoding="utf-8")  # an app's own, which lacks the call (not there: the
    # service would not start, tests/test_service_http.py)
    asked_for = {} if recording == "the collection's" else {"MEMORYBOOK_RECORDING": str(own)}
    with LoopbackSystemOne({}) as server:
        fresh_jev(monkeypatch, TYPESAFE_ENDPOINT=server.base_url, **asked_for)  # no key: replay
        app = create_app(f"sqlite:///{tmp_path / 'store.sqlite3'}")  # its Jev() made at startup

        async def scenario():
            async with in_process(app) as http:
                return [await http.post("/tickets", content=body, headers=SENT_AS_JSON)
                        for body in (
                    b"{not json", b"\xff\xfe", json.dumps({"ticket": {"id": "T-1"}}),
                    json.dumps(["C-1042"]), json.dumps(my_ticket("C-1042", "T-999")))]

        answers = asyncio.run(scenario())
        assert server.requests == [], "the service sent a request without a key"
    for answer in answers[:4]:
        assert answer.status_code == 422, answer.text
        detail = answer.json()["detail"]
        assert isinstance(detail, str) and "\n" not in detail and detail, detail
    assert "not JSON" in answers[0].json()["detail"]
    assert "got no `customer`" in answers[2].json()["detail"]
    missed = answers[4]
    assert missed.status_code == 503, missed.text
    body = missed.json()
    assert "T-999" in body["detail"] and "Nothing was sent" in body["detail"], body
    how = body["how_to_answer"]
    assert body["likely_causes"] and "run the service live" in how and "TYPESAFE_API_KEY" in how, (
        "a service never records (a start in record mode is refused), so its miss says how to "
        f"run it live (how_to_serve_live() in memorybook/replay.py, routing_failed() in "
        f"memorybook/service/failures.py): {body}")
    assert "make record" not in how and "MEMORYBOOK_RECORD_MODE=record" not in how, how
    assert RECORDING_PATH.read_bytes() == COMMITTED_RECORDING, "the committed recording changed"


@contextlib.contextmanager
def fresh_store_url(backend: str, tmp_path, monkeypatch):
    """A new, empty store's URL: a SQLite file, or a schema on the test PostgreSQL server."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.sqlite3'}"
        return
    from tests.helpers import new_key
    from tests.store.conftest import PostgresBackend

    monkeypatch.setenv("MEMORYBOOK_STORE_KEY", new_key())
    with PostgresBackend.fresh(tmp_path) as fresh:
        yield fresh.url


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_service_returns_the_routing_response_before_the_gate_and_memories_after_it(
        monkeypatch, tmp_path, backend):
    with fresh_store_url(backend, tmp_path, monkeypatch) as url:
        service_answers_before_the_gate(monkeypatch, url)


def service_answers_before_the_gate(monkeypatch, url: str) -> None:
    jev = SlowGate()
    app = create_app(url, ask=jev.ask_async)

    async def scenario():
        async with in_process(app) as http:
            try:
                routed = await within(2, http.post("/tickets", json=my_ticket("C-1042", "T-901")),
                                      "POST /tickets with its gate held (it must not wait for it)")
                await jev.gate_started("POST /tickets")
                listing = asyncio.create_task(http.get("/customers/C-1042/memories"))
                await asyncio.sleep(0.2)
                assert not listing.done(), "GET memories answered before the pending gate ended"
            finally:
                jev.release.set()  # else a failure above leaves the shutdown's drain waiting
            listed = await asyncio.wait_for(listing, 2)
            erased = await http.delete("/customers/C-1042/memories")
            after = await http.get("/customers/C-1042/memories")
            return routed, listed, erased, after

    routed, listed, erased, after = asyncio.run(scenario())
    assert routed.status_code == 200 and routed.json()["answers"]["team"]["choice"] == (
        "selfhosted_linux")
    assert routed.json()["model"] == "made-up"
    assert listed.json()["customer_id"] == "C-1042"
    assert [m["request"]["ticket"]["id"] for m in listed.json()["memories"]] == ["T-901"]
    assert erased.json() == {"erased": 1}
    assert after.json()["memories"] == []


def test_the_apps_shutdown_saves_the_pending_gates(monkeypatch, tmp_path):
    from memorybook.store import open_store

    jev = SlowGate()
    url = f"sqlite:///{tmp_path / 'store.sqlite3'}"
    app = create_app(url, ask=jev.ask_async)

    async def scenario():
        async with in_process(app) as http:
            await http.post("/tickets", json=my_ticket("C-1042", "T-901"))
            asyncio.get_running_loop().call_later(0.3, jev.release.set)
        # the block's end is the app's shutdown: it waited for the gate

    asyncio.run(scenario())
    with open_store(url) as store:
        assert [m["request"]["ticket"]["id"] for m in store.recall("C-1042")] == ["T-901"], (
            "create_app()'s lifespan must drain the pending gates before closing the store")


# -- the service as a process: uvicorn, and `make serve` ------------------------------------


def test_sigterm_with_gates_pending_saves_them(tmp_path):
    from memorybook.store import open_store

    store_url = f"sqlite:///{tmp_path / 'store.sqlite3'}"
    port = free_port()
    with LoopbackSystemOne(RECORDING_PATH, latency=1.0) as server:
        # a key and no recording asked for: live mode, as `make serve` runs in production
        env = live_env(server.base_url, None, CANARY_KEY, MEMORYBOOK_STORE_URL=store_url)
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--factory", "memorybook.service:create_app",
             "--host", "127.0.0.1", "--port", str(port)],
            cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            seconds_until_it_answers(port, process, 60)
            routed = loopback_http().post(f"http://127.0.0.1:{port}/tickets", json=EARLIER[0],
                                          timeout=30)
            assert routed.status_code == 200, routed.text
            process.send_signal(signal.SIGTERM)
            statuses = [r["status"] for r in server.requests]  # the gate's: not answered yet
            gate_pending = statuses[0] == 200 and statuses[1:] in ([], [None])
            _, stderr = process.communicate(timeout=60)
        finally:
            stop_for_good(process)
    assert gate_pending, f"the gate was not pending at SIGTERM: {server.requests}"
    # uvicorn shuts down gracefully, then ends by the signal it caught, as its default would
    assert process.returncode in (0, -signal.SIGTERM), stderr
    assert "Application shutdown complete" in stderr, stderr
    assert CANARY_KEY not in stderr
    with open_store(store_url) as store:
        saved = [m["request"]["ticket"]["id"] for m in store.recall("C-1042")]
    assert saved == ["T-101"], (
        "uvicorn's SIGTERM must let create_app()'s lifespan drain the pending gate and save it")
    assert RECORDING_PATH.read_bytes() == COMMITTED_RECORDING, (
        "the service in live mode wrote to the committed recording")


def test_make_serve_answers_within_5_s_and_stops_on_ctrl_c_leaving_nothing_running(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("TYPESAFE_API_KEY", "MAKEFLAGS")}
    env.update(PORT=str(port), MEMORYBOOK_STORE_URL=f"sqlite:///{tmp_path / 's.sqlite3'}")
    process = subprocess.Popen(["make", "--no-print-directory", "serve"], cwd=REPO_ROOT,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)  # its own group, as a shell's
    try:
        seconds = seconds_until_it_answers(port, process, 60)
        group = [process.pid] + [p.pid for p in psutil.Process(process.pid).children(True)]
        cpu = sum(sum(psutil.Process(pid).cpu_times()[:2]) for pid in group)
        print(f"make serve answered after {seconds:.2f} s, using {cpu:.2f} s of CPU")
        # On a machine busy with other work (a parallel test run) the wall time stretches;
        # the CPU its processes used to get there is what the start-up itself costs.
        assert min(seconds, cpu) <= 5, (
            f"make serve answered {seconds:.1f} s after starting, its processes using {cpu:.1f} "
            "s of CPU: it must answer within 5 s (uvicorn importing memorybook.service)")
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C in a terminal: the whole group
        _, said = process.communicate(timeout=30)
    finally:
        stop_for_good(process)
    assert said.count("Created a new encryption key") == 1 and "Keep it safe" in said, (
        "make serve on a new SQLite store must say once where its new key file is and to back "
        f"it up (memorybook/service_settings.py's check before uvicorn): {said}")
    left = [pid for pid in group if psutil.pid_exists(pid)
            and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert left == [], f"still running after Ctrl-C of make serve: {left}"
    with contextlib.suppress(httpx2.TransportError):
        loopback_http().get(f"http://127.0.0.1:{port}/customers/C-0/memories", timeout=1)
        pytest.fail("something still answers on the port after Ctrl-C")


# -- two service processes on one PostgreSQL store ------------------------------------------

ONE_CALL_IN_A_PROCESS = """
import asyncio, sys
from memorybook import MEMORY_KEY, MadeUpJev, PendingGates, ask_with_memory_async, open_store
from memorybook.example import ROUTE, ticket_state
from memorybook.store.turns import CustomerTurns

url, ticket, across = sys.argv[1], sys.argv[2], sys.argv[3]
# The application_name of another process's sessions: this process's gate stays pending until one
# of them waits for a lock (the customer's turn), and says so; none: the gate does not wait.
other = sys.argv[4] if len(sys.argv) > 4 else None
seen = []


def until_the_other_waits():
    import time

    import psycopg

    deadline = time.monotonic() + 30
    with psycopg.connect(url, autocommit=True) as server:
        while time.monotonic() < deadline:
            if server.execute("SELECT 1 FROM pg_stat_activity WHERE application_name = %s"
                              " AND wait_event_type = 'Lock'", (other,)).fetchone():
                print("the gate was pending while the other process waited", flush=True)
                return
            time.sleep(0.02)
    print("the other process never waited for a lock", flush=True)


def answers(state, questions):  # made up: every ticket kept, every route "general"
    if "remember" in questions:
        return {"remember": 0.9}
    seen.append([m["request"]["ticket"]["id"] for m in state.get(MEMORY_KEY, [])])
    return {"team": "general"}


class SlowGate(MadeUpJev):
    async def ask_async(self, state, questions):
        if "remember" in questions and other is not None:
            await asyncio.to_thread(until_the_other_waits)
        return self.ask(state, questions)


async def main():
    store = open_store(url)
    gates = PendingGates(CustomerTurns(url) if across == "turns" else None)
    state = ticket_state("C-1042", ticket, "2026-10-02", "Question", "We run Linux.")
    await ask_with_memory_async(state, ROUTE, store, gates=gates,
                                ask=SlowGate(answers).ask_async)
    print("routed with", ",".join(seen[0]) or "none", flush=True)
    await gates.drain()
    if gates.turns is not None:
        gates.turns.close()
    store.close()


asyncio.run(main())
"""


def test_two_processes_on_one_postgresql_store_keep_a_customers_order(tmp_path):
    from tests.helpers import new_key, start_python
    from tests.store.conftest import PostgresBackend

    with PostgresBackend.fresh(tmp_path) as backend:
        key = new_key()
        second_url = f"{backend.url}&application_name=memorybook-second-process"
        first = start_python(ONE_CALL_IN_A_PROCESS, backend.url, "T-901", "turns",
                             "memorybook-second-process", MEMORYBOOK_STORE_KEY=key)
        second = None
        try:
            assert first.stdout.readline() == "routed with none\n", first.communicate()
            # The first process's gate stays pending until the second waits for the customer.
            second = start_python(ONE_CALL_IN_A_PROCESS, second_url, "T-902", "turns",
                                  MEMORYBOOK_STORE_KEY=key)
            routed, errors = second.communicate(timeout=60)
            gated, _ = first.communicate(timeout=60)
        finally:
            for process in (first, second):
                if process is not None:
                    stop_for_good(process)
        assert second.returncode == 0 and first.returncode == 0, errors
        assert routed == "routed with T-901\n", (
            "the second process recalled C-1042's memories before the first one's pending gate "
            "had saved: PendingGates(CustomerTurns(url)) must hold the customer's turn across "
            f"processes (memorybook/store/turns.py); it routed {routed!r}")
        assert gated == "the gate was pending while the other process waited\n", (
            f"the second process never waited for the customer's turn: {gated!r}")


def test_notebook_9_without_a_key_sends_nothing(monkeypatch, tmp_path):
    import nbclient
    import nbformat

    from tests.helpers import copy_of_the_collection

    # A copy, whose .memorybook/ store files are its own: nbval runs notebook 9 meanwhile.
    copy = copy_of_the_collection(tmp_path)
    path = copy / "notebooks" / "09_memory_in_a_web_service.ipynb"
    with LoopbackSystemOne({}) as server:
        for name in ("TYPESAFE_API_KEY", "MEMORYBOOK_USAGE_LOG", "MEMORYBOOK_RECORDING"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("PYTHONPATH", str(copy))  # the kernel imports the copy
        monkeypatch.setenv("TYPESAFE_ENDPOINT", server.base_url)  # and inherits this
        notebook = nbformat.read(path, as_version=4)
        nbclient.NotebookClient(notebook, timeout=120,
                                resources={"metadata": {"path": str(path.parent)}}).execute()
        assert server.requests == [], (
            f"notebook 9 sent {len(server.requests)} requests without a key")
    printed = "".join(output.get("text", "") for cell in notebook.cells
                      if cell.cell_type == "code" for output in cell.outputs)
    assert printed.count("6/6 with memory") == 2 and "422 " in printed, printed


class GateHeld(LoopbackSystemOne):
    """The recording on loopback, answering at once but for gate requests, each held until
    `release` is set."""

    def __init__(self, recording) -> None:
        super().__init__(recording)
        self.release = threading.Event()

    def _answer(self, number, method, path, headers, body, problem):
        if isinstance(body, dict) and "remember" in body.get("questions", {}):
            self.release.wait(60)
        return super()._answer(number, method, path, headers, body, problem)


def sessions_waiting_for_a_lock(url: str, name: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as server:
        [(waiting,)] = server.execute(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = %s"
            " AND wait_event_type = 'Lock'", (name,)).fetchall()
    return waiting


def test_get_and_delete_on_one_process_wait_for_the_gate_pending_on_another(tmp_path,
                                                                            monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    from tests.helpers import new_key, wait_until
    from tests.store.conftest import PostgresBackend

    memories = "/customers/C-1042/memories"
    key = {"MEMORYBOOK_STORE_KEY": new_key()}
    with (PostgresBackend.fresh(tmp_path) as backend,
          GateHeld(RECORDING_PATH) as server,  # each gate's answer held until released
          services(1, backend.url, server.base_url, tmp_path, **key) as [(_, a)],
          services(1, f"{backend.url}&application_name=memorybook-b", server.base_url,
                   tmp_path, **key) as [(_, b)]):
        try:
            routed = loopback_http().post(f"{a}/tickets", json=EARLIER[0], timeout=30)
            gate_pending = [r["status"] for r in server.requests] in ([200], [200, None])
            with ThreadPoolExecutor(2) as pool:
                listing = pool.submit(loopback_http().get, b + memories, timeout=30)
                # Until B's GET waits for the customer's turn (or answered without: see below)
                wait_until(lambda: listing.done() or sessions_waiting_for_a_lock(
                    backend.url, "memorybook-b"), 30, "B's GET to wait for the customer's turn")
                erasing = pool.submit(loopback_http().delete, b + memories, timeout=30)
                time.sleep(0.3)  # the GET first, then the DELETE, both while A's gate is pending
                server.release.set()
                listed, erased = listing.result(), erasing.result()
        finally:
            server.release.set()
        after = [loopback_http().get(url + memories, timeout=30).json()["memories"]
                 for url in (a, b)]
    assert routed.status_code == 200, routed.text
    assert gate_pending, f"A's gate was not pending when B was asked: {server.requests}"
    assert [m["request"]["ticket"]["id"] for m in listed.json()["memories"]] == ["T-101"], (
        "GET on B answered before the gate pending on A had saved: it must take the customer's "
        f"turn across processes (PendingGates.turn(), memorybook/gates.py): {listed.text}")
    assert erased.json() == {"erased": 1}, erased.text
    assert after == [[], []], (
        "a memory was saved after DELETE answered: the erasure must wait for the customer's "
        f"turn, as POST does (memorybook/serving.py): {after}")


@pytest.mark.parametrize("backend_name", ["sqlite", "postgresql"])
def test_gates_pending_when_the_service_is_killed_run_once_after_a_restart(
        tmp_path, monkeypatch, backend_name):
    from memorybook.store import open_store
    from tests.helpers import wait_until
    from tests.store.conftest import fresh_location

    tickets = twenty_customers_tickets()
    hanging, answering = MadeUpAnswers(hang=True), MadeUpAnswers(hang=False)
    with (fresh_location(backend_name, tmp_path, monkeypatch) as backend,
          LoopbackSystemOne({}, answer_with=hanging) as hangs,
          LoopbackSystemOne({}, answer_with=answering) as answers):
        # Room for all 20 gates in flight at once (the cap keeps one slot for replies).
        env = {"MEMORYBOOK_STORE_KEY": backend.key, "MEMORYBOOK_MAX_IN_FLIGHT": "32"}
        try:
            with services(1, backend.url, hangs.base_url, tmp_path, **env) as [(first, url)]:
                for ticket in tickets:
                    routed = loopback_http().post(f"{url}/tickets", json=ticket, timeout=30)
                    assert routed.status_code == 200, routed.text
                wait_until(lambda: hanging.gates == 20, 30, "20 gates pending")
                first.send_signal(signal.SIGKILL)
                first.wait(30)
        finally:
            hanging.release.set()  # the killed service's requests are left to end
        records = pending_records(backend)
        assert len(records) == 20, (
            f"{len(records)} gates of 20 pending at SIGKILL were recorded: "
            "ask_with_memory_async() must record each in the store before the reply "
            "(record_gate(), memorybook/wrapper.py)")
        raw = backend.raw_bytes()
        assert all(record[20:80] in raw for record in records)  # control: raw_bytes() reads them
        assert b"LIC-" not in raw, (
            "a pending gate's ticket is in the store's files in clear: record_gate() must seal it")
        # Replicas restart at once, against an API that answers: each gate runs on one. (Two on
        # PostgreSQL; a SQLite file takes one service process, which refuses a second.)
        replicas = 2 if backend_name == "postgresql" else 1
        with (services(replicas, backend.url, answers.base_url, tmp_path, **env),
              open_store(backend.url, key=backend.key) as store):
            wait_until(lambda: sum(len(store.recall(t["customer"]["id"])) for t in tickets)
                       >= 20, 60, "the 20 memories to be saved after the restart")
        # the replicas have stopped, draining: a gate run twice would have been asked by now
        assert answering.gates == 20, (
            f"the 20 recorded gates were asked {answering.gates} times after the restart: a "
            "gate claimed by a live process must never run twice (claim_abandoned_gates())")
        with open_store(backend.url, key=backend.key) as store:
            for ticket in tickets:
                customer = ticket["customer"]["id"]
                assert ticket_ids_of(store.recall(customer)) == [ticket["ticket"]["id"]], customer
                assert [event.event for event in store.history(customer)] == ["saved"], customer
            assert pending_records(backend) == [], "a gate that has run must leave no record"
            backend.wait_for_older_transactions()
            store.sweep()
        raw = backend.raw_bytes()
        assert not any(record[20:80] in raw for record in records), (
            "a recorded gate's bytes are still in the database files after it ran and sweep(): "
            "settle_gate() must delete its row as erasure does")


def ticket_ids_of(memories: list[dict]) -> list[str]:
    return [memory["request"]["ticket"]["id"] for memory in memories]


def test_a_gate_left_by_a_killed_replica_runs_on_another_before_the_customers_next_call(
        tmp_path, monkeypatch):
    from memorybook.store import open_store
    from tests.helpers import wait_until
    from tests.store.conftest import fresh_location

    first, second = twenty_customers_tickets()[:2]
    second["customer"] = first["customer"]  # the same customer's next ticket
    hanging, answering = MadeUpAnswers(hang=True), MadeUpAnswers(hang=False)
    with (fresh_location("postgresql", tmp_path, monkeypatch) as backend,
          LoopbackSystemOne({}, answer_with=hanging) as hangs,
          LoopbackSystemOne({}, answer_with=answering) as answers,
          open_store(backend.url, key=backend.key) as store):
        env = {"MEMORYBOOK_STORE_KEY": backend.key}
        with services(1, backend.url, answers.base_url, tmp_path, **env) as [(_, up)]:
            try:
                with services(1, backend.url, hangs.base_url, tmp_path, **env) as [(dies, url)]:
                    assert loopback_http().post(f"{url}/tickets", json=first, timeout=30).is_success
                    wait_until(lambda: hanging.gates == 1, 30, "the gate to be pending")
                    dies.send_signal(signal.SIGKILL)
                    dies.wait(30)
            finally:
                hanging.release.set()
            wait_until(lambda: store.customers_with_abandoned_gates() == ["C-3001"], 10,
                       "the killed replica's gate to be found abandoned")
            routed = loopback_http().post(f"{up}/tickets", json=second, timeout=30)
            listed = loopback_http().get(f"{up}/customers/C-3001/memories", timeout=30)
        states = [request["body"]["state"] for request in answers.requests]
    assert routed.status_code == 200, routed.text
    assert memory_ids(states[1]) == ["T-1"] and states[1]["ticket"]["id"] == "T-2", (
        "the replica that is up routed the customer's next ticket without the memory of the gate "
        "the killed one left: ask_with_memory_async() must run it first (recover_gates())")
    assert ticket_ids_of(listed.json()["memories"]) == ["T-1", "T-2"], listed.text


def test_a_failed_gate_leaves_no_record_and_one_whose_save_failed_runs_again_later(
        tmp_path, caplog):
    from memorybook.store import MemoryStoreError, open_store
    from memorybook.wrapper import recover_gates

    url = f"sqlite:///{tmp_path / 'store.sqlite3'}"
    jev = SlowGate()
    jev.release.set()

    async def gate_fails(state, questions):
        if "remember" in questions:
            raise RuntimeError("the API is down")
        return await jev.ask_async(state, questions)

    def save_fails_once(store):
        def settle_gate(gate, keep):
            del store.settle_gate  # the database is back for the next call
            raise MemoryStoreError("the database is down")
        return settle_gate

    async def scenario():
        with open_store(url) as store:
            gates = PendingGates()
            await ask_with_memory_async(my_ticket("C-1042", "T-901"), ROUTE, store,
                                        gates=gates, ask=gate_fails)
            await gates.drain()
            store.settle_gate = save_fails_once(store)  # the gate decides, then its save fails
            await ask_with_memory_async(my_ticket("C-1042", "T-902"), ROUTE, store,
                                        gates=gates, ask=jev.ask_async)
            await gates.drain()
        with open_store(url) as restarted:  # the next process on the store
            ran = await recover_gates("C-1042", restarted, ask=jev.ask_async)
            return ran, restarted.recall("C-1042")

    with caplog.at_level(logging.ERROR, logger="memorybook"):
        ran, saved = asyncio.run(scenario())
    asked, saved_later = (r.getMessage() for r in caplog.records if r.name == "memorybook")
    assert "'T-901', failed, nothing saved: RuntimeError" in asked and (
        "'T-902', failed, nothing saved yet: its record stays in the store, and it runs again "
        "once this process has ended") in saved_later, (
        "the log must say which failed gate is gone and which stays recorded, to run again "
        f"(keep_if_worth_it(), memorybook/wrapper.py):\n{caplog.text}")
    assert ran == 1 and memory_ids({MEMORY_KEY: saved}) == ["T-902"], (
        f"after a restart, {ran} gate(s) ran and {memory_ids({MEMORY_KEY: saved})} were saved: "
        "a gate whose save failed must stay recorded, one whose ask failed must not "
        "(keep_if_worth_it(), memorybook/wrapper.py)")


def test_gates_abandoned_while_a_service_runs_are_run_at_its_next_look(tmp_path):
    from memorybook.store import open_store
    from memorybook.wrapper import recover_abandoned_gates

    url = f"sqlite:///{tmp_path / 'store.sqlite3'}"
    jev = SlowGate()
    jev.release.set()

    async def scenario():
        with open_store(url) as stops, open_store(url) as up:
            looking = asyncio.create_task(recover_abandoned_gates(
                up, PendingGates(), ask=jev.ask_async, every=0.05))
            try:
                await asyncio.sleep(0.2)  # it has looked, and found nothing
                stops.record_gate("C-1042", {"request": my_ticket("C-1042", "T-901"),
                                             "jev_answered": {}})
                stops.close()  # as a process that stops with its gate pending
                for _ in range(100):
                    if up.recall("C-1042"):
                        break
                    await asyncio.sleep(0.05)
                return up.recall("C-1042")
            finally:
                looking.cancel()

    saved = asyncio.run(scenario())
    assert memory_ids({MEMORY_KEY: saved}) == ["T-901"], (
        "a gate abandoned while the service ran was not run within 5 s of looking every 0.05 s: "
        "recover_abandoned_gates(every=...) must look again (memorybook/wrapper.py)")
