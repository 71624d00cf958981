"""The service's HTTP contract, in process (memorybook/service/, service_guard.py,
service_models.py, service_settings.py): bad input is refused in one line and never gets a 500,
only loopback hosts (or named ones) and, with a token, only its bearers are answered, a body is
read only up to its limit and only as JSON, a failing store is a 503, every status is in the
OpenAPI schema, and memories expire and are swept, with their history, over HTTP.
Jev's answers here are a stand-in's, made up by each test. The same service over a loopback
port, fuzzed: tests/test_service_contract.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import signal
import socket
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import httpx2
import pytest
from asgi_lifespan import LifespanManager
from typesafe_sdk import (
    TypeSafeAPIConnectionError,
    TypeSafeAuthenticationError,
    TypeSafeBadRequestError,
    TypeSafeInternalServerError,
)

from memorybook import MadeUpJev, MemoryStoreError
from memorybook.api_errors import CallTimeoutError
from memorybook.config import ConfigError
from memorybook.memory import InMemoryMemories
from memorybook.recording import RecordingError
from memorybook.replay import RecordingMissError
from memorybook.service import create_app
from memorybook.service_settings import main as service_settings_main
from memorybook.settings import Settings
from tests.helpers import REPO_ROOT, serving_alone_noted, serving_alone_refused, talk

JSON = {"Content-Type": "application/json"}
TOKEN = "service-canary-token-7c41e9d2"
RULE = "1 to 128 characters of ASCII letters, digits and . _ : @ -"


def made_up(state: dict, questions: dict) -> dict:
    """Every ticket routed "general", and kept by the gate."""
    return {"remember": 0.9} if "remember" in questions else {"team": "general"}


def ticket(customer: str = "C-1042", ticket_id: str = "T-901") -> dict:
    return {"customer": {"id": customer}, "ticket": {
        "id": ticket_id, "received_on": "2026-10-02", "subject": "Question",
        "messages": [{"from": "customer", "text": "We self-host on Linux."}]}}


def service(tmp_path, **options):
    jev = MadeUpJev(made_up)
    return create_app(f"sqlite:///{tmp_path / 'store.sqlite3'}", ask=jev.ask_async,
                      **options), jev


def one_line(answer: httpx2.Response, status: int, where: str) -> str:
    """The answer's detail, checked to be `status` with one line of JSON."""
    assert answer.status_code == status, (
        f"{answer.request.method} {answer.request.url.path}: {answer.status_code} "
        f"{answer.text[:300]}, expected {status}: {where}")
    assert answer.headers["content-type"].startswith("application/json"), answer.headers
    detail = answer.json()["detail"]
    assert isinstance(detail, str) and detail and "\n" not in detail, (
        f"the {status}'s detail must be one line: {detail!r}")
    return detail


def nested(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


BAD_BODIES = {
    "malformed JSON": b"{not json",
    "JSON nested 2,000 deep": ("[" * 2000 + "]" * 2000).encode(),
    "a state nested 2,000 deep": json.dumps(ticket())[:-1].encode()
    + b', "extra": ' + nested(2000).encode() + b"}",
    "a state nested 120 deep": json.dumps(ticket())[:-1].encode()
    + b', "extra": ' + nested(120).encode() + b"}",
    "NaN": json.dumps(ticket())[:-1].encode() + b', "score": NaN}',
    "a 5,000-digit number": json.dumps(ticket())[:-1].encode() + b', "n": ' + b"7" * 5000
    + b"}",
    "a lone surrogate in the text": json.dumps(ticket()).replace(
        "Linux", "Linux \\udc80").encode(),
    "a ticket that is a string": json.dumps({**ticket(), "ticket": "T-901"}).encode(),
    "no ticket id": json.dumps({**ticket(), "ticket": {"subject": "x"}}).encode(),
    "memories of its own": json.dumps(
        {**ticket(), "earlier_tickets_from_this_customer": [{"request": {}}]}).encode(),
    "no customer": json.dumps({"ticket": {"id": "T-1"}}).encode(),
    "a list": b'["C-1042"]',
}
REFUSED_IDS = ["", " ", "  \t", "\n", "\u00a0", "/", "a/b", "%2F", "C%2F1", "\ud800",
               "C-1\udc00", "é", "a b", "C-1042\n", ".", "..", "-x", "A" * 129, 1042, None]


@pytest.mark.parametrize("what", list(BAD_BODIES))
def test_a_bad_body_gets_422_in_one_line_and_reaches_neither_jev_nor_the_store(
        tmp_path, what):
    app, jev = service(tmp_path)

    async def requests(http):
        answer = await http.post("/tickets", content=BAD_BODIES[what], headers=JSON)
        return answer, await http.get("/customers/C-1042/history")

    answer, history = talk(app, requests)
    one_line(answer, 422, f"POST /tickets with {what} (read_ticket_state() in "
                          "memorybook/service_models.py)")
    assert jev.calls == [] and history.json()["events"] == [], (
        f"POST /tickets with {what} asked Jev or filed a memory")


# What a 422 must say, in the service's words: never Python's advice, nor a misleading guess.
SAID = {
    "a 5,000-digit number": (BAD_BODIES["a 5,000-digit number"], "more than the 4,300 digits"),
    "a number past a float's range": (json.dumps(ticket())[:-1] + ', "n": 1e999}',
                                      "beyond what a float holds"),
    "a customer that is a string": (json.dumps({"customer": "C-1", "ticket": {"id": "T"}}),
                                    "`customer` must be an object holding the customer's `id`"),
    "a customer without an id": (json.dumps({"customer": {"name": "Zoë"}, "ticket": {"id": "T"}}),
                                 "`customer` must be an object holding the customer's `id`"),
    "a 129-character id": (json.dumps(ticket("A" * 129)), "(129 characters)"),
    "no customer": (json.dumps({"ticket": {"id": "T-1"}}), "`customer` must be an object "
                    "holding the customer's `id`, as {\"customer\": {\"id\": \"C-1042\"}}; got no"),
    "a list": (b'["C-1042"]', "the body must be a JSON object, the state; got an array."),
}
NEVER_SAID = ["sys.", "set_int_max_str_digits", "integer string conversion", "got keys",
              "(131 characters)", "ask_with_memory()"]


@pytest.mark.parametrize("what", list(SAID))
def test_a_422_says_what_is_wrong_with_the_body_in_the_services_words(tmp_path, what):
    app, _ = service(tmp_path)
    body, said = SAID[what]
    answer = talk(app, lambda http: http.post("/tickets", content=body, headers=JSON))
    detail = one_line(answer, 422, f"POST /tickets with {what}")
    assert said in detail and not [words for words in NEVER_SAID if words in detail], (
        f"the 422 for {what} must say {said!r}, in the service's words and not Python's "
        f"(read_ticket_state() in memorybook/service_models.py; shown() in "
        f"memorybook/store/validation.py for lengths): {detail}")


ENCODED = {"UTF-8 with a BOM": "utf-8-sig", "UTF-16 with a BOM": "utf-16",
           "UTF-16-LE": "utf-16-le", "UTF-16-BE": "utf-16-be", "UTF-32": "utf-32",
           "Latin-1": "latin-1"}


@pytest.mark.parametrize("encoding", list(ENCODED))
def test_a_body_in_another_encoding_than_utf_8_gets_422_saying_so(tmp_path, encoding):
    app, jev = service(tmp_path)
    state = ticket()
    state["ticket"]["subject"] = "Zoë's question"
    text = json.dumps(state, ensure_ascii=False)

    async def requests(http):
        return [await http.post("/tickets", content=text.encode(ENCODED[encoding]),
                                headers=JSON),
                await http.post("/tickets", content=text.encode("utf-8"), headers=JSON)]

    refused, taken = talk(app, requests)
    detail = one_line(refused, 422, f"a body in {encoding}: JSON is UTF-8 (RFC 8259), and "
                                    "read_ticket_state() in memorybook/service_models.py must "
                                    "decode it as such, not let json.loads() guess")
    assert "UTF-8" in detail, f"the 422 for a body in {encoding} must say to send UTF-8: {detail}"
    assert taken.status_code == 200 and len(jev.calls) == 2, (
        f"the same state in UTF-8 must be routed (and gated): {taken.text[:300]}")


def test_a_client_that_leaves_mid_body_logs_no_error(tmp_path, caplog):
    app, jev = service(tmp_path)
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": "/tickets", "raw_path": b"/tickets",
             "query_string": b"", "root_path": "", "client": ("127.0.0.1", 50000),
             "server": ("127.0.0.1", 8000),
             "headers": [(b"host", b"localhost"), (b"content-type", b"application/json"),
                         (b"content-length", b"400")]}
    messages = iter([{"type": "http.request", "body": b'{"customer": {"id": "C-10',
                      "more_body": True}])
    sent = []

    async def receive():  # part of the body, then the client is gone: as the server says so
        return next(messages, {"type": "http.disconnect"})

    async def send(message):
        sent.append(message)

    async def scenario():
        async with LifespanManager(app) as running:
            try:
                await running.app(scope, receive, send)
            except Exception as error:
                pytest.fail(f"a client leaving mid-body made {type(error).__name__} escape the "
                            "app, which the server logs as an ERROR with a traceback: "
                            "read_ticket_state() (memorybook/service_models.py) must end the "
                            "request itself")

    with caplog.at_level(logging.DEBUG):
        asyncio.run(scenario())
    errors = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert errors == [], (
        "a client leaving mid-body is the client's doing, and anyone can repeat it: it must "
        f"log no ERROR (read_ticket_state() in memorybook/service_models.py): {caplog.text}")
    statuses = [m["status"] for m in sent if m["type"] == "http.response.start"]
    assert statuses in ([], [400]) and jev.calls == [], (
        f"a body cut short must reach neither Jev nor a 500: answered {statuses}")


