"""create_app(): the service's routes on an AsyncMemory, behind the guard."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse

from memorybook.example import ROUTE
from memorybook.service.counting import RequestsCounted, requests_counter, route_template
from memorybook.service.logs import (
    RequestIds,
    log_as_settings_say,
    log_where_uvicorn_logs,
    refused_in_one_line,
)
from memorybook.service.routes import router
from memorybook.service_guard import Guard
from memorybook.service_models import CUSTOMER_ID_RULE, TicketState, first_error, refused_id
from memorybook.service_settings import jev_to_serve
from memorybook.serving import AsyncMemory
from memorybook.settings import NeverType, Settings


def create_app(store_url: str | None = None, *, retention: timedelta | NeverType | None = None,
               ask: Any = None, settings: Settings | None = None,
               store_options: dict[str, Any] | None = None,
               questions: dict | None = None) -> FastAPI:
    """The memory service, on an AsyncMemory started and stopped with it: its store at
    `store_url` (else the settings', else the SQLite default), with `retention` (None: the
    settings'; NEVER: kept until erased) and `store_options` (open_store()'s other arguments:
    timeout=, clock=, ...). `ask` is what asks Jev: by default `jev_to_serve()`
    (memorybook/service_settings.py: live with a key, else replaying a recording read here; a
    recording that cannot be used raises RecordingError, record mode ConfigError); a stand-in in
    a unit test. `settings` (memorybook/settings.py): who may reach it, body limit, sweep
    interval, store, key, time limits (by default the environment's, read now). `questions`:
    what POST asks Jev about each ticket (by default the example's ROUTE)."""
    with refused_in_one_line():  # under uvicorn; elsewhere raised (memorybook/service/logs.py)
        settings = settings or Settings.from_environment()
        log_as_settings_say(settings)  # before uvicorn logs its start
        memory = AsyncMemory(store_url, ask=jev_to_serve(settings) if ask is None else ask,
                             retention=retention, settings=settings, store_options=store_options)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        log_where_uvicorn_logs()
        async with memory:
            yield

    # A path with a trailing slash is a 404 in one line, not an empty 307 to the path without.
    app = FastAPI(title="Jev memory service", lifespan=lifespan, redirect_slashes=False,
                  description=f"Routes tickets with a memory per customer; {CUSTOMER_ID_RULE}.")
    app.state.memory, app.state.questions = memory, ROUTE if questions is None else questions
    app.include_router(router)
    app.add_exception_handler(RequestValidationError, refused)
    app.openapi = lambda: schema_of(app, bearer=settings.token is not None)
    app.add_middleware(Guard, settings=settings, methods_at=lambda path: methods_at(app, path))
    app.add_middleware(RequestsCounted, counter=requests_counter(memory.metrics.registry),
                       template_of=lambda path: route_template(routes_of(app.router), path))
    app.add_middleware(RequestIds)  # outside the guard: its refusals' lines carry the id too
    return app


async def refused(request: Request, invalid: RequestValidationError) -> JSONResponse:
    """A path or query FastAPI refuses, as a 422 in one line: a customer id by its rule."""
    first = invalid.errors()[0]
    if tuple(first["loc"]) == ("path", "customer"):
        return JSONResponse({"detail": refused_id(first.get("input"))}, status_code=422)
    return JSONResponse({"detail": first_error(invalid.errors(), "")}, status_code=422)


def schema_of(app: FastAPI, *, bearer: bool) -> dict:
    """FastAPI's schema, with POST's body (read by read_ticket_state(), not by FastAPI) and,
    with a token (`bearer`), the bearer scheme every operation needs."""
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, description=app.description,
                             routes=app.routes)
        body = TicketState.model_json_schema(ref_template="#/components/schemas/{model}")
        components = schema.setdefault("components", {})
        components.setdefault("schemas", {}).update(body.pop("$defs", {}), TicketState=body)
        if bearer:
            components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
            schema["security"] = [{"bearer": []}]
        app.openapi_schema = schema
    return app.openapi_schema


def methods_at(app: FastAPI, path: str) -> set[str]:
    """Every method the app's routes take at `path`, across all the routes matching it (those
    of an included router too): on every request, so by each route's own pattern."""
    methods: set[str] = set()
    for route in routes_of(app.router):
        if route.path_regex.match(path):
            methods |= route.methods
    return methods


def routes_of(router) -> list:
    """The routes with paths and methods under `router`, an included router's among them."""
    found = []
    for route in router.routes:
        if hasattr(route, "original_router"):  # FastAPI keeps an included router's routes there
            found += routes_of(route.original_router)
        elif getattr(route, "methods", None) and hasattr(route, "path_regex"):
            found.append(route)
    return found

