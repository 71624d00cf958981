"""The memory service: a FastAPI app that routes tickets with memory (the `service` extra:
`pip install "path/to/clone[service]"`).

    uvicorn --factory memorybook.service:create_app      # or: make serve

`POST /tickets` takes a ticket's state (customer, ticket) and returns the routing response
before the gate (`ask_with_memory_async()`); `GET /customers/{id}/memories` lists a customer's
memories once their pending gates have finished; `DELETE` erases them, and `DELETE
/customers/{id}/memories/{ticket}` those of one ticket (a damaged one too); `GET
/customers/{id}/history` lists what happened to them (events, never content); `GET /health`
answers a load balancer's probe. Reads and erasures take the customer's turn as a call does,
across processes too on PostgreSQL. The store is opened
at startup and closed at shutdown, after the pending gates; meanwhile expired memories are swept
on a schedule. Each gate is recorded in the store before its reply: one left pending by a process
that died runs in the next service up on that store. Every request passes the guard first
(memorybook/service_guard.py); the contract, the id rule and every status answered are in
memorybook/service_models.py and `/openapi.json`.

Running it. Its settings (memorybook/settings.py; README.md's table lists each variable) come
from the environment when the app is made, unless given: TYPESAFE_API_KEY (none: replay only)
and TYPESAFE_ENDPOINT; MEMORYBOOK_STORE_URL (by default a SQLite file in .memorybook/ of the
nearest folder holding a pyproject.toml, else the working one) and MEMORYBOOK_STORE_KEY
(PostgreSQL needs it; SQLite makes a key file beside the database and logs where: back it up with
it); MEMORYBOOK_MAX_IN_FLIGHT, MEMORYBOOK_TIMEOUT_SECONDS and the service's own.
- It asks Jev live or replays a recording, never records: that would keep each ticket's words
  in the recording, in clear, so a start in record mode is refused.
- Replicas share a PostgreSQL store; a process holds at most twice MEMORYBOOK_MAX_IN_FLIGHT
  connections for customers' turns (memorybook/store/turns.py) and one for its store: 17 by
  default. A SQLite file takes one process: a second, or `uvicorn --workers 2`, is refused at
  startup (uvicorn then exits 0 after stopping the first).
- A request takes at most about twice MEMORYBOOK_TIMEOUT_SECONDS, plus that again when it
  waits for the customer's earlier calls: its turn, then a slot to Jev, then the call, each
  bounded. Set a proxy's time-outs and a shutdown's grace above that.
- SIGTERM stops taking requests, runs the pending gates and exits with 143 (uvicorn re-raises
  the signal); a gate killed before its end runs on the next start.
- `GET /health` reads no store: it says the process answers, not that its store does.
- uvicorn times out neither slow bodies nor idle connections: put a reverse proxy in front.
  Behind one on this machine, the service sees itself reached on loopback, so set
  MEMORYBOOK_SERVICE_TOKEN there too.
- A memory changed or damaged outside the service stops its customer's calls and reads with a
  409 naming its ticket, until that ticket's memories (or the customer's) are erased.
- A gate that fails (its call to Jev, say) is logged and its memory not kept; it is not
  retried. A ticket posted again once its gate kept it (a client's retry) is asked as the first
  time, with the memories saved before its own, and not gated again (memorybook/wrapper.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta
from typing import Annotated, Any
from urllib.parse import quote

try:
    from fastapi import FastAPI, HTTPException, Path, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.openapi.utils import get_openapi
    from fastapi.responses import JSONResponse
except ModuleNotFoundError as missing:  # an install without the extra
    raise ModuleNotFoundError(
        f"memorybook.service needs FastAPI ({missing.name} is missing), which memorybook's "
        "`service` extra brings: pip install 'memorybook[service]' (from a clone: "
        "'path/to/clone[service]').", name=missing.name) from None
from typesafe_sdk import (
    SystemOneResponse,
    TypeSafeAPIConnectionError,
    TypeSafeAPIError,
    TypeSafeAPIResponseValidationError,
    TypeSafeAPITimeoutError,
    TypeSafeError,
)

from memorybook.api_errors import CallTimeoutError, describe_api_failure
from memorybook.example import ROUTE
from memorybook.gates import PendingGates, WaitedTooLong
from memorybook.in_flight import AskAsync, InFlight
from memorybook.memory import StateError
from memorybook.recording import RecordingError
from memorybook.redaction import redact
from memorybook.replay import RecordingMissError
from memorybook.service_guard import HEALTH_PATH, Guard
from memorybook.service_models import (
    BODY_ANSWERS,
    CUSTOMER_ID_PATTERN,
    CUSTOMER_ID_RULE,
    DAMAGED,
    GUARD_ANSWERS,
    NOT_REMEMBERED,
    CustomerHistory,
    CustomerMemories,
    Erased,
    Health,
    TicketState,
    first_error,
    flat,
    one_line,
    read_ticket_state,
    refused_id,
)
from memorybook.service_settings import jev_to_serve
from memorybook.settings import NeverType, Settings
from memorybook.store import (
    DamagedMemoryError,
    MemoryNotFoundError,
    MemoryStoreError,
    StoreInputError,
    open_store,
)
from memorybook.store.turns import CustomerTurns
from memorybook.store.validation import NOT_BLANK_PATTERN, shown
from memorybook.wrapper import (
    ask_with_memory_async,
    recover_abandoned_gates,
    recover_gates,
)

# How often the service looks for gates that a stopped process left pending (it looks at
# startup too); a customer's own calls run theirs first, whenever they come.
RECOVERY_INTERVAL_SECONDS = 30.0
# A 503 for a wait that ran out or a store that failed: worth trying again in a second.
RETRY_SOON = {"Retry-After": "1"}

log = logging.getLogger("memorybook")

CustomerInPath = Annotated[str, Path(pattern=CUSTOMER_ID_PATTERN, description=CUSTOMER_ID_RULE)]
TicketInPath = Annotated[str, Path(pattern=NOT_BLANK_PATTERN, description=(
    "The id of the ticket whose memories go, as POST /tickets had it: not blank."))]


def create_app(store_url: str | None = None, *, retention: timedelta | NeverType | None = None,
               ask: AskAsync | None = None, settings: Settings | None = None,
               store_options: dict[str, Any] | None = None,
               questions: dict | None = None) -> FastAPI:
    """The memory service. At startup it opens its store (`store_url`, else
    the settings', else the SQLite default) with `retention` (memories older than that expire;
    NEVER: kept until erased; None: the settings') and `store_options`
    (open_store()'s other arguments: timeout=, clock=, ...); on PostgreSQL each customer's turn
    is held across processes too. `ask` is what asks Jev: by default `jev_to_serve().ask_async`
    (memorybook/service_settings.py: live with a key, else replaying a recording read here; a
    recording that cannot be used raises RecordingError, record mode ConfigError); a stand-in
    in a unit test. `settings` (memorybook/settings.py): who may reach it, body limit, sweep
    interval, store, key, time limits (by default the environment's, read now). `questions`:
    what POST asks Jev about each ticket, and answers with (by default the example's ROUTE)."""
    questions = ROUTE if questions is None else questions
    settings = settings or Settings.from_environment()
    retention = retention if retention is not None else settings.retention
    store_options = dict(store_options or {})
    if ask is None:  # a recording that cannot be used stops the start, not each request
        ask = jev_to_serve(settings).ask_async

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        url = store_url or settings.store_url or ""
        shared = url.lower().startswith(("postgresql:", "postgres:"))
        # A request waits for its customer's turn, and then for a slot to Jev, each at most as
        # long as a live call may take (WaitedTooLong: a 503).
        app.state.wait_at_most = settings.timeout_seconds
        # At most settings.max_in_flight requests to Jev at once, replies' before gates'
        in_flight = InFlight(settings.max_in_flight, wait_at_most=app.state.wait_at_most)
        app.state.ask, app.state.ask_gate = in_flight.routing(ask), in_flight.gating(ask)
        log_where_uvicorn_logs()
        app.state.memories = await asyncio.to_thread(open_store, url or None, retention=retention,
                                                     settings=settings, **store_options)
        for notice in getattr(app.state.memories, "notices", ()):  # a new key file, say
            log.info("the memory store: %s", one_line(notice))
        try:
            serving = app.state.memories.serving_alone()  # one process per SQLite file
            serving.__enter__()
        except BaseException:
            await asyncio.to_thread(app.state.memories.close)
            raise
        # A turn is a connection (memorybook/store/turns.py): room for every customer with a
        # request in flight and as many waiting for a slot.
        turns = CustomerTurns(url, at_most=2 * settings.max_in_flight, **store_options)
        app.state.gates = PendingGates(turns if shared else None)
        background = [
            asyncio.create_task(recover_abandoned_gates(
                app.state.memories, app.state.gates, ask=app.state.ask_gate,
                every=RECOVERY_INTERVAL_SECONDS)),
            asyncio.create_task(sweep_on_schedule(app.state.memories, settings.sweep_every)),
        ]
        try:
            yield
        finally:
            for task in background:  # a gate recovery had begun stays recorded: it runs later
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await app.state.gates.drain()
            await asyncio.to_thread(app.state.memories.close)
            serving.__exit__(None, None, None)
            if shared:
                await asyncio.to_thread(app.state.gates.turns.close)

    # A path with a trailing slash is a 404 in one line, not an empty 307 to the path without.
    app = FastAPI(title="Jev memory service", lifespan=lifespan, redirect_slashes=False,
                  description=f"Routes tickets with a memory per customer; {CUSTOMER_ID_RULE}.")

    @app.post("/tickets", response_model=None,
              responses={200: {"model": SystemOneResponse,
                               "description": "Jev's routing answer, before the gate."},
                         **GUARD_ANSWERS, **BODY_ANSWERS, 409: DAMAGED},
              openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
                  "schema": {"$ref": "#/components/schemas/TicketState"}}}}})
    async def route_ticket(request: Request) -> JSONResponse:
        state = await read_ticket_state(request)
        try:
            response = await ask_with_memory_async(
                state, questions, request.app.state.memories, gates=request.app.state.gates,
                ask=request.app.state.ask, ask_gate=request.app.state.ask_gate,
                wait_at_most=request.app.state.wait_at_most)
        except WaitedTooLong as error:
            return JSONResponse({"detail": str(error)}, status_code=503, headers=RETRY_SOON)
        except (StateError, StoreInputError) as refused:  # before asking: over 1 MB, say
            return JSONResponse({"detail": f"the state cannot be kept as a memory: "
                                           f"{one_line(refused)}"}, status_code=422)
        except RecordingMissError as miss:  # logged by ids: a ticket's words stay out of logs
            log.warning("routing ticket %s of customer %s: the recording has no answer to it, "
                        "and nothing was sent", shown(state["ticket"]["id"]),
                        state["customer"]["id"])
            return JSONResponse({"detail": flat(miss.summary),
                                 "likely_causes": [flat(reason) for reason in miss.reasons],
                                 "how_to_record": flat(miss.how_to_record)}, status_code=503)
        except RecordingError as error:  # e.g. record mode, and its answer could not be kept
            log.error("routing ticket %s of customer %s failed: %s", shown(state["ticket"]["id"]),
                      state["customer"]["id"], one_line(error.logged))  # by ids, no words
            return JSONResponse({"detail": f"the recording failed: {one_line(error)}"},
                                status_code=503)
        except DamagedMemoryError as error:
            return JSONResponse({"detail": damaged(error)}, status_code=409)
        except MemoryStoreError as error:
            return JSONResponse({"detail": store_failed(error)}, status_code=503,
                                headers=RETRY_SOON)
        except TypeSafeError as error:
            # What failed, redacted, for whoever runs the service, without what the API said,
            # which may quote the ticket; the client gets no endpoint, header or text of the
            # upstream's either.
            log.error("routing ticket %s of customer %s failed: %s",
                      shown(state["ticket"]["id"]), state["customer"]["id"],
                      " ".join(describe_api_failure(error, quoting_the_api=False,
                                                    settings=settings).splitlines()))
            return JSONResponse({"detail": jev_failed(error)}, status_code=502)
        return JSONResponse(response.model_dump(mode="json"))

    @app.get("/customers/{customer}/memories", response_model=CustomerMemories,
             response_model_exclude_unset=True, responses={**GUARD_ANSWERS, 409: DAMAGED})
    async def memories_of(customer: CustomerInPath, request: Request):
        saved = await in_turn(request, "recall", customer)
        return {"customer_id": customer, "memories": saved}

    @app.delete("/customers/{customer}/memories", response_model=Erased,
                responses=GUARD_ANSWERS)
    async def erase(customer: CustomerInPath, request: Request):
        erased = await in_turn(request, "forget_customer", customer)
        return {"erased": len(erased) + getattr(erased, "unreadable", 0)}

    @app.delete("/customers/{customer}/memories/{ticket:path}", response_model=Erased,
                responses={**GUARD_ANSWERS, 404: NOT_REMEMBERED})
    async def forget_ticket(customer: CustomerInPath, ticket: TicketInPath, request: Request):
        erased = await in_turn(request, "forget", customer, ticket)
        return {"erased": len(erased) + getattr(erased, "unreadable", 0)}

    @app.get("/customers/{customer}/history", response_model=CustomerHistory,
             responses=GUARD_ANSWERS)
    async def history_of(customer: CustomerInPath, request: Request):
        events = await in_turn(request, "history", customer)
        return {"customer_id": customer, "events": [event._asdict() for event in events]}

    @app.get(HEALTH_PATH, response_model=Health, openapi_extra={"security": []},
             responses={413: GUARD_ANSWERS[413]})
    async def health():
        return {"status": "ok"}

    @app.exception_handler(RequestValidationError)
    async def refused(request: Request, invalid: RequestValidationError) -> JSONResponse:
        first = invalid.errors()[0]
        if tuple(first["loc"]) == ("path", "customer"):
            return JSONResponse({"detail": refused_id(first.get("input"))}, status_code=422)
        return JSONResponse({"detail": first_error(invalid.errors(), "")}, status_code=422)

    def openapi() -> dict:
        """FastAPI's schema, with POST's body (read by read_ticket_state(), not by FastAPI) and,
        when a token is set, the bearer scheme every operation needs."""
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version,
                                 description=app.description, routes=app.routes)
            body = TicketState.model_json_schema(ref_template="#/components/schemas/{model}")
            components = schema.setdefault("components", {})
            components.setdefault("schemas", {}).update(body.pop("$defs", {}),
                                                        TicketState=body)
            if settings.token is not None:
                components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
                schema["security"] = [{"bearer": []}]
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi
    app.add_middleware(Guard, settings=settings, methods_at=lambda path: methods_at(app, path))
    return app


