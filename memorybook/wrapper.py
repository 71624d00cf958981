"""`ask_with_memory()` and `ask_with_memory_async()`: ask(), plus a memory per customer.

    memories = InMemoryMemories()  # or a store: open_store(url)
    response = ask_with_memory(state, questions, memories, ask=jev.ask)
    response = await ask_with_memory_async(state, questions, memories, gates=gates,
                                           ask=jev.ask_async)

Both take ask()'s arguments and return its response. Before the call, the customer's memories
(by the state's `customer.id`) go into the state under MEMORY_KEY; after it, the gate decides
whether this request is worth keeping. A call asked again once its gate kept it (a client's
retry: the same state, the same questions) is asked as it was the first time, with the memories
saved before its own, and keeps no second one; to ask afresh, change the state. The synchronous
wrapper makes the two requests in a row; the asynchronous one returns once the routing answers
and runs the gate after it, in the customer's turn (`PendingGates`). With a store, the gate is
recorded in it before the reply, so that one left pending by a process that died runs later, in
another (`recover_gates()`). `ask` is what asks Jev: a `Jev`'s `ask`/`ask_async`, or a
stand-in's in a unit test; by default `default_jev()`, made from the environment.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from typing import TYPE_CHECKING

from typesafe_sdk import SystemOneResponse, TypeSafeError

from memorybook.api_errors import describe_api_failure
from memorybook.config import REMEMBER_AT
from memorybook.gates import PendingGates
from memorybook.in_flight import AskAsync
from memorybook.jev import default_jev
from memorybook.memory import (
    GATE,
    Ask,
    as_first_asked,
    as_memory,
    checked_remember_at,
    checked_state,
    customer_id,
    remember_probability,
    state_with_memories,
    ticket_id_of,
    worth_keeping,
)
from memorybook.questions import question_objects
from memorybook.recording import RecordingError
from memorybook.redaction import redact
from memorybook.replay import RecordingMissError

if TYPE_CHECKING:
    from memorybook.metrics import Metrics
    from memorybook.store.base import Memories
    from memorybook.store.pending import PendingGate

log = logging.getLogger("memorybook")
# Customers whose abandoned gates run side by side: each holds a turn meanwhile (on PostgreSQL a
# connection of its own, and a worker thread while it waits for it).
RECOVERING_AT_ONCE = 4


@contextlib.contextmanager
def threshold_named(remember_at: float):
    """A miss whose memories differ from the recorded call's names the threshold first, when it
    is not the one the recording was made with."""
    try:
        yield
    except RecordingMissError as miss:
        miss.name_threshold(remember_at)
        raise


def ask_with_memory(state: dict, questions: dict, memories: Memories, *,
                    ask: Ask | None = None, remember_at: float = REMEMBER_AT
                    ) -> SystemOneResponse:
    """ask(), plus memory: the same arguments and the same response. `memories` is where they
    are kept (InMemoryMemories, or a store); the gate keeps a memory from `remember_at` up.
    A state without `customer.id` or `ticket.id`, or holding MEMORY_KEY, is refused before
    anything is asked (StateError), as is one no store would keep as a memory, whatever Jev
    answers (not JSON, over 1 MB: StoreInputError; both are ValueErrors), and questions that are
    not the SDK's (QuestionsError).
    Should the gate or the save fail once Jev has answered, the error raised carries that
    answer as its `response`, so the call is not lost with the memory."""
    questions = question_objects(questions)
    customer, remember_at = checked_state(state, questions), checked_remember_at(remember_at)
    ask = ask or default_jev().ask
    with threshold_named(remember_at):
        recalled = memories.recall(customer)
        first = as_first_asked(recalled, state, questions)
        response = ask(state_with_memories(state, first), questions)
        if inspect.isawaitable(response):
            getattr(response, "close", lambda: None)()  # a coroutine, never started
            raise asked_with_the_other_kind("ask_with_memory()")
        if len(first) < len(recalled):  # remembered already: no second gate, no second memory
            return response
        try:
            memory = as_memory(state, questions, response)
            if worth_keeping(remember_probability(memory, ask), remember_at):
                memories.save(customer, memory)
        except Exception as error:
            error.response = response
            raise
    return response


async def ask_with_memory_async(state: dict, questions: dict, memories: Memories, *,
                                gates: PendingGates, ask: AskAsync | None = None,
                                ask_gate: AskAsync | None = None,
                                remember_at: float = REMEMBER_AT,
                                wait_at_most: float | None = None,
                                metrics: Metrics | None = None) -> SystemOneResponse:
    """ask_with_memory(), awaited, returning before its gate: the same arguments and response.
    `gates` keeps each customer's calls in order; store calls run in a worker thread. The gate
    asks with `ask_gate`, by default `ask` (a service lets replies ahead of gates:
    memorybook/in_flight.py). `wait_at_most`: the seconds the call may wait for the customer's
    earlier calls (None: no bound), WaitedTooLong past them. `metrics` counts its gates
    (memorybook/metrics.py)."""
    # The turn is taken as the call is made, so that a customer's calls keep their order; the
    # state is checked in it, in a worker thread (a state of a megabyte takes a second), before
    # anything is awaited of earlier calls or asked.
    customer, remember_at = customer_id(state), checked_remember_at(remember_at)
    questions = question_objects(questions)
    ask = ask or default_jev().ask_async
    ask_gate = ask_gate or ask
    previous, done = gates.take_turn(customer)
    try:
        await asyncio.to_thread(checked_state, state, questions)
        await gates.wait_for_turn(customer, previous, done, wait_at_most)
        await recover_gates(customer, memories, ask=ask_gate, remember_at=remember_at,
                            metrics=metrics)
        recalled = await asyncio.to_thread(memories.recall, customer)
        first = as_first_asked(recalled, state, questions)
        with threshold_named(remember_at):
            asked = ask(state_with_memories(state, first), questions)
            if not inspect.isawaitable(asked):
                raise asked_with_the_other_kind("ask_with_memory_async()", asked)
            response = await asked
        remembered = len(first) < len(recalled)  # already: no second gate, no second memory
        pending = None if remembered else await record_gate(
            memories, customer, as_memory(state, questions, response))
    except BaseException:
        gates.end_turn(customer, done, after=previous)
        raise
    if remembered:
        gates.end_turn(customer, done)
        return response
    gate = keep_if_worth_it(state, questions, response, memories, ask_gate, remember_at,
                            pending=pending, metrics=metrics)
    gates.run_gate(gate, customer, done)
    return response


def asked_with_the_other_kind(wrapper: str, response: object = None) -> TypeError:
    """The error for an `ask` of the other kind: an async one given to ask_with_memory() (its
    coroutine is not awaited: nothing is asked), or a synchronous one given to
    ask_with_memory_async() (it has answered: its response is kept on the error)."""
    if response is None:
        error = TypeError(f"{wrapper} was given an async ask (it returned an awaitable, which "
                          "was not awaited: nothing was asked). Pass `ask=jev.ask`, or await "
                          "ask_with_memory_async() with `ask=jev.ask_async`.")
    else:
        error = TypeError(f"{wrapper} was given a synchronous ask: it answered without being "
                          "awaited, and its answer is on this error as `response`; no memory "
                          "was kept. Pass `ask=jev.ask_async`, or call ask_with_memory() with "
                          "`ask=jev.ask`.")
        error.response = response
    return error


async def settled_against(memories, pending: PendingGate) -> bool:
    """Settle a failed gate's record as not kept; False when the store could not."""
    try:
        await asyncio.to_thread(memories.settle_gate, pending, False)
    except Exception:
        return False
    return True


