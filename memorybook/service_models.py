"""The service's contract: the rule for customer ids, and a typed model for the body of every
request and answer, as its OpenAPI schema (`/openapi.json`) shows them.

A customer id travels in a URL path (`/customers/{id}/memories`), so the service takes only the
ids every client can put there and the routes can read back: `CUSTOMER_ID_RULE`. POST refuses
any other with 422 naming the rule, so every memory it files is reachable by GET and DELETE.
`read_ticket_state()` reads POST's body: JSON only (415), in UTF-8 without a byte order mark
(RFC 8259), within the nesting a memory may hold and the digits Python reads, UTF-8 throughout
(no lone surrogate), each object naming a key once, shaped as `TicketState`; each refusal is one
line.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import math
import re
import sys
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from starlette.requests import ClientDisconnect

from memorybook.example import later_state
from memorybook.memory import MEMORY_KEY
from memorybook.readiness import READY_WITHIN_SECONDS
from memorybook.store.retention import EVENTS
from memorybook.store.validation import (
    MAX_MEMORY_NESTING,
    NOT_BLANK_PATTERN,
    shown,
)

CUSTOMER_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"
CUSTOMER_ID_RULE = ("a customer id is 1 to 128 characters of ASCII letters, digits and . _ : @ -, "
                    "the first a letter or digit")
_CUSTOMER_ID = re.compile(CUSTOMER_ID_PATTERN.removeprefix("^").removesuffix("$"))
# A memory is {"request": state, ...}: one level more than the state it keeps.
MAX_STATE_NESTING = MAX_MEMORY_NESTING - 1
# Python's default limit: longer integers it neither reads nor writes unless told to, and
# reading one takes time that grows with the square of its digits.
MAX_INTEGER_DIGITS = 4300

CustomerId = Annotated[str, Field(pattern=CUSTOMER_ID_PATTERN, description=CUSTOMER_ID_RULE)]


def follows_the_id_rule(value: object) -> bool:
    return isinstance(value, str) and _CUSTOMER_ID.fullmatch(value) is not None


def refused_id(value: object) -> str:
    """The one-line reason a customer id is refused: the rule, and what came."""
    return f"customer id {shown(value)} refused: {CUSTOMER_ID_RULE}."


# -- requests ----------------------------------------------------------------------------------


class Customer(BaseModel):
    """Who the ticket is from; an app may add its own fields, which Jev reads too."""

    model_config = ConfigDict(extra="allow")
    id: CustomerId


class Ticket(BaseModel):
    """The ticket: its id, and whatever the app's helpdesk holds, which Jev reads (the
    example's: `received_on`, `subject`, and `messages`, each `{"from", "text"}`)."""

    model_config = ConfigDict(extra="allow")
    id: Annotated[str, Field(pattern=NOT_BLANK_PATTERN,
                             description="The ticket's id: not blank.")]


def _memories_are_the_services_to_add(schema: dict[str, Any]) -> None:
    schema["properties"][MEMORY_KEY] = {
        "not": {}, "description": "The service adds the customer's memories here; a request "
        "may not bring its own."}


# POST /tickets's example: the official page's T-201, its keys in the order a client sends them
# and the recording holds (pydantic would sort a model's examples: a call the recording lacks).
TICKET_EXAMPLE = later_state("C-1042", 0)


class TicketState(BaseModel):
    """What Jev reads about one ticket: the customer, the ticket, and any other fields the app
    sends. Nested at most MAX_STATE_NESTING levels."""

    model_config = ConfigDict(extra="allow", json_schema_extra=_memories_are_the_services_to_add)
    customer: Customer
    ticket: Ticket

    @model_validator(mode="before")
    @classmethod
    def brings_no_memories(cls, state: Any) -> Any:
        if isinstance(state, dict) and MEMORY_KEY in state:
            raise ValueError(f"{MEMORY_KEY} is the service's to fill with the customer's "
                             "memories; leave it out")
        return state


# -- answers -----------------------------------------------------------------------------------


