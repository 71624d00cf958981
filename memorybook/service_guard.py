"""What every request to the service passes before a route sees it, in this order:

1. `Host` is a loopback name or one in MEMORYBOOK_ALLOWED_HOSTS, with at most a port after it
   (else 400): a web page that rebinds its own name to 127.0.0.1 reads nothing.
2. With MEMORYBOOK_SERVICE_TOKEN set, `Authorization: Bearer <token>`, compared in constant time
   (else 401); without one, only requests to a loopback address (else 403).
   `GET /health` and `GET /ready` pass 1 and 2 as they are: a probe knows neither, and they
   say no more than whether the service is up and ready.
3. OPTIONS answers with `Allow`, every method the path takes; any other method the path does not
   take gets 405 with the same `Allow`. HEAD is GET without the body, wherever GET is.
4. A body is read only up to MEMORYBOOK_MAX_BODY_BYTES: a longer `Content-Length` gets 413 before
   a byte of it is read, and a body without one gets 413 once it has gone past the limit.

Each refusal is JSON, `{"detail": one line}`; none repeats a token.
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Callable

from fastapi import HTTPException

from memorybook.settings import TOKEN_ENV, Settings, is_loopback
from memorybook.store.validation import shown

HEALTH_PATH = "/health"
READY_PATH = "/ready"
PROBE_PATHS = (HEALTH_PATH, READY_PATH)
_PORT = re.compile(r"(?::[0-9]{1,5})?")  # after the name in a Host header: nothing, or a port


def host_name(host_header: str) -> str | None:
    """The name in a Host header, without its port (and without brackets around IPv6); None
    unless what follows the name is nothing or a port (`[::1]evil.example`, `localhost:x`)."""
    if host_header.startswith("["):
        name, bracket, rest = host_header[1:].partition("]")
    elif host_header.count(":") == 1:
        name, bracket, rest = host_header.partition(":")
        rest = ":" + rest
    else:
        name, bracket, rest = host_header, "]", ""
    return name if bracket and _PORT.fullmatch(rest) else None


class Guard:
    """ASGI middleware: the checks above, around `app`. `methods_at(path)` gives the methods
    the app's routes take at a path (an empty set where no route matches)."""

    def __init__(self, app, *, settings: Settings,
                 methods_at: Callable[[str], set[str]]) -> None:
        self.app = app
        self.settings = settings
        self.methods_at = methods_at
        self._token = None if settings.token is None else f"Bearer {settings.token}".encode()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {}
        for name, value in scope["headers"]:
            headers.setdefault(name.decode("latin-1").lower(), value)
        refusal = self.refusal(scope, headers)
        if refusal is not None:
            status, detail, extra = refusal
            await answer(send, status, detail, extra)
            return
        if scope["method"] == "HEAD":
            scope, send = {**scope, "method": "GET"}, without_body(send)
        await self.app(scope, self.limited(receive), send)

    def refusal(self, scope, headers: dict[str, bytes]):
        """(status, one line, extra headers) refusing the request, or None to let it through."""
        if scope["path"] not in PROBE_PATHS:
            refusal = self.stranger(scope, headers)
            if refusal is not None:
                return refusal
        methods = self.methods_at(scope["path"])
        if "GET" in methods:
            methods = methods | {"HEAD"}
        if methods and (scope["method"] == "OPTIONS" or scope["method"] not in methods):
            allow = {"Allow": ", ".join(sorted(methods | {"OPTIONS"}))}
            if scope["method"] == "OPTIONS":
                return 204, None, allow
            return 405, f"{scope['method']} is not a method {scope['path']} takes.", allow
        length = headers.get("content-length", b"").strip()
        if length.isdigit() and int(length) > self.settings.max_body_bytes:
            return 413, self.too_large(), {}
        return None

    def stranger(self, scope, headers: dict[str, bytes]):
        """Checks 1 and 2: a refusal of whoever sent the request, or None."""
        sent = headers.get("host", b"").decode("latin-1")
        host = host_name(sent)
        if host is None or not self.settings.allows_host(host):
            return 400, (f"Host {shown(host if host is not None else sent) if sent else '(none)'}"
                         " is not a name this service answers to: loopback names, and those in "
                         "MEMORYBOOK_ALLOWED_HOSTS."), {}
        if self._token is not None:
            given = headers.get("authorization", b"")
            scheme, _, token = given.partition(b" ")
            if not (scheme.lower() == b"bearer" and hmac.compare_digest(
                    b"Bearer " + token.strip(), self._token)):
                return 401, (f"this service needs the token {TOKEN_ENV} holds, sent as "
                             "`Authorization: Bearer <token>`."), {"WWW-Authenticate": "Bearer"}
        elif not is_loopback((scope.get("server") or ("127.0.0.1", 0))[0]):
            return 403, (f"this service answers beyond this machine only with {TOKEN_ENV} set; "
                         "ask on 127.0.0.1."), {}
        return None

    def too_large(self) -> str:
        return (f"the body is larger than the {self.settings.max_body_bytes:,} bytes this "
                "service reads (MEMORYBOOK_MAX_BODY_BYTES).")

    def limited(self, receive):
        """`receive`, raising HTTPException 413 once the body goes past the limit."""
        read = 0

        async def receive_within_limit():
            nonlocal read
            message = await receive()
            if message["type"] == "http.request":
                read += len(message.get("body", b""))
                if read > self.settings.max_body_bytes:
                    raise HTTPException(413, self.too_large())
            return message

        return receive_within_limit


def without_body(send):
    """`send` for a HEAD request answered as its GET: the same start (status, headers and
    Content-Length), and an empty body."""
    async def send_head(message) -> None:
        if message["type"] == "http.response.body":
            message = {**message, "body": b""}
        await send(message)

    return send_head


async def answer(send, status: int, detail: str | None, extra: dict[str, str]) -> None:
    """Send a whole answer: `{"detail": detail}` as JSON, or no body for None."""
    body = b"" if detail is None else json.dumps({"detail": detail}, separators=(",", ":")).encode()
    headers = [(name.lower().encode(), value.encode()) for name, value in extra.items()]
    if detail is not None:
        headers.append((b"content-type", b"application/json"))
    if status != 204:  # which has neither a body nor a length
        headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
