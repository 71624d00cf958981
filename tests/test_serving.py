"""The object an app holds (memorybook/serving.py): AsyncMemory replies before its gate and reads
after it, takes any `ask`, runs the gates a stopped process left as it starts, waits for its own
at stop, closes only what it opened; Memory, its synchronous form, does the same from a script.
Jev's answers are a stand-in's, made up here."""

from __future__ import annotations

import asyncio
import threading

import pytest

from memorybook import AsyncMemory, InMemoryMemories, MadeUpJev, Memory, MemoryNotFoundError
from memorybook.example import ROUTE
from memorybook.memory import ticket_id_of
from memorybook.store import open_store
from tests.helpers import make_memory, wait_until


def answers(state: dict, questions: dict) -> dict:
    """Every ticket to billing; the gate keeps the tickets that say "Linux"."""
    if "remember" in questions:
        return {"remember": 0.9 if "Linux" in str(state["request"]) else 0.1}
    return {"team": "billing"}


def ticket(ticket_id: str, text: str = "We self-host on Linux.", customer: str = "C-1") -> dict:
    return {"customer": {"id": customer}, "ticket": {
        "id": ticket_id, "messages": [{"from": "customer", "text": text}]}}


class HeldGates(MadeUpJev):
    """`answers`, with each gate held until `release` is set."""

    def __init__(self) -> None:
        super().__init__(answers)
        self.release = asyncio.Event()
        self.gates_held = 0

    async def ask_async(self, state: dict, questions: dict):
        if "remember" in questions:
            self.gates_held += 1
            await self.release.wait()
        return self.ask(state, questions)


def test_a_reply_goes_before_its_gate_and_a_read_waits_for_it():
    jev = HeldGates()

    async def scenario():
        async with AsyncMemory(InMemoryMemories(), ask=jev) as memory:
            try:
                response = await memory.ask(ticket("T-1"), ROUTE)
                assert response.answers["team"].choice == "billing"
                for _ in range(100):  # the gate's task takes its first step after the reply
                    if jev.gates_held:
                        break
                    await asyncio.sleep(0.01)
                assert jev.gates_held == 1, "AsyncMemory.ask() must reply, then run its gate"
                listed = asyncio.create_task(memory.memories("C-1"))
                await asyncio.sleep(0.05)
                assert not listed.done(), (
                    "memories() answered while the customer's gate was pending: AsyncMemory "
                    "must read in the customer's turn, after their gates (_in_turn())")
            finally:
                jev.release.set()  # or stop() would wait for the gate for ever
            return [ticket_id_of(saved) for saved in await listed]

    assert asyncio.run(scenario()) == ["T-1"]


def test_its_calls_reach_the_store_in_the_customers_turn(tmp_path):
    async def scenario():
        async with AsyncMemory(f"sqlite:///{tmp_path / 'store.sqlite3'}",
                               ask=MadeUpJev(answers)) as memory:
            for ticket_id in ("T-1", "T-2", "T-3"):
                await memory.ask(ticket(ticket_id), ROUTE)
            await memory.ask(ticket("T-4", "Where is my invoice?"), ROUTE)
            kept = [ticket_id_of(saved) for saved in await memory.memories("C-1")]
            forgotten = [ticket_id_of(saved) for saved in await memory.forget("C-1", "T-2")]
            with pytest.raises(MemoryNotFoundError):
                await memory.forget("C-1", "T-2")
            erased = await memory.forget_customer("C-1")
            events = [(event.event, event.ticket_id) for event in await memory.history("C-1")]
            return kept, forgotten, len(erased), events

    kept, forgotten, erased, events = asyncio.run(scenario())
    assert kept == ["T-1", "T-2", "T-3"], f"the gate kept {kept}, not the three Linux tickets"
    assert forgotten == ["T-2"] and erased == 2
    assert events == [], f"forget_customer() must erase the history too: {events}"


@pytest.mark.parametrize("kind", ["a Jev-like object", "an async function", "a function"])
def test_it_asks_with_any_kind_of_ask(kind):
    jev = MadeUpJev(answers)
    ask = {"a Jev-like object": jev, "an async function": jev.ask_async,
           "a function": jev.ask}[kind]

    async def scenario():
        async with AsyncMemory(InMemoryMemories(), ask=ask) as memory:
            await memory.ask(ticket("T-1"), ROUTE)
            return await memory.memories("C-1")

    assert [ticket_id_of(saved) for saved in asyncio.run(scenario())] == ["T-1"], (
        f"AsyncMemory(ask=...) given {kind} must ask with it (asking() in memorybook/serving.py)")
    assert len(jev.calls) == 2, f"{kind}: a reply and a gate, not {len(jev.calls)} calls"


def test_a_call_before_start_or_after_stop_says_how_to_start_it():
    memory = AsyncMemory(InMemoryMemories(), ask=MadeUpJev(answers))

    async def scenario():
        with pytest.raises(RuntimeError, match="lifespan=memory.lifespan"):
            await memory.memories("C-1")
        async with memory:
            pass
        with pytest.raises(RuntimeError, match="not running"):
            await memory.ask(ticket("T-1"), ROUTE)

    asyncio.run(scenario())