def methods_at(app: FastAPI, path: str) -> set[str]:
    """Every method the app's routes take at `path`, across all the routes matching it."""
    methods: set[str] = set()
    for route in app.router.routes:
        pattern = getattr(route, "path_regex", None)
        if pattern is not None and pattern.match(path) and getattr(route, "methods", None):
            methods |= route.methods
    return methods


def log_where_uvicorn_logs() -> None:
    """Under uvicorn's own logging set-up (no --log-config of the app's), the service's lines go
    where uvicorn's go, in its format, from INFO up: without this they reach stderr bare, and
    INFO not at all. Logging an app has set up, or none (a notebook), is left as it is."""
    ours, uvicorns = logging.getLogger("memorybook"), logging.getLogger("uvicorn")
    if ours.hasHandlers() or not uvicorns.handlers:
        return
    for handler in uvicorns.handlers:
        ours.addHandler(handler)
    if ours.level == logging.NOTSET:
        ours.setLevel(logging.INFO)


async def in_turn(request: Request, call: str, customer: str, *arguments: str):
    """The store's `call` for the customer (and `arguments`), in a worker thread, in the
    customer's turn: after every pending gate of theirs, here and in other processes, and any a
    stopped process left, so that no gate saves behind it. 404 if there is no such memory to
    forget; 409 if a memory it must read is damaged; 503 if the store fails or times out."""
    running = request.app.state
    try:
        async with running.gates.turn(customer, running.wait_at_most):
            await recover_gates(customer, running.memories, ask=running.ask_gate)
            return await asyncio.to_thread(getattr(running.memories, call), customer,
                                           *arguments)
    except MemoryNotFoundError:
        raise HTTPException(404, f"customer {customer} has no memory of ticket "
                                 f"{shown(arguments[0])}; nothing was erased.") from None
    except DamagedMemoryError as error:
        raise HTTPException(409, damaged(error)) from None
    except MemoryStoreError as error:
        raise HTTPException(503, store_failed(error), headers=RETRY_SOON) from None
    except WaitedTooLong as error:
        raise HTTPException(503, str(error), headers=RETRY_SOON) from None


