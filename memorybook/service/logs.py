"""The service's log lines: where they go, in which format, and which request each belongs to.

Under uvicorn's own logging set-up (no --log-config of the app's), the `memorybook` logger's lines
go where uvicorn's go, from INFO up (DEBUG too with `--log-level debug`). With
MEMORYBOOK_LOG_FORMAT=json, every line the process writes (uvicorn's start, access and errors, the
library's, any other library's warnings) is one JSON object:

    {"time": "2026-10-02T09:00:00.123Z", "level": "INFO", "logger": "uvicorn.access",
     "event": "127.0.0.1:50312 - \\"GET /health HTTP/1.1\\" 200", "request_id": "3f9a...",
     "method": "GET", "path": "/health", "status": 200}

`exception` holds a traceback, in the same line; a start that a setting or the recording refuses
is one line too, in either format (refused_in_one_line()). Only these fields are written: not a
record's other attributes, which a library may fill with what it was sending. Each request has
an id: its `X-Request-ID` when that is 1 to 128 of `A-Za-z0-9._:@=+-`, else one made here; the
answer's `X-Request-ID` says it, and every line logged for the request carries it, those of its
gate after the reply included (the gate's task copies the request's context). A line holds ids,
never a ticket's words or a key, as in text.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import sys
import uuid
from collections.abc import Iterator
from contextvars import ContextVar
from datetime import UTC, datetime

from memorybook.errors import MemorybookError
from memorybook.settings import VARIABLE_OF, ConfigError, Settings

REQUEST_ID_HEADER = "X-Request-ID"
_SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:@=+-]{1,128}")
_request_id: ContextVar[str | None] = ContextVar("memorybook_request_id", default=None)


class RequestIds:
    """ASGI middleware, outside every other: each request's id (the client's `X-Request-ID` if
    sane, else a new one), set for what runs for it and sent back in `X-Request-ID`.

    The id is left set when the request ends: uvicorn runs each request in a task of its own,
    and logs a failed one's traceback after the app has returned, which the id should name."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = next((value for name, value in scope["headers"]
                      if name.lower() == b"x-request-id"), b"").decode("latin-1")
        request_id = given if _SANE_REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        _request_id.set(request_id)
        header = (REQUEST_ID_HEADER.lower().encode(), request_id.encode())

        async def send_with_id(message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), header]}
            await send(message)

        await self.app(scope, receive, send_with_id)


class JsonLines(logging.Formatter):
    """A record as one line of JSON: time (UTC), level, logger, event (the message), request_id
    when it belongs to a request, an access line's method, path and status, and a traceback as
    `exception`. ASCII only: no character a reader could take for a line break."""

    def format(self, record: logging.LogRecord) -> str:
        line = {"time": datetime.fromtimestamp(record.created, UTC).isoformat(
                    timespec="milliseconds").replace("+00:00", "Z"),
                "level": record.levelname, "logger": record.name, "event": record.getMessage()}
        request_id = _request_id.get()
        if request_id is not None:
            line["request_id"] = request_id
        if record.name == "uvicorn.access" and isinstance(record.args, tuple) and len(
                record.args) == 5:  # uvicorn's: client, method, path, HTTP version, status
            line.update(method=record.args[1], path=record.args[2], status=record.args[4])
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=str)


def under_uvicorns_logging() -> list[logging.Handler]:
    """uvicorn's own handlers (its default LOGGING_CONFIG, no --log-config; their format made
    JSON or not), or [] outside it."""
    return [handler for name in ("uvicorn", "uvicorn.access")
            for handler in logging.getLogger(name).handlers
            if type(handler.formatter).__module__ == "uvicorn.logging"
            or isinstance(handler.formatter, JsonLines)]


@contextlib.contextmanager
def refused_in_one_line() -> Iterator[None]:
    """Around making the app: under uvicorn's own logging set-up, a MemorybookError (a setting,
    the recording) is logged in one line, as uvicorn logs an app it cannot load, and the process
    exits with 1, where uvicorn would print a traceback. Elsewhere (a test, an app's own
    create_app() call) it is raised."""
    try:
        yield
    except MemorybookError as error:
        if not under_uvicorns_logging():
            raise
        log_as_settings_say(format_alone())  # if the settings were refused
        logging.getLogger("uvicorn.error").error("the service cannot start: %s",
                                                 " ".join(str(error).split()))
        raise SystemExit(1) from None


def format_alone() -> Settings:
    """The environment's MEMORYBOOK_LOG_FORMAT alone, as Settings (text if it is refused): for
    saying that the other settings were refused in the format asked for."""
    try:
        return Settings.from_environment(**{
            name: getattr(Settings(), name) for name in VARIABLE_OF if name != "log_format"})
    except ConfigError:
        return Settings()


def as_line(event: str, level: int, settings: Settings) -> str:
    """`event` as a line of the `memorybook` logger in the settings' format, for what is printed
    before logging is set up (make serve's check): in JSON, one object; in text, as it is."""
    if settings.log_format != "json":
        return event
    return JsonLines().format(logging.LogRecord("memorybook", level, __file__, 0, event, None,
                                                None))


def log_as_settings_say(settings: Settings) -> None:
    """With `log_format` json, under uvicorn's own logging set-up: every line in JSON from now
    on (create_app() calls this before uvicorn logs its start). Logging an app has set up
    itself, or none, is left as it is."""
    handlers = under_uvicorns_logging()
    if settings.log_format != "json" or not handlers:
        return
    for handler in handlers:
        handler.setFormatter(JsonLines())
    root = logging.getLogger()
    if not root.handlers:  # else Python's last resort writes other libraries' warnings bare
        everyone = logging.StreamHandler(sys.stderr)
        everyone.setFormatter(JsonLines())
        root.addHandler(everyone)
    logging.captureWarnings(True)  # Python's warnings, as lines of the `py.warnings` logger
    follow_uvicorns_level(logging.getLogger("memorybook"))


def log_where_uvicorn_logs() -> None:
    """Under uvicorn's own logging set-up (no --log-config of the app's), the service's lines go
    where uvicorn's go, in its format, from INFO up (or its `--log-level`, if lower): without
    this they reach stderr bare, and INFO not at all. Logging an app has set up, or none (a
    notebook), is left as it is."""
    ours, uvicorns = logging.getLogger("memorybook"), logging.getLogger("uvicorn")
    if ours.hasHandlers() or not uvicorns.handlers:
        return
    for handler in uvicorns.handlers:
        ours.addHandler(handler)
    follow_uvicorns_level(ours)


def follow_uvicorns_level(logger: logging.Logger) -> None:
    """`logger` from INFO up, or from uvicorn's `--log-level` if lower (debug), unless it has a
    level of its own."""
    if logger.level == logging.NOTSET:
        logger.setLevel(min(logging.INFO, logging.getLogger("uvicorn.error").getEffectiveLevel()))
