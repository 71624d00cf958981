"""The memory service: a FastAPI app that routes tickets with memory (`pip install
"memorybook[service]"`).

    uvicorn --factory memorybook.service:create_app      # or: make serve

`POST /tickets` takes a state as `ticket_state()` builds it and returns the routing response
before the gate (`ask_with_memory_async()`); `GET /customers/{id}/memories` lists a customer's
memories once their pending gates have finished; `DELETE` erases them. Both take the customer's
turn as a call does, across processes too on PostgreSQL. The store is opened at startup and
closed at shutdown, after the pending gates. Each gate is recorded in the store before its reply:
one left pending by a process that died runs in the next service up on that store.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from datetime import timedelta

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from memorybook.example import ROUTE
from memorybook.gates import PendingGates
from memorybook.jev import Jev
from memorybook.memory import MissingCustomerIdError, customer_id
from memorybook.replay import RecordingMissError
from memorybook.store import STORE_URL_ENV, open_store
from memorybook.store.turns import CustomerTurns
from memorybook.wrapper import (
    AskAsync,
    ask_with_memory_async,
    recover_abandoned_gates,
    recover_gates,
)

# How often the service looks for gates that a stopped process left pending (it looks at
# startup too); a customer's own calls run theirs first, whenever they come.
RECOVERY_INTERVAL_SECONDS = 30.0


def create_app(store_url: str | None = None, *, retention: timedelta | None = None,
               ask: AskAsync | None = None) -> FastAPI:
    """The memory service. At startup it opens its store (`store_url`, else
    $MEMORYBOOK_STORE_URL, else the SQLite default) with `retention` (memories older than that
    expire; None: kept until erased); on PostgreSQL each customer's turn is held across
    processes too. `ask` is what asks Jev: by default `Jev().ask_async`, made at startup from
    the environment (live with a key and no recording asked for); a stand-in in a unit test."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        url = store_url or os.environ.get(STORE_URL_ENV) or ""
        shared = url.lower().startswith(("postgresql:", "postgres:"))
        app.state.ask = ask or Jev().ask_async
        app.state.memories = await asyncio.to_thread(open_store, url or None,
                                                     retention=retention)
        app.state.gates = PendingGates(CustomerTurns(url) if shared else None)
        recovering = asyncio.create_task(recover_abandoned_gates(
            app.state.memories, app.state.gates, ask=app.state.ask,
            every=RECOVERY_INTERVAL_SECONDS))
        try:
            yield
        finally:
            recovering.cancel()  # a gate it had begun stays recorded: it runs after a restart
            with contextlib.suppress(asyncio.CancelledError):
                await recovering
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
                ask=request.app.state.ask)
        except RecordingMissError as miss:
            return JSONResponse({"detail": miss.summary, "likely_causes": miss.reasons,
                                 "how_to_record": miss.how_to_record}, status_code=503)
        return response.model_dump(mode="json")

    @app.get("/customers/{customer}/memories")
    async def memories_of(customer: str, request: Request):
        running = request.app.state
        async with running.gates.turn(customer):  # after the pending gates, here and elsewhere
            await recover_gates(customer, running.memories, ask=running.ask)
            saved = await asyncio.to_thread(running.memories.recall, customer)
        return {"customer_id": customer, "memories": saved}

    @app.delete("/customers/{customer}/memories")
    async def erase(customer: str, request: Request):
        running = request.app.state
        async with running.gates.turn(customer):  # erases the gates a stopped process left too
            erased = await asyncio.to_thread(running.memories.forget_customer, customer)
        return {"erased": len(erased)}

    return app