class Problem(BaseModel):
    """Why a request was refused or could not be answered, in one line."""

    detail: str


class Unavailable(Problem):
    """503: the store failed or timed out; the request waited longer than a live call may take
    for its customer's earlier calls or for a request to Jev to end (try again); or (replaying
    without a key) Jev's answer is not in the recording: then what was missing, its likely
    causes and how to answer it (run the service live)."""

    likely_causes: list[str] | None = None
    how_to_answer: str | None = None


class Memory(BaseModel):
    """One memory: the request as it arrived, and Jev's answer to each of its questions."""

    model_config = ConfigDict(extra="allow")
    request: dict[str, Any]
    jev_answered: dict[str, Any] | None = None  # absent from a memory an app saved without it


class CustomerMemories(BaseModel):
    customer_id: str
    memories: list[Memory]


class Erased(BaseModel):
    erased: int = Field(description="How many of the customer's memories were erased, damaged "
                        "ones included.")


class Health(BaseModel):
    """The service is up and answering: what a load balancer's or an orchestrator's probe asks.
    It reads nothing, so it needs neither an allowed Host nor the token."""

    status: Literal["ok"]


class Ready(BaseModel):
    """The service can serve: its memory runs, is not stopping, and its store answered a check
    within seconds. What an orchestrator's readiness probe asks; like /health, it needs neither
    an allowed Host nor the token, and it says nothing more."""

    status: Literal["ready"]


NOT_READY = {"model": Problem, "description": "Not ready, with Retry-After: the memory store "
             f"did not answer a check within {READY_WITHIN_SECONDS:g} s (or has not answered "
             "the last one yet), it failed, or the service is stopping; the reason in one line."}


class HistoryEntry(BaseModel):
    """One thing that happened to one of a customer's memories: never its content."""

    event: Literal[EVENTS]  # type: ignore[valid-type]
    ticket_id: str | None = Field(description="None for a memory unreadable when it went.")
    at: datetime


class CustomerHistory(BaseModel):
    customer_id: str
    events: list[HistoryEntry]


# Statuses every route may answer, before it runs (memorybook/service_guard.py).
GUARD_ANSWERS = {
    400: {"model": Problem, "description": "The Host header names no host this service "
          "answers to (MEMORYBOOK_ALLOWED_HOSTS); or the client left before sending the whole "
          "body."},
    401: {"model": Problem, "description": "MEMORYBOOK_SERVICE_TOKEN is set and the request "
          "has no `Authorization: Bearer` with it."},
    403: {"model": Problem, "description": "The request came from beyond this machine and no "
          "MEMORYBOOK_SERVICE_TOKEN is set."},
    413: {"model": Problem, "description": "The request's Content-Length is over "
          "MEMORYBOOK_MAX_BODY_BYTES (1,000,000 by default)."},
    422: {"model": Problem, "description": "A customer id that breaks the rule, or a body the "
          "service does not take; the reason in one line."},
    503: {"model": Unavailable, "description": "The memory store failed or did not answer in "
          "time, or the request waited MEMORYBOOK_TIMEOUT_SECONDS for the customer's earlier "
          "calls or for a request to Jev to end (both with Retry-After); or, replaying without "
          "a key, Jev's answer is not in the recording."},
}
DAMAGED = {"model": Problem, "description": "A memory of the customer's was changed or damaged "
           "outside the service and cannot be read, so nothing was asked; the line names its "
           "ticket when the store can read that. Erasing that ticket's memories, or the "
           "customer's, serves the customer again."}
NOT_REMEMBERED = {"model": Problem, "description": "The customer has no memory of that ticket "
                  "(ids are matched exactly, case and spaces included); nothing was done."}
BODY_ANSWERS = {
    413: {"model": Problem, "description": "The body is larger than MEMORYBOOK_MAX_BODY_BYTES "
          "(1,000,000 by default)."},
    415: {"model": Problem, "description": "The body was not sent as JSON (Content-Type: "
          "application/json), or was sent compressed (Content-Encoding)."},
    502: {"model": Problem, "description": "A live call to Jev failed or timed out: what "
          "failed, and the API's HTTP status; the service's log has the details."},
}


