"""The live transport against servers that misbehave on the wire: slow, huge, or in the way.

Each test makes one call through a `Jev` in live mode, as an app with a key makes it (its client
and transport: memorybook/transport.py), to a server on 127.0.0.1 that this file starts and
always stops. Deadlines are short (1-2 s) and checked with a stated margin of 1 s, for a loaded
machine.
"""

from __future__ import annotations

import gzip
import json
import logging
import socket
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx2
import pytest
from typesafe_sdk import Noul, TypeSafeClient, TypeSafeError

from memorybook.api_errors import AnswerRefusedError, CallTimeoutError, describe_api_failure
from memorybook.config import MAX_TIMEOUT_SECONDS, RECORDING_PATH
from memorybook.jev import Jev
from memorybook.recording import RecordingError
from memorybook.transport import MAX_ANSWER_BYTES, LiveTransport, SecretsOutOfLogs
from tests.helpers import MARGIN_SECONDS
from tools.loopback_server import LoopbackSystemOne

KEY = "canary-sk-4b1d9e7a2c6f8035"
QUESTIONS = {"yes": Noul(instructions="Is `ticket.subject` about billing?")}
ANSWER = {"model": "jev-1.14.0", "usage": {}, "answers": {"yes": {"type": "noul", "noul": 0.25}}}
Handler = Callable[[socket.socket, threading.Event], None]


@pytest.fixture(autouse=True)
def live(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TYPESAFE_API_KEY", KEY)
    monkeypatch.setenv("MEMORYBOOK_LIVE_IN_CI", "1")
    for name in ("MEMORYBOOK_RECORDING", "MEMORYBOOK_RECORD_MODE"):  # live: no recording
        monkeypatch.delenv(name, raising=False)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY",
                 "MEMORYBOOK_ALLOW_PLAIN_HTTP"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def call(monkeypatch: pytest.MonkeyPatch, base_url: str, seconds: float) -> tuple[object, float]:
    """One call through a live Jev: its answer or error, and the seconds it took."""
    monkeypatch.setenv("TYPESAFE_ENDPOINT", base_url)
    monkeypatch.setenv("MEMORYBOOK_TIMEOUT_SECONDS", str(seconds))
    jev = Jev(mode="live")  # its client is made at the first call, from the settings above
    started = time.monotonic()
    try:
        outcome: object = jev.ask({"ticket": {"subject": "Invoice"}}, QUESTIONS)
    except TypeSafeError as error:
        outcome = error
    return outcome, time.monotonic() - started


@contextmanager
def raw_server(handle: Handler) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 that reads each request, then lets `handle` answer on the
    socket; `handle` waits on the event it is given, which is set when the block ends."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)
    stopped = threading.Event()

    def answer(connection: socket.socket) -> None:
        with connection:
            try:
                received = b""
                while b"\r\n\r\n" not in received:
                    received += connection.recv(65536) or b"\r\n\r\n"
                handle(connection, stopped)
            except OSError:  # the client gave up first
                pass

    def serve() -> None:
        while not stopped.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:  # the accept's time-out: look at `stopped` again
                continue
            threading.Thread(target=answer, args=(connection,), daemon=True).start()

    serving = threading.Thread(target=serve, daemon=True)
    serving.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stopped.set()
        serving.join(5)
        listener.close()


def headers_a_byte_at_a_time(connection: socket.socket, stopped: threading.Event) -> None:
    connection.sendall(b"HTTP/1.1 200 OK\r\n")
    for byte in b"X-Slow: " + b"a" * 12:  # 8 s in all, so that a call that waits ends too
        if stopped.wait(0.4):
            return
        connection.sendall(bytes([byte]))


def one_body_byte_late_then_nothing(connection: socket.socket, stopped: threading.Event) -> None:
    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                       b"Content-Length: 200\r\n\r\n")
    if not stopped.wait(1.8):
        connection.sendall(b"{")
        stopped.wait(30)


@pytest.mark.parametrize("handler, seconds", [
    pytest.param(headers_a_byte_at_a_time, 1, id="a header byte every 0.4 s, deadline 1 s"),
    pytest.param(one_body_byte_late_then_nothing, 2, id="a body byte at 1.8 s, deadline 2 s"),
])
def test_a_live_call_ends_by_its_deadline_whatever_the_server_trickles(
    monkeypatch: pytest.MonkeyPatch, handler: Handler, seconds: float
) -> None:
    with raw_server(handler) as base_url:
        outcome, took = call(monkeypatch, base_url, seconds)
    assert isinstance(outcome, CallTimeoutError), outcome
    assert took <= seconds + MARGIN_SECONDS, f"{took:.2f} s for a deadline of {seconds} s"
    assert f"no answer from {base_url} within {seconds:g} s" in describe_api_failure(outcome)