@pytest.mark.parametrize("customer", REFUSED_IDS, ids=repr)
def test_post_refuses_an_id_get_and_delete_could_not_reach_with_422_naming_the_rule(
        tmp_path, customer):
    app, jev = service(tmp_path)
    body = json.dumps(ticket(customer)).encode()  # lone surrogates as \\u escapes
    answer = talk(app, lambda http: http.post("/tickets", content=body, headers=JSON))
    detail = one_line(answer, 422, f"customer.id {customer!r} must be refused")
    assert RULE in detail, (
        f"the 422 for customer.id {customer!r} must name the rule for ids (CUSTOMER_ID_RULE in "
        f"memorybook/service_models.py): {detail}")
    assert jev.calls == [], f"customer.id {customer!r} was routed"


@pytest.mark.parametrize("path", ["%20", "%20%20", "%09", "%C3%A9", "a%20b", "%ED%A0%80",
                                  "C-1%0A", "-x", "A" * 129])
@pytest.mark.parametrize("method", ["GET memories", "DELETE memories", "GET history"])
def test_get_and_delete_of_an_id_breaking_the_rule_get_422_naming_it(tmp_path, path, method):
    app, _ = service(tmp_path)
    verb, what = method.split()
    answer = talk(app, lambda http: http.request(verb, f"/customers/{path}/{what}"))
    assert RULE in one_line(answer, 422, f"{method} of customer {path!r}: the id rule, never "
                                         "the store's ValueError (a 500)")


# Every character str.isspace() counts, and those another reading of `\s` counts too: ECMA-262's
# (a JSON Schema's) holds U+FEFF; Python's `re` with re.ASCII (as Schemathesis reads a pattern)
# only the ASCII ones; pydantic's (Rust's) all of Python's but U+001C-U+001F.
SPACES = [chr(code) for code in range(0x110000) if chr(code).isspace()]
NOT_SPACES = ["\ufeff", "\u180e", "\u200b", "\x00", "\x1b", "\x7f", "T"]


def test_the_schema_and_the_service_take_the_same_ticket_ids_those_str_strip_keeps(tmp_path):
    import jsonschema_rs

    app, _ = service(tmp_path)
    ids = SPACES + NOT_SPACES + [space * 2 for space in SPACES[::7]] + [
        f"{space}T-1{space}" for space in SPACES[::5]]

    async def requests(http):
        schema = (await http.get("/openapi.json")).json()
        answers = {}
        for n, ticket_id in enumerate(ids):
            state = ticket(f"C-{n}", ticket_id)
            answers[ticket_id] = (
                await http.post("/tickets", json=state),
                await http.get(f"/customers/C-{n}/memories/{quote(ticket_id, safe='')}"))
        return schema, answers

    schema, answers = talk(app, requests)
    body = schema["components"]["schemas"]["Ticket"]["properties"]["id"]["pattern"]
    [path] = [parameter["schema"]["pattern"] for parameter in schema["paths"][
        "/customers/{customer}/memories/{ticket}"]["get"]["parameters"]
        if parameter["name"] == "ticket"]
    assert body == path, f"the body's ticket id and the path's follow one pattern: {body} {path}"
    readings = {"Python's re": re.compile(body).search,
                "Python's re.ASCII, as Schemathesis reads it": re.compile(body, re.ASCII).search,
                "ECMA-262's, as a JSON Schema validator reads it": jsonschema_rs.validator_for(
                    {"type": "string", "pattern": body}).is_valid}
    wrong = []
    for ticket_id, (posted, got) in answers.items():
        kept = bool(ticket_id.strip())  # what the store takes (checked_ticket_id())
        wrong += [f"{what} {'refuses' if kept else 'takes'} {ticket_id!r}"
                  for what, reads in readings.items() if bool(reads(ticket_id)) != kept]
        wrong += [f"{method} {'refuses' if kept else 'takes'} {ticket_id!r}: {answer.status_code}"
                  for method, answer in (("POST", posted), ("GET", got))
                  if (answer.status_code == 200) != kept]
        if not kept:
            for answer in (posted, got):
                assert "must not be blank" in one_line(answer, 422, "a blank ticket id"), (
                    f"first_error() (memorybook/service_models.py) must say so in words: "
                    f"{answer.text}")
    assert not wrong, (
        "the schema's pattern for a ticket id and the service must take exactly the ids "
        "str.strip() keeps (NOT_BLANK_PATTERN in memorybook/store/validation.py: each character "
        f"str.isspace() counts, named, never \\s, which each engine reads its own way): {wrong}")
    everything = "".join(chr(code) for code in range(0x110000) if not 0xD800 <= code <= 0xDFFF)
    for what, reads in readings.items():
        taken = [character for character in everything if not reads(character)]
        assert taken == SPACES, (
            f"over every character, {what} of NOT_BLANK_PATTERN must refuse exactly those "
            f"str.isspace() counts: it differs at {sorted(set(taken) ^ set(SPACES))[:10]}")


DUPLICATED = {
    "customer twice": ('{"customer": {"id": "C-1"}, "customer": {"id": "C-2"}, '
                       '"ticket": {"id": "T-1"}}', "'customer'", "at the top level"),
    "an id twice": ('{"customer": {"id": "C-1", "id": "C-2"}, "ticket": {"id": "T-1"}}',
                    "'id'", "in `customer`"),
    "an escaped twin": ('{"customer": {"id": "C-1"}, "ticket": {"id": "T-1", "messages": '
                        '[{"text": "a", "\\u0074ext": "b"}]}}', "'text'",
                        "in `ticket.messages[0]`"),
    "deep, with odd keys": ('{"customer": {"id": "C-1"}, "ticket": {"id": "T-1"}, "a b\\n": '
                            '[[{"x": {"k": 1, "k": 2}}]]}', "'k'", '["a b\\n"][0][0].x'),
}


@pytest.mark.parametrize("what", list(DUPLICATED))
def test_a_body_naming_a_key_twice_gets_422_naming_it_and_where(tmp_path, what):
    app, jev = service(tmp_path)
    body, key, where = DUPLICATED[what]

    async def requests(http):
        return (await http.post("/tickets", content=body, headers=JSON),
                await http.get("/customers/C-2/history"), await http.get("/customers/C-1/history"))

    answer, *histories = talk(app, requests)
    detail = one_line(answer, 422, f"a body with {what}: json.loads() keeps the last of two, so "
                                   "state_of() (memorybook/service_models.py) must refuse it")
    assert key in detail and where in detail, (
        f"the 422 for {what} must name the key ({key}) and where it is ({where}): {detail}")
    assert jev.calls == [] and all(h.json()["events"] == [] for h in histories), (
        f"a body with {what} was routed or filed")


@pytest.mark.parametrize("content_type", [None, "text/plain", "text/plain;charset=UTF-8",
                                          "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", "application/xml",
                                          "gzip", "br"])
