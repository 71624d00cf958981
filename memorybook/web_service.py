"""Generated from notebooks/09_memory_in_a_web_service.ipynb by `python -m tools.export`.

Edit the notebook's cells tagged `pattern` or `export`, not this file."""
# ruff: noqa: E402, I001

__all__ = [
    "async_client", "ask_async", "PendingGates", "GATES", "log", "ask_with_memory_async",
    "keep_if_worth_it", "in_order_per_customer", "reconcile_async", "create_app", "app",
    "MadeUpJev",
]


# notebooks/09_memory_in_a_web_service.ipynb, cell 3
import asyncio
import json

from typesafe_sdk import SystemOneResponse

from memorybook.config import TIMEOUT_ENV, timeout_seconds
from memorybook.api_errors import CallTimeoutError
from memorybook.memory_system import TYPESAFE_MODEL, json_cache, request_json
from memorybook.transport import ClientOnFirstUse, async_collection_client

async_client = ClientOnFirstUse(async_collection_client)  # replay only without a key


@json_cache  # notebook 1's cache: the same function name, so the same keys
async def _system_one(model: str, state: str, questions: str) -> dict:
    """One System One request, awaited; the cache calls it only for answers it lacks."""
    seconds = timeout_seconds()
    try:
        async with asyncio.timeout(seconds):  # the whole call, retries included
            response = await async_client.system_one(
                state=json.loads(state), questions=json.loads(questions), model=model
            )
    except TimeoutError:
        raise CallTimeoutError(f"no answer within {seconds:g} s, the whole call's time "
                               f"({TIMEOUT_ENV}), retries included") from None
    return response.model_dump(mode="json")


async def ask_async(state: dict, questions: dict) -> SystemOneResponse:
    """ask(), awaited: the same request, the same cached answer."""
    answer = await _system_one(TYPESAFE_MODEL, *request_json(state, questions))
    return SystemOneResponse.model_validate(answer)


# notebooks/09_memory_in_a_web_service.ipynb, cell 7
class PendingGates:
    """Each customer's calls, in order: a call starts once the customer's earlier calls
    have finished their gates. Other customers' calls never wait for them."""

    def __init__(self, turns=None) -> None:
        self.turns = turns  # CustomerTurns, where processes share a PostgreSQL store
        self._last: dict[str, asyncio.Future] = {}  # customer -> last call's end
        self._running: set[asyncio.Task] = set()
        self._held: dict[asyncio.Future, object] = {}  # a call's end -> its Turn

    def take_turn(self, customer: str) -> tuple[asyncio.Future | None, asyncio.Future]:
        """(the end of this customer's previous call or None, the end of this call)."""
        done = asyncio.get_running_loop().create_future()
        previous, self._last[customer] = self._last.get(customer), done
        return previous, done

    async def hold(self, customer: str, done: asyncio.Future) -> None:
        """Take the customer's turn across processes too, where `turns` is set."""
        if self.turns is not None:
            turn = self._held[done] = self.turns.take(customer)
            await asyncio.to_thread(turn.wait)

    def end_turn(self, customer: str, done: asyncio.Future, after=None) -> None:
        """End a call's turn, or, with `after`, once that earlier turn has ended."""
        if after is not None and not after.done():
            after.add_done_callback(lambda _: self.end_turn(customer, done))
            return
        if (turn := self._held.pop(done, None)) is not None:
            turn.give_back()
        if not done.done():
            done.set_result(None)
        if self._last.get(customer) is done:
            del self._last[customer]

    def run_gate(self, gate, customer: str, done: asyncio.Future) -> None:
        """Run a gate in the background; the turn ends when it has."""
        task = asyncio.create_task(gate)
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        task.add_done_callback(lambda _: self.end_turn(customer, done))

    async def settled(self, customer: str) -> None:
        """Wait until every call so far for this customer has finished its gate."""
        last = self._last.get(customer)
        if last is not None:
            await asyncio.shield(last)

    async def drain(self) -> None:
        """Wait for every pending gate, for a graceful stop."""
        while self._last:
            await asyncio.gather(*map(asyncio.shield, list(self._last.values())))