def test_an_answer_that_inflates_past_the_limit_is_refused_while_it_is_read(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    bomb = gzip.compress(b" " * (16 * MAX_ANSWER_BYTES), compresslevel=9)  # 64 MB in ~60 KB

    def send_bomb(connection: socket.socket, stopped: threading.Event) -> None:
        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                           b"Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(bomb))
        connection.sendall(bomb)

    with raw_server(send_bomb) as base_url:
        tracemalloc.start()
        try:
            outcome, took = call(monkeypatch, base_url, 2)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert isinstance(outcome, AnswerRefusedError), outcome
    assert f"longer than {MAX_ANSWER_BYTES:,} bytes" in describe_api_failure(outcome)
    assert peak < 4 * MAX_ANSWER_BYTES, f"{peak:,} bytes held while reading"
    assert took <= 2 + MARGIN_SECONDS


def test_an_answer_within_the_limit_is_read_compressed_or_not(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    with LoopbackSystemOne(RECORDING_PATH, answer_with=lambda body: ANSWER) as server:
        outcome, _ = call(monkeypatch, server.base_url, 2)
    assert outcome.answers["yes"].noul == 0.25, outcome
    body = gzip.compress(json.dumps(ANSWER).encode())

    def send_gzip(connection: socket.socket, stopped: threading.Event) -> None:
        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                           b"Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(body)
                           + body)

    with raw_server(send_gzip) as base_url:
        outcome, _ = call(monkeypatch, base_url, 2)
    assert outcome.answers["yes"].noul == 0.25, outcome


def test_plain_http_to_this_machine_never_goes_through_a_proxy(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    seen_by_proxy: list[bytes] = []

    def proxy(connection: socket.socket, stopped: threading.Event) -> None:
        seen_by_proxy.append(b"a request")
        connection.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")

    with (raw_server(proxy) as proxy_url,
          LoopbackSystemOne(RECORDING_PATH, answer_with=lambda body: ANSWER) as server):
        for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.setenv(name, proxy_url)
        endpoint = server.base_url.replace("127.0.0.1", "localhost")
        outcome, _ = call(monkeypatch, endpoint, 2)
        outcome_by_address, _ = call(monkeypatch, server.base_url, 2)
        keys_sent = [request["headers"].get("authorization") for request in server.requests]
    assert seen_by_proxy == [], "the key went to the proxy"
    assert outcome.answers["yes"].noul == 0.25, outcome
    assert outcome_by_address.answers["yes"].noul == 0.25, outcome_by_address
    assert keys_sent == [f"Bearer {KEY}"] * 2


def test_an_api_error_that_echoes_the_key_does_not_carry_it_in_the_sdks_exception(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    with LoopbackSystemOne(RECORDING_PATH, failure="bad_request", echo_headers=True) as server:
        outcome, _ = call(monkeypatch, server.base_url, 2)
    assert isinstance(outcome, TypeSafeError)
    shown = f"{outcome} {outcome!r} {vars(outcome)}"
    assert "[redacted]" in shown
    assert KEY not in shown


def test_the_longest_timeout_allowed_still_makes_live_calls(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    with LoopbackSystemOne(RECORDING_PATH, answer_with=lambda body: ANSWER) as server:
        outcome, _ = call(monkeypatch, server.base_url, MAX_TIMEOUT_SECONDS)
    assert outcome.answers["yes"].noul == 0.25, outcome


@pytest.mark.parametrize("name, proxy", [("HTTPS_PROXY", "socks5://u:pw9Secret@127.0.0.1:1"),
                                         ("https_proxy", "ftp://127.0.0.1:1"),
                                         ("ALL_PROXY", "socks5h://127.0.0.1:1")])
def test_a_proxy_the_client_cannot_use_is_named_in_one_sentence(
    monkeypatch: pytest.MonkeyPatch, name: str, proxy: str
) -> None:
    monkeypatch.setenv(name, proxy)
    try:
        outcome, _ = call(monkeypatch, "https://127.0.0.1:9", 2)
    except (ImportError, ValueError) as error:
        raise AssertionError(
            f"{name}={proxy} gave a raw {type(error).__name__}: memorybook/transport.py must say "
            f"in one sentence which proxy setting it cannot use: {error}") from None
    message = str(outcome)
    assert isinstance(outcome, TypeSafeError), outcome
    assert f"{name}=" in message and proxy.partition(":")[0] in message, message
    assert "pw9Secret" not in message and "\n" not in message, message


def answering(status: str, body: bytes, **headers: str) -> Handler:
    """A handler that answers once: this status line, these headers, this body."""
    def handle(connection: socket.socket, stopped: threading.Event) -> None:
        lines = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", "Connection: close",
                 *(f"{name.replace('_', '-')}: {value}" for name, value in headers.items())]
        connection.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
    return handle


ESCAPED_KEY = "".join(f"\\u{ord(character):04x}" for character in KEY)  # JSON's other spelling
ERROR_ECHOING_IT = f'{{"error": {{"message": "bad key {KEY}"}}}}'


@pytest.mark.parametrize("handler", [
    pytest.param(answering("200 OK", json.dumps(ANSWER).replace(
        '"jev-1.14.0"', f'"{ESCAPED_KEY}"').encode(), Content_Type="application/json"),
        id="an answer naming the key as its model, every character escaped"),
    pytest.param(answering("400 Bad Request", ERROR_ECHOING_IT.replace(KEY, ESCAPED_KEY).encode(),
                           Content_Type="application/json"),
                 id="an error quoting the key, every character escaped"),
    pytest.param(answering("400 Bad Request", b'{"error": {"message": "nope"}}',
                           Content_Type="application/json", X_TypeSafe_Request_Id=KEY),
                 id="an error with the key as its request id header"),
    pytest.param(answering("400 Bad Request", ERROR_ECHOING_IT.encode("utf-16"),
                           Content_Type="application/json"),
                 id="an error quoting the key in UTF-16"),
    pytest.param(answering("400 Bad Request", ERROR_ECHOING_IT.encode("utf-16-le"),
                           Content_Type="application/json"),
                 id="an error quoting the key in UTF-16 without a byte order mark"),
    pytest.param(answering("400 Bad Request", b"\xef\xbb\xbf" + ERROR_ECHOING_IT.replace(
        KEY, ESCAPED_KEY).encode(), Content_Type="application/json"),
        id="an error quoting the key escaped, after a byte order mark"),
    pytest.param(answering("400 Bad Request", ERROR_ECHOING_IT.replace(
        KEY, "\t" + ESCAPED_KEY).encode(), Content_Type="application/json"),
        id="an error quoting the key escaped, after a raw tab"),
    pytest.param(answering("200 OK", json.dumps(ANSWER).replace(
        '"jev-1.14.0"', f'"\\ud800{ESCAPED_KEY}"').encode(), Content_Type="application/json"),
        id="an answer naming the key escaped, after a lone surrogate"),
    pytest.param(answering(f"400 Bad key {KEY}", b'{"error": {"message": "nope"}}',
                           Content_Type="application/json"),
                 id="an error with the key in its status line"),
    pytest.param(answering(f"200 OK {KEY}", json.dumps(ANSWER).encode(),
                           Content_Type="application/json"),
                 id="an answer with the key in its status line"),
    pytest.param(answering(f"401 bad {KEY}", b"", WWW_Authenticate=f"Bearer {KEY}"),
                 id="a refusal with the key in its status line and a header"),
    pytest.param(answering("400 Bad Request", b'{"error": {"message": "nope"}}',
                           Content_Type="application/json", **{f"X_{KEY}": "1"}),
                 id="an error with the key as a header's name"),
])
def test_no_answer_or_error_of_a_hostile_endpoint_carries_the_key(monkeypatch, caplog,
                                                                   handler):
    with raw_server(handler) as base_url, caplog.at_level(logging.DEBUG):  # every library's
        outcome, _ = call(monkeypatch, base_url, 2)
    assert not isinstance(outcome, Exception) or isinstance(outcome, TypeSafeError), (
        f"a hostile answer must end in the SDK's error, not {outcome!r}")
    shown = (f"{outcome} {outcome!r} {vars(outcome)}" if isinstance(outcome, Exception)
             else outcome.model_dump_json()) + caplog.text
    if isinstance(outcome, TypeSafeError):
        shown += describe_api_failure(outcome)
    for form in (KEY, KEY.encode("utf-16-le").decode("latin-1"), ESCAPED_KEY,
                 repr(KEY.encode("utf-16-le"))[2:-1]):
        assert form not in shown, (
            "memorybook/transport.py's LiveTransport must take the key out of what the endpoint "
            "sends back, however it is spelt (JSON escapes, a header, another encoding), before "
            "the SDK reads it, and SecretsOutOfLogs out of the log lines of every library the call "
            f"goes through: {shown[shown.find(form) - 300:][:600]}")


def test_a_gate_refused_with_the_tickets_words_is_logged_without_them(monkeypatch, caplog):
    import asyncio
    import logging

    from memorybook import InMemoryMemories, MadeUpJev, PendingGates, ask_with_memory_async
    from memorybook.example import ROUTE

    words = "my password is hunter2"
    state = {"customer": {"id": "C-1"}, "ticket": {"id": "T-9", "text": words}}
    echo = answering("400 Bad Request", json.dumps(
        {"error": {"message": f"Bad request: {json.dumps(state)}"}}).encode(),
        Content_Type="application/json")
    with raw_server(echo) as base_url:
        monkeypatch.setenv("TYPESAFE_ENDPOINT", base_url)
        gate = Jev(mode="live")

        async def one_ticket() -> None:
            gates = PendingGates()
            await ask_with_memory_async(state, ROUTE, InMemoryMemories(), gates=gates,
                                        ask=MadeUpJev(lambda s, q: {"team": "billing"}).ask_async,
                                        ask_gate=gate.ask_async)
            await gates.drain()

        with caplog.at_level(logging.ERROR, logger="memorybook"):
            asyncio.run(one_ticket())
    logged = [record.getMessage() for record in caplog.records if record.name == "memorybook"]
    assert len(logged) == 1 and "HTTP 400" in logged[0] and "T-9" in logged[0], logged
    assert words not in logged[0], (
        "a failed gate's log line must leave out what the API said, which may quote the ticket: "
        "memorybook/wrapper.py's keep_if_worth_it() passes quoting_the_api=False to "
        f"describe_api_failure(): {logged[0]}")


def test_the_status_line_an_endpoint_writes_goes_on_without_the_key():
    hostile = answering(f"400 Bad key {KEY}", b"{}", Content_Type="application/json")
    with raw_server(hostile) as base_url:
        response = LiveTransport(2).handle_request(
            httpx2.Request("POST", f"{base_url}/v1/systemone", json={}))
    assert response.status_code == 400 and KEY not in response.reason_phrase, (
        "memorybook/transport.py's LiveTransport must pass on the status line's reason without "
        f"the key (the SDK's client and its errors show it): {response.reason_phrase!r}")


WORDS = "my card ends 4242 and my password is hunter2"


@pytest.mark.parametrize("how", ["live", "live, its error quoting the ticket", "live, async",
                                 "live, the app's own client", "replaying"])
def test_a_debug_log_of_every_library_holds_no_customers_words(monkeypatch, caplog, tmp_path,
                                                                how):
    import asyncio

    state = {"ticket": {"subject": "Invoice", "text": WORDS}}
    body = (json.dumps({"error": {"message": f"Bad request: {json.dumps(state)}"}})
            if "error" in how else json.dumps(ANSWER))
    server = answering("400 Bad Request" if "error" in how else "200 OK", body.encode(),
                       Content_Type="application/json")
    for name in SecretsOutOfLogs.LOGGERS:  # as in a new process: this case must install it
        monkeypatch.setattr(logging.getLogger(name), "filters", [])
    with raw_server(server) as base_url, caplog.at_level(logging.DEBUG):  # every library's
        monkeypatch.setenv("TYPESAFE_ENDPOINT", base_url)
        if how == "live, the app's own client":
            jev = Jev(mode="live", client=TypeSafeClient(api_key=KEY, base_url=base_url))
        elif how == "replaying":
            (tmp_path / "recording.json").write_text("{}")
            jev = Jev(recording=tmp_path / "recording.json", mode="replay")
        else:
            jev = Jev(mode="live")
        try:
            if how == "live, async":
                asyncio.run(jev.ask_async(state, QUESTIONS))
            else:
                jev.ask(state, QUESTIONS)
        except (TypeSafeError, RecordingError):  # the refusal, or the miss: logged all the same
            assert how in ("live, its error quoting the ticket", "replaying")
    wire = [record.getMessage() for record in caplog.records if "body=" in record.getMessage()]
    assert wire and all("bytes, not logged>" in line for line in wire), (
        f"the SDK's DEBUG lines of what went over the wire are expected here: {caplog.text}")
    assert WORDS not in caplog.text and "hunter2" not in caplog.text, (
        "memorybook/transport.py's SecretsOutOfLogs must take the bodies out of the SDK's DEBUG "
        "lines (a request's is the state, a ticket's words included; an error may quote it), "
        "and Jev() must install it, whatever its client: "
        f"{caplog.text[caplog.text.find('hunter2') - 300:][:600]}")
