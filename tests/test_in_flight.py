"""The cap on requests to Jev: never more in flight than the limit, routing let in before gates,
and a request stopped while it waits gives its place up."""

from __future__ import annotations

import asyncio

import pytest

from memorybook.config import ConfigError
from memorybook.gates import WaitedTooLong
from memorybook.in_flight import InFlight, max_in_flight


def test_never_more_than_the_limit_in_flight_and_routing_goes_ahead_of_waiting_gates():
    started: list[str] = []

    async def ask(state: dict, questions: dict):
        started.append(state["name"])
        await asyncio.sleep(0.01)
        return state["name"]

    async def scenario() -> InFlight:
        cap = InFlight(2)
        routing, gating = cap.routing(ask), cap.gating(ask)
        gates = [asyncio.create_task(gating({"name": f"gate {n}"}, {})) for n in range(4)]
        await asyncio.sleep(0)  # the first gate takes a slot, the last is kept; three wait
        routes = [asyncio.create_task(routing({"name": f"route {n}"}, {})) for n in range(3)]
        await asyncio.gather(*gates, *routes)
        return cap

    cap = asyncio.run(scenario())
    assert cap.most == 2 and cap.busy == 0, (
        f"{cap.most} requests were in flight at once under a limit of 2 (memorybook/in_flight.py)")
    assert started == ["gate 0", "route 0", "route 1", "route 2", "gate 1", "gate 2", "gate 3"], (
        f"the waiting routing requests must go ahead of the waiting gates, each kind in order of "
        f"arrival, and gates never hold the last slot: {started}")


def test_a_request_stopped_while_it_waits_gives_its_place_up():
    async def ask(state: dict, questions: dict):
        await asyncio.sleep(0.01 if state["name"] != "slow" else 0.05)
        return state["name"]

    async def scenario() -> list:
        cap = InFlight(1)
        slow = asyncio.create_task(cap.gating(ask)({"name": "slow"}, {}))
        await asyncio.sleep(0)
        waiting = asyncio.create_task(cap.routing(ask)({"name": "stopped"}, {}))
        await asyncio.sleep(0)
        waiting.cancel()
        later = await asyncio.wait_for(cap.routing(ask)({"name": "later"}, {}), 2)
        return [await slow, later, cap.busy]

    assert asyncio.run(scenario()) == ["slow", "later", 0], (
        "a request cancelled while waiting for a slot must leave the queue, and the slot must go "
        "to the next one")


def test_a_routing_request_waits_at_most_its_bound_and_a_gate_as_long_as_it_takes():
    async def ask(state: dict, questions: dict):
        await asyncio.sleep(state["seconds"])
        return state["name"]

    async def scenario() -> tuple:
        cap = InFlight(1, wait_at_most=0.05)
        slow = asyncio.create_task(cap.routing(ask)({"name": "slow", "seconds": 0.2}, {}))
        await asyncio.sleep(0)
        gate = asyncio.create_task(cap.gating(ask)({"name": "gate", "seconds": 0}, {}))
        with pytest.raises(WaitedTooLong) as waited:
            await cap.routing(ask)({"name": "late", "seconds": 0}, {})
        return await slow, await gate, cap.busy, str(waited.value)

    slow, gate, busy, message = asyncio.run(scenario())
    assert (slow, gate, busy) == ("slow", "gate", 0), (
        "a gate runs after its reply and must wait for its slot however long it takes; only a "
        "routing request's wait is bounded (InFlight._slot in memorybook/in_flight.py)")
    assert message.startswith("Waited 0.05 s for a request to Jev to end (at most 1 go at "
                              "once)"), message


@pytest.mark.parametrize("value", ["0", "-3", "eight", "1001"])
def test_a_limit_that_is_not_a_whole_number_from_1_is_refused_saying_so(monkeypatch, value):
    monkeypatch.setenv("MEMORYBOOK_MAX_IN_FLIGHT", value)
    with pytest.raises(ConfigError, match="MEMORYBOOK_MAX_IN_FLIGHT"):
        max_in_flight()


def test_eight_by_default(monkeypatch):
    monkeypatch.delenv("MEMORYBOOK_MAX_IN_FLIGHT", raising=False)
    assert InFlight().limit == 8


def test_gates_that_hang_never_take_the_last_slot_from_the_replies():
    async def ask(state: dict, questions: dict):
        await asyncio.sleep(3600 if state["name"].startswith("gate") else 0.01)
        return state["name"]

    async def scenario() -> list:
        cap = InFlight(3)
        hanging = [asyncio.create_task(cap.gating(ask)({"name": f"gate {n}"}, {}))
                   for n in range(5)]
        await asyncio.sleep(0)
        replies = [await asyncio.wait_for(cap.routing(ask)({"name": f"route {n}"}, {}), 2)
                   for n in range(3)]
        busy = (cap.busy, cap.gates_busy)
        for task in hanging:
            task.cancel()
        await asyncio.gather(*hanging, return_exceptions=True)
        return [replies, busy, cap.busy]

    assert asyncio.run(scenario()) == [["route 0", "route 1", "route 2"], (2, 2), 0], (
        "with every gate hanging, gates may hold all slots but one, and replies go through the "
        "last (InFlight.gate_limit, memorybook/in_flight.py)")