async def record_gate(memories, customer: str, memory: dict) -> PendingGate | None:
    """Record the gate about to run in the store, before the reply: a process that dies before
    the gate has run leaves it for another to run (`recover_gates()`). None where `memories`
    keeps no gates (InMemoryMemories), or refuses this memory (the gate's save says why)."""
    if not hasattr(memories, "record_gate"):
        return None
    try:
        return await asyncio.to_thread(memories.record_gate, customer, memory)
    except ValueError:
        return None


async def recover_gates(customer: str, memories, *, ask: AskAsync,
                        remember_at: float = REMEMBER_AT, metrics: Metrics | None = None) -> int:
    """Run, in turn, this customer's gates that a process which ended left pending, and return
    how many. Call it holding the customer's turn, before recalling: their memories come
    first."""
    if not hasattr(memories, "claim_abandoned_gates"):
        return 0
    abandoned = await asyncio.to_thread(memories.claim_abandoned_gates, customer)
    for gate in abandoned:
        await keep_if_worth_it(gate.memory["request"], {}, None, memories, ask, remember_at,
                               pending=gate, metrics=metrics)
        if metrics is not None:
            metrics.gates_recovered.inc()
    return len(abandoned)


async def recover_abandoned_gates(memories, gates: PendingGates, *, ask: AskAsync,
                                  remember_at: float = REMEMBER_AT,
                                  every: float | None = None,
                                  metrics: Metrics | None = None) -> None:
    """Run every gate that processes which ended left pending, each in its customer's turn,
    customers side by side; with `every`, look again that many seconds later, until cancelled.
    A failure to look is logged, and looked at again next time."""
    at_once = asyncio.Semaphore(RECOVERING_AT_ONCE)

    async def recover(customer: str) -> None:
        async with at_once, gates.turn(customer):
            await recover_gates(customer, memories, ask=ask, remember_at=remember_at,
                                metrics=metrics)

    while True:
        try:
            customers = await asyncio.to_thread(memories.customers_with_abandoned_gates)
            for failed in await asyncio.gather(*map(recover, customers), return_exceptions=True):
                if isinstance(failed, Exception):
                    raise failed
        except Exception as error:  # the store failed: the gates stay recorded for next time
            log.error(redact(f"running the gates left pending by a stopped process failed: "
                             f"{type(error).__name__}: {(str(error).splitlines() or [''])[0]}"))
        if every is None:
            return
        await asyncio.sleep(every)


