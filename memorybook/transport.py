"""The SDK clients memorybook asks Jev with, and their HTTP transports: replay only, or live
within bounds.

    client = sync_client(ReplayOnlyTransport(reason, recording))  # replay: nothing is sent
    client = sync_client(None, settings)                           # live, within its limits

Both take their key, endpoint and limits from `settings` (memorybook/settings.py; by default the
environment's, read when the client is made).

In replay mode (memorybook/jev.py: no key, always in CI) the transport is `ReplayOnlyTransport`
(memorybook/replay.py): nothing is sent, and a call the recording lacks is explained. Live, it
sends through httpx2 with two limits the SDK's own transport does not have:

- the whole call, retries and the waits between them included, ends within the settings'
  timeout_seconds ($MEMORYBOOK_TIMEOUT_SECONDS): the SDK's time-out bounds each read, so an
  endpoint that trickles a byte a second would otherwise hold a call for as long as it likes; an
  answer is read within MAX_ANSWER_BYTES, decoded;
- the API key is never sent over plain http except to this machine (127.0.0.0/8, ::1,
  localhost), and then never through a proxy, unless allow_plain_http
  ($MEMORYBOOK_ALLOW_PLAIN_HTTP=1) says that the network is trusted.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import re
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from email.utils import parsedate_to_datetime
from typing import ClassVar

import httpx2
from typesafe_sdk import AsyncTypeSafeClient, RetryPolicy, TypeSafeClient

from memorybook.api_errors import (
    AnswerRefusedError,
    CallTimeoutError,
    PlainHttpRefusedError,
    ProxySettingError,
)
from memorybook.redaction import redact, redact_key
from memorybook.replay import ReplayOnlyTransport
from memorybook.settings import (
    ALLOW_PLAIN_HTTP_ENV,
    ENDPOINT_ENV,
    PROXY_VARIABLES,
    TIMEOUT_ENV,
    Settings,
    proxy_variables,
)

# The SDK sends this header on every retry of a call, never on its first attempt: it tells this
# transport which requests belong to the call whose time is running.
SDK_RETRY_HEADER = "X-TypeSafe-Retry-Count"
# A time-out of a read that ends this close to the call's deadline is the deadline's doing.
_JSON_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})")  # a character as JSON may escape it
_DEADLINE_SLACK_SECONDS = 0.05
# Of an answer's body, decoded: a System One answer is a few kilobytes.
MAX_ANSWER_BYTES = 4_000_000
# The encodings an answer may come in, each with a decoder whose output can be bounded as it goes.
_DECOMPRESSORS = {
    "identity": lambda: None,
    "gzip": lambda: zlib.decompressobj(16 + zlib.MAX_WBITS),
    "deflate": lambda: zlib.decompressobj(32 + zlib.MAX_WBITS),  # zlib-wrapped, or gzip
}


def client_settings(settings: Settings | None = None) -> dict:
    """What the clients, sync and async, are made with: the official page's key and endpoint,
    and the time limit of the whole call, from `settings` (by default the environment's)."""
    settings = settings or Settings.from_environment()
    return dict(
        api_key=settings.api_key or "cache-only",
        base_url=settings.endpoint,  # None: the SDK's default endpoint
        timeout=settings.timeout_seconds,
        # The SDK waits for a retry only if the wait ends within the call's time.
        retry=RetryPolicy(timeout=min(settings.timeout_seconds, RetryPolicy().timeout)),
    )


def sync_client(replay: ReplayOnlyTransport | None,
                settings: Settings | None = None) -> TypeSafeClient:
    """An SDK client with `client_settings()`: through `replay`, or live (`LiveTransport`)."""
    settings = settings or Settings.from_environment()
    return TypeSafeClient(**client_settings(settings),
                          transport=replay or LiveTransport(settings=settings))


def async_client(replay: ReplayOnlyTransport | None,
                 settings: Settings | None = None) -> AsyncTypeSafeClient:
    """`sync_client()` for asyncio: the same settings and transport, whose work (a replay-only
    refusal, or a live call within its limits) runs in a worker thread."""
    settings = settings or Settings.from_environment()
    transport = replay or LiveTransport(settings=settings)
    return AsyncTypeSafeClient(**client_settings(settings), transport=InWorkerThread(transport))


class ClientOnFirstUse:
    """A client made by `make()` when it is first used: whatever holds one starts no client, and
    reads no setting, until it asks its first question."""

    def __init__(self, make) -> None:
        self._make = make
        self._client = None
        self._lock = threading.Lock()

    def __getattr__(self, name: str):
        with self._lock:
            if self._client is None:
                self._client = self._make()
        return getattr(self._client, name)


class InWorkerThread(httpx2.AsyncBaseTransport):
    """An asyncio transport that hands each request to a synchronous one in a thread of its own,
    so that the event loop never waits on it. A new thread for each attempt gives it the live
    transport's limits afresh; the whole call's time limit is then the caller's to keep (the
    async wrapper's `asyncio.timeout`)."""

    def __init__(self, transport: httpx2.BaseTransport) -> None:
        self.transport = transport

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        await request.aread()
        thread = ThreadPoolExecutor(1, thread_name_prefix="memorybook-async-attempt")
        try:
            return await asyncio.get_running_loop().run_in_executor(thread, self._send, request)
        finally:
            thread.shutdown(wait=False)  # a cancelled call does not wait for its thread

    def _send(self, request: httpx2.Request) -> httpx2.Response:
        response = self.transport.handle_request(request)
        content = response.read()
        return httpx2.Response(response.status_code, headers=response.headers, content=content,
                               extensions=response.extensions)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.transport.close)