GATES = PendingGates()


# notebooks/09_memory_in_a_web_service.ipynb, cell 9
import logging

from typesafe_sdk import TypeSafeError

from memorybook.api_errors import describe_api_failure
from memorybook.memory_system import (
    GATE,
    MEMORIES,
    as_memory,
    customer_id,
    state_with_memories,
    worth_keeping,
)
from memorybook.redaction import redact

log = logging.getLogger("memorybook.web_service")


async def ask_with_memory_async(state: dict, questions: dict, memories=MEMORIES, *,
                                gates: PendingGates = GATES,
                                ask=ask_async) -> SystemOneResponse:
    """ask_with_memory(), awaited, returning before its gate: the same arguments and
    return value. `gates` keeps each customer's calls in order; `ask` is what asks Jev
    (a stand-in, in a unit test)."""
    customer = customer_id(state)
    previous, done = gates.take_turn(customer)
    try:
        if previous is not None:
            await asyncio.shield(previous)
        await gates.hold(customer, done)
        recalled = await asyncio.to_thread(memories.recall, customer)
        response = await ask(state_with_memories(state, recalled), questions)
    except BaseException:
        gates.end_turn(customer, done, after=previous)
        raise
    gate = keep_if_worth_it(state, questions, response, memories, ask)
    gates.run_gate(gate, customer, done)
    return response


async def keep_if_worth_it(state, questions, response, memories, ask) -> bool:
    """The gate for one reply: save its memory if it passes; log a failure, once."""
    memory = as_memory(state, questions, response)
    customer = customer_id(state)
    try:
        if worth_keeping((await ask(memory, GATE)).answers["remember"].noul):
            await asyncio.to_thread(memories.save, customer, memory)
            return True
    except Exception as error:  # the reply has gone: log it, keep the service up
        ticket = (state.get("ticket") or {}).get("id", "without an id")
        why = (describe_api_failure(error) if isinstance(error, TypeSafeError) else
               f"{type(error).__name__}: {(str(error).splitlines() or [''])[0]}")
        log.error(redact(f"gate for customer {customer}, ticket {ticket} failed, "
                         f"nothing saved: {why}"))
    return False


# notebooks/09_memory_in_a_web_service.ipynb, cell 11
from memorybook.memory_system import (
    CUSTOMERS,
    DATA,
    EARLIER,
    EXPECTED_TEAM,
    ROUTE,
    later_state,
    marked,
)


async def in_order_per_customer(route, states) -> list:
    """Await `route(state)` for each state: one customer's in order, customers at once.
    Returns the answers in the order of `states`."""
    queues: dict[str, list] = {}
    for position, state in enumerate(states):
        queues.setdefault(customer_id(state), []).append((position, state))

    async def one_customer(queue):
        return [(position, await route(state)) for position, state in queue]

    answered = await asyncio.gather(*map(one_customer, queues.values()))
    return [answer for _, answer in sorted(pair for done in answered for pair in done)]


async def reconcile_async(route, customers=tuple(CUSTOMERS)) -> list[dict]:
    """reconcile() with memory through `route(state) -> SystemOneResponse`, after the
    five earlier tickets through it; print the table and the totals, return its rows."""
    earlier = [state for state in EARLIER if customer_id(state) in customers]
    await in_order_per_customer(route, earlier)
    messages = range(len(DATA["later_messages"]))
    later = [later_state(customer, i) for customer in customers for i in messages]
    plain = await asyncio.gather(*(ask_async(state, ROUTE) for state in later))
    remembered = await in_order_per_customer(route, later)
    print(f"{'customer':<9}{'message':<17}{'expected':<20}{'plain Jev':<27}"
          f"{'with memory':<27}")
    rows = []
    for state, without, with_memory in zip(later, plain, remembered, strict=True):
        customer, subject = customer_id(state), state["ticket"]["subject"]
        row = {"customer": customer, "message": subject,
               "expected": EXPECTED_TEAM[customer][subject],
               "plain": without.answers["team"], "memory": with_memory.answers["team"]}
        print(f"{customer:<9}{subject:<17}{row['expected']:<20}"
              f"{marked(row['plain'], row['expected']):<27}"
              f"{marked(row['memory'], row['expected']):<27}")
        rows.append(row)
    plain_right = sum(row["plain"].choice == row["expected"] for row in rows)
    memory_right = sum(row["memory"].choice == row["expected"] for row in rows)
    print(f"\nExpected routes: {plain_right}/{len(rows)} without memory, "
          f"{memory_right}/{len(rows)} with memory.")
    return rows