# -- reading POST's body -----------------------------------------------------------------------


def _not_json(constant: str) -> None:
    raise ValueError(f"{constant} is not a JSON value")


class _NumberNotRead(ValueError):
    """A number in the body the service does not read; the message says why."""


def _integer(digits: str) -> int:
    limit = min(MAX_INTEGER_DIGITS, sys.get_int_max_str_digits() or MAX_INTEGER_DIGITS)
    if len(digits.removeprefix("-")) > limit:
        raise _NumberNotRead(f"a number in the body has more than the {limit:,} digits this "
                             "service reads; send longer numbers as strings.")
    return int(digits)


def _real(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999: JSON has no infinity, and a memory could not hold it
        raise _NumberNotRead(f"the number {shown(text)} in the body is beyond what a float "
                             "holds; send it as a string.")
    return value


def utf8_text(body: bytes) -> str:
    """The body as text, or HTTPException 422: JSON between systems is UTF-8 (RFC 8259), and
    json.loads() of the bytes would take UTF-16 or UTF-32 too, and skip a BOM."""
    if body.startswith(codecs.BOM_UTF8) or body[:2] in (codecs.BOM_UTF16_LE,
                                                        codecs.BOM_UTF16_BE):
        why = "it starts with a byte order mark"
    elif b"\0" in body:  # never in JSON, whose strings escape it; in UTF-16 and UTF-32, often
        why = "it holds NUL bytes, as UTF-16 and UTF-32 text does"
    else:
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError as error:
            why = f"byte {body[error.start]:#04x} at position {error.start:,} is not UTF-8"
    raise HTTPException(422, f"the body must be JSON in UTF-8, without a byte order mark: "
                             f"{why}.")


def _json_kind(value: object) -> str:
    """What a decoded JSON value is, in JSON's words."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    kinds = {str: "a string", int: "a number", float: "a number", list: "an array"}
    return next((kind for type_, kind in kinds.items() if isinstance(value, type_)), "an object")


def nesting(value: object) -> int:
    """How many levels of dicts and lists a decoded JSON value nests (0 for a plain value)."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, level = pending.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, level)
            pending.extend((child, level + 1) for child in item)
    return deepest


def is_json(content_type: str) -> bool:
    media = content_type.partition(";")[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json"))


async def read_ticket_state(request: Request) -> dict:
    """POST's body as a state, or HTTPException 415 or 422 saying in one line why not (400 if
    the client left mid-body). Only the bytes the guard lets through are read (413 beyond
    MEMORYBOOK_MAX_BODY_BYTES)."""
    content_type = request.headers.get("content-type", "")
    if not is_json(content_type):
        sent = f"not {shown(content_type)}" if content_type else "not without a Content-Type"
        raise HTTPException(415, f"send the state as JSON, with Content-Type: application/json "
                                 f"({sent}).")
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding != "identity":  # a compressed body, which this service does not decode
        raise HTTPException(415, f"send the state uncompressed (not Content-Encoding: "
                                 f"{shown(encoding)}).")
    try:
        body = await request.body()
    except ClientDisconnect:  # the client's doing, which anyone may repeat: no traceback
        raise HTTPException(400, "the client disconnected before sending the whole body; "
                                 "nothing was done.") from None
    # Reading a body of a megabyte may take a second or two: in a worker thread, so that the
    # event loop still serves every other request meanwhile.
    return await asyncio.to_thread(state_of, body)


def state_of(body: bytes) -> dict:
    """A POST body as a state, or HTTPException 422 saying in one line why not."""
    too_deep = HTTPException(422, f"the body nests more than {MAX_STATE_NESTING} levels of "
                                  "objects and arrays, more than a memory may hold.")
    text = utf8_text(body)
    repeated: dict[int, str] = {}  # id() of each object that names a key twice: that key

    def object_of(pairs: list[tuple[str, Any]]) -> dict:
        made = dict(pairs)
        if len(made) < len(pairs):
            seen: set[str] = set()
            repeated[id(made)] = next(key for key, _ in pairs if key in seen or seen.add(key))
        return made

    try:
        state = json.loads(text, parse_constant=_not_json, parse_int=_integer, parse_float=_real,
                           object_pairs_hook=object_of)
    except RecursionError:
        raise too_deep from None
    except _NumberNotRead as error:
        raise HTTPException(422, str(error)) from None
    except ValueError as error:  # not JSON
        raise HTTPException(422, f"the body is not JSON ({one_line(error)})") from None
    if nesting(state) > MAX_STATE_NESTING:
        raise too_deep
    if repeated:  # else one of the two would be taken silently: json.loads() keeps the last
        raise HTTPException(422, _repeated_key(state, repeated))
    if not isinstance(state, dict):
        raise HTTPException(422, f"the body must be a JSON object, the state; got "
                                 f"{_json_kind(state)}.")
    customer = state.get("customer")
    if isinstance(customer, dict) and "id" in customer:
        if not follows_the_id_rule(customer["id"]):
            raise HTTPException(422, refused_id(customer["id"]))
    else:
        got = ("no `customer`" if "customer" not in state else "an object without `id`"
               if isinstance(customer, dict) else _json_kind(customer))
        raise HTTPException(422, "the state's `customer` must be an object holding the "
                                 f'customer\'s `id`, as {{"customer": {{"id": "C-1042"}}}}; '
                                 f"got {got}.")
    try:
        json.dumps(state, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise HTTPException(422, "the body holds a lone surrogate (an unpaired \\ud800-\\udfff "
                                 "escape), which is no text and cannot be stored.") from None
    try:
        TicketState.model_validate(state)
    except ValidationError as invalid:
        raise HTTPException(422, first_error(invalid.errors(), "the state's ")) from None
    return state


def _repeated_key(state: object, repeated: dict[int, str]) -> str:
    """The 422's line for a body with an object that names a key twice: the key, and where the
    first such object is (read in the body's order)."""
    pending: list[tuple[object, str]] = [(state, "")]
    while pending:
        item, where = pending.pop()
        if id(item) in repeated and isinstance(item, dict):
            # `where` is ASCII, and escaped (_step()): one line, cut short if long
            at = f"in `{where[:100]}{'...' if len(where) > 100 else ''}`" if where else (
                "at the top level")
            return (f"the body names the key {shown(repeated[id(item)])} more than once {at}: "
                    "send each key of an object once.")
        if isinstance(item, dict):
            pending.extend(reversed([(value, _step(where, key)) for key, value in item.items()]))
        elif isinstance(item, list):
            pending.extend(reversed([(value, f"{where}[{index}]")
                                     for index, value in enumerate(item)]))
    return "the body names a key more than once in an object: send each key of an object once."


def _step(where: str, key: str) -> str:
    """The path `where`, then the key `key`: `.name`, or `["what ever"]` for another key."""
    if key.isidentifier() and key.isascii():
        return f"{where}.{key}" if where else key
    return f"{where}[{json.dumps(key)}]"


def first_error(errors: list, what: str) -> str:
    """Pydantic's first complaint in one line: where, and what is wrong there."""
    first = errors[0]
    where = ".".join(map(str, first["loc"]))
    message = one_line(first["msg"]).removeprefix("Value error, ")
    if (first.get("ctx") or {}).get("pattern") == NOT_BLANK_PATTERN:  # a regex says little
        message = f"must not be blank; got {shown(first.get('input'))}"
    return f"{what}{where}: {message}." if where else f"{message}."


def one_line(message: object) -> str:
    return (str(message).splitlines() or [""])[0]


def flat(text: str) -> str:
    """`text` on one line, whole: its line breaks (a ticket's id may hold some) made spaces."""
    return " ".join(text.splitlines())