def store_failed(error: MemoryStoreError) -> str:
    """A store failure's 503 in one line. What failed goes to the service's log, not to the
    client: it names the database, its host or its file."""
    log.error("the memory store failed: %s", one_line(redact(error)))
    return "the memory store failed: try again later; the service's log has the details."


def damaged(error: DamagedMemoryError) -> str:
    """A damaged memory's 409 in one line: which DELETE serves the customer again (a retry
    alone never will). The store's message, which names the database or file, is logged."""
    log.error("a memory cannot be read: %s", one_line(redact(error)))
    customer, ticket = error.customer_id, error.ticket_id
    if ticket is None:
        return (f"a memory of customer {customer} cannot be read (damaged), and neither can its "
                f"ticket id: erasing the customer's memories (DELETE /customers/{customer}/"
                "memories) or restoring the store from a backup serves them again; the "
                "service's log has the details.")
    segment = quote(ticket, safe="")  # a path segment of "." or ".." a client would collapse
    segment = segment.replace(".", "%2E") if segment in (".", "..") else segment
    path = f"/customers/{customer}/memories/{segment}"
    return (f"customer {customer}'s memory of ticket {shown(ticket)} cannot be read "
            f"(damaged): erasing it (DELETE {path}) serves the customer again; the service's log "
            "has the details.")


