"""The collection's SDK client and its HTTP transport: replay only, or live within bounds.

    client = collection_client()  # notebook 1, in place of the pattern's plain client

Without a key, and always in CI, it is `ReplayOnlyTransport` (memorybook/replay.py): nothing is
sent, and a call the recording lacks is explained. Live, it sends through httpx2 with two limits
the SDK's own transport does not have:

- the whole call, retries and the waits between them included, ends within
  $MEMORYBOOK_TIMEOUT_SECONDS: the SDK's time-out bounds each read, so an endpoint that trickles
  a byte a second would otherwise hold a call for as long as it likes;
- the API key is never sent over plain http except to this machine (127.0.0.0/8, ::1,
  localhost), unless $MEMORYBOOK_ALLOW_PLAIN_HTTP=1 says that the network is trusted.
"""

from __future__ import annotations

import ipaddress
import math
import os
import threading
import time
from email.utils import parsedate_to_datetime

import httpx2
from typesafe_sdk import TypeSafeClient

from memorybook.config import (
    ALLOW_PLAIN_HTTP_ENV,
    API_KEY_ENV,
    ENDPOINT_ENV,
    TIMEOUT_ENV,
    replay_only_reason,
    timeout_seconds,
)
from memorybook.live import CallTimeoutError, PlainHttpRefusedError
from memorybook.replay import ReplayOnlyTransport

# The SDK sends this header on every retry of a call, never on its first attempt: it tells this
# transport which requests belong to the call whose time is running.
SDK_RETRY_HEADER = "X-TypeSafe-Retry-Count"
# A time-out of a read that ends this close to the call's deadline is the deadline's doing.
_DEADLINE_SLACK_SECONDS = 0.05


def collection_client() -> TypeSafeClient:
    """The client the collection uses in place of the pattern's: the same settings, read from
    the environment, with `collection_transport()` and $MEMORYBOOK_TIMEOUT_SECONDS."""
    return TypeSafeClient(
        api_key=os.environ.get(API_KEY_ENV, "").strip() or "cache-only",
        base_url=os.environ.get(ENDPOINT_ENV) or None,  # None: the SDK's default endpoint
        timeout=timeout_seconds(),
        transport=collection_transport(),
    )


class ClientOnFirstUse:
    """`collection_client()`, made when it is first used: a module that holds one starts no
    client, and reads no setting, when it is imported."""

    def __init__(self) -> None:
        self._client: TypeSafeClient | None = None
        self._lock = threading.Lock()

    def __getattr__(self, name: str):
        with self._lock:
            if self._client is None:
                self._client = collection_client()
        return getattr(self._client, name)


def collection_transport() -> httpx2.BaseTransport:
    """The transport for the collection's SDK client: replay only, or live within its limits."""
    reason = replay_only_reason()
    if reason is not None:
        return ReplayOnlyTransport(reason)
    return LiveTransport(timeout_seconds())


class LiveTransport(httpx2.BaseTransport):
    """Sends over the network, refusing plain http off this machine and ending calls on time.

    Each thread's call has its own deadline, set by the call's first attempt and kept by its
    retries. An attempt is sent with at most the time left, and its answer is read whole within
    it; a Retry-After longer than the time left is shortened to it, so that the SDK's wait ends
    by the deadline too. After the deadline the call ends with `CallTimeoutError`, which the SDK
    does not retry.
    """

    def __init__(self, seconds: float, *, client: httpx2.Client | None = None) -> None:
        self.seconds = seconds
        # A client, not a bare HTTPTransport, so that proxies set in the environment still apply.
        self._client = httpx2.Client() if client is None else client
        self._call = threading.local()

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        _refuse_plain_http_off_this_machine(request.url)
        now = time.monotonic()
        if SDK_RETRY_HEADER not in request.headers or not hasattr(self._call, "deadline"):
            self._call.deadline = now + self.seconds
            self._call.last_attempt = None
        deadline = self._call.deadline
        if now >= deadline:
            raise self._timed_out(request)
        request.extensions["timeout"] = _capped(request.extensions.get("timeout"), deadline - now)
        try:
            response = self._client.send(request, stream=True)
            try:
                body = []
                for chunk in response.iter_raw():
                    body.append(chunk)
                    if time.monotonic() >= deadline:
                        raise self._timed_out(request)
            finally:
                response.close()
        except httpx2.TimeoutException:
            if time.monotonic() >= deadline - _DEADLINE_SLACK_SECONDS:
                raise self._timed_out(request) from None
            self._call.last_attempt = "timed out"
            raise
        except httpx2.TransportError as error:
            self._call.last_attempt = f"could not connect or read ({type(error).__name__})"
            raise
        self._call.last_attempt = f"was answered HTTP {response.status_code}"
        headers = _retry_after_capped(response.headers, deadline - time.monotonic())
        extensions = {name: response.extensions[name] for name in ("http_version", "reason_phrase")
                      if name in response.extensions}
        return httpx2.Response(response.status_code, headers=headers, content=b"".join(body),
                               extensions=extensions)

    def close(self) -> None:
        self._client.close()

    def _timed_out(self, request: httpx2.Request) -> CallTimeoutError:
        last = self._call.last_attempt
        return CallTimeoutError(
            f"no answer from {_origin(request.url)} within {self.seconds:g} s, the whole call's "
            f"time ({TIMEOUT_ENV}), retries included"
            + (f"; the attempt before {last}" if last is not None else "")
        )


def _refuse_plain_http_off_this_machine(url: httpx2.URL) -> None:
    """Raise `PlainHttpRefusedError` for plain http to another machine, unless allowed."""
    if url.scheme != "http" or _is_this_machine(url.host):
        return
    if os.environ.get(ALLOW_PLAIN_HTTP_ENV, "").strip() == "1":
        return
    raise PlainHttpRefusedError(
        f"refused to send the API key over plain http to {_origin(url)}, where anyone on the way "
        f"could read it: use an https:// address in {ENDPOINT_ENV}, or set "
        f"{ALLOW_PLAIN_HTTP_ENV}=1 if the network to it is trusted (plain http to this machine, "
        "127.0.0.1 or localhost, is always allowed)"
    )


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


def _retry_after_capped(headers: httpx2.Headers, seconds_left: float) -> httpx2.Headers:
    """The headers, with a Retry-After that asks to wait past the deadline cut to the time left."""
    delay = _retry_after_seconds(headers)
    if delay is None or delay <= seconds_left:
        return headers
    capped = httpx2.Headers(headers)
    capped["retry-after-ms"] = str(max(0, math.floor(seconds_left * 1000)))
    capped.pop("retry-after", None)
    return capped


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