def test_a_body_not_sent_as_json_gets_415_and_plants_nothing(tmp_path, content_type):
    app, jev = service(tmp_path)
    headers = {} if content_type is None else {"Content-Type": content_type}
    if content_type in ("gzip", "br"):  # JSON said to be compressed: none of it can be trusted
        headers = {"Content-Type": "application/json", "Content-Encoding": content_type}

    async def requests(http):  # what a page elsewhere can send without asking first
        answer = await http.post("/tickets", content=json.dumps(ticket()), headers=headers)
        return answer, await http.get("/customers/C-1042/memories")

    answer, listed = talk(app, requests)
    assert ("application/json" if "Content-Encoding" not in headers else "uncompressed") in \
        one_line(answer, 415, "read_ticket_state() must refuse a body not sent as plain JSON, "
                              "before reading it")
    assert jev.calls == [] and listed.json()["memories"] == [], (
        f"a {content_type} POST planted a memory")


def test_a_body_over_the_limit_gets_413_before_it_is_read_whole(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMORYBOOK_MAX_BODY_BYTES", "2000")
    app, jev = service(tmp_path)
    large = json.dumps({**ticket(), "padding": "x" * 3000}).encode()
    chunks_read = []

    async def chunked():  # no Content-Length: the limit holds while reading
        for start in range(0, 200_000, 1000):
            chunks_read.append(start)
            yield large[:1000] if start == 0 else b" " * 1000

    async def requests(http):
        return [await http.post("/tickets", content=large, headers=JSON),
                await http.post("/tickets", content=chunked(), headers=JSON),
                await http.post("/tickets", json=ticket())]

    declared, streamed, small = talk(app, requests)
    for answer in (declared, streamed):
        assert "2,000 bytes" in one_line(answer, 413, "the Guard (memorybook/service_guard.py) "
                                                      "must refuse a body over the limit")
    assert len(chunks_read) <= 4, (
        f"{len(chunks_read)} chunks of 1,000 bytes were read for a limit of 2,000: the limit "
        "must hold while reading (Guard.limited())")
    assert small.status_code == 200 and len(jev.calls) == 2, small.text  # the route and a gate


def test_the_default_body_limit_is_1_mb(tmp_path):
    app, _ = service(tmp_path)
    within = json.dumps({**ticket(), "padding": "x" * 990_000})
    beyond = json.dumps({**ticket(), "padding": "x" * 1_000_000})

    async def requests(http):
        return [await http.post("/tickets", content=body, headers=JSON)
                for body in (within, beyond)]

    taken, refused = talk(app, requests)
    assert taken.status_code == 200, taken.text[:300]
    one_line(refused, 413, "MEMORYBOOK_MAX_BODY_BYTES defaults to 1,000,000")


def test_a_body_within_the_limit_that_no_memory_may_hold_gets_422_and_asks_nothing(tmp_path):
    app, jev = service(tmp_path)
    accented = {**ticket(), "padding": "\u00e9" * 300_000}  # 600 kB; 1.8 MB once JSON escapes it
    body = json.dumps(accented, ensure_ascii=False).encode()
    answer = talk(app, lambda http: http.post("/tickets", content=body, headers=JSON))
    told = one_line(answer, 422, "read_ticket_state() (memorybook/service_models.py) must refuse "
                                 "a state the store would not keep, as checked_state() does, "
                                 "before anything is asked (not a 500 from the wrapper)")
    assert "1,000,000" in told and jev.calls == [], told


class FailingStore(InMemoryMemories):
    """A store whose every call fails, as one on a stopped database does."""

    def fail(self, *args, **kwargs):
        raise MemoryStoreError("recall() had no answer from db.example within 1 s; it "
                               "connects again at the next call\nsecond line")

    recall = save = forget_customer = history = sweep = fail

    def serving_alone(self):
        return contextlib.nullcontext()  # a store of this process's own

    def close(self) -> None:
        pass


def test_a_failing_store_is_a_503_in_one_line_on_every_route_and_logged(tmp_path, monkeypatch,
                                                                          caplog):
    monkeypatch.setattr("memorybook.serving.open_store", lambda *args, **kwargs: FailingStore())
    app, _ = service(tmp_path)

    async def requests(http):
        return [await http.post("/tickets", json=ticket()),
                await http.get("/customers/C-1042/memories"),
                await http.delete("/customers/C-1042/memories"),
                await http.get("/customers/C-1042/history")]

    with caplog.at_level(logging.ERROR, logger="memorybook"):
        answers = talk(app, requests)
    for answer in answers:
        detail = one_line(answer, 503, "a MemoryStoreError must be a 503 (answered() and "
                                       "routing_failed() in memorybook/service/failures.py)")
        assert "db.example" not in detail and "log" in detail, (
            "a 503 for a failed store must not show the client the database's host, file or "
            "error, and must say where they are (store_failed() in "
            f"memorybook/service/failures.py): {detail}")
        assert answer.headers.get("Retry-After") == "1", (
            "a failed store's 503 says when to try again (RETRY_SOON in "
            "memorybook/service/failures.py)")
    logged = [r.getMessage() for r in caplog.records if "no answer from db.example" in
              r.getMessage()]
    assert len(logged) == len(answers) and all("\n" not in line for line in logged), (
        "each store failure must be logged once, in one line, for whoever runs the service "
        f"(store_failed() in memorybook/service/failures.py): {caplog.text}")


UPSTREAM = "https://jev-internal.example:8443"
CANARY_KEY = "service-canary-key-5e8d2a40"
FAILURES = {
    "the API refused the request": (TypeSafeBadRequestError(
        400, {"error": f"bad request; you sent X-Route-Secret: route-7 and Authorization: Bearer "
                       f"{CANARY_KEY}"}, httpx2.Headers({"x-typesafe-request-id": "req-81"}),
        endpoint=f"POST {UPSTREAM}/v1/system-one"),
        "its API answered HTTP 400): retrying it unchanged will not help"),
    "the key refused": (TypeSafeAuthenticationError(
        401, {"error": "invalid key"}, httpx2.Headers(), endpoint=f"POST {UPSTREAM}/v1/x"),
        "its API answered HTTP 401): whoever runs the service must fix it"),
    "the API failing": (TypeSafeInternalServerError(
        500, {"error": "down"}, httpx2.Headers(), endpoint=f"POST {UPSTREAM}/v1/x"),
        "its API answered HTTP 500): try again later"),
    "no connection": (TypeSafeAPIConnectionError("Connection error."),
                      "could not connect to its API"),
    "no answer in time": (CallTimeoutError(f"no answer from {UPSTREAM} within 5 s"),
                          "no answer in time"),
}


@pytest.mark.parametrize("failure", list(FAILURES))
def test_a_failed_call_to_jev_is_a_502_whose_details_only_the_log_holds(
        tmp_path, monkeypatch, caplog, failure):
    monkeypatch.setenv("TYPESAFE_API_KEY", CANARY_KEY)  # the key redact() hides
    monkeypatch.setenv("TYPESAFE_ENDPOINT", UPSTREAM)
    error, said = FAILURES[failure]

    async def failing(state: dict, questions: dict):
        raise error

    app = create_app(f"sqlite:///{tmp_path / 'store.sqlite3'}", ask=failing)
    with caplog.at_level(logging.ERROR, logger="memorybook"):
        answer = talk(app, lambda http: http.post("/tickets", json=ticket()))
    detail = one_line(answer, 502, f"a live call that fails ({failure})")
    leaked = [words for words in ("jev-internal", "X-Route-Secret", "route-7", "req-81",
                                  CANARY_KEY) if words in answer.text]
    assert said in detail and "log" in detail and not leaked, (
        f"the 502 for {failure} must say what failed ({said!r}) and that the service's log has "
        f"the details, and repeat none of the upstream's endpoint, headers or text "
        f"(jev_failed() in memorybook/service/failures.py): {detail} (leaked {leaked})")
    records = [r for r in caplog.records if r.name == "memorybook"]
    assert len(records) == 1 and "T-901" in records[0].getMessage() and (
        "Live call failed" in records[0].getMessage()), (
        f"the 502's details (describe_api_failure()) must be logged once, naming the ticket "
        f"(routing_failed() in memorybook/service/failures.py): {caplog.text}")
    assert "\n" not in records[0].getMessage() and CANARY_KEY not in caplog.text, caplog.text


def test_an_app_asks_its_own_questions_and_its_memories_follow(tmp_path):
    from typesafe_sdk import Noul, NoulCriteria

    urgent = {"urgent": Noul(instructions="Does `ticket` need an answer today?",
                             criteria=NoulCriteria(true="Yes: today.", false="No."))}
    jev = MadeUpJev(lambda state, questions: (
        {"remember": 0.9} if "remember" in questions else {"urgent": 0.7}))
    app = create_app(f"sqlite:///{tmp_path / 'store.sqlite3'}", ask=jev.ask_async,
                     questions=urgent)

    async def requests(http):
        return [await http.post("/tickets", json=ticket()),
                await http.post("/tickets", json=ticket(ticket_id="T-902")),
                await http.get("/customers/C-1042/memories")]

    first, second, memories = talk(app, requests)
    assert first.json()["answers"] == {"urgent": {"type": "noul", "noul": 0.7}}, (
        f"POST /tickets must ask the questions create_app(questions=) was given and answer "
        f"with their response (routing_failed() in memorybook/service/failures.py): {first.text}")
    assert second.status_code == 200 and [call["questions"] for call in jev.calls[::2]] == [
        urgent, urgent], jev.calls
    [memory] = memories.json()["memories"][:1]
    assert memory["jev_answered"] == {"Does `ticket` need an answer today?": 0.7}, memory


@pytest.mark.parametrize("written", ['{"a": ', None], ids=["damaged", "not there"])
def test_a_recording_that_cannot_be_used_stops_create_app_not_a_request(tmp_path, monkeypatch,
                                                                         written):
    damaged = tmp_path / "json_cache.json"
    if written is not None:
        damaged.write_text(written, encoding="utf-8")
    monkeypatch.setenv("MEMORYBOOK_RECORDING", str(damaged))
    monkeypatch.delenv("TYPESAFE_API_KEY", raising=False)
    with pytest.raises(RecordingError) as stopped:
        create_app(f"sqlite:///{tmp_path / 'store.sqlite3'}")
    assert str(damaged) in str(stopped.value), (
        f"create_app() must read the recording (Jev.read_recording()) and name the file that "
        f"cannot be used, before any request gets a 500: {stopped.value}")


def test_a_recording_that_fails_while_routing_is_a_503_in_one_line(tmp_path, caplog):
    async def failing(state: dict, questions: dict):
        raise RecordingError("json_cache.json could not be written: No space left on device.\n"
                             "Free some space.")

    app = create_app(f"sqlite:///{tmp_path / 'store.sqlite3'}", ask=failing)
    with caplog.at_level(logging.ERROR, logger="memorybook"):
        answer = talk(app, lambda http: http.post("/tickets", json=ticket()))
    detail = one_line(answer, 503, "a recording that fails must not be a 500 "
                                   "(routing_failed() in memorybook/service/failures.py)")
    assert detail == ("the recording failed: json_cache.json could not be written: No space "
                      "left on device."), detail
    assert "T-901" in caplog.text and "No space left" in caplog.text, caplog.text


def test_a_call_the_recording_lacks_is_logged_by_its_ids_alone(tmp_path, caplog):
    async def missing(state: dict, questions: dict):
        raise RecordingMissError("The recording has no answer to this call: the question "
                                 "'team' about ticket T-901 ('Question').", ["A new ticket."],
                                 "https://example.invalid/link", "Record it.", "a call")

    app = create_app(f"sqlite:///{tmp_path / 'store.sqlite3'}", ask=missing)
    with caplog.at_level(logging.WARNING, logger="memorybook"):
        answer = talk(app, lambda http: http.post("/tickets", json=ticket()))
    assert answer.status_code == 503 and answer.json()["likely_causes"] == ["A new ticket."]
    [record] = [r for r in caplog.records if r.name == "memorybook"
                and not r.getMessage().startswith("the memory store: Created a new")]
    assert "T-901" in record.getMessage() and "C-1042" in record.getMessage() and (
        "Question" not in caplog.text), (
        f"a miss must be logged once, by ticket and customer id and no words of the ticket "
        f"(routing_failed() in memorybook/service/failures.py): {caplog.text}")


def test_a_frozen_postgresql_store_is_a_503_within_its_timeout(tmp_path, monkeypatch):
    import psycopg

    from tests.helpers import new_key
    from tests.store.conftest import PostgresBackend

    monkeypatch.setenv("MEMORYBOOK_STORE_KEY", new_key())
    with PostgresBackend.fresh(tmp_path) as backend:
        name = f"memorybook-service-{os.getpid()}-{time.monotonic_ns()}"
        jev = MadeUpJev(made_up)
        app = create_app(f"{backend.url}&application_name={name}", ask=jev.ask_async,
                         store_options={"timeout": 1})

        async def frozen(http, method: str, path: str, **options):
            """The answer to a request while the store's server process is stopped."""
            # after a time-out the store connects again at its next call: this one
            assert (await http.get("/customers/C-1/memories")).status_code == 200
            with psycopg.connect(backend.url) as admin:  # the store's, and the turns'
                pids = [pid for (pid,) in admin.execute(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
                    (name,)).fetchall()]
            assert pids, f"no connection of the service's under the name {name}"
            for pid in pids:  # as a frozen host, or a network that drops everything
                os.kill(pid, signal.SIGSTOP)
            try:
                started = time.monotonic()
                answer = await http.request(method, path, **options)
                return answer, time.monotonic() - started
            finally:
                for pid in pids:
                    os.kill(pid, signal.SIGCONT)

        async def requests(http):
            return [await frozen(http, "GET", "/customers/C-1042/memories"),
                    await frozen(http, "DELETE", "/customers/C-1042/memories"),
                    await frozen(http, "POST", "/tickets", json=ticket())]

        answers = talk(app, requests)
    for answer, seconds in answers:
        one_line(answer, 503, "a store call that times out must be a 503")
        print(f"{answer.request.method} on a frozen PostgreSQL store (timeout 1 s): 503 after "
              f"{seconds:.1f} s")
        assert seconds < 1 + 1 + 2, f"the 503 took {seconds:.1f} s for a timeout of 1 s"


def test_options_and_405_list_every_method_a_path_takes(tmp_path):
    app, _ = service(tmp_path)

    async def requests(http):
        return [await http.options("/customers/C-1042/memories"),
                await http.patch("/customers/C-1042/memories"),
                await http.options("/tickets"), await http.get("/tickets")]

    options, patch, options_tickets, get_tickets = talk(app, requests)
    assert options.status_code == 204 and options.headers["allow"] == (
        "DELETE, GET, HEAD, OPTIONS"), (
        f"OPTIONS must answer with every method of the path, DELETE included (Guard, "
        f"memorybook/service_guard.py): {options.status_code} {options.headers}")
    assert patch.headers["allow"] == "DELETE, GET, HEAD, OPTIONS"
    one_line(patch, 405, "PATCH is no method of the path")
    assert options_tickets.headers["allow"] == "OPTIONS, POST"
    one_line(get_tickets, 405, "GET /tickets")


def test_head_is_get_without_its_body(tmp_path):
    app, _ = service(tmp_path)

    async def requests(http):
        await http.post("/tickets", json=ticket())
        return [await http.request(method, path) for path in
                ("/customers/C-1042/memories", "/health") for method in ("GET", "HEAD")]

    get, head, get_health, head_health = talk(app, requests)
    for got, headed in ((get, head), (get_health, head_health)):
        assert headed.status_code == got.status_code == 200 and headed.content == b"" and (
            headed.headers["content-length"] == got.headers["content-length"]
            == str(len(got.content))), (
            f"HEAD {got.request.url.path} must answer as GET does, without the body (Guard in "
            f"memorybook/service_guard.py): {headed.status_code} {headed.headers} "
            f"{headed.content[:100]!r}")


def test_health_answers_a_probe_that_has_neither_an_allowed_host_nor_the_token(
        tmp_path, monkeypatch):
    # A load balancer's or an orchestrator's probe asks by the replica's address.
    probe = {"Host": "10.0.0.7:8000"}
    app, jev = service(tmp_path)
    for url in ("http://localhost", "http://memory.internal"):  # without a token: on loopback
        health = talk(app, lambda http: http.get("/health", headers=probe), base_url=url)
        assert (health.status_code, health.json()) == (200, {"status": "ok"}), (
            f"GET /health from {url} must answer a probe without an allowed Host (HEALTH_PATH "
            f"in memorybook/service_guard.py): {health.status_code} {health.text}")
    monkeypatch.setenv("MEMORYBOOK_SERVICE_TOKEN", TOKEN)
    app, jev = service(tmp_path)

    async def requests(http):
        return [await http.get("/health", headers=probe),
                await http.get("/customers/C-1042/memories", headers=probe),
                await http.post("/tickets", json=ticket(), headers=probe),
                await http.get("/customers/C-1042/memories")]

    health, foreign_get, foreign_post, tokenless = talk(app, requests)
    assert (health.status_code, health.json()) == (200, {"status": "ok"}), health.text
    one_line(foreign_get, 400, "only /health passes without an allowed Host")
    one_line(foreign_post, 400, "only /health passes without an allowed Host")
    one_line(tokenless, 401, "only /health passes without the token")
    assert jev.calls == [], "a request refused by the guard reached Jev"


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "localhost.evil.example",
                                  "127.0.0.1.nip.io", "", "[::2]", "[::1]evil.example",
                                  "[::1]:8000evil.example", "[::1]:80:80", "[::1",
                                  "localhost:evil.example", "127.0.0.1:8000 evil"])
