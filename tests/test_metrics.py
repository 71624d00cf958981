"""Metrics (memorybook/metrics.py, GET /metrics, memorybook/service/counting.py): each counter
matches a flow the test ran (tickets posted, a gate failed, one recovered, a sweep, store calls,
requests refused), none holds a customer id or a ticket's words, GET /metrics is behind the token,
the requests in flight to Jev show while they wait, two memories in one process count apart, and
an AsyncMemory without prometheus-client still serves. Jev's answers are a stand-in's."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime, timedelta

import prometheus_client
import pytest
from prometheus_client.parser import text_string_to_metric_families

from memorybook import AsyncMemory, InMemoryMemories, MadeUpJev
from memorybook.example import ROUTE
from memorybook.service import create_app
from memorybook.settings import Settings
from memorybook.store import open_store
from tests.helpers import in_process, talk

TOKEN = "metrics-canary-token-93be07f1"
AUTHORIZED = {"Authorization": f"Bearer {TOKEN}"}
WORDS = "Kestrel invoice 7731"  # ticket words no metric may hold


def ticket(customer: str, ticket_id: str) -> dict:
    return {"customer": {"id": customer}, "ticket": {"id": ticket_id, "text": WORDS}}


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """Each sample of Prometheus text: (name, its labels sorted) -> value."""
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 10, 2, 9, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def test_metrics_count_a_flow_they_ran_and_hold_no_ids_or_words(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.sqlite3'}"
    with open_store(url) as stopped:  # as a process that stopped with its gate pending
        stopped.record_gate("C-left-77", {"request": ticket("C-left-77", "T-left"),
                                          "jev_answered": {}})

    def answers(state: dict, questions: dict) -> dict:
        if "remember" not in questions:
            return {"team": "general"}
        if state["request"]["ticket"]["id"] == "T-fails":
            raise RuntimeError("the API is down")
        return {"remember": 0.1 if state["request"]["ticket"]["id"] == "T-not-kept" else 0.9}

    clock = Clock()
    app = create_app(url, ask=MadeUpJev(answers).ask_async, retention=timedelta(days=30),
                     store_options={"clock": clock},
                     settings=Settings(token=TOKEN, max_in_flight=3))

    async def requests(http):
        for customer, ticket_id in [("C-kept-41", "T-kept"), ("C-kept-41", "T-not-kept"),
                                    ("C-fails-52", "T-fails")]:
            posted = await http.post("/tickets", json=ticket(customer, ticket_id),
                                     headers=AUTHORIZED)
            assert posted.status_code == 200, posted.text
        for customer in ("C-kept-41", "C-fails-52", "C-left-77"):  # after their gates
            assert (await http.get(f"/customers/{customer}/memories",
                                   headers=AUTHORIZED)).status_code == 200
        refused = [await http.get("/metrics"),  # no token
                   await http.get("/customers/C-hidden-63/nothing", headers=AUTHORIZED),
                   await http.get("/ready")]
        clock.now += timedelta(days=31)
        swept = await app.state.memory.sweep()
        return refused, swept, await http.get("/metrics", headers=AUTHORIZED)

    refused, swept, metrics = talk(app, requests)
    assert [answer.status_code for answer in refused] == [401, 404, 200], (
        f"GET /metrics without the token must be a 401, as every route but the probes "
        f"(memorybook/service_guard.py): {[(a.status_code, a.text[:100]) for a in refused]}")
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith(
        "text/plain; version=0.0.4"), (metrics.status_code, metrics.headers, metrics.text[:300])
    counted = samples(metrics.text)

    def value(name: str, **labels: str) -> float:
        return counted.get((name, tuple(sorted(labels.items()))), 0.0)

    expected = {
        # 3 replies, each answered; 4 gates asked (3 of the tickets', 1 left by a stopped process)
        ("memorybook_jev_calls_total", "kind=reply,mode=other,outcome=answered"): 3,
        ("memorybook_jev_calls_total", "kind=gate,mode=other,outcome=answered"): 3,
        ("memorybook_jev_calls_total", "kind=gate,mode=other,outcome=failed"): 1,
        ("memorybook_jev_call_seconds_count", "kind=reply"): 3,
        ("memorybook_reply_seconds_count", ""): 3,
        ("memorybook_gates_run_total", "outcome=kept"): 2,
        ("memorybook_gates_run_total", "outcome=not_kept"): 1,
        ("memorybook_gates_run_total", "outcome=failed"): 1,
        ("memorybook_gates_recovered_total", ""): 1,
        ("memorybook_gates_pending", ""): 0,
        ("memorybook_store_call_seconds_count", "operation=record_gate,outcome=ok"): 3,
        ("memorybook_store_call_seconds_count", "operation=sweep,outcome=ok"): 1,
        ("memorybook_store_call_seconds_count", "operation=check,outcome=ok"): 1,
        ("memorybook_memories_swept_total", ""): swept,
        ("memorybook_jev_in_flight", ""): 0,
        ("memorybook_jev_in_flight_limit", ""): 3,
        ("memorybook_jev_waiting", ""): 0,
        ("memorybook_http_requests_total", "method=POST,route=/tickets,status=200"): 3,
        ("memorybook_http_requests_total",
         "method=GET,route=/customers/{customer}/memories,status=200"): 3,
        ("memorybook_http_requests_total", "method=GET,route=/metrics,status=401"): 1,
        ("memorybook_http_requests_total", "method=GET,route=unmatched,status=404"): 1,
        ("memorybook_http_requests_total", "method=GET,route=/ready,status=200"): 1,
    }
    found = {key: value(key[0], **dict(pair.split("=", 1) for pair in key[1].split(",")
                                       if pair)) for key in expected}
    wrong = {key: (found[key], want) for key, want in expected.items() if found[key] != want}
    assert swept == 2 and not wrong, (
        f"GET /metrics differs from the flow run (found, expected): {wrong}; swept {swept} of 2 "
        "(memorybook/metrics.py, where each is counted: AsyncMemory in memorybook/serving.py, "
        "keep_if_worth_it() and recover_gates() in memorybook/wrapper.py, "
        "memorybook/service/counting.py)")
    leaked = [word for word in ("C-kept-41", "C-fails-52", "C-left-77", "C-hidden-63", "T-kept",
                                "T-fails", "T-left", "Kestrel", "7731") if word in metrics.text]
    assert not leaked, f"GET /metrics holds customer ids or ticket words: {leaked}"


def held_replies(release: asyncio.Event):
    async def ask(state: dict, questions: dict):
        if "remember" not in questions:
            await release.wait()
        return await MadeUpJev({"team": "general", "remember": 0.9}).ask_async(state, questions)

    return ask


def test_metrics_show_the_requests_in_flight_to_jev_and_those_waiting_for_a_slot(tmp_path):
    release = asyncio.Event()
    app = create_app(f"sqlite:///{tmp_path / 'store.sqlite3'}", ask=held_replies(release),
                     settings=Settings(max_in_flight=2))

    async def scenario():
        async with in_process(app) as http:
            posts = [asyncio.create_task(http.post("/tickets", json=ticket(f"C-{n}", "T-1")))
                     for n in range(3)]
            for _ in range(200):
                if app.state.memory.in_flight.waiting:
                    break
                await asyncio.sleep(0.01)
            during = samples((await http.get("/metrics")).text)
            release.set()
            await asyncio.gather(*posts)
            await app.state.memory.gates.drain()
            return during, samples((await http.get("/metrics")).text)

    during, after = asyncio.run(scenario())
    shown = [(sampled.get((name, ())), sampled.get(("memorybook_jev_in_flight_limit", ())),
              sampled.get(("memorybook_jev_waiting", ()))) for sampled, name in (
        (during, "memorybook_jev_in_flight"), (after, "memorybook_jev_in_flight"))]
    assert shown == [(2, 2, 1), (0, 2, 0)], (
        f"with 3 replies held under MEMORYBOOK_MAX_IN_FLIGHT=2, GET /metrics must show 2 in flight "
        f"of 2 and 1 waiting, then 0 (Metrics.watch() in memorybook/metrics.py); it showed "
        f"(in flight, limit, waiting) {shown}")


def test_two_memories_in_one_process_count_apart_and_not_in_the_global_registry():
    async def scenario():
        jev = MadeUpJev({"team": "general", "remember": 0.9})
        async with (AsyncMemory(InMemoryMemories(), ask=jev) as one,
                    AsyncMemory(InMemoryMemories(), ask=jev) as other):
            for n in range(2):
                await one.ask(ticket("C-1", f"T-{n}"), ROUTE)
            await other.ask(ticket("C-2", "T-9"), ROUTE)
            return [samples(memory.metrics.exposition()[0].decode()).get(
                ("memorybook_reply_seconds_count", ())) for memory in (one, other)]

    assert asyncio.run(scenario()) == [2, 1], (
        "each AsyncMemory must count its own replies in a registry of its own (Metrics in "
        "memorybook/metrics.py)")
    global_names = {family.name for family in prometheus_client.REGISTRY.collect()}
    assert not [name for name in global_names if name.startswith("memorybook")], global_names


def test_an_async_memory_serves_without_prometheus_client(monkeypatch):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # as an install without it

    async def scenario():
        async with AsyncMemory(InMemoryMemories(),
                               ask=MadeUpJev({"team": "general", "remember": 0.9})) as memory:
            reply = await memory.ask(ticket("C-1", "T-1"), ROUTE)
            return reply, memory, await memory.memories("C-1"), bool(await memory.ready())

    reply, memory, memories, ready = asyncio.run(scenario())
    assert reply.answers["team"].choice == "general" and len(memories) == 1 and ready, (
        "an AsyncMemory installed without the service extra must serve as ever, counting nothing "
        "(Metrics in memorybook/metrics.py)")
    with pytest.raises(ModuleNotFoundError, match=r"memorybook\[service\]"):
        memory.metrics.exposition()
