"""What the loopback System One server reads and answers: request bodies, JSON answers, API
errors and injected failures.

A reply is (status, headers, body bytes). A `Trickled` body is sent one byte at a time.
"""

from __future__ import annotations

import json

try:  # The SDK only compresses when one of these is importable; mirror that here.
    from compression import zstd  # type: ignore[import-not-found]  # Python 3.14+
except ImportError:
    try:
        from backports import zstd  # type: ignore[import-not-found,no-redef]
    except ImportError:
        zstd = None

_ZSTD_ERRORS: tuple[type[Exception], ...] = () if zstd is None else (zstd.ZstdError,)

FAILURES = (
    "unauthorized", "rate_limit", "server_error", "hang", "malformed", "garbage", "bad_request",
    "unprocessable", "trickle",
)
Reply = tuple[int, dict[str, str], bytes]


class Trickled(bytes):
    """A body the server sends one byte at a time, ``trickle_seconds`` apart."""


def read_body(headers: dict[str, str], raw: bytes) -> tuple[object, Reply | None]:
    """A request's JSON body, or None and the reply that says why it cannot be read."""
    if not raw:
        return None, None
    encoding = headers.get("content-encoding", "identity")
    if encoding not in ("identity", "zstd") or (encoding == "zstd" and zstd is None):
        why = "backports.zstd is not installed here" if encoding == "zstd" else "unsupported"
        message = f"loopback cannot read a {encoding!r} body ({why}); pass compression=False"
        return None, error_reply(415, "unsupported_media_type", message)
    try:
        return json.loads(zstd.decompress(raw) if encoding == "zstd" else raw), None
    except (ValueError, *_ZSTD_ERRORS) as error:  # not JSON (or UTF-8), or a corrupt frame
        return None, error_reply(400, "bad_request", f"unreadable body: {error}")


def json_reply(status: int, payload: object) -> Reply:
    return status, {"Content-Type": "application/json"}, json.dumps(payload).encode()


def error_reply(status: int, kind: str, message: str, **extra: str) -> Reply:
    return json_reply(status, {"error": {"type": kind, "message": message, **extra}})


def failure_reply(failure: str, path: str, *, retry_after_ms: int,
                  model_override: str | None) -> Reply:
    """The reply of an injected failure (any of FAILURES but "hang" and "trickle")."""
    if failure == "unauthorized":
        return error_reply(401, "unauthorized", "invalid API key (injected)")
    if failure == "rate_limit":
        reply = error_reply(429, "rate_limit", "rate limited (injected)")
        return reply[0], {**reply[1], "retry-after-ms": str(retry_after_ms)}, reply[2]
    if failure == "server_error":
        return error_reply(500, "internal", "server error (injected)")
    if failure == "bad_request":
        return error_reply(400, "bad_request", "the request was refused (injected)")
    if failure == "unprocessable":
        detail = {"loc": ["body", "questions"], "msg": "refused (injected)", "type": "value"}
        return json_reply(422, {"detail": [detail]})
    if failure == "garbage":
        return 200, {"Content-Type": "text/html"}, b"<html>not JSON (injected)</html>"
    if path == "/v1/models":  # "malformed": valid JSON, invalid shape
        return json_reply(200, {"models": [{"name": "jev-broken"}]})
    broken = {"type": "choice", "choice": "yes", "confidence": 0.5}  # no "probabilities"
    model = model_override or "jev-broken"
    return json_reply(200, {"model": model, "usage": {}, "answers": {"broken": broken}})


def with_headers_echoed(reply: Reply, headers: dict[str, str]) -> Reply:
    """The error reply with the request's headers in its message, its details and its body."""
    status, reply_headers, body = reply
    try:
        payload = json.loads(body)
    except ValueError:
        payload = {"body": body.decode(errors="replace")}
    echo = f" (request headers: {headers})"
    if isinstance(payload.get("error"), dict):
        payload["error"]["message"] = str(payload["error"].get("message", "")) + echo
    for detail in payload.get("detail") or []:
        if isinstance(detail, dict):
            detail["msg"] = str(detail.get("msg", "")) + echo
            detail["input"] = headers
    payload["request_headers"] = headers
    return status, reply_headers, json.dumps(payload).encode()


MADE_UP_MODEL = "made-up-stand-in"  # on every made-up answer, so none passes for Jev's


def made_up_answer(body: dict) -> dict:
    """A made-up answer to a System One request, a function of the request alone, never Jev's:
    the team follows from the ticket's number and how many memories the request carries (so a
    memory missed or reordered changes it), and the gate keeps two tickets in three."""
    state, questions = body["state"], body["questions"]
    usage = {"input_tokens": 0, "output_tokens": 0}
    if "remember" in questions:
        number = int(state["request"]["ticket"]["id"].split("-")[1])
        noul = 0.9 if number % 3 else 0.1  # two tickets in three are kept
        return {"model": MADE_UP_MODEL, "usage": usage,
                "answers": {"remember": {"type": "noul", "noul": noul}}}
    number = int(state["ticket"]["id"].split("-")[1])
    teams = list(questions["team"]["criteria"])
    remembered = len(state.get("earlier_tickets_from_this_customer", []))
    team = teams[(number + remembered) % len(teams)]
    probabilities = {name: 1.0 if name == team else 0.0 for name in teams}
    return {"model": MADE_UP_MODEL, "usage": usage,
            "answers": {"team": {"type": "choice", "choice": team, "confidence": 1.0,
                                 "probabilities": probabilities}}}