class LiveTransport(httpx2.BaseTransport):
    """Sends over the network, refusing plain http off this machine and ending calls on time.

    Each thread's call has its own deadline, set by the call's first attempt and kept by its
    retries. An attempt runs in a thread of its own, which this one waits for until the deadline
    at most: a server that trickles its headers or body cannot hold the call, since each read's
    own time-out starts again with every byte. Its answer is read and decoded within
    `max_answer_bytes`. An answer asking to wait longer than the time left ends the call at once,
    as does the deadline, with `CallTimeoutError`, which the SDK does not retry; the client's
    RetryPolicy keeps the SDK's own waits within the call's time.

    Plain http to this machine goes straight to it, never through a proxy set in the environment,
    which may be another machine. Every other request uses the environment's proxies.

    An endpoint's status line goes on without the key, and the log lines of the libraries
    under this transport, which quote what the endpoint sent, are written without it and
    without the bodies sent and received (``SecretsOutOfLogs``).

    `seconds` (by default the settings' timeout_seconds), the key to keep out of what comes
    back and whether plain http may go anywhere come from `settings` (by default the
    environment's, read when the transport is made).
    """

    def __init__(self, seconds: float | None = None, *,
                 max_answer_bytes: int = MAX_ANSWER_BYTES,
                 settings: Settings | None = None) -> None:
        settings = settings or Settings.from_environment()
        self.seconds = settings.timeout_seconds if seconds is None else seconds
        self.max_answer_bytes = max_answer_bytes
        self.allow_plain_http = settings.allow_plain_http
        self._key = settings.api_key or ""
        self._tls = httpx2.create_ssl_context()  # made once: it reads the certificate store
        self._call = threading.local()
        SecretsOutOfLogs.install(settings.api_key)

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        if not self.allow_plain_http:
            _refuse_plain_http_off_this_machine(request.url)
        now = time.monotonic()
        if SDK_RETRY_HEADER not in request.headers or not hasattr(self._call, "deadline"):
            self._call.deadline = now + self.seconds
            self._call.last_attempt = None
        deadline = self._call.deadline
        if now >= deadline:
            raise self._timed_out(request)
        request.extensions["timeout"] = _capped(request.extensions.get("timeout"), deadline - now)
        request.headers["Accept-Encoding"] = ", ".join(_DECOMPRESSORS)  # what _read_answer reads
        direct = request.url.scheme == "http" and _is_this_machine(request.url.host)
        attempt = _Attempt(self._client(direct), request, self.max_answer_bytes)
        worker = threading.Thread(target=attempt.run, name="memorybook-live-attempt", daemon=True)
        worker.start()
        worker.join(max(0.0, deadline - time.monotonic()))
        if worker.is_alive():
            attempt.abandon()
            raise self._timed_out(request)
        try:
            response, body = attempt.outcome()
        except httpx2.TimeoutException:
            if time.monotonic() >= deadline - _DEADLINE_SLACK_SECONDS:
                raise self._timed_out(request) from None
            self._call.last_attempt = "timed out"
            raise
        except httpx2.TransportError as error:
            self._call.last_attempt = f"could not connect or read ({type(error).__name__})"
            raise
        self._call.last_attempt = f"was answered HTTP {response.status_code}"
        wait = _retry_after_seconds(response.headers)
        if wait is not None and wait > deadline - time.monotonic():  # a retry could not be on time
            self._call.last_attempt += f", asking to wait {wait:g} s"
            raise self._timed_out(request)
        # Without the key in any header the server echoed it in (an SDK error quotes the
        # request id header, say); the body is decoded here, so without its encoding and length.
        key = self._key
        headers = httpx2.Headers([(name, redact_key(value, key)) for name, value in
                                  response.headers.multi_items()
                                  if name.lower() not in ("content-encoding", "content-length")
                                  and redact_key(name, key) == name])  # a name holding it goes
        extensions = {name: response.extensions[name] for name in ("http_version", "reason_phrase")
                      if name in response.extensions}
        if "reason_phrase" in extensions:  # bytes; HTTP's own text is Latin-1
            extensions["reason_phrase"] = redact_key(
                extensions["reason_phrase"].decode("latin-1"), key).encode("latin-1", "replace")
        return httpx2.Response(response.status_code, headers=headers,
                               content=_without_the_key(body, key), extensions=extensions)

    def _client(self, direct: bool) -> httpx2.Client:
        """An httpx2 client: through the environment's proxies, unless `direct`."""
        try:
            return httpx2.Client(trust_env=not direct, verify=self._tls)
        except (ImportError, ValueError) as error:  # a socks or ftp proxy, say
            raise ProxySettingError(_unusable_proxy(error)) from None

    def _timed_out(self, request: httpx2.Request) -> CallTimeoutError:
        last = self._call.last_attempt
        return CallTimeoutError(
            f"no answer from {_origin(request.url)} within {self.seconds:g} s, the whole call's "
            f"time ({TIMEOUT_ENV}), retries included"
            + (f"; the attempt before {last}" if last is not None else "")
        )


