"""`ask_with_memory()` and `ask_with_memory_async()`: ask(), plus a memory per customer.

    memories = InMemoryMemories()  # or a store: open_store(url)
    response = ask_with_memory(state, questions, memories, ask=jev.ask)
    response = await ask_with_memory_async(state, questions, memories, gates=gates,
                                           ask=jev.ask_async)

Both take ask()'s arguments and return its response. Before the call, the customer's memories
(by the state's `customer.id`) go into the state under MEMORY_KEY; after it, the gate decides
whether this request is worth keeping. The synchronous wrapper makes the two requests in a row;
the asynchronous one returns once the routing answers and runs the gate after it, in the
customer's turn (`PendingGates`). `ask` is what asks Jev: a `Jev`'s `ask`/`ask_async`, or a
stand-in's in a unit test; by default `default_jev()`, made from the environment.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from typesafe_sdk import SystemOneResponse, TypeSafeError

from memorybook.api_errors import describe_api_failure
from memorybook.config import REMEMBER_AT
from memorybook.gates import PendingGates
from memorybook.jev import default_jev
from memorybook.memory import (
    GATE,
    Ask,
    as_memory,
    customer_id,
    remember_probability,
    state_with_memories,
    worth_keeping,
)
from memorybook.redaction import redact
from memorybook.replay import RecordingMissError

AskAsync = Callable[[dict, dict], Awaitable[SystemOneResponse]]

log = logging.getLogger("memorybook")


@contextlib.contextmanager
def threshold_named(remember_at: float):
    """A miss whose memories differ from the recorded call's names the threshold first, when it
    is not the one the recording was made with."""
    try:
        yield
    except RecordingMissError as miss:
        miss.name_threshold(remember_at)
        raise


def ask_with_memory(state: dict, questions: dict, memories, *, ask: Ask | None = None,
                    remember_at: float = REMEMBER_AT) -> SystemOneResponse:
    """ask(), plus memory: the same arguments and the same response. `memories` is where they
    are kept (InMemoryMemories, or a store); the gate keeps a memory from `remember_at` up."""
    ask = ask or default_jev().ask
    customer = customer_id(state)
    with threshold_named(remember_at):
        response = ask(state_with_memories(state, memories.recall(customer)), questions)
        memory = as_memory(state, questions, response)
        if worth_keeping(remember_probability(memory, ask), remember_at):
            memories.save(customer, memory)
    return response


async def ask_with_memory_async(state: dict, questions: dict, memories, *,
                                gates: PendingGates, ask: AskAsync | None = None,
                                remember_at: float = REMEMBER_AT) -> SystemOneResponse:
    """ask_with_memory(), awaited, returning before its gate: the same arguments and response.
    `gates` keeps each customer's calls in order; store calls run in a worker thread."""
    ask = ask or default_jev().ask_async
    customer = customer_id(state)
    previous, done = gates.take_turn(customer)
    try:
        if previous is not None:
            await asyncio.shield(previous)
        await gates.hold(customer, done)
        recalled = await asyncio.to_thread(memories.recall, customer)
        with threshold_named(remember_at):
            response = await ask(state_with_memories(state, recalled), questions)
    except BaseException:
        gates.end_turn(customer, done, after=previous)
        raise
    gate = keep_if_worth_it(state, questions, response, memories, ask, remember_at)
    gates.run_gate(gate, customer, done)
    return response


async def keep_if_worth_it(state: dict, questions: dict, response: SystemOneResponse, memories,
                           ask: AskAsync, remember_at: float = REMEMBER_AT) -> bool:
    """The gate for one reply, after it has gone: save its memory if it passes; a failure is
    logged once, naming the customer and the ticket, and nothing is saved."""
    memory = as_memory(state, questions, response)
    customer = customer_id(state)
    try:
        if worth_keeping((await ask(memory, GATE)).answers["remember"].noul, remember_at):
            await asyncio.to_thread(memories.save, customer, memory)
            return True
    except Exception as error:  # the reply has gone: log it, keep the service up
        # Read without a lookup that could raise here, whatever the state holds as its ticket.
        ticket = state.get("ticket")
        ticket_id = ticket.get("id") if isinstance(ticket, dict) else None
        named = (f"ticket {ticket_id[:80]!r}" if isinstance(ticket_id, str) and ticket_id.strip()
                 else "a ticket without an id")
        why = (describe_api_failure(error) if isinstance(error, TypeSafeError) else
               f"{type(error).__name__}: {(str(error).splitlines() or [''])[0]}")
        log.error(redact(f"gate for customer {customer[:80]!r}, {named}, failed, "
                         f"nothing saved: {why}"))
    return False
