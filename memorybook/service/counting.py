"""The service's requests, counted by route and status in its memory's metrics (GET /metrics):
`memorybook_http_requests_total{method, route, status}`.

`route` is the template of the route the path matches (`/customers/{customer}/memories`), never
the path itself, which holds a customer id; `unmatched` for a path no route takes. `method` is
one of HTTP's (`other` for anything else a client sends). The counting wraps the guard, so
that its refusals (400, 401, 403, 405, 413) are counted too.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter

HTTP_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT")
UNMATCHED = "unmatched"


def requests_counter(registry: CollectorRegistry | None) -> Counter:
    return Counter("memorybook_http_requests", "Requests to the service, by method, route "
                   "(its template, never a path) and status.", ("method", "route", "status"),
                   registry=registry)


def route_template(routes: list, path: str) -> str:
    """The path template of the first of `routes` (memorybook/service/app.py routes_of()) whose
    pattern matches `path`, with any method."""
    for route in routes:
        if route.path_regex.match(path):
            return route.path_format
    return UNMATCHED


class RequestsCounted:
    """ASGI middleware: each HTTP request counted in `counter` once its answer has started (as
    a 500 if the app raised before one did; not at all if the client left first), under the
    route `template_of(path)` gives."""

    def __init__(self, app, *, counter: Counter, template_of: Callable[[str], str]) -> None:
        self.app = app
        self.counter = counter
        self.template_of = template_of

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status: list[int] = []

        async def send_noting_status(message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_noting_status)
        except Exception:
            status.append(500)  # what the server answers for it, unless an answer had started
            raise
        finally:
            if status:
                method = scope["method"] if scope["method"] in HTTP_METHODS else "other"
                self.counter.labels(method, self.template_of(scope["path"]), str(status[0])).inc()