async def keep_if_worth_it(state: dict, questions: dict, response: SystemOneResponse | None,
                           memories, ask: AskAsync, remember_at: float = REMEMBER_AT, *,
                           pending: PendingGate | None = None,
                           metrics: Metrics | None = None) -> bool:
    """The gate for one reply, after it has gone: save its memory if it passes; a failure is
    logged once, naming the customer and the ticket, and nothing is saved. With `pending` (the
    gate as `record_gate()` recorded it), its memory is the one decided on, and the verdict
    settles the record: the memory is saved as the record goes, in one transaction. `metrics`
    counts it: pending while it runs, then kept, not kept or failed."""
    memory = as_memory(state, questions, response) if pending is None else pending.memory
    customer = customer_id(state)
    verdict, ended = None, "failed"
    if metrics is not None:
        metrics.gate_started()
    try:
        verdict = worth_keeping((await ask(memory, GATE)).answers["remember"].noul, remember_at)
        if pending is not None:  # False when it was settled elsewhere, or erased meanwhile
            kept = await asyncio.to_thread(memories.settle_gate, pending, verdict) and verdict
        else:
            kept = verdict
            if verdict:
                await asyncio.to_thread(memories.save, customer, memory)
        ended = "kept" if kept else "not_kept"
        return kept
    except Exception as error:  # the reply has gone: log it, keep the service up
        # A recorded gate that failed to ask is settled as not kept: no retry. One whose store
        # failed (its save, or that settling) stays recorded and runs again once this process
        # has ended: at the next start, or on another replica.
        stays = pending is not None and (verdict is not None
                                         or not await settled_against(memories, pending))
        # Its ticket id is a non-blank string: checked_state() checked the state, or the store
        # the recorded gate's memory.
        named = f"ticket {ticket_id_of(memory)[:80]!r}"
        # Neither what the API said nor a recording's name for the call (its subject) is
        # logged: either may quote the ticket.
        said = error.logged if isinstance(error, RecordingError) else str(error)
        why = (describe_api_failure(error, quoting_the_api=False)
               if isinstance(error, TypeSafeError) else
               f"{type(error).__name__}: {(said.splitlines() or [''])[0]}")
        outcome = ("nothing saved yet: its record stays in the store, and it runs again once "
                   "this process has ended" if stays else "nothing saved")
        log.error(redact(f"gate for customer {customer[:80]!r}, {named}, failed, {outcome}: "
                         f"{why}"))
    finally:
        if metrics is not None:
            metrics.gate_ended(ended)
    return False