# notebooks/09_memory_in_a_web_service.ipynb, cell 15
import contextlib
import os

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from memorybook.memory_system import MissingCustomerIdError
from memorybook.replay import RecordingMissError
from memorybook.store import STORE_URL_ENV, open_store
from memorybook.store.turns import CustomerTurns


def create_app(store_url: str | None = None, *, ask=ask_async) -> FastAPI:
    """The memory service. Its store is opened at startup (`store_url`, else
    $MEMORYBOOK_STORE_URL, else the SQLite default) and closed at shutdown, after the
    pending gates. On PostgreSQL, each customer's turn is held across processes too.
    `ask` is what asks Jev: a stand-in, in a unit test."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        url = store_url or os.environ.get(STORE_URL_ENV) or ""
        shared = url.lower().startswith(("postgresql:", "postgres:"))
        app.state.memories = await asyncio.to_thread(open_store, url or None)
        app.state.gates = PendingGates(CustomerTurns(url) if shared else None)
        try:
            yield
        finally:
            await app.state.gates.drain()
            await asyncio.to_thread(app.state.memories.close)
            if shared:
                await asyncio.to_thread(app.state.gates.turns.close)

    app = FastAPI(title="Jev memory service", lifespan=lifespan)

    @app.post("/tickets")
    async def route_ticket(request: Request):
        try:
            state = json.loads(await request.body())
            customer_id(state)
        except ValueError as error:  # not JSON, or no customer.id
            reason = str(error) if isinstance(error, MissingCustomerIdError) else (
                f"the body is not JSON ({error})")
            return JSONResponse({"detail": reason}, status_code=422)
        try:
            response = await ask_with_memory_async(
                state, ROUTE, request.app.state.memories, gates=request.app.state.gates,
                ask=ask)
        except RecordingMissError as miss:
            return JSONResponse({"detail": miss.summary, "likely_causes": miss.reasons,
                                 "how_to_record": miss.how_to_record}, status_code=503)
        return response.model_dump(mode="json")

    @app.get("/customers/{customer}/memories")
    async def memories_of(customer: str, request: Request):
        await request.app.state.gates.settled(customer)
        saved = await asyncio.to_thread(request.app.state.memories.recall, customer)
        return {"customer_id": customer, "memories": saved}

    @app.delete("/customers/{customer}/memories")
    async def erase(customer: str, request: Request):
        await request.app.state.gates.settled(customer)
        erased = await asyncio.to_thread(request.app.state.memories.forget_customer,
                                         customer)
        return {"erased": len(erased)}

    return app


app = create_app()  # for uvicorn (`make serve`); it opens its store when it starts


# notebooks/09_memory_in_a_web_service.ipynb, cell 23
class MadeUpJev:
    """A stand-in for Jev in unit tests. `answer(state, questions)` returns, for each
    question id, the option chosen (a Choice) or the probability (a Noul): the test's
    own made-up answers, never Jev's and never written to a recording."""

    MODEL = "made-up-stand-in"  # on every response, so none passes for Jev's

    def __init__(self, answer) -> None:
        self.answer = answer
        self.calls: list[dict] = []

    async def ask(self, state: dict, questions: dict) -> SystemOneResponse:
        self.calls.append({"state": state, "questions": questions})
        answers = {}
        for question_id, value in self.answer(state, questions).items():
            if isinstance(value, str):
                answers[question_id] = dict(type="choice", choice=value, confidence=1.0,
                                            probabilities={value: 1.0})
            else:
                answers[question_id] = {"type": "noul", "noul": float(value)}
        usage = {"input_tokens": 0, "output_tokens": 0}
        return SystemOneResponse.model_validate(
            {"model": self.MODEL, "usage": usage, "answers": answers})