def test_a_host_that_is_not_a_loopback_name_gets_400_and_reads_nothing(tmp_path, host):
    app, jev = service(tmp_path)

    async def requests(http):
        await http.post("/tickets", json=ticket())
        return [await http.get("/customers/C-1042/memories", headers={"Host": host}),
                await http.post("/tickets", json=ticket(ticket_id="T-2"), headers={"Host": host})]

    for answer in talk(app, requests):
        detail = one_line(answer, 400, f"Host {host!r}: DNS rebinding must read nothing "
                                       "(Guard in memorybook/service_guard.py)")
        assert "MEMORYBOOK_ALLOWED_HOSTS" in detail and "T-901" not in answer.text
    assert len(jev.calls) == 2, "a request with a foreign Host was routed"


@pytest.mark.parametrize("host", ["localhost", "localhost:8000", "127.0.0.1:8000", "127.9.9.9",
                                  "[::1]:8000", "LOCALHOST"])
def test_loopback_hosts_are_answered(tmp_path, host):
    app, _ = service(tmp_path)
    answer = talk(app, lambda http: http.get("/customers/C-1/memories", headers={"Host": host}))
    assert answer.status_code == 200, answer.text


def test_allowed_hosts_and_a_token_open_the_service_beyond_this_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMORYBOOK_ALLOWED_HOSTS", "memory.internal, other.internal")
    app, _ = service(tmp_path)
    beyond = talk(app, lambda http: http.get("/customers/C-1/memories"),
                  base_url="http://memory.internal")
    assert "MEMORYBOOK_SERVICE_TOKEN" in one_line(beyond, 403, "a request from beyond this "
                                                  "machine without a token set")
    monkeypatch.setenv("MEMORYBOOK_SERVICE_TOKEN", TOKEN)
    app, _ = service(tmp_path)
    answer = talk(app, lambda http: http.get("/customers/C-1/memories", headers={
        "Authorization": f"Bearer {TOKEN}"}), base_url="http://memory.internal")
    assert answer.status_code == 200, answer.text


