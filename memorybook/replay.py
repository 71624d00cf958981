"""The client every notebook uses: the real SDK client, live with a key, replay-only without one."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx2
from typesafe_sdk import TypeSafeClient

from memorybook.config import (
    API_KEY_ENV,
    ENDPOINT_ENV,
    recording_path,
    replay_only_reason,
    shown_path,
    timeout_seconds,
)
from memorybook.live import explain_api_failures_in_notebooks
from memorybook.recording import RecordingError

RECORD_HINT = "set TYPESAFE_API_KEY and run `make record` (README, 'Recording new answers')"


class RecordingMissError(RecordingError):
    """A call that is not in the recording, made while only replaying is allowed."""



def describe_call(body: dict) -> str:
    """A reader's description of one System One request: which ticket, which questions."""
    state = body.get("state")
    state = state if isinstance(state, dict) else {}
    ticket = state.get("ticket") or state.get("request", {}).get("ticket") or {}
    customer = state.get("customer") or state.get("request", {}).get("customer") or {}
    questions = ", ".join(body.get("questions") or {}) or "none"
    extra = [key for key in state if key not in ("customer", "ticket")]
    with_keys = f", state also holds {', '.join(extra)}" if extra else ""
    return (
        f"ticket {ticket.get('id', '?')} ({ticket.get('subject', 'no subject')!r}) of customer "
        f"{customer.get('id', '?')}, questions: {questions}{with_keys}, model {body.get('model')}"
    )


class ReplayOnlyTransport(httpx2.BaseTransport):
    """An HTTP transport with no network behind it: every request it is handed is a recording miss.

    The SDK hands it a request only when the cache had no entry, so reaching it means the
    notebook asked Jev something the recording does not hold. The error is not an HTTP error, so
    the SDK's retry policy does not retry it: the cell fails at once.
    """

    def __init__(self, reason: str, recording: Path) -> None:
        self.reason = reason
        self.recording = recording

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            call = describe_call(json.loads(request.read()))
        except (ValueError, UnicodeDecodeError):
            call = f"{request.method} {request.url.path} (body not readable)"
        raise RecordingMissError(
            f"Not in the recording {shown_path(self.recording)}: {call}.\n"
            f"Only replay is allowed here ({self.reason}), so nothing was sent.\n"
            f"To record this call, {RECORD_HINT}."
        )


def make_client() -> TypeSafeClient:
    """The real SDK client: live with a key; otherwise every request it would send is a miss."""
    reason = replay_only_reason()
    if reason is None:
        explain_api_failures_in_notebooks()
        return TypeSafeClient(
            api_key=os.environ[API_KEY_ENV],
            base_url=os.environ.get(ENDPOINT_ENV) or None,
            timeout=timeout_seconds(),
        )
    return TypeSafeClient(
        api_key="cache-only",
        transport=ReplayOnlyTransport(reason, recording_path()),
        compression=False,
    )