def test_it_runs_the_gates_a_stopped_process_left_as_it_starts(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.sqlite3'}"
    with open_store(url) as left:  # a process's store that recorded a gate, then went
        left.record_gate("C-7", make_memory("C-7", "T-70", "We self-host on Linux."))
    memory = AsyncMemory(url, ask=MadeUpJev(answers))

    async def scenario():
        async with memory:
            with open_store(url) as store:
                await asyncio.to_thread(wait_until, lambda: store.recall("C-7"), 10,
                                        "the gate left in the store to run as AsyncMemory starts")
                return [ticket_id_of(saved) for saved in store.recall("C-7")]

    assert asyncio.run(scenario()) == ["T-70"]


def test_a_store_it_is_given_stays_open_and_one_it_opened_is_closed(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.sqlite3'}"

    async def run(memory: AsyncMemory):
        async with memory:
            await memory.ask(ticket("T-1"), ROUTE)
        return memory.store

    with open_store(url) as given:
        asyncio.run(run(AsyncMemory(given, ask=MadeUpJev(answers))))
        assert [ticket_id_of(saved) for saved in given.recall("C-1")] == ["T-1"], (
            "a store given to AsyncMemory is the app's: stop() must leave it open")
    opened = asyncio.run(run(AsyncMemory(url, ask=MadeUpJev(answers))))
    with pytest.raises(Exception, match="is closed"):
        opened.recall("C-1")


def test_memory_does_it_all_from_a_script_and_leaves_no_thread(tmp_path):
    before = set(threading.enumerate())
    with Memory(f"sqlite:///{tmp_path / 'store.sqlite3'}", ask=MadeUpJev(answers)) as memory:
        routed = memory.ask(ticket("T-1"), ROUTE)
        memory.ask(ticket("T-2", "Where is my invoice?"), ROUTE)
        kept = [ticket_id_of(saved) for saved in memory.memories("C-1")]
        events = [event.event for event in memory.history("C-1")]
    assert routed.answers["team"].choice == "billing"
    assert kept == ["T-1"] and events == ["saved"], (kept, events)
    left = [thread.name for thread in set(threading.enumerate()) - before if thread.is_alive()]
    assert left == [], f"Memory left threads running once closed: {left}"
    with pytest.raises(RuntimeError, match="not open"):
        memory.memories("C-1")


def turns_taken(monkeypatch) -> list[str]:
    """The customers whose turn a PendingGates takes from now on (reads and writes alike)."""
    from memorybook.gates import PendingGates

    taken, take = [], PendingGates.take_turn

    def noted(self, customer):
        taken.append(customer)
        return take(self, customer)

    monkeypatch.setattr(PendingGates, "take_turn", noted)
    return taken


@pytest.mark.parametrize("backend_name", ["sqlite", "postgresql"])
def test_a_read_with_no_gate_pending_anywhere_takes_no_turn(tmp_path, monkeypatch,
                                                            backend_name):
    from tests.store.conftest import fresh_location

    with fresh_location(backend_name, tmp_path, monkeypatch) as backend:
        memory = AsyncMemory(backend.url, ask=MadeUpJev(answers),
                             store_options={"key": backend.key})
        taken = turns_taken(monkeypatch)

        async def scenario():
            async with memory:
                await memory.ask(ticket("T-1"), ROUTE)
                await memory.gates.drain()
                del taken[:]
                return (await memory.memories("C-1"), await memory.history("C-1"),
                        await memory.memories("C-1", "T-1"))

        listed, events, of_ticket = asyncio.run(scenario())
    assert [ticket_id_of(saved) for saved in listed + of_ticket] == ["T-1", "T-1"]
    assert [event.event for event in events] == ["saved"]
    assert taken == [], (
        f"reads of a customer with no gate pending took the turns of {taken}: "
        "AsyncMemory._read() (memorybook/serving.py) must read at once when none is pending "
        "here or recorded in the store")


def test_a_read_waits_for_a_gate_another_replica_has_pending(tmp_path, monkeypatch):
    from tests.store.conftest import fresh_location

    with fresh_location("postgresql", tmp_path, monkeypatch) as backend:
        held = HeldGates()
        replicas = [AsyncMemory(backend.url, ask=ask, store_options={"key": backend.key})
                    for ask in (held, MadeUpJev(answers))]

        async def scenario():
            async with replicas[0] as posting, replicas[1] as reading:
                await posting.ask(ticket("T-1"), ROUTE)
                try:
                    listed = asyncio.create_task(reading.memories("C-1"))
                    await asyncio.sleep(0.5)
                    early = listed.done()
                finally:
                    held.release.set()
                return early, [ticket_id_of(saved) for saved in await listed]

        early, listed = asyncio.run(scenario())
    assert not early and listed == ["T-1"], (
        "a read on one replica answered while another had the customer's gate pending "
        f"(answered early: {early}, with {listed}): a gate recorded in the store must make the "
        "read wait for the customer's turn (read_if_settled(), memorybook/serving.py)")