class SecretsOutOfLogs(logging.Filter):
    """Takes the API key and the customers' words out of the log lines of the libraries a call
    goes through, for whoever turns their logging up to DEBUG:

    - the key, which they quote from what the endpoint sent (httpx2 its status line; httpcore2
      at DEBUG its headers; the SDK at DEBUG the headers it got);
    - the bodies the SDK logs at DEBUG, both ways: a request's is the state, a ticket's words
      included, and an error's may quote it. Their size is logged in their place.

    A logger's filter sees only its own records, so each logger is named. The keys taken out are
    $TYPESAFE_API_KEY, as redact_key() finds it, and every key a client was given
    (`install(key)`), whatever its settings were read from."""

    LOGGERS = ("httpx2", "typesafe_sdk", *(f"httpcore2.{name}" for name in (
        "connection", "http11", "http2", "proxy", "socks")))
    keys: ClassVar[set[str]] = set()  # the keys installed so far, for every logger's filter

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, dict) and isinstance(record.args.get("body"), bytes | str):
            record.args = {**record.args, "body": _NotLogged(len(record.args["body"]))}
        message = record.getMessage()
        redacted = redact_key(message, *self.keys)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True

    @classmethod
    def install(cls, key: str | None = None) -> None:
        """The filter on each of LOGGERS (once), taking `key` out too from now on."""
        if key:
            cls.keys.add(key)
        for name in cls.LOGGERS:
            logger = logging.getLogger(name)
            if not any(isinstance(known, cls) for known in logger.filters):
                logger.addFilter(cls())


class _NotLogged:
    """What a log line shows for a body it leaves out."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __repr__(self) -> str:
        return f"<{self.size} bytes, not logged>"


class _Attempt:
    """One request and its answer, read whole, in a thread that may be left behind at the deadline.

    Left behind, its client is closed, so that the thread ends at its next read.
    """

    def __init__(self, client: httpx2.Client, request: httpx2.Request, max_bytes: int) -> None:
        self.client, self.request, self.max_bytes = client, request, max_bytes
        self._result: tuple[httpx2.Response, bytes] | None = None
        self._error: BaseException | None = None

    def run(self) -> None:
        try:
            response = self.client.send(self.request, stream=True)
            try:
                self._result = response, _read_answer(response, self.request.url, self.max_bytes)
            finally:
                response.close()
        except BaseException as error:  # noqa: BLE001 - handed to the waiting thread
            self._error = error
        finally:
            self.client.close()

    def abandon(self) -> None:
        self.client.close()

    def outcome(self) -> tuple[httpx2.Response, bytes]:
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


def _read_answer(response: httpx2.Response, url: httpx2.URL, max_bytes: int) -> bytes:
    """The answer's body, decoded, refused as soon as it is longer than `max_bytes`."""
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in _DECOMPRESSORS:
        raise AnswerRefusedError(
            f"the answer from {_origin(url)} is encoded as {encoding!r}, which this client did "
            "not ask for"
        )
    decompressor = _DECOMPRESSORS[encoding]()
    body = bytearray()
    for chunk in response.iter_raw():
        pending = chunk
        while pending:
            if decompressor is None:
                body += pending[: max_bytes + 1 - len(body)]
                pending = b""
            else:
                try:
                    body += decompressor.decompress(pending, max_bytes + 1 - len(body))
                except zlib.error as error:
                    raise AnswerRefusedError(
                        f"the answer from {_origin(url)} could not be decoded as {encoding} "
                        f"({error})"
                    ) from None
                pending = decompressor.unconsumed_tail
            if len(body) > max_bytes:
                raise AnswerRefusedError(
                    f"the answer from {_origin(url)} is longer than {max_bytes:,} bytes, the "
                    "limit of an answer, so it was not read further"
                )
    return bytes(body)


