"""A call asked again once its gate kept it (a client's retry: the same state, the same questions)
is asked as it was the first time, with the memories saved before its own, and the customer keeps
one memory of it: in ask_with_memory(), its async twin and the service. Jev's answers are a
stand-in's, made up here, but in the service's test, which replays the collection's recording."""

from __future__ import annotations

import asyncio

import pytest
from typesafe_sdk import Noul, NoulCriteria

from memorybook import (
    MEMORY_KEY,
    InMemoryMemories,
    MadeUpJev,
    PendingGates,
    ask_with_memory,
    ask_with_memory_async,
)
from memorybook.example import EARLIER, ROUTE
from memorybook.memory import ticket_id_of
from memorybook.service import create_app
from tests.helpers import talk

URGENT = {"urgent": Noul(instructions="Does `ticket` need an answer today?",
                         criteria=NoulCriteria(true="Yes: today.", false="No."))}
WRAPPERS = ["ask_with_memory", "ask_with_memory_async"]


def state(ticket_id: str, *texts: str) -> dict:
    return {"customer": {"id": "C-1"}, "ticket": {
        "id": ticket_id, "messages": [{"from": "customer", "text": text} for text in texts]}}


def asked(which: str, calls: list[tuple[dict, dict]]) -> tuple[MadeUpJev, InMemoryMemories]:
    """Each (state, questions) asked in turn with memory, every memory kept by the gate."""
    jev, memories = MadeUpJev(lambda state, questions: (
        {"remember": 0.9} if "remember" in questions
        else {"team": "billing"} if "team" in questions else {"urgent": 0.2})), InMemoryMemories()

    async def in_turn():
        gates = PendingGates()
        for one_state, questions in calls:
            await ask_with_memory_async(one_state, questions, memories, gates=gates,
                                        ask=jev.ask_async)
        await gates.drain()

    if which == "ask_with_memory":
        for one_state, questions in calls:
            ask_with_memory(one_state, questions, memories, ask=jev.ask)
    else:
        asyncio.run(in_turn())
    return jev, memories


def carried(call: dict) -> list[str]:
    """The tickets whose memories a call carried."""
    return [ticket_id_of(memory) for memory in call["state"].get(MEMORY_KEY, [])]


@pytest.mark.parametrize("which", WRAPPERS)
def test_a_retried_call_is_asked_as_the_first_time_and_kept_once(which):
    earlier, ticket = state("T-1", "We self-host."), state("T-2", "Invoice, please.")
    jev, memories = asked(which, [(earlier, ROUTE), (ticket, ROUTE), (ticket, ROUTE),
                                  (earlier, ROUTE)])
    routing = [call for call in jev.calls if "team" in call["questions"]]
    assert [carried(call) for call in routing] == [[], ["T-1"], ["T-1"], []], (
        f"{which}() (memorybook/wrapper.py) must ask a retried call with the memories it was "
        "first asked with, those saved before its own (memory.as_first_asked()); the memories "
        f"each routing call carried: {[carried(call) for call in routing]}")
    assert len(jev.calls) == 6 and [ticket_id_of(m) for m in memories.recall("C-1")] == [
        "T-1", "T-2"], (
        f"{which}() must not gate a retried call again, nor keep a second memory of it: "
        f"{len(jev.calls)} calls, memories of {[ticket_id_of(m) for m in memories.recall('C-1')]}")


@pytest.mark.parametrize("which", WRAPPERS)
def test_the_same_ticket_asked_other_questions_or_with_a_new_message_is_a_new_call(which):
    first, followed_up = state("T-1", "We self-host."), state("T-1", "We self-host.", "On Linux.")
    jev, memories = asked(which, [(first, ROUTE), (first, URGENT), (followed_up, ROUTE)])
    assert [carried(call) for call in jev.calls[::2]] == [[], ["T-1"], ["T-1", "T-1"]] and len(
        memories.recall("C-1")) == 3, (
        f"{which}() must treat only the same state asked the same questions as a retry: other "
        "questions about a ticket, or its thread grown by a message, are new calls, which carry "
        "its earlier memories and are gated (memory.as_first_asked())")


@pytest.mark.parametrize("retries", ["one after another", "at once", "after later tickets"])
def test_a_client_that_posts_a_ticket_again_gets_the_same_answer_and_one_memory(tmp_path,
                                                                                 retries):
    """The official page's T-101, whose gate keeps it, posted again to a service replaying the
    collection's recording: each time the recorded call, not one the recording lacks; after
    the customer's later tickets (T-103, and T-105, which the gate keeps) too."""
    t_101, t_103, t_105 = (one for one in EARLIER if one["customer"]["id"] == "C-1042")
    app = create_app(f"sqlite:///{tmp_path / 'store.sqlite3'}")

    async def requests(http):
        if retries == "at once":
            answers = await asyncio.gather(*(http.post("/tickets", json=t_101) for _ in range(3)))
        else:
            answers = [await http.post("/tickets", json=t_101)]
            for later in [t_103, t_105] if retries == "after later tickets" else []:
                assert (await http.post("/tickets", json=later)).status_code == 200
            answers += [await http.post("/tickets", json=t_101) for _ in range(2)]
        return answers, await http.get("/customers/C-1042/memories")

    answers, memories = talk(app, requests)
    assert [a.status_code for a in answers] == [200] * 3 and len({a.text for a in answers}) == 1, (
        "POST /tickets of a ticket already remembered must answer as the first time "
        f"(ask_with_memory_async() in memorybook/wrapper.py): {[a.text for a in answers]}")
    kept = [m["request"]["ticket"]["id"] for m in memories.json()["memories"]]
    assert kept == (["T-101", "T-105"] if retries == "after later tickets" else ["T-101"]), kept