def jev_failed(error: TypeSafeError) -> str:
    """A 502's one line: what failed and, if the API answered, its HTTP status."""
    if isinstance(error, (CallTimeoutError, TypeSafeAPITimeoutError)):
        how = " (no answer in time)"
    elif isinstance(error, TypeSafeAPIConnectionError):
        how = " (could not connect to its API)"
    elif isinstance(error, TypeSafeAPIResponseValidationError):
        how = " (its API's answer could not be read)"
    elif isinstance(error, TypeSafeAPIError):
        how = f" (its API answered HTTP {error.status})"
    else:
        how = ""
    # A refused key or endpoint is the operator's to fix (the log says how); a request refused
    # as it is fails again unchanged; anything else may pass on a retry.
    status = error.status if isinstance(error, TypeSafeAPIError) else None
    then = ("whoever runs the service must fix it" if status in (401, 403, 404) else
            "retrying it unchanged will not help" if status in (400, 422) else "try again later")
    return f"asking Jev to route the ticket failed{how}: {then}; the service's log has the details."


async def sweep_on_schedule(memories, every: timedelta) -> None:
    """Delete expired memories every `every`, until cancelled (at shutdown). A sweep that fails
    is logged in one line, and the next one is tried all the same."""
    while True:
        await asyncio.sleep(every.total_seconds())
        try:
            swept = await asyncio.to_thread(memories.sweep)
        except Exception as error:  # the store may be down for a while: keep the service up
            log.error(one_line(redact(f"sweeping expired memories failed: "
                                      f"{type(error).__name__}: {error}")))
        else:
            if swept:
                log.info("swept %d expired memories", swept)
