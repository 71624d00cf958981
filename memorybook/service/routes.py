"""The service's routes, each a call on the app's AsyncMemory (memorybook/serving.py): its
request typed, its answers listed in the OpenAPI schema with the models of
memorybook/service_models.py, its failures answered by memorybook/service/failures.py.

A new route goes here, with every status it may answer in its `responses` (the guard's, in
GUARD_ANSWERS, come first); tests/test_service_http.py reads them from the app.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Request
from fastapi.responses import JSONResponse, Response
from typesafe_sdk import SystemOneResponse

from memorybook.service.failures import RETRY_SOON, answered, routing_failed
from memorybook.service_guard import HEALTH_PATH, READY_PATH
from memorybook.service_models import (
    BODY_ANSWERS,
    CUSTOMER_ID_PATTERN,
    CUSTOMER_ID_RULE,
    DAMAGED,
    GUARD_ANSWERS,
    NOT_READY,
    NOT_REMEMBERED,
    TICKET_EXAMPLE,
    CustomerHistory,
    CustomerMemories,
    Erased,
    Health,
    Ready,
    read_ticket_state,
)
from memorybook.serving import AsyncMemory
from memorybook.store.validation import NOT_BLANK_PATTERN, shown


async def held_memory(request: Request) -> AsyncMemory:
    """The app's memory, started by its lifespan (async: a plain function would be run in a
    worker thread on every request)."""
    return request.app.state.memory


async def questions_asked(request: Request) -> dict:
    """What POST /tickets asks Jev about each ticket (create_app's `questions`)."""
    return request.app.state.questions


HeldMemory = Annotated[AsyncMemory, Depends(held_memory)]
Questions = Annotated[dict, Depends(questions_asked)]
CustomerInPath = Annotated[str, Path(pattern=CUSTOMER_ID_PATTERN, description=CUSTOMER_ID_RULE)]
TicketInPath = Annotated[str, Path(pattern=NOT_BLANK_PATTERN, description=(
    "The id of the ticket whose memories are meant, as POST /tickets had it: not blank."))]

router = APIRouter()


@router.post("/tickets", response_model=None,
             responses={200: {"model": SystemOneResponse,
                              "description": "Jev's routing answer, before the gate."},
                        **GUARD_ANSWERS, **BODY_ANSWERS, 409: DAMAGED},
             openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
                 "schema": {"$ref": "#/components/schemas/TicketState"},
                 "example": TICKET_EXAMPLE}}}})
async def route_ticket(request: Request, memory: HeldMemory,
                       questions: Questions) -> JSONResponse:
    state = await read_ticket_state(request)  # read here: its errors are the service's own
    try:
        response = await memory.ask(state, questions)
    except Exception as error:  # noqa: BLE001 - what the service does not answer is re-raised
        return routing_failed(error, state, memory.settings)
    return JSONResponse(response.model_dump(mode="json"))


@router.get("/customers/{customer}/memories", response_model=CustomerMemories,
            response_model_exclude_unset=True, responses={**GUARD_ANSWERS, 409: DAMAGED})
async def memories_of(customer: CustomerInPath, memory: HeldMemory) -> dict:
    return {"customer_id": customer, "memories": await answered(memory.memories(customer))}


@router.delete("/customers/{customer}/memories", response_model=Erased,
               responses=GUARD_ANSWERS)
async def erase(customer: CustomerInPath, memory: HeldMemory) -> dict:
    erased = await answered(memory.forget_customer(customer))
    return {"erased": len(erased) + getattr(erased, "unreadable", 0)}


@router.get("/customers/{customer}/memories/{ticket:path}", response_model=CustomerMemories,
            response_model_exclude_unset=True,
            responses={**GUARD_ANSWERS, 404: NOT_REMEMBERED, 409: DAMAGED})
async def memories_of_ticket(customer: CustomerInPath, ticket: TicketInPath,
                             memory: HeldMemory) -> dict:
    saved = await answered(memory.memories(customer, ticket))
    if not saved:
        raise HTTPException(404, f"customer {customer} has no memory of ticket {shown(ticket)}.")
    return {"customer_id": customer, "memories": saved}


@router.delete("/customers/{customer}/memories/{ticket:path}", response_model=Erased,
               responses={**GUARD_ANSWERS, 404: NOT_REMEMBERED})
async def forget_ticket(customer: CustomerInPath, ticket: TicketInPath,
                        memory: HeldMemory) -> dict:
    erased = await answered(memory.forget(customer, ticket), not_found=(
        f"customer {customer} has no memory of ticket {shown(ticket)}; nothing was erased."))
    return {"erased": len(erased) + getattr(erased, "unreadable", 0)}


@router.get("/customers/{customer}/history", response_model=CustomerHistory,
            responses=GUARD_ANSWERS)
async def history_of(customer: CustomerInPath, memory: HeldMemory) -> dict:
    events = await answered(memory.history(customer))
    return {"customer_id": customer, "events": [event._asdict() for event in events]}


@router.get(HEALTH_PATH, response_model=Health, openapi_extra={"security": []},
            responses={413: GUARD_ANSWERS[413]})
async def health() -> dict:
    return {"status": "ok"}


@router.get(READY_PATH, response_model=Ready, openapi_extra={"security": []},
            responses={413: GUARD_ANSWERS[413], 503: NOT_READY})
async def ready(memory: HeldMemory) -> dict:
    readiness = await memory.ready()
    if not readiness:
        raise HTTPException(503, readiness.reason, headers=RETRY_SOON)
    return {"status": "ready"}


@router.get("/metrics", response_class=Response, responses={
    200: {"description": "What the service has done, in Prometheus's text format "
          "(memorybook/metrics.py lists each metric): no customer id or ticket words.",
          "content": {"text/plain": {"schema": {"type": "string"}}}},
    **{status: GUARD_ANSWERS[status] for status in (400, 401, 403, 413)}})
async def metrics(memory: HeldMemory) -> Response:
    body, content_type = memory.metrics.exposition()
    return Response(body, media_type=content_type)
