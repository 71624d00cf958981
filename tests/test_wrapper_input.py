"""ask_with_memory() and its async twin refuse, before asking anything, a state or a threshold
that would only fail once Jev had answered (or silently keep nothing)."""

from __future__ import annotations

import asyncio
import json

import pytest

from memorybook import (
    MEMORY_KEY,
    InMemoryMemories,
    MadeUpJev,
    PendingGates,
    StateError,
    StoreInputError,
    ask_with_memory,
    ask_with_memory_async,
)
from memorybook.example import ROUTE

STATE = {"customer": {"id": "C-1"}, "ticket": {"id": "T-1", "subject": "Invoice"}}
# 10 bytes under a memory's 1 MB as a request alone: over it once the routing answer is added
NEAR = {**STATE, "attachment": "x" * (1_000_000 - 10 - len(json.dumps(
    {"request": {**STATE, "attachment": ""}})))}
REFUSED = [
    ({**STATE, "ticket": {"subject": "Invoice"}}, {}, "`ticket.id`"),
    ({**STATE, "ticket": {"id": "  "}}, {}, "`ticket.id`"),
    ({"customer": {"id": "C-1"}}, {}, "`ticket.id`"),
    ({**STATE, MEMORY_KEY: [{"request": STATE}]}, {}, MEMORY_KEY),
    ({"ticket": {"id": "T-1"}}, {}, "`customer.id`"),
    (STATE, {"remember_at": "0.5"}, "remember_at"),
    (STATE, {"remember_at": 2}, "remember_at"),
    (STATE, {"remember_at": float("nan")}, "remember_at"),
    (STATE, {"remember_at": True}, "remember_at"),
    ({**STATE, "score": float("nan")}, {}, "not JSON-serialisable"),
    ({**STATE, "tags": ("billing", "urgent")}, {}, "would not come back unchanged"),
    ({**STATE, "attachment": "x" * 1_000_001}, {}, "bytes of JSON"),
    (NEAR, {}, "bytes of JSON"),
]
IDS = ["a ticket without an id", "a blank ticket id", "no ticket", "memories of its own",
       "no customer", "a threshold as text", "a threshold above 1", "a NaN threshold",
       "a bool threshold", "NaN in it", "a tuple in it", "over 1 MB",
       "over 1 MB once answered"]


def made_up() -> MadeUpJev:
    return MadeUpJev(lambda state, questions: (
        {"remember": 0.9} if "remember" in questions else {"team": "billing"}))


@pytest.mark.parametrize(("state", "options", "named"), REFUSED, ids=IDS)
@pytest.mark.parametrize("which", ["ask_with_memory", "ask_with_memory_async"])
def test_a_state_or_threshold_it_cannot_take_is_refused_before_anything_is_asked(
        which, state, options, named):
    jev, memories = made_up(), InMemoryMemories()
    with pytest.raises((StateError, StoreInputError)) as refused:
        if which == "ask_with_memory":
            ask_with_memory(state, ROUTE, memories, ask=jev.ask, **options)
        else:
            asyncio.run(ask_with_memory_async(state, ROUTE, memories, gates=PendingGates(),
                                              ask=jev.ask_async, **options))
    message = str(refused.value)
    assert named in message and "\n" not in message and jev.calls == [], (
        f"{which}() (memorybook/wrapper.py) must refuse this with StateError (or the store's "
        f"StoreInputError) naming {named} (memorybook/memory.py's checked_state / "
        f"checked_remember_at) before asking Jev; it "
        f"asked {len(jev.calls)} time(s) and said: {message}")


def test_a_state_it_can_take_is_asked_and_remembered():
    jev, memories = made_up(), InMemoryMemories()
    for number, remember_at in enumerate((0, 0.5, 1)):
        state = {**STATE, "ticket": {"id": f"T-{number}", "subject": "Invoice"}}
        ask_with_memory(state, ROUTE, memories, ask=jev.ask, remember_at=remember_at)
    kept = [memory["request"]["ticket"]["id"] for memory in memories.recall("C-1")]
    assert kept == ["T-0", "T-1"] and len(jev.calls) == 6  # 0.9 passes 0 and 0.5


def test_a_gate_that_fails_once_jev_has_answered_keeps_the_answer_on_the_error():
    def answers(state, questions):
        if "remember" in questions:
            raise RuntimeError("the gate's endpoint is down")
        return {"team": "billing"}

    with pytest.raises(RuntimeError) as failed:
        ask_with_memory(STATE, ROUTE, InMemoryMemories(), ask=MadeUpJev(answers).ask)
    answer = getattr(failed.value, "response", None)
    assert answer is not None and answer.answers["team"].choice == "billing", (
        "Jev's answer was lost with the gate: ask_with_memory() must attach it to the error as "
        "`response` (memorybook/wrapper.py)")


def test_an_ask_of_the_other_kind_is_refused_naming_the_one_to_pass():
    jev, memories = made_up(), InMemoryMemories()
    with pytest.raises(TypeError) as refused:
        ask_with_memory(STATE, ROUTE, memories, ask=jev.ask_async)
    assert "ask=jev.ask`" in str(refused.value) and jev.calls == [], (
        "ask_with_memory() given an async ask must say which to pass and ask nothing "
        f"(memorybook/wrapper.py): {refused.value}; calls {jev.calls}")
    with pytest.raises(TypeError) as refused:
        asyncio.run(ask_with_memory_async(STATE, ROUTE, memories, gates=PendingGates(),
                                          ask=jev.ask))
    answer = getattr(refused.value, "response", None)
    assert "ask=jev.ask_async`" in str(refused.value) and answer.answers["team"].choice == (
        "billing") and memories.recall("C-1") == [], (
        "ask_with_memory_async() given a synchronous ask, which has answered, must say which to "
        f"pass and keep the answer on the error (memorybook/wrapper.py): {refused.value!r}")


def test_a_state_is_measured_with_its_longest_answer_as_the_store_writes_it():
    from typesafe_sdk import Choice

    accented = {"team": Choice(instructions="Which team?",
                               criteria={"a": "x" * 100, "b": "\u00e9" * 99, "c": None})}
    bare = {**STATE, "attachment": ""}
    written = len(json.dumps({"request": bare, "jev_answered": {"Which team?": ""}}))
    # over 1 MB if Jev answers "b" (99 characters, 594 bytes escaped), under if "a" (100)
    near = {**STATE, "attachment": "x" * (1_000_001 - written - 594 + 2)}
    jev = MadeUpJev(lambda state, questions: (
        {"remember": 0.9} if "remember" in questions else {"team": "b"}))
    with pytest.raises(StoreInputError, match="bytes of JSON"):
        ask_with_memory(near, accented, InMemoryMemories(), ask=jev.ask)
    assert jev.calls == [], (
        "checked_state() (memorybook/memory.py) must measure a memory with the answer longest "
        "as JSON writes it (é takes 6 bytes), not in characters: this state was asked")
    undescribed = MadeUpJev(lambda state, questions: (
        {"remember": 0.9} if "remember" in questions else {"team": "c"}))
    memories = InMemoryMemories()
    ask_with_memory(STATE, accented, memories, ask=undescribed.ask)  # an option without words
    assert [memory["jev_answered"] for memory in memories.recall("C-1")] == [
        {"Which team?": None}]