def _without_the_key(body: bytes, key: str) -> bytes:
    """The body with any echo of the API key (`key`, and $TYPESAFE_API_KEY) taken out, so that
    no SDK error can quote it and no answer can carry it into a recording: in the text as sent,
    and as it reads once its JSON escapes are decoded (any character may be written
    \\u0073...), JSON or not. A body that is not UTF-8 text (UTF-16, say, which hides the key
    between NUL bytes) is not passed on: only its size."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        text = ""
    if not text and body or "\x00" in text:
        return f"(a body of {len(body):,} bytes that is not UTF-8 text, not shown)".encode()
    try:  # as JSON decodes it, with a byte order mark and raw control characters let through
        data, is_json = json.loads(text.removeprefix("\ufeff"), strict=False), True
    except ValueError:  # not JSON: its \\u escapes decoded alone
        data, is_json = None, False
    unescaped = (json.dumps(data, ensure_ascii=False) if is_json
                 else _JSON_ESCAPE.sub(lambda match: chr(int(match.group(1), 16)), text))
    cleaned = redact_key(unescaped, key)
    if cleaned != unescaped:  # written back in ASCII, so that a lone surrogate cannot fail it
        return (json.dumps(json.loads(cleaned), ensure_ascii=True).encode() if is_json
                else cleaned.encode("utf-8", errors="backslashreplace"))
    cleaned = redact_key(text, key)
    return body if cleaned == text else cleaned.encode("utf-8")


def _refuse_plain_http_off_this_machine(url: httpx2.URL) -> None:
    """Raise `PlainHttpRefusedError` for plain http to another machine (the caller lets it
    through when the settings allow plain http)."""
    if url.scheme != "http" or _is_this_machine(url.host):
        return
    raise PlainHttpRefusedError(
        f"refused to send the API key over plain http to {_origin(url)}, where anyone on the way "
        f"could read it: use an https:// address in {ENDPOINT_ENV}, or set "
        f"{ALLOW_PLAIN_HTTP_ENV}=1 if the network to it is trusted (plain http to this machine, "
        "127.0.0.1 or localhost, is always allowed)"
    )


def _unusable_proxy(error: Exception) -> str:
    """One sentence naming the proxy setting the client could not use, and what to do."""
    for name, value in proxy_variables().items():
        scheme = value.strip().partition("://")[0].lower() if "://" in value else ""
        if scheme not in ("", "http", "https"):
            return (f"cannot send through the proxy {name}={redact(value.strip())}: the "
                    f"collection's client uses only http:// and https:// proxies, not {scheme}://; "
                    f"set {name} to an http:// proxy, or unset it")
    return (f"cannot use the proxy settings ({', '.join(PROXY_VARIABLES)}): "
            f"{' '.join(redact(error).split())}")


def _is_this_machine(host: str) -> bool:
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _origin(url: httpx2.URL) -> str:
    """scheme://host[:port] of a URL: never its user name or password."""
    port = f":{url.port}" if url.port is not None else ""
    host = f"[{url.host}]" if ":" in url.host else url.host
    return f"{url.scheme}://{host}{port}"


def _capped(timeouts: dict | None, seconds_left: float) -> dict:
    """httpx2's per-operation time-outs, none longer than the time left to the call."""
    timeouts = dict(timeouts or {})
    for operation in ("connect", "read", "write", "pool"):
        current = timeouts.get(operation)
        timeouts[operation] = seconds_left if current is None else min(current, seconds_left)
    return timeouts


def _retry_after_seconds(headers: httpx2.Headers) -> float | None:
    """The wait an answer asks for: retry-after-ms, or Retry-After in seconds or as a date."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        text = headers.get(name)
        if text is None:
            continue
        try:
            return float(text) * scale
        except ValueError:
            pass
        try:
            return parsedate_to_datetime(text).timestamp() - time.time()
        except (TypeError, ValueError, OverflowError):
            continue
    return None