def test_with_a_token_every_request_needs_it_and_it_never_shows(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("MEMORYBOOK_SERVICE_TOKEN", TOKEN)
    app, jev = service(tmp_path)
    wrong = [{}, {"Authorization": TOKEN}, {"Authorization": f"Basic {TOKEN}"},
             {"Authorization": f"Bearer {TOKEN[:-1]}"}, {"Authorization": f"Bearer {TOKEN}x"},
             {"Authorization": "Bearer"}]
    right = {"Authorization": f"Bearer {TOKEN}"}

    async def requests(http):
        refused = []
        for headers in wrong:
            for method, path in [("POST", "/tickets"), ("GET", "/customers/C-1042/memories"),
                                 ("DELETE", "/customers/C-1042/memories"),
                                 ("OPTIONS", "/tickets"), ("GET", "/openapi.json")]:
                refused.append(await http.request(method, path, json=ticket(),
                                                  headers=headers))
        taken = await http.post("/tickets", json=ticket(), headers=right)
        return refused, taken, await http.get("/customers/C-1042/memories", headers=right)

    with caplog.at_level(logging.DEBUG):
        refused, taken, listed = talk(app, requests)
    for answer in refused:
        one_line(answer, 401, "MEMORYBOOK_SERVICE_TOKEN set: a request without it as a bearer "
                              "token (Guard, memorybook/service_guard.py)")
        assert answer.headers["www-authenticate"] == "Bearer"
    assert taken.status_code == 200 and len(listed.json()["memories"]) == 1, listed.text
    assert len(jev.calls) == 2, "a request without the token reached Jev"
    for answer in (*refused, taken, listed):
        assert TOKEN not in answer.text and TOKEN not in str(answer.headers)
    assert TOKEN not in caplog.text
    assert TOKEN not in repr(Settings.from_environment())


def test_a_request_that_would_wait_longer_than_a_live_call_may_take_is_a_503_changing_nothing(
        tmp_path, monkeypatch):
    monkeypatch.setenv("MEMORYBOOK_TIMEOUT_SECONDS", "0.3")
    jev, sent, held = MadeUpJev(made_up), [], {}

    async def ask(state: dict, questions: dict):
        ticket_id = (state.get("request") or state)["ticket"]["id"]  # a gate's is the memory
        sent.append((ticket_id, *questions))
        if ticket_id == "T-901" and "team" in questions:
            await held["release"].wait()  # the first routing request hangs until released
        return await jev.ask_async(state, questions)

    app = create_app(f"sqlite:///{tmp_path / 'store.sqlite3'}", ask=ask,
                     settings=Settings.from_environment(max_in_flight=1))

    async def requests(http):
        held["release"] = asyncio.Event()
        first = asyncio.create_task(http.post("/tickets", json=ticket("C-1042", "T-901")))
        while not sent:
            await asyncio.sleep(0.01)
        try:  # each of these waits behind the first, which hangs until released
            behind_the_customer = await asyncio.wait_for(
                http.post("/tickets", json=ticket("C-1042", "T-902")), 10)
            behind_the_cap = await asyncio.wait_for(
                http.post("/tickets", json=ticket("C-2210", "T-903")), 10)
            listing = await asyncio.wait_for(http.get("/customers/C-1042/memories"), 10)
        finally:
            held["release"].set()
        return (await first, behind_the_customer, behind_the_cap, listing,
                await http.get("/customers/C-1042/memories"),
                await http.get("/customers/C-2210/history"))

    first, customer, cap, listing, memories, other = talk(app, requests)
    where = ("a wait for the customer's turn or for a slot to Jev must end after "
             "MEMORYBOOK_TIMEOUT_SECONDS (wait_at_most in memorybook/serving.py, gates.py and "
             "in_flight.py)")
    for answer, waited_for in ((customer, "customer C-1042's earlier calls"),
                               (cap, "a request to Jev to end (at most 1 go at once)"),
                               (listing, "customer C-1042's earlier calls")):
        assert one_line(answer, 503, where).startswith(f"Waited 0.3 s for {waited_for}")
        assert answer.headers.get("retry-after") == "1", answer.headers
    assert first.status_code == 200, first.text
    assert [m["request"]["ticket"]["id"] for m in memories.json()["memories"]] == ["T-901"]
    assert other.json()["events"] == [] and sent == [("T-901", "team"), ("T-901", "remember")], (
        f"a request that waited too long must send and save nothing: Jev was asked {sent}")


def test_the_service_serves_a_sqlite_store_alone_and_will_not_start_beside_another(
        tmp_path, monkeypatch):
    from memorybook.store import SQLiteMemoryStore

    closed = []
    original_close = SQLiteMemoryStore.close
    held = serving_alone_noted(monkeypatch)
    monkeypatch.setattr(SQLiteMemoryStore, "close",
                        lambda store: (closed.append(store.path), original_close(store)))
    app, _ = service(tmp_path)

    async def requests(http):
        return held.copy()

    assert talk(app, requests) == ["held"] and held == ["held", "given back"], (
        f"the service must hold its SQLite store's serving_alone() while it runs: {held}")

    serving_alone_refused(monkeypatch)
    closed.clear()
    with pytest.raises(MemoryStoreError, match="Another process serves"):
        talk(service(tmp_path)[0], requests)
    assert closed == [tmp_path / "store.sqlite3"], (
        "a service refused its store must close the store it opened (AsyncMemory.start(), "
        "memorybook/serving.py)")


@pytest.mark.parametrize("setting", ["MEMORYBOOK_SERVICE_TOKEN=short",
                                     "MEMORYBOOK_SERVICE_TOKEN=a token with spaces inside",
                                     "MEMORYBOOK_SERVICE_TOKEN=", "MEMORYBOOK_SERVICE_TOKEN= \t",
                                     "MEMORYBOOK_MAX_BODY_BYTES=1e6",
                                     "MEMORYBOOK_MAX_BODY_BYTES=0",
                                     "MEMORYBOOK_RETENTION_DAYS=-1",
                                     "MEMORYBOOK_RETENTION_DAYS=36526",
                                     "MEMORYBOOK_RETENTION_DAYS=1e10",
                                     "MEMORYBOOK_SWEEP_MINUTES=soon"])
def test_an_unusable_setting_stops_create_app_in_one_line(monkeypatch, setting):
    name, _, value = setting.partition("=")
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as raised:
        create_app("sqlite:///unused.sqlite3")
    assert "\n" not in str(raised.value) and name.split("_")[-1].lower() in str(
        raised.value).lower(), raised.value
    if "TOKEN" in name and value.strip():
        assert value not in str(raised.value), "the message repeats the token"


def run_make_serve(host: str, **env: str) -> subprocess.CompletedProcess:
    """`make serve` on a port this test holds: a server it started anyway could not bind."""
    environment = {k: v for k, v in os.environ.items()
                   if not k.startswith(("MEMORYBOOK_", "MAKE", "TYPESAFE_"))}
    with socket.create_server(("0.0.0.0", 0)) as held:
        port = str(held.getsockname()[1])
        return subprocess.run(["make", "--no-print-directory", "serve"], cwd=REPO_ROOT,
                              env={**environment, "HOST": host, "PORT": port, **env},
                              capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.7", "memory.example"])
def test_make_serve_refuses_to_bind_beyond_loopback_without_a_token(host):
    started = time.monotonic()
    refused = run_make_serve(host)
    lines = [line for line in refused.stderr.splitlines() if not line.startswith("make: ")]
    assert refused.returncode != 0 and len(lines) == 1, (
        f"HOST={host} make serve without a token must stop with one line "
        f"(memorybook/service_settings.py, the Makefile's serve): {refused.returncode} "
        f"{refused.stderr}")
    assert "MEMORYBOOK_SERVICE_TOKEN" in lines[0] and host in lines[0], lines[0]
    assert "Uvicorn" not in refused.stderr and time.monotonic() - started < 30


@pytest.mark.parametrize("host, token, allowed", [
    ("127.0.0.1", None, True), ("localhost", None, True), ("::1", None, True),
    ("0.0.0.0", TOKEN, True), ("0.0.0.0", None, False)])
def test_the_check_before_make_serve(monkeypatch, capsys, tmp_path, host, token, allowed):
    # Its decision for each host, in this process; `make serve` running it is tested above.
    for name in [name for name in os.environ if name.startswith("MEMORYBOOK_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("MEMORYBOOK_STORE_URL", f"sqlite:///{tmp_path / 'store.sqlite3'}")
    if token:
        monkeypatch.setenv("MEMORYBOOK_SERVICE_TOKEN", token)
    status, said = service_settings_main([host]), capsys.readouterr().err
    assert (status == 0) == allowed, said
    assert TOKEN not in said


class Clock:
    """The store's time, which the test moves."""

    def __init__(self) -> None:
        self.now = datetime(2026, 10, 2, 9, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def test_expired_memories_are_never_recalled_and_are_swept_on_a_schedule(tmp_path):
    clock = Clock()
    app, _ = service(tmp_path, retention=timedelta(days=30), store_options={"clock": clock},
                     settings=Settings.from_environment(sweep_every=timedelta(seconds=0.05)))

    async def requests(http):
        async def listed():
            memories = (await http.get("/customers/C-1042/memories")).json()["memories"]
            return [memory["request"]["ticket"]["id"] for memory in memories]

        async def events():
            history = (await http.get("/customers/C-1042/history")).json()["events"]
            return [(event["event"], event["ticket_id"]) for event in history]

        await http.post("/tickets", json=ticket())
        seen = {"saved": await listed()}
        clock.now += timedelta(days=29)
        seen["29 days on"] = await listed()
        clock.now += timedelta(days=2)
        seen["31 days on"] = await listed()
        for _ in range(100):  # the sweeper runs every 0.05 s
            if ("expired", "T-901") in await events():
                break
            await asyncio.sleep(0.05)
        seen["history"] = await events()
        clock.now -= timedelta(days=31)  # back: a swept memory never returns
        seen["back"] = await listed()
        tasks = asyncio.all_tasks()
        return seen, tasks

    seen, tasks = talk(app, requests)
    assert seen["saved"] == seen["29 days on"] == ["T-901"], seen
    assert seen["31 days on"] == [], (
        f"a memory past its retention was recalled over HTTP: {seen}")
    assert seen["history"] == [("saved", "T-901"), ("expired", "T-901")], (
        "the sweeper (sweep_on_schedule() in memorybook/serving.py) must delete expired "
        f"memories, and history must show it: {seen['history']}")
    assert seen["back"] == [], f"a swept memory came back when the clock went back: {seen}"
    sweepers = [task for task in tasks if "sweep_on_schedule" in repr(task.get_coro())]
    assert len(sweepers) == 1 and sweepers[0].done(), (
        f"one sweeper must run while the service does, and stop at shutdown: {sweepers}")


def test_the_history_holds_events_never_content(tmp_path):
    app, _ = service(tmp_path)

    async def requests(http):
        await http.post("/tickets", json=ticket())
        await http.delete("/customers/C-1042/memories")
        await http.post("/tickets", json=ticket(ticket_id="T-902"))
        return await http.get("/customers/C-1042/history")

    history = talk(app, requests)
    assert history.status_code == 200 and "Linux" not in history.text, history.text
    assert [(e["event"], e["ticket_id"]) for e in history.json()["events"]] == [
        ("saved", "T-902")], "DELETE erases the history with the memories"


def test_retention_days_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMORYBOOK_RETENTION_DAYS", "30")
    app, _ = service(tmp_path)

    async def scenario():
        async with LifespanManager(app):
            return app.state.memory.store.retention

    assert asyncio.run(scenario()) == timedelta(days=30), (
        "create_app() must open its store with MEMORYBOOK_RETENTION_DAYS")


STATUSES = {"/tickets": {"post": {"200", "400", "401", "403", "409", "413", "415", "422", "502",
                                  "503"}},
            "/customers/{customer}/memories": {"get": {"200", "400", "401", "403", "409", "413",
                                                       "422", "503"},
                                               "delete": {"200", "400", "401", "403", "413", "422",
                                                          "503"}},
            "/customers/{customer}/memories/{ticket}": {"get": {"200", "400", "401", "403",
                                                               "404", "409", "413", "422", "503"},
                                                       "delete": {"200", "400", "401", "403",
                                                                  "404", "413", "422", "503"}},
            "/customers/{customer}/history": {"get": {"200", "400", "401", "403", "413", "422",
                                                      "503"}},
            "/health": {"get": {"200", "413"}},
            "/ready": {"get": {"200", "413", "503"}},
            "/metrics": {"get": {"200", "400", "401", "403", "413"}}}
# Answers that are not JSON, by (path, status): their media type.
NOT_JSON = {("/metrics", "200"): "text/plain"}


def where_statuses_are() -> str:
    """This file and the line of STATUSES, for a failure to name."""
    lines = Path(__file__).read_text(encoding="utf-8").splitlines()
    line = next(number for number, text in enumerate(lines, 1) if text.startswith("STATUSES = "))
    return f"tests/test_service_http.py:{line}"


def test_the_openapi_schema_types_every_body_and_lists_every_status(tmp_path):
    app, _ = service(tmp_path)
    schema = talk(app, lambda http: http.get("/openapi.json")).json()
    found = {(path, method) for path, methods in schema["paths"].items() for method in methods}
    listed = {(path, method) for path, methods in STATUSES.items() for method in methods}
    for path, method in sorted(found - listed):
        statuses = sorted(schema["paths"][path][method]["responses"])
        pytest.fail(f"{method.upper()} {path} is a route of the service (memorybook/service/"
                    f"routes.py) that STATUSES, at {where_statuses_are()}, does not list: add "
                    f"it there with every status it answers (its schema lists {statuses})")
    assert found == listed, (
        f"STATUSES ({where_statuses_are()}) lists {sorted(listed - found)}, which the service "
        "(memorybook/service/routes.py) no longer has: remove them there")
    for path, methods in STATUSES.items():
        for method, statuses in methods.items():
            responses = schema["paths"][path][method]["responses"]
            assert set(responses) == statuses, (
                f"{method.upper()} {path} documents {sorted(responses)}, not {sorted(statuses)}: "
                f"list each status the route answers in its `responses=` (memorybook/service/"
                f"routes.py) and in STATUSES ({where_statuses_are()})")
            for status, response in responses.items():
                if (path, status) in NOT_JSON:
                    assert response["content"] == {NOT_JSON[path, status]: {"schema": {
                        "type": "string"}}}, f"{method.upper()} {path}'s {status}: {response}"
                    continue
                assert "$ref" in response["content"]["application/json"]["schema"], (
                    f"{method.upper()} {path}'s {status} has no model")
    body = schema["paths"]["/tickets"]["post"]["requestBody"]["content"]["application/json"]
    assert body["schema"] == {"$ref": "#/components/schemas/TicketState"}
    state = schema["components"]["schemas"]["TicketState"]
    assert state["required"] == ["customer", "ticket"], state
    customer = schema["components"]["schemas"]["Customer"]["properties"]["id"]
    assert RULE in customer["description"] and customer["pattern"], customer


def request_examples(schema: dict) -> list[tuple[str, str, object]]:
    """(method, path, body) for every request example the schema gives: a request body's own
    (`example`, `examples`) and its schema's (`examples` of the component it names)."""
    found = []
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            for media in operation.get("requestBody", {}).get("content", {}).values():
                bodies = [media["example"]] if "example" in media else []
                bodies += [example["value"] for example in media.get("examples", {}).values()]
                named = media.get("schema", {}).get("$ref", "").rpartition("/")[2]
                bodies += schema["components"]["schemas"].get(named, {}).get("examples", [])
                found += [(method, path, body) for body in bodies]
    return found


def test_every_request_example_in_the_schema_is_answered_as_make_serve_answers_it(
        tmp_path, caplog):
    app = create_app(f"sqlite:///{tmp_path / 'fresh.sqlite3'}")  # no key: the recording's answers

    async def requests(http):
        schema = (await http.get("/openapi.json")).json()
        examples = request_examples(schema)
        answers = [await http.request(method.upper(), path, json=body)
                   for method, path, body in examples]
        await app.state.memory.gates.drain()
        return examples, answers

    with caplog.at_level(logging.WARNING, logger="memorybook"):
        examples, answers = talk(app, requests)
    assert examples, "the schema gives POST /tickets an example (TICKET_EXAMPLE, " \
        "memorybook/service_models.py)"
    for (method, path, _), answer in zip(examples, answers, strict=True):
        assert answer.is_success, (
            f"{method.upper()} {path} with its example from /openapi.json was answered "
            f"{answer.status_code} {answer.text[:400]}: an example must be a call the recording "
            "answers, its keys in the recorded order (TICKET_EXAMPLE in "
            "memorybook/service_models.py)")
    assert not caplog.records, f"the example's gate failed: {caplog.text}"


def test_the_token_is_in_the_schema_when_set(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMORYBOOK_SERVICE_TOKEN", TOKEN)
    app, _ = service(tmp_path)
    schema = talk(app, lambda http: http.get("/openapi.json", headers={
        "Authorization": f"Bearer {TOKEN}"})).json()
    assert schema["security"] == [{"bearer": []}] and TOKEN not in json.dumps(schema)
    assert schema["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert schema["paths"]["/health"]["get"]["security"] == [], (
        "GET /health takes no token, and the schema must say so (a fuzzer checks that every "
        "other operation refuses a request without it)")


def test_the_service_asks_jev_at_most_max_in_flight_at_once_replies_before_gates(tmp_path):
    asked, now = [], {"in flight": 0, "most": 0}

    async def slow_jev(state: dict, questions: dict):
        now["in flight"] += 1
        now["most"] = max(now["most"], now["in flight"])
        asked.append("gate" if "remember" in questions else "route")
        try:
            await asyncio.sleep(0.02)
            return await MadeUpJev(made_up).ask_async(state, questions)
        finally:
            now["in flight"] -= 1

    app = create_app(f"sqlite:///{tmp_path / 'store.sqlite3'}", ask=slow_jev,
                     settings=Settings.from_environment(max_in_flight=2))

    async def requests(http):
        answers = await asyncio.gather(*(http.post("/tickets", json=ticket(f"C-{n}", "T-1"))
                                         for n in range(8)))
        await app.state.memory.gates.drain()
        return answers

    answers = talk(app, requests)
    assert [answer.status_code for answer in answers] == [200] * 8
    assert now["most"] == 2, (
        f"the service had {now['most']} requests to Jev at once with max_in_flight=2: it must "
        f"cap them (InFlight, memorybook/in_flight.py, in create_app()'s lifespan)")
    assert asked[:8] == ["route"] * 8, (
        f"with slots short, every waiting routing request goes before any gate: {asked}")


def test_replies_still_go_while_every_gate_hangs_on_the_upstream(tmp_path):
    released = asyncio.Event()

    async def hanging_gates(state: dict, questions: dict):
        if "remember" in questions:
            await released.wait()  # an upstream that holds every gate's request
        return await MadeUpJev(made_up).ask_async(state, questions)

    app = create_app(f"sqlite:///{tmp_path / 'store.sqlite3'}", ask=hanging_gates,
                     settings=Settings.from_environment(max_in_flight=3))

    async def requests(http):
        try:
            return [await asyncio.wait_for(http.post("/tickets", json=ticket(f"C-{n}", "T-1")),
                                           10) for n in range(10)]
        finally:  # then the gates end, and so can the app
            released.set()
            await app.state.memory.gates.drain()

    assert [answer.status_code for answer in talk(app, requests)] == [200] * 10, (
        "with every gate hanging, the replies must still go: gates never take the last slot "
        "(InFlight.gate_limit, memorybook/in_flight.py)")


def test_under_uvicorns_logging_the_services_lines_go_where_uvicorns_go(monkeypatch, capsys):
    import io

    from memorybook.service.logs import log_where_uvicorn_logs

    ours, uvicorns = logging.getLogger("memorybook"), logging.getLogger("uvicorn")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)  # as uvicorn's LOGGING_CONFIG sets up its own
    handler.setFormatter(logging.Formatter("%(levelname)s:     %(message)s"))
    monkeypatch.setattr(uvicorns, "handlers", [handler])
    monkeypatch.setattr(ours, "handlers", [])
    monkeypatch.setattr(ours, "level", logging.NOTSET)
    monkeypatch.setattr(logging.getLogger(), "handlers", [])  # no logging of the app's own
    log_where_uvicorn_logs()
    ours.info("swept 3 expired memories")
    assert stream.getvalue() == "INFO:     swept 3 expired memories\n", (
        "under uvicorn's own logging set-up, the memorybook logger must use uvicorn's handlers "
        "from INFO up (log_where_uvicorn_logs() in memorybook/service/logs.py): otherwise its "
        f"lines reach stderr bare, INFO not at all; got {stream.getvalue()!r}")


def test_make_serves_check_names_a_store_or_recording_the_service_cannot_start_with(
        tmp_path, monkeypatch, capsys):
    from memorybook.service_settings import main

    monkeypatch.setenv("MEMORYBOOK_STORE_URL", f"sqlite:///{tmp_path / 'store.sqlite3'}")
    monkeypatch.setenv("MEMORYBOOK_STORE_KEY", "not-a-key")
    monkeypatch.delenv("TYPESAFE_API_KEY", raising=False)
    assert main(["127.0.0.1"]) == 2
    said = capsys.readouterr().err
    assert said.startswith("make serve: the service cannot start: ") and said.count("\n") == 1 \
        and "MEMORYBOOK_STORE_KEY" in said, (
        "make serve's check (memorybook/service_settings.py) must stop a service that could not "
        f"open its store, in one line naming why, before uvicorn's traceback: {said!r}")
    monkeypatch.delenv("MEMORYBOOK_STORE_KEY")
    broken = tmp_path / "recording.json"
    broken.write_text("{not json", encoding="utf-8")
    monkeypatch.setenv("MEMORYBOOK_RECORDING", str(broken))
    assert main(["127.0.0.1"]) == 2
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and "recording.json" in said, said


@pytest.mark.parametrize("asked", [{"MEMORYBOOK_RECORDING": "calls.json"},
                                   {"MEMORYBOOK_RECORDING": "calls.json",
                                    "MEMORYBOOK_RECORD_MODE": "record"}])
def test_the_service_refuses_record_mode_which_would_keep_tickets_in_clear(
        tmp_path, monkeypatch, capsys, asked):
    from memorybook.config import ConfigError
    from memorybook.jev import Mode
    from memorybook.service_settings import jev_to_serve, main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MEMORYBOOK_STORE_URL", f"sqlite:///{tmp_path / 'store.sqlite3'}")
    monkeypatch.setenv("TYPESAFE_API_KEY", "canary-sk-5d1c0e9b7a3f2468")
    monkeypatch.setenv("MEMORYBOOK_LIVE_IN_CI", "1")
    monkeypatch.delenv("MEMORYBOOK_RECORD_MODE", raising=False)
    assert jev_to_serve().mode is Mode.LIVE, "with a key and no recording, the service is live"
    for name, value in asked.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match="in clear"):
        create_app()
    assert main(["127.0.0.1"]) == 2
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and "record mode would write every ticket's words" in said, (
        "the service keeps tickets only in its encrypted store, so a start in record mode must "
        "be refused in one line (jev_to_serve() in memorybook/service_settings.py, which "
        f"create_app() and make serve's check both call): {said!r}")
    assert not (tmp_path / "calls.json").exists(), "a refused start must write no recording"


def test_a_damaged_recorded_answer_is_logged_by_ids_and_told_to_its_client_whole(
        tmp_path, monkeypatch, caplog):
    from memorybook.config import TYPESAFE_MODEL
    from memorybook.example import ROUTE
    from memorybook.jev import Jev, request_json
    from memorybook.recording import cache_key

    state = ticket()
    state["ticket"]["subject"] = "Kestrel invoice 7731"  # a subject no log may hold
    recording = tmp_path / "recording.json"
    damaged = {"model": TYPESAFE_MODEL, "usage": {}, "answers": {"team": {"type": "choice"}}}
    recording.write_text(json.dumps({cache_key(TYPESAFE_MODEL, *request_json(state, ROUTE)):
                                     damaged}), encoding="utf-8")
    jev = Jev(recording=recording, mode="replay")
    app = create_app(f"sqlite:///{tmp_path / 'store.sqlite3'}", ask=jev.ask_async)
    with caplog.at_level(logging.ERROR, logger="memorybook"):
        answer = talk(app, lambda http: http.post("/tickets", json=state))
    told = one_line(answer, 503, "a damaged recorded answer is the recording's failure")
    assert "damaged answer" in told and "Kestrel invoice 7731" in told, told
    logged = " ".join(r.getMessage() for r in caplog.records if r.name == "memorybook")
    assert "damaged answer" in logged and "T-901" in logged and "Kestrel" not in logged, (
        "routing_failed() (memorybook/service/failures.py) must log a RecordingError's "
        f"`logged`, which names the call by its ids, never the ticket's subject: {logged}")


def test_a_misss_503_is_one_line_each_whatever_the_ticket_id_holds(tmp_path):
    from memorybook.jev import Jev

    (tmp_path / "recording.json").write_text("{}", encoding="utf-8")
    jev = Jev(recording=tmp_path / "recording.json", mode="replay")
    app = create_app(f"sqlite:///{tmp_path / 'store.sqlite3'}", ask=jev.ask_async)
    state = ticket(ticket_id="T-1\nsecond line\u2028third")
    answer = talk(app, lambda http: http.post("/tickets", json=state))
    body = answer.json()
    said = [body["detail"], *body["likely_causes"], body["how_to_answer"]]
    assert answer.status_code == 503 and all(len(text.splitlines()) == 1 for text in said), (
        "each line of a miss's 503 must be one line, whatever the ticket's id holds "
        f"(routing_failed() in memorybook/service/failures.py, through flat()): {said}")


@pytest.mark.parametrize("request_line", ["POST /tickets/", "GET /health/",
                                          "GET /customers/C-1042/history/"])
def test_a_path_with_a_trailing_slash_is_a_404_in_one_line(tmp_path, request_line):
    app, jev = service(tmp_path)
    method, path = request_line.split()
    answer = talk(app, lambda http: http.request(method, path, json=ticket()))
    one_line(answer, 404, "FastAPI(redirect_slashes=False) in memorybook/service/app.py: no empty "
                          "307 to the path without the slash")
    assert jev.calls == []


def damage_the_only_memory(tmp_path) -> None:
    """Flip the last byte of the one memory in the service's SQLite store, as a disk or a hand
    outside memorybook would."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(tmp_path / "store.sqlite3")) as database:
        [(row, sealed)] = database.execute("SELECT id, sealed FROM memorybook_memories")
        database.execute("UPDATE memorybook_memories SET sealed = ? WHERE id = ?",
                         (sealed[:-1] + bytes([sealed[-1] ^ 1]), row))
        database.commit()


@pytest.mark.parametrize("ticket_id", ["a/b", "..", "T 1/é"])
def test_a_damaged_memory_of_any_ticket_id_is_freed_by_the_delete_its_409_names(tmp_path,
                                                                                ticket_id):

    app, _ = service(tmp_path)

    async def remember(http):
        assert (await http.post("/tickets", json=ticket(ticket_id=ticket_id))).status_code == 200
        return await http.get("/customers/C-1042/memories")  # once the gate has saved

    assert len(talk(app, remember).json()["memories"]) == 1
    damage_the_only_memory(tmp_path)

    async def free(http):
        refused = await http.get("/customers/C-1042/memories")
        said = one_line(refused, 409,
                        "a damaged memory: damaged() in memorybook/service/failures.py")
        [path] = re.findall(r"DELETE (\S+)\)", said)
        return path, await http.delete(path), await http.get("/customers/C-1042/memories")

    path, erased, after = talk(app, free)
    assert erased.status_code == 200 and erased.json() == {"erased": 1} and (
        after.json()["memories"] == []), (
        f"the DELETE a 409 names ({path}) must reach ticket {ticket_id!r}'s memories: the "
        "route's {ticket:path} and damaged()'s quoting in memorybook/service/failures.py: "
        f"{erased.status_code} {erased.text}")


def test_delete_of_one_tickets_memory_erases_it_alone_a_damaged_one_too(tmp_path):

    app, _ = service(tmp_path)

    async def remember_two(http):
        for ticket_id in ("T-901", "T-902"):
            assert (await http.post("/tickets", json=ticket(ticket_id=ticket_id))).status_code \
                == 200
        await http.get("/customers/C-1042/memories")  # once both gates have saved
        return [await http.delete("/customers/C-1042/memories/T-901"),
                await http.delete("/customers/C-1042/memories/T-901"),
                await http.delete("/customers/C-1042/memories/%20"),
                await http.get("/customers/C-1042/memories")]

    erased, again, blank, left = talk(app, remember_two)
    assert erased.status_code == 200 and erased.json() == {"erased": 1}, erased.text
    assert "T-901" in one_line(again, 404, "a ticket the customer has no memory of "
                                           "(answered() in memorybook/service/failures.py)")
    one_line(blank, 422, "a blank ticket id in the path")
    assert [m["request"]["ticket"]["id"] for m in left.json()["memories"]] == ["T-902"]

    damage_the_only_memory(tmp_path)

    async def forget_the_damaged_one(http):
        return [await http.get("/customers/C-1042/memories"),
                await http.post("/tickets", json=ticket(ticket_id="T-903")),
                await http.delete("/customers/C-1042/memories/T-902"),
                await http.get("/customers/C-1042/memories")]

    damaged, routed, forgotten, after = talk(app, forget_the_damaged_one)
    for answer in (damaged, routed):
        said = one_line(answer, 409, "a damaged memory cannot be read: damaged() in "
                                     "memorybook/service/failures.py")
        assert "DELETE /customers/C-1042/memories/T-902" in said and "try again" not in said, (
            f"a damaged memory's answer must name the DELETE that serves the customer again (a "
            f"retry alone never will): damaged() in memorybook/service/failures.py: {said}")
    assert forgotten.json() == {"erased": 1} and after.json()["memories"] == [], (
        "DELETE of a damaged memory's ticket must erase it, so that an HTTP client can give its "
        f"customer back their memories: {forgotten.text} {after.text}")


def test_get_of_one_tickets_memories_lists_them_alone(tmp_path):
    app, _ = service(tmp_path)

    async def requests(http):
        for ticket_id in ("T-901", "T-902"):
            await http.post("/tickets", json=ticket(ticket_id=ticket_id))
        return [await http.get("/customers/C-1042/memories/T-902"),
                await http.get("/customers/C-1042/memories/T-999"),
                await http.head("/customers/C-1042/memories/T-902")]

    one, none, head = talk(app, requests)
    assert one.status_code == 200 and [
        memory["request"]["ticket"]["id"] for memory in one.json()["memories"]] == ["T-902"], (
        f"GET of one ticket's memories must list that ticket's alone (memories_of_ticket() in "
        f"memorybook/service/routes.py, recall_ticket() in the store): {one.text}")
    assert "T-999" in one_line(none, 404, "a ticket the customer has no memory of")
    assert head.status_code == 200 and head.content == b""
